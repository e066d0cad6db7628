"""What ``run_real`` (backends/real/run.py) asks of a workload: a
:class:`Runner`, one per real-backend capability the workload declares.

``run_real`` owns the flow every run shares (the host and controller
checks, the run's cgroup tree, perf, the interval sampler, the controller's
start/step, the warm-up snapshot, teardown on every exit path, the summary);
a runner owns what differs between capabilities:

=========================  ==================================================
step                       hook
=========================  ==================================================
refuse before creating     ``__init__`` (raises :class:`RealRunError`): the
anything                   rows to replay (``trace``), the cgroups
                           (``parent``, ``names``)
cgroups and workers        :meth:`Runner.start` (workers appended to
                           ``workers`` as they start, so teardown reaches
                           every one), :meth:`Runner.rt_policies`
perf                       :meth:`Runner.perf_events` or
                           :meth:`Runner.start_perf`;
                           :meth:`Runner.count_tasks` for tasks
                           placed later
load                       :meth:`Runner.t0` (when it starts),
                           :meth:`Runner.go` at t0, :meth:`Runner.drive`,
                           :meth:`Runner.finish` before anything stops
trace=sched                :meth:`Runner.members`
tables                     :meth:`Runner.requests`,
                           :meth:`Runner.summary_columns`, ``alone``,
                           :meth:`Runner.result_trace`, :meth:`Runner.tables`
=========================  ==================================================

The defaults replay ``trace`` open loop (backends/real/loadgen.replay) and
record one request row per trace row; :class:`BurstRunner` is the base of
workers that run on their own from t0 and report bursts (periodic threads,
memlookup's containers).
"""
from __future__ import annotations

import math
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from backends.real.cgroupfs import CgroupError, CgroupFS
from backends.real.config import RealBackend
from backends.real.loadgen import ReplayResult, Timer, Worker, replay
from backends.real.perf import DEFAULT_EVENTS, PerfStat, PerfUnavailable
from backends.real.taskcount import TaskCounters, unavailable
from policies.kernel import config as kernel_config
from sim.engine import NSEC_PER_SEC as NS
from sim.sched_class import SCHED_RR
from sim.workloads.common import cgroup_bandwidth
from sim.workloads.trace import TRACE_SCHEMA

if TYPE_CHECKING:   # host.py imports jobs.py, whose runner imports this module
    from backends.real.host import RealHost


class RealRunError(RuntimeError):
    """The real run could not start, or was rejected; nothing was written."""


class RunWorker(Worker, Protocol):
    """A worker of a run: driven by the load generator, then stopped by
    ``run_real`` (WorkerProc, JobProc, ContainerProc)."""

    def quit(self) -> None:
        """Stop at the end of a measured run."""

    def kill(self) -> None:
        """Stop now and release its pipes; teardown calls it on every exit
        path, also after :meth:`quit`, so it must be idempotent."""


class BurstWorker(RunWorker, Protocol):
    """A worker whose threads run on their own from t0 and report bursts."""

    def go(self, t0_ns: int) -> None:
        """Start the threads at CLOCK_MONOTONIC ``t0_ns``."""


@dataclass
class Setup:
    """What ``run_real`` has made when a runner starts its workers."""
    cg: CgroupFS
    host: RealHost
    cgroups: list[str]        # the function cgroups, in ``names`` order
    cpus: set[int]            # the run's CPUs (backend.cpus)
    binary: Path              # the native function worker (backends/real/workers.py)
    max_s: float              # workers stop by themselves this long after they start
    seed: int


@dataclass
class Rows:
    """The requests a run replays, sorted by arrival (one entry per row)."""
    arrival_ns: np.ndarray    # scheduled arrival, relative to t0
    demand_ns: np.ndarray
    threads: np.ndarray
    function: np.ndarray      # object array of function names
    worker: np.ndarray        # index into the runner's workers


class Runner(ABC):
    """One real-backend capability (``capability`` in backends/real/run.py)."""

    RUNS: str    # what it runs, as the refusal of other workloads lists it
    # its threads burn their demand spinning on their own CPU clock in the
    # native worker (funcworker.c spin_cpu), walking no memory: a working set
    # the simulator refills after each switch has no counterpart here, and a
    # refill would count as work anyway
    SPINS_ON_CPU_CLOCK = False

    def __init__(self, cfg: dict, b: RealBackend, trace: pa.Table | None = None):
        """``cfg``: the plain scenario config; ``b``: its backend keys;
        ``trace``: the rows the caller hands in (scenarios.runner's
        generated trace), for the runners that replay one."""
        self.cfg, self.b, self.w = cfg, b, cfg["workload"]
        self.trace: pa.Table = TRACE_SCHEMA.empty_table()   # the invocation rows replayed
        self.parent = ""              # the function cgroups' parent ("": the run's top)
        self.names: list[str] = []    # the function cgroups under ``parent``
        self.workers: list[RunWorker] = []
        # per job class, where the workers' speed is measured before the run:
        # the measurements of wall ns per access alone (backends/real/jobs.py
        # calibrate), the job shapes (memworker arguments) and the CPU they
        # were measured on; run_real measures them again after the run
        self.alone_samples: dict[str, list[float]] = {}
        self.alone_shapes: dict[str, list[str]] = {}
        self.alone_cpu = 0
        self.counters: TaskCounters | None = None    # start_perf's, through the binding

    @property
    def alone(self) -> dict[str, float]:
        """Per job class: wall ns per access alone, the fastest measurement
        (summary columns)."""
        return {c: min(v) for c, v in self.alone_samples.items()}

    @property
    def cgroups(self) -> list[str]:
        return [f"/{self.parent}/{f}" if self.parent else f"/{f}" for f in self.names]

    def host_trace(self) -> pa.Table | None:
        """The trace ``Host.function_demand`` reads (None: no request trace)."""
        return self.trace

    # --- cgroups and workers ---------------------------------------------
    @abstractmethod
    def start(self, s: Setup) -> None:
        """Apply the workload's cgroup knobs and start its workers, each
        attached to its cgroup before it gets any work; every worker goes
        into ``self.workers`` as soon as it exists."""

    def rt_policies(self) -> dict[str, tuple[bool, int]]:
        """Per cgroup: (SCHED_RR?, RT priority), from ``scheduler.task_policy``."""
        sched = kernel_config(self.cfg["scheduler"])
        return {c: (sched.task_policy == SCHED_RR, sched.rt_priority) for c in self.cgroups}

    def members(self) -> list[str]:
        """The cgroups whose threads trace=sched records as the run's."""
        return self.cgroups

    # --- perf ---------------------------------------------------------------
    def perf_cgroups(self) -> list[str]:
        """The cgroups counted (each with its descendants, so these must not
        nest)."""
        return self.cgroups

    def perf_events(self) -> tuple[str, ...]:
        """What the run counts on the function cgroups."""
        return DEFAULT_EVENTS

    def start_perf(self, cg: CgroupFS) -> tuple[PerfStat | TaskCounters | None, str]:
        """The run's counting, started (None if none), and its ``perf_status``
        column: ``ok`` through perf's Python binding (its counters on each
        task now in ``perf_cgroups``, and those :meth:`count_tasks` adds
        later), else ``ok (perf stat: <why not the binding>)`` through
        ``perf stat -G``."""
        if not self.b.perf:
            return None, "off"
        events, interval = self.perf_events(), int(self.b.perf_interval_ms)
        why = unavailable(events)
        if why is None:
            counters = TaskCounters(self.perf_cgroups(), events)
            try:
                counters.start({c: cg.threads(c, below=True) for c in self.perf_cgroups()})
                self.counters = counters
                return counters, "ok"
            except (PerfUnavailable, OSError) as e:
                why = str(e)
        print(f"colosim: perf counting: {why}; counting with perf stat -G instead",
              file=sys.stderr)
        try:
            perf = PerfStat({cg.perf_name(c): c for c in self.perf_cgroups()}, events, interval)
            perf.start()
            return perf, f"ok (perf stat: {why})"
        except (PerfUnavailable, CgroupError) as e:
            print(f"colosim: warning: {e}; ctx_switches and migrations will be missing",
                  file=sys.stderr)
            return None, f"unavailable: {e}"

    def count_tasks(self, cgroup: str, tids) -> None:
        """Count ``tids``, placed after counting started, in ``cgroup`` (one of
        ``perf_cgroups``) from now on; perf stat -G needs nothing."""
        if self.counters is not None:
            self.counters.attach(cgroup, tids)

    # --- load ---------------------------------------------------------------
    def rows(self, duration_ns: int) -> Rows:
        """``trace``'s rows sorted by arrival, those before the end."""
        t = self.trace
        arr_s = t.column("arrival_s").to_numpy()
        order = np.argsort(arr_s, kind="stable")
        arrival_ns = np.rint(arr_s[order] * NS).astype(np.int64)
        demand_ns = np.maximum(1, np.rint(t.column("demand_s").to_numpy()[order] * NS)
                               ).astype(np.int64)
        threads = t.column("threads").to_numpy()[order].astype(np.int64)
        fn = np.asarray(t.column("function").to_pylist(), dtype=object)[order]
        keep = arrival_ns < duration_ns
        return Rows(*(a[keep] for a in (arrival_ns, demand_ns, threads, fn,
                                        self.worker_of(fn))))

    def worker_of(self, functions: np.ndarray) -> np.ndarray:
        """The worker serving each row: its function's."""
        index = {f: i for i, f in enumerate(self.names)}
        return np.array([index[f] for f in functions], dtype=np.int64)

    def t0(self, earliest_ns: int) -> int:
        """The run's time zero (CLOCK_MONOTONIC ns), no earlier than
        ``earliest_ns``: perf, the trace and the sampler run by then."""
        return earliest_ns

    def go(self, t0_ns: int, warmup_end_ns: int) -> None:
        """At t0, before the load starts (CLOCK_MONOTONIC ns)."""

    def drive(self, rows: Rows, t0_ns: int, duration_ns: int, timers: list[Timer],
              spin_ns: int, completions: RealHost | None) -> tuple[ReplayResult, Rows]:
        """Run the load until ``duration_ns`` with ``timers`` on the same
        loop: the result and the rows it served.  ``completions``: the host
        to push each finished request to as it is read (a controller reads
        them), or None."""
        on_done = None
        if completions is not None:
            cgroups = self.cgroups

            def on_done(row, d):
                end_s = (d.end_ns - t0_ns) / NS
                completions.push_completed(cgroups[rows.worker[row]],
                                           end_s - rows.arrival_ns[row] / NS, end_s)
        return replay(rows.arrival_ns, rows.worker, rows.demand_ns, rows.threads,
                      self.workers, t0_ns, duration_ns, timers, on_done,
                      spin_ns=spin_ns), rows

    def finish(self, host: RealHost) -> None:
        """After the load, before the workers stop and the cgroups and RDT
        classes go: read what only the live run can tell."""

    # --- tables -------------------------------------------------------------
    def requests(self, res, rows: Rows, t0: int, warmup_ns: int,
                 end_ns: int) -> tuple[pa.Table, int]:
        """requests.parquet and how many requests arrived after the warm-up."""
        return (request_rows(rows, self.cgroups, res, t0, warmup_ns, end_ns),
                int((rows.arrival_ns >= warmup_ns).sum()))

    def summary_columns(self, perf_samples, perf_offset_s: float,
                        warmup_ns: int) -> dict[str, float | str]:
        """Extra summary columns (the memory columns; float64 for floats), from
        the run's perf samples (None: no perf stat; times since perf started,
        ``perf_offset_s`` before t0)."""
        return {}

    def result_trace(self) -> pa.Table | None:
        """What the run directory keeps as trace.parquet (None: nothing)."""
        return self.trace

    def tables(self) -> dict[str, pa.Table]:
        """The workload's own tables (results/schema.py WORKLOAD_TABLES), as
        the simulator's workload returns them."""
        return {}


class BurstRunner(Runner):
    """Workers whose threads run from t0 and report bursts (``groups``:
    per worker its ``threads`` and the burst's ``run_us``)."""

    groups: list[dict]

    def host_trace(self) -> pa.Table | None:
        return None

    def go(self, t0_ns: int, warmup_end_ns: int) -> None:
        for wp in self.workers:
            wp.go(t0_ns)

    def requests(self, res, rows: Rows, t0: int, warmup_ns: int,
                 end_ns: int) -> tuple[pa.Table, int]:
        requests = burst_rows(res.bursts, self.cgroups, self.groups, t0, warmup_ns, end_ns)
        # a thread's burst running at the end is unfinished
        return requests, requests.num_rows + sum(g["threads"] for g in self.groups)


def apply_cgroup(cg: CgroupFS, host: RealHost, c: str, weights: dict, bandwidth: dict) -> None:
    """cpu.shares / weight from ``weights``, cpu.max from ``bandwidth``."""
    if weights.get("cgroup_shares") is not None:
        cg.set_shares(c, int(weights["cgroup_shares"]))
    elif weights.get("cgroup_weight") not in (None, 100):
        cg.set_weight(c, int(weights["cgroup_weight"]))
    bw = cgroup_bandwidth(bandwidth)
    if bw is not None:
        host.set_cpu_max(c, *bw)


def request_rows(rows: Rows, cgroups, res, t0, warmup_ns, end_ns) -> pa.Table:
    """One request row per replayed row that arrived after the warm-up and
    was dropped, or finished by the end (as the simulator records them)."""
    out = []
    for i in range(len(rows.arrival_ns)):
        arr = rows.arrival_ns[i]
        if arr < warmup_ns:
            continue
        a = arr / NS
        fn, cgroup = rows.function[i], cgroups[rows.worker[i]]
        demand_s, late_s = rows.demand_ns[i] / NS, (res.dispatch_ns[i] - arr) / NS
        if i in res.dropped:    # the simulator's dropped rows: no start, end or latency
            out.append((fn, cgroup, a, math.nan, math.nan, math.nan, demand_s, late_s,
                        math.nan, True))
            continue
        d = res.done.get(i)
        if d is None or d.end_ns - t0 > end_ns:
            continue   # unfinished at the end, as in the simulator
        e = (d.end_ns - t0) / NS
        out.append((fn, cgroup, a, (d.start_ns - t0) / NS, e, e - a, demand_s, late_s,
                    d.cpu_ns / NS, False))
    return request_table(out)


def burst_rows(bursts, cgroups, groups, t0, warmup_ns, end_ns) -> pa.Table:
    """Bursts as request rows (function = cgroup = the group's path,
    arrival = release), as the simulator records them."""
    out = []
    for wi, bu in bursts:
        a, e = bu.release_ns - t0, bu.end_ns - t0
        if a < warmup_ns or e > end_ns:
            continue
        c = cgroups[wi]
        out.append((c, c, a / NS, (bu.start_ns - t0) / NS, e / NS, (e - a) / NS,
                    groups[wi]["run_us"] / 1e6, None, bu.cpu_ns / NS, False))
    return request_table(out)


def request_table(rows) -> pa.Table:
    cols = [list(c) for c in zip(*rows)] if rows else [[] for _ in range(10)]
    return pa.table({
        "function": pa.array(cols[0], pa.string()),
        "cgroup": pa.array(cols[1], pa.string()),
        "arrival_s": pa.array(cols[2], pa.float64()),
        "start_s": pa.array(cols[3], pa.float64()),
        "end_s": pa.array(cols[4], pa.float64()),
        "latency_s": pa.array(cols[5], pa.float64()),
        "cpu_demand_s": pa.array(cols[6], pa.float64()),
        "dropped": pa.array(cols[9], pa.bool_()),
        # real backend only: dispatch - scheduled arrival, and the CPU time
        # the worker's threads measured for the request
        "dispatch_lateness_s": pa.array(cols[7], pa.float64()),
        "cpu_measured_s": pa.array(cols[8], pa.float64()),
    })
