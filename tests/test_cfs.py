"""CFS mechanics: tunable scaling, wakeup preemption, buddies, cpusets,
group shares and the context-switch cost model."""
from __future__ import annotations

import math

import numpy as np
import pytest

from policies.kernel.cfs import sysctl_factor
from scenarios.simulate import build, simulate
from simcfg import DEFAULT_COSTS, make_cfg, periodic, poisson, run_for


@pytest.mark.parametrize("ncpus,scaling,factor", [
    (1, "log", 1), (2, "log", 2), (4, "log", 3), (8, "log", 4), (12, "log", 4),
    (64, "log", 4), (12, "none", 1), (3, "linear", 3), (12, "linear", 8)])
def test_sysctl_factor(ncpus, scaling, factor):
    assert sysctl_factor(ncpus, scaling) == factor


def test_tunables_scale_with_cpus():
    _, machine, _, _ = build(make_cfg(periodic(threads=1), host="e5-2430l"))
    cfs = machine.policy
    assert (cfs.sched_latency, cfs.min_granularity, cfs.wakeup_granularity) == \
        (24_000_000, 3_000_000, 4_000_000)
    assert cfs.sched_nr_latency == 8
    assert cfs.migration_cost == 500_000


def test_tunables_override():
    sched = {"name": "cfs", "sched_latency_ns": 10_000_000, "min_granularity_ns": 2_000_000}
    _, machine, _, _ = build(make_cfg(periodic(threads=1), scheduler=sched))
    assert machine.policy.sched_latency == 10_000_000
    assert machine.policy.sched_nr_latency == 5


def _sleeper_and_hog(wakeup_preemption: bool):
    groups = [{"name": "hog", "threads": 1, "run_ms": 1e6, "sleep_ms": 0.0},
              {"name": "sleeper", "threads": 1}]
    wl = periodic(groups=groups, run_ms=1.0, sleep_ms=10.0)
    cfg = make_cfg(wl, scheduler={"name": "cfs", "wakeup_preemption": wakeup_preemption},
                   duration_s=5.0, warmup_s=0.5)
    res = simulate(cfg)
    t = res.requests.to_pydict()
    lat = np.array([lat for fn, lat in zip(t["function"], t["latency_s"]) if fn == "/sleeper"])
    return lat


def test_wakeup_preemption_runs_sleeper_at_once():
    """A sleeper waking with its sleep credit (latency/2) is far enough left
    of a hog to preempt it: each of its bursts finishes in about run_ms."""
    lat = _sleeper_and_hog(True)
    assert lat.size > 100
    assert np.median(lat) == pytest.approx(0.001, rel=0.01)


def test_without_wakeup_preemption_sleeper_waits_for_tick():
    lat = _sleeper_and_hog(False)
    # it now waits for the hog's next tick (HZ=250: up to 4 ms)
    assert np.median(lat) > 0.0015
    assert lat.max() <= 0.001 + 0.004 + 1e-6


def test_cpuset_confines_tasks():
    groups = [{"name": "pinned", "threads": 4, "cpuset": "1"},
              {"name": "free", "threads": 2}]
    machine, wl, _ = run_for(make_cfg(periodic(groups=groups, run_ms=3.0, sleep_ms=2.0),
                                   cores=4), 2.0)
    for t in wl.threads:
        if t.tg.name == "/pinned":
            assert t.cpu == 1 and t.last_cpu in (-1, 1)
    pinned_usage = machine.groups["/pinned"].usage_ns
    assert pinned_usage <= 2e9 + 1     # one CPU's worth at most


@pytest.mark.parametrize("level, sets", [("node", 2), ("llc", 4)])
def test_cpuset_spread_deals_functions_to_nodes_and_llcs(level, sets):
    """workload.cpuset_spread: function i's cgroup gets the (i mod n)-th
    NUMA node's (LLC's) CPUs, its threads run nowhere else, and the load
    balancer keeps every set busy (4 cores, 2 NUMA nodes, one LLC per core;
    a traced run near saturation)."""
    from scenarios.simulate import attach_tracer
    from sim.engine import s_to_ns
    cfg = make_cfg(poisson(functions=12, rate_rps=25.0, mean_service_s=0.01,
                           cpuset_spread=level),
                   cores=4, numa_nodes=2, cores_per_llc=1, duration_s=1.0, warmup_s=0.1,
                   seed=2) | {"trace": {"name": "sched"}}
    engine, machine, _, workload = build(cfg)
    tracer = attach_tracer(cfg, machine)
    workload.start()
    engine.run(s_to_ns(1.0))
    expect = machine.topology.cpu_sets(level)
    assert len(expect) == sets
    for i in range(12):
        assert machine.groups[f"/faas.slice/func-{i}"].cpus_allowed == expect[i % sets]
    ev = tracer.table().to_pandas()
    runs = ev[(ev.event == "sched_switch") & ev.next_cgroup.str.startswith("/faas.slice/", na=False)]
    assert len(runs) > 500
    func = runs.next_cgroup.str.extract(r"func-(\d+)$")[0].astype(int)
    assert all(cpu in expect[f % sets] for cpu, f in zip(runs.cpu, func))
    assert set(runs.cpu) == set(range(4))


def test_group_shares_sum_to_tg_shares_when_busy():
    """calc_group_shares spreads tg->shares over the CPUs by load."""
    cfg = make_cfg(periodic(groups=[{"name": "g", "threads": 8}], run_ms=1e6), cores=4)
    machine, _, _ = run_for(cfg, 3.0)
    tg = machine.groups["/g"]
    weights = [se.weight for se in tg.se]
    assert sum(weights) == pytest.approx(tg.shares, rel=0.05)
    assert min(weights) > 0.15 * tg.shares


def test_cgroup_weight_ratio():
    groups = [{"name": "a", "threads": 2, "cgroup_weight": 300},
              {"name": "b", "threads": 2, "cgroup_weight": 100}]
    machine, _, _ = run_for(make_cfg(periodic(groups=groups, run_ms=1e6)), 10.0)
    a, b = machine.groups["/a"].usage_ns, machine.groups["/b"].usage_ns
    assert a / b == pytest.approx(3.0, rel=0.01)


def test_switch_cost_composition():
    """Two hogs in one cgroup on one core: each switch costs the direct cost
    plus the refill of the 256 KB working set evicted during the other's
    slice (one 4 ms tick), and no level cost (siblings)."""
    cfg = make_cfg(periodic(threads=2, run_ms=1e6), calibration=DEFAULT_COSTS,
                   duration_s=4.0, warmup_s=0.5)
    s = simulate(cfg).summary.to_pylist()[0]
    lines = 256 * 1024 / 64
    # the other task was away for one tick less the switch it paid itself
    evicted = -math.expm1(-4e6 / 20e6)
    expected_us = (3800 + lines * 8 * evicted) / 1000
    assert s["ctx_switch_cost_mean_us"] == pytest.approx(expected_us, rel=0.01)
    assert s["sched_overhead_frac"] == pytest.approx(
        s["ctx_switch_rate_per_s"] * expected_us * 1e-6, rel=0.01)


def test_levels_walked_adds_per_level_cost():
    """Hogs in two sibling cgroups under a common parent: every switch walks
    one level up and one down (2 levels)."""
    costs = dict(DEFAULT_COSTS, refill_ns_per_line=0, migration_ns=0)
    groups = [{"name": "p/a", "threads": 1}, {"name": "p/b", "threads": 1}]
    cfg = make_cfg(periodic(groups=groups, run_ms=1e6), calibration=costs,
                   duration_s=4.0, warmup_s=0.5)
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["ctx_switch_cost_mean_us"] == pytest.approx((3800 + 2 * 1500) / 1000, rel=1e-6)


def _hierarchy():
    """root <- p <- {a, b} on one CPU: the cfs_rqs and group entities."""
    from sim.rq import CfsRq, Rq, SchedEntity
    rq = Rq(0)
    root, p, a, b = (CfsRq(rq, None) for _ in range(4))
    gp = SchedEntity(1024, None, root, p)
    ga = SchedEntity(1024, gp, p, a)
    gb = SchedEntity(1024, gp, p, b)
    return root, p, a, b, gp, ga, gb


def test_reinsert_log2_counts_the_entities_put_back_up_to_the_common_cfs_rq():
    """put_prev_entity re-inserts what is still queued on prev's side of the
    walk, each into a tree of nr_running entities (hand-worked cases)."""
    from sim.machine import reinsert_log2
    from sim.rq import CfsRq, SchedEntity
    root, p, a, b, gp, ga, gb = _hierarchy()
    root.nr_running, p.nr_running, a.nr_running, b.nr_running = 4, 2, 3, 1
    ta1, ta2 = SchedEntity(1024, ga, a), SchedEntity(1024, ga, a)
    tb = SchedEntity(1024, gb, b)
    for se in (gp, ga, gb, ta1, ta2, tb):
        se.on_rq = True
    # preempted across cgroups: the task into a (3), a's entity into p (2)
    assert reinsert_log2(ta1, tb) == pytest.approx(math.log2(3) + 1.0)
    # between siblings only the shared cfs_rq is touched
    assert reinsert_log2(ta1, ta2) == pytest.approx(math.log2(3))
    # prev slept (dequeued): only its cgroup's entity, still busy, goes back
    ta1.on_rq = False
    assert reinsert_log2(ta1, tb) == pytest.approx(1.0)
    # ... and nothing once its cgroup has nothing left to run
    ga.on_rq = False
    assert reinsert_log2(ta1, tb) == 0.0
    # to another class (put_prev_task_fair): every queued level up to the root
    ta1.on_rq = ga.on_rq = True
    assert reinsert_log2(ta1, None) == pytest.approx(math.log2(3) + 1.0 + 2.0)
    # unequal depths: a cgroup c nested in b (b now holds tb and c's entity)
    c = CfsRq(a.rq, None)
    gc = SchedEntity(1024, gb, b, c)
    tc = SchedEntity(1024, gc, c)
    gc.on_rq = tc.on_rq = True
    b.nr_running, c.nr_running = 2, 1
    # next deeper: only next's side climbs; prev's task and group go back
    assert reinsert_log2(ta2, tc) == pytest.approx(math.log2(3) + 1.0)
    assert reinsert_log2(tb, tc) == pytest.approx(1.0)          # common cfs_rq b
    # prev deeper: tc into c (1 entity: 0), c's entity into b, b's into p
    assert reinsert_log2(tc, ta1) == pytest.approx(2.0)


def test_reinsertion_cost_is_charged_per_put_back_entity():
    """Two hogs in sibling cgroups under p, one CPU: every switch preempts a
    runnable prev, whose task goes back into its own cfs_rq (1 entity:
    log2 1 = 0) and whose cgroup's entity into p's (2 entities: 1), so each
    costs direct + 2 levels + one doubling's re-insertion."""
    costs = dict(DEFAULT_COSTS, refill_ns_per_line=0, migration_ns=0,
                 reinsert_ns_per_log2=2000)
    groups = [{"name": "p/a", "threads": 1}, {"name": "p/b", "threads": 1}]
    cfg = make_cfg(periodic(groups=groups, run_ms=1e6), calibration=costs,
                   duration_s=4.0, warmup_s=0.5)
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["ctx_switch_cost_mean_us"] == pytest.approx((3800 + 2 * 1500 + 2000) / 1000,
                                                         rel=1e-6)


def test_hrtick_makes_progress_when_curr_stays_leftmost():
    """A task whose slice is used up but which is still leftmost is picked
    again; the slice timer must then fire no sooner than the kernel's 10 us
    minimum, so simulated time advances (regression: it re-armed at now)."""
    from policies.kernel.cfs import CFS, CfsConfig
    from sim.costmodel import CostModel
    from sim.engine import Engine
    from sim.machine import Machine
    from sim.task import BURST_EXIT
    from sim.topology import Topology

    class Exit:
        def burst_done(self, task):
            return BURST_EXIT

    engine = Engine(1)
    m = Machine(engine, Topology(1, 1), CFS, CfsConfig(name="cfs", hrtick=True), CostModel())
    tg = m.create_group("g")
    a, b, c = (m.new_task(n, tg, 0, d, 0, Exit()) for n, d in
               (("a", 100_000_000), ("b", 1_000_000), ("c", 100_000_000)))
    engine.call_at(0, m.wake_up_new_task, b, 0)
    engine.call_at(0, m.wake_up_new_task, a, 0)
    engine.call_at(5_000_000, m.wake_up_new_task, c, 0)
    events = engine.run(20_000_000)
    assert engine.now == 20_000_000
    assert events < 10_000
    m.sync()
    assert b.dead
    # work conserving: the core ran one of the tasks the whole time
    assert sum(t.se.sum_exec_runtime for t in (a, b, c)) == 20_000_000


def test_new_task_starts_with_full_load():
    """init_entity_runnable_average(): a forked task counts at its weight,
    and exiting takes its load back out (task_dead_fair)."""
    cfg = make_cfg(periodic(threads=1, run_ms=5.0, sleep_ms=5.0))
    engine, machine, _, workload = build(cfg)
    workload.start()
    (t,) = workload.threads
    cfs_rq = t.se.cfs_rq
    assert t.se.load_avg(0) == pytest.approx(1024)
    assert cfs_rq.load_avg == pytest.approx(1024)
    machine.policy.task_dead(t)
    assert cfs_rq.load_avg == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("smt_throughput", [1.0, 1.25, 2.0])
def test_smt_siblings_share_their_core(smt_throughput):
    """Two hogs on the two hardware threads of one core each progress at
    smt_throughput / 2; a lone thread runs at full speed."""
    cfg = make_cfg(periodic(threads=2, run_ms=100.0), cores=1, threads_per_core=2,
                   smt_throughput=smt_throughput, duration_s=5.0, warmup_s=0.0)
    machine, workload, recorder = run_for(cfg, 5.0)
    assert {t.cpu for t in workload.threads} == {0, 1}
    done = [r for r in recorder.rows if not r[6]]
    # every 100 ms burst of work took 100 ms / speed of CPU time
    for _, _, _, start, end, demand, _ in done:
        assert (end - start) == pytest.approx(demand / (smt_throughput / 2), abs=2)
    # a lone thread on a core is not slowed
    cfg1 = make_cfg(periodic(threads=1, run_ms=100.0), cores=1, threads_per_core=2,
                    smt_throughput=smt_throughput, duration_s=1.0, warmup_s=0.0)
    rows = simulate(cfg1).requests.to_pydict()
    assert rows["latency_s"][0] == pytest.approx(0.1, abs=1e-9)


def test_smt_sibling_going_idle_speeds_up_the_other():
    groups = [{"name": "long", "threads": 1, "run_ms": 200.0, "sleep_ms": 1000.0},
              {"name": "short", "threads": 1, "run_ms": 50.0, "sleep_ms": 1000.0}]
    cfg = make_cfg(periodic(groups=groups, run_ms=1.0), cores=1, threads_per_core=2,
                   smt_throughput=1.0, duration_s=0.9, warmup_s=0.0)
    t = simulate(cfg).requests.to_pydict()
    lat = dict(zip(t["function"], t["latency_s"]))
    # both at half speed until short finishes its 50 ms at t = 100 ms; long
    # then has 150 ms left at full speed: done at 250 ms
    assert lat["/short"] == pytest.approx(0.100, abs=1e-6)
    assert lat["/long"] == pytest.approx(0.250, abs=1e-6)


def test_blocked_load_of_an_idle_group_decays_out_of_tg_load_avg():
    """update_blocked_averages(): a function that ran on both CPUs and went
    quiet must stop counting in tg->load_avg (which other CPUs' group
    shares divide by), while another function keeps the CPUs busy."""
    from scenarios.simulate import build
    from sim.engine import s_to_ns
    from sim.workloads.trace import make_trace
    n = 200
    quiet = [("a", 0.005 * i, 0.004) for i in range(n)]           # busy for 1 s
    busy = [("b", 0.01 * i, 0.009) for i in range(400)]          # all 4 s
    rows = quiet + busy
    trace = make_trace([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                       [1] * len(rows))
    wl = {"name": "trace", "working_set_kb": 0, "cgroup_weight": 100, "nice": 0,
          "parent_cgroup": "faas.slice", "trace_file": None}
    engine, m, _, workload = build(make_cfg(wl, cores=2, duration_s=4.0), trace)
    workload.start()
    engine.run(s_to_ns(1.0))
    peak = m.groups["/faas.slice/a"].load_avg
    engine.run(s_to_ns(4.0))
    assert peak > 200
    assert m.groups["/faas.slice/a"].load_avg < 0.02 * peak
