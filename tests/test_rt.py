"""The real-time class (sim/rt.py): SCHED_RR above the fair class, RR
quanta, RT throttling, placement and pull."""
import pytest

from scenarios.simulate import simulate
from tests.simcfg import make_cfg, periodic, run_for

HZ_TICK_MS = 4  # HZ=250 on every test host


def _group(name, threads=1, run_ms=None, sleep_ms=None, **kw):
    return {"name": name, "threads": threads, "nice": 0, "cgroup_weight": 100,
            "cgroup_shares": None, "cpuset": None, "run_ms": run_ms, "sleep_ms": sleep_ms,
            "task_policy": None, "rt_priority": None, **kw}


def _usage_share(machine, path, seconds):
    return machine.groups["/" + path].usage_ns / (seconds * 1e9)


def test_rt_wakeup_preempts_a_fair_hog_at_once():
    """An RR task that runs 5 ms every 50 ms next to a fair hog: with ideal
    costs every burst completes exactly 5 ms after its release."""
    wl = periodic(run_ms=5.0, sleep_ms=45.0, groups=[
        _group("rt", run_ms=5.0, sleep_ms=45.0, task_policy="rr"),
        _group("fair", run_ms=1000.0, sleep_ms=0.0)])
    res = simulate(make_cfg(wl, duration_s=3.0, warmup_s=0.5))
    lat = [r["latency_s"] for r in res.requests.to_pylist() if r["function"] == "/rt"]
    assert len(lat) >= 45
    assert max(lat) == pytest.approx(0.005, abs=1e-9)
    assert min(lat) == pytest.approx(0.005, abs=1e-9)


def test_fair_tasks_wait_behind_rt_but_are_not_starved_by_throttling():
    """An RT hog and a fair hog on one CPU: RT throttling at 950 ms per 1 s
    leaves the fair class 5% of the CPU.  Throttling is detected at the
    first tick past the budget, so per period the RT share is 950 ms plus
    at most one 4 ms tick."""
    wl = periodic(groups=[_group("rt", run_ms=1000.0, sleep_ms=0.0, task_policy="rr"),
                          _group("fair", run_ms=1000.0, sleep_ms=0.0)])
    seconds = 10.0
    m, _, _ = run_for(make_cfg(wl), seconds)
    fair = _usage_share(m, "fair", seconds)
    rt = _usage_share(m, "rt", seconds)
    assert rt + fair == pytest.approx(1.0, abs=1e-6)
    assert 0.05 - HZ_TICK_MS / 1000 <= fair <= 0.05 + 1e-9
    assert m.rt.rt_rqs[0].rt_throttled in (True, False)


def test_unlimited_rt_runtime_starves_the_fair_class():
    wl = periodic(groups=[_group("rt", run_ms=1000.0, sleep_ms=0.0, task_policy="rr"),
                          _group("fair", run_ms=1000.0, sleep_ms=0.0)])
    cfg = make_cfg(wl, scheduler={"name": "cfs", "sched_rt_runtime_us": -1})
    m, _, _ = run_for(cfg, 5.0)
    assert m.groups["/fair"].usage_ns == 0
    assert _usage_share(m, "rt", 5.0) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [2, 3])
def test_rr_rotates_equal_tasks_every_quantum(n):
    """n RR hogs of equal priority on one CPU, throttling off: each runs
    100 ms (25 ticks at HZ=250) then goes to the tail, so the CPU switches
    10 times a second and the shares are equal."""
    wl = periodic(groups=[_group("rt", threads=n, run_ms=10_000.0, sleep_ms=0.0,
                                 task_policy="rr")])
    cfg = make_cfg(wl, scheduler={"name": "cfs", "sched_rt_runtime_us": -1})
    m, wl_obj, _ = run_for(cfg, 10.0)
    assert m.rqs[0].nr_switches == pytest.approx(10 * 10.0, abs=2)
    ran = [10_000 * 1_000_000 - t.remaining for t in wl_obj.threads]
    for r in ran:
        assert r == pytest.approx(10e9 / n, abs=100e6)


def test_rr_quantum_is_the_sysctl_rounded_to_ticks():
    wl = periodic(groups=[_group("rt", threads=2, run_ms=10_000.0, sleep_ms=0.0,
                                 task_policy="rr")])
    cfg = make_cfg(wl, scheduler={"name": "cfs", "sched_rt_runtime_us": -1,
                                  "sched_rr_timeslice_ms": 10})
    m, _, _ = run_for(cfg, 2.0)
    # 10 ms is 2.5 ticks, rounded to 2 ticks = 8 ms: 125 switches a second
    assert m.rt.rr_timeslice == 2
    assert m.rqs[0].nr_switches == pytest.approx(125 * 2.0, abs=2)


def test_rt_tasks_spread_to_cpus_without_rt_work():
    """Four RR hogs forked on CPU 0 of a 2-CPU host: find_lowest_rq sends
    the second to CPU 1; the rest queue, two per CPU."""
    wl = periodic(groups=[_group("rt", threads=4, run_ms=10_000.0, sleep_ms=0.0,
                                 task_policy="rr", cpuset=None)])
    cfg = make_cfg(wl, cores=2, scheduler={"name": "cfs", "sched_rt_runtime_us": -1})
    m, wl_obj, _ = run_for(cfg, 4.0)
    assert [m.rt.rt_rqs[c].rt_nr_running for c in (0, 1)] == [2, 2]
    for t in wl_obj.threads:
        assert 10_000 * 1_000_000 - t.remaining == pytest.approx(2e9, abs=100e6)


def test_a_cpu_whose_rt_task_sleeps_pulls_queued_rt_work():
    """CPU 1 runs a periodic RR task pinned to it; two RR hogs end up on
    CPU 0 (the second finds no CPU without RT work).  When the periodic task
    sleeps, CPU 1 pulls the queued hog (pull_rt_task) instead of idling, so
    neither CPU idles while a hog waits."""
    wl = periodic(groups=[
        _group("ticker", run_ms=1.0, sleep_ms=20.0, task_policy="rr", cpuset="1"),
        _group("hogs", threads=2, run_ms=100_000.0, sleep_ms=0.0, task_policy="rr")])
    cfg = make_cfg(wl, cores=2, scheduler={"name": "cfs", "sched_rt_runtime_us": -1})
    m, wl_obj, _ = run_for(cfg, 5.0)
    hogs = [100_000 * 1_000_000 - t.remaining for t in wl_obj.threads[1:]]
    idle_ns = sum(5e9 - rq.busy_ns for rq in m.rqs)
    assert m.rt.nr_pulls >= 1
    assert idle_ns == pytest.approx(0, abs=1e6)
    assert sum(hogs) > 0.95 * 10e9
    assert min(hogs) > 0.45 * 10e9


def test_rr_scheduler_option_runs_every_workload_thread_under_sched_rr(monkeypatch):
    import backends.simhost
    from scenarios.config import compose
    from backends.host import plain_config
    from scenarios.simulate import build
    from sim.rt import rt_prio
    cfg = plain_config(compose(["scheduler=rr", "host=this-vm", "duration_s=1", "warmup_s=0.2",
                          "workload.functions=4", "workload.rate_rps=20"]))
    enqueued = {"rt": [], "fair": []}
    fair_cls = backends.simhost.load_policy(cfg["scheduler"]["policy"])

    class Recording(fair_cls):
        def enqueue_task(self, rq, p, flags):
            enqueued["fair"].append(p)
            super().enqueue_task(rq, p, flags)
    monkeypatch.setattr(backends.simhost, "load_policy", lambda name: Recording)
    engine, m, _, wl = build(cfg)
    wl.start()
    # the RT class is compiled (no per-instance hook): sample its queues
    # every 0.1 ms instead
    for t in range(100_000, 10**9 + 1, 100_000):
        engine.run(t)
        for rt_rq in m.rt.rt_rqs:
            for q in rt_rq.queue.values():
                enqueued["rt"].extend(p for p in q if p not in enqueued["rt"])
    assert enqueued["fair"] == []
    assert len(enqueued["rt"]) > 40
    assert all(p.sched_policy == "rr" and p.prio == rt_prio(50) for p in enqueued["rt"])
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["scheduler"] == "rr"
    assert s["throughput_rps"] > 0


def test_rr_under_a_fair_policy_keeps_machine_invariants():
    from sim.invariants import check_rq_invariants
    wl = periodic(groups=[
        _group("rt", threads=3, run_ms=3.0, sleep_ms=7.0, task_policy="rr"),
        _group("fair", threads=3, run_ms=5.0, sleep_ms=2.0)])
    m, _, _ = run_for(make_cfg(wl, cores=2), 3.0)
    check_rq_invariants(m)
    for rq, rt_rq in zip(m.rqs, m.rt.rt_rqs):
        assert rq.nr_running == rq.cfs.h_nr_running + rt_rq.rt_nr_running


@pytest.mark.parametrize("scheduler", ["cfs", "eevdf", "lags"])
def test_sched_setscheduler_moves_running_and_queued_threads_both_ways(scheduler):
    """Two fair hogs share one CPU.  At 1 s SimHost.set_rt_policy makes one
    SCHED_RR, as chrt does on a real host: it takes the CPU but for RT
    throttling's 5% (two RT periods start at its first enqueue).  At 3 s it
    falls back to normal and the two share the CPU evenly again under CFS
    and EEVDF: its vruntime (or lag) was kept relative while it was RT, so
    it neither starves nor is starved."""
    from backends.simhost import SimHost
    from scenarios.simulate import build
    from sim.engine import s_to_ns
    from sim.invariants import check_rq_invariants
    wl = periodic(groups=[_group("a", run_ms=100_000.0, sleep_ms=0.0),
                          _group("b", run_ms=100_000.0, sleep_ms=0.0)])
    engine, m, _, workload = build(make_cfg(wl, scheduler={"name": scheduler}))
    host = SimHost(m)
    workload.start()
    shares = []
    last = {"a": 0, "b": 0}
    for until, change in ((1, "rr"), (3, "normal"), (5, None)):
        engine.run(s_to_ns(until))
        m.sync()
        check_rq_invariants(m, workload.threads)
        now = {g: m.groups["/" + g].usage_ns for g in last}
        shares.append({g: (now[g] - last[g]) / 1e9 for g in last})
        last = now
        if change:
            host.set_rt_policy("/a", change, 10)
            check_rq_invariants(m, workload.threads)
            assert all(p.sched_policy == change for p in m.groups["/a"].tasks)
    first, rt, back = shares
    assert first["a"] == pytest.approx(0.5, abs=0.02)
    assert rt["a"] == pytest.approx(1.9, abs=2 * HZ_TICK_MS / 1000 + 1e-9)
    assert rt["b"] == pytest.approx(0.1, abs=2 * HZ_TICK_MS / 1000 + 1e-9)
    assert back["a"] + back["b"] == pytest.approx(2.0, abs=1e-6)
    if scheduler == "lags":
        # the Load Credit of /a decayed while its load was RT: as the
        # lighter function it now runs first (LAS-like), as designed
        assert back["a"] >= back["b"]
    else:
        assert back["a"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("scheduler", ["cfs", "eevdf", "lags"])
@pytest.mark.parametrize("policy", ["normal", "rr"])
def test_a_live_cpuset_change_moves_running_and_queued_threads(scheduler, policy):
    """Three hogs of one cgroup on a 2-CPU host, then its cpuset shrinks to
    CPU 1 (SimHost.set_cpuset, as writing cpuset.cpus does): the threads on
    CPU 0, running and queued, move at once, CPU 0 idles from then on, and
    all three share CPU 1; widening the set spreads them again."""
    from backends.simhost import SimHost
    from scenarios.simulate import build
    from sim.engine import s_to_ns
    from sim.invariants import check_rq_invariants
    wl = periodic(groups=[_group("a", threads=3, run_ms=100_000.0, sleep_ms=0.0,
                                 task_policy=None if policy == "normal" else policy)])
    sched = {"name": scheduler, "sched_rt_runtime_us": -1}
    engine, m, _, workload = build(make_cfg(wl, cores=2, scheduler=sched))
    host = SimHost(m)
    workload.start()
    engine.run(s_to_ns(1))
    assert {p.cpu for p in workload.threads} == {0, 1}
    host.set_cpuset("/a", {1})
    check_rq_invariants(m, workload.threads)
    assert {p.cpu for p in workload.threads} == {1}
    m.sync()
    busy0 = m.rqs[0].busy_ns
    ran = [p.remaining for p in workload.threads]
    engine.run(s_to_ns(4))
    m.sync()
    check_rq_invariants(m, workload.threads)
    assert m.rqs[0].busy_ns == busy0
    assert m.rqs[0].curr is None
    for before, p in zip(ran, workload.threads):
        assert before - p.remaining == pytest.approx(1e9, rel=0.1)
    host.set_cpuset("/a", None)
    engine.run(s_to_ns(5))
    check_rq_invariants(m, workload.threads)
    assert m.rqs[0].curr is not None
