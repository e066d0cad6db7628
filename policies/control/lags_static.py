"""CFS-LAGS-static: the LAGS paper's offline baseline ("Mitigating context
switching in densely packed Linux clusters with Latency-Aware Group
Scheduling", §4.1).

Functions of the lowest demand band run under SCHED_RR (the paper uses
``chrt``; 100 ms quantum, RT throttling leaves the fair class 5%), the rest
stay under the fair scheduler.  The band is known in advance from the trace
(the paper sorts the 119 functions by load into ten equal bands, Fig. 2):
that offline knowledge of future demand is what makes this a baseline and
not a practical policy [§4.1].

The paper sizes group-low "by adding new functions to the group as long as
there is no measurable impact on the latency target of 1 second" [§4.1].
This controller does that within one run: it promotes ``step`` functions in
order of increasing demand, judges each promotion over the next
``interval_s`` window, and when the window's latency percentile exceeds the
target it demotes the last promotion and stops growing.  A window with fewer
than ``min_requests`` completions carries over into the next one rather
than being judged on noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.control import ControlConfig, Controller
from sim.config import MAX_COUNT
from sim.sched_class import RT_PRIORITY_RANGE, SCHED_NORMAL, SCHED_RR, tunable


@dataclass
class LagsStaticConfig(ControlConfig):
    interval_s: float = tunable(5.0, range=(0.001, None))   # judging window per promotion
    bands: int = tunable(10, range=(1, MAX_COUNT))                # demand bands (Fig. 2: ten)
    max_bands: int = tunable(1, range=(1, None))             # lowest bands that may go RR
    step: int = tunable(1, range=(1, None))                  # functions promoted at a time
    # "the latency target of 1 second" (LAGS paper, section 4.1)
    latency_target_s: float = tunable(1.0, range=(0, None))
    # the target holds while this percentile of latency is within it
    percentile: float = tunable(99.0, range=(0, 100))
    # fewer completions in a window: keep observing
    min_requests: int = tunable(50, range=(1, None))
    rt_priority: int = tunable(50, range=RT_PRIORITY_RANGE)  # chrt -r 50


class LagsStatic(Controller):
    reads_completed = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.bands = int(cfg.bands)
        self.max_bands = min(int(cfg.max_bands), self.bands)
        self.step_size = int(cfg.step)
        self.target_s = float(cfg.latency_target_s)
        self.percentile = float(cfg.percentile)
        self.min_requests = int(cfg.min_requests)
        self.rt_priority = int(cfg.rt_priority)
        self.candidates: list[str] = []
        self.group_low: list[str] = []
        self.last_batch: list[str] = []
        self.frozen_at_s: float | None = None
        self._window: list[np.ndarray] = []

    def start(self, host) -> None:
        demand = host.function_demand()
        # ties broken by name so the order is reproducible
        ranked = sorted(demand, key=lambda cg: (demand[cg], cg))
        lowest = math.ceil(len(ranked) * self.max_bands / self.bands)
        self.candidates = ranked[:lowest]
        self._promote(host)

    def step(self, host) -> None:
        if self.frozen_at_s is not None:
            return
        self._window.append(host.completed().latency_s)
        latencies = np.concatenate(self._window)
        if latencies.size < self.min_requests:
            return
        self._window = []
        if np.percentile(latencies, self.percentile) <= self.target_s:
            if len(self.group_low) < len(self.candidates):
                self._promote(host)
            return
        for cgroup in self.last_batch:
            host.set_rt_policy(cgroup, SCHED_NORMAL)
        del self.group_low[len(self.group_low) - len(self.last_batch):]
        self.frozen_at_s = host.now_ns() / 1e9

    def _promote(self, host) -> None:
        n = len(self.group_low)
        self.last_batch = self.candidates[n:n + self.step_size]
        for cgroup in self.last_batch:
            host.set_rt_policy(cgroup, SCHED_RR, self.rt_priority)
        self.group_low.extend(self.last_batch)

    def summary(self) -> dict:
        return {"lags_static_rr_functions": len(self.group_low),
                "lags_static_candidates": len(self.candidates),
                "lags_static_frozen_at_s": (float("nan") if self.frozen_at_s is None
                                            else self.frozen_at_s)}


CONTROLLER = LagsStatic
CONFIG = LagsStaticConfig
