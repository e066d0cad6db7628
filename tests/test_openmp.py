"""Model-serving pods' runtimes (sim/workloads/openmp.py, sim/workloads/pools.py):
the bentoml path's PyTorch stage as a libgomp team whose threads spin before
they sleep at every region's barrier, and thread pools sized to the host's
CPUs or to the pod's; each checked where its effect is known exactly."""
from __future__ import annotations

import pytest

from backends.cluster import simulate_cluster
from scenarios.config import compose
from scenarios.simulate import build, simulate
from scenarios.validate import ConfigError
from sim.engine import s_to_ns
from sim.task import BURST_BLOCK
from sim.workloads.openmp import (NS_PER_SPIN, REGIONS, SPIN_COUNT, THROTTLED_SPIN_COUNT,
                                  OpenMPConfig, spin_budget_ns)
from sim.workloads.request_path import (API_OUT_US, API_US, BATCH_US, PROXY_IN_US,
                                        PROXY_OUT_US)
from sim.workloads.trace import make_trace
from tests.simcfg import DEFAULT_COSTS, IDEAL, make_cfg
from tests.test_cluster import cluster_cfg

KUBEPODS = "kubepods.slice/kubepods-burstable.slice"
STAGES_S = (PROXY_IN_US + API_US + 2 * BATCH_US + API_OUT_US + PROXY_OUT_US) * 1e-6
BUDGET_S = SPIN_COUNT["default"] * NS_PER_SPIN * 1e-9       # 3 ms


def _workload(openmp=None, pools=None, **kw):
    w = {"name": "trace", "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
         "parent_cgroup": KUBEPODS, "trace_file": None, "request_path": "bentoml", **kw}
    if openmp is not None:
        w["openmp"] = openmp
    if pools is not None:
        w["pools"] = pools
    return w


def _spaced(n=10, gap_s=0.1, demand_s=0.04, function="f"):
    """Requests far enough apart that each finds the host idle and its
    team's dock spin over."""
    return make_trace([function] * n, [0.01 + gap_s * i for i in range(n)], [demand_s] * n,
                      [1] * n)


def _run(trace, cores=4, duration_s=1.2, calibration=None, **kw):
    cfg = make_cfg(_workload(**kw), cores=cores, duration_s=duration_s, warmup_s=0.0,
                   **({} if calibration is None else {"calibration": calibration}))
    return simulate(cfg, trace=trace)


def _built(trace, cores=4, duration_s=1.2, **kw):
    engine, machine, recorder, wl = build(make_cfg(_workload(**kw), cores=cores,
                                                   duration_s=duration_s, warmup_s=0.0), trace)
    wl.start()
    engine.run(s_to_ns(duration_s))
    return machine, wl


def test_libgomp_spin_budgets():
    """libgomp/env.c: 300,000 spins unset (3 ms at its 10 ns a spin), 30
    billion ACTIVE, 0 PASSIVE; 100 and 1,000 once the team outnumbers the
    CPUs; GOMP_SPINCOUNT replaces the count, never raising the throttled one."""
    cfg = OpenMPConfig(enabled=True)
    assert spin_budget_ns(cfg, 12, 12) == 3_000_000
    assert spin_budget_ns(cfg, 13, 12) == THROTTLED_SPIN_COUNT["default"] * NS_PER_SPIN == 1_000
    assert spin_budget_ns(OpenMPConfig(wait_policy="active"), 4, 4) == 300 * 10**9
    assert spin_budget_ns(OpenMPConfig(wait_policy="active"), 8, 4) == 10_000
    assert spin_budget_ns(OpenMPConfig(wait_policy="passive"), 8, 4) == 0
    assert spin_budget_ns(OpenMPConfig(spin_count=50), 8, 4) == 500
    assert spin_budget_ns(OpenMPConfig(spin_count=5000, ns_per_spin=2.0), 4, 4) == 10_000


def test_an_idle_team_spins_exactly_its_budget_at_the_dock():
    """One pod, a team of four on four idle CPUs, no switch costs: every
    region's parts are equal and run side by side, so nobody waits at a
    barrier; after each inference the three workers spin the whole budget
    at the dock and sleep.  The latency is the stages plus demand / 4."""
    n = 10
    res = _run(_spaced(n), openmp={"enabled": True, "regions": 10})
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    # + the master's 1 us start of the team, and its 1 us return unless it
    # is the last at the final barrier
    assert all(STAGES_S + 0.01 + 1e-6 - 1e-9 <= x <= STAGES_S + 0.01 + 2e-6 + 1e-9 for x in lat)
    s = res.summary.to_pylist()[0]
    assert s["omp_inferences"] == n and s["omp_regions"] == 10 * n
    assert s["omp_futex_waits"] == 3 * n
    assert s["omp_spin_s"] == pytest.approx(3 * n * BUDGET_S, abs=1e-9)
    assert s["omp_spin_frac"] == pytest.approx(3 * n * BUDGET_S / (1.2 * 4))


def test_without_a_spin_budget_every_waiting_thread_sleeps_at_every_barrier():
    """OMP_WAIT_POLICY=passive: no spin; at each of the regions' barriers
    the three threads that finish first sleep, and the last wakes them; a
    worker that is last sleeps too, at the dock, until the master (woken)
    starts the next region."""
    n, regions = 10, 7
    res = _run(_spaced(n), calibration=DEFAULT_COSTS,
               openmp={"enabled": True, "regions": regions, "wait_policy": "passive"})
    s = res.summary.to_pylist()[0]
    assert s["n_requests"] == n and s["omp_spin_s"] == 0.0
    assert 3 * regions * n <= s["omp_futex_waits"] <= 4 * regions * n
    spinning = _run(_spaced(n), calibration=DEFAULT_COSTS,
                    openmp={"enabled": True, "regions": regions}).summary.to_pylist()[0]
    # spinning through the barriers spares those switches
    assert spinning["ctx_switches"] < s["ctx_switches"] - 2 * 3 * (regions - 1) * n


def test_teams_sharing_cpus_wait_at_their_barriers_within_the_budget():
    """Two pods' teams of two on two CPUs at once: each team's threads get
    the CPUs only part of the time, so their siblings wait at the barriers.
    No wait spins longer than the budget (no switch costs: CPU time is run
    time), the waits beyond the dock's are counted, and every inference
    finishes."""
    trace = make_trace(["f"] * 3 + ["g"], [0.01, 0.4, 0.8, 0.0], [0.2, 0.2, 0.2, 1.0],
                       [1, 1, 1, 1])
    machine, wl = _built(trace, cores=2, duration_s=2.0, torch_threads=2,
                         openmp={"enabled": True, "regions": 50})
    st = wl.path.stats()
    assert st["inferences"] == 4 and st["regions"] == 200
    budget = wl.path.teams[0].budget_ns
    assert 0 < st["spin_ns"] <= st["spins"] * budget
    # more waits than each inference's one dock spin: barriers were waited at
    assert st["spins"] > 4 * 2


def test_a_team_larger_than_the_host_spins_only_the_throttled_count():
    """Four threads on two CPUs: libgomp throttles the spin to 100 spins
    (1 us), so a waiting thread sleeps almost at once."""
    machine, wl = _built(_spaced(5, gap_s=0.2), cores=2, torch_threads=4,
                         openmp={"enabled": True, "regions": 20})
    team = wl.path.teams[0]
    assert team.n == 4 and team.budget_ns == 1_000
    st = wl.path.stats()
    assert st["inferences"] == 5 and st["spins"] > 0
    assert st["spin_ns"] <= st["spins"] * 1_000
    assert st["futex_waits"] >= st["regions"]   # at least one sleeper a barrier


def test_openmp_off_is_the_fork_join_and_changes_nothing():
    trace = _spaced(8, gap_s=0.05, demand_s=0.03)
    plain = _run(trace, calibration=DEFAULT_COSTS)
    off = _run(trace, calibration=DEFAULT_COSTS, openmp={"enabled": False, "regions": 3},
               pools={"sizing": "runtime"})
    def row(result):
        # NaN columns (no limited cgroup, no memory profile) compare as None
        return {k: None if v != v else v for k, v in result.summary.to_pylist()[0].items()
                if k not in ("run_id", "wall_time_s", "sim_s_per_wall_s")}
    assert row(plain) == row(off)
    assert plain.requests.equals(off.requests)
    assert plain.summary.to_pylist()[0]["omp_regions"] == 0


def test_pools_take_the_hosts_cpus_unless_sized_to_the_pod():
    """Thread pools as the runtimes size them: BentoML's workers and OpenMP
    threads and queue-proxy's GOMAXPROCS take the host's CPUs; BentoML
    reads a CPU quota of its own, queue-proxy (no limit of its own) does
    not; ``pools: pod`` sizes all of them to the pod's limit, else request."""
    machine, wl = _built(_spaced(1), cores=6, openmp={"enabled": True})
    pod = next(iter(wl.path.pods.values()))
    assert pod.proxy.cap == pod.api.cap == pod.runner.torch_threads == 6
    assert wl.path.teams[0].n == 6 and len(wl.path.teams[0].threads) == 6
    machine, wl = _built(_spaced(1), cores=6, quota_us=250_000, period_us=100_000)
    pod = next(iter(wl.path.pods.values()))
    assert pod.proxy.cap == 6 and pod.api.cap == pod.runner.torch_threads == 3
    machine, wl = _built(_spaced(1), cores=6)
    sized = [wl.path.add_function(machine.create_group(f"kubepods.slice/p{i}"), limit, 1500)
             for i, limit in enumerate([None, 2100])]
    # a request does not count; a pod's limit counts for BentoML only
    assert [(p.proxy.cap, p.runner.torch_threads) for p in sized] == [(6, 6), (6, 3)]
    machine, wl = _built(_spaced(1), cores=6, pools={"sizing": "pod"})
    path = wl.path
    sized = [path.add_function(machine.create_group(f"kubepods.slice/p{i}"), limit, request)
             for i, (limit, request) in enumerate([(None, 1500), (2100, 500), (None, 40),
                                                   (None, 9000), (None, None)])]
    assert [p.runner.torch_threads for p in sized] == [2, 3, 1, 6, 6]
    assert [p.proxy.cap for p in sized] == [p.api.cap for p in sized] == [2, 3, 1, 6, 6]


def test_a_one_thread_team_runs_its_inference_as_one_burst():
    res = _run(_spaced(5), torch_threads=1, openmp={"enabled": True})
    s = res.summary.to_pylist()[0]
    assert s["omp_regions"] == 5 and s["omp_spin_s"] == 0 and s["omp_futex_waits"] == 0
    # the master alone: its 1 us start, the demand, and no wait
    assert [r["latency_s"] for r in res.requests.to_pylist()] == \
        pytest.approx([STAGES_S + 0.04 + 1e-6] * 5, abs=1e-9)


def test_cluster_pods_size_their_pools_from_their_requests():
    """In a cluster each pod's request reaches its runtimes: under ``pod``
    sizing a 1,500-millicore pod runs a team of two; the nodes report the
    teams' spin and the summary adds it up."""
    trace = make_trace(["fn-0"] * 4, [0.2, 0.4, 0.6, 0.8], [0.02] * 4, [1] * 4)
    counts = {}
    for sizing in ("runtime", "pod"):
        cfg = cluster_cfg(duration_s=2.0, nodes=1, cores=4, cpu_request=1500,
                          calibration=IDEAL)
        cfg["workload"].update(request_path="bentoml", openmp={"enabled": True, "regions": 5},
                               pools={"sizing": sizing})
        s = simulate_cluster(cfg, trace).summary.to_pylist()[0]
        assert s["n_requests"] == 4 and s["omp_inferences"] == 4
        counts[sizing] = s["omp_futex_waits"]
        assert s["omp_spin_s"] == pytest.approx(counts[sizing] * BUDGET_S, abs=1e-9)
    # the workers sleep after each inference's dock spin: 3 of them, then 1
    assert counts == {"runtime": 3 * 4, "pod": 1 * 4}


def test_openmp_and_pools_are_config_groups_with_checked_keys():
    cfg = compose(["workload=azure2019", "workload.request_path=bentoml",
                   "workload/openmp=libgomp", "workload/pools=pod"])
    assert cfg.workload.openmp.enabled and cfg.workload.pools.sizing == "pod"
    assert cfg.workload.openmp.regions is None            # the module's REGIONS
    assert not compose(["workload=azure2019"]).workload.openmp.enabled
    for bad in ("workload.openmp.regions=0", "workload.openmp.wait_policy=spin",
                "workload.openmp.spin_count=-1", "workload.pools.sizing=host"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            compose(["workload=azure2019", "workload/openmp=libgomp", bad])
    assert REGIONS == 175


def test_replace_burst_ends_a_burst_without_a_switch():
    """Machine.replace_burst: a running task's burst is cut now and the new
    one timed from here; a queued task's is replaced; a sleeper refuses."""
    from sim.workloads.poisson import WORKLOAD  # noqa: F401  (a registered workload)
    cfg = make_cfg({"name": "trace", "working_set_kb": 0, "cgroup_weight": 100, "nice": 0,
                    "parent_cgroup": "x", "trace_file": None}, cores=1, duration_s=1.0)
    engine, machine, recorder, wl = build(cfg, make_trace(["f"], [0.5], [0.01], [1]))
    tg = machine.create_group("t")
    ends = []

    class Owner:
        def burst_done(self, task):
            ends.append((task.name, engine.now))
            return BURST_BLOCK
    a = machine.new_task("a", tg, 0, 1_000_000, 0, Owner())
    b = machine.new_task("b", tg, 0, 1_000_000, 0, Owner())
    machine.wake_up_new_task(a, 0)
    machine.wake_up_new_task(b, 0)
    engine.run(300_000)
    running, queued = (a, b) if a.on_cpu else (b, a)
    assert machine.replace_burst(running, 50_000) == 700_000
    assert machine.replace_burst(queued, 20_000) == 1_000_000
    engine.run(1_000_000)
    assert ends == [(running.name, 350_000), (queued.name, 370_000)]
    with pytest.raises(RuntimeError, match="not runnable"):
        machine.replace_burst(running, 1)
