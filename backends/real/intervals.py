"""intervals.parquet on the real host: each cgroup's cpu.stat and usage
sampled every ``interval_s`` (and at the warm-up instant, for the summary
window), with the run's per-cgroup counts of the same interval (through
perf's binding, backends/real/taskcount.py, or ``perf stat -G``); each
sample also reads the host's steal and total CPU time
(backends/real/disturbance.py).
"""
from __future__ import annotations

import os
import time

import pyarrow as pa

from backends.real import cgroupfs
from backends.real.cgroupfs import CgroupFS
from backends.real.disturbance import host_times
from sim.engine import NSEC_PER_SEC as NS


class Sampler:
    """Per-cgroup usage and cpu.stat counters every interval (and at the
    warm-up instant for the summary window).  ``counters`` (a
    :class:`~backends.real.taskcount.TaskCounters`) end their interval at
    each of the same reads, so the perf rows' intervals are the sampler's."""

    def __init__(self, cg: CgroupFS, functions: list[str], parent: str, ncpus: int,
                 counters=None):
        self.cg = cg
        self.ncpus = ncpus
        self.counters = counters
        self.reads = 0               # reads so far, and their CPU (this thread's):
        self.read_cpu_ns = 0         # what the simulator's load generator charges per read
        self.cgroups = ["/"] + ([f"/{parent}"] if parent else []) + list(functions)
        self.rows: list[dict] = []
        self._last = None
        self.at_warmup = None
        self.last = None

    def open(self) -> None:
        """Keep every counter file open and pread it from offset 0 (a few us
        per file instead of ~100 us for open/read/close), so a sample barely
        delays the load generator's next dispatch.  The real run opens them
        before its start (the first read would otherwise open a thousand
        files at 256 functions, ~0.1 s, on the load generator's thread)."""
        cg, self._fds = self.cg, {}
        v2 = cg.layout.version("cpu") == 2
        for c in self.cgroups:
            d = cg.dir("cpu", c)
            files = {"stat": d / "cpu.stat"}
            if v2:
                files["max"] = d / "cpu.max"
            else:
                files["quota"] = d / "cpu.cfs_quota_us"
                files["period"] = d / "cpu.cfs_period_us"
                if cg.layout.version("cpuacct") == 1:
                    files["usage"] = cg.dir("cpuacct", c) / "cpuacct.usage"
            self._fds[c] = {k: os.open(f, os.O_RDONLY) for k, f in files.items()}

    def close(self) -> None:
        for fds in getattr(self, "_fds", {}).values():
            for fd in fds.values():
                os.close(fd)
        self._fds = {}

    def _raw(self, c: str) -> tuple[dict, int, int | None, int]:
        fds = self._fds[c]
        rd = lambda k: os.pread(fds[k], 4096, 0).decode()  # noqa: E731
        kv = cgroupfs.read_kv(rd("stat"))
        if "max" in fds:
            q, per = rd("max").split()
            quota, period = (None if q == "max" else int(q)), int(per)
        else:
            q = int(rd("quota"))
            quota, period = (None if q < 0 else q), int(rd("period"))
        usage = int(rd("usage")) if "usage" in fds else kv["usage_usec"] * 1000
        return kv, usage, quota, period

    def read(self, now_ns: int) -> dict:
        out = {"t_ns": now_ns, "host": host_times()}
        if not getattr(self, "_fds", None):
            self.open()
        if self.counters is not None:
            self.counters.read_now()
        for c in self.cgroups:
            kv, usage, quota, period = self._raw(c)
            out[c] = {"usage_ns": usage,
                      "nr_periods": kv.get("nr_periods", 0),
                      "nr_throttled": kv.get("nr_throttled", 0),
                      "throttled_ns": kv["throttled_usec"] * 1000 if "throttled_usec" in kv
                      else kv.get("throttled_time", 0),
                      "nr_bursts": kv.get("nr_bursts"),
                      "burst_ns": kv["burst_usec"] * 1000 if "burst_usec" in kv
                      else kv.get("burst_time"),
                      "quota_us": quota, "period_us": period}
        return out

    def _timed(self, cpu0: int) -> None:
        self.reads += 1
        self.read_cpu_ns += time.thread_time_ns() - cpu0

    def start(self, now_ns: int = 0) -> None:
        cpu0 = time.thread_time_ns()
        self._last = self.read(now_ns)
        self.first = self._last
        self._timed(cpu0)

    def warmup(self, now_ns: int) -> None:
        cpu0 = time.thread_time_ns()
        self.at_warmup = self.read(now_ns)
        self._timed(cpu0)

    def sample(self, now_ns: int) -> None:
        cpu0 = time.thread_time_ns()
        self._sample(self.read(now_ns))
        self._timed(cpu0)

    def _sample(self, cur: dict) -> None:
        prev = self._last
        span = cur["t_ns"] - prev["t_ns"]
        if span <= 0:
            return
        for c in self.cgroups:
            a, z = prev[c], cur[c]
            used = z["usage_ns"] - a["usage_ns"]
            self.rows.append({
                "interval_start_s": prev["t_ns"] / NS, "interval_end_s": cur["t_ns"] / NS,
                "cgroup": c, "usage_s": used / NS, "usage_frac": used / (span * self.ncpus),
                "nr_periods": z["nr_periods"] - a["nr_periods"],
                "nr_throttled": z["nr_throttled"] - a["nr_throttled"],
                "throttled_time_s": (z["throttled_ns"] - a["throttled_ns"]) / NS,
                "nr_bursts": None if z["nr_bursts"] is None else z["nr_bursts"] - a["nr_bursts"],
                "burst_time_s": None if z["burst_ns"] is None
                else (z["burst_ns"] - a["burst_ns"]) / NS,
                "quota_us": z["quota_us"], "period_us": z["period_us"]})
        self._last = cur
        self.last = cur

    def table(self, perf_rows) -> pa.Table:
        rows = self.rows
        counts = {name: [] for name in PERF_COLUMNS.values()}
        for r in rows:
            sel = []
            if perf_rows is not None:
                key = r["cgroup"]
                sel = [p for p in perf_rows if r["interval_start_s"] <= p[0] < r["interval_end_s"]
                       and (key == "/" or p[1] == key or p[1].startswith(key + "/"))]
            for i, name in enumerate(PERF_COLUMNS.values()):
                counts[name].append(sum_or_none([p[2 + i] for p in sel])
                                    if sel or (perf_rows is not None and key == "/") else None)
        col = lambda k, t: pa.array([r[k] for r in rows], t)  # noqa: E731
        return pa.table({
            "interval_start_s": col("interval_start_s", pa.float64()),
            "interval_end_s": col("interval_end_s", pa.float64()),
            "cgroup": col("cgroup", pa.string()),
            "usage_s": col("usage_s", pa.float64()),
            "usage_frac": col("usage_frac", pa.float64()),
            "ctx_switches": pa.array(counts["ctx_switches"], pa.int64()),
            "sched_overhead_s": pa.array([None] * len(rows), pa.float64()),
            "migrations": pa.array(counts["migrations"], pa.int64()),
            "nr_periods": col("nr_periods", pa.int64()),
            "nr_throttled": col("nr_throttled", pa.int64()),
            "throttled_time_s": col("throttled_time_s", pa.float64()),
            "nr_bursts": col("nr_bursts", pa.int64()),
            "burst_time_s": col("burst_time_s", pa.float64()),
            "quota_us": col("quota_us", pa.int64()),
            "period_us": col("period_us", pa.int64()),
            # hardware counts where the PMU has them; null where perf said
            # <not supported> (a VM without a virtual PMU), never 0
            **{name: pa.array(counts[name], pa.int64())
               for name in list(PERF_COLUMNS.values())[2:]},
        })


def sum_or_none(values):
    vals = [v for v in values if v is not None]
    return int(sum(vals)) if vals else None


# perf events -> intervals.parquet columns, in the order of perf_rows' values
PERF_COLUMNS = {"context-switches": "ctx_switches", "cpu-migrations": "migrations",
                "instructions": "instructions", "cycles": "cycles",
                "stalled-cycles-frontend": "stalled_cycles_frontend",
                "stalled-cycles-backend": "stalled_cycles_backend"}
_PERF_INDEX = {ev: i for i, ev in enumerate(PERF_COLUMNS)}


def perf_spans(samples, offset_s: float, step_s: float) -> list[tuple[float, float]]:
    """(start, end) in run time of each perf interval, as perf_rows splits
    them (an interval ends at the time perf prints, and starts at the
    previous one's end)."""
    ends = sorted({s.time_s for s in samples if s.time_s is not None})
    return [((max(0.0, t - step_s) if i == 0 else ends[i - 1]) - offset_s, t - offset_s)
            for i, t in enumerate(ends)]


def perf_rows(samples, offset_s: float, step_s: float):
    """(midpoint in run time, cgroup, then one count per PERF_COLUMNS event)
    per perf interval and cgroup; a count perf could not take is None."""
    acc: dict[tuple[float, str], list] = {}
    for s in samples:
        if s.time_s is None or s.cgroup is None:
            continue
        row = acc.setdefault((s.time_s, s.cgroup), [None] * len(PERF_COLUMNS))
        i = _PERF_INDEX.get(s.event.split(":")[0])
        if i is not None:
            row[i] = s.value
    out = []
    prev_t: dict[str, float] = {}
    for (t, c), values in sorted(acc.items()):
        start = prev_t.get(c, max(0.0, t - step_s))
        prev_t[c] = t
        out.append(((start + t) / 2 - offset_s, c, *values))
    return out
