"""The simulated host behind the ``Host`` protocol (backends/host.py), and
the loop that drives a controller on the simulation clock."""
from __future__ import annotations

import numpy as np

from backends.host import Completed, CpuStat
from sim.engine import NSEC_PER_SEC, s_to_ns


class SimHost:
    def __init__(self, machine, trace=None, parent_cgroup: str = ""):
        self.machine = machine
        self._trace = trace
        self._parent = "/" + parent_cgroup.strip("/") if parent_cgroup.strip("/") else ""
        self._done: list[tuple[str, int, int]] = []

    def request_done(self, req) -> None:
        """Recorder observer: every request (warm-up included; controllers
        act from t = 0)."""
        if not req.dropped:
            self._done.append((req.cgroup, req.end - req.arrival, req.end))

    # --- reads --------------------------------------------------------------
    def now_ns(self) -> int:
        return self.machine.engine.now

    def functions(self) -> list[str]:
        return [path for path, tg in self.machine.groups.items()
                if tg.parent is not None and not tg.children]

    def function_demand(self) -> dict[str, float]:
        if self._trace is None:
            raise ValueError("the workload is not trace-driven, so its future demand is unknown")
        demand = (self._trace.column("demand_s").to_numpy()
                  * self._trace.column("threads").to_numpy())
        totals: dict[str, float] = {}
        for name, d in zip(self._trace.column("function").to_pylist(), demand.tolist()):
            cgroup = f"{self._parent}/{name}"
            totals[cgroup] = totals.get(cgroup, 0.0) + d
        return totals

    def cpu_usage_ns(self, cgroup: str) -> int:
        self.machine.sync()
        return _hier_usage(self._group(cgroup))

    def cpu_stat(self, cgroup: str) -> CpuStat:
        b = self._group(cgroup).cfs_bandwidth
        return CpuStat(b.nr_periods, b.nr_throttled, b.throttled_time // 1000)

    def completed(self) -> Completed:
        rows, self._done = self._done, []
        cgroups = np.array([r[0] for r in rows], dtype=object)
        lat = np.array([r[1] for r in rows], dtype=np.float64) / NSEC_PER_SEC
        end = np.array([r[2] for r in rows], dtype=np.float64) / NSEC_PER_SEC
        return Completed(cgroups, lat, end)

    # --- levers -------------------------------------------------------------
    def set_cpu_max(self, cgroup: str, quota_us: int | None, period_us: int,
                    burst_us: int = 0) -> None:
        self.machine.set_cfs_bandwidth(self._group(cgroup), quota_us, period_us, burst_us)

    def set_rt_policy(self, cgroup: str, policy: str, rt_priority: int = 50) -> None:
        # Applies to threads created from now on.  FaaS requests fork their
        # threads per request, so within one request's latency every new
        # invocation runs under the new policy; long-lived threads keep the
        # policy they started with (the real backend chrt's them too).
        self.machine.set_group_task_policy(self._group(cgroup), policy, rt_priority)

    def _group(self, cgroup: str):
        try:
            return self.machine.groups["/" + cgroup.strip("/")]
        except KeyError:
            raise ValueError(f"no cgroup {cgroup}; the scenario has: "
                             f"{', '.join(self.functions())}") from None


def _hier_usage(tg) -> int:
    return tg.usage_ns + sum(_hier_usage(c) for c in tg.children)


def drive(controller, host: SimHost, engine) -> None:
    """start() at t = 0, then step() every interval_s, on the simulation clock."""
    interval = s_to_ns(controller.interval_s)

    def start():
        controller.start(host)
        engine.call_later(interval, step)

    def step():
        controller.step(host)
        engine.call_later(interval, step)

    engine.call_at(0, start)
