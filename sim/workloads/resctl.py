"""``workload=resctl`` (and ``resctl_parallel``, ``resctl_mix``): the LAGS
benchmark's steady "serverful" load, after resctl-demo's rd-hashd.

Each function is a cgroup ``parent_cgroup/func-i`` serving a closed loop:
it keeps ``concurrency`` requests in flight and admits a new one the moment
one completes (no think time).  With ``request_path: rdhashd`` each request
goes through rd-hashd's dispatch thread and worker pool and sleeps three
times (sim/workloads/hashd.py); the default ``direct`` forks a thread per
request that only computes, the reading that the benchmark replaced
rd-hashd's hashing and sleeps with its CPU-bound computation.  Every ``control_period_s`` the
function retunes its concurrency with rd-hashd's control law:

- a latency controller caps concurrency: with the error
  ``e = 1 - p(lat_target_pct) / lat_target`` over the requests completed in
  the period, ``concurrency_max *= 1 + PID(e)`` (and when latency is in
  charge it first drops to the current concurrency);
- a throughput controller grows concurrency toward ``rps_target``
  (null: no target, so it grows until the latency cap holds it):
  ``concurrency *= 1 + PID(1 - rps / rps_target)``, capped at
  ``concurrency_max``; the integral of the controller not in charge is
  reset.

The defaults are rd-hashd's (p90 at 100 ms, 1 s period, latency PID
0.1/0.01/0.01, RPS PID 0.25/0.01/0.01).  Requests fork
``threads_per_request`` threads (resctl_parallel: 2) and their CPU demand
follows ``service`` (resctl_mix: 30% 10 ms, 40% 100 ms, 30% 1000 ms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

from sim.config import MAX_COUNT, MISSING, tunable
from sim.engine import NSEC_PER_SEC
from sim.workloads import request_path
from sim.workloads.base import Workload
from sim.workloads.common import SERVICE_DISTRIBUTIONS, ForkJoin, ServiceTime, function_cgroup
from sim.workloads.functions import FunctionsConfig

MIX = "mix"
# rd-hashd's PID gains (kp, ki, kd) of its latency and throughput controllers
LAT_PID = (0.1, 0.01, 0.01)
RPS_PID = (0.25, 0.01, 0.01)


@dataclass
class ResctlConfig(FunctionsConfig):
    model: str = "resctl"  # the simulator workload (resctl for every variant)
    service: str = tunable("lognormal", choices=SERVICE_DISTRIBUTIONS + (MIX,))
    # checked in check(): service = mix draws from mix_s instead
    mean_service_s: float = MISSING
    service_sigma: float = tunable(0.33, above=0)
    mix_s: Optional[List[float]] = None  # service = mix: demands (s) and their probabilities
    mix_p: Optional[List[float]] = None
    lat_target_s: float = tunable(0.1, above=0)
    lat_target_pct: float = tunable(0.9, above=0)   # and <= 1 (check)
    control_period_s: float = tunable(1.0, above=0)
    rps_target: Optional[float] = tunable(None, above=0)  # null: no throughput target
    initial_concurrency: int = tunable(1, range=(1, MAX_COUNT))
    concurrency_max: int = 65536  # >= initial_concurrency (check)

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        c.require(f"{key}.model", c.get(f"{key}.model") == "resctl", "must be resctl")
        if c.get(f"{key}.service") == MIX:
            _check_mix(c, key)
        elif c.get(f"{key}.service") in SERVICE_DISTRIBUTIONS:
            c.positive(f"{key}.mean_service_s")
        pct = c.get(f"{key}.lat_target_pct")
        if math.isfinite(pct) and pct > 0:
            c.require(f"{key}.lat_target_pct", pct <= 1, "must be <= 1 (a quantile)")
        c.at_least(f"{key}.concurrency_max", c.get(f"{key}.initial_concurrency"))


def _check_mix(c, key: str) -> None:
    """service = mix: demands mix_s drawn with probabilities mix_p."""
    mix_s, mix_p = c.get(f"{key}.mix_s"), c.get(f"{key}.mix_p")
    if not c.require(f"{key}.mix_s", bool(mix_s), "must list demands when service = mix",
                     None if mix_s is None else list(mix_s)):
        return
    if not c.require(f"{key}.mix_p", mix_p is not None and len(mix_p) == len(mix_s),
                     "must give one probability per mix_s entry",
                     None if mix_p is None else list(mix_p)):
        return
    for i in range(len(mix_s)):
        c.positive(f"{key}.mix_s[{i}]")
        c.within(f"{key}.mix_p[{i}]", (0, 1))
    c.require(f"{key}.mix_p", abs(sum(mix_p) - 1) < 1e-9, "must sum to 1", list(mix_p))


class Pid:
    """A textbook PID on a dimensionless error, stepped once per period."""

    def __init__(self, kp: float, ki: float, kd: float):
        self.kp, self.ki, self.kd = kp, ki, kd
        self.integral = 0.0
        self.last_error: float | None = None

    def step(self, error: float) -> tuple[float, float]:
        """Returns (output, integral term)."""
        self.integral += error
        derivative = 0.0 if self.last_error is None else error - self.last_error
        self.last_error = error
        i_term = self.ki * self.integral
        return self.kp * error + i_term + self.kd * derivative, i_term

    def reset_integral(self) -> None:
        self.integral = 0.0


class Function:
    __slots__ = ("name", "tg", "service", "hint", "in_flight", "concurrency",
                 "concurrency_max", "lat_pid", "rps_pid", "latencies", "done")

    def __init__(self, name, tg, service, hint, cfg: ResctlConfig):
        self.name = name
        self.tg = tg
        self.service = service
        self.hint = hint
        self.in_flight = 0
        self.concurrency = float(cfg.initial_concurrency)
        self.concurrency_max = float(cfg.concurrency_max)
        self.lat_pid = Pid(*LAT_PID)
        self.rps_pid = Pid(*RPS_PID)
        self.latencies: list[int] = []
        self.done = 0


class ResctlWorkload(ForkJoin, Workload):
    CONFIG = ResctlConfig

    def __init__(self, cfg: ResctlConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.k = cfg.threads_per_request
        self.nice = cfg.nice
        self.ws_bytes = cfg.working_set_kb * 1024
        self.period_ns = int(float(cfg.control_period_s) * NSEC_PER_SEC)
        self.lat_target_ns = float(cfg.lat_target_s) * NSEC_PER_SEC
        self.lat_pct = float(cfg.lat_target_pct)
        self.rps_target = None if cfg.rps_target is None else float(cfg.rps_target)
        self.max_concurrency = float(cfg.concurrency_max)
        self.path = request_path.build(cfg, self)
        self.functions: dict[str, Function] = {}
        for i in range(cfg.functions):
            name = f"func-{i}"
            tg, hint = function_cgroup(machine, cfg, name, i)
            if self.path is not None:
                self.path.add_function(tg)
            service = ServiceTime(cfg.service, float(cfg.mean_service_s),
                                  float(cfg.service_sigma),
                                  self.engine.rng(f"workload/{name}/service"),
                                  cfg.mix_s, cfg.mix_p)
            self.functions[name] = Function(name, tg, service, hint, cfg)

    def start(self):
        for fn in self.functions.values():
            self._admit(fn)
        self.engine.call_later(self.period_ns, self._control)

    def _admit(self, fn: Function) -> None:
        """Fill the function's concurrency (the closed loop)."""
        while fn.in_flight < int(fn.concurrency):
            fn.in_flight += 1
            fn.hint = self.fork_request(fn.name, fn.tg, fn.service.sample_ns(), self.k, fn.hint)

    def request_done(self, req) -> None:
        super().request_done(req)
        fn = self.functions[req.function]
        fn.in_flight -= 1
        fn.done += 1
        fn.latencies.append(req.end - req.arrival)
        if getattr(self.path, "admits_inline", False):
            self._admit(fn)
        else:
            # the dispatcher hears of the completion once the worker has
            # exited, so the next request is placed with the worker's CPU
            # free again
            self.engine.call_later(0, self._admit, fn)

    def _control(self) -> None:
        period_s = self.period_ns / NSEC_PER_SEC
        for fn in self.functions.values():
            if fn.latencies:
                self._update_control(fn, fn.done / period_s)
            fn.latencies.clear()
            fn.done = 0
            self._admit(fn)
        self.engine.call_later(self.period_ns, self._control)

    def _update_control(self, fn: Function, rps: float) -> None:
        lats = sorted(fn.latencies)
        ctl = lats[min(len(lats) - 1, max(0, math.ceil(self.lat_pct * len(lats)) - 1))]
        adj, lat_i = fn.lat_pid.step(1.0 - ctl / self.lat_target_ns)
        if adj < 0:
            # latency is in charge: start from where concurrency actually is
            fn.concurrency_max = min(fn.concurrency_max, fn.concurrency)
        fn.concurrency_max = min(max(fn.concurrency_max * (1.0 + adj), 1.0),
                                 self.max_concurrency)
        rps_error = 1.0 if self.rps_target is None else 1.0 - rps / self.rps_target
        rps_adj, _ = fn.rps_pid.step(rps_error)
        fn.concurrency = max(fn.concurrency * (1.0 + rps_adj), 1.0)
        if fn.concurrency >= fn.concurrency_max:
            fn.concurrency = fn.concurrency_max
            fn.rps_pid.reset_integral()
        else:
            fn.lat_pid.reset_integral()
        # after a latency spike a negative integral would hold concurrency
        # down long after latency recovered
        if lat_i < 0 and ctl <= self.lat_target_ns:
            fn.lat_pid.reset_integral()


WORKLOAD = ResctlWorkload
