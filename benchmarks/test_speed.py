"""The speed issue's figures: simulated switches per wall second on its
dense scenario (``benchmarks.configs.overload``) under CFS, EEVDF and
CFS-LAGS, as ratios to a bare SimPy loop (benchmarks/bare_simpy.py) and
to CFS, all measured in one session.

Each round runs the bare loop, then the three schedulers, then the loop
again; a scheduler's ratio to SimPy is its rate over the mean of the two
loops around it, and EEVDF's and LAGS's ratio to CFS is taken within the
round.  ``extra_info`` keeps the median of each ratio over the rounds and
the fastest round's rates.  Switches are those of the measured window
(after warm-up), wall time the whole ``simulate`` call, as the issue
measured them."""
from __future__ import annotations

import statistics

import pytest

from benchmarks.bare_simpy import bare_simpy_rate
from benchmarks.configs import overload
from scenarios.simulate import simulate

SCHEDULERS = ("cfs", "eevdf", "lags")


def _rate(cfg: dict) -> tuple[float, int]:
    s = simulate(cfg).summary.to_pylist()[0]
    return s["ctx_switches"] / s["wall_time_s"], s["ctx_switches"]


@pytest.mark.slow
def test_overload_schedulers(benchmark):
    cfgs = {name: overload(name) for name in SCHEDULERS}
    rounds: list[dict] = []

    def once():
        before = bare_simpy_rate()
        rates = {name: _rate(cfg) for name, cfg in cfgs.items()}
        bare = (before + bare_simpy_rate()) / 2
        rounds.append({"bare": bare, **{n: r for n, (r, _) in rates.items()},
                       "switches": {n: k for n, (_, k) in rates.items()}})
    benchmark.pedantic(once, rounds=3, iterations=1, warmup_rounds=0)
    info = {"bare_simpy_timeouts_per_wall_s": max(r["bare"] for r in rounds)}
    for name in SCHEDULERS:
        info[f"{name}_switches"] = rounds[0]["switches"][name]
        info[f"{name}_switches_per_wall_s"] = max(r[name] for r in rounds)
        info[f"{name}_vs_bare_simpy"] = statistics.median(r[name] / r["bare"] for r in rounds)
        if name != "cfs":
            info[f"{name}_vs_cfs"] = statistics.median(r[name] / r["cfs"] for r in rounds)
    benchmark.extra_info.update(info)
    # the same scenario simulates the same schedule in every round
    assert all(r["switches"] == rounds[0]["switches"] for r in rounds)
    assert all(info[f"{n}_switches"] > 0 for n in SCHEDULERS)
