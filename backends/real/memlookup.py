"""``workload=memlookup`` on the real host: the noisy-neighbor thesis's
neighbor microbenchmark (sim/workloads/memlookup.py) as memory workers.

Container i is the cgroup ``/<parent_cgroup>/c<i>`` with ``threads``
threads, one per physical core of ``socket`` (container i takes cores
i*threads .. (i+1)*threads-1 of it, the cgroup's cpuset), running the
``memory`` profile's shape (backends/real/jobs.py ``job_args``) back to back
from t0 to the end of the run.  A thread reports a burst each time it has
made ``burst_ms`` worth of accesses at the speed one thread of the shape
reaches alone (measured before the run, like a job's), so a burst's latency
over ``burst_ms`` is its slowdown and the burst count its progress, as the
simulator's requests.  ``partitions`` / ``mb`` / ``exclusive`` go through
the RDT levers exactly as the simulator plans them
(``sim.workloads.memlookup.partition_plan``): the root group gets the ways no
container has, container i a class ``c<i>`` with its ways and MB on every
domain, exclusive when it overlaps no other container; a run with partitions
needs resctrl (refused up front without).  At the end ``llc_occupancy_mb``
is the classes' CMT ``llc_occupancy`` summed over domains (NaN without
partitions: the containers then share the root group with the whole host);
the miss rate and IPCE columns come from the run's per-cgroup perf
intervals after the warm-up (backends/real/ipce.py), where the PMU has the
events.

:class:`MemLookupRunner` is the ``memlookup`` capability's runner
(backends/real/runner.py).
"""
from __future__ import annotations

import math
import subprocess

from backends.real import detect, ipce
from backends.real.config import RealBackend
from backends.real.jobs import calibrate, job_args, spawn_in_cgroup, stop_session
from backends.real.memworker import build_memworker
from backends.real.perf import DEFAULT_EVENTS
from backends.real.runner import BurstRunner, RealRunError, Setup, apply_cgroup
from backends.real.workers import LineReader
from sim.engine import NSEC_PER_SEC as NS
from sim.memory.progress import MemoryProfile
from sim.workloads.memlookup import partition_plan


class MemLookupError(RuntimeError):
    pass


def container_names(w: dict) -> list[str]:
    n = int(w.get("containers", 1))
    if n < 1 or int(w.get("threads", 1)) < 1 or not float(w.get("burst_ms", 10.0)) > 0:
        raise MemLookupError("memlookup: containers, threads and burst_ms must be >= 1")
    return [f"c{i}" for i in range(n)]


def needs_rdt(w: dict) -> bool:
    return any(p is not None for p in (w.get("partitions") or []))


def plan(w: dict, cores_by_socket: dict[int, list[tuple[int, ...]]]) -> list[dict]:
    """Per container: its CPUs (the first hardware thread of each of its
    cores), the worker shape, and ``run_us`` (the burst, as the periodic
    groups' run time, for the request rows)."""
    names = container_names(w)
    threads = int(w.get("threads", 1))
    socket = int(w.get("socket", 0))
    if socket not in cores_by_socket:
        raise MemLookupError(f"memlookup.socket = {socket}: the run's CPUs are on sockets "
                             f"{sorted(cores_by_socket)}")
    cores = cores_by_socket[socket]
    if len(names) * threads > len(cores):
        raise MemLookupError(f"memlookup: {len(names)} x {threads} threads do not fit the "
                             f"{len(cores)} cores of socket {socket} in the run's CPUs")
    spec = dict(w.get("memory") or {})
    if not spec:
        raise MemLookupError("memlookup needs workload.memory (buffer_mb, pages, pattern, ...)")
    parts = list(w.get("partitions") or [None] * len(names))
    mbs = list(w.get("mb") or [100] * len(names))
    if len(parts) != len(names) or len(mbs) != len(names):
        raise MemLookupError(f"memlookup: partitions and mb need one entry per container "
                             f"({len(names)})")
    try:
        args = job_args(MemoryProfile.from_spec(spec))
    except ValueError as e:
        raise MemLookupError(str(e)) from None
    burst_us = int(round(float(w.get("burst_ms", 10.0)) * 1000))
    return [{"name": name, "threads": threads, "run_us": burst_us, "args": args,
             "cpus": {core[0] for core in cores[i * threads:(i + 1) * threads]},
             "partition": parts[i], "mb": int(mbs[i])} for i, name in enumerate(names)]


def apply_partitions(host, w: dict, containers: list[dict], cgroups: list[str]) -> list[str]:
    """The simulator's partition plan through the Host's RDT levers; the
    classes made (one per partitioned container, "" for the others)."""
    if not needs_rdt(w):
        return [""] * len(containers)
    info = host.rdt_info()
    try:
        rest, classes = partition_plan([c["partition"] for c in containers], info.ways,
                                       bool(w.get("exclusive", True)))
    except ValueError as e:
        raise MemLookupError(str(e)) from None
    if rest:
        host.rdt_update_class("", l3_cbm=rest)
    made = []
    for (mask, exclusive), c, cg in zip(classes, containers, cgroups):
        if mask is None:
            made.append("")
            continue
        host.rdt_create_class(c["name"], mask, c["mb"], exclusive=exclusive)
        host.rdt_assign(cg, c["name"])
        made.append(c["name"])
    return made


class ContainerProc:
    """One container's memory worker.  Looks like a periodic function worker
    to the load generator: started (faulted in) at once, its threads run
    from ``go(t0)``, ``read_lines`` gives its "B" burst lines."""

    def __init__(self, name: str, cmd: list[str], procs_files: list[str], cpus: set[int]):
        self.name = name
        try:
            self.proc = spawn_in_cgroup(cmd, procs_files, cpus, stdin=subprocess.PIPE)
        except (OSError, subprocess.SubprocessError) as e:
            raise MemLookupError(f"starting container {name} on CPUs {sorted(cpus)}: {e}") \
                from None
        self.pid = self.proc.pid
        self._lines = LineReader(self.proc.stdout.fileno())
        self._reported_exit = False

    def go(self, t0_ns: int) -> None:
        self.proc.stdin.write(b"%d\n" % t0_ns)
        self.proc.stdin.flush()

    def read_lines(self) -> list[bytes]:
        # the burst lines; the result line at the end is not one
        out = [ln for ln in self._lines.read() if ln.startswith(b"B ")]
        code = self.proc.poll()
        if code not in (None, 0) and not self._reported_exit:
            self._reported_exit = True
            err = self.proc.stderr.read().decode(errors="replace").strip()
            out.append(b"E container %s: memory worker exited with %d: %s" % (
                self.name.encode(), code, err[-300:].encode()))
        return out

    def quit(self) -> None:
        self.kill()

    def kill(self) -> None:
        stop_session(self.proc)


def start_containers(w: dict, containers: list[dict], cgroups: list[str], host, cg, binary,
                     max_s: float, alone_s: float, seed: int
                     ) -> tuple[list[ContainerProc], list[float], list[str]]:
    """Measure one thread of the shape alone, set each container's cpuset,
    start its worker (faulted in, waiting for t0) and put it in its class.
    Returns the workers, the measurements of ns per access alone and the
    classes made."""
    shape = containers[0]["args"]
    samples = calibrate({"memlookup": shape}, min(containers[0]["cpus"]), alone_s,
                        binary)["memlookup"]
    ns = min(samples)
    procs: list[ContainerProc] = []
    try:
        for i, (c, cgroup) in enumerate(zip(containers, cgroups)):
            host.set_cpuset(cgroup, c["cpus"])
            per_burst = max(1, int(math.ceil(c["run_us"] * 1000 / ns)))
            cmd = [str(binary), *shape, "--threads", str(c["threads"]),
                   "--report-every", str(per_burst), "--start-at-stdin", "yes",
                   # layout_seed + i as the simulator's containers draw theirs
                   "--seed", str(seed + i), "--duration", repr(max_s),
                   "--max-seconds", repr(max_s + 30)]
            procs.append(ContainerProc(cgroup, cmd, cg.procs_files(cgroup), c["cpus"]))
        classes = apply_partitions(host, w, containers, cgroups)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs, samples, classes


def occupancy_mb(host, classes: list[str]) -> float:
    """CMT llc_occupancy of the containers' classes now, summed, MiB (NaN
    without classes: the root group is shared with the whole host)."""
    named = [c for c in classes if c]
    if not named:
        return math.nan
    total = 0
    for c in named:
        total += sum(int(d.get("llc_occupancy", 0)) for d in host.rdt_mon(c).values())
    return total / (1 << 20)


def perf_summary(samples, offset_s: float, warmup_s: float, stall_event: str,
                 priority: bool) -> dict[str, float]:
    """The memory summary columns from the run's per-cgroup count samples
    (interval times since perf started, ``offset_s`` before t0): each
    container's intervals that end after the warm-up."""
    intervals: dict[tuple[str, float], dict] = {}
    for s in samples:
        if s.cgroup is None or s.time_s is None or s.time_s - offset_s <= warmup_s:
            continue
        intervals.setdefault((s.cgroup, s.time_s), {})[s.event.split(":")[0]] = s.value
    windows: dict[str, dict] = {}
    for (cgroup, _), values in sorted(intervals.items()):
        ipce.add_interval(windows.setdefault(cgroup, {}), values, stall_event)
    return ipce.summary([(priority, w) for w in windows.values()], stall_event)


class MemLookupRunner(BurstRunner):
    """The ``memlookup`` capability: the containers under
    ``/<parent_cgroup>`` (default ``memlookup``), planned once the run's
    topology is known; the memory columns at the end."""

    RUNS = "memory-lookup containers"

    def __init__(self, cfg: dict, b: RealBackend, trace=None):
        super().__init__(cfg, b)
        try:
            self.names = container_names(self.w)
        except MemLookupError as e:
            raise RealRunError(str(e)) from None
        missing = detect.rdt_missing() if needs_rdt(self.w) else None
        if missing:
            raise RealRunError(f"workload.partitions needs RDT (resctrl), which backend=real "
                               f"cannot provide on this host: {missing}; run without "
                               f"partitions (workload.partitions=null) to share the LLC")
        self.parent = str(self.w.get("parent_cgroup") or "memlookup").strip("/")
        self.classes: list[str] = []
        self.occupancy_mb = math.nan

    def start(self, s: Setup) -> None:
        for c in s.cgroups:
            apply_cgroup(s.cg, s.host, c, self.w, self.w)
        try:
            self.groups = plan(self.w, s.host.cores_by_socket())
            # start_containers stops the ones it started if a later one fails
            self.workers, samples, self.classes = start_containers(
                self.w, self.groups, s.cgroups, s.host, s.cg, build_memworker(), s.max_s,
                float(self.b.job_alone_s), s.seed)
        except MemLookupError as e:
            raise RealRunError(str(e)) from None
        self.alone_samples = {"memlookup": samples}
        self.alone_shapes = {"memlookup": self.groups[0]["args"]}
        self.alone_cpu = min(self.groups[0]["cpus"])

    def perf_events(self) -> tuple[str, ...]:
        # the memory columns: miss rate, IPCE
        return DEFAULT_EVENTS + tuple(detect.perf_accepts(
            ("cache-references", "cache-misses", str(self.b.stall_event))))

    def finish(self, host) -> None:
        # before the run's classes are removed
        self.occupancy_mb = occupancy_mb(host, self.classes)

    def summary_columns(self, perf_samples, perf_offset_s: float,
                        warmup_ns: int) -> dict[str, float]:
        return {**perf_summary(perf_samples or [], perf_offset_s, warmup_ns / NS,
                               str(self.b.stall_event),
                               str(self.w.get("tag") or "priority") == "priority"),
                "llc_occupancy_mb": self.occupancy_mb}
