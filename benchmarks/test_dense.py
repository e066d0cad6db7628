"""Simulator throughput: how fast the simulated host runs on one core.

Each round is one ``scenarios.simulate.simulate`` call, a few rounds per benchmark (less
noise).  ``extra_info``
carries the figures the core-simulator issue asks for: simulated context
switches and events, simulated seconds per wall second, context switches per
wall second and events per wall second, all from the fastest round's wall
time as ``simulate`` measured it (setup + run, not the result tables'
conversion).
"""
from __future__ import annotations

import pytest

from benchmarks.configs import (azure_lags, dense, dense_traced, drawn_trace, small,
                                small_lags, small_traced, tiny)
from scenarios.simulate import simulate


def _run(benchmark, cfg: dict, rounds: int = 1) -> dict:
    walls: list[float] = []
    trace = drawn_trace(cfg)      # outside the timed rounds

    def once():
        result = simulate(cfg, trace=trace)
        walls.append(result.summary.column("wall_time_s")[0].as_py())
        return result
    result = benchmark.pedantic(once, rounds=rounds, iterations=1, warmup_rounds=0)
    s = result.summary.to_pylist()[0]
    wall = min(walls)
    info = {
        "ctx_switches": s["ctx_switches"],
        "sim_events": s["sim_events"],
        "simulated_s": cfg["duration_s"],
        "wall_time_s": wall,
        "rounds": rounds,
        "sim_s_per_wall_s": cfg["duration_s"] / wall,
        "ctx_switches_per_wall_s": s["ctx_switches"] / wall,
        "events_per_wall_s": s["sim_events"] / wall,
        "n_requests": s["n_requests"],
        "n_unfinished": s["n_unfinished"],
        "cpu_util": s["cpu_util"],
    }
    benchmark.extra_info.update(info)
    assert s["ctx_switches"] > 0 and s["sim_events"] > 0
    return info


@pytest.mark.slow
def test_dense(benchmark):
    """e5-2430l, 228 functions at 1.2 x capacity, 30 s (``make bench`` only);
    five rounds, as this VM's speed drifts by tens of percent from minute to
    minute."""
    _run(benchmark, dense(), rounds=5)


@pytest.mark.slow
def test_azure_lags(benchmark):
    """azure2021 at 168 functions under CFS-LAGS, 10 s (``make bench`` only)."""
    _run(benchmark, azure_lags(), rounds=3)


@pytest.mark.slow
def test_dense_traced(benchmark):
    """test_dense recording its schedule (trace=sched): the cost of tracing
    (docs/performance.md, "Schedule traces")."""
    _run(benchmark, dense_traced(), rounds=5)


def test_small_traced(benchmark):
    """test_small recording its schedule."""
    _run(benchmark, small_traced(), rounds=3)


def test_small(benchmark):
    """e5-2430l, 36 functions at 60 % load, 10 s."""
    _run(benchmark, small(), rounds=3)


def test_small_lags(benchmark):
    """test_small's scenario under CFS-LAGS."""
    _run(benchmark, small_lags(), rounds=3)


def test_tiny(benchmark):
    """this-vm (2 CPUs), 4 functions at 60 % load, 5 s."""
    _run(benchmark, tiny(), rounds=5)
