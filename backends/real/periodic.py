"""The ``periodic`` capability on the real host (workload=periodic, ebizzy):
one native worker per group in periodic mode (backends/real/workers.py),
its threads alternating ``run_ms`` of CPU and ``sleep_ms`` from t0; each
run burst is a request row, as the simulator records it.
"""
from __future__ import annotations

from backends.real import cgroupfs
from backends.real.cgroupfs import parse_cpulist
from backends.real.config import RealBackend
from backends.real.runner import BurstRunner, RealRunError, Setup, apply_cgroup
from backends.real.workers import WorkerProc
from policies.kernel import config as kernel_config
from sim.engine import NSEC_PER_USEC
from sim.sched_class import SCHED_RR
from sim.workloads import typed_config, workload_class


def periodic_groups(cfg: dict) -> list[dict]:
    """The groups of a run's periodic-capability workload as its class runs
    them in the simulator (PeriodicWorkload.thread_groups): each group's
    keys plus its threads' nices, run and sleep (us), its SCHED_RR priority
    and whether it sets its own cpu.max."""
    cls = workload_class(cfg["workload"])
    sched = kernel_config(cfg["scheduler"])
    return [{**dict(g.cfg), "nices": g.nices, "run_us": round(g.run_ns / NSEC_PER_USEC),
             "sleep_us": round(g.sleep_ns / NSEC_PER_USEC), "own_bandwidth": g.bandwidth is g.cfg,
             "rt_priority": g.rt_priority(sched)}
            for g in cls.thread_groups(typed_config(cls, cfg["workload"]))]


class PeriodicRunner(BurstRunner):
    """A cgroup ``/<group>`` per group: its weight, its own cpu.max (or the
    workload's), its cpuset and task policy."""

    RUNS = "periodic threads"
    SPINS_ON_CPU_CLOCK = True

    def __init__(self, cfg: dict, b: RealBackend, trace=None):
        super().__init__(cfg, b)
        try:
            self.groups = periodic_groups(self.cfg)
        except ValueError as e:
            raise RealRunError(str(e)) from None
        self.names = [g["name"] for g in self.groups]

    def start(self, s: Setup) -> None:
        for g, c in zip(self.groups, s.cgroups):
            apply_cgroup(s.cg, s.host, c, g, g if g["own_bandwidth"] else self.w)
            gcpus = s.cpus
            if g.get("cpuset"):
                gcpus = set(parse_cpulist(str(g["cpuset"])))
                if not gcpus <= s.cpus:
                    raise RealRunError(f"group {g['name']}: cpuset {g['cpuset']} is not "
                                       f"inside the run's CPUs {cgroupfs.format_cpulist(s.cpus)}")
                s.cg.set_cpuset(c, cgroupfs.format_cpulist(gcpus))
            self.workers.append(WorkerProc(
                s.binary, g["name"], s.max_s, attach=lambda pid, c=c: s.cg.attach(c, pid),
                cpus=gcpus, periodic=(g["threads"], g["run_us"], g["sleep_us"]),
                nices=g["nices"]))

    def rt_policies(self) -> dict[str, tuple[bool, int]]:
        rr = super().rt_policies()
        for g, c in zip(self.groups, self.cgroups):
            if g.get("task_policy") is not None:
                rr[c] = (g["task_policy"] == SCHED_RR, g["rt_priority"])
        return rr
