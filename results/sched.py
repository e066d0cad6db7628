"""Scheduling metrics from a schedule trace (sched.parquet: results/schema.py
``SCHED``; docs/tracing.md), per task and per cgroup, as ``perf sched
latency`` and ``perf sched timehist`` define them:

- **wake-up latency**: from a ``sched_wakeup`` / ``sched_wakeup_new`` of a
  sleeping (or new) task to its next switch-in -- perf's "sch delay" after
  a wake-up.  As in perf's state machine, only the first wake-up after the
  task went to sleep (switched out in S or X, or never yet seen) counts; a
  wake-up of a task that is running or was preempted (switched out in R)
  is not one, so preemption waits are not in these samples.
- **run length**: from a switch-in of the task to its next switch-out
  ("run time"); **runtime** is their sum.  A run cut by the trace's window
  (switched in before it starts or out after it ends) is not counted.
- **switches**: every switch-out of the task, voluntary when it left the
  CPU sleeping or exiting (prev_state S or X), involuntary when preempted
  (R); ``involuntary_frac`` is the involuntary share.
- **migrations**: its ``sched_migrate_task`` events; **at wake-up** those
  whose next event of the task is a wake-up (try_to_wake_up() places a
  sleeping task with set_task_cpu() before it traces the wake-up; a
  sleeping task moves no other way), the others moved it while runnable
  (the balancers pulling a queued task, a stopper moving a running one);
  **wake-ups** its ``sched_wakeup`` and ``sched_wakeup_new`` events.

A **named thread** (:meth:`SchedAnalysis.thread`, ``trace.thread``): the
tasks whose comm (the last seen) is the name, pooled, with their wake-up
latencies and migrations inside a time window (the summary's: warmup to the
end), as the affinity thesis (Affinity Aware CPU Scheduling for Container
Hosts, §3 "Analysis", §6.1.3) measures its server's main thread: migrations
of that thread, not of every thread, and its SCHED_WAKEUP -> SCHED_SWITCH
times.  A latency sample is in the window when its wake-up is.

The idle task (pid 0) is not a task here.  A task's cgroup and comm are the
last it was seen with; a cgroup's row pools the samples of its tasks, so its
percentiles are over all of them, not an average of the tasks'.

Everything is computed with numpy over whole columns (one sort of the
task events), no per-event Python: a million events take 3 to 4 s on a
2-core VM (docs/tracing.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from results.readers import ResultsError
from results.schema import SCHED_FILE, SCHED_METRICS, SchemaError, check_table

NS = 1e9
# kinds of the per-task event stream
_OUT, _IN, _WAKE, _MIGRATE = 0, 1, 2, 3
BY = ("cgroup", "task")


class SchedTraceError(ResultsError):
    """A run directory without a readable sched.parquet; the message is one
    line naming the file."""


def read_sched(run_dir: str | Path) -> pa.Table:
    """The run's sched.parquet, checked against ``SCHED``."""
    run_dir = Path(run_dir)
    path = run_dir / SCHED_FILE
    if not run_dir.is_dir():
        raise SchedTraceError(f"{run_dir} is not a run directory")
    if not path.is_file():
        raise SchedTraceError(f"{path} does not exist: the run recorded no schedule "
                              "(run with trace=sched)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise SchedTraceError(f"{path} cannot be read: {_first_line(err)}") from None
    try:
        check_table("sched", table)
    except SchemaError as err:
        raise SchedTraceError(f"{path}: {err}") from None
    return table


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _np(column: pa.ChunkedArray, fill) -> np.ndarray:
    return column.fill_null(fill).to_numpy()


@dataclass(frozen=True)
class _Stream:
    """Every task's events in (task, trace order) order: one row per
    switch-out, switch-in, wake-up and migration of a task."""

    task: np.ndarray        # index into pids
    kind: np.ndarray        # _OUT, _IN, _WAKE, _MIGRATE
    time_ns: np.ndarray
    involuntary: np.ndarray  # switch-outs in state R
    pids: np.ndarray        # task index -> pid
    task_cgroup: pa.Array   # task index -> cgroup (last seen)
    task_comm: pa.Array     # task index -> comm (last seen)


def _stream(sched: pa.Table) -> _Stream:
    event = sched.column("event")
    switch = pc.equal(event, "sched_switch")
    wake = pc.is_in(event, pa.array(["sched_wakeup", "sched_wakeup_new"]))
    migrate = pc.equal(event, "sched_migrate_task")
    prev_pid, next_pid = _np(sched.column("prev_pid"), 0), _np(sched.column("next_pid"), 0)
    is_switch = _np(switch, False)
    # a sched_switch row is a switch-out of prev and a switch-in of next
    sides = [
        (is_switch & (prev_pid != 0), _OUT, "prev"),
        (is_switch & (next_pid != 0), _IN, "next"),
        (_np(wake, False) & (next_pid != 0), _WAKE, "next"),
        (_np(migrate, False) & (next_pid != 0), _MIGRATE, "next"),
    ]
    rows, kinds, pid, cgroup, comm = [], [], [], [], []
    for mask, kind, side in sides:
        idx = np.flatnonzero(mask)
        rows.append(idx)
        kinds.append(np.full(idx.size, kind, np.int8))
        pid.append((prev_pid if side == "prev" else next_pid)[idx])
        cgroup.append(sched.column(f"{side}_cgroup").take(idx))
        comm.append(sched.column(f"{side}_comm").take(idx))
    row = np.concatenate(rows)
    kind = np.concatenate(kinds)
    pids, task = np.unique(np.concatenate(pid), return_inverse=True)
    # trace order within a task; at one row a switch-out comes before a
    # switch-in (they are of different tasks anyway)
    order = np.lexsort((kind, row, task))
    task, kind, row = task[order], kind[order], row[order]
    state = _np(sched.column("prev_state"), "")[row]
    last = np.flatnonzero(np.r_[task[1:] != task[:-1], True][:task.size])  # each task's last row
    # concatenated as typed arrays: a side without events (no task ever left
    # a CPU) gives an empty one, which must not make the column untyped
    cgroups = pa.concat_arrays([c.combine_chunks() for c in cgroup]).take(order)
    comms = pa.concat_arrays([c.combine_chunks() for c in comm]).take(order)
    return _Stream(task=task, kind=kind, time_ns=_np(sched.column("time_ns"), 0)[row],
                   involuntary=(kind == _OUT) & (state == "R"), pids=pids,
                   task_cgroup=cgroups.take(last), task_comm=comms.take(last))


def _next_is(s: _Stream, kind: int) -> np.ndarray:
    """Per stream row: the same task's next event is of ``kind``."""
    nxt = np.zeros(s.task.size, bool)
    nxt[:-1] = (s.task[1:] == s.task[:-1]) & (s.kind[1:] == kind)
    return nxt


def _firsts(keys: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First position per key (positions ascending)."""
    uniq, first = np.unique(keys, return_index=True)
    return uniq, positions[first]


class SchedAnalysis:
    """A sched table's samples and metrics (:func:`analyse`)."""

    def __init__(self, sched: pa.Table):
        s = self._s = _stream(sched)
        n = s.task.size
        pos = np.arange(n)
        new_task = np.r_[True, s.task[1:] != s.task[:-1]] if n else np.zeros(0, bool)
        # An episode runs from a switch-out of the task (or its first event)
        # to its next switch-out; a wake-up latency is the episode's first
        # wake-up to its first switch-in after it, in an episode that began
        # with the task asleep.
        starts = new_task | (s.kind == _OUT)
        episode = np.cumsum(starts) - 1
        asleep = (~s.involuntary)[starts]      # per episode: began asleep, exited or new
        w_ep, w_pos = _firsts(episode[s.kind == _WAKE], pos[s.kind == _WAKE])
        i_ep, i_pos = _firsts(episode[s.kind == _IN], pos[s.kind == _IN])
        both, wi, ii = np.intersect1d(w_ep, i_ep, assume_unique=True, return_indices=True)
        keep = (w_pos[wi] < i_pos[ii]) & asleep[both]
        w, i = w_pos[wi][keep], i_pos[ii][keep]
        self._lat_task = s.task[i]
        self._lat_wake_ns = s.time_ns[w]
        self._lat_s = (s.time_ns[i] - s.time_ns[w]) / NS
        migrate = s.kind == _MIGRATE
        self._mig_task, self._mig_ns = s.task[migrate], s.time_ns[migrate]
        # runs: a switch-in followed by the same task's switch-out
        sw = np.flatnonzero((s.kind == _IN) | (s.kind == _OUT))
        pair = ((s.kind[sw[:-1]] == _IN) & (s.kind[sw[1:]] == _OUT)
                & (s.task[sw[:-1]] == s.task[sw[1:]]))
        begin, end = sw[:-1][pair], sw[1:][pair]
        self._run_task = s.task[begin]
        self._run_s = (s.time_ns[end] - s.time_ns[begin]) / NS
        nt = s.pids.size
        self._counts = {
            "n_wakeups": np.bincount(s.task[s.kind == _WAKE], minlength=nt),
            "switches_voluntary": np.bincount(s.task[(s.kind == _OUT) & ~s.involuntary],
                                              minlength=nt),
            "switches_involuntary": np.bincount(s.task[s.involuntary], minlength=nt),
            "migrations": np.bincount(s.task[migrate], minlength=nt),
            "migrations_wakeup": np.bincount(s.task[migrate & _next_is(s, _WAKE)],
                                             minlength=nt),
        }

    @cached_property
    def _cgroups(self) -> tuple[pa.Array, np.ndarray]:
        """The cgroups (null included) and each task's index into them."""
        encoded = pc.dictionary_encode(self._s.task_cgroup, null_encoding="encode")
        names = encoded.dictionary
        order = np.argsort(np.array(names.to_pylist(), dtype=object).astype(str), kind="stable")
        rank = np.empty(order.size, np.int64)
        rank[order] = np.arange(order.size)
        return names.take(order), rank[encoded.indices.to_numpy()]

    def _keys(self, by: str) -> tuple[list, np.ndarray]:
        if by not in BY:
            raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")
        if by == "task":
            return self._s.pids.tolist(), np.arange(self._s.pids.size)
        names, of_task = self._cgroups
        return names.to_pylist(), of_task

    def _split(self, task: np.ndarray, values: np.ndarray, by: str) -> dict:
        keys, of_task = self._keys(by)
        group = of_task[task]
        order = np.argsort(group, kind="stable")
        cuts = np.cumsum(np.bincount(group, minlength=len(keys)))[:-1]
        return dict(zip(keys, np.split(values[order], cuts)))

    def wakeup_latencies(self, by: str = "cgroup") -> dict:
        """Wake-up latency samples in seconds, in trace order, per cgroup
        (``by="cgroup"``: cgroup name -> array) or per task (pid -> array)."""
        return self._split(self._lat_task, self._lat_s, by)

    def run_lengths(self, by: str = "cgroup") -> dict:
        """Run-length samples in seconds, per cgroup or per task."""
        return self._split(self._run_task, self._run_s, by)

    def thread(self, comm: str, lo_ns: int = 0, hi_ns: int | None = None) -> "ThreadSamples":
        """The named thread's samples: every task whose comm is ``comm``,
        pooled; wake-up latencies whose wake-up, and migrations, lie in
        [lo_ns, hi_ns] (None: to the trace's end)."""
        tasks = np.flatnonzero(pc.equal(self._s.task_comm, comm).fill_null(False)
                               .to_numpy(zero_copy_only=False))
        hi = np.iinfo(np.int64).max if hi_ns is None else hi_ns
        lat = np.isin(self._lat_task, tasks) & (self._lat_wake_ns >= lo_ns) \
            & (self._lat_wake_ns <= hi)
        mig = np.isin(self._mig_task, tasks) & (self._mig_ns >= lo_ns) & (self._mig_ns <= hi)
        return ThreadSamples(comm, int(tasks.size), self._lat_s[lat], int(mig.sum()))

    def metrics(self) -> pa.Table:
        """The ``SCHED_METRICS`` table: one row per cgroup, then one per task."""
        names, of_task = self._cgroups
        nt, ng = self._s.pids.size, len(names)
        levels = {"cgroup": (ng, of_task), "task": (nt, np.arange(nt))}
        parts = []
        for level, (n, group_of_task) in levels.items():
            cols = {name: np.bincount(group_of_task, weights=c, minlength=n).astype(np.int64)
                    for name, c in self._counts.items()}
            lat = _group_stats(group_of_task[self._lat_task], self._lat_s, n,
                               (0.5, 0.95, 0.99))
            run = _group_stats(group_of_task[self._run_task], self._run_s, n, (0.5, 0.99))
            switches = cols["switches_voluntary"] + cols["switches_involuntary"]
            with np.errstate(invalid="ignore", divide="ignore"):
                frac = cols["switches_involuntary"] / switches
            parts.append({
                "level": [level] * n,
                "pid": [None] * n if level == "cgroup" else self._s.pids,
                "comm": [None] * n if level == "cgroup" else self._s.task_comm,
                "cgroup": names if level == "cgroup" else names.take(of_task),
                "runtime_s": run["sum"], "n_runs": run["count"],
                "n_wakeups": cols["n_wakeups"],
                "wakeup_latency_mean_s": lat["mean"], "wakeup_latency_p50_s": lat[0.5],
                "wakeup_latency_p95_s": lat[0.95], "wakeup_latency_p99_s": lat[0.99],
                "wakeup_latency_max_s": lat["max"],
                "run_length_mean_s": run["mean"], "run_length_p50_s": run[0.5],
                "run_length_p99_s": run[0.99],
                "switches_voluntary": cols["switches_voluntary"],
                "switches_involuntary": cols["switches_involuntary"],
                "involuntary_frac": frac, "migrations": cols["migrations"],
                "migrations_wakeup": cols["migrations_wakeup"],
            })
        return pa.concat_tables([pa.table({f.name: _array(p[f.name], f.type)
                                           for f in SCHED_METRICS}, schema=SCHED_METRICS)
                                 for p in parts])


@dataclass(frozen=True)
class ThreadSamples:
    """A named thread's wake-up latencies (seconds, trace order) and
    migration count in a window (:meth:`SchedAnalysis.thread`)."""
    comm: str
    tasks: int                  # tasks with that comm (0: none in the trace)
    wakeup_latency_s: np.ndarray
    migrations: int

    def summary(self) -> dict:
        """The summary's ``thread_*`` columns (results/schema.py
        ``THREAD_SUMMARY``): NaN statistics without a sample."""
        lat = _group_stats(np.zeros(self.wakeup_latency_s.size, np.int64),
                           self.wakeup_latency_s, 1, (0.5, 0.95, 0.99))
        return {"thread_comm": self.comm, "thread_tasks": self.tasks,
                "thread_migrations": self.migrations,
                "thread_wakeups": int(self.wakeup_latency_s.size),
                "thread_wakeup_latency_mean_s": float(lat["mean"][0]),
                "thread_wakeup_latency_p50_s": float(lat[0.5][0]),
                "thread_wakeup_latency_p95_s": float(lat[0.95][0]),
                "thread_wakeup_latency_p99_s": float(lat[0.99][0]),
                "thread_wakeup_latency_max_s": float(lat["max"][0])}

    def histogram(self) -> list[tuple[str, int]]:
        """(bin, samples) by decade from 1 us to 1 s, the scales the
        thesis's wake-up -> switch tables (§4) fall into."""
        edges = [0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, np.inf]
        labels = ["< 1 us", "1-10 us", "10-100 us", "0.1-1 ms", "1-10 ms", "10-100 ms",
                  "0.1-1 s", ">= 1 s"]
        counts, _ = np.histogram(self.wakeup_latency_s, bins=edges)
        return list(zip(labels, counts.tolist()))


def _array(values, type_: pa.DataType) -> pa.Array:
    return values.cast(type_) if isinstance(values, pa.Array) else pa.array(values, type_)


def _group_stats(group: np.ndarray, values: np.ndarray, n: int, qs) -> dict:
    """Per group 0..n-1: count, sum, mean, max and the quantiles ``qs`` of
    ``values`` (numpy's default linear interpolation, as np.percentile);
    NaN for a group without samples."""
    order = np.lexsort((values, group))
    v = values[order]
    count = np.bincount(group, minlength=n)
    total = np.bincount(group, weights=values, minlength=n)
    has = count > 0
    first = np.cumsum(count) - count
    out = {"count": count, "sum": total}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean"] = np.where(has, total / count, np.nan)
    last = np.where(has, first + count - 1, 0)
    out["max"] = np.where(has, v[last] if v.size else np.nan, np.nan)
    for q in qs:
        at = first + q * np.maximum(count - 1, 0)
        lo = np.floor(at).astype(np.int64)
        hi = np.minimum(lo + 1, first + np.maximum(count - 1, 0))
        if v.size:
            lo_v, hi_v = v[np.where(has, lo, 0)], v[np.where(has, hi, 0)]
            out[q] = np.where(has, lo_v + (hi_v - lo_v) * (at - lo), np.nan)
        else:
            out[q] = np.full(n, np.nan)
    return out


def analyse(sched: pa.Table) -> SchedAnalysis:
    return SchedAnalysis(sched)


def sched_metrics(sched: pa.Table) -> pa.Table:
    """sched_metrics.parquet's table (``SCHED_METRICS``) of a sched table."""
    return analyse(sched).metrics()


# (column, header, scale) of `colosim trace`'s table: times in ms, shares in %
_SHOWN = (("runtime_s", "runtime s", 1), ("n_runs", "runs", 1), ("n_wakeups", "wake-ups", 1),
          ("wakeup_latency_mean_s", "wake mean", 1e3), ("wakeup_latency_p50_s", "wake p50", 1e3),
          ("wakeup_latency_p99_s", "wake p99", 1e3), ("wakeup_latency_max_s", "wake max", 1e3),
          ("run_length_mean_s", "run mean", 1e3), ("run_length_p99_s", "run p99", 1e3),
          ("switches_voluntary", "vol", 1), ("switches_involuntary", "invol", 1),
          ("involuntary_frac", "invol %", 1e2), ("migrations", "migr", 1),
          ("migrations_wakeup", "at wake", 1))


def format_metrics(metrics: pa.Table, level: str = "cgroup") -> str:
    """The ``level`` rows of a metrics table as a text table (`colosim trace`)."""
    rows = metrics.filter(pc.equal(metrics.column("level"), level)).to_pylist()
    label = "cgroup" if level == "cgroup" else "pid  comm  cgroup"
    head = [label] + [h for _, h, _ in _SHOWN]
    body = []
    for r in rows:
        name = str(r["cgroup"]) if level == "cgroup" else f"{r['pid']}  {r['comm']}  {r['cgroup']}"
        body.append([name] + [_cell(r[c], k) for c, _, k in _SHOWN])
    table = [head, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                       for i, (v, w) in enumerate(zip(r, widths))) for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def _cell(value, scale) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value * scale:.3g}" if scale != 1 else f"{value:.4g}"


def format_thread(t: ThreadSamples, window: str) -> str:
    """A named thread's wake-up latency distribution and migrations as text
    (`colosim trace --thread`); ``window`` says which part of the run."""
    m = t.summary()
    head = (f"thread {t.comm!r}: {t.tasks} task{'s' if t.tasks != 1 else ''}, {window}: "
            f"{m['thread_wakeups']:,} wake-ups, {t.migrations:,} migrations")
    if not t.tasks:
        return head + " (no task of that name in the trace)\n"
    stats = "  ".join(f"{k} {_cell(m[f'thread_wakeup_latency_{k}_s'], 1e3)}"
                      for k in ("mean", "p50", "p95", "p99", "max"))
    bins = [(label, f"{n:,}") for label, n in t.histogram()]
    width = max(len(n) for _, n in bins)
    rows = "\n".join(f"  {label:<10} {n:>{width}}" for label, n in bins)
    return f"{head}\nwake-up latency ms: {stats}\nwake-ups by latency:\n{rows}\n"


THROTTLE, UNTHROTTLE = "throttle_cfs_rq", "unthrottle_cfs_rq"


def throttled_periods(sched: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Each cfs_rq's throttled time within [lo, hi) ns: throttle_cfs_rq to
    the next unthrottle_cfs_rq of the same CPU and group (from the trace's
    start when it was throttled before it; to its end when still throttled).
    Columns cpu, cgroup, start_ns, end_ns."""
    ev = sched[sched["event"].isin((THROTTLE, UNTHROTTLE))].sort_values("time_ns", kind="stable")
    first, last = (int(sched["time_ns"].min()), int(sched["time_ns"].max())) if len(sched) \
        else (0, 0)
    periods = []
    for (cpu, cgroup), group in ev.groupby(["cpu", "next_cgroup"], sort=True):
        since, seen = None, False
        for t, event in zip(group["time_ns"].tolist(), group["event"].tolist()):
            if event == THROTTLE:
                if since is None:
                    since = t
            elif since is not None or not seen:
                # an unthrottle closes the open period, or (as the group's
                # first event) one that began before the trace did
                periods.append((cpu, cgroup, first if since is None else since, t))
                since = None
            seen = True
        if since is not None:
            periods.append((cpu, cgroup, since, last))
    frame = pd.DataFrame(periods, columns=["cpu", "cgroup", "start_ns", "end_ns"])
    frame = frame[(frame["start_ns"] < hi) & (frame["end_ns"] > lo)]
    return frame.assign(start_ns=frame["start_ns"].clip(lower=lo),
                        end_ns=frame["end_ns"].clip(upper=hi)).reset_index(drop=True)
