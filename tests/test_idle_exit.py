"""An idle CPU's wake-up grown with its idle time (sim/costmodel.py
``idle_exit_cold_ns``, ``idle_exit_decay_ns``) against this host's ladders
(calibration/bench/idle_exit.py, calibration/data/this-vm/idle_exit.parquet):
woken by its own timer and by a write from the other CPU."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from calibration.bench import timerwake
from calibration.bench.common import read_bench
from calibration.bench.idle_exit import idle_exit_params, wake_ns
from scipy.stats import ks_2samp
from sim.costmodel import SPREAD_QUANTILES
from scenarios.simulate import simulate
from tests.simcfg import IDEAL, make_cfg, poisson

DATA = Path(__file__).resolve().parent.parent / "calibration" / "data" / "this-vm"
KEYS = ("idle_exit_ns", "idle_exit_cold_ns", "idle_exit_decay_ns")


def recorded() -> tuple[pa.Table, dict]:
    table, _, _ = read_bench(DATA / "idle_exit.parquet")
    return table, idle_exit_params(table)


def sim_wakeups_us(tmp_path, period_us: int, keys: dict, seconds: float = 1.0,
                   hog: bool = False) -> np.ndarray:
    """The wake-up latencies of a SCHED_FIFO timer sleeper (no slack) on
    CPU 1, with free switches but the idle exit (and the timer interrupt):
    alone on an idle CPU, or beside a hog it preempts."""
    doc = {"tasks": {"s": {"cpus": [1], "policy": "SCHED_FIFO", "priority": 50, "run": 1,
                           "timer": {"ref": "unique", "period": period_us}}}}
    if hog:
        doc["tasks"]["hog"] = {"cpus": [1], "run": 10**8}
    f = tmp_path / "sleeper.json"
    f.write_text(json.dumps(doc))
    res = simulate(make_cfg({"name": "rtapp", "file": str(f)}, cores=2, duration_s=seconds,
                            warmup_s=0.0, calibration={**IDEAL, **keys}))
    rows = res.extra["rtapp"].to_pandas()
    return rows[rows.task.str.startswith("s")].wu_lat_us.to_numpy(float)[2:]


def sim_wakeup_us(tmp_path, period_us: int, keys: dict, seconds: float = 1.0) -> float:
    """Their median, alone on an idle CPU."""
    return float(np.median(sim_wakeups_us(tmp_path, period_us, keys, seconds)))


def test_the_simulated_ladder_follows_the_recording(tmp_path):
    """Per period, the simulator's wake-up within the recording's
    repetitions (widened by 5 us: rt-app's whole-us rounding and the
    sleeper's own few us), three parameters for eight periods."""
    table, fit = recorded()
    keys = {k: fit[k] for k in KEYS}
    df = table.to_pandas()
    df = df[~df.host_disturbed & (df.kind == "wake")]
    per = df.groupby(["period_ns", "repeat"]).lateness_ns.median().groupby("period_ns")
    for period_ns, meds in per:
        got = sim_wakeup_us(tmp_path, int(period_ns // 1000), keys,
                            seconds=max(1.0, 60 * period_ns / 1e9))
        lo, hi = meds.min() / 1e3 - 5, meds.max() / 1e3 + 5
        # the form may not pass through every repetition's median: allow
        # the fit's own residual at that period
        resid = abs(float(wake_ns(period_ns, fit["idle_exit_ns"], fit["idle_exit_cold_ns"],
                                  fit["idle_exit_decay_ns"])) - meds.median()) / 1e3
        assert lo - resid <= got <= hi + resid, (period_ns, got, lo, hi, resid)


def test_the_recorded_wake_up_grows_with_the_idle_time():
    _, fit = recorded()
    for kind, med in fit["measured"]["median_ns_by_period"].items():
        short, long = med[min(med)], med[max(med)]
        assert long > 2 * short, (kind, med)
    assert fit["idle_exit_cold_ns"] > fit["idle_exit_ns"] / 2


def test_one_curve_holds_both_wake_paths():
    """The simulator charges one idle exit whatever woke the CPU: the curve
    fitted to both ladders lies within 20 us of each path's repetitions at
    every period (recorded 2026-11-27 01:26: inside them at 12 of 16, at
    most 16 us outside: the own timer's long end above the curve, the
    write's below; half an hour earlier all within 10 us)."""
    table, fit = recorded()
    df = table.to_pandas()
    reps = df[~df.host_disturbed].groupby(["kind", "period_ns", "repeat"]).lateness_ns.median()
    for (kind, period_ns), meds in reps.groupby(["kind", "period_ns"]):
        curve = float(wake_ns(period_ns, fit["idle_exit_ns"], fit["idle_exit_cold_ns"],
                              fit["idle_exit_decay_ns"]))
        assert meds.min() - 20_000 <= curve <= meds.max() + 20_000, (kind, period_ns, curve,
                                                                      meds.tolist())


def test_a_constant_idle_exit_cannot_hold_the_ladder(tmp_path):
    """The profile's single idle_exit_ns gives one wake-up at every period:
    it misses the recording's short or long end by more than the spread."""
    table, fit = recorded()
    med = fit["measured"]["median_ns_by_period"]["wake"]
    flat = sim_wakeup_us(tmp_path, 1000, {"idle_exit_ns": 61_054})
    assert flat == sim_wakeup_us(tmp_path, 10_000, {"idle_exit_ns": 61_054})
    assert abs(med[min(med)] / 1e3 - flat) > 10 or abs(med[max(med)] / 1e3 - flat) > 10


def test_fit_recovers_the_form_it_fits():
    rng = np.random.default_rng(0)
    periods = (250_000, 500_000, 1_000_000, 2_000_000, 4_000_000, 10_000_000)
    rows = []
    for r in range(3):
        for p in periods:
            late = wake_ns(p, 35_000, 70_000, 2_500_000) + rng.normal(0, 2_000, 200)
            rows += [{"repeat": r, "sleeper": "fifo-50us", "load": "idle", "kind": "wake",
                      "period_ns": p, "lateness_ns": int(v), "steal_frac": 0.0,
                      "other_frac": 0.0, "host_disturbed": False} for v in late]
    rows += [{**rows[0], "repeat": 9, "lateness_ns": 10**7, "host_disturbed": True}]
    fit = idle_exit_params(pa.Table.from_pylist(rows, schema=timerwake.SCHEMA),
                           switch_ns=1_000)
    assert fit["idle_exit_ns"] == pytest.approx(34_000, abs=1_500)
    assert fit["idle_exit_cold_ns"] == pytest.approx(70_000, rel=0.05)
    assert fit["idle_exit_decay_ns"] == pytest.approx(2_500_000, rel=0.1)
    # a ladder that only grows linearly: the time constant is held within it
    lin = [{**r, "lateness_ns": 20_000 + r["period_ns"] // 100} for r in rows
           if not r["host_disturbed"]]
    fit = idle_exit_params(pa.Table.from_pylist(lin, schema=timerwake.SCHEMA))
    assert fit["idle_exit_decay_ns"] <= max(periods) and fit["idle_exit_cold_ns"] < 1e6
    few = [r for r in rows if r["period_ns"] in periods[:3]]
    assert idle_exit_params(pa.Table.from_pylist(few, schema=timerwake.SCHEMA)) is None


SPREAD = (0.4, 0.7, 0.9, 1.0, 1.2, 1.5, 2.5)


@pytest.mark.parametrize("hog", [False, True], ids=["idle exit", "timer interrupt"])
def test_the_wake_ups_scatter_as_the_spread_says(tmp_path, hog):
    """With a spread each idle exit (idle CPU) or timer interrupt (busy CPU)
    is its median times a ratio drawn from SPREAD at SPREAD_QUANTILES:
    the simulated wake-ups' quantiles are the median's times those ratios
    (2000 wake-ups: within 4 %), the ends within the spread's."""
    keys = ({"timer_irq_ns": 40_000, "timer_irq_spread": list(SPREAD)} if hog else
            {"idle_exit_ns": 40_000, "idle_exit_spread": list(SPREAD)})
    got = sim_wakeups_us(tmp_path, 1000, keys, seconds=2.0, hog=hog)
    assert got.size > 1900
    for q, ratio in zip(SPREAD_QUANTILES[1:-1], SPREAD[1:-1]):
        assert np.quantile(got, q) == pytest.approx(40 * ratio, rel=0.04), q
    assert 40 * SPREAD[0] - 1 <= got.min() and got.max() <= 40 * SPREAD[-1] + 1
    flat = sim_wakeups_us(tmp_path, 1000, {k: v for k, v in keys.items() if "spread" not in k},
                          hog=hog)
    assert np.ptp(flat) <= 1


def test_the_spread_draws_from_its_own_stream():
    """The draws come from their own random streams: the rest of a run's
    randomness (the arrivals here) is the same with or without them."""
    wl = poisson(functions=4, rate_rps=50.0, mean_service_s=0.004)
    costs = {"idle_exit_ns": 30_000, "timer_irq_ns": 10_000}
    runs = [simulate(make_cfg(wl, cores=2, duration_s=2.0, warmup_s=0.0,
                              calibration={**IDEAL, **costs, **extra}))
            for extra in ({}, {"idle_exit_spread": list(SPREAD),
                               "timer_irq_spread": list(SPREAD)})]
    plain, spread = (r.requests.to_pandas() for r in runs)
    assert plain.arrival_s.tolist() == spread.arrival_s.tolist()
    assert plain.latency_s.tolist() != spread.latency_s.tolist()


def test_the_recorded_scatter_is_the_simulated_one(tmp_path):
    """The fitted curve and scatter against the recording, both paths, at
    every period: the KS distance of the simulated wake-ups to the recorded
    ones is at most 0.25 (recorded 0.09-0.22), and without the scatter
    (every idle exit its median) at least 0.45 (recorded 0.51-0.67).  The
    recording's own sweeps differ from each other by KS 0.48-0.91 at a
    period (the VM, and the two paths)."""
    table, fit = recorded()
    keys = {k: fit[k] for k in KEYS}
    df = table.to_pandas()
    df = df[~df.host_disturbed]
    for period_ns, real in df.groupby("period_ns"):
        seconds = max(1.0, 300 * period_ns / 1e9)
        got = sim_wakeups_us(tmp_path, int(period_ns // 1000),
                             {**keys, "idle_exit_spread": fit["idle_exit_spread"]}, seconds)
        ks = ks_2samp(got, real.lateness_ns.to_numpy() / 1e3).statistic
        flat = sim_wakeups_us(tmp_path, int(period_ns // 1000), keys, seconds)
        ks_flat = ks_2samp(flat, real.lateness_ns.to_numpy() / 1e3).statistic
        assert ks <= 0.25 and ks_flat >= 0.45, (period_ns, ks, ks_flat)
