"""The Holt-Winters autoscaler (policies/control/holt_winters.py): its
forecast on series whose future is known, the limit it writes, its config
checks, and the experiments that run it."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from policies import control
from policies.control.holt_winters import HoltWinters, HoltWintersConfig, forecast_peak
from scenarios.config import CONF_DIR, compose, expand_sweep
from scenarios.simulate import attach_controller, build
from scenarios.validate import ConfigError
from sim.engine import s_to_ns
from tests.simcfg import make_cfg, periodic
from tests.usage_host import UsageHost


def hw_cfg(**overrides) -> dict:
    """HoltWintersConfig's defaults as a plain dict."""
    cfg = dataclasses.asdict(HoltWintersConfig(name="holt_winters", controller="holt_winters"))
    cfg.update(overrides)
    return cfg


def seasonal(n: int, base: float = 0.1, peak: float = 0.5, season: int = 12,
             high: int = 3) -> np.ndarray:
    """``n`` samples of a series that is ``peak`` for the first ``high`` of
    every ``season`` samples and ``base`` otherwise."""
    return np.where(np.arange(n) % season < high, peak, base)


def test_the_forecast_of_a_seasonal_series_repeats_its_season():
    cfg = HoltWintersConfig(name="holt_winters", controller="holt_winters")
    history = seasonal(120)            # ten seasons, ending just after a trough
    # the next 12 samples hold a whole season: its peak
    peak, _ = forecast_peak(history, cfg, 12)
    assert peak == pytest.approx(0.5, abs=1e-3)
    # the next 9 hold only the trough (the season restarts at sample 120 + 0):
    # a forecast, not the history's maximum
    trough, _ = forecast_peak(seasonal(120 + 3)[3:], cfg, 9)
    assert trough == pytest.approx(0.1, abs=1e-3)


def test_a_trend_is_extrapolated_over_the_horizon():
    cfg = HoltWintersConfig(name="holt_winters", controller="holt_winters",
                            seasonal_periods=None)
    ramp = 0.1 + 0.002 * np.arange(120)              # last sample 0.338
    peak, _ = forecast_peak(ramp, cfg, 12)
    assert peak == pytest.approx(0.338 + 12 * 0.002, abs=1e-3)
    flat, _ = forecast_peak(ramp, dataclasses.replace(cfg, trend=False), 12)
    assert flat < 0.339                                # no trend: no rise beyond the level


def test_it_writes_the_forecast_seasons_peak_once_warm_then_every_interval():
    ctl = HoltWinters(control.config(hw_cfg(margin=0.2)))
    host = UsageHost()
    ctl.start(host)
    host.run(ctl, seasonal(119), 15.0)
    assert host.writes == []                           # warm-up: 30 min = 120 samples
    host.run(ctl, seasonal(120)[119:], 15.0)
    (t, quota, period), = host.writes
    assert t == 1800.0 and period == 100_000
    assert quota == pytest.approx(0.5 * 1.2 * 100_000, abs=100)   # peak x (1 + margin)
    host.run(ctl, seasonal(132)[120:], 15.0)          # the next write 3 min later
    assert [w[0] for w in host.writes] == [1800.0, 1980.0]
    summary = ctl.summary()
    assert summary["holt_winters_recommendations"] == 2
    assert summary["holt_winters_first_recommendation_s"] == 1800.0
    assert summary["holt_winters_target_mcpu_mean"] == pytest.approx(600.0, abs=1.0)


def test_it_sets_the_mean_usage_of_a_periodic_thread_on_the_simulator():
    # one thread: 20 ms of work every 170 ms (CATCloud's Exp 1); 1.7 s samples
    # hold exactly 10 cycles, so every sample is 20/170 cores and so is the forecast
    cfg = make_cfg(periodic(threads=1, run_ms=20.0, sleep_ms=150.0), cores=2)
    cfg["controller"] = hw_cfg(interval_s=1.7, recommend_interval_s=1.7 * 12,
                               warmup_s=1.7 * 24, history_s=1.7 * 24)
    engine, machine, recorder, workload = build(cfg)
    ctl = attach_controller(cfg, engine, machine, recorder, workload)
    workload.start()
    engine.run(s_to_ns(40.0))
    (cgroup,) = ctl.containers
    bw = machine.groups[cgroup].cfs_bandwidth
    assert not bw.enabled                              # before the first recommendation
    engine.run(s_to_ns(41.0))
    assert bw.period == 100_000_000
    assert bw.quota == round(20 / 170 * 100_000) * 1000


@pytest.mark.parametrize("overrides, message", [
    (["controller.seasonal_periods=1"], r"controller\.seasonal_periods = 1 is invalid"),
    (["controller.warmup_s=300"], r"controller\.warmup_s = 300.0 is invalid: must hold at least 24"),
    (["controller.history_s=120", "controller.seasonal_periods=null"],
     r"controller\.history_s = 120.0 is invalid: must hold at least 10"),
    (["controller.trend=false", "controller.smoothing_trend=0.5"],
     r"controller\.smoothing_trend = 0.5 is invalid: needs controller\.trend"),
    (["controller.seasonal_periods=null", "controller.smoothing_seasonal=0.5"],
     r"controller\.smoothing_seasonal = 0.5 is invalid: needs controller\.seasonal_periods"),
    (["controller.recommend_interval_s=5"], r"controller\.recommend_interval_s = 5.0 is invalid"),
    (["controller.smoothing_level=1.5"], r"controller\.smoothing_level = 1.5 is invalid"),
    (["controller.margin=-0.1"], r"controller\.margin = -0.1 is invalid"),
])
def test_bad_parameters_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(["controller=holt_winters", *overrides])


@pytest.mark.parametrize("experiment, n", [("catcloud_baselines_exp1", 3 * 4 * 3),
                                           ("catcloud_baselines_exp2", 3 * 8 * 3),
                                           ("catcloud_vpa_defaults", 2 * 2 * 2 * 4 * 3)])
def test_the_baseline_experiments_compose(experiment, n):
    params = OmegaConf.load(CONF_DIR / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    assert math.prod(len(str(v).split(",")) for v in params.values()) == n
    assert len(str(params.seed).split(",")) >= 3
    # every key pinned to its last value but the controller (composing all n
    # points is what costs)
    pinned = [f"{k}={str(v).split(',')[-1]}" for k, v in params.items() if k != "controller"]
    points, _, _ = expand_sweep([f"experiment={experiment}", *pinned])
    assert len(points) == len(str(params.get("controller", "vpa")).split(","))
    for point in points:
        cfg = compose([f"experiment={experiment}", *point])
        assert cfg.workload.name == "ebizzy" and cfg.host.name == "this-vm"
        # the window: the 10 minutes after the slowest autoscaler's warm-up,
        # Holt-Winters' own where it runs, VPA's 20 minutes (4.2.3) else
        runs_hw = "holt_winters" in str(params.get("controller", ""))
        warmup = HoltWintersConfig.warmup_s if runs_hw else 1200.0
        assert (cfg.warmup_s, cfg.duration_s) == (warmup, warmup + 600.0)
