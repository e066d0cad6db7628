"""Small statistics helpers for validation tests."""
from __future__ import annotations

import numpy as np
from scipy import stats


def batch_means_ci(samples, batches: int = 20, confidence: float = 0.99):
    """Mean and CI half-width by the method of batch means: consecutive
    batches of a long run are nearly independent, so their means give an
    honest interval for autocorrelated queueing output."""
    x = np.asarray(samples, dtype=float)
    means = np.array([b.mean() for b in np.array_split(x, batches)])
    half = stats.t.ppf(0.5 + confidence / 2, batches - 1) * means.std(ddof=1) / np.sqrt(batches)
    return float(x.mean()), float(half)
