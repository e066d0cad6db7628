"""Host topology: sockets -> cores -> hardware threads, LLC and NUMA domains,
and the scheduling-domain hierarchy the load balancer walks.

CPU numbering follows Linux on Intel: all first hardware threads of every
core come first, SMT siblings follow (cpu i and i + ncores share a core).
"""
from __future__ import annotations

from dataclasses import dataclass

# the most CPUs a host may have: the kernel's largest NR_CPUS choice on x86
# (CONFIG_MAXSMP is 8192, but 4096 is what distributions build with)
MAX_CPUS = 4096

# the CPU sets a function workload may deal its cgroups' cpusets from
# (workload.cpuset_spread): the NUMA nodes' or the LLCs' CPUs
CPU_SET_LEVELS = ("node", "llc")


def cpu_sets_by(cpus, key) -> list[frozenset[int]]:
    """``cpus`` grouped by ``key(cpu)``, in key order: a host's NUMA nodes'
    or LLCs' CPUs, as both backends list them (Topology.cpu_sets, the real
    host's from sysfs)."""
    sets: dict[int, set[int]] = {}
    for c in cpus:
        sets.setdefault(key(c), set()).add(c)
    return [frozenset(sets[k]) for k in sorted(sets)]


@dataclass(frozen=True)
class CpuInfo:
    cpu: int
    core: int        # global physical core id
    socket: int
    llc: int         # global LLC domain id
    numa: int
    thread: int      # 0 for the first hardware thread of the core


@dataclass(frozen=True)
class SchedDomain:
    """One level of a CPU's sched_domain hierarchy (groups are single CPUs)."""
    name: str
    span: tuple[int, ...]
    # sd_init(): balance interval in ms equals the span weight
    interval_ms: int


class Topology:
    def __init__(self, sockets: int, cores: int, threads_per_core: int = 1,
                 numa_nodes: int = 1, cores_per_llc: int = 0, llc_mb: float = 0.0,
                 llc_ways: int = 0, hz: int = 250, name: str = "generic",
                 smt_throughput: float = 1.0):
        if min(sockets, cores, threads_per_core, numa_nodes) < 1:
            raise ValueError("sockets, cores, threads_per_core and numa_nodes must be >= 1")
        ncores = sockets * cores
        if ncores % numa_nodes:
            raise ValueError(f"numa_nodes={numa_nodes} must divide the {ncores} cores")
        cores_per_llc = cores_per_llc or cores
        if cores % cores_per_llc:
            raise ValueError(f"cores_per_llc={cores_per_llc} must divide cores={cores}")
        self.name = name
        self.sockets = sockets
        self.cores_per_socket = cores
        self.threads_per_core = threads_per_core
        self.numa_nodes = numa_nodes
        self.llc_bytes = int(llc_mb * 1024 * 1024)
        self.llc_ways = llc_ways
        self.hz = hz
        # a core's throughput with all its hardware threads busy, relative
        # to one thread running alone (1: no SMT gain; threads_per_core:
        # siblings never slow each other)
        if not 1.0 <= smt_throughput <= threads_per_core:
            raise ValueError(f"smt_throughput={smt_throughput} must be within "
                             f"[1, threads_per_core={threads_per_core}]")
        self.smt_throughput = float(smt_throughput) if threads_per_core > 1 else 1.0
        self.tick_ns = 1_000_000_000 // hz
        cores_per_numa = ncores // numa_nodes
        self.cpus: list[CpuInfo] = []
        for thread in range(threads_per_core):
            for core in range(ncores):
                self.cpus.append(CpuInfo(
                    cpu=thread * ncores + core, core=core, socket=core // cores,
                    llc=core // cores_per_llc, numa=core // cores_per_numa, thread=thread))
        self.nr_cpus = len(self.cpus)
        self.siblings = [tuple(o.cpu for o in self.cpus if o.core == c.core) for c in self.cpus]
        # per CPU, every CPU sharing its LLC: select_idle_sibling's scan
        # range, asked for at every wake-up
        self._llc_spans = [tuple(o.cpu for o in self.cpus if o.llc == c.llc) for c in self.cpus]
        self.domains = [self._build_domains(c) for c in self.cpus]

    @classmethod
    def from_config(cls, host) -> Topology:
        return cls(sockets=int(host["sockets"]), cores=int(host["cores"]),
                   threads_per_core=int(host["threads_per_core"]),
                   numa_nodes=int(host.get("numa_nodes", 1)),
                   cores_per_llc=int(host.get("cores_per_llc", 0) or 0),
                   llc_mb=float(host.get("llc_mb", 0.0)), llc_ways=int(host.get("llc_ways", 0)),
                   hz=int(host["hz"]), name=str(host.get("name", "generic")),
                   smt_throughput=float(host.get("smt_throughput", 1.0) or 1.0))

    def _build_domains(self, me: CpuInfo) -> list[SchedDomain]:
        levels = [
            ("SMT", lambda c: c.core == me.core),
            ("MC", lambda c: c.llc == me.llc),
            ("NODE", lambda c: c.numa == me.numa),
            ("PKG", lambda c: c.socket == me.socket),
            ("SYS", lambda c: True),
        ]
        domains: list[SchedDomain] = []
        prev: tuple[int, ...] = (me.cpu,)
        for name, member in levels:
            span = tuple(c.cpu for c in self.cpus if member(c))
            # like the kernel's degenerate-domain removal: keep a level only
            # when it widens the span of the one below
            if len(span) > len(prev) and set(prev) <= set(span):
                domains.append(SchedDomain(name, span, len(span)))
                prev = span
        return domains

    def cpu_sets(self, level: str) -> list[frozenset[int]]:
        """Each NUMA node's (``level`` "node") or LLC's ("llc") CPUs, in
        node / LLC id order."""
        if level not in CPU_SET_LEVELS:
            raise ValueError(f"cpu set level {level!r}: one of {', '.join(CPU_SET_LEVELS)}")
        info = self.cpus
        return cpu_sets_by(range(self.nr_cpus),
                           lambda c: info[c].numa if level == "node" else info[c].llc)

    def llc_span(self, cpu: int) -> tuple[int, ...]:
        return self._llc_spans[cpu]

    def same_llc(self, a: int, b: int) -> bool:
        return self.cpus[a].llc == self.cpus[b].llc
