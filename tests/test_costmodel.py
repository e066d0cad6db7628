"""The cost model is defined once (sim/costmodel.py PARAMS): the compiled
fields, the model's construction, the calibration schema and its range
checks follow that definition; a profile's fractional ns are truncated on
load and nowhere else; the fits' float evaluation is the charged formula
without truncation."""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from omegaconf import MISSING

from scenarios.config import compose
from scenarios.schema import CalibrationConfig
from scenarios.validate import ConfigError
from sim.costmodel import (COST, LEVELS, NAMES, PARAMS, RATE, SIZE, SPREAD, SPREAD_QUANTILES, TIME,
                           CostModel)

PXD = Path(__file__).resolve().parents[1] / "sim" / "costmodel.pxd"
C_TYPE = {COST: "double", RATE: "double", TIME: "long long", SIZE: "long long",
          LEVELS: "tuple", SPREAD: "tuple"}


def test_pxd_declares_one_field_per_parameter():
    fields = re.findall(r"^\s+cdef readonly (\w+(?: \w+)?) (\w+)$", PXD.read_text(), re.M)
    assert fields == [("object", "name")] + [(C_TYPE[p.kind], p.name) for p in PARAMS]


def _distinct_values() -> dict:
    """A value for every parameter, none its default."""
    out = {}
    for i, p in enumerate(PARAMS, start=1):
        if p.kind == LEVELS:
            out[p.name] = ((32768.0, 1.5, False), (1 << 22, 0.25, True))
        elif p.kind == SPREAD:
            out[p.name] = (0.5, 0.7, 0.9, 1.0, 1.1 + i / 100, 1.5, 2.5)
        elif p.power_of_two:
            out[p.name] = 128
        else:
            out[p.name] = 1000 * i if p.kind in (TIME, SIZE) else 1000.5 * i
        assert out[p.name] != p.default, p.name
    return out


def test_model_holds_every_parameter_and_shows_it():
    values = _distinct_values()
    model = CostModel("m", **values)
    for name, value in values.items():
        assert getattr(model, name) == value, name
        assert f"{name}=" in repr(model)
    with pytest.raises(TypeError, match="no parameter direct_us"):
        CostModel(direct_us=1)


def test_the_default_model_is_the_definitions_defaults_and_free():
    model = CostModel()
    assert all(getattr(model, p.name) == p.default for p in PARAMS)
    assert model.is_ideal
    assert model.switch_cost_ns(3, 1 << 20, 10**6, True, 8, 1 << 20, 1 << 20, 4.0, True) == 0
    assert not CostModel(queue_ns_per_log2=1.0).is_ideal


def test_profile_load_truncates_fractional_ns_and_keeps_rates():
    cal = {"name": "p", "direct_ns": 2595.86, "per_level_ns": 3.4e-19, "migration_ns": 5000.9,
           "refill_ns_per_line": 0.75, "cache_line_bytes": 64, "max_refill_bytes": 262144,
           "cache_decay_ns": 2e7, "queue_ns_per_log2": 1437.52, "idle_exit_ns": 61054.5,
           "cache_levels": [{"name": "L2", "bytes": 1506399, "ns_per_line": 0.8241}]}
    model = CostModel.from_config(cal)
    assert (model.direct_ns, model.per_level_ns, model.migration_ns, model.idle_exit_ns) \
        == (2595, 0, 5000, 61054)
    assert (model.refill_ns_per_line, model.queue_ns_per_log2) == (0.75, 1437.52)
    assert model.reinsert_ns_per_log2 == 0.0           # optional: the definition's default
    assert model.cache_levels == ((1506399.0, 0.8241, False),)
    del cal["migration_ns"]
    with pytest.raises(KeyError, match="calibration.migration_ns is required"):
        CostModel.from_config(cal)


def test_charged_cost_truncates_each_rate_term_and_the_fit_does_not():
    model = CostModel(direct_ns=1000, per_level_ns=100, migration_ns=7, idle_exit_ns=50,
                      queue_ns_per_log2=10.7, reinsert_ns_per_log2=3.3,
                      cache_levels=((4096, 1.3, False),))
    args = (2, 8192, 10**6, False, 3, 8192, 8192, 1.5)
    queue, reinsert = 10.7 * math.log2(3), 3.3 * 1.5
    refill = 4096 / 64 * 1.0 * 1.3                      # the whole resident part evicted
    exact = 1000 + 100 * 2 + reinsert + queue + refill + 50
    assert model.switch_cost(*args, from_idle=True, whole_ns=False) == pytest.approx(exact)
    assert model.switch_cost_ns(*args, True) == \
        1200 + math.trunc(reinsert) + math.trunc(queue) + math.trunc(refill) + 50
    assert model.switch_cost_ns(*args) == model.switch_cost_ns(*args, True) - 50
    assert model.switch_to_idle_ns(3) == 1300


def test_idle_exit_grows_with_the_idle_time_to_its_cold_value():
    warm, cold, tau = 30_000, 70_000, 2_000_000
    model = CostModel(idle_exit_ns=warm, idle_exit_cold_ns=cold, idle_exit_decay_ns=tau)
    assert model.idle_exit(0) == warm
    assert model.idle_exit(tau, whole_ns=False) == pytest.approx(warm + cold * (1 - math.exp(-1)))
    assert model.idle_exit_ns_at(tau) == warm + math.trunc(cold * (1 - math.exp(-1)))
    assert model.idle_exit(100 * tau) == pytest.approx(warm + cold)
    # charged on the switch out of idle only, at the idle time given
    args = (2, 0, -1, False)      # -1: a task that never ran
    assert model.switch_cost_ns(*args, from_idle=True, idle_ns=tau) == \
        model.switch_cost_ns(*args) + model.idle_exit_ns_at(tau)
    # without the cold term the idle time does not matter
    flat = CostModel(idle_exit_ns=warm)
    assert flat.idle_exit(0) == flat.idle_exit(10**9) == warm


def test_schema_has_one_key_per_parameter():
    fields = {f.name: f for f in dataclasses.fields(CalibrationConfig)}
    cost = [n for n in fields if n in NAMES]
    assert cost == list(NAMES)
    for p in PARAMS:
        default = fields[p.name].default
        if p.required:
            assert default is MISSING, p.name
        else:
            assert default == (None if p.kind in (LEVELS, SPREAD) else p.default), p.name
        assert fields[p.name].type is (int if p.kind == SIZE else float) or \
            p.kind in (LEVELS, SPREAD)


@pytest.mark.parametrize("param", [p for p in PARAMS if p.minimum is not None],
                         ids=lambda p: p.name)
def test_every_bound_is_checked(param):
    below = param.minimum - 1
    with pytest.raises(ConfigError) as info:
        compose([f"calibration.{param.name}={below}"])
    assert f"calibration.{param.name} = {below}" in str(info.value)
    assert f"must be >= {param.minimum}" in str(info.value)


@pytest.mark.parametrize("bad", ["[0.5,0.8,0.9,1.0,1.2,1.5]", "[0.5,0.8,0.9,1.1,1.2,1.5,2.0]",
                                 "[0.5,0.9,0.8,1.0,1.2,1.5,2.0]", "[0,0.8,0.9,1.0,1.2,1.5,2.0]"])
def test_a_spread_is_checked(bad):
    """Seven ratios at SPREAD_QUANTILES, > 0, non-decreasing, the median's 1;
    named with the rule."""
    assert len(SPREAD_QUANTILES) == 7 and SPREAD_QUANTILES[3] == 0.5
    with pytest.raises(ConfigError, match="calibration.idle_exit_spread .*non-decreasing ratios"):
        compose([f"calibration.idle_exit_spread={bad}"])
    cfg = compose(["calibration.timer_irq_spread=[0.5,0.8,0.9,1.0,1.2,1.5,2.0]"])
    assert CostModel.from_config(cfg.calibration).timer_irq_spread == (
        0.5, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0)
    assert CostModel.from_config(cfg.calibration).idle_exit_spread == ()


def test_an_idle_exit_is_charged_at_its_drawn_ratio():
    model = CostModel(idle_exit_ns=30_000, idle_exit_cold_ns=60_000, idle_exit_decay_ns=10**6)
    median = model.idle_exit_ns_at(2 * 10**6)
    assert model.idle_exit_ns_at(2 * 10**6, 1.5) == int(1.5 * median)
    assert model.idle_exit_ns_at(2 * 10**6, 1.0) == median
