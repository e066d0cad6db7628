"""What a run measures: per-request rows, per-interval cgroup usage, and the
host counters the one-row summary is built from.  Times leave here in
seconds (float64); inside the simulator they are integer nanoseconds."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from results.schema import INTERVALS_OPTIONAL
from sim.bandwidth import NSEC_PER_USEC, RUNTIME_INF
from sim.engine import NSEC_PER_SEC


class Recorder:
    """Collects requests; those arriving before warmup are excluded."""

    def __init__(self, warmup_ns: int):
        self.warmup_ns = warmup_ns
        self.rows: list[tuple] = []
        self.arrived = 0
        # called with every finished request, warm-up included (controllers)
        self.observers: list = []

    def request_arrived(self, req) -> None:
        if req.arrival >= self.warmup_ns:
            self.arrived += 1

    def request_done(self, req) -> None:
        for observe in self.observers:
            observe(req)
        if req.arrival >= self.warmup_ns:
            self.rows.append((req.function, req.cgroup, req.arrival, req.start, req.end,
                              req.demand, req.dropped))

    def table(self) -> pa.Table:
        cols = list(zip(*self.rows)) if self.rows else [[]] * 7
        arrival = np.asarray(cols[2], dtype=np.float64) / NSEC_PER_SEC
        start = np.asarray(cols[3], dtype=np.float64) / NSEC_PER_SEC
        end = np.asarray(cols[4], dtype=np.float64) / NSEC_PER_SEC
        dropped = np.asarray(cols[6], dtype=bool)
        start[dropped] = np.nan
        end[dropped] = np.nan
        return pa.table({
            "function": pa.array(cols[0], pa.string()),
            "cgroup": pa.array(cols[1], pa.string()),
            "arrival_s": arrival,
            "start_s": start,
            "end_s": end,
            "latency_s": end - arrival,
            "cpu_demand_s": np.asarray(cols[5], dtype=np.float64) / NSEC_PER_SEC,
            "dropped": pa.array(dropped, pa.bool_()),
        })


@dataclass
class HostCounters:
    busy_ns: int = 0
    overhead_ns: int = 0
    switches: int = 0
    switch_outs: int = 0
    migrations: int = 0
    run_delay_ns: int = 0
    pcount: int = 0
    # cpu.stat bandwidth counters summed over all cgroups
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_time_ns: int = 0
    nr_bursts: int = 0
    burst_time_ns: int = 0
    # run time of the host's own tasks (Task.host: the load generator, kernel
    # threads), which the real backend's run cgroups do not hold
    host_busy_ns: int = 0

    @classmethod
    def read(cls, machine) -> HostCounters:
        rqs = machine.rqs
        bws = [tg.cfs_bandwidth for tg in machine.groups.values()]
        return cls(busy_ns=sum(r.busy_ns for r in rqs),
                   overhead_ns=sum(r.overhead_ns for r in rqs),
                   switches=sum(r.nr_switches for r in rqs),
                   switch_outs=machine.nr_switch_outs,
                   migrations=machine.nr_migrations,
                   run_delay_ns=machine.run_delay_ns, pcount=machine.pcount,
                   nr_periods=sum(b.nr_periods for b in bws),
                   nr_throttled=sum(b.nr_throttled for b in bws),
                   throttled_time_ns=sum(b.throttled_time for b in bws),
                   nr_bursts=sum(b.nr_burst for b in bws),
                   burst_time_ns=sum(b.burst_time for b in bws),
                   host_busy_ns=sum(t.owner.ran_ns(t) for t in machine.root_tg.tasks if t.host))

    def __add__(self, other: HostCounters) -> HostCounters:
        return HostCounters(*(getattr(self, f) + getattr(other, f)
                              for f in self.__dataclass_fields__))

    def __sub__(self, other: HostCounters) -> HostCounters:
        return HostCounters(*(getattr(self, f) - getattr(other, f)
                              for f in self.__dataclass_fields__))


def cpu_stat(tg) -> tuple[int, int, int, int, int]:
    """A cgroup's own cpu.stat bandwidth counters: nr_periods, nr_throttled,
    throttled_time (ns), nr_bursts, burst_time (ns)."""
    b = tg.cfs_bandwidth
    return b.nr_periods, b.nr_throttled, b.throttled_time, b.nr_burst, b.burst_time


class IntervalSampler:
    """cpuacct.usage per cgroup (hierarchical) every ``interval_ns``, the
    cgroup's own cpu.stat bandwidth counters over the interval and the
    cpu.max in force at its end, plus host-wide switch counters on the
    root row.  With the memory model, cgroups with a memory profile also get
    the ``MEMORY_INTERVAL_COLUMNS`` (null on the other rows); a run in which
    no cgroup has a profile gets no such columns at all, so its table is
    the same as without the model."""

    def __init__(self, machine, interval_ns: int):
        self.machine = machine
        self.interval_ns = interval_ns
        self.rows: list[tuple] = []
        self._last_usage: dict[str, int] = {}
        self._last_stat: dict[str, tuple] = {}
        self._last_host = HostCounters()
        self._last_t = 0
        self._memory_rows: dict[int, tuple] = {}      # row index -> memory columns

    def start(self):
        self.machine.engine.call_later(self.interval_ns, self.sample)

    def _hier_usage(self) -> dict[str, int]:
        usage: dict[str, int] = {}

        def walk(tg):
            total = tg.usage_ns + sum(walk(c) for c in tg.children)
            usage[tg.name] = total
            return total
        walk(self.machine.root_tg)
        return usage

    def sample(self, reschedule: bool = True):
        m = self.machine
        now = m.engine.now
        if now > self._last_t:
            m.sync()
            usage = self._hier_usage()
            host = HostCounters.read(m)
            d = host - self._last_host
            span_ns = now - self._last_t
            capacity = span_ns * m.topology.nr_cpus
            t0, t1 = self._last_t / NSEC_PER_SEC, now / NSEC_PER_SEC
            stats = {}
            memory = m.memory.interval_columns() if m.memory is not None else {}
            for name, ns in usage.items():
                if name in memory:
                    self._memory_rows[len(self.rows)] = memory[name]
                used = ns - self._last_usage.get(name, 0)
                root = name == "/"
                tg = m.groups[name]
                cfs_b = tg.cfs_bandwidth
                stat = stats[name] = cpu_stat(tg)
                periods, throttled, throttled_ns, bursts, burst_ns = (
                    a - b for a, b in zip(stat, self._last_stat.get(name, (0,) * 5)))
                self.rows.append((t0, t1, name, used / NSEC_PER_SEC, used / capacity,
                                  d.switches if root else None,
                                  d.overhead_ns / NSEC_PER_SEC if root else None,
                                  d.migrations if root else None,
                                  periods, throttled, throttled_ns / NSEC_PER_SEC,
                                  bursts, burst_ns / NSEC_PER_SEC,
                                  None if cfs_b.quota == RUNTIME_INF
                                  else cfs_b.quota // NSEC_PER_USEC,
                                  cfs_b.period // NSEC_PER_USEC))
            self._last_usage, self._last_host, self._last_t = usage, host, now
            self._last_stat = stats
        if reschedule:
            m.engine.call_later(self.interval_ns, self.sample)

    def table(self) -> pa.Table:
        cols = list(zip(*self.rows)) if self.rows else [[]] * 15
        table = pa.table({
            "interval_start_s": pa.array(cols[0], pa.float64()),
            "interval_end_s": pa.array(cols[1], pa.float64()),
            "cgroup": pa.array(cols[2], pa.string()),
            "usage_s": pa.array(cols[3], pa.float64()),
            "usage_frac": pa.array(cols[4], pa.float64()),
            "ctx_switches": pa.array(cols[5], pa.int64()),
            "sched_overhead_s": pa.array(cols[6], pa.float64()),
            "migrations": pa.array(cols[7], pa.int64()),
            "nr_periods": pa.array(cols[8], pa.int64()),
            "nr_throttled": pa.array(cols[9], pa.int64()),
            "throttled_time_s": pa.array(cols[10], pa.float64()),
            "nr_bursts": pa.array(cols[11], pa.int64()),
            "burst_time_s": pa.array(cols[12], pa.float64()),
            "quota_us": pa.array(cols[13], pa.int64()),   # null: no limit
            "period_us": pa.array(cols[14], pa.int64()),
        })
        if self._memory_rows:
            empty = (None,) * len(MEMORY_INTERVAL_COLUMNS)
            mem = list(zip(*(self._memory_rows.get(i, empty) for i in range(len(self.rows)))))
            for name, values in zip(MEMORY_INTERVAL_COLUMNS, mem):
                table = table.append_column(
                    name, pa.array(values, INTERVALS_OPTIONAL.field(name).type))
        return table


# sim.memory.progress.MemorySystem.interval_columns, in this order (types:
# results.schema.INTERVALS_OPTIONAL)
MEMORY_INTERVAL_COLUMNS = ("instructions", "cycles", "ipc", "ipce", "ipc_rel_alone",
                           "llc_miss_rate", "llc_occupancy_mb", "mbm_bytes", "l3_ways",
                           "mb_percent")
