"""CATCloud (policies/control/catcloud.py): recommendations for the thesis's
deterministic run/sleep patterns, throttle scaling, the two modes, the
lower-ratio rule and the multicore aggregation, by hand and on the
simulator."""
from __future__ import annotations


import numpy as np
import pyarrow.compute as pc
import pytest

import scenarios.simulate as api
from policies.control.catcloud import (PERIOD_AGNOSTIC, PERIOD_BOUND, Catcloud,
                                       CatcloudConfig, CgroupTrace, lower_ratio)
from scenarios.config import compose
from scenarios.simulate import simulate

MS = 1_000_000
SLICE_MS = 5      # sched_cfs_bandwidth_slice: the tolerance the issue asks for


def run(*overrides, duration_s=10.0):
    """Simulate ebizzy under catcloud; returns (summary row, intervals, controller)."""
    cfg = compose(["workload=ebizzy", "host=this-vm", "controller=catcloud",
                   f"duration_s={duration_s}", "warmup_s=1", *overrides])
    captured = {}
    orig = api.attach_controller

    def capture(*a, **k):
        captured["c"] = orig(*a, **k)
        return captured["c"]
    api.attach_controller = capture
    try:
        r = simulate(cfg)
    finally:
        api.attach_controller = orig
    return r.summary.to_pylist()[0], r.intervals, captured["c"]


def cpu_max_of(intervals, cgroup="/ebizzy"):
    rows = intervals.filter(pc.equal(intervals.column("cgroup"), cgroup))
    return list(zip(rows.column("quota_us").to_pylist(), rows.column("period_us").to_pylist()))


def assert_near(summary, run_ms, cycle_ms):
    assert summary["catcloud_tracer"] == "kernel"
    assert abs(summary["catcloud_quota_us_final"] / 1000 - run_ms) <= SLICE_MS
    assert abs(summary["catcloud_period_us_final"] / 1000 - cycle_ms) <= SLICE_MS


def test_exp1_recommendation_within_a_slice_and_recommend_mode_leaves_cpu_max():
    s, intervals, c = run("workload.preset=exp1", "controller.mode=recommend",
                          "controller.initial_period_us=100000")
    assert_near(s, 20, 170)
    assert s["catcloud_source_final"] == PERIOD_AGNOSTIC
    # the thesis's buffers fill after 5 cycles (5 x 170 ms): no warm-up to speak of
    assert s["catcloud_first_recommendation_s"] < 1.0
    # recommend-only: cpu.max stays at the initial limit for the whole run
    assert set(cpu_max_of(intervals)) == {(100000, 100000)}
    assert s["catcloud_cpu_max_writes"] == 1          # the initial limit only
    assert c.timeline and all(abs(q / 1000 - 20) <= SLICE_MS for _, _, q, _, _ in c.timeline)


def test_exp2_recommendation_within_a_slice():
    # the period-agnostic tracer sees the 40/70 cycle exactly
    s, intervals, c = run("workload.preset=exp2", "controller.mode=recommend")
    assert set(cpu_max_of(intervals)) == {(100000, 100000)}
    agnostic = [(q, t) for _, _, q, t, src in c.timeline if src == PERIOD_AGNOSTIC]
    assert agnostic and all(abs(q / 1000 - 40) <= SLICE_MS and abs(t / 1000 - 70) <= SLICE_MS
                            for q, t in agnostic)
    # with the literal p99(runtime) + p99(yield), the period-bound tracer at
    # the 100 ms period sometimes has the lower ratio (70 ms / ~125 ms: the
    # two percentiles come from different periods) and wins; the option
    # period_formula=percentile_of_sums removes that
    assert {src for *_, src in c.timeline} == {PERIOD_AGNOSTIC, PERIOD_BOUND}
    s, _, c = run("workload.preset=exp2", "controller.mode=recommend",
                  "controller.period_formula=percentile_of_sums")
    assert_near(s, 40, 70)
    assert {src for *_, src in c.timeline} == {PERIOD_AGNOSTIC}


def test_auto_mode_writes_the_recommendation_to_cpu_max():
    s, intervals, _ = run("workload.preset=exp2", "controller.mode=auto")
    assert_near(s, 40, 70)
    quota, period = cpu_max_of(intervals)[-1]
    assert abs(quota / 1000 - 40) <= SLICE_MS and abs(period / 1000 - 70) <= SLICE_MS
    assert (quota, period) == (s["catcloud_quota_us_final"], s["catcloud_period_us_final"])
    # and latency stays ideal: one 40 ms burst, unthrottled
    assert s["latency_p50_s"] == pytest.approx(0.040, abs=0.001)


def test_heavy_throttle_scales_the_quota_and_finds_the_valid_runtime():
    # 5 ms per 100 ms for a 20 ms burst: every period throttled
    s, intervals, c = run("workload.preset=exp1", "controller.mode=auto",
                          "controller.initial_quota_us=5000")
    assert s["catcloud_scalings"] >= 1
    quotas = [q for q, _ in cpu_max_of(intervals)]
    assert max(quotas) >= 5000 + 100000          # over-provisioned by at least one CPU
    assert_near(s, 20, 170)
    assert cpu_max_of(intervals)[-1] == (s["catcloud_quota_us_final"],
                                         s["catcloud_period_us_final"])


def test_recommend_mode_never_scales_even_under_heavy_throttle():
    s, intervals, _ = run("workload.preset=exp1", "controller.mode=recommend",
                          "controller.initial_quota_us=5000", duration_s=5.0)
    assert s["catcloud_scalings"] == 0
    assert set(cpu_max_of(intervals)) == {(5000, 100000)}


def test_userspace_approximation_is_labelled_and_close():
    s, _, _ = run("workload.preset=exp1", "controller.tracer=userspace",
                  "controller.interval_s=0.002")
    assert s["catcloud_tracer"] == "userspace-approximation"
    assert abs(s["catcloud_period_us_median"] / 1000 - 170) <= 2 * SLICE_MS


# --- hand cases ---------------------------------------------------------------
class FakeCtl:
    def __init__(self, **overrides):
        self.cfg = CatcloudConfig(name="catcloud", controller="catcloud", **overrides)
        self.records, self.applied = [], []

    def record(self, now, cgroup, rec):
        self.records.append(rec)

    def apply(self, cgroup, q, t):
        self.applied.append((q, t))


def feed_cycles(trace, cpu, run_ms, yield_ms, n, t0=0, slice_ms=5):
    """Grants every slice during run_ms, then a yield_ms gap; returns the end."""
    t, exec_ns = t0, getattr(trace, "_exec", {}).get(cpu, 0)
    for _ in range(n):
        for k in range(0, run_ms, slice_ms):
            trace.runtime_assigned(cpu, t + k * MS, exec_ns + k * MS, 0)
        t += (run_ms + yield_ms) * MS
        exec_ns += run_ms * MS
    trace.runtime_assigned(cpu, t, exec_ns, 0)
    trace.__dict__.setdefault("_exec", {})[cpu] = exec_ns
    return t


def test_lower_ratio_rule_by_hand():
    assert lower_ratio([(PERIOD_AGNOSTIC, 20, 170), (PERIOD_BOUND, 20, 120)])[0] == PERIOD_AGNOSTIC
    assert lower_ratio([(PERIOD_AGNOSTIC, 40, 70), (PERIOD_BOUND, 50, 100)])[0] == PERIOD_BOUND
    # a tie keeps the period-agnostic one (listed first)
    assert lower_ratio([(PERIOD_AGNOSTIC, 20, 100), (PERIOD_BOUND, 40, 200)])[0] == PERIOD_AGNOSTIC


def test_trace_picks_the_lower_ratio_tracer():
    # quota_round=up: the quota is the traced runtime, so the ratios below
    # read directly (the default's one step above it does not change the winner)
    ctl = FakeCtl(quota_round="up")
    trace = CgroupTrace(ctl, "/g", 5 * MS, (100000, 100000))
    # period-agnostic: 40 run / 30 yield -> 40/70 = 0.571
    t = feed_cycles(trace, 0, 40, 30, 6)
    assert trace.recommendation is None            # wait_for both: period-bound not full
    # period-bound: 50 ms of runtime in every 100 ms period -> 50/(50+50) = 0.5
    # (the boundaries all at t: the runqueue stays in the active list)
    for k in range(5):
        trace.period_elapsed(t, 100 * MS, 50 * MS, False)
    assert trace.recommendation == (50000, 100000, PERIOD_BOUND)
    # period-bound 65/100 -> 65/100 = 0.65 > 0.571: period-agnostic wins
    ctl2 = FakeCtl(quota_round="up")
    trace2 = CgroupTrace(ctl2, "/g", 5 * MS, (100000, 100000))
    t = feed_cycles(trace2, 0, 40, 30, 6)
    for k in range(5):
        trace2.period_elapsed(t, 100 * MS, 65 * MS, False)
    assert trace2.recommendation == (40000, 70000, PERIOD_AGNOSTIC)


def test_sub_slice_gaps_stay_inside_the_burst_and_throttle_is_corrected():
    ctl = FakeCtl(wait_for="any")
    trace = CgroupTrace(ctl, "/g", 5 * MS, None)
    # a 20 ms burst with a 3 ms gap in the middle (< slice), then 150 ms idle
    t, e = 0, 0
    for _ in range(6):
        trace.runtime_assigned(0, t, e, 0)
        trace.runtime_assigned(0, t + 10 * MS, e + 10 * MS, 0)
        trace.runtime_assigned(0, t + 13 * MS, e + 10 * MS, 0)  # back after 3 ms
        t += 170 * MS
        e += 17 * MS
    r = trace.rqs[0]
    assert all(y == 150 * MS for y in r.yields)
    assert all(x == 20 * MS for x in r.runtime)
    # a throttle of 80 ms inside the next burst: reported with the first
    # grant after it, removed from both clocks
    trace.runtime_assigned(0, t, e, 0)
    trace.runtime_assigned(0, t + 5 * MS + 80 * MS, e + 5 * MS, 80 * MS)
    trace.runtime_assigned(0, t + 10 * MS + 80 * MS, e + 10 * MS, 0)
    t2 = t + 170 * MS + 80 * MS
    trace.runtime_assigned(0, t2, e + 10 * MS + 10 * MS, 0)
    assert r.runtime[-1] == 20 * MS and r.yields[-1] == 150 * MS


@pytest.mark.parametrize("agg,expected", [("sum_max", (40000, 200000)),
                                          ("sum_mean", (40000, 185000)),
                                          ("sum_sum", (40000, 370000))])
def test_multicore_aggregation_options(agg, expected):
    ctl = FakeCtl(multicore=agg, wait_for="any", quota_round="up")
    trace = CgroupTrace(ctl, "/g", 5 * MS, (100000, 100000))
    # two runqueues: 20/170 and 20/200
    t = feed_cycles(trace, 0, 20, 150, 6)
    feed_cycles(trace, 1, 20, 180, 6, t0=t - 6 * 200 * MS)
    trace.runtime_assigned(0, t + 1, trace._exec[0], 0)   # both active now
    trace._recommend(t + 1)
    assert trace.recommendation[:2] == expected


def test_cgroup_wide_tracing_follows_a_migrating_thread():
    """One thread, 20 ms run / 150 ms sleep, each burst on the other CPU:
    per runqueue each sees the other's bursts as yield (20/340), and only
    the runqueue active in the last period is in the active list (§3.4):
    20/340, half the demand; traced as one cgroup it is 20/170 (each quota
    one step above the 20 ms burst: 21 ms)."""
    results = {}
    for agg in ("sum_max", "cgroup"):
        trace = CgroupTrace(FakeCtl(multicore=agg, wait_for="any"), "/g", 5 * MS, None)
        t, group, per_cpu = 0, 0, {0: 0, 1: 0}
        for k in range(14):
            cpu = k % 2
            for j in range(0, 20, 5):
                trace.runtime_assigned(cpu, t + j * MS, per_cpu[cpu] + j * MS, 0, group + j * MS)
            per_cpu[cpu] += 20 * MS
            group += 20 * MS
            t += 170 * MS
        trace._recommend(t - 170 * MS + 15 * MS)
        results[agg] = trace.recommendation[:2]
    assert results["cgroup"] == (21000, 170000)
    assert results["sum_max"] == (21000, 340000)


def test_controller_without_the_hook_falls_back_or_refuses():
    class PlainHost:   # a real host: no trace_bandwidth
        def __init__(self):
            self.writes = []

        def now_ns(self):
            return 0

        def functions(self):
            return ["/g"]

        def cpu_usage_ns(self, cgroup):
            return 0

        def cpu_stat(self, cgroup):
            from backends.host import CpuStat
            return CpuStat()

        def set_cpu_max(self, cgroup, q, t, burst_us=0):
            self.writes.append((q, t))

    ctl = Catcloud(CatcloudConfig(name="c", controller="catcloud", tracer="kernel"))
    with pytest.raises(ValueError, match="user-space|userspace"):
        ctl.start(PlainHost())
    ctl = Catcloud(CatcloudConfig(name="c", controller="catcloud"))
    host = PlainHost()
    ctl.start(host)
    ctl.step(host)
    assert ctl.summary()["catcloud_tracer"] == "userspace-approximation"
    assert host.writes == [(100000, 100000)]
    assert np.isnan(ctl.summary()["catcloud_quota_us_final"])


# --- cpu_limit_mcpu_mean / _final (scenarios/simulate.py, any cgroup with a cpu.max) ----
def test_cpu_limit_columns_static_none_and_exact_time_average():
    from types import SimpleNamespace

    from scenarios.simulate import cpu_limit_columns
    cfg = compose(["workload=ebizzy", "host=this-vm", "controller=static",
                   "controller.quota_us=20000", "controller.period_us=170000",
                   "duration_s=3", "warmup_s=1"])
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["cpu_limit_mcpu_mean"] == pytest.approx(1000 * 20 / 170)
    assert s["cpu_limit_mcpu_final"] == pytest.approx(1000 * 20 / 170)
    s = simulate(compose(["workload=ebizzy", "host=this-vm", "controller=none",
                          "duration_s=2", "warmup_s=1"])).summary.to_pylist()[0]
    assert np.isnan(s["cpu_limit_mcpu_mean"]) and np.isnan(s["cpu_limit_mcpu_final"])
    # by hand: a at 200 mc from 0, 500 mc from 6 s; b unlimited until 4 s
    # (counts as the 2-CPU host), then 100 mc; window [2 s, 10 s)
    a, b = object(), object()
    log = [(0, a, 20000, 100000), (4 * 10**9, b, 10000, 100000),
           (6 * 10**9, a, 50000, 100000)]
    m = SimpleNamespace(cpu_max_log=log, topology=SimpleNamespace(nr_cpus=2))
    out = cpu_limit_columns(m, 2 * 10**9, 10 * 10**9)
    mean_a = (200 * 4 + 500 * 4) / 8
    mean_b = (2000 * 2 + 100 * 6) / 8
    assert out["cpu_limit_mcpu_mean"] == pytest.approx(mean_a + mean_b)
    assert out["cpu_limit_mcpu_final"] == pytest.approx(600)


def test_kernel_tracer_reports_exact_throttles_and_period_expiries():
    """SimHost's tracer on Fig. 2.1 (quota 15 ms, period 100 ms, slice 5 ms):
    the first borrow after each unthrottle carries that throttle's exact
    85 ms (the throttle correction's input), and each expiry of the period
    timer reports a 100 ms period with 15 ms used, throttled."""
    from backends.simhost import SimHost
    from simcfg import IDEAL, make_cfg, periodic

    cfg = make_cfg(periodic(threads=1, run_ms=10_000.0), cores=1, duration_s=1.0,
                   warmup_s=0.0, calibration=IDEAL)
    engine, machine, _, workload = api.build(cfg)
    host = SimHost(machine)
    host.set_cpu_max("periodic", 15_000, 100_000)

    class Observer:
        borrows, periods = [], []

        def runtime_assigned(self, cpu, now, exec_ns, throttled_ns, group_exec_ns=None):
            self.borrows.append((now, throttled_ns))

        def period_elapsed(self, now, period_ns, runtime_ns, throttled):
            self.periods.append((now, period_ns, runtime_ns, throttled))
    obs = Observer()
    host.trace_bandwidth("periodic", obs)
    workload.start()
    engine.run(500 * MS + 2)
    # the refill pays the 1 ns debt; the borrow comes when that is used up
    corrected = [(t, ns) for t, ns in obs.borrows if ns]
    assert corrected == [(k * 100 * MS + 1, 85 * MS) for k in range(1, 6)]
    # the period under way at registration is partial and not reported
    assert obs.periods == [(k * 100 * MS, 100 * MS, 15 * MS, True) for k in range(2, 6)]


# --- issue 25, "Controllers that flap" -----------------------------------------
FLAP_CASE = ("host=generic", "host.cores=2", "calibration=ideal", "workload.run_ms=20",
             "workload.sleep_ms=150")


def writes_after(c, t_s):
    return [(t / 1e9, q, p) for t, _, q, p in c.host.machine.cpu_max_log if t >= t_s * 1e9]


def test_issue_case_settles_one_step_above_the_burst_and_stays():
    """20 ms every 170 ms, started without a limit: the literal rules
    (quota = the traced runtime, every change written) alternate 20/171 and
    191/171; the defaults settle at 21/170 within seconds and never write
    again."""
    s, intervals, c = run(*FLAP_CASE, "warmup_s=10", duration_s=300.0)
    assert writes_after(c, 10.0) == []
    q, t = cpu_max_of(intervals)[-1]
    assert 20_000 < q <= 22_000 and 170_000 <= t <= 172_000
    assert s["catcloud_scalings"] == 0
    assert s["nr_throttled"] == 0 and s["latency_p99_s"] == pytest.approx(0.020, abs=1e-6)
    # the literal reading flaps on the same run: a 20 ms quota for a 20 ms
    # burst throttles it at its last instant (the kernel needs
    # runtime_remaining > 0), three throttled periods of five scale the
    # quota by a CPU, and the period-bound tracer (at most the quota per
    # period) brings it back to 20/171 by the lower-ratio rule
    s, _, c = run(*FLAP_CASE, "controller.quota_round=up", "controller.hold_us=0",
                  duration_s=120.0)
    assert s["catcloud_scalings"] > 10
    assert {(q, t) for _, q, t in writes_after(c, 60.0)} >= {(20_000, 171_000),
                                                            (191_000, 171_000)}


def test_quota_is_one_step_above_the_traced_runtime():
    for rounding, quota in (("above", 21_000), ("up", 20_000)):
        trace = CgroupTrace(FakeCtl(wait_for="any", quota_round=rounding), "/g", 5 * MS, None)
        feed_cycles(trace, 0, 20, 150, 6)
        assert trace.recommendation[:2] == (quota, 170_000)
    # a runtime between two steps is rounded up either way
    trace = CgroupTrace(FakeCtl(wait_for="any"), "/g", 5 * MS, None)
    assert trace._clamp(20.3 * MS, 170 * MS) == (21_000, 170_000)


@pytest.mark.parametrize("hold_us,new,held", [
    (None, (13_000, 54_000), True),     # one step lower in quota: within resolution
    (None, (14_000, 55_000), True),     # one step longer period
    (None, (13_000, 55_000), True),
    (None, (12_000, 54_000), False),    # two steps: taken
    (None, (15_000, 54_000), False),    # any rise is taken
    (None, (14_000, 53_000), False),
    (0, (13_000, 54_000), False),       # hold_us=0: the literal reading
    (2_000, (12_000, 54_000), True),
])
def test_a_fall_within_the_resolution_keeps_the_previous_recommendation(hold_us, new, held):
    trace = CgroupTrace(FakeCtl(hold_us=hold_us), "/g", 5 * MS, None)
    trace.recommendation = (14_000, 54_000, PERIOD_AGNOSTIC)
    assert trace._held(new + (PERIOD_BOUND,)) is held
