"""``workload=periodic``: threads that each run ``run_ms`` of CPU, then
sleep ``sleep_ms`` (0: a CPU hog).  Each run burst is a request from its
release to its completion, so queueing shows up as latency.  Threads live
in one cgroup, or in the cgroups listed under ``groups`` (each may set its
own ``run_ms`` and ``sleep_ms``, and a ``task_policy`` such as rr)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from sim.config import MAX_COUNT, MISSING, MappingReads, tunable
from sim.engine import NSEC_PER_MSEC
from sim.footprint import Term
from sim.sched_class import RT_PRIORITY_RANGE, TASK_POLICIES
from sim.task import Request
from sim.workloads.base import Workload, WorkloadConfig
from sim.workloads.common import (BANDWIDTH_KEYS, CGROUP_PATH, CPU_SHARES_RANGE,
                                  CPU_WEIGHT_RANGE, apply_cgroup_bandwidth, cgroup_shares,
                                  check_bandwidth, check_cpuset, check_nice, parse_cpuset)


@dataclass
class PeriodicGroup(MappingReads):
    """A group of threads in a cgroup of its own (``workload.groups[i]``)."""
    # Groups are usually written on the command line, so every field but the
    # name has a default here (there is no YAML to supply one).
    name: str = tunable(MISSING, pattern=CGROUP_PATH)
    threads: int = tunable(1, range=(1, MAX_COUNT))
    nice: Any = 0  # int, or a list with one nice per thread
    cgroup_weight: int = tunable(100, range=CPU_WEIGHT_RANGE)
    cgroup_shares: Optional[int] = tunable(None, range=CPU_SHARES_RANGE)
    cpuset: Optional[str] = None  # e.g. "0-3,6"
    run_ms: Optional[float] = tunable(None, above=0)    # null: the workload's run_ms
    sleep_ms: Optional[float] = tunable(None, range=(0, None))  # null: the workload's
    # normal | rr; null: scheduler.task_policy
    task_policy: Optional[str] = tunable(None, choices=TASK_POLICIES)
    # 1..99 for rr; null: scheduler.rt_priority
    rt_priority: Optional[int] = tunable(None, range=RT_PRIORITY_RANGE)
    # cpu.max of this group; all null: the workload's (see PeriodicConfig)
    quota_us: Optional[int] = None
    period_us: Optional[int] = None
    burst_us: Optional[int] = None
    cpu_max: Optional[str] = None
    cpu_max_burst: Optional[int] = None

    @classmethod
    def check(cls, c, key: str) -> None:
        threads = c.get(f"{key}.threads")
        if threads >= 1:
            check_nice(c, f"{key}.nice", threads)
        if c.get(f"{key}.cpuset") is not None:
            check_cpuset(c, f"{key}.cpuset", _host_cpus(c))
        check_bandwidth(c, key)


def _host_cpus(c) -> int:
    return c.get("host.sockets") * c.get("host.cores") * c.get("host.threads_per_core")


@dataclass
class PeriodicConfig(WorkloadConfig):
    threads: int = tunable(MISSING, range=(1, MAX_COUNT))
    run_ms: float = tunable(MISSING, above=0)
    sleep_ms: float = tunable(0.0, range=(0, None))  # 0 = CPU hog
    nice: Any = 0  # int, or a list with one nice per thread
    cgroup_weight: int = tunable(100, range=CPU_WEIGHT_RANGE)
    cgroup_shares: Optional[int] = tunable(None, range=CPU_SHARES_RANGE)
    # thread groups in cgroups of their own; when set they replace threads,
    # nice, cgroup_weight and cgroup_shares above
    groups: Optional[List[PeriodicGroup]] = None
    working_set_kb: int = tunable(0, range=(0, None))
    # CFS bandwidth of each group's cgroup, spelled as in
    # sim/workloads/functions.py (period_us null: 100000, burst_us null: 0)
    quota_us: Optional[int] = None
    period_us: Optional[int] = 100_000
    burst_us: Optional[int] = 0
    cpu_max: Optional[str] = None
    cpu_max_burst: Optional[int] = None

    @classmethod
    def footprint(cls, w, duration_s: float) -> list:
        """Its threads, a cgroup per group, and a request per run burst."""
        groups = w["groups"] or [{"threads": w["threads"], "run_ms": None, "sleep_ms": None}]
        terms = [Term("cgroup", len(groups), "groups")]
        for g in groups:
            # a group's null run_ms/sleep_ms are the workload's (ebizzy's may
            # be null too: its preset's, not counted)
            run_ms, sleep_ms = (g[k] if g[k] is not None else w[k] for k in ("run_ms", "sleep_ms"))
            terms.append(Term("thread", g["threads"], "threads"))
            if run_ms:
                cycles = duration_s * 1e3 / (run_ms + (sleep_ms or 0))
                terms.append(Term("request", g["threads"] * cycles, "threads"))
        return terms

    @classmethod
    def check(cls, c, key: str) -> None:
        if c.get(f"{key}.threads") >= 1:
            check_nice(c, f"{key}.nice", c.get(f"{key}.threads"))
        check_bandwidth(c, key)
        groups = c.get(f"{key}.groups")
        if groups is None:
            return
        c.require(f"{key}.groups", len(groups) > 0, "must not be empty (use null for no groups)")
        names = [g["name"] for g in groups]
        for i, name in enumerate(names):
            c.require(f"{key}.groups[{i}].name", names.count(name) == 1,
                      "must be unique among groups")


def _nices(nice, threads: int, where: str) -> list[int]:
    if isinstance(nice, int):
        return [nice] * threads
    nices = [int(n) for n in nice]
    if len(nices) != threads:
        raise ValueError(f"{where}.nice lists {len(nices)} values for {threads} threads")
    return nices


def _ms_to_ns(value, default) -> int:
    return int(round(float(default if value is None else value) * NSEC_PER_MSEC))


@dataclass(frozen=True)
class ThreadGroup:
    """A group as its threads run: its config, each thread's run and sleep
    (ns) and nice, and the config whose cpu.max keys its cgroup gets (its
    own if it sets any, else the workload's)."""
    cfg: PeriodicGroup
    run_ns: int
    sleep_ns: int
    nices: list
    bandwidth: Any

    def rt_priority(self, sched) -> int:
        """The SCHED_RR priority of an rr group: its own, else the
        scheduler option's (``sched``: its SchedConfig)."""
        return self.cfg.rt_priority if self.cfg.rt_priority is not None else sched.rt_priority


class PeriodicWorkload(Workload):
    CONFIG = PeriodicConfig
    REAL_BACKEND = "periodic"

    def __init__(self, cfg: PeriodicConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        ws_bytes = cfg.working_set_kb * 1024
        self.threads = []
        # per thread: (run_ns, sleep_ns), by pid
        self.period: dict[int, tuple[int, int]] = {}
        for g in self.thread_groups(cfg):
            gname = g.cfg.name
            tg = machine.create_group(gname, cgroup_shares(g.cfg), parse_cpuset(g.cfg.cpuset))
            apply_cgroup_bandwidth(machine, tg, g.bandwidth)
            if g.cfg.task_policy is not None:
                machine.set_group_task_policy(tg, g.cfg.task_policy,
                                              g.rt_priority(machine.policy.cfg))
            for j, nice in enumerate(g.nices):
                t = machine.new_task(f"{gname}/{j}", tg, nice, g.run_ns, ws_bytes, self)
                self.threads.append(t)
                self.period[t.pid] = (g.run_ns, g.sleep_ns)

    @classmethod
    def thread_groups(cls, cfg: PeriodicConfig) -> list[ThreadGroup]:
        """The groups as their threads run, in the simulator and on the real
        host alike (backends/real/periodic.py); without ``groups``, one
        cgroup named after the workload (ebizzy reuses this model)."""
        groups = cfg.groups or [PeriodicGroup(
            name=cfg.name, threads=cfg.threads, nice=cfg.nice,
            cgroup_weight=cfg.cgroup_weight, cgroup_shares=cfg.cgroup_shares)]
        out = []
        for g in groups:
            run_ns = _ms_to_ns(g.run_ms, cfg.run_ms)
            sleep_ns = _ms_to_ns(g.sleep_ms, cfg.sleep_ms)
            if run_ns <= 0 or sleep_ns < 0:
                raise ValueError(f"workload group {g.name}: run_ms must be > 0, sleep_ms >= 0")
            # a group's own cpu.max keys, if it sets any, else the workload's
            own = any(g.get(k) is not None for k in BANDWIDTH_KEYS)
            out.append(ThreadGroup(g, run_ns, sleep_ns,
                                   _nices(g.nice, g.threads, f"workload.groups[{g.name}]"),
                                   g if own else cfg))
        return out

    def start(self):
        ncpus = self.machine.topology.nr_cpus
        for i, t in enumerate(self.threads):
            t.request = Request(t.tg.name, t.tg.name, 0, t.remaining)
            self.recorder.request_arrived(t.request)
            self.machine.wake_up_new_task(t, i % ncpus)

    def burst_done(self, t):
        now = self.engine.now
        req = t.request
        req.end = now
        self.recorder.request_done(req)
        run_ns, sleep_ns = self.period[t.pid]
        t.remaining = run_ns
        t.request = Request(req.function, req.cgroup, now + sleep_ns, run_ns)
        self.recorder.request_arrived(t.request)
        if sleep_ns == 0:
            t.request.start = now
        return sleep_ns


WORKLOAD = PeriodicWorkload
