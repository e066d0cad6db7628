"""Per-bucket demand against owned ways -> steady-state misses and occupancy.

Notation: ``D_b`` touched lines of the buffer in bucket b (slice, set),
``N = sum_b D_b``, ``w`` ways the class can fill (possibly fractional when it
shares ways, :mod:`sim.memory.contention`).  Every bucket is an independent
``w``-way cache of the class's lines.

- **random** (uniform independent references, the neighbor microbenchmark):
  under the independent reference model with equal popularities every
  non-anticipatory replacement policy (LRU included) keeps ``min(D_b, w)`` of
  the ``D_b`` lines, so a reference into b hits with ``min(1, w / D_b)``::

      miss = sum_b max(0, D_b - w) / N

- **sequential** / **stride** (a cyclic sweep over the touched lines, LRU):
  a bucket whose lines fit (``D_b <= w``) always hits; one that does not
  thrashes and misses on every reference::

      miss = sum_{b : D_b > w} D_b / N

- **occupancy** (what CMT's llc_occupancy reads, steady state)::

      occupancy = line_bytes * sum_b min(D_b, w)

These are steady-state rates *after warm-up*; the warm-up itself costs one
compulsory miss per touched line (``MissProfile.compulsory_lines``).  Miss
ratios are per line reference; a workload that makes several accesses per
line (8-byte words in a sequential sweep) divides accordingly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.memory.pages import PATTERNS


@dataclass(frozen=True)
class MissProfile:
    miss_ratio: float          # steady-state misses per line reference
    occupancy_lines: float     # steady-state resident lines (sum_b min(D_b, w))
    compulsory_lines: int      # first-touch misses during warm-up (= N)
    touched_lines: int         # N

    def occupancy_bytes(self, line_bytes: int = 64) -> float:
        return self.occupancy_lines * line_bytes


def _nonzero(demand: np.ndarray) -> np.ndarray:
    d = np.asarray(demand, dtype=np.float64)
    return d[d > 0]


def miss_ratio(demand: np.ndarray, ways: float, pattern: str = "random") -> float:
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, not {pattern!r}")
    if ways < 0:
        raise ValueError(f"ways must be >= 0, not {ways}")
    d = _nonzero(demand)
    n = d.sum()
    if n == 0:
        return 0.0
    if pattern == "random":
        return float(np.maximum(d - ways, 0.0).sum() / n)
    return float(d[d > ways + 1e-9].sum() / n)


def occupancy_lines(demand: np.ndarray, ways: float) -> float:
    return float(np.minimum(_nonzero(demand), ways).sum())


def miss_profile(demand: np.ndarray, ways: float, pattern: str = "random") -> MissProfile:
    n = int(np.asarray(demand).sum())
    return MissProfile(miss_ratio(demand, ways, pattern), occupancy_lines(demand, ways), n, n)


# ---- analytic expectations (for validating the sampled model) ---------------------------

def poisson_random_miss_ratio(lam: float, ways: int) -> float:
    """E[max(0, D - w)] / E[D] for D ~ Poisson(lam): the random-pattern miss ratio
    when every line lands in an independent uniformly random bucket."""
    if lam <= 0:
        return 0.0
    # E[max(0, D-w)] = lam - w + sum_{k<w} (w - k) P(D = k)
    p, below = math.exp(-lam), 0.0
    for k in range(ways):
        below += (ways - k) * p
        p *= lam / (k + 1)
    return (lam - ways + below) / lam


def binomial_random_miss_ratio(trials: np.ndarray, weights: np.ndarray, p: float, ways: int) -> float:
    """E[max(0, D - w)] / E[D] for the mixture D ~ Binomial(n, p), n ~ ``weights`` over ``trials``."""
    from scipy.stats import binom
    trials = np.asarray(trials)
    weights = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    k = np.arange(0, int(trials.max()) + 1)
    pmf = binom.pmf(k[None, :], trials[:, None], p)          # (len(trials), kmax+1)
    excess = (pmf * np.maximum(k - ways, 0)[None, :]).sum(axis=1)
    return float((weights * excess).sum() / (weights * trials * p).sum())
