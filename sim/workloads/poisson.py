"""``workload=poisson``: open-loop Poisson arrivals per function cgroup, a
new thread per request (fork-join over ``threads_per_request`` threads,
the demand split evenly; the request ends when its last thread exits)."""
from __future__ import annotations

from sim.engine import NSEC_PER_SEC
from sim.workloads import request_path
from sim.workloads.common import ForkJoin, ServiceTime, apply_cgroup_bandwidth, cgroup_shares


class PoissonWorkload(ForkJoin):
    def __init__(self, cfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        self.k = int(cfg.get("threads_per_request", 1))
        self.nice = int(cfg.get("nice", 0))
        self.ws_bytes = int(cfg.get("working_set_kb", 0)) * 1024
        rate = float(cfg["rate_rps"])
        self.mean_gap_ns = NSEC_PER_SEC / rate
        parent = str(cfg.get("parent_cgroup") or "").strip("/")
        shares = cgroup_shares(cfg)
        ncpus = machine.topology.nr_cpus
        self.path = request_path.build(cfg, self)
        self.functions = []
        for i in range(int(cfg["functions"])):
            name = f"func-{i}"
            tg = machine.create_group(f"{parent}/{name}" if parent else name, shares)
            apply_cgroup_bandwidth(machine, tg, cfg)
            if self.path is not None:
                self.path.add_function(tg)
            service = ServiceTime(cfg.get("service", "exp"), float(cfg["mean_service_s"]),
                                  float(cfg.get("service_sigma", 1.0)),
                                  self.engine.rng(f"workload/{name}/service"))
            # the CPU the function's dispatcher last forked from
            self.functions.append([name, tg, self.engine.rng(f"workload/{name}/arrivals"),
                                   service, i % ncpus])

    def start(self):
        for i, fn in enumerate(self.functions):
            self.engine.call_later(int(fn[2].exponential(self.mean_gap_ns)), self._arrive, i)

    def _arrive(self, i):
        name, tg, arrivals, service, hint = self.functions[i]
        self.functions[i][4] = self.fork_request(name, tg, service.sample_ns(), self.k, hint)
        self.engine.call_later(int(arrivals.exponential(self.mean_gap_ns)), self._arrive, i)


WORKLOAD = PoissonWorkload
