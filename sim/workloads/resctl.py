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

from sim.engine import NSEC_PER_SEC
from sim.workloads import request_path
from sim.workloads.common import ForkJoin, ServiceTime, apply_cgroup_bandwidth, cgroup_shares


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

    def __init__(self, name, tg, service, hint, cfg):
        self.name = name
        self.tg = tg
        self.service = service
        self.hint = hint
        self.in_flight = 0
        self.concurrency = float(cfg.get("initial_concurrency", 1))
        self.concurrency_max = float(cfg.get("concurrency_max", 65536))
        self.lat_pid = Pid(*cfg.get("lat_pid", (0.1, 0.01, 0.01)))
        self.rps_pid = Pid(*cfg.get("rps_pid", (0.25, 0.01, 0.01)))
        self.latencies: list[int] = []
        self.done = 0


class ResctlWorkload(ForkJoin):
    def __init__(self, cfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        self.cfg = cfg
        self.k = int(cfg.get("threads_per_request", 1))
        self.nice = int(cfg.get("nice", 0))
        self.ws_bytes = int(cfg.get("working_set_kb", 0)) * 1024
        self.period_ns = int(float(cfg.get("control_period_s", 1.0)) * NSEC_PER_SEC)
        self.lat_target_ns = float(cfg.get("lat_target_s", 0.1)) * NSEC_PER_SEC
        self.lat_pct = float(cfg.get("lat_target_pct", 0.9))
        rps_target = cfg.get("rps_target")
        self.rps_target = None if rps_target is None else float(rps_target)
        self.max_concurrency = float(cfg.get("concurrency_max", 65536))
        parent = str(cfg.get("parent_cgroup") or "").strip("/")
        shares = cgroup_shares(cfg)
        ncpus = machine.topology.nr_cpus
        self.path = request_path.build(cfg, self)
        self.functions: dict[str, Function] = {}
        for i in range(int(cfg["functions"])):
            name = f"func-{i}"
            tg = machine.create_group(f"{parent}/{name}" if parent else name, shares)
            apply_cgroup_bandwidth(machine, tg, cfg)
            if self.path is not None:
                self.path.add_function(tg)
            service = ServiceTime(cfg.get("service", "lognormal"), float(cfg["mean_service_s"]),
                                  float(cfg.get("service_sigma", 0.33)),
                                  self.engine.rng(f"workload/{name}/service"),
                                  cfg.get("mix_s"), cfg.get("mix_p"))
            self.functions[name] = Function(name, tg, service, i % ncpus, cfg)

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
