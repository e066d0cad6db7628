"""Kubernetes Vertical Pod Autoscaler: the upstream recommender's CPU path
(kubernetes/autoscaler vertical-pod-autoscaler/pkg/recommender,
config/config.go and model/aggregations_config.go) with the updater the
CATCloud thesis evaluated against ("CATCloud: Closing Semantic Gaps of CPU
Interfaces for Precise Autoscaling in the Cloud", §4.1: usage every 15 s,
limits applied every 300 s).

Per container (here: per function cgroup):
- a usage sample, in cores, every ``interval_s`` (metrics-server's 15 s
  resolution): cgroup CPU time used over the window / window length, added
  to a decaying exponential histogram with weight ``sample_weight`` (0.1,
  minSampleWeight; upstream stopped weighting by the CPU request in 2025).
  With ``fetch_interval_s`` set, only every such interval's latest window is
  added: upstream's recommender fetches metrics-server's latest window once
  per loop (``--recommender-interval``, 1 min; input/cluster_feeder.go
  LoadRealTimeMetrics), so a default installation adds one 15 s window a
  minute;
- every ``recommender_interval_s``: target = p90 x (1 + margin), lower =
  p50 x (1 + margin) x (1 + 0.001/conf)^-2, upper = p95 x (1 + margin) x
  (1 + 1/conf), each at least ``min_mcpu``; conf = min(history span, number
  of samples / 1440) in days;
- every ``update_interval_s``: the latest target becomes the container's
  limit, quota = target x ``period_us`` (``update_policy: always``: the
  thesis's VPA applied the recommendation on a fixed cadence, §4.1).
  ``update_policy: out_of_bounds`` is upstream's updater
  (pkg/updater/priority: priority_processor.go, update_priority_calculator.go):
  a container whose limit (here request = limit) lies within [lower, upper]
  keeps it until it has run ``update_lifetime_s``
  (``--in-recommendation-bounds-eviction-lifetime-threshold``, 12 h) and the
  target differs from it by at least ``update_threshold``
  (``--pod-update-threshold``, 10%); an update recreates the pod, which
  restarts that clock.  Not modelled: ``--min-replicas`` (2), under which
  upstream never evicts a single-replica workload, as every experiment here
  is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from policies.control import ControlConfig, Controller
from policies.control.static import PERIOD_RANGE_US, set_cpu_cores
from sim.sched_class import tunable

DAY_S = 24 * 3600.0
MAX_DECAY_EXPONENT = 100       # decaying_histogram.go: renormalise beyond 2^100


class ExponentialHistogram:
    """util/histogram.go with exponential bucket options: bucket n starts
    at first x (ratio^n - 1) / (ratio - 1); the last bucket is unbounded."""

    def __init__(self, max_value: float = 1000.0, first: float = 0.01, ratio: float = 1.05,
                 epsilon: float = 1e-4):
        self.first, self.ratio, self.epsilon = first, ratio, epsilon
        self.num_buckets = math.ceil(math.log(max_value * (ratio - 1) / first + 1, ratio)) + 1
        self.weight = [0.0] * self.num_buckets
        self.total = 0.0
        self.min_bucket = self.num_buckets - 1
        self.max_bucket = 0

    def bucket_start(self, n: int) -> float:
        return self.first * (self.ratio ** n - 1) / (self.ratio - 1)

    def find_bucket(self, value: float) -> int:
        if value < self.first:
            return 0
        n = int(math.floor(math.log(value * (self.ratio - 1) / self.first + 1, self.ratio)))
        return min(n, self.num_buckets - 1)

    def add(self, value: float, weight: float) -> None:
        n = self.find_bucket(value)
        self.weight[n] += weight
        self.total += weight
        self.min_bucket = min(self.min_bucket, n)
        self.max_bucket = max(self.max_bucket, n)

    def scale(self, factor: float) -> None:
        self.weight = [w * factor for w in self.weight]
        self.total *= factor
        # buckets that fell below epsilon no longer bound the walk
        last = self.num_buckets - 1
        while self.weight[self.min_bucket] < self.epsilon and self.min_bucket < last:
            self.min_bucket += 1
        while self.weight[self.max_bucket] < self.epsilon and self.max_bucket > 0:
            self.max_bucket -= 1

    def empty(self) -> bool:
        return self.weight[self.min_bucket] < self.epsilon

    def percentile(self, p: float) -> float:
        """The end of the bucket where the cumulative weight reaches p x
        total (the start of the last bucket if it is that one)."""
        if self.empty():
            return 0.0
        threshold, partial = p * self.total, 0.0
        n = self.min_bucket
        while n < self.max_bucket:
            partial += self.weight[n]
            if partial >= threshold:
                break
            n += 1
        return self.bucket_start(n + 1 if n < self.num_buckets - 1 else n)


class DecayingHistogram(ExponentialHistogram):
    """util/decaying_histogram.go: a sample at time t weighs 2^((t - ref) /
    half_life), so older samples count half as much per half-life; the
    reference moves forward (rescaling every weight) before 2^exponent
    overflows."""

    def __init__(self, half_life_s: float, **options):
        super().__init__(**options)
        self.half_life_s = half_life_s
        self.reference_s = 0.0

    def add_sample(self, value: float, weight: float, t_s: float) -> None:
        if t_s > self.reference_s + self.half_life_s * MAX_DECAY_EXPONENT:
            new_reference = round(t_s / self.half_life_s) * self.half_life_s
            self.scale(2.0 ** round((self.reference_s - new_reference) / self.half_life_s))
            self.reference_s = new_reference
        self.add(value, weight * 2.0 ** ((t_s - self.reference_s) / self.half_life_s))


@dataclass
class VpaConfig(ControlConfig):
    """The upstream recommender's defaults (its flag names in comments)."""
    # a usage window per 15 s (metrics-server resolution)
    interval_s: float = tunable(15.0, range=(0.001, None))
    # how often the latest window becomes a sample; null: every window (the
    # thesis's "every 15 seconds"); upstream: once per recommender loop (60)
    fetch_interval_s: Optional[float] = tunable(None, range=(0.001, None))
    recommender_interval_s: float = tunable(60.0, range=(0.001, None))  # recommender loop
    # the updater applies the target every 300 s
    update_interval_s: float = tunable(300.0, range=(0.001, None))
    # always: the target at every update (the thesis's VPA); out_of_bounds:
    # upstream's updater, only a limit outside [lower, upper] (or an old one)
    update_policy: str = tunable("always", choices=("always", "out_of_bounds"))
    # in-recommendation-bounds-eviction-lifetime-threshold (12 h)
    update_lifetime_s: float = tunable(43_200.0, range=(0, None))
    update_threshold: float = tunable(0.1, range=(0, None))    # pod-update-threshold
    target_percentile: float = tunable(0.9, range=(0, 1))        # target-cpu-percentile
    # recommendation-lower-bound-cpu-percentile, -upper-bound-
    lower_percentile: float = tunable(0.5, range=(0, 1))
    upper_percentile: float = tunable(0.95, range=(0, 1))
    margin: float = tunable(0.15, range=(0, None))     # recommendation-margin-fraction
    min_mcpu: float = tunable(25.0, range=(0, None))   # pod-recommendation-min-cpu-millicores
    half_life_h: float = tunable(24.0, range=(0.001, None))   # CPU histogram decay half-life
    sample_weight: float = tunable(0.1, range=(0, None))      # minSampleWeight: every sample's
    # quota = target x period (Kubernetes' default period)
    period_us: int = tunable(100_000, range=PERIOD_RANGE_US)
    # the limit before the first update: null = none (cpu.max "max")
    initial_quota_us: Optional[int] = tunable(None, range=(1_000, None))

    @classmethod
    def check(cls, c, key: str) -> None:
        fetch, window = c.get(f"{key}.fetch_interval_s"), c.get(f"{key}.interval_s")
        if fetch is not None and isinstance(window, (int, float)):
            c.require(f"{key}.fetch_interval_s", fetch >= window,
                      f"must be at least interval_s = {window} (a sample is a window's usage)")


@dataclass
class Recommendation:
    target: float      # cores
    lower: float
    upper: float


class Container:
    """What the recommender keeps per container."""

    def __init__(self, half_life_s: float, usage_ns: int, t_s: float):
        self.histogram = DecayingHistogram(half_life_s)
        self.first_sample_s: float | None = None
        self.last_sample_s = 0.0
        self.samples = 0
        self.last_usage_ns, self.last_t_s = usage_ns, t_s
        self.recommendation: Recommendation | None = None
        self.limit: float | None = None    # cores; None: no cpu.max (or not readable)
        self.since_s = t_s                 # when the pod (re)started: its last update

    def confidence(self) -> float:
        """Days of history, or of 1-per-minute samples, whichever is fewer."""
        if self.first_sample_s is None:
            return 0.0
        return min((self.last_sample_s - self.first_sample_s) / DAY_S, self.samples / 1440.0)


class Vpa(Controller):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.containers: dict[str, Container] = {}
        fetch = cfg.fetch_interval_s
        self.fetch_interval_s = self.interval_s if fetch is None else float(fetch)
        self._next_fetch_s = self.fetch_interval_s
        self._next_recommend_s = float(cfg.recommender_interval_s)
        self._next_update_s = float(cfg.update_interval_s)

    def start(self, host) -> None:
        t = host.now_ns() / 1e9
        half_life = float(self.cfg.half_life_h) * 3600.0
        initial = self.cfg.initial_quota_us
        for cgroup in host.functions():
            c = self.containers[cgroup] = Container(half_life, host.cpu_usage_ns(cgroup), t)
            if initial is not None:
                self._apply(host, cgroup, c, initial / self.cfg.period_us, t)
            elif hasattr(host, "cpu_max"):
                quota, period = host.cpu_max(cgroup)
                c.limit = None if quota is None else quota / period

    def step(self, host) -> None:
        t = host.now_ns() / 1e9
        # small epsilon: the intervals are sums of float steps
        fetch = t >= self._next_fetch_s - 1e-9
        if fetch:
            self._next_fetch_s += self.fetch_interval_s
        for cgroup, c in self.containers.items():
            usage = host.cpu_usage_ns(cgroup)
            cores = (usage - c.last_usage_ns) / 1e9 / (t - c.last_t_s)
            c.last_usage_ns, c.last_t_s = usage, t
            if not fetch:
                continue
            c.histogram.add_sample(cores, float(self.cfg.sample_weight), t)
            if c.first_sample_s is None:
                c.first_sample_s = t
            c.last_sample_s = t
            c.samples += 1
        if t >= self._next_recommend_s - 1e-9:
            self._next_recommend_s += float(self.cfg.recommender_interval_s)
            for c in self.containers.values():
                c.recommendation = self.recommend(c)
        if t >= self._next_update_s - 1e-9:
            self._next_update_s += float(self.cfg.update_interval_s)
            for cgroup, c in self.containers.items():
                if c.recommendation is not None and self.updates(c, t):
                    self._apply(host, cgroup, c, c.recommendation.target, t)

    def updates(self, c: Container, t: float) -> bool:
        """Whether the updater replaces the container's limit now."""
        if self.cfg.update_policy == "always" or c.limit is None:
            return True
        r = c.recommendation
        if c.limit < r.lower or c.limit > r.upper:
            return True
        return (t - c.since_s >= float(self.cfg.update_lifetime_s) - 1e-9
                and abs(c.limit - r.target) / c.limit >= float(self.cfg.update_threshold))

    def recommend(self, c: Container) -> Recommendation:
        """logic/estimator.go's chain: percentile, margin, confidence, minimum."""
        h, cfg = c.histogram, self.cfg
        with_margin = 1.0 + float(cfg.margin)
        conf = c.confidence()
        floor = float(cfg.min_mcpu) / 1000.0
        target = h.percentile(float(cfg.target_percentile)) * with_margin
        lower = h.percentile(float(cfg.lower_percentile)) * with_margin
        upper = h.percentile(float(cfg.upper_percentile)) * with_margin
        lower = lower * (1.0 + 0.001 / conf) ** -2 if conf > 0 else 0.0
        upper = upper * (1.0 + 1.0 / conf) if conf > 0 else math.inf
        return Recommendation(max(target, floor), max(lower, floor), max(upper, floor))

    def _apply(self, host, cgroup: str, c: Container, cores: float, t: float) -> None:
        set_cpu_cores(host, cgroup, cores, int(self.cfg.period_us))
        c.limit, c.since_s = cores, t

    def summary(self) -> dict:
        targets = [c.recommendation.target for c in self.containers.values()
                   if c.recommendation is not None]
        return {"vpa_target_mcpu_mean": (1000.0 * sum(targets) / len(targets)
                                         if targets else float("nan"))}


CONTROLLER = Vpa
CONFIG = VpaConfig
