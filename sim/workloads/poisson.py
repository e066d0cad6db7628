"""``workload=poisson``: open-loop Poisson arrivals per function cgroup, a
new thread per request (fork-join over ``threads_per_request`` threads,
the demand split evenly; the request ends when its last thread exits)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sim.config import MISSING, tunable
from sim.engine import NSEC_PER_SEC, RngStream, s_to_ns
from sim.workloads import request_path
from sim.workloads.base import Workload
from sim.workloads.common import ForkJoin, PoissonSource, ServiceTime, function_cgroup
from sim.workloads.functions import FunctionsConfig
from sim.workloads.trace import make_trace


@dataclass
class PoissonConfig(FunctionsConfig):
    rate_rps: float = tunable(MISSING, above=0)   # per function

    @classmethod
    def rate_per_function(cls, w):
        return w["rate_rps"], "rate_rps"


class PoissonWorkload(ForkJoin, Workload):
    CONFIG = PoissonConfig
    REAL_BACKEND = "functions"

    def __init__(self, cfg: PoissonConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.k = cfg.threads_per_request
        self.nice = cfg.nice
        self.ws_bytes = cfg.working_set_kb * 1024
        rate = float(cfg.rate_rps)
        self.mean_gap_ns = NSEC_PER_SEC / rate
        self.path = request_path.build(cfg, self)
        self.functions = []
        for i in range(cfg.functions):
            name = f"func-{i}"
            tg, hint = function_cgroup(machine, cfg, name, i)
            if self.path is not None:
                self.path.add_function(tg)
            service = ServiceTime(cfg.service, float(cfg.mean_service_s),
                                  float(cfg.service_sigma),
                                  self.engine.rng(f"workload/{name}/service"))
            self.functions.append(PoissonSource(self, name, tg,
                                                self.engine.rng(f"workload/{name}/arrivals"),
                                                service, self.k, self.mean_gap_ns, hint))

    @staticmethod
    def arrivals(cfg: PoissonConfig, seed: int, duration_s: float) -> pa.Table:
        """The requests this workload makes for ``seed`` over [0, duration_s),
        drawn from the streams and with the integer-nanosecond arithmetic
        of the run itself (``workload/func-N/arrivals``, ``.../service``)."""
        duration_ns = s_to_ns(float(duration_s))
        mean_gap_ns = NSEC_PER_SEC / float(cfg.rate_rps)
        names, arrivals, demands = [], [], []
        for i in range(cfg.functions):
            name = f"func-{i}"
            arr = RngStream(seed, f"workload/{name}/arrivals")
            svc = ServiceTime(cfg.service, float(cfg.mean_service_s), float(cfg.service_sigma),
                              RngStream(seed, f"workload/{name}/service"))
            t = int(arr.exponential(mean_gap_ns))
            while t < duration_ns:
                names.append(name)
                arrivals.append(t / NSEC_PER_SEC)
                demands.append(svc.sample_ns() / NSEC_PER_SEC)
                t += int(arr.exponential(mean_gap_ns))
        return make_trace(names, arrivals, demands, [cfg.threads_per_request] * len(names))

    def start(self):
        for source in self.functions:
            source.start()


WORKLOAD = PoissonWorkload
