"""What else runs on the host: the load generator (sim/loadgen.py) and the
per-CPU kernel threads (sim/kthreads.py) as tasks of the simulated host."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from calibration.bench.common import read_bench
from calibration.bench.kthreads import interruptions, kthread_params
from calibration.bench.driver import RTAPP_FILE, driver_costs
from calibration.bench.loadgen import loadgen_costs
from scenarios.simulate import build, simulate
from sim.engine import Engine
from sim.kthreads import RUN_QUANTILES, KernelThreads
from sim.loadgen import NAME as LOADGEN
from sim.rt import rt_prio
from sim.sched_class import SCHED_FIFO
from tests.simcfg import DEFAULT_COSTS, IDEAL, make_cfg, periodic, poisson

DATA = Path(__file__).resolve().parent.parent / "calibration" / "data" / "this-vm"
RUN_US = [2, 4, 6, 10, 20, 60, 300, 2000]
HOST_TASKS = {"loadgen_dispatch_us": 150.0, "loadgen_worker_us": 2.0,
              "kthread_rate_per_s": 200.0, "kthread_run_us": RUN_US}


def worker_cfg(calibration: dict, scheduler: dict | None = None) -> dict:
    return make_cfg(poisson(functions=6, rate_rps=30.0, request_path="worker"), cores=2,
                    duration_s=2.0, warmup_s=0.2, scheduler=scheduler or {"name": "eevdf"},
                    calibration=calibration)


def _rows(r) -> dict:
    s = r.summary.to_pylist()[0]
    for measured in ("wall_time_s", "sim_s_per_wall_s", "run_id"):
        s.pop(measured)
    # as text, where NaN equals NaN
    return {"summary": repr(s), "requests": repr(r.requests.to_pylist()),
            "intervals": repr(r.intervals.to_pylist())}


def test_switched_off_or_unmeasured_is_the_old_run():
    """A profile without the measurements, and one with them switched off,
    run exactly as before the mechanisms existed."""
    plain = _rows(simulate(worker_cfg(DEFAULT_COSTS)))
    off = _rows(simulate(worker_cfg({**DEFAULT_COSTS, **HOST_TASKS,
                                     "loadgen": False, "kthreads": False})))
    assert off == plain
    on = _rows(simulate(worker_cfg({**DEFAULT_COSTS, **HOST_TASKS})))
    assert on["summary"] != plain["summary"]


def test_the_loadgen_is_only_on_the_worker_path():
    direct = make_cfg(poisson(functions=6, rate_rps=30.0), cores=2, duration_s=2.0,
                      warmup_s=0.2, calibration=DEFAULT_COSTS)
    with_lg = copy.deepcopy(direct)
    with_lg["calibration"] = {**DEFAULT_COSTS, "loadgen_dispatch_us": 150.0}
    assert _rows(simulate(with_lg)) == _rows(simulate(direct))


def test_the_samplers_reads_cost_what_the_profile_says_at_the_samplers_instants():
    """The sampler's reads on the load generator's thread: at 0, every
    interval_s and the warm-up, each loadgen_sample_us +
    loadgen_sample_cgroup_us x (functions + 2) of CPU; with no arrivals
    that is all the thread runs."""
    cfg = make_cfg(poisson(functions=6, rate_rps=1e-9, request_path="worker"), cores=2,
                   duration_s=3.0, warmup_s=0.5, scheduler={"name": "eevdf"},
                   calibration={**IDEAL, "loadgen_dispatch_us": 0.0,
                                "loadgen_sample_us": 400.0, "loadgen_sample_cgroup_us": 25.0})
    cfg["trace"] = {"name": "sched"}
    sched = simulate(cfg).extra["sched"].to_pandas()
    sw = sched[sched.event == "sched_switch"].sort_values("time_ns")
    ins = sw[sw.next_comm == LOADGEN]
    # at 0, 0.5 (warm-up), 1 and 2 s, each 400 + 25 x (6 + 2) = 600 us
    assert list(ins.time_ns // 1_000_000) == [0, 500, 1000, 2000]
    outs = sw[sw.prev_comm == LOADGEN]
    assert list(outs.time_ns.to_numpy() - ins.time_ns.to_numpy()) == [600_000] * 4


def test_the_schedule_trace_shows_them():
    cfg = worker_cfg({**DEFAULT_COSTS, **HOST_TASKS})
    cfg["trace"] = {"name": "sched"}
    r = simulate(cfg)
    sched = r.extra["sched"].to_pandas()
    sw = sched[sched.event == "sched_switch"]
    lg = sw[sw.next_comm == LOADGEN]
    assert len(lg) > 0 and set(lg.next_cgroup) == {"/"}
    # SCHED_FIFO: it preempts the workload task running where it wakes
    assert ((lg.prev_state == "R") & (lg.prev_cgroup.str.startswith("/faas.slice"))).any()
    for cpu in (0, 1):
        k = sw[sw.next_comm == f"kthread/{cpu}"]
        assert len(k) > 0 and set(k.cpu) == {cpu}


def test_host_switch_outs_are_not_the_workloads():
    """perf stat -G counts the workload's cgroups only: two hogs, one per CPU,
    are switched out once per kernel-thread run, and the kernel threads' own
    switch-outs are not counted."""
    hogs = periodic(groups=[{"name": f"hog{c}", "threads": 1, "run_ms": 100_000.0,
                             "sleep_ms": 0.0, "cpuset": str(c)} for c in (0, 1)])
    cfg = make_cfg(hogs, cores=2, duration_s=5.0, warmup_s=0.0, scheduler={"name": "eevdf"},
                   calibration={**DEFAULT_COSTS, "kthread_rate_per_s": 50.0,
                                "kthread_run_us": RUN_US})
    cfg["trace"] = {"name": "sched"}
    r = simulate(cfg)
    sw = r.extra["sched"].to_pandas()
    sw = sw[sw.event == "sched_switch"]
    out_of_hogs = sw[sw.prev_comm.str.startswith("hog", na=False)]
    kth = sw[sw.next_comm.str.startswith("kthread/", na=False)]
    s = r.summary.to_pylist()[0]
    assert s["switch_out_rate_per_s"] * 5.0 == pytest.approx(len(out_of_hogs), abs=1)
    assert len(out_of_hogs) == len(kth)
    # the CPU utilisation is the workload's (the real run cgroups'): the
    # kernel threads' share of the two busy CPUs is not in it
    assert 0.98 < s["cpu_util"] < 1.0
    # the Poisson rate, per CPU, within 4 sigma of its count
    assert abs(len(kth) - 2 * 50.0 * 5.0) < 4 * np.sqrt(2 * 50.0 * 5.0)


def test_run_times_follow_the_quantiles():
    class _M:          # the two attributes the draw needs
        rqs = []
        engine = Engine(0)
    k = KernelThreads(_M(), 0.0, RUN_US)
    us = np.array([k.draw_run_ns(u) for u in np.linspace(0, 1, 100_001)]) / 1000
    assert np.quantile(us, RUN_QUANTILES) == pytest.approx(RUN_US, rel=0.01, abs=0.01)
    with pytest.raises(ValueError, match="kthread_run_us"):
        KernelThreads(_M(), 1.0, [3, 2, 1])


def test_interruptions_attribute_the_first_intruder():
    switches = [(0, 1.0, 10, "R", "kworker/0:1", 5, 120),
                (0, 1.00001, 5, "S", "bash", 7, 120),
                (0, 1.00003, 7, "S", "hog", 10, 120),
                (1, 1.0, 11, "R", "rcu_preempt", 6, 120)]     # never back: not counted
    assert interruptions(switches, {0: 10, 1: 11}) == [
        {"cpu": 0, "t_s": 0.0, "duration_ns": 30_000, "run_ns": 10_000,
         "comm": "kworker/0:1", "pid": 5, "prio": 120, "n_tasks": 2, "preempted": True}]


def test_kthreads_match_the_measurement():
    """One hog per CPU for 30 s, as calibration/bench/kthreads.py measured
    this VM: the kernel threads modelled from its fit switch each hog out,
    and take its CPU, as often and as much as the host did, within the
    spread of its (repetition, CPU) cells."""
    table, _, meta = read_bench(DATA / "kthreads.parquet")
    params = kthread_params(table, meta)
    windows = meta["params"]["window_s"]
    kth = table.filter(table.column("kthread")).to_pylist()
    cells = {(rep, cpu): [0, 0] for rep in range(len(windows)) for cpu in meta["params"]["cpus"]}
    for r in kth:
        cells[r["rep"], r["cpu"]][0] += 1
        cells[r["rep"], r["cpu"]][1] += r["run_ns"]
    rates = [n / windows[rep] for (rep, _), (n, _) in cells.items()]
    shares = [ns / 1e9 / windows[rep] for (rep, _), (_, ns) in cells.items()]
    seconds = 30.0
    hogs = periodic(groups=[{"name": f"hog{c}", "threads": 1, "run_ms": 100_000.0,
                             "sleep_ms": 0.0, "cpuset": str(c)} for c in (0, 1)])
    cfg = make_cfg(hogs, cores=2, duration_s=seconds, warmup_s=0.0, scheduler={"name": "eevdf"},
                   calibration={**DEFAULT_COSTS, **{k: v for k, v in params.items()
                                                    if k != "uncertainty"}})
    cfg["trace"] = {"name": "sched"}
    sw = simulate(cfg).extra["sched"].to_pandas()
    sw = sw[sw.event == "sched_switch"].sort_values("time_ns")
    for cpu in (0, 1):
        on = sw[sw.cpu == cpu]
        hog_out = on[on.prev_comm == f"hog{cpu}/0"]
        assert min(rates) <= len(hog_out) / seconds <= max(rates)
        # the kernel thread's runs: from its switch-in to the next switch on the CPU
        t = on.time_ns.to_numpy()
        ins = np.flatnonzero(on.next_comm.to_numpy() == f"kthread/{cpu}")
        ran = (t[ins[ins + 1 < len(t)] + 1] - t[ins[ins + 1 < len(t)]]).sum()
        assert min(shares) <= ran / 1e9 / seconds <= max(shares)


def test_the_loadgen_ranks_above_rr_workers():
    """backend.loadgen_rt_priority is raised above SCHED_RR workers (or they
    would starve the dispatcher): the simulated one too."""
    cal = {**DEFAULT_COSTS, "loadgen_dispatch_us": 150.0}
    _, _, _, fair = build(worker_cfg(cal))
    _, _, _, rr = build(worker_cfg(cal, scheduler={"name": "rr", "policy": "cfs",
                                                   "task_policy": "rr", "rt_priority": 50}))
    assert fair.path.loadgen.task.prio == rt_prio(1)
    assert rr.path.loadgen.task.prio == rt_prio(51)
    assert fair.path.loadgen.task.sched_policy == SCHED_FIFO


def _loadgen_cpu(sched, t0_ns: int, t1_ns: int) -> tuple[float, int]:
    """The load generator's CPU (ns) and switch-ins in [t0, t1) of a
    schedule trace: from each switch-in to the next switch on its CPU."""
    sw = sched[sched.event == "sched_switch"].sort_values(["cpu", "time_ns"])
    ran, ins = 0, 0
    for _, on in sw.groupby("cpu"):
        t = on.time_ns.to_numpy()
        idx = np.flatnonzero((on.next_comm.to_numpy() == LOADGEN) & (t >= t0_ns) & (t < t1_ns))
        idx = idx[idx + 1 < len(t)]
        ran += int((t[idx + 1] - t[idx]).sum())
        ins += len(idx)
    return ran, ins


def test_loadgen_matches_the_measurement():
    """The real backend's load generator, as calibration/bench/loadgen.py
    measured it on this VM, and the simulated one on the same scenarios
    with the profile keys fitted from it (its sampler's reads included):
    its CPU per second (its rate-independent CPU included) within the
    measured spread of each point's repetitions, widened by the fit's
    residual scatter."""
    table, _, meta = read_bench(DATA / "loadgen.parquet")
    fit = loadgen_costs(table)
    sig = fit["measured"]
    rows = [r for r in table.to_pylist() if not r["host_disturbed"]]
    params = meta["params"]
    points: dict = {}
    for r in rows:
        points.setdefault((r["functions"], r["rate_rps"]), []).append(
            r["gen_cpu_ns"] / r["span_s"] / 1e9)
    resid = sig["residual_us_per_s"] / 1e6
    for (functions, rate), measured in sorted(points.items()):
        cfg = make_cfg(poisson(functions=functions, rate_rps=rate / functions,
                               mean_service_s=params["demand_s"], request_path="worker"),
                       cores=2, duration_s=params["duration_s"] + params["warmup_s"],
                       warmup_s=params["warmup_s"], scheduler={"name": "eevdf"},
                       calibration={**DEFAULT_COSTS, **{k: fit[k] for k in (
                           "loadgen_dispatch_us", "loadgen_worker_us", "loadgen_sample_us",
                           "loadgen_sample_cgroup_us", "loadgen_background_us_per_s",
                           "loadgen_background_worker_us_per_s")}})
        cfg["trace"] = {"name": "sched"}
        sched = simulate(cfg).extra["sched"].to_pandas()
        t0 = int(params["warmup_s"] * 1e9)
        t1 = int((params["duration_s"] + params["warmup_s"]) * 1e9)
        ran, ins = _loadgen_cpu(sched, t0, t1)
        sim = ran / (t1 - t0)
        assert min(measured) - 2 * resid <= sim <= max(measured) + 2 * resid, (functions, rate)


def _driver_cfg(kind: str, workers: int, sleep_ms: float, params: dict, keys: dict) -> dict:
    wl = ({"name": "rtapp", "file": RTAPP_FILE} if kind == "rtapp" else
          periodic(groups=[{"name": f"g{i}", "threads": 1, "run_ms": params["run_ms"],
                            "sleep_ms": sleep_ms} for i in range(workers)]))
    return make_cfg(wl, cores=2, duration_s=params["duration_s"], warmup_s=params["warmup_s"],
                    scheduler={"name": "eevdf"}, calibration={**DEFAULT_COSTS, **keys})


def test_driver_matches_the_measurement():
    """The real backend's driving loop under self-timed workloads, as
    calibration/bench/driver.py measured it on this VM (the colosim
    process's CPU per second, its sampler's reads included), and the
    simulated loop on the same scenarios with the profile keys fitted from
    it and from loadgen.parquet (its sampler): the simulated
    colosim_cpu_frac within the measured spread of each point's
    repetitions, widened by twice the fit's residual scatter; with the
    keys, the loop charges each burst line it reads."""
    table, _, meta = read_bench(DATA / "driver.parquet")
    fit = driver_costs(table)
    sampler = loadgen_costs(read_bench(DATA / "loadgen.parquet")[0])
    keys = {k: v for k, v in {**fit, **sampler}.items()
            if k.startswith("loadgen_") and k not in ("loadgen_dispatch_us",)}
    params = meta["params"]
    points: dict = {}
    for r in table.to_pylist():
        if not r["host_disturbed"]:
            points.setdefault((r["kind"], r["workers"], r["sleep_ms"]), []).append(
                r["colosim_us_per_s"])
    assert {k for k, _, _ in points} == {"periodic", "rtapp"}
    resid = fit["measured"]["residual_us_per_s"]
    for (kind, workers, sleep_ms), measured in sorted(points.items()):
        s = simulate(_driver_cfg(kind, workers, sleep_ms, params, keys)).summary.to_pylist()[0]
        sim = s["colosim_cpu_frac"] * 2 * 1e6     # us per s, of the 2 CPUs' time
        assert min(measured) - 2 * resid <= sim <= max(measured) + 2 * resid, (kind, workers)
    # the burst term is the loop's: without it, 400 bursts/s cost what 50 do
    fast = _driver_cfg("periodic", 1, 2.0, params, keys)
    slow = _driver_cfg("periodic", 1, 2.0, params, {**keys, "loadgen_burst_us": 0.0})
    extra = (simulate(fast).summary.to_pylist()[0]["colosim_cpu_frac"]
             - simulate(slow).summary.to_pylist()[0]["colosim_cpu_frac"]) * 2e6
    bursts = (params["duration_s"] - params["warmup_s"]) * 1000 / (2.0 + params["run_ms"])
    assert extra == pytest.approx(keys["loadgen_burst_us"] * bursts
                                  / (params["duration_s"] - params["warmup_s"]), rel=0.1)


def test_driver_costs_fit_nothing_from_a_disturbed_host():
    """As the loadgen fit: too few undisturbed periodic runs, or one worker
    count only, fit nothing (None); without rt-app runs there is no
    loadgen_rtapp_us_per_s."""
    table, _, _ = read_bench(DATA / "driver.parquet")
    rows = table.to_pylist()
    flagged = [{**r, "host_disturbed": True} for r in rows]
    assert driver_costs(pa.Table.from_pylist(flagged, schema=table.schema)) is None
    one = [r for r in rows if r["workers"] == 1]
    assert driver_costs(pa.Table.from_pylist(one, schema=table.schema)) is None
    periodic_only = [r for r in rows if r["kind"] == "periodic"]
    fit = driver_costs(pa.Table.from_pylist(periodic_only, schema=table.schema))
    assert "loadgen_rtapp_us_per_s" not in fit and fit["loadgen_burst_us"] > 0


def test_loadgen_costs_fit_nothing_from_a_disturbed_host():
    """A busy host flags the runs: with fewer undisturbed runs than the fit
    has terms, or one density only, nothing is fitted (None), as calibrate
    then notes instead of failing."""
    table, _, _ = read_bench(DATA / "loadgen.parquet")
    rows = table.to_pylist()
    assert loadgen_costs(table) is not None
    flagged = [{**r, "host_disturbed": True} for r in rows]
    assert loadgen_costs(pa.Table.from_pylist(flagged, schema=table.schema)) is None
    one = [r for r in rows if r["functions"] == 8]
    assert loadgen_costs(pa.Table.from_pylist(one, schema=table.schema)) is None


# RCU's grace-period kthread, woken by exiting threads (sim/kthreads.py RcuGp)

RCU = {"rcu_gp_wakeups_per_exit": 4.0, "rcu_gp_period_ms": 8.0, "rcu_gp_run_us": 15.0}


def _rcu_runs(calibration: dict, rate_rps: float, functions: int = 1) -> tuple[int, int, int]:
    """The rcu_preempt task's switch-ins and CPU (ns) over a 2 s run of
    ``functions`` functions at ``rate_rps`` each, and the threads that exited."""
    cfg = make_cfg(poisson(functions=functions, rate_rps=rate_rps, mean_service_s=0.001),
                   cores=2, duration_s=2.0, warmup_s=0.0, calibration=calibration)
    cfg["trace"] = {"name": "sched"}
    res = simulate(cfg)
    sw = res.extra["sched"].to_pandas()
    sw = sw[sw.event == "sched_switch"].sort_values("time_ns")
    ins = (sw.next_comm == "rcu_preempt").sum()
    outs = sw[sw.prev_comm == "rcu_preempt"]
    # each run is its own burst: the time from its switch-in to its switch-out
    ran = 0
    for cpu, on in sw.groupby("cpu"):
        t = on.time_ns.to_numpy()
        idx = np.flatnonzero(on.next_comm.to_numpy() == "rcu_preempt")
        idx = idx[idx + 1 < len(t)]
        ran += int((t[idx + 1] - t[idx]).sum())
    assert len(outs) >= ins - 1
    return int(ins), ran, res.requests.num_rows


def test_rcu_wakes_per_exit_while_exits_are_rare_and_at_its_period_when_not():
    # 5 exits/s, 200 ms apart: 4 wake-ups each (one every 8 ms from the next tick)
    ins, ran, exits = _rcu_runs({**IDEAL, **RCU}, 5.0)
    assert ins == pytest.approx(4 * exits, abs=4)
    assert ran == pytest.approx(ins * 15_000, rel=0.02)
    # 400 exits/s: the span never ends, one wake-up every 8 ms (250 in 2 s)
    ins, _, exits = _rcu_runs({**IDEAL, **RCU}, 100.0, functions=4)
    assert exits > 700
    assert ins == pytest.approx(2.0 / 0.008, abs=3)


def test_rcu_switched_off_or_unmeasured_is_the_old_run():
    cfg = make_cfg(poisson(functions=4, rate_rps=20.0), cores=2, duration_s=1.0,
                   warmup_s=0.0, calibration=DEFAULT_COSTS)
    plain = _rows(simulate(cfg))
    off = copy.deepcopy(cfg)
    off["calibration"] = {**DEFAULT_COSTS, **RCU, "rcu": False}
    assert _rows(simulate(off)) == plain
    on = copy.deepcopy(cfg)
    on["calibration"] = {**DEFAULT_COSTS, **RCU}
    assert _rows(simulate(on))["summary"] != plain["summary"]


def test_rcu_params_recover_the_measured_shape():
    """The fit on rows made from known numbers (4.2 wake-ups per exit over a
    baseline of 3/s, 125/s saturated, 15 us each), a disturbed row ignored."""
    from calibration.bench.rcu import rcu_params
    rows = []
    for rate in (0, 5, 10, 20, 50, 100, 200, 400):
        per_s = 125.0 if rate >= 50 else 3.0 + 4.2 * rate
        rows.append({"rep": 0, "rate": float(rate), "exits": 4 * rate, "span_s": 4.0,
                     "gp_cpu_ns": int(per_s * 4 * 15_000), "gp_runs": int(per_s * 4),
                     "other_frac": 0.0, "host_disturbed": False})
    rows.append({**rows[2], "gp_runs": 10_000, "host_disturbed": True})
    p = rcu_params(pa.Table.from_pylist(rows))
    assert p["rcu_gp_wakeups_per_exit"] == pytest.approx(4.2, rel=0.01)
    assert p["rcu_gp_period_ms"] == pytest.approx(8.0, rel=0.01)
    assert p["rcu_gp_run_us"] == pytest.approx(15.0, rel=0.01)
    assert rcu_params(pa.Table.from_pylist([r for r in rows if r["rate"] < 50])) is None


def _idle_ticks() -> list:
    """One function's 1 ms requests, 5 a second, on 2 CPUs for 2 s under
    EEVDF with RCU's keys and rcu_idle_tick: at every 1 ms, each idle CPU's
    (now, the time its RCU callbacks wait until, whether its tick is armed)."""
    cfg = make_cfg(poisson(functions=1, rate_rps=5.0, mean_service_s=0.001), cores=2,
                   duration_s=2.0, warmup_s=0.0, calibration={**IDEAL, **RCU},
                   scheduler={"name": "eevdf", "rcu_idle_tick": True})
    engine, machine, _, workload = build(cfg)
    workload.start()
    seen = []
    for ms in range(1, 2000):
        engine.run(ms * 1_000_000)
        seen += [(engine.now, rq.rcu_cb_until, rq.ticking) for rq in machine.rqs
                 if rq.curr is None and rq.nr_running == 0]
    return seen


def test_an_exit_keeps_its_idle_cpus_tick_for_the_grace_period():
    """scheduler.rcu_idle_tick (tick_nohz_next_event()'s rcu_needs_cpu()): an
    idle CPU where a thread exited ticks until that exit's grace-period span
    (4 wake-ups x 8 ms) is over, then stops.  (Off, only a tick armed while
    the CPU was busy still comes: 122 of 217 such samples here.)"""
    seen = _idle_ticks()
    pending = [ticking for now, until, ticking in seen if until > now]
    after = [ticking for now, until, ticking in seen if until and now > until + 4_000_000]
    # 5 exits a second keep an idle CPU ticking about 5 x 32 ms of each second
    assert len(pending) > 200 and all(pending)
    assert len(after) > 1000 and not any(after)


def test_idle_tick_rows_set_the_host_beside_the_rule():
    """The fit report's RCU check: ticks beyond the exit-free point as a
    share of HZ, against min(1, rate x wake-ups per exit x period)."""
    from calibration.bench.rcu import idle_tick_rows
    rows = [{"rep": 0, "rate": float(rate), "exits": 4 * rate, "span_s": 4.0, "gp_cpu_ns": 1,
             "gp_runs": 1, "cpu_ticks": int(4 * (10 + 250 * kept)), "other_frac": 0.0,
             "host_disturbed": False}
            for rate, kept in ((0, 0.0), (5, 0.2), (20, 0.6), (100, 1.0))]
    rows.append({**rows[1], "cpu_ticks": 0, "host_disturbed": True})
    got = idle_tick_rows(pa.Table.from_pylist(rows), RCU, 250)
    assert [r["rate"] for r in got] == [5.0, 20.0, 100.0]
    assert [r["kept_real"] for r in got] == pytest.approx([0.2, 0.6, 1.0])
    assert [r["kept_sim"] for r in got] == pytest.approx([5 * 0.032, 20 * 0.032, 1.0])
    assert idle_tick_rows(pa.Table.from_pylist(rows[1:]), RCU, 250) == []
