"""rt-app's JSON, parsed (sim/workloads/rtapp_config.py): every supported key,
rt-app's defaults and orderings, and the refusals."""
import json

import pytest

from sim.workloads.rtapp_config import (Event, Phase, RtAppError, Sched, load, loads,
                                        loop_positions)


def _one(task: dict, **global_):
    doc = {"tasks": {"t": task}}
    if global_:
        doc["global"] = global_
    return loads(json.dumps(doc))


def test_defaults_of_a_task_without_phases():
    """No global: duration -1, calibration CPU0, SCHED_OTHER; a task without
    phases and without loop runs its one phase (loop 1) forever."""
    c = _one({"run": 1000, "sleep": 2000})
    assert (c.duration_s, c.calibration, c.default_policy, c.cumulative_slack) == \
        (-1, "CPU0", "SCHED_OTHER", False)
    assert c.ns_per_loop is None
    (t,) = c.tasks
    assert (t.name, t.instance, t.loop, t.delay_us, t.cpus, t.taskgroup) == \
        ("t", 1, -1, 0, None, None)
    assert t.sched == Sched("SCHED_OTHER", 0)
    assert t.phases == (Phase("", 1, (Event("run", "run", 1000), Event("sleep", "sleep", 2000))),)


def test_task_loop_without_phases_is_the_phase_loop_run_once():
    """parse_task_data: "loop" in a task without phases loops its phase, and
    the thread runs that phase once."""
    t = _one({"loop": 3, "run": 10}).tasks[0]
    assert (t.loop, t.phases[0].loop) == (1, 3)
    assert list(loop_positions(t)) == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]


def test_phases_loop_in_turn_and_the_task_loops_them():
    t = _one({"loop": 2, "phases": {"a": {"loop": 2, "run": 1}, "b": {"sleep": 1}}}).tasks[0]
    assert [p.name for p in t.phases] == ["a", "b"]
    assert [p.loop for p in t.phases] == [2, 1]
    assert list(loop_positions(t)) == [(0, 0, 0), (0, 0, 1), (0, 1, 0),
                                       (1, 0, 0), (1, 0, 1), (1, 1, 0)]


def test_task_with_phases_loops_forever_by_default():
    t = _one({"phases": {"a": {"run": 1}}}).tasks[0]
    assert t.loop == -1
    positions = loop_positions(t)
    assert [next(positions) for _ in range(3)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_events_follow_key_order_and_are_recognised_by_prefix():
    """A key is the event it starts with, as rt-app matches them:
    runtime before run, numeric suffixes for repeats."""
    c = loads('{"tasks": {"t": {"sleep1": 5, "run0": 1, "runtime2": 7, "run3": 2,'
              ' "timer9": {"ref": "a", "period": 100}}}}')
    events = c.tasks[0].phases[0].events
    assert [(e.kind, e.key, e.duration_us) for e in events] == [
        ("sleep", "sleep1", 5), ("run", "run0", 1), ("runtime", "runtime2", 7),
        ("run", "run3", 2), ("timer", "timer9", 100)]
    assert c.tasks[0].phases[0].c_duration_us == 10
    assert c.tasks[0].phases[0].c_period_us == 100


def test_timer_defaults_and_modes():
    """ref "unknown", period 0, relative; the mode belongs to the timer, so
    one absolute use makes every use of that ref absolute; a "unique" ref
    is per task."""
    c = loads(json.dumps({"tasks": {
        "a": {"timer": {}, "timer1": {"ref": "shared", "period": 10},
              "timer2": {"ref": "unique", "period": 10, "mode": "absolute"}},
        "b": {"timer": {"ref": "shared", "period": 20, "mode": "absolute"},
              "timer1": {"ref": "unique", "period": 10}}}}))
    a, b = (t.phases[0].events for t in c.tasks)
    assert (a[0].ref, a[0].duration_us, a[0].relative) == ("unknown", 0, True)
    assert a[1].relative is False and b[0].relative is False      # shared "shared"
    assert a[2].unique and a[2].relative is False
    assert b[1].unique and b[1].relative is True                  # b's own unique timer


def test_instances_are_named_by_their_global_index():
    """rt-app names a thread <task>-<ind>, ind counting every task's
    instances in file order (thread_data_set_unique_name)."""
    c = loads('{"tasks": {"a": {"instance": 2, "run": 1}, "b": {"run": 1},'
              ' "z": {"instance": 0, "run": 1}, "c": {"instance": 3, "run": 1}}}')
    assert [(th.name, th.index, th.task.name) for th in c.threads()] == [
        ("a-0", 0, "a"), ("a-1", 1, "a"), ("b-2", 2, "b"),
        ("c-3", 3, "c"), ("c-4", 4, "c"), ("c-5", 5, "c")]


def test_policies_priorities_cpus_taskgroups_and_delay():
    c = loads(json.dumps({
        "global": {"default_policy": "SCHED_RR", "duration": 5, "calibration": 150,
                   "cumulative_slack": True, "logdir": "/tmp", "log_basename": "x",
                   "log_size": "file", "ftrace": "none", "gnuplot": False,
                   "lock_pages": False, "pi_enabled": False},
        "tasks": {
            "rr": {"run": 1},                                   # default policy, prio 10
            "fifo": {"policy": "SCHED_FIFO", "priority": 50, "cpus": [3, 1, 1], "run": 1},
            "fair": {"policy": "SCHED_OTHER", "priority": -5, "taskgroup": "/g/h",
                     "delay": 2000, "run": 1},
        }}))
    assert (c.duration_s, c.calibration, c.ns_per_loop, c.cumulative_slack) == (5, 150, 150, True)
    rr, fifo, fair = c.tasks
    assert rr.sched == Sched("SCHED_RR", 10) and rr.sched.rt
    assert fifo.sched == Sched("SCHED_FIFO", 50) and fifo.cpus == (1, 3)
    assert fair.sched == Sched("SCHED_OTHER", -5) and not fair.sched.rt
    assert (fair.taskgroup, fair.delay_us) == ("/g/h", 2000)


def test_phase_sched_resolves_as_rt_app_does():
    """A phase's priority alone keeps the policy in force; a policy alone
    takes its default priority; neither: unchanged (None)."""
    t = _one({"policy": "SCHED_RR", "priority": 20, "phases": {
        "keep": {"run": 1},
        "prio": {"priority": 30, "run": 1},
        "fair": {"policy": "SCHED_OTHER", "run": 1},
        "nice": {"priority": 5, "run": 1},
        "cpus": {"cpus": [0], "taskgroup": "/g", "run": 1}}}).tasks[0]
    assert [p.sched for p in t.phases] == [
        None, Sched("SCHED_RR", 30), Sched("SCHED_OTHER", 0), Sched("SCHED_OTHER", 5), None]
    assert (t.phases[4].cpus, t.phases[4].taskgroup) == ((0,), "/g")


def test_comments_and_trailing_commas_of_json_c(tmp_path):
    """rt-app's own examples carry C comments and trailing commas."""
    f = tmp_path / "x.json"
    f.write_text('{ /* a "quoted" comment */ "tasks": {"t": {"run": 1, // line\n'
                 '"sleep": 2, }, },\n "global": {"logdir": "//not/a/comment",}}')
    c = load(f)
    assert [e.key for e in c.tasks[0].phases[0].events] == ["run", "sleep"]


@pytest.mark.parametrize("doc, path, words", [
    ({"tasks": {"t1": {"phases": {"p1": {"run": 1, "barrier": "b"}}}}},
     "tasks.t1.phases.p1.barrier", ["not supported", "loop", "runtime"]),
    ({"tasks": {"t1": {"run": 1, "nodes_membind": [0]}}},
     "tasks.t1.nodes_membind", ["unknown or unsupported key", "instance", "taskgroup"]),
    ({"tasks": {"t": {"run": 1}}, "global": {"frag": 1}}, "global.frag", ["duration"]),
    ({"tasks": {"t": {"run": 1}}, "resources": {}}, "resources", ["tasks, global"]),
    ({"tasks": {"t": {"phases": {"p": {"run": 1}}, "sleep": 3}}}, "tasks.t.sleep",
     ["phases"]),
    ({"tasks": {"t": {"timer": {"ref": "a", "period": 1, "x": 1}}}}, "tasks.t.timer.x",
     ["ref, period, mode"]),
    ({"tasks": {"t": {"run": 1, "policy": "SCHED_DEADLINE"}}}, "tasks.t.policy",
     ["not modelled"]),
    ({"tasks": {"t": {"run": 1, "policy": "SCHED_RR", "priority": 0}}}, "tasks.t.priority",
     ["[1, 99]"]),
    ({"tasks": {"t": {"run": 1, "priority": 20}}}, "tasks.t.priority", ["[-20, 19]"]),
    ({"tasks": {"t": {"run": 1.5}}}, "tasks.t.run", ["integer"]),
    ({"tasks": {"t": {"run": -1}}}, "tasks.t.run", ["integer >= 0"]),
    ({"tasks": {"t": {"phases": {"p": {"loop": 0, "run": 1}}}}}, "tasks.t.phases.p.loop",
     ["overflows"]),
    ({"tasks": {"t": {"phases": {"p": {"cpus": [0]}}}}}, "tasks.t.phases.p", ["no events"]),
    ({"tasks": {"t": {"run": 1, "cpus": []}}}, "tasks.t.cpus", ["CPU numbers"]),
    ({"tasks": {"t": {"run": 1, "taskgroup": "g"}}}, "tasks.t.taskgroup", ['"/"']),
    ({"tasks": {"t": {"run": 1, "policy": "SCHED_RR", "taskgroup": "/g"}}}, "tasks.t",
     ["SCHED_OTHER"]),
    ({"tasks": {"t": {"taskgroup": "/g", "phases": {"a": {"run": 1},
                                                    "b": {"policy": "SCHED_FIFO", "run": 1}}}}},
     "tasks.t.phases.b", ["SCHED_FIFO"]),
    ({"tasks": {"t": {"run": 1}}, "global": {"calibration": "cpu0"}}, "global.calibration",
     ["CPU<n>"]),
    ({"tasks": {}}, "tasks", ["at least one task"]),
])
def test_refusals_name_the_key_path(doc, path, words):
    with pytest.raises(RtAppError) as err:
        loads(json.dumps(doc))
    assert err.value.path == path
    assert str(err.value).startswith(path + ": ")
    for word in words:
        assert word in str(err.value)


def test_malformed_json_and_duplicate_keys_are_one_line_errors():
    with pytest.raises(RtAppError) as err:
        loads('{"tasks": {"t": {"run": 1 "sleep": 2}}}', "x.json")
    assert str(err.value).startswith("x.json: malformed JSON at line 1 column 27")
    assert "\n" not in str(err.value)
    with pytest.raises(RtAppError, match="duplicate key 'run'"):
        loads('{"tasks": {"t": {"run": 1, "run": 2}}}')


def test_missing_file():
    with pytest.raises(RtAppError, match="cannot read"):
        load("/nonexistent/x.json")
