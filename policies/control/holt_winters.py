"""Holt-Winters forecasting of CPU usage as a vertical autoscaler: the
CATCloud thesis's non-VPA baseline ("CATCloud: Closing Semantic Gaps of CPU
Interfaces for Precise Autoscaling in the Cloud", §4.1 and §4.2.3; its [13]
is T. Wang, S. Ferlin and M. Chiesa, "Predicting CPU usage for proactive
autoscaling", EuroMLSys 2021).

What the thesis specifies, as implemented:

- Holt-Winters exponential smoothing of the container's CPU usage (§4.1,
  "the HW ... strategies presented in [13]"), here statsmodels'
  ``ExponentialSmoothing``;
- a user-space autoscaler on the host that reads the cgroup's telemetry and
  writes the recommendation "directly on the cgroup interface" (§4.1): the
  quota of cpu.max, at the default 100 ms period ("Tuning millicpu involves
  modifying only the quota variable, while the period remains constant",
  §2.3);
- "a recommendation approximately every 3 minutes" (§4.1):
  ``recommend_interval_s`` 180;
- a 30-minute warm-up for HW (§4.2.3): ``warmup_s`` 1800, no
  recommendation before it (the container keeps its own cpu.max).

What it leaves open, and the choices made here (docs/autoscalers.md says
why in more detail):

- the telemetry's resolution: a usage sample (cgroup CPU time over the
  window / window length) every ``interval_s`` = 15 s, the resolution the
  thesis gives for its VPA (§4.1), so both baselines see the same samples;
- the model's form and weights ("uses the weights supplied as-is", §4.1:
  [13]'s fitted weights, which neither text gives): additive trend and
  additive seasonality (Holt-Winters' triple smoothing; multiplicative
  components need strictly positive data and an idle container's usage is
  0), a season of ``seasonal_periods`` = 12 samples (3 minutes, one
  recommendation interval: the forecast then repeats the shape of past
  intervals), smoothing weights fitted by statsmodels (least squares) at
  every recommendation unless given;
- the history the model is fitted on: the last ``history_s`` = 30 minutes
  (what the warm-up collects);
- how a forecast becomes a limit: the limit stays in force until the next
  recommendation, and [13]'s abstract states its aim as "avoiding CPU
  insufficiency", so the recommendation is the **largest** point forecast
  over the next ``recommend_interval_s`` (12 steps of 15 s), times (1 +
  ``margin``); ``margin`` 0, as neither text names one (the same choice
  as catcloud's);
- the floor: the kernel's minimum quota, 1 ms.
"""
from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from policies.control import ControlConfig, Controller
from policies.control.static import PERIOD_RANGE_US, set_cpu_cores
from sim.config import MAX_COUNT
from sim.sched_class import tunable

# statsmodels' "estimated" initialisation falls back to its heuristic one,
# which needs at least 10 observations (and two full seasons)
MIN_SAMPLES = 10


@dataclass
class HoltWintersConfig(ControlConfig):
    """Section numbers are the CATCloud thesis's; the module docstring says
    which defaults it gives and which are choices."""
    # a usage sample per 15 s (the thesis's VPA telemetry resolution, 4.1)
    interval_s: float = tunable(15.0, range=(0.001, None))
    # "a recommendation approximately every 3 minutes" (4.1)
    recommend_interval_s: float = tunable(180.0, range=(0.001, None))
    # HW's 30-minute warm-up (4.2.3): no recommendation before it
    warmup_s: float = tunable(1800.0, range=(0, None))
    # fit on the samples of the last history_s (null: every sample so far)
    history_s: Optional[float] = tunable(1800.0, range=(0.001, None))
    trend: bool = tunable(True)                 # additive trend (Holt)
    damped_trend: bool = tunable(False)
    # additive season of this many samples (12 x 15 s = one recommendation
    # interval); null: no seasonal component
    seasonal_periods: Optional[int] = tunable(12, range=(2, MAX_COUNT))
    # the smoothing weights; null: fitted by statsmodels at every recommendation
    smoothing_level: Optional[float] = tunable(None, range=(0, 1))
    smoothing_trend: Optional[float] = tunable(None, range=(0, 1))
    smoothing_seasonal: Optional[float] = tunable(None, range=(0, 1))
    margin: float = tunable(0.0, range=(0, None))     # neither text names one
    # quota = recommendation x period (Kubernetes' default period)
    period_us: int = tunable(100_000, range=PERIOD_RANGE_US)

    @classmethod
    def check(cls, c, key: str) -> None:
        interval = c.get(f"{key}.interval_s")
        if not isinstance(interval, (int, float)) or interval <= 0:
            return      # reported by the field's own check
        c.require(f"{key}.recommend_interval_s", c.get(f"{key}.recommend_interval_s") >= interval,
                  f"must be at least interval_s = {interval} (the forecast covers the time "
                  "until the next recommendation, in samples)")
        season = c.get(f"{key}.seasonal_periods")
        need = max(MIN_SAMPLES, 2 * season if isinstance(season, int) else 0)
        rule = (f"must hold at least {need} samples of interval_s = {interval} s (statsmodels' "
                "Holt-Winters initialisation needs 10, and two full seasons)")
        c.require(f"{key}.warmup_s", samples_in(c.get(f"{key}.warmup_s"), interval) >= need, rule)
        history = c.get(f"{key}.history_s")
        if history is not None:
            c.require(f"{key}.history_s", samples_in(history, interval) >= need, rule)
        for weight, needs in (("smoothing_trend", "trend"), ("damped_trend", "trend"),
                              ("smoothing_seasonal", "seasonal_periods")):
            if c.get(f"{key}.{weight}") not in (None, False):
                c.require(f"{key}.{weight}", c.get(f"{key}.{needs}") not in (None, False),
                          f"needs {key}.{needs}")


def samples_in(seconds: float, interval_s: float) -> int:
    """Samples taken every interval_s within ``seconds`` (a small epsilon:
    both are sums of float steps)."""
    return int(math.floor(seconds / interval_s + 1e-9))


def forecast_peak(samples, cfg: HoltWintersConfig, steps: int) -> tuple[float, int]:
    """The largest Holt-Winters point forecast of the next ``steps``
    samples, and how many warnings the fit raised (statsmodels warns when
    its optimiser does not converge, e.g. on a constant series, and still
    returns the best fit found)."""
    # statsmodels takes ~2 s to import, and every config check imports
    # every controller module (scenarios.schema): load it at the first fit
    from statsmodels.tsa.holtwinters import ExponentialSmoothing
    season = cfg.seasonal_periods
    model = ExponentialSmoothing(np.asarray(samples, dtype=np.float64),
                                 trend="add" if cfg.trend else None,
                                 damped_trend=bool(cfg.damped_trend),
                                 seasonal="add" if season is not None else None,
                                 seasonal_periods=season, initialization_method="estimated")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = model.fit(smoothing_level=cfg.smoothing_level, smoothing_trend=cfg.smoothing_trend,
                        smoothing_seasonal=cfg.smoothing_seasonal)
    return float(np.max(fit.forecast(steps))), len(caught)


class Container:
    """What the autoscaler keeps per container: its usage samples."""

    def __init__(self, history: int | None, usage_ns: int, t_s: float):
        self.samples: deque = deque(maxlen=history)
        self.last_usage_ns, self.last_t_s = usage_ns, t_s
        self.target: float | None = None       # cores, the latest recommendation


class HoltWinters(Controller):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.containers: dict[str, Container] = {}
        self.steps = max(1, round(float(cfg.recommend_interval_s) / self.interval_s))
        self._next_recommend_s = float(cfg.warmup_s)
        self.recommendations = 0
        self.fit_warnings = 0
        self.first_recommendation_s = math.nan

    def start(self, host) -> None:
        t = host.now_ns() / 1e9
        history = self.cfg.history_s
        size = None if history is None else samples_in(float(history), self.interval_s)
        for cgroup in host.functions():
            self.containers[cgroup] = Container(size, host.cpu_usage_ns(cgroup), t)

    def step(self, host) -> None:
        t = host.now_ns() / 1e9
        for cgroup, c in self.containers.items():
            usage = host.cpu_usage_ns(cgroup)
            c.samples.append((usage - c.last_usage_ns) / 1e9 / (t - c.last_t_s))
            c.last_usage_ns, c.last_t_s = usage, t
        if t < self._next_recommend_s - 1e-9:
            return
        self._next_recommend_s += float(self.cfg.recommend_interval_s)
        for cgroup, c in self.containers.items():
            peak, caught = forecast_peak(c.samples, self.cfg, self.steps)
            self.fit_warnings += caught
            c.target = max(0.0, peak) * (1.0 + float(self.cfg.margin))
            set_cpu_cores(host, cgroup, c.target, int(self.cfg.period_us))
        if self.recommendations == 0:
            self.first_recommendation_s = t
        self.recommendations += 1

    def summary(self) -> dict:
        targets = [c.target for c in self.containers.values() if c.target is not None]
        return {
            "holt_winters_target_mcpu_mean": (1000.0 * sum(targets) / len(targets)
                                              if targets else math.nan),
            "holt_winters_recommendations": self.recommendations,
            "holt_winters_first_recommendation_s": self.first_recommendation_s,
            "holt_winters_fit_warnings": self.fit_warnings,
        }


CONTROLLER = HoltWinters
CONFIG = HoltWintersConfig
