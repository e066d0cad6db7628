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
from sim.workloads.common import BANDWIDTH_KEYS
from sim.workloads.ebizzy import resolve
from sim.workloads.periodic import _nices


def periodic_groups(w: dict) -> list[dict]:
    """The groups of a periodic/ebizzy workload as sim/workloads/periodic.py
    builds them: name, threads, nices, run/sleep (us), cpuset, weights,
    task policy, and whether the group has its own cpu.max keys."""
    if w["name"] == "ebizzy":
        w = resolve(w)
    groups = w.get("groups") or [{
        "name": w.get("name") or "periodic", "threads": w["threads"], "nice": w.get("nice", 0),
        "cgroup_weight": w.get("cgroup_weight"), "cgroup_shares": w.get("cgroup_shares"),
        "cpuset": w.get("cpuset")}]
    out = []
    for g in groups:
        g = dict(g)
        name = str(g["name"])
        run_ms = w["run_ms"] if g.get("run_ms") is None else g["run_ms"]
        sleep_ms = w.get("sleep_ms", 0.0) if g.get("sleep_ms") is None else g["sleep_ms"]
        g.update(name=name, threads=int(g["threads"]),
                 nices=_nices(g.get("nice", 0), int(g["threads"]), f"workload.groups[{name}]"),
                 run_us=int(round(float(run_ms) * 1000)),
                 sleep_us=int(round(float(sleep_ms or 0) * 1000)),
                 own_bandwidth=any(g.get(k) is not None for k in BANDWIDTH_KEYS))
        if g["run_us"] <= 0 or g["sleep_us"] < 0:
            raise ValueError(f"workload group {name}: run_ms must be > 0, sleep_ms >= 0")
        out.append(g)
    return out


class PeriodicRunner(BurstRunner):
    """A cgroup ``/<group>`` per group: its weight, its own cpu.max (or the
    workload's), its cpuset and task policy."""

    RUNS = "periodic threads"

    def __init__(self, cfg: dict, b: RealBackend, trace=None):
        super().__init__(cfg, b)
        try:
            self.groups = periodic_groups(self.w)
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
                rr[c] = (g["task_policy"] == "rr", int(g.get("rt_priority") or 50))
        return rr
