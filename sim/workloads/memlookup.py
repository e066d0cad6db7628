"""``workload=memlookup``: the noisy-neighbor thesis's ``neighbor``
microbenchmark (the thesis's Listing A.7): containers that look up random lines
of a buffer, each in an optional RDT partition.

Each container is a cgroup ``parent_cgroup/c<i>`` with ``threads`` CPU-bound
threads pinned to the CPUs of ``socket`` (one per physical core, the thesis's
distinct cores).  A thread runs back-to-back requests of ``burst_ms`` of CPU
each (as alone on the socket with the whole LLC: the demand unit of the
memory model, sim/memory/progress.py), so ``latency_s / (burst_ms / 1000)``
is its slowdown and ``throughput_rps`` its progress.  All containers share
the ``memory`` profile; container i draws its physical frames with
``layout_seed + i``.

RDT (``partitions``, one entry per container): null leaves the container in
the root group; ``"lo-hi"`` gives it a class ``c<i>`` with L3 ways lo..hi
(inclusive) on every socket and MB ``mb[i]`` percent.  When any container is
partitioned the root group keeps the ways nobody else has (they must be
contiguous: the thesis leaves them to the driver and host processes), and a
container whose ways overlap no other container's is made ``exclusive``.
Everything goes through the resctrl model, so invalid masks fail with
resctrl's wording.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from sim.config import MAX_COUNT, MISSING, tunable
from sim.footprint import Term
from sim.memory.progress import MemoryProfile
from sim.memory.resctrl import ResctrlError
from sim.task import Request
from sim.workloads.base import Workload, WorkloadConfig
from sim.workloads.common import CGROUP_PATH, CPU_SHARES_RANGE, CPU_WEIGHT_RANGE, cgroup_shares


def check_memory_profile(c, key: str) -> None:
    """The memory profile at ``key`` (sim.memory.progress.MemoryProfile keys) builds."""
    spec = c.get(key)
    try:
        MemoryProfile.from_spec(spec)
    except (TypeError, ValueError) as err:
        c.require(key, False, str(err), spec)


@dataclass
class MemLookupConfig(WorkloadConfig):
    """Random-lookup containers in RDT partitions."""
    containers: int = tunable(1, range=(1, MAX_COUNT))
    threads: int = tunable(1, range=(1, MAX_COUNT))  # per container, one physical core each
    burst_ms: float = tunable(10.0, above=0)  # CPU per request, as alone
    socket: int = tunable(0, range=(0, None))
    memory: Any = MISSING  # sim.memory.progress.MemoryProfile keys
    partitions: Optional[List[Optional[str]]] = None  # per container: null or "lo-hi" ways
    mb: Optional[List[int]] = None  # per container MB percent
    exclusive: bool = True
    tag: str = "priority"
    cgroup_weight: int = tunable(100, range=CPU_WEIGHT_RANGE)
    cgroup_shares: Optional[int] = tunable(None, range=CPU_SHARES_RANGE)
    parent_cgroup: str = tunable("memlookup", pattern=CGROUP_PATH)

    @classmethod
    def footprint(cls, w, duration_s: float) -> list:
        return [Term("cgroup", w["containers"], "containers"),
                Term("thread", w["containers"] * w["threads"], "threads")]

    @classmethod
    def check(cls, c, key: str) -> None:
        check_memory_profile(c, f"{key}.memory")


def parse_ways(spec: str, ways: int) -> int:
    """``"lo-hi"`` (inclusive) or ``"n"`` -> contiguous CBM."""
    text = str(spec).strip()
    lo, sep, hi = text.partition("-")
    try:
        lo_i, hi_i = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise ValueError(f"memlookup partition {spec!r}: write ways as 'lo-hi', e.g. '0-5'") \
            from None
    if not 0 <= lo_i <= hi_i < ways:
        raise ValueError(f"memlookup partition {spec!r}: ways must be within 0-{ways - 1}")
    return ((1 << (hi_i + 1)) - 1) & ~((1 << lo_i) - 1)


def partition_plan(parts, ways: int, exclusive: bool):
    """What ``partitions`` asks of resctrl: None when no container is
    partitioned, else (the root group's CBM: the ways no container has, 0
    for none left; per container (its CBM or None, whether it is made
    exclusive: it overlaps no other container)).  The real backend
    (backends/real/memlookup.py) applies the same plan."""
    masks = [None if p is None else parse_ways(p, ways) for p in parts]
    if all(m is None for m in masks):
        return None
    used = 0
    for m in masks:
        used |= m or 0
    out = []
    for i, m in enumerate(masks):
        others = 0
        for j, o in enumerate(masks):
            if j != i and o is not None:
                others |= o
        out.append((m, m is not None and exclusive and not m & others))
    return ((1 << ways) - 1) & ~used, out


class MemLookupWorkload(Workload):
    CONFIG = MemLookupConfig
    REAL_BACKEND = "memlookup"

    def __init__(self, cfg: MemLookupConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        n = cfg.containers
        self.threads = cfg.threads
        self.burst_ns = int(round(float(cfg.burst_ms) * 1e6))
        if n < 1 or self.threads < 1 or self.burst_ns < 1:
            raise ValueError("memlookup: containers, threads and burst_ms must be >= 1")
        topo = machine.topology
        socket = cfg.socket
        if not 0 <= socket < topo.sockets:
            raise ValueError(f"memlookup.socket must be in 0..{topo.sockets - 1}")
        # one hardware thread per physical core of the socket
        cores = sorted({c.core for c in topo.cpus if c.socket == socket})
        first = {}
        for c in topo.cpus:
            if c.socket == socket and c.core not in first:
                first[c.core] = c.cpu
        cpus = [first[c] for c in cores]
        if n * self.threads > len(cpus):
            raise ValueError(f"memlookup: {n} x {self.threads} threads do not fit the "
                             f"{len(cpus)} cores of socket {socket}")
        spec = dict(cfg.memory or {})
        if not spec:
            raise ValueError("memlookup needs workload.memory (buffer_mb, pages, pattern, ...)")
        parts = list(cfg.partitions or [None] * n)
        mbs = list(cfg.mb or [100] * n)
        if len(parts) != n or len(mbs) != n:
            raise ValueError(f"memlookup: partitions and mb need one entry per container ({n})")
        parent = cfg.parent_cgroup.strip("/")
        mem = machine.memory_model()
        shares = cgroup_shares(cfg)
        self.groups = []
        for i in range(n):
            mine = frozenset(cpus[i * self.threads:(i + 1) * self.threads])
            tg = machine.create_group(f"{parent}/c{i}", shares, mine)
            profile = MemoryProfile.from_spec({**spec, "layout_seed":
                                               int(spec.get("layout_seed", 0)) + i})
            mem.set_profile(tg, profile, tag=cfg.tag)
            self.groups.append(tg)
        self._partition(mem, parts, mbs, bool(cfg.exclusive))

    def _partition(self, mem, parts, mbs, exclusive) -> None:
        rc = mem.resctrl
        plan = partition_plan(parts, mem.geometry.ways, exclusive)
        if plan is None:
            return
        rest, classes = plan
        doms = mem.domains
        try:
            if rest:
                rc.write_schemata("", "L3:" + ";".join(f"{d}={rest:x}" for d in doms))
            for i, ((m, excl), mb) in enumerate(zip(classes, mbs)):
                if m is None:
                    continue
                name = f"c{i}"
                rc.mkdir(name)
                text = "L3:" + ";".join(f"{d}={m:x}" for d in doms)
                if rc.info.has_mba:
                    text += "\nMB:" + ";".join(f"{d}={int(mb)}" for d in doms)
                rc.write_schemata(name, text)
                if excl:
                    rc.write_mode(name, "exclusive")
                mem.assign(self.groups[i], name)
        except ResctrlError as err:
            raise ValueError(f"memlookup partitions {parts}: resctrl says {err.status!r}") from None

    def start(self):
        m = self.machine
        for tg in self.groups:
            for j in range(self.threads):
                req = self._request(tg)
                t = m.new_task(tg.name, tg, 0, self.burst_ns, 0, self, req)
                m.wake_up_new_task(t, min(tg.cpus_allowed))

    def _request(self, tg) -> Request:
        req = Request(tg.name, tg.name, self.engine.now, self.burst_ns)
        req.pending = 1
        self.recorder.request_arrived(req)
        return req

    def burst_done(self, task):
        req = task.request
        req.end = self.engine.now
        self.recorder.request_done(req)
        nxt = self._request(task.tg)
        nxt.start = self.engine.now
        task.request = nxt
        task.remaining = self.burst_ns
        return 0


WORKLOAD = MemLookupWorkload
