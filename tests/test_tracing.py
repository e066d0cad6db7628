"""trace=sched on the simulator (sim/tracing.py): the recorded schedule
agrees with the machine's own counters and with itself, tracing does not
change the run, and the window and the event cap hold."""
from __future__ import annotations

import numpy as np
import pytest

from results.schema import SCHED
from scenarios.simulate import simulate
from tests.simcfg import DEFAULT_COSTS, make_cfg, periodic, poisson

TRACE = {"name": "sched"}


def _dense(trace=TRACE, **kw):
    """Six SMT cores, 40 poisson functions near saturation, costs on."""
    return make_cfg(poisson(functions=40, rate_rps=25.0, mean_service_s=0.01), host="e5-2430l",
                    duration_s=1.0, warmup_s=0.1, calibration=DEFAULT_COSTS, seed=4,
                    **kw) | {"trace": trace}


def _quota(trace=TRACE):
    return make_cfg(periodic(threads=3, run_ms=4.0, sleep_ms=0.0, quota_us=50_000,
                             period_us=100_000), cores=2, duration_s=1.0,
                    warmup_s=0.1) | {"trace": trace}


@pytest.fixture(scope="module")
def dense():
    from scenarios.simulate import build, attach_tracer
    from sim.engine import s_to_ns
    cfg = _dense()
    engine, machine, recorder, workload = build(cfg)
    tracer = attach_tracer(cfg, machine)
    workload.start()
    engine.run(s_to_ns(cfg["duration_s"]))
    machine.sync()
    return machine, tracer.table().to_pandas()


def test_the_trace_counts_what_the_machine_counts(dense):
    machine, ev = dense
    sw = ev[ev.event == "sched_switch"]
    assert len(sw) > 1000
    assert len(sw) == sum(rq.nr_switches for rq in machine.rqs)
    assert (sw.prev_pid != 0).sum() == machine.nr_switch_outs
    assert (ev.event == "sched_migrate_task").sum() == machine.nr_migrations > 0
    # a switch from idle is recorded after the idle exit, which is not in its cost_ns
    from_idle = ((sw.prev_pid == 0) & (sw.next_pid != 0)).sum()
    assert sw.cost_ns.sum() + from_idle * machine.cost.idle_exit_ns == \
        sum(rq.overhead_ns for rq in machine.rqs)
    assert (sw.cost_ns > 0).all() and ev[ev.event != "sched_switch"].cost_ns.isna().all()


def test_each_cpu_switches_from_the_task_it_last_switched_to(dense):
    _, ev = dense
    sw = ev[ev.event == "sched_switch"]
    for cpu, s in sw.groupby("cpu"):
        prev, nxt = s.prev_pid.to_numpy(), s.next_pid.to_numpy()
        assert prev[0] == 0                    # every CPU starts idle
        assert (prev[1:] == nxt[:-1]).all(), cpu
        assert np.all(np.diff(s.time_ns.to_numpy()) >= 0)
        assert (s.next_comm[s.next_pid == 0] == f"swapper/{cpu}").all()


def test_a_task_runs_only_after_its_wakeup_and_sleeps_before_the_next(dense):
    """Per task: wake-up, switch-in on the wake-up's CPU (unless migrated
    meanwhile), switch-outs preempted (R) until one sleeping (S) or exiting
    (X), then the next wake-up."""
    _, ev = dense
    tasks = ev[ev.event.isin(["sched_wakeup", "sched_wakeup_new"])].next_pid.unique()
    assert len(tasks) > 100
    rows = ev.to_dict("records")
    state: dict[int, str] = {}            # pid -> "sleeping" | "queued" | "running"
    for r in rows:
        if r["event"] in ("sched_wakeup", "sched_wakeup_new"):
            assert state.get(r["next_pid"], "sleeping") == "sleeping", r
            state[r["next_pid"]] = "queued"
        elif r["event"] == "sched_switch":
            if r["prev_pid"]:
                assert state[r["prev_pid"]] == "running", r
                state[r["prev_pid"]] = "queued" if r["prev_state"] == "R" else "sleeping"
            if r["next_pid"]:
                assert state[r["next_pid"]] == "queued", r
                state[r["next_pid"]] = "running"
    assert set(ev[ev.event == "sched_switch"].prev_state.dropna()) <= {"R", "S", "X"}


def test_tracing_does_not_change_the_run():
    off, on = simulate(_dense({"name": "none"})), simulate(_dense())
    drop = ("wall_time_s", "sim_s_per_wall_s", "run_id")
    # repr: NaN (a metric the run does not model) is unequal to itself
    strip = lambda s: {k: repr(v) for k, v in s.to_pylist()[0].items()  # noqa: E731
                       if k not in drop and not k.startswith("sched_trace")}
    assert strip(off.summary) == strip(on.summary)
    assert off.requests.equals(on.requests)
    assert "sched" not in off.extra
    assert on.extra["sched"].schema == SCHED
    assert on.summary.column("sched_trace_events")[0].as_py() == on.extra["sched"].num_rows


def test_throttles_alternate_with_unthrottles_per_cfs_rq():
    r = simulate(_quota())
    ev = r.extra["sched"].to_pandas()
    th = ev[ev.event.isin(["throttle_cfs_rq", "unthrottle_cfs_rq"])]
    assert len(th) >= 10 and th.next_pid.isna().all()
    for (_cpu, _cg), s in th.groupby(["cpu", "next_cgroup"]):
        kinds = s.event.tolist()
        assert kinds[::2] == ["throttle_cfs_rq"] * len(kinds[::2])
        assert kinds[1::2] == ["unthrottle_cfs_rq"] * len(kinds[1::2])


def test_the_window_and_the_cap_bound_the_trace(capsys):
    win = simulate(_dense({"name": "sched", "window_s": [0.2, 0.3]})).extra["sched"]
    t = win.column("time_ns").to_numpy()
    assert t.size > 100 and t.min() >= 0.2e9 and t.max() <= 0.3e9
    r = simulate(_dense({"name": "sched", "max_events": 500}))
    assert r.extra["sched"].num_rows == 500
    assert r.summary.column("sched_trace_truncated")[0].as_py() is True
    assert "trace.max_events=500 reached at t = " in capsys.readouterr().err


def test_bad_trace_keys_are_refused_before_running(tmp_path, capsys):
    from cli.main import main
    for args, key in ((["trace.window_s=[0.5,0.2]"], "trace.window_s"),
                      (["trace.max_events=0"], "trace.max_events"),
                      (["cluster=kubernetes"], "trace.name"),
                      (["trace.thread=a_name_of_16_chr"], "trace.thread = a_name_of_16_chr"),
                      (["trace.thread='a b'"], "trace.thread = a b"),
                      (["trace=none", "trace.thread=accept"],
                       "trace.thread = accept is invalid: is measured from the schedule trace")):
        assert main(["run", "trace=sched", *args, f"output_dir={tmp_path / 'x'}"]) == 2, args
        assert key in capsys.readouterr().err, args
        assert not (tmp_path / "x").exists()


def test_a_switch_from_idle_is_recorded_after_the_idle_exit():
    """The kernel's sched_switch fires once the CPU has left idle: a thread
    woken onto its idle CPU shows the profile's idle_exit_ns as its
    wake-up latency, and the switch's cost_ns without it."""
    from results.sched import analyse
    exit_ns = 50_000
    cfg = make_cfg(periodic(threads=1, run_ms=1.0, sleep_ms=5.0), duration_s=0.2, warmup_s=0,
                   calibration={**DEFAULT_COSTS, "idle_exit_ns": exit_ns}) | {"trace": TRACE}
    sched = simulate(cfg).extra["sched"]
    lat = np.concatenate(list(analyse(sched).wakeup_latencies("task").values()))
    assert lat.size > 20 and np.allclose(lat, exit_ns / 1e9)
    ev = sched.to_pandas()
    from_idle = ev[(ev.event == "sched_switch") & (ev.prev_pid == 0)]
    assert (from_idle.cost_ns > 0).all() and (from_idle.cost_ns < exit_ns).all()


def test_an_idle_exit_grown_with_the_idle_time_is_recorded_whole():
    """With the cold term the idle exit depends on how long the CPU was
    idle (5 ms here, the thread's sleep): the trace still shows all of it
    as the wake-up latency."""
    from results.sched import analyse
    from sim.costmodel import CostModel
    costs = {**DEFAULT_COSTS, "idle_exit_ns": 30_000, "idle_exit_cold_ns": 70_000,
             "idle_exit_decay_ns": 2_000_000}
    cfg = make_cfg(periodic(threads=1, run_ms=1.0, sleep_ms=5.0), duration_s=0.2, warmup_s=0,
                   calibration=costs) | {"trace": TRACE}
    sched = simulate(cfg).extra["sched"]
    lat = np.concatenate(list(analyse(sched).wakeup_latencies("task").values()))
    model = CostModel("x", **{k: v for k, v in costs.items() if k.startswith("idle_exit")})
    # the first wake-up (the fork, at t = 0) finds the CPU idle for no time
    assert lat[0] == pytest.approx(model.idle_exit_ns_at(0) / 1e9)
    # then the CPU went idle after the switch to idle, a few us after each sleep began
    lo, hi = model.idle_exit_ns_at(4_990_000), model.idle_exit_ns_at(5_000_000)
    lat = lat[1:]
    assert lat.size > 20 and ((lat >= lo / 1e9 - 1e-9) & (lat <= hi / 1e9 + 1e-9)).all(), \
        (lat.min(), lat.max(), lo, hi)
