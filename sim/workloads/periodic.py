"""``workload=periodic``: threads that each run ``run_ms`` of CPU, then
sleep ``sleep_ms`` (0: a CPU hog).  Each run burst is a request from its
release to its completion, so queueing shows up as latency.  Threads live
in one cgroup, or in the cgroups listed under ``groups`` (each may set its
own ``run_ms`` and ``sleep_ms``, and a ``task_policy`` such as rr)."""
from __future__ import annotations

from sim.engine import NSEC_PER_MSEC
from sim.task import Request
from sim.workloads.common import (BANDWIDTH_KEYS, apply_cgroup_bandwidth, cgroup_shares,
                                   parse_cpuset)


def _nices(nice, threads: int, where: str) -> list[int]:
    if isinstance(nice, int):
        return [nice] * threads
    nices = [int(n) for n in nice]
    if len(nices) != threads:
        raise ValueError(f"{where}.nice lists {len(nices)} values for {threads} threads")
    return nices


def _ms_to_ns(value, default) -> int:
    return int(round(float(default if value is None else value) * NSEC_PER_MSEC))


class PeriodicWorkload:
    def __init__(self, cfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        ws_bytes = int(cfg.get("working_set_kb", 0)) * 1024
        # without groups, one cgroup named after the workload (ebizzy reuses this model)
        groups = cfg.get("groups") or [{
            "name": cfg.get("name") or "periodic", "threads": cfg["threads"],
            "nice": cfg.get("nice", 0),
            "cgroup_weight": cfg.get("cgroup_weight"), "cgroup_shares": cfg.get("cgroup_shares"),
            "cpuset": cfg.get("cpuset")}]
        self.threads = []
        # per thread: (run_ns, sleep_ns), by pid
        self.period: dict[int, tuple[int, int]] = {}
        for g in groups:
            gname = str(g["name"])
            run_ns = _ms_to_ns(g.get("run_ms"), cfg["run_ms"])
            sleep_ns = _ms_to_ns(g.get("sleep_ms"), cfg.get("sleep_ms", 0.0))
            if run_ns <= 0 or sleep_ns < 0:
                raise ValueError(f"workload group {gname}: run_ms must be > 0, sleep_ms >= 0")
            tg = machine.create_group(gname, cgroup_shares(g), parse_cpuset(g.get("cpuset")))
            # a group's own cpu.max keys, if it sets any, else the workload's
            own = any(g.get(k) is not None for k in BANDWIDTH_KEYS)
            apply_cgroup_bandwidth(machine, tg, g if own else cfg)
            if g.get("task_policy") is not None:
                machine.set_group_task_policy(tg, g["task_policy"],
                                              int(g.get("rt_priority") or 50))
            n = int(g["threads"])
            for j, nice in enumerate(_nices(g.get("nice", 0), n, f"workload.groups[{gname}]")):
                t = machine.new_task(f"{gname}/{j}", tg, nice, run_ns, ws_bytes, self)
                self.threads.append(t)
                self.period[t.pid] = (run_ns, sleep_ns)

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
