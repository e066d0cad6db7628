"""What a run measures besides its requests (sim/recorder.py): per-interval
cgroup usage, and the host counters the one-row summary is built from.
Times leave here in seconds (float64); inside the simulator they are
integer nanoseconds."""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

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
        # one pass over the cgroups and one over the root's tasks (a cluster
        # reads every node's counters at every window boundary)
        rqs = machine.rqs
        periods = throttled = throttled_ns = bursts = burst_ns = 0
        for tg in machine.groups.values():
            b = tg.cfs_bandwidth
            periods += b.nr_periods
            throttled += b.nr_throttled
            throttled_ns += b.throttled_time
            bursts += b.nr_burst
            burst_ns += b.burst_time
        host_ns = loadgen_ns = 0
        for t in machine.root_tg.tasks:
            if t.host:
                ran = t.owner.ran_ns(t)
                host_ns += ran
                if t.name == LOADGEN:
                    loadgen_ns += ran
        return cls(busy_ns=sum(r.busy_ns for r in rqs),
                   overhead_ns=sum(r.overhead_ns for r in rqs),
                   switches=sum(r.nr_switches for r in rqs),
                   switch_outs=machine.nr_switch_outs,
                   migrations=machine.nr_migrations,
                   run_delay_ns=machine.run_delay_ns, pcount=machine.pcount,
                   nr_periods=periods, nr_throttled=throttled, throttled_time_ns=throttled_ns,
                   nr_bursts=bursts, burst_time_ns=burst_ns,
                   host_busy_ns=host_ns, loadgen_busy_ns=loadgen_ns)

    def __add__(self, other: HostCounters) -> HostCounters:
        return HostCounters(*(getattr(self, f) + getattr(other, f)
                              for f in self.__dataclass_fields__))

    def __sub__(self, other: HostCounters) -> HostCounters:
        return HostCounters(*(getattr(self, f) - getattr(other, f)
                              for f in self.__dataclass_fields__))


# what the sampler reads of each cgroup (TaskGroup): its own CPU time, and
# its cpu.stat counters and cpu.max (CfsBandwidth)
_USAGE = attrgetter("usage_ns")
_BANDWIDTH = attrgetter(*(f"cfs_bandwidth.{name}" for name in (
    "nr_periods", "nr_throttled", "throttled_time", "nr_burst", "burst_time", "quota", "period")))


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
        # the last sample's rows: their cgroup indices, and each one's
        # hierarchical usage and five cpu.stat counters then
        self._last_index = np.zeros(0, np.int32)
        self._last = np.zeros((0, 6), np.int64)
        self._last_host = HostCounters()
        self._last_t = 0
        self._memory_rows: dict[int, tuple] = {}      # row index -> memory columns
        self._tree = ([], None)      # (the machine's cgroups, _walk() of them) at the last sample

    def start(self):
        self.machine.engine.call_later(self.interval_ns, self.sample)

    def _walk(self) -> tuple[list, np.ndarray, list, np.ndarray]:
        """The cgroups in the rows' order, each after its children; where
        each one's subtree starts in that list (a subtree is a run of it,
        ending at its root); their names; their indices in the cgroup column.
        Walked again only when the machine's cgroups changed."""
        groups = list(self.machine.groups.values())
        if groups == self._tree[0]:
            return self._tree[1]
        order, sizes = [], []

        def walk(tg):
            n = 1
            for child in tg.children:
                n += walk(child)
            order.append(tg)
            sizes.append(n)
            return n
        walk(self.machine.root_tg)
        names = [tg.name for tg in order]
        cgroups = self._cgroups
        index = np.array([cgroups.setdefault(name, len(cgroups)) for name in names], np.int32)
        start = np.arange(len(order)) - np.asarray(sizes) + 1
        self._tree = (groups, (order, start, names, index))
        return self._tree[1]

    def sample(self, reschedule: bool = True):
        m = self.machine
        now = m.engine.now
        if now > self._last_t:
            m.sync()
            order, start, names, index = self._walk()
            n = len(order)
            # counters now, per row: hierarchical usage (a subtree's own
            # usages summed: a difference of prefix sums), then cpu.stat's
            # five and cpu.max's quota and period
            own = np.cumsum(np.fromiter(map(_USAGE, order), np.int64, n))
            stat = np.fromiter(chain.from_iterable(map(_BANDWIDTH, order)), np.int64,
                               7 * n).reshape(n, 7)
            now_counts = np.empty((n, 6), np.int64)
            now_counts[:, 0] = own - np.where(start > 0, own[np.maximum(start - 1, 0)], 0)
            now_counts[:, 1:] = stat[:, :5]
            # per cgroup index, the counters at the last sample (zero for a
            # cgroup that did not exist then)
            last = np.zeros((len(self._cgroups), 6), np.int64)
            last[self._last_index] = self._last
            d_counts = now_counts - last[index]
            host = HostCounters.read(m)
            d = host - self._last_host
            capacity = (now - self._last_t) * m.topology.nr_cpus
            used = d_counts[:, 0]
            # host-wide counters on the root row (the last: it follows its subtree)
            on_root = np.zeros(n, np.int64)
            on_root[-1] = 1
            values = (np.full(n, self._last_t / NSEC_PER_SEC), np.full(n, now / NSEC_PER_SEC),
                      index, used / NSEC_PER_SEC, used / capacity,
                      on_root * d.switches, on_root * (d.overhead_ns / NSEC_PER_SEC),
                      on_root * d.migrations,
                      d_counts[:, 1], d_counts[:, 2], d_counts[:, 3] / NSEC_PER_SEC,
                      d_counts[:, 4], d_counts[:, 5] / NSEC_PER_SEC,
                      np.where(stat[:, 5] == RUNTIME_INF, -1, stat[:, 5] // NSEC_PER_USEC),
                      stat[:, 6] // NSEC_PER_USEC)
            first = len(self._columns[0])
            for (_, code), column, v in zip(INTERVAL_COLUMNS, self._columns, values):
                column.frombytes(np.asarray(v, _NUMPY[code]).tobytes())
            if m.memory is not None:
                memory = m.memory.interval_columns()
                for k, name in enumerate(names):
                    if name in memory:
                        self._memory_rows[first + k] = memory[name]
            self._last_index, self._last = index, now_counts
            self._last_host, self._last_t = host, now
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
