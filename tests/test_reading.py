"""results/reading.py: the paragraph says what a comparison of a known shape
shows, and says so when the shape is not there."""
import math

import pandas as pd

from results.compare import Comparison
from results.reading import density_key, reading

X = "workload.functions"
DENSITIES = [12, 24, 36, 48, 60]


def comparison(series: dict, overloaded: dict | None = None, ci: float = 0.05,
               params=(X,)) -> Comparison:
    """A comparison frame from {metric: {policy: [mean per density]}}; each
    mean's CI is +-``ci`` of it, each delta's CI +-``ci`` of the baseline's
    mean around the difference; ``overloaded``: {policy: first overloaded
    density}."""
    rows = []
    metrics = list(series)
    for metric, lines in series.items():
        base = lines["cfs"]
        for policy, means in lines.items():
            for i, (x, mean) in enumerate(zip(DENSITIES, means)):
                delta = mean - base[i]
                first = (overloaded or {}).get(policy, math.inf)
                rows.append({
                    "metric": metric, **({X: x} if params else {}), "policy": policy, "n": 3,
                    "n_overloaded": 3 if x >= first else 0, "n_runs": 3,
                    "mean": mean, "ci_low": mean * (1 - ci), "ci_high": mean * (1 + ci),
                    "delta": math.nan if policy == "cfs" else delta,
                    "delta_ci_low": math.nan if policy == "cfs" else delta - ci * base[i],
                    "delta_ci_high": math.nan if policy == "cfs" else delta + ci * base[i],
                    "delta_pct": math.nan if policy == "cfs" or not base[i] else 100 * delta / base[i],
                    "paired": True, "n_baseline": 3})
    frame = pd.DataFrame(rows)
    if not params:
        frame = frame[frame.groupby(["metric", "policy"]).cumcount() == len(DENSITIES) - 1]
    return Comparison(frame=frame, params=list(params), baseline="cfs", ci=0.95,
                      resamples=2000, metrics=metrics)


KNEE = {
    "latency_p99_s": {"cfs": [0.001, 0.002, 0.005, 0.3, 0.8],
                      "lags": [0.001, 0.003, 0.008, 0.04, 0.09]},
    "unfinished_frac": {"cfs": [0, 0, 0, 0.1, 0.3], "lags": [0, 0, 0, 0, 0.02]},
    "sched_overhead_frac": {"cfs": [0.001, 0.004, 0.01, 0.04, 0.05],
                            "lags": [0.001, 0.005, 0.012, 0.05, 0.07]},
}


def test_a_knee_is_read_where_the_p99_passes_100_ms():
    text = reading(comparison(KNEE, overloaded={"cfs": 48}))
    assert f"cfs's passes 100 ms at {X}=48 (300 ms, from 5 ms at 36)" in text
    assert f"lags's stays below 100 ms up to {X}=60 (90 ms)" in text
    # only cfs's runs were overloaded, from 48 on
    assert f"cfs from {X}=48 (10% of requests unfinished there, 30% at 60)" in text
    assert "lags from" not in text
    assert f"cfs's grows from 0.1% at {X}=12 to 5% at 60" in text
    assert f"lags's grows from 0.1% at {X}=12 to 7% at 60" in text
    # before the baseline's knee lags costs latency; at the densest point it wins
    assert f"At {X}=36, against cfs's p99 of 5 ms: lags's p99 is 8 ms (+60%" in text
    assert f"At {X}=60, against cfs's p99 of 800 ms: lags's p99 is 90 ms (-89%" in text


def test_past_the_knee_the_medians_are_compared_too():
    medians = {**KNEE, "latency_p50_s": {"cfs": [0.0005, 0.0005, 0.001, 0.05, 0.2],
                                         "lags": [0.0005, 0.0005, 0.001, 0.001, 0.001]}}
    text = reading(comparison(medians))
    assert (f"At {X}=60, against cfs's median of 200 ms: lags's median is 1 ms (-100%"
            in text)


def test_no_knee_within_the_sweep_when_every_p99_stays_low():
    flat = {"latency_p99_s": {"cfs": [0.001, 0.001, 0.002, 0.002, 0.003],
                              "lags": [0.001, 0.002, 0.002, 0.003, 0.004]},
            "sched_overhead_frac": {"cfs": [0.01] * 5, "lags": [0.01] * 5}}
    text = reading(comparison(flat))
    assert text.startswith(f"No knee within the sweep: every policy's mean p99 stays below "
                           f"100 ms up to {X}=60.")
    assert "passes" not in text and "backlog" not in text
    assert "cfs's stays from 1% at" in text


def test_a_difference_whose_ci_spans_zero_is_indistinguishable():
    close = {"latency_p99_s": {"cfs": [0.001, 0.002, 0.005, 0.3, 0.8],
                               "lags": [0.001, 0.002, 0.005, 0.31, 0.82]}}
    text = reading(comparison(close, ci=0.1))
    assert "lags's p99 is 820 ms, indistinguishable from cfs's" in text
    assert "lags's passes 100 ms at" in text


def test_a_knee_at_the_first_point_is_said_as_such():
    high = {"latency_p99_s": {"cfs": [0.2, 0.3, 0.4, 0.5, 0.6],
                              "lags": [0.01, 0.02, 0.2, 0.5, 0.6]}}
    text = reading(comparison(high))
    assert f"cfs's is above 100 ms already at {X}=12 (200 ms)" in text
    assert f"lags's passes 100 ms at {X}=36" in text


def test_without_a_density_key_the_reading_says_so():
    text = reading(comparison(KNEE, params=()))
    assert text.startswith("No numeric parameter varies")
    assert "lags's p99 is 90 ms" in text


def test_without_a_density_key_each_group_is_read_on_its_own():
    c = comparison(KNEE)
    frame = c.frame.assign(**{X: "w" + c.frame[X].astype(str)}).rename(columns={X: "workload"})
    text = reading(Comparison(frame=frame, params=["workload"], baseline="cfs", ci=0.95,
                              resamples=2000, metrics=c.metrics))
    assert text.startswith("No numeric parameter varies")
    assert "At workload=w60, against cfs's p99 of 800 ms: lags's p99 is 90 ms" in text
    assert "At workload=w12, against cfs's p99 of 1 ms" in text


def test_density_key_prefers_the_known_density_keys():
    frame = pd.DataFrame({"seed": [1], "workload.rate_rps": [2.0], X: [3], "workload": ["a"]})
    assert density_key(["workload.rate_rps", X, "workload"], frame) == X
    assert density_key(["workload.rate_rps", "workload"], frame) == "workload.rate_rps"
    assert density_key(["workload"], frame) is None
