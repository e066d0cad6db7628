"""What a run measures besides its requests (sim/recorder.py): per-interval
cgroup usage, and the host counters the one-row summary is built from.
Times leave here in seconds (float64); inside the simulator they are
integer nanoseconds."""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from results.schema import INTERVALS_OPTIONAL
from sim.bandwidth import NSEC_PER_USEC, RUNTIME_INF
from sim.engine import NSEC_PER_SEC
from sim.loadgen import NAME as LOADGEN


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
    # of which the real backend's driving loop (sim/loadgen.py): the colosim
    # process's own CPU on the real host
    loadgen_busy_ns: int = 0

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
                   host_busy_ns=sum(t.owner.ran_ns(t) for t in machine.root_tg.tasks if t.host),
                   loadgen_busy_ns=sum(t.owner.ran_ns(t) for t in machine.root_tg.tasks
                                       if t.host and t.name == LOADGEN))

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


# The interval table's columns, each kept as a typed array while the run
# goes ("d" float64, "q" int64, "i" an index into the cgroup names): a long
# run of a dense host has a row per cgroup per interval, ~120 bytes this way
# against ~320 as a tuple of Python objects (docs/performance.md, "Memory").
# Nulls: the host-wide counters are only on the root row, quota_us is null
# where no limit is set (kept as -1).
INTERVAL_COLUMNS = (("interval_start_s", "d"), ("interval_end_s", "d"), ("cgroup", "i"),
                    ("usage_s", "d"), ("usage_frac", "d"), ("ctx_switches", "q"),
                    ("sched_overhead_s", "d"), ("migrations", "q"), ("nr_periods", "q"),
                    ("nr_throttled", "q"), ("throttled_time_s", "d"), ("nr_bursts", "q"),
                    ("burst_time_s", "d"), ("quota_us", "q"), ("period_us", "q"))
ROOT_ONLY = ("ctx_switches", "sched_overhead_s", "migrations")
_NUMPY = {"d": np.float64, "q": np.int64, "i": np.int32}


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
        self._columns = [array(code) for _, code in INTERVAL_COLUMNS]
        self._cgroups: dict[str, int] = {}            # name -> its index in the cgroup column
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
            cgroups, columns = self._cgroups, self._columns
            # the rows of this interval, appended column by column at the end
            # (one extend per column rather than a method call per value)
            rows, first = [], len(columns[0])
            for name, ns in usage.items():
                if name in memory:
                    self._memory_rows[first + len(rows)] = memory[name]
                used = ns - self._last_usage.get(name, 0)
                root = name == "/"
                tg = m.groups[name]
                cfs_b = tg.cfs_bandwidth
                stat = stats[name] = cpu_stat(tg)
                periods, throttled, throttled_ns, bursts, burst_ns = (
                    a - b for a, b in zip(stat, self._last_stat.get(name, (0,) * 5)))
                row = (t0, t1, cgroups.setdefault(name, len(cgroups)),
                       used / NSEC_PER_SEC, used / capacity,
                       d.switches if root else 0,
                       d.overhead_ns / NSEC_PER_SEC if root else 0.0,
                       d.migrations if root else 0,
                       periods, throttled, throttled_ns / NSEC_PER_SEC,
                       bursts, burst_ns / NSEC_PER_SEC,
                       -1 if cfs_b.quota == RUNTIME_INF else cfs_b.quota // NSEC_PER_USEC,
                       cfs_b.period // NSEC_PER_USEC)
                rows.append(row)
            for column, values in zip(columns, zip(*rows)):
                column.extend(values)
            self._last_usage, self._last_host, self._last_t = usage, host, now
            self._last_stat = stats
        if reschedule:
            m.engine.call_later(self.interval_ns, self.sample)

    def table(self) -> pa.Table:
        data = {name: np.frombuffer(column, dtype=_NUMPY[code])
                for (name, code), column in zip(INTERVAL_COLUMNS, self._columns)}
        cgroup = data["cgroup"]
        root = cgroup == self._cgroups.get("/", -1)
        arrays = {}
        for name, values in data.items():
            if name == "cgroup":
                arrays[name] = pa.array(list(self._cgroups), pa.string()).take(pa.array(values))
            elif name in ROOT_ONLY:
                arrays[name] = pa.array(values, mask=~root)
            elif name == "quota_us":
                arrays[name] = pa.array(values, mask=values < 0)      # null: no limit
            else:
                arrays[name] = pa.array(values)
        table = pa.table(arrays)
        if self._memory_rows:
            empty = (None,) * len(MEMORY_INTERVAL_COLUMNS)
            mem = list(zip(*(self._memory_rows.get(i, empty) for i in range(len(cgroup)))))
            for name, values in zip(MEMORY_INTERVAL_COLUMNS, mem):
                table = table.append_column(
                    name, pa.array(values, INTERVALS_OPTIONAL.field(name).type))
        return table


# sim.memory.progress.MemorySystem.interval_columns, in this order (types:
# results.schema.INTERVALS_OPTIONAL)
MEMORY_INTERVAL_COLUMNS = ("instructions", "cycles", "ipc", "ipce", "ipc_rel_alone",
                           "llc_miss_rate", "llc_occupancy_mb", "mbm_bytes", "l3_ways",
                           "mb_percent")
