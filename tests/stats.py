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


def assert_matches_theory(label: str, samples, theory: float, tolerance: float,
                          long_run: bool) -> None:
    """Theory must lie in the 99% batch-means CI.  A long run must also be
    long enough for the CI to be narrower than ``tolerance`` (relative), and
    then the relative error must be within it."""
    mean, half = batch_means_ci(samples)
    print(f"{label}: {mean:.6g} +- {half:.3g} (99% CI), theory {theory:.6g}, "
          f"error {mean / theory - 1:+.2%}")
    assert abs(mean - theory) <= half
    if long_run:
        assert half / theory < tolerance
        assert abs(mean / theory - 1) < tolerance
