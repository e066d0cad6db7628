"""Property tests over random small hosts and workloads (issue: core
simulator, validation 5): work conservation, CPU time accounting, no task
lost or run twice, determinism by seed."""
from __future__ import annotations

import os

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenarios.simulate import build, simulate
from sim.engine import s_to_ns
from sim.invariants import WorkConservationMonitor
from simcfg import DEFAULT_COSTS, IDEAL, make_cfg, periodic, poisson

DURATION_S = 1.0

hosts = st.fixed_dictionaries({
    "cores": st.integers(1, 4),
    "threads_per_core": st.integers(1, 2),
})

groups = st.lists(st.fixed_dictionaries({
    "threads": st.integers(1, 5),
    "nice": st.integers(-5, 10),
    "cgroup_weight": st.sampled_from([10, 100, 500]),
    # some groups run under SCHED_RR, above the fair class
    "task_policy": st.sampled_from([None, None, "rr"]),
    # some have a CFS bandwidth limit (cpu.max), some a burst
    "quota_us": st.sampled_from([None, None, 1000, 7000, 30000]),
    "period_us": st.sampled_from([10000, 100000]),
    "burst_us": st.sampled_from([0, 0, 1000]),
}), min_size=1, max_size=3)

periodic_workloads = st.builds(
    lambda gs, run_ms, sleep_ms: periodic(
        run_ms=run_ms, sleep_ms=sleep_ms,
        groups=[{"name": f"g{i}", **g} for i, g in enumerate(gs)]),
    groups, st.sampled_from([0.3, 2.0, 7.0, 25.0]), st.sampled_from([0.0, 1.0, 5.0, 30.0]))

poisson_workloads = st.builds(
    lambda f, rate, k: poisson(functions=f, rate_rps=rate, mean_service_s=0.005,
                               threads_per_request=k),
    st.integers(1, 6), st.sampled_from([20.0, 100.0, 300.0]), st.integers(1, 3))

scenarios = st.builds(
    lambda h, w, costs, seed, hz: make_cfg(w, cores=h["cores"],
                                           threads_per_core=h["threads_per_core"],
                                           duration_s=DURATION_S, warmup_s=0.0, seed=seed,
                                           calibration=costs, hz=hz),
    hosts, st.one_of(periodic_workloads, poisson_workloads),
    st.sampled_from([IDEAL, DEFAULT_COSTS]), st.integers(0, 2**16), st.sampled_from([250, 1000]))

# HYPOTHESIS_EXAMPLES=200 for a deeper search than the default suite affords
# A fixed example set by default, so a bug the random search finds blocks
# the change that causes it, not an unrelated landing; HYPOTHESIS_RANDOM=1
# (with a larger HYPOTHESIS_EXAMPLES) explores, as it should before a release.
RANDOM = os.environ.get("HYPOTHESIS_RANDOM", "") not in ("", "0")
SETTINGS = settings(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 15)), deadline=None,
                    derandomize=not RANDOM,
                    suppress_health_check=[HealthCheck.too_slow])


def _tasks(workload):
    return getattr(workload, "threads", ())


@SETTINGS
@given(scenarios)
def test_work_conservation_and_no_lost_tasks(cfg):
    engine, machine, recorder, workload = build(cfg)
    monitor = WorkConservationMonitor(machine, 500_000, _tasks(workload))
    workload.start()
    monitor.start()
    engine.run(s_to_ns(DURATION_S))
    assert monitor.samples > 0
    # an idle CPU next to waiting work is found by the nohz kick on the busy
    # CPU's next tick, then by idle balancing at the widest domain's interval;
    # a task that ran within migration_cost is skipped once (cache_nice_tries)
    tick = machine.tick_ns
    domains = machine.topology.domains[0]
    interval = max((d.interval_ms for d in domains), default=0) * 1_000_000
    bound = interval + 3 * tick
    assert monitor.worst_ns <= bound, (monitor.worst_ns, bound)


@SETTINGS
@given(scenarios)
def test_cpu_time_accounting(cfg):
    engine, machine, recorder, workload = build(cfg)
    workload.start()
    end = s_to_ns(DURATION_S)
    engine.run(end)
    machine.sync()
    ncpus = machine.topology.nr_cpus
    busy = sum(rq.busy_ns for rq in machine.rqs)
    overhead = sum(rq.overhead_ns for rq in machine.rqs)
    usage = sum(tg.usage_ns for tg in machine.groups.values())
    # what cgroups are charged (cpuacct) is exactly task work plus the
    # switch time spent before the task got the core
    assert busy + overhead <= ncpus * end
    assert busy <= usage <= ncpus * end
    # completed work never exceeds what the CPUs executed
    done = sum(r[5] for r in recorder.rows if not r[6])
    assert done <= busy
    if cfg["calibration"]["name"] == "ideal":
        assert overhead == 0
        assert usage == busy
    # a limited fair group never uses more than its pool got (the quota it
    # started with plus one quota per refill; burst only saves quota up),
    # plus the debt its CPUs ran up: a task whose runtime ends during its
    # own context switch runs on until the switch ends (well under 1 ms)
    for g in cfg["workload"].get("groups") or ():
        if g["quota_us"] is not None and g["task_policy"] is None:
            tg = machine.groups["/" + g["name"]]
            debts = [max(0, -cfs_rq.runtime_remaining) for cfs_rq in tg.cfs_rq]
            assert max(debts) < 1_000_000
            assert tg.usage_ns <= (g["quota_us"] * 1000 * (1 + tg.cfs_bandwidth.nr_periods)
                                   + sum(debts))
            if cfg["calibration"]["name"] == "ideal":
                assert not any(debts)


@SETTINGS
@given(scenarios)
def test_each_request_completes_once_and_in_order(cfg):
    result = simulate(cfg)
    t = result.requests.to_pydict()
    # poisson: every request is a fresh object, completed once; periodic:
    # bursts of one thread never overlap
    # forked threads of one request may run in parallel on k CPUs
    k = cfg["workload"].get("threads_per_request", 1)
    for arrival, start, end, demand in zip(t["arrival_s"], t["start_s"], t["end_s"],
                                           t["cpu_demand_s"]):
        assert arrival <= start <= end
        assert end - start >= demand / k - 1e-9
    s = result.summary.to_pylist()[0]
    assert s["n_unfinished"] >= 0
    assert s["cpu_util"] <= 1.0 + 1e-9


@settings(max_examples=8, deadline=None, derandomize=not RANDOM,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_same_seed_same_results(cfg):
    a, b = simulate(cfg), simulate(cfg)
    assert a.requests.equals(b.requests)
    assert a.intervals.equals(b.intervals)
    drop = ["run_id", "wall_time_s", "sim_s_per_wall_s"]
    # pandas' equals counts NaN == NaN (no completed request: NaN latencies,
    # e.g. under a tight CPU limit)
    assert a.summary.drop_columns(drop).to_pandas().equals(
        b.summary.drop_columns(drop).to_pandas())


def test_different_seeds_differ():
    cfg = make_cfg(poisson(functions=2, rate_rps=50.0), duration_s=2.0, warmup_s=0.0)
    a = simulate(cfg)
    cfg["seed"] = 2
    b = simulate(cfg)
    assert not a.requests.equals(b.requests)


def test_rng_streams_are_independent():
    """Adding a function must not change the arrivals of the others."""
    def arrivals(functions):
        cfg = make_cfg(poisson(functions=functions, rate_rps=20.0), duration_s=2.0,
                       warmup_s=0.0, cores=4)
        t = simulate(cfg).requests
        mask = pc.equal(t.column("function"), "func-0")
        return sorted(t.filter(mask).column("arrival_s").to_pylist())
    assert arrivals(1) == arrivals(3)


# live changes at random instants: sched_setscheduler (SimHost.set_rt_policy:
# policy, rt_priority) or a cpuset write (SimHost.set_cpuset: a CPU set, as
# a bit mask over the host's CPUs; 0 is no limit), on one group
live_changes = st.lists(st.tuples(st.floats(0.0, DURATION_S), st.integers(0, 5),
                                  st.one_of(st.tuples(st.sampled_from(["rr", "normal"]),
                                                      st.integers(1, 99)),
                                            st.tuples(st.just("cpuset"), st.integers(0, 255)))),
                        min_size=1, max_size=8)


@SETTINGS
@given(scenarios, live_changes, st.sampled_from(["cfs", "eevdf", "lags"]))
def test_live_policy_and_cpuset_changes_keep_invariants_and_accounting(cfg, changes, scheduler):
    """Threads that change class or CPU set while running, queued or asleep
    are never lost or queued twice, idle CPUs do not sit next to waiting
    work longer than without changes, and CPU time still adds up."""
    from backends.simhost import SimHost
    cfg["scheduler"] = {"name": scheduler}
    engine, machine, recorder, workload = build(cfg)
    host = SimHost(machine)
    leaves = host.functions()
    ncpus = machine.topology.nr_cpus
    for t, i, (what, arg) in changes:
        leaf = leaves[i % len(leaves)]
        if what == "cpuset":
            cpus = {c for c in range(ncpus) if arg >> c & 1} or {arg % ncpus}
            engine.call_at(s_to_ns(t), host.set_cpuset, leaf, None if arg == 0 else cpus)
        else:
            engine.call_at(s_to_ns(t), host.set_rt_policy, leaf, what, arg)
    monitor = WorkConservationMonitor(machine, 500_000, _tasks(workload))
    workload.start()
    monitor.start()
    end = s_to_ns(DURATION_S)
    engine.run(end)
    machine.sync()
    assert monitor.samples > 0
    interval = max((d.interval_ms for d in machine.topology.domains[0]), default=0) * 1_000_000
    assert monitor.worst_ns <= interval + 3 * machine.tick_ns, monitor.worst_ns
    busy = sum(rq.busy_ns for rq in machine.rqs)
    overhead = sum(rq.overhead_ns for rq in machine.rqs)
    usage = sum(tg.usage_ns for tg in machine.groups.values())
    assert busy + overhead <= machine.topology.nr_cpus * end
    assert busy <= usage <= machine.topology.nr_cpus * end
    for path in leaves:
        tg = machine.groups[path]
        policy = machine.group_task_policy.get(tg, machine.default_task_policy)[0]
        assert all(p.sched_policy == policy for p in tg.tasks)


def test_idle_cpu_next_to_a_fair_task_behind_rt_threads():
    """Found by the random search: the busiest queue (by load) held only a
    task of a group throttled on the idle CPU, so every balance failed there
    and the idle CPU sat ~97 ms next to a movable fair task queued behind a
    SCHED_RR thread.  The kernel drops such a queue and redoes the search
    (LBF_ALL_PINNED); so must we."""
    gs = [dict(threads=1, nice=0, cgroup_weight=10, task_policy=None, quota_us=None,
               period_us=10000, burst_us=0),
          dict(threads=2, nice=0, cgroup_weight=100, task_policy=None, quota_us=7000,
               period_us=100000, burst_us=0),
          dict(threads=5, nice=0, cgroup_weight=10, task_policy="rr", quota_us=None,
               period_us=10000, burst_us=0)]
    w = periodic(run_ms=0.3, sleep_ms=0.0, groups=[{"name": f"g{i}", **g} for i, g in enumerate(gs)])
    cfg = make_cfg(w, cores=3, threads_per_core=2, duration_s=DURATION_S, warmup_s=0.0, seed=0,
                   calibration=IDEAL, hz=250)
    engine, machine, recorder, workload = build(cfg)
    monitor = WorkConservationMonitor(machine, 500_000, _tasks(workload))
    workload.start()
    monitor.start()
    engine.run(s_to_ns(DURATION_S))
    interval = max((d.interval_ms for d in machine.topology.domains[0]), default=0) * 1_000_000
    assert monitor.worst_ns <= interval + 3 * machine.tick_ns, monitor.worst_ns
