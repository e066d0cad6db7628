"""``workload=periodic``: threads that each run ``run_ms`` of CPU, then
sleep ``sleep_ms`` (0: a CPU hog).  Each run burst is a request from its
release to its completion, so queueing shows up as latency.  Threads live
in one cgroup, or in the cgroups listed under ``groups``."""
from __future__ import annotations

from sim.engine import NSEC_PER_MSEC
from sim.task import Request
from sim.workloads.common import cgroup_shares, parse_cpuset


def _nices(nice, threads: int, where: str) -> list[int]:
    if isinstance(nice, int):
        return [nice] * threads
    nices = [int(n) for n in nice]
    if len(nices) != threads:
        raise ValueError(f"{where}.nice lists {len(nices)} values for {threads} threads")
    return nices


class PeriodicWorkload:
    def __init__(self, cfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        self.run_ns = int(round(float(cfg["run_ms"]) * NSEC_PER_MSEC))
        self.sleep_ns = int(round(float(cfg.get("sleep_ms", 0.0)) * NSEC_PER_MSEC))
        if self.run_ns <= 0:
            raise ValueError("workload.run_ms must be > 0")
        ws_bytes = int(cfg.get("working_set_kb", 0)) * 1024
        groups = cfg.get("groups") or [{
            "name": "periodic", "threads": cfg["threads"], "nice": cfg.get("nice", 0),
            "cgroup_weight": cfg.get("cgroup_weight"), "cgroup_shares": cfg.get("cgroup_shares"),
            "cpuset": cfg.get("cpuset")}]
        self.threads = []
        for g in groups:
            gname = str(g["name"])
            tg = machine.create_group(gname, cgroup_shares(g), parse_cpuset(g.get("cpuset")))
            n = int(g["threads"])
            for j, nice in enumerate(_nices(g.get("nice", 0), n, f"workload.groups[{gname}]")):
                self.threads.append(machine.new_task(f"{gname}/{j}", tg, nice, self.run_ns,
                                                     ws_bytes, self))

    def start(self):
        ncpus = self.machine.topology.nr_cpus
        for i, t in enumerate(self.threads):
            t.request = Request(t.tg.name, t.tg.name, 0, self.run_ns)
            self.recorder.request_arrived(t.request)
            self.machine.wake_up_new_task(t, i % ncpus)

    def burst_done(self, t):
        now = self.engine.now
        req = t.request
        req.end = now
        self.recorder.request_done(req)
        t.remaining = self.run_ns
        t.request = Request(req.function, req.cgroup, now + self.sleep_ns, self.run_ns)
        self.recorder.request_arrived(t.request)
        if self.sleep_ns == 0:
            t.request.start = now
        return self.sleep_ns


WORKLOAD = PeriodicWorkload
