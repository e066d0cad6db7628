"""The VPA recommender against hand-computed histogram cases, then on the
simulator."""
from __future__ import annotations

import dataclasses
import math

import pytest

from policies.control.vpa import (Container, DecayingHistogram, ExponentialHistogram, Vpa,
                                  VpaConfig)
from scenarios.config import compose
from scenarios.validate import ConfigError
from tests.usage_host import UsageHost

DAY = 24 * 3600.0


def vpa_cfg(**overrides):
    """The defaults of VpaConfig (the upstream ones) as a plain dict."""
    cfg = dataclasses.asdict(VpaConfig(name="vpa", controller="vpa"))
    cfg.update(overrides)
    return cfg


def test_cpu_histogram_has_upstreams_176_buckets():
    h = ExponentialHistogram()
    assert h.num_buckets == 176
    assert h.bucket_start(0) == 0 and h.bucket_start(1) == pytest.approx(0.01)
    assert h.bucket_start(2) == pytest.approx(0.01 + 0.0105)
    assert h.find_bucket(0.005) == 0 and h.find_bucket(0.0101) == 1
    assert h.find_bucket(1e9) == 175


def test_percentile_is_the_end_of_the_bucket_reaching_the_threshold():
    h = ExponentialHistogram()
    for _ in range(9):
        h.add(0.1, 1.0)
    h.add(1.0, 1.0)
    # 0.1 lies in bucket floor(log_1.05(0.1 x 0.05 / 0.01 + 1)) = floor(8.31) = 8
    assert h.find_bucket(0.1) == 8
    assert h.percentile(0.9) == pytest.approx(0.01 * (1.05 ** 9 - 1) / 0.05)
    n = h.find_bucket(1.0)
    assert h.percentile(0.95) == pytest.approx(h.bucket_start(n + 1))
    assert ExponentialHistogram().percentile(0.5) == 0.0      # empty


def test_decay_halves_a_samples_weight_per_half_life():
    # value 1.0 at t = 0, value 0.1 a day later: the later weighs twice as much,
    # so 2/3 of the weight is at 0.1 and p60 falls there; undecayed it would not
    decayed = DecayingHistogram(half_life_s=DAY)
    decayed.add_sample(1.0, 1.0, 0.0)
    decayed.add_sample(0.1, 1.0, DAY)
    assert decayed.percentile(0.6) == pytest.approx(decayed.bucket_start(9))
    flat = DecayingHistogram(half_life_s=DAY)
    flat.add_sample(1.0, 1.0, DAY)
    flat.add_sample(0.1, 1.0, DAY)
    assert flat.percentile(0.6) > 1.0


def test_decay_renormalises_before_the_exponent_overflows():
    h = DecayingHistogram(half_life_s=1.0)
    h.add_sample(0.1, 1.0, 0.0)
    h.add_sample(1.0, 1.0, 150.0)     # past 2^100: the reference moves to t = 150
    assert h.reference_s == 150.0
    assert h.total == pytest.approx(1.0 + 2.0 ** -150, rel=1e-12)
    assert h.percentile(0.5) > 1.0


def test_recommendation_applies_margin_confidence_and_minimum():
    ctl = Vpa(VpaConfig(name="vpa", controller="vpa"))
    c = Container(DAY, 0, 0.0)
    for i in range(720):                       # 12 h of one sample a minute at 0.5 cores
        c.histogram.add_sample(0.5, 0.1, 60.0 * i)
    c.first_sample_s, c.last_sample_s, c.samples = 0.0, 60.0 * 719, 720
    conf = min(719 * 60.0 / DAY, 720 / 1440)
    end = c.histogram.bucket_start(c.histogram.find_bucket(0.5) + 1)
    r = ctl.recommend(c)
    assert r.target == pytest.approx(end * 1.15)
    assert r.lower == pytest.approx(end * 1.15 * (1 + 0.001 / conf) ** -2)
    assert r.upper == pytest.approx(end * 1.15 * (1 + 1 / conf))
    idle = Container(DAY, 0, 0.0)
    idle.histogram.add_sample(0.0, 0.1, 0.0)
    idle.first_sample_s, idle.last_sample_s, idle.samples = 0.0, 0.0, 1
    floor = ctl.recommend(idle)
    assert floor.target == floor.lower == pytest.approx(0.025)   # 25 millicores
    assert math.isinf(floor.upper)                               # no confidence yet


def test_vpa_sets_the_limit_from_usage_on_the_simulator():
    from scenarios.simulate import attach_controller, build
    from sim.engine import s_to_ns
    from tests.simcfg import make_cfg, periodic

    # one thread: 20 ms of work every 170 ms (CATCloud's exp #1): 0.1176 cores
    cfg = make_cfg(periodic(threads=1, run_ms=20.0, sleep_ms=150.0), cores=2)
    cfg["controller"] = vpa_cfg(interval_s=1.7, recommender_interval_s=6.8,
                                update_interval_s=34.0)
    engine, machine, recorder, workload = build(cfg)
    ctl = attach_controller(cfg, engine, machine, recorder, workload)
    workload.start()
    engine.run(s_to_ns(35.0))
    (cgroup, c), = ctl.containers.items()
    # 1.7 s windows hold exactly 10 cycles: every sample is 0.1176 cores
    end = c.histogram.bucket_start(c.histogram.find_bucket(20 / 170) + 1)
    assert c.recommendation.target == pytest.approx(end * 1.15)
    bw = machine.groups[cgroup].cfs_bandwidth
    assert bw.period == 100_000_000
    assert bw.quota == round(end * 1.15 * 100_000) * 1000


def test_a_default_installation_adds_the_latest_window_once_a_minute():
    # three 15 s windows at 0.1 cores, then one at 0.5, every minute: the
    # once-a-minute fetch sees only the 0.5 windows
    minute = [0.1, 0.1, 0.1, 0.5] * 10
    for fetch, samples, p50 in ((None, 40, 0.1), (60.0, 10, 0.5)):
        ctl = Vpa(VpaConfig(name="vpa", controller="vpa", fetch_interval_s=fetch))
        host = UsageHost(None)
        ctl.start(host)
        host.run(ctl, minute, 15.0)
        (c,) = ctl.containers.values()
        assert c.samples == samples
        h = c.histogram
        assert h.percentile(0.5) == pytest.approx(h.bucket_start(h.find_bucket(p50) + 1))


def test_upstreams_updater_keeps_a_limit_within_the_bounds():
    # 20 ms every 170 ms (Exp 1): target p90 x 1.15 = 144.6 mc; after 5 minutes
    # of 15 s samples the bounds are about [85 mc, 44 cores]
    usage = [20 / 170] * 20

    def first_update(quota_us, **cfg):
        ctl = Vpa(VpaConfig(name="vpa", controller="vpa", **cfg))
        host = UsageHost(quota_us)
        ctl.start(host)
        host.run(ctl, usage, 15.0)
        (c,) = ctl.containers.values()
        return host.writes, c.recommendation

    writes, r = first_update(20_000, update_policy="out_of_bounds")
    assert writes == [] and r.lower < 0.2 < r.upper           # 200 mc is kept
    assert first_update(20_000)[0] == [(300.0, round(r.target * 100_000), 100_000)]
    assert first_update(5_000, update_policy="out_of_bounds")[0] != []    # below lower
    assert first_update(None, update_policy="out_of_bounds")[0] != []     # no limit
    # a pod older than the lifetime threshold is updated when the target
    # differs from its limit by at least the threshold (here 28%)
    assert first_update(20_000, update_policy="out_of_bounds", update_lifetime_s=300.0)[0] != []
    assert first_update(20_000, update_policy="out_of_bounds", update_lifetime_s=300.0,
                        update_threshold=0.3)[0] == []


def test_a_fetch_shorter_than_the_window_is_refused():
    with pytest.raises(ConfigError, match=r"controller\.fetch_interval_s = 5.0 is invalid"):
        compose(["controller=vpa", "controller.fetch_interval_s=5"])
