"""``workload=clients``: closed-loop clients against function cgroups, the
load ``hey -c N`` or ``wrk -c N`` puts on a service.

Each function (a cgroup ``parent_cgroup/func-N``, as poisson's) has
``clients`` clients.  Each client is a SimPy process (the engine is a
simpy.Environment, sim/engine.py): it sends a request, whose threads are
forked in its function's cgroup exactly as poisson forks them (common.ForkJoin:
``threads_per_request`` threads, the demand split evenly), waits for the
response (the event the request's last thread's exit succeeds), thinks
``think_s`` (exponential or deterministic, ``think``), and repeats, until the
run ends or it has sent ``requests_per_client`` requests.  Every client sends
its first request at t = 0.

Each client draws its demands and think times from streams of its own
(``workload/func-N/client-C/service`` and ``.../think``), so adding a client
or a function does not change the others' draws.

Only the direct request path is modelled: the other paths
(sim/workloads/request_path.py) end a request through their own hops, which
these clients do not wait on.

REAL_BACKEND is None: the real backend's closed loop (backends/real,
``worker_pool`` with ``clients``) drives one worker pool; a closed loop per
function cgroup is not built there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.config import MAX_COUNT, MISSING, tunable
from sim.engine import s_to_ns
from sim.workloads.base import Workload
from sim.workloads.common import ForkJoin, ServiceTime, function_cgroup
from sim.workloads.functions import FunctionsConfig
from sim.workloads.request_path import DIRECT

THINK_DISTRIBUTIONS = ("exp", "det")


@dataclass
class ClientsConfig(FunctionsConfig):
    clients: int = tunable(MISSING, range=(1, MAX_COUNT))          # per function
    think_s: float = tunable(MISSING, range=(0, None))        # mean think time
    think: str = tunable("exp", choices=THINK_DISTRIBUTIONS)
    # requests each client sends (null: until the run ends)
    requests_per_client: Optional[int] = tunable(None, range=(1, None))

    @classmethod
    def rate_per_function(cls, w):
        # a client sends again after its response and its think time
        return w["clients"] / (w["think_s"] + w["mean_service_s"]), "clients"

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        c.require(f"{key}.request_path", c.get(f"{key}.request_path") == DIRECT,
                  f"closed-loop clients wait on the direct path only (set "
                  f"{key}.request_path = {DIRECT})")


class ClientsWorkload(ForkJoin, Workload):
    CONFIG = ClientsConfig
    REAL_BACKEND = None

    def __init__(self, cfg: ClientsConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        if cfg.request_path != DIRECT:
            raise ValueError(f"workload.request_path = {cfg.request_path!r}: workload=clients "
                             f"supports {DIRECT!r} only")
        self.k = cfg.threads_per_request
        self.nice = cfg.nice
        self.ws_bytes = cfg.working_set_kb * 1024
        self.think_ns = float(s_to_ns(float(cfg.think_s)))
        self.think_exp = cfg.think == "exp"
        self.limit = cfg.requests_per_client
        # per function: name, cgroup, the CPU its last request forked from
        self.functions = []
        for i in range(cfg.functions):
            name = f"func-{i}"
            tg, hint = function_cgroup(machine, cfg, name, i)
            self.functions.append([name, tg, hint])
        self.responses = {}   # request -> the event its client waits on

    def start(self):
        for i in range(len(self.functions)):
            for c in range(self.cfg.clients):
                self.engine.process(self.client(i, c))

    def client(self, i: int, c: int):
        """One client of function ``i``: send, wait for the response, think."""
        fn = self.functions[i]
        name, tg = fn[0], fn[1]
        cfg = self.cfg
        service = ServiceTime(cfg.service, float(cfg.mean_service_s), float(cfg.service_sigma),
                              self.engine.rng(f"workload/{name}/client-{c}/service"))
        think = self.engine.rng(f"workload/{name}/client-{c}/think")
        sent = 0
        while self.limit is None or sent < self.limit:
            req = self.new_request(name, tg, service.sample_ns(), self.k)
            response = self.responses[req] = self.engine.event()
            fn[2] = self.start_request(req, tg, fn[2])
            sent += 1
            yield response
            yield self.engine.timeout(int(think.exponential(self.think_ns)) if self.think_exp
                                      else int(self.think_ns))

    def request_done(self, req) -> None:
        super().request_done(req)
        self.responses.pop(req).succeed(req)


WORKLOAD = ClientsWorkload
