"""CFS bandwidth control (sim/bandwidth.py): the thesis's Fig. 2.1
arithmetic, quota on several CPUs, burst, hierarchical limits, slack
return, and that groups without a limit behave as before."""
from __future__ import annotations

import pytest

import backends.simhost
from scenarios.simulate import build, simulate
from sim.engine import NSEC_PER_MSEC, s_to_ns
from sim.invariants import check_rq_invariants
from sim.machine import Machine
from sim.rq import pelt_decay
from sim.task import BURST_EXIT
from simcfg import DEFAULT_COSTS, IDEAL, make_cfg, periodic, poisson

MS = NSEC_PER_MSEC
SCHEDULERS = [{"name": "cfs"}, {"name": "eevdf"}, {"name": "lags"}]


def _hog_machine(cores=1, threads=1, scheduler=None, calibration=IDEAL, **host):
    """A periodic CPU hog in /periodic, built but not started."""
    cfg = make_cfg(periodic(threads=threads, run_ms=10_000.0), cores=cores, duration_s=10.0,
                   warmup_s=0.0, scheduler=scheduler, calibration=calibration, **host)
    engine, machine, _, workload = build(cfg)
    return engine, machine, workload


def _period_usage(engine, machine, tg, period_ns, periods):
    """tg's cpuacct usage in each of the first ``periods`` periods."""
    marks = []

    def mark():
        machine.sync()
        marks.append(sum(t.usage_ns for t in _subtree(tg)))
    for k in range(periods + 1):
        engine.call_at(k * period_ns, mark)
    return marks


def _subtree(tg):
    out = [tg]
    for c in tg.children:
        out += _subtree(c)
    return out


def _diffs(marks):
    return [b - a for a, b in zip(marks, marks[1:])]


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s["name"])
@pytest.mark.parametrize("calibration", [IDEAL, DEFAULT_COSTS], ids=["ideal", "default"])
def test_fig_2_1_three_borrows_and_85_ms_throttled(scheduler, calibration):
    """Quota 15 ms, period 100 ms, slice 5 ms: the hog's cfs_rq borrows
    three 5 ms slices, runs 15 ms and is throttled for the other 85 ms of
    every period, exactly (switch costs count as the group's runtime)."""
    engine, m, wl = _hog_machine(scheduler=scheduler, calibration=calibration)
    tg = m.groups["/periodic"]
    m.set_cfs_bandwidth(tg, 15_000, 100_000)
    borrows = []
    m.policy.bandwidth.assign_observers.append(
        lambda cfs_rq, amount, now: borrows.append((now, amount)))
    marks = _period_usage(engine, m, tg, 100 * MS, 5)
    throttles = []
    cfs_rq = tg.cfs_rq[0]

    def watch():
        throttles.append((engine.now, cfs_rq.throttled))
        engine.call_later(MS // 2, watch)
    engine.call_at(0, watch)
    wl.start()
    engine.run(s_to_ns(0.5) + 1)
    b = tg.cfs_bandwidth
    assert borrows[:3] == [(0, 5 * MS), (5 * MS, 5 * MS), (10 * MS, 5 * MS)]
    # later periods: 1 ns paid at the unthrottle, then three borrows that
    # add up to the rest of the quota
    for k in range(1, 5):
        start = k * 100 * MS
        got = [a for t, a in borrows if start <= t < start + 100 * MS]
        assert len(got) == 3 and sum(got) == 15 * MS - 1
    assert _diffs(marks) == [15 * MS] * 5
    assert b.nr_periods == 5 and b.nr_throttled == 5
    assert b.throttled_time == 5 * 85 * MS
    # throttled from 15 ms into each period to its end
    for t, throttled in throttles:
        assert throttled == (15 * MS <= t % (100 * MS)), t


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s["name"])
def test_fig_2_1_hooks_report_85_ms_throttled_per_period(scheduler):
    """The throttle, unthrottle and period-timer hooks see Fig. 2.1 as the
    kernel counts it: a throttle 15 ms into each period, ended by the next
    refill after exactly 85 ms; each period-timer expiry finds the pool
    15 ms down and the cfs_rq waiting for it."""
    engine, m, wl = _hog_machine(scheduler=scheduler)
    tg = m.groups["/periodic"]
    m.set_cfs_bandwidth(tg, 15_000, 100_000)
    bw = m.policy.bandwidth
    events = []
    bw.throttle_observers.append(lambda cfs_rq, now: events.append(("throttle", now)))
    bw.unthrottle_observers.append(
        lambda cfs_rq, now, ns: events.append(("unthrottle", now, ns)))
    bw.period_observers.append(
        lambda cfs_b, now, overrun, used, throttled:
        events.append(("period", now, overrun, used, throttled)))
    wl.start()
    engine.run(s_to_ns(0.5) + 1)
    expect = [("throttle", 15 * MS)]
    for k in range(1, 6):
        expect += [("period", k * 100 * MS, 1, 15 * MS, True),
                   ("unthrottle", k * 100 * MS, 85 * MS)]
        if k < 5:
            expect.append(("throttle", (k * 100 + 15) * MS))
    assert events == expect
    assert tg.cfs_bandwidth.throttled_time == sum(e[2] for e in events if e[0] == "unthrottle")


def test_observers_cost_nothing_unregistered():
    """Nothing registers an observer by default: each hook then costs one
    empty-list test (runs without a tracer stay as they were)."""
    engine, m, wl = _hog_machine()
    bw = m.policy.bandwidth
    assert not (bw.assign_observers or bw.throttle_observers or bw.unthrottle_observers
                or bw.period_observers)


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s["name"])
def test_pelt_frozen_while_throttled(scheduler):
    """As in the kernel (cfs_rq_clock_pelt), a throttled cfs_rq's PELT
    stands still: the group's load_avg and its task's runnable_avg keep the
    value they had at the throttle for as long as it lasts, and move again
    from there after the unthrottle as if that time had not passed.  The
    task runs 10 ms and sleeps 20 ms under 15 ms per 100 ms: it runs 0-10
    and 30-35 ms, is throttled 35-100 ms, finishes its burst at 105 ms and
    sleeps."""
    cfg = make_cfg(periodic(threads=1, run_ms=10.0, sleep_ms=20.0), cores=1,
                   duration_s=1.0, warmup_s=0.0, scheduler=scheduler, calibration=IDEAL)
    engine, m, _, wl = build(cfg)
    tg = m.groups["/periodic"]
    m.set_cfs_bandwidth(tg, 15_000, 100_000)
    cfs_rq = tg.cfs_rq[0]
    seen = {}

    def sample(key):
        now = engine.now
        if "task" not in seen:
            seen["task"] = next(iter(m.rqs[0].cfs_tasks))
        task = seen["task"]
        cfs_rq.update_load_avg(now)
        task.se.update_avg(now)
        seen[key] = (cfs_rq.load_avg, task.se.runnable_avg, cfs_rq.cfs_rq_clock_pelt(now))
    for key, t_us in (("throttled", 40_000), ("mid", 70_000), ("end", 99_999),
                      ("after", 115_000)):
        engine.call_at(t_us * 1000, sample, key)
    wl.start()
    engine.run(115 * MS + 1)
    assert seen["throttled"] == seen["mid"] == seen["end"]
    load, runnable, clock = seen["throttled"]
    assert clock == 35 * MS
    weight = seen["task"].se.weight
    assert 0 < load < weight and 0 < runnable < 1
    # 100-105 ms runnable, 105-115 ms asleep: PELT counts 15 ms, not 80
    y5, y10 = pelt_decay(5 * MS), pelt_decay(10 * MS)
    after_load, after_runnable, after_clock = seen["after"]
    assert after_clock == 50 * MS
    assert after_runnable == pytest.approx((runnable * y5 + (1 - y5)) * y10, rel=1e-9)
    assert after_load == pytest.approx((load * y5 + (1 - y5) * weight) * y10, rel=1e-9)


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda s: s["name"])
def test_two_thread_hog_gets_quota_over_period_cpus(scheduler):
    """quota 150 ms per 100 ms on 2 cores: 1.5 CPUs, throttled every period."""
    engine, m, wl = _hog_machine(cores=2, threads=2, scheduler=scheduler)
    tg = m.groups["/periodic"]
    m.set_cfs_bandwidth(tg, 150_000, 100_000)
    marks = _period_usage(engine, m, tg, 100 * MS, 10)
    wl.start()
    engine.run(s_to_ns(1.0) + 1)
    assert _diffs(marks) == [150 * MS] * 10
    b = tg.cfs_bandwidth
    assert b.nr_periods == 10 and b.nr_throttled == 10
    # each CPU ran 75 ms of each period, so each was throttled 25 ms
    assert b.throttled_time == 10 * 2 * 25 * MS


class _OneShot:
    """Owner of a single CPU burst that exits."""

    def burst_done(self, task):
        return BURST_EXIT


def _late_task(engine, m, tg, at_ns, demand_ns):
    t = m.new_task("late", tg, 0, demand_ns, 0, _OneShot())
    engine.call_at(at_ns, m.wake_up_new_task, t, 0)
    return t


@pytest.mark.parametrize("burst_ms", [0, 10, 20])
def test_burst_lets_an_idle_group_exceed_quota_by_at_most_the_burst(burst_ms):
    """An idle group accumulates unused quota up to quota + burst; a task
    arriving at 250 ms then runs quota + burst in that period, and the
    next refill counts the excess as burst time."""
    cfg = make_cfg(periodic(threads=1), duration_s=1.0, warmup_s=0.0)
    engine, m, _, _ = build(cfg)
    tg = m.create_group("lim")
    m.set_cfs_bandwidth(tg, 20_000, 100_000, burst_ms * 1000)
    marks = _period_usage(engine, m, tg, 100 * MS, 8)
    t = _late_task(engine, m, tg, 250 * MS, 100 * MS)
    engine.run(s_to_ns(0.8) + 1)
    per_period = _diffs(marks)
    assert per_period[2] == (20 + burst_ms) * MS
    assert max(per_period) == (20 + burst_ms) * MS
    assert t.dead and sum(per_period) == 100 * MS
    b = tg.cfs_bandwidth
    assert b.nr_bursts == (1 if burst_ms else 0)
    assert b.burst_time == burst_ms * MS


def test_burst_above_quota_is_rejected():
    engine, m, _ = _hog_machine()
    with pytest.raises(ValueError, match="burst"):
        m.set_cfs_bandwidth("periodic", 10_000, 100_000, 20_000)
    with pytest.raises(ValueError, match="period"):
        m.set_cfs_bandwidth("periodic", 10_000, 2_000_000)
    with pytest.raises(ValueError, match="quota"):
        m.set_cfs_bandwidth("periodic", 999, 100_000)


@pytest.mark.parametrize("child_quota_ms, expect_ms", [(None, 20), (30, 20), (10, 10)])
def test_hierarchical_limit_throttles_children(child_quota_ms, expect_ms):
    """A group is throttled when it or an ancestor is out of runtime: the
    tightest limit on the path wins."""
    cfg = make_cfg(periodic(threads=1, groups=[{"name": "p/c", "threads": 1}]),
                   duration_s=1.0, warmup_s=0.0)
    engine, m, _, wl = build(cfg)
    parent, child = m.groups["/p"], m.groups["/p/c"]
    m.set_cfs_bandwidth(parent, 20_000, 100_000)
    if child_quota_ms is not None:
        m.set_cfs_bandwidth(child, child_quota_ms * 1000, 100_000)
    marks = _period_usage(engine, m, child, 100 * MS, 4)
    seen = []
    engine.call_at(50 * MS, lambda: seen.append(child.cfs_rq[0].throttle_count))
    wl.start()
    engine.run(s_to_ns(0.4) + 1)
    assert _diffs(marks) == [expect_ms * MS] * 4
    assert seen == [1]                 # the child's queue is under a throttle
    tight = parent if expect_ms == 20 else child
    assert tight.cfs_bandwidth.nr_throttled == 4
    assert tight.cfs_bandwidth.throttled_time == 4 * (100 - expect_ms) * MS


def test_idle_cfs_rq_returns_slack_to_a_throttled_one():
    """Two CPUs share a 20 ms quota.  A task that runs 2 ms and exits keeps
    1 ms on its CPU and returns the rest of its 5 ms slice; the slack timer
    hands it to the hog throttled on the other CPU within the period."""
    cfg = make_cfg(periodic(threads=1), cores=2, duration_s=1.0, warmup_s=0.0)
    engine, m, _, _ = build(cfg)
    tg = m.create_group("lim")
    m.set_cfs_bandwidth(tg, 20_000, 100_000)
    hog = m.new_task("hog", tg, 0, 10 * 1000 * MS, 0, _OneShot())
    m.wake_up_new_task(hog, 0)
    short = m.new_task("short", tg, 0, 2 * MS, 0, _OneShot())
    engine.call_at(1 * MS, m.wake_up_new_task, short, 1)
    marks = _period_usage(engine, m, tg, 100 * MS, 1)
    engine.run(100 * MS + 1)
    assert short.dead and short.cpu == 1
    # without slack the hog would stop at 20 - 5 = 15 ms: the short task's
    # CPU keeps min_cfs_rq_runtime (1 ms) of its 5 ms slice after using 2
    assert marks[1] - marks[0] == 20 * MS - 1 * MS
    assert tg.cfs_rq[1].runtime_remaining == 1 * MS


def test_throttled_tasks_stay_put_and_invariants_hold(monkeypatch):
    """Several limited and unlimited groups on 4 CPUs: run queues stay
    consistent (throttled tasks are queued but not runnable) and no
    throttled task is moved by the balancer."""
    cfg = make_cfg(periodic(threads=1, run_ms=3.0, sleep_ms=2.0, groups=[
        {"name": "a", "threads": 5}, {"name": "b", "threads": 3, "sleep_ms": 0.0},
        {"name": "c", "threads": 2}]), cores=4, duration_s=1.0, warmup_s=0.0,
        calibration=DEFAULT_COSTS)
    moved_while_throttled = []

    class Watched(Machine):
        def move_queued_task(self, p, src, dst):
            if p.tg.cfs_rq[src.cpu].throttle_count:
                moved_while_throttled.append(p.name)
            super().move_queued_task(p, src, dst)
    monkeypatch.setattr(backends.simhost, "Machine", Watched)
    engine, m, _, wl = build(cfg)
    m.set_cfs_bandwidth("a", 50_000, 20_000)
    m.set_cfs_bandwidth("b", 30_000, 50_000, 10_000)

    def check():
        check_rq_invariants(m, wl.threads)
        engine.call_later(MS // 3, check)
    engine.call_at(0, check)
    wl.start()
    engine.run(s_to_ns(1.0))
    assert not moved_while_throttled
    assert m.groups["/a"].cfs_bandwidth.nr_throttled > 0
    assert m.groups["/b"].cfs_bandwidth.nr_throttled > 0


def test_unlimited_groups_unchanged():
    """An explicit 'max' limit is no limit: same tables as no setting."""
    base = make_cfg(poisson(functions=3, rate_rps=80.0), cores=2, duration_s=2.0,
                    warmup_s=0.0, calibration=DEFAULT_COSTS)
    a = simulate(base)
    b = simulate(make_cfg(poisson(functions=3, rate_rps=80.0, cpu_max="max 100000"),
                          cores=2, duration_s=2.0, warmup_s=0.0, calibration=DEFAULT_COSTS))
    assert a.requests.equals(b.requests)
    assert a.intervals.equals(b.intervals)
    drop = ["run_id", "wall_time_s", "sim_s_per_wall_s"]
    # pandas' equals counts NaN == NaN (columns of models nothing used are NaN)
    assert a.summary.drop_columns(drop).to_pandas().equals(
        b.summary.drop_columns(drop).to_pandas())
    assert a.summary.column("nr_periods")[0].as_py() == 0


def test_workload_keys_limit_each_cgroup():
    """quota_us/period_us/burst_us and cpu_max/cpu_max_burst reach every
    function cgroup; a periodic group's own keys replace the workload's."""
    cfg = make_cfg(poisson(functions=2, quota_us=5000, period_us=50000, burst_us=1000),
                   duration_s=1.0)
    _, m, _, _ = build(cfg)
    for f in ("func-0", "func-1"):
        b = m.groups[f"/faas.slice/{f}"].cfs_bandwidth
        assert (b.quota, b.period, b.burst) == (5 * MS, 50 * MS, 1 * MS)
    assert not m.groups["/faas.slice"].cfs_bandwidth.enabled
    cfg = make_cfg(periodic(quota_us=30000, groups=[
        {"name": "a", "threads": 1, "cpu_max": "20000", "cpu_max_burst": 5000},
        {"name": "b", "threads": 1}, {"name": "c", "threads": 1, "cpu_max": "max 50000"}]),
        duration_s=1.0)
    _, m, _, _ = build(cfg)
    a, b, c = (m.groups[f"/{g}"].cfs_bandwidth for g in "abc")
    assert (a.quota, a.period, a.burst) == (20 * MS, 100 * MS, 5 * MS)
    assert (b.quota, b.period, b.burst) == (30 * MS, 100 * MS, 0)
    assert not c.enabled and c.period == 50 * MS


def test_summary_and_intervals_report_cpu_stat():
    """cpu.stat per cgroup per interval in intervals, summed in the summary
    over the window after warmup."""
    cfg = make_cfg(periodic(threads=1, quota_us=15000), duration_s=1.0, warmup_s=0.25)
    cfg["interval_s"] = 0.5
    r = simulate(cfg)
    s = r.summary.to_pylist()[0]
    # period timers at 300 .. 900 ms (1000 ms is the end, not processed)
    assert s["nr_periods"] == 7 and s["nr_throttled"] == 7
    assert s["throttled_time_s"] == pytest.approx(7 * 0.085, abs=1e-12)
    assert s["nr_bursts"] == 0 and s["burst_time_s"] == 0.0
    rows = [row for row in r.intervals.to_pylist() if row["cgroup"] == "/periodic"]
    assert [row["nr_periods"] for row in rows] == [4, 5]
    assert [row["throttled_time_s"] for row in rows] == pytest.approx([4 * 0.085, 5 * 0.085])
    assert {(row["quota_us"], row["period_us"]) for row in rows} == {(15000, 100000)}
    root = next(row for row in r.intervals.to_pylist() if row["cgroup"] == "/")
    assert root["quota_us"] is None and root["nr_periods"] == 0
