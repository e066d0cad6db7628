"""workload=rtapp (sim/workloads/rtapp.py) against theory, with ideal
(zero) switch costs on one CPU unless said otherwise."""
import json
from pathlib import Path

import pytest

from cli.main import main
from results.schema import RTAPP, check_table
from scenarios.simulate import simulate
from sim.rq import nice_to_weight
from tests.simcfg import DEFAULT_COSTS, make_cfg

LIBRARY = sorted(Path(__file__).resolve().parent.parent.glob("scenarios/rtapp/*.json"))


def _run(tmp_path, doc, duration_s=1.0, **kw):
    f = tmp_path / "rtapp.json"
    f.write_text(json.dumps(doc))
    res = simulate(make_cfg({"name": "rtapp", "file": str(f)}, duration_s=duration_s,
                            warmup_s=0.0, **kw))
    table = res.extra["rtapp"]
    check_table("rtapp", table)
    return table.to_pylist()


def _of(rows, task):
    return [r for r in rows if r["task"] == task]


def test_periodic_task_alone_slack_is_period_minus_run(tmp_path):
    rows = _run(tmp_path, {"tasks": {"t": {"run": 3000,
                                           "timer": {"ref": "unique", "period": 10000}}}})
    assert len(rows) == 99              # the 100th loop ends at 1 s, when the run stops
    for k, r in enumerate(rows):
        assert (r["task"], r["cgroup"], r["idx"]) == ("t-0", "/", 0)
        # no phases, no loop: the thread loops its one phase (loop 1) forever
        assert (r["thread_loop"], r["phase"], r["phase_loop"]) == (k, 0, 0)
        assert (r["run_us"], r["period_us"], r["slack_us"], r["wu_lat_us"]) == (3000, 10000,
                                                                                 7000, 0)
        assert (r["start_us"], r["end_us"], r["rel_st_us"]) == (10000 * k, 10000 * (k + 1),
                                                                10000 * k)
        assert (r["c_duration_us"], r["c_period_us"], r["perf"]) == (3000, 10000, None)


def test_switch_costs_show_in_wake_up_latency(tmp_path):
    rows = _run(tmp_path, {"tasks": {"t": {"run": 3000,
                                           "timer": {"ref": "unique", "period": 10000}}}},
                calibration=DEFAULT_COSTS)
    assert all(0 < r["wu_lat_us"] < 100 for r in rows[1:])
    assert all(r["slack_us"] + r["run_us"] <= 10000 for r in rows)


def _loops(rows, task):
    return len(_of(rows, task))


def test_two_equal_nice_hogs_share_the_cpu_evenly(tmp_path):
    rows = _run(tmp_path, {"tasks": {"a": {"run": 1000}, "b": {"run": 1000}}}, duration_s=2.0)
    a, b = _loops(rows, "a-0"), _loops(rows, "b-1")
    assert a + b == pytest.approx(2000, abs=2)
    assert a == pytest.approx(b, rel=0.01)
    # each run took twice its CPU time in wall time, on average
    assert sum(r["run_us"] for r in _of(rows, "a-0")) / a == pytest.approx(2000, rel=0.02)


def test_nice_splits_the_cpu_by_weight(tmp_path):
    rows = _run(tmp_path, {"tasks": {"hi": {"priority": 0, "run": 1000},
                                     "lo": {"priority": 5, "run": 1000}}}, duration_s=3.0)
    ratio = _loops(rows, "hi-0") / _loops(rows, "lo-1")
    assert ratio == pytest.approx(nice_to_weight(0) / nice_to_weight(5), rel=0.02)


def test_taskgroups_share_by_group_then_by_thread(tmp_path):
    """Two taskgroups of equal cpu.weight: the lone thread gets half the CPU
    and each of the four others an eighth."""
    rows = _run(tmp_path, {"tasks": {
        "alone": {"taskgroup": "/a", "run": 1000},
        "crowd": {"instance": 4, "taskgroup": "/b", "run": 1000}}}, duration_s=3.0)
    assert {r["cgroup"] for r in _of(rows, "alone-0")} == {"/a"}
    assert {r["cgroup"] for r in _of(rows, "crowd-3")} == {"/b"}
    total = len(rows)
    assert _loops(rows, "alone-0") / total == pytest.approx(0.5, abs=0.01)
    for i in range(1, 5):
        assert _loops(rows, f"crowd-{i}") / total == pytest.approx(0.125, abs=0.01)


def test_rr_task_is_not_delayed_by_fair_hogs(tmp_path):
    rows = _run(tmp_path, {"tasks": {
        "fair": {"instance": 2, "run": 5000},
        "rr": {"policy": "SCHED_RR", "priority": 50, "run": 1000,
               "timer": {"ref": "unique", "period": 10000}}}})
    rr = _of(rows, "rr-2")
    assert len(rr) == 99
    assert all((r["wu_lat_us"], r["slack_us"], r["run_us"]) == (0, 9000, 1000) for r in rr)
    # the fair hogs got the rest: 90% of the CPU
    fair_cpu = 5000 * (_loops(rows, "fair-0") + _loops(rows, "fair-1"))
    assert fair_cpu == pytest.approx(0.9e6, abs=10000)


def test_fifo_runs_until_it_blocks_and_rr_rotates(tmp_path):
    """Two CPU hogs at one RT priority: SCHED_FIFO's first never lets the
    other run; SCHED_RR's share the CPU quantum by quantum."""
    def hogs(policy):
        return {"tasks": {"a": {"policy": policy, "run": 1000},
                          "b": {"policy": policy, "run": 1000}}}
    fifo = _run(tmp_path, hogs("SCHED_FIFO"), duration_s=0.5)
    assert (_loops(fifo, "a-0") > 0) != (_loops(fifo, "b-1") > 0)
    rr = _run(tmp_path, hogs("SCHED_RR"), duration_s=0.5)
    assert _loops(rr, "a-0") == pytest.approx(_loops(rr, "b-1"), abs=100)


def test_runtime_is_wall_time_and_run_is_work(tmp_path):
    """Alone, ``runtime`` lasts its length in 32 us slices of work, as
    rt-app's loop.  Next to an equal hog it still ends once its length has
    passed (after the slice in progress, which may wait for the CPU),
    while ``run`` needs its whole work done, waiting for the CPU."""
    alone = _run(tmp_path, {"tasks": {"w": {"runtime": 5000, "sleep": 5000}}})
    # 157 slices of 32 us: the first clock read at or past 5000 us
    assert {r["run_us"] for r in alone} == {5024}

    def beside_hog(event):
        rows = _run(tmp_path, {"tasks": {"hog": {"run": 1000}, "w": {event: 20000}}})
        return [r["run_us"] for r in _of(rows, "w-1")]
    runtime, run = beside_hog("runtime"), beside_hog("run")
    # at most one hog slice (CFS's, a few ms) past its length
    assert all(20000 <= us < 26000 for us in runtime)
    assert sum(run) / len(run) == pytest.approx(40000, rel=0.05)


def test_calibration_counts_loops(tmp_path):
    """300 ns per loop: run 1000 us is floor(1e6 / 300) loops, perf is
    1000 // 300, and the work is those loops' time."""
    rows = _run(tmp_path, {"global": {"calibration": 300},
                           "tasks": {"t": {"run": 1000, "timer": {"ref": "x", "period": 2000}}}})
    assert {(r["perf"], r["run_us"], r["slack_us"]) for r in rows} == {(3, 1000, 1000)}


@pytest.mark.parametrize("mode, slacks", [
    ("relative", [-5000, -5000, -5000]),   # restarts from now when late
    ("absolute", [-5000, -10000, -15000]),  # the grid falls behind
])
def test_late_timer_modes(tmp_path, mode, slacks):
    rows = _run(tmp_path, {"tasks": {"t": {"run": 15000, "timer": {
        "ref": "unique", "period": 10000, "mode": mode}}}}, duration_s=0.1)
    assert [r["slack_us"] for r in rows[:3]] == slacks
    assert all((r["period_us"], r["wu_lat_us"]) == (15000, 0) for r in rows)


def test_shared_timer_advances_for_each_user(tmp_path):
    """Two tasks on one timer: each use adds a period, so each task runs
    every other period."""
    rows = _run(tmp_path, {"tasks": {
        "a": {"run": 1000, "timer": {"ref": "tick", "period": 10000}},
        "b": {"run": 1000, "timer": {"ref": "tick", "period": 10000}}}}, duration_s=0.2)
    for task in ("a-0", "b-1"):
        assert {r["period_us"] for r in _of(rows, task)[1:]} == {20000}


def test_delay_phases_and_affinity(tmp_path):
    rows = _run(tmp_path, {"tasks": {"t": {"delay": 5000, "loop": 1, "phases": {
        "one": {"loop": 2, "run": 1000, "cpus": [1]},
        "two": {"run": 2000, "sleep": 1000}}}}}, cores=2)
    assert [(r["phase"], r["phase_loop"], r["rel_st_us"], r["run_us"]) for r in rows] == [
        (0, 0, 5000, 1000), (0, 1, 6000, 1000), (1, 0, 7000, 2000)]


def test_global_duration_stops_the_threads(tmp_path):
    rows = _run(tmp_path, {"global": {"duration": 1},
                           "tasks": {"t": {"run": 1000, "sleep": 8999}}}, duration_s=2.0)
    # 100 loops end by 999.9 ms; the 101st is still running at 1 s: not logged
    assert len(rows) == 100 and max(r["end_us"] for r in rows) <= 1_000_000


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_every_shipped_description_runs(path):
    res = simulate(make_cfg({"name": "rtapp", "file": str(path)}, host="e5-2430l",
                            duration_s=0.3, warmup_s=0.0))
    table = res.extra["rtapp"]
    check_table("rtapp", table)
    assert table.schema.names == RTAPP.names and table.num_rows > 0
    assert res.requests.num_rows == 0


def test_library_has_the_promised_scenarios():
    assert {p.stem for p in LIBRARY} >= {"periodic", "mixed_nice", "cgroup_weighted",
                                         "rr_fair", "fork_heavy", "overloaded"}


@pytest.mark.parametrize("doc, message", [
    ('{"tasks": {"t1": {"phases": {"p1": {"run": 1, "barrier": "x"}}}}}',
     "workload.file = {f} is invalid: tasks.t1.phases.p1.barrier: the rt-app event"),
    ('{"tasks": {"t1": {"run": 1,}', "workload.file = {f} is invalid: {f}: malformed JSON"),
    ('{"tasks": {"t1": {"run": 1, "cpus": [64]}}}',
     "workload.file = {f} is invalid: tasks.t1.cpus: CPUs must be in 0..11"),
    ('{"tasks": {"t1": {"phases": {"a": {"run": 1}, "b": {"priority": 3, "run": 1}}}}}',
     "the simulator fixes a task's nice"),
])
def test_cli_refuses_before_running(tmp_path, capsys, monkeypatch, doc, message):
    f = tmp_path / "bad.json"
    f.write_text(doc)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    assert main(["run", "workload=rtapp", f"workload.file={f}", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert message.format(f=f) in err
    assert err.count("\n") == 1
    assert not out.exists()
