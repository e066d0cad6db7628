"""backend=real workload=rtapp (backends/real/rtapp.py): the JSON rt-app 1.0
runs, its logs read on fixtures captured from Debian's rt-app 1.0 here
(tests/data/rtapp-1.0/: ``source.json`` rewritten to ``taskset.json``,
which rt-app 1.0 ran to write the logs), the refusals; and, marked
``hardware``, rt-app itself on both backends (about 30 s: rt-app's
calibration takes 5 s)."""
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from backends.real import cgroupfs
from backends.real.rtapp import (LOG_BASENAME, PLACEMENT_US, ZERO_TASK, calibrate,
                                 check_runnable, find_threads, log_path, log_table, parse_log, rtapp_json,
                                 zero_us)
from cli.main import main
from sim.workloads.rtapp_config import RtAppError, load, loads
from tests.hardware import cgroups_unavailable

DATA = Path(__file__).resolve().parent / "data"
FIXTURE = DATA / "rtapp-1.0"
COMPARE = DATA / "rtapp_compare.json"
FIXTURE_DELAY_US = 20_000       # the placement delay the fixture ran with


# --- the JSON 1.0 runs ------------------------------------------------------

def test_find_threads_skips_a_thread_that_exits_during_the_scan(monkeypatch):
    """A thread gone between listing /proc/PID/task and reading its comm
    raises ESRCH (ProcessLookupError), not ENOENT: it is skipped, the named
    threads still found."""
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="named-one")
    t.start()
    try:
        Path(f"/proc/self/task/{t.native_id}/comm").write_text("named-one")
        real = Path.read_text

        def vanishing(self, *a, **k):
            if self.name == "comm" and self.parent.name == str(os.getpid()):
                raise ProcessLookupError(3, "No such process")
            return real(self, *a, **k)
        monkeypatch.setattr(Path, "read_text", vanishing)
        assert find_threads(os.getpid(), {"named-one": 1}) == {t.native_id: "named-one"}
    finally:
        stop.set()
        t.join()


def test_rewrite_is_the_json_rt_app_1_0_ran():
    doc = rtapp_json(load(FIXTURE / "source.json"), Path("LOGDIR"), 20, FIXTURE_DELAY_US)
    assert doc == json.loads((FIXTURE / "taskset.json").read_text())


def test_rewrite_spells_out_what_1_0_lacks():
    cfg = loads(json.dumps({
        "tasks": {"a": {"taskgroup": "/g", "cpus": [1], "delay": 5, "priority": -3,
                        "loop": 4, "run": 100, "timer": {"ref": "t", "period": 1000,
                                                         "mode": "absolute"}},
                  "b": {"instance": 0, "run": 1},
                  "c": {"policy": "SCHED_FIFO", "phases": {
                      "x": {"loop": 2, "cpus": [0], "sleep": 10, "runtime": 20},
                      "y": {"run0": 5, "timer": {"ref": "t", "period": 10}}}}},
        "global": {"duration": 3, "calibration": "CPU1", "log_size": "file",
                   "cumulative_slack": True}}))
    doc = rtapp_json(cfg, Path("/logs"), 17, 1000)
    g = doc["global"]
    # no duration (SIGTERM from the backend), no log_size (1.0 reads "file" as off)
    assert g == {"calibration": 17, "default_policy": "SCHED_OTHER", "cumulative_slack": True,
                 "logdir": "/logs", "log_basename": LOG_BASENAME, "gnuplot": False,
                 "ftrace": False}
    assert list(doc["tasks"]) == ["a", "c", ZERO_TASK]        # b has no thread
    a = doc["tasks"]["a"]
    # no taskgroup; the one phase spelled out with the task's loop, or 1.0
    # would loop it forever; the placement delay added
    assert a == {"instance": 1, "loop": 1, "delay": 1005, "policy": "SCHED_OTHER",
                 "priority": -3, "cpus": [1],
                 "phases": {"p0": {"loop": 4, "run": 100,
                                   "timer": {"ref": "t", "period": 1000, "mode": "absolute"}}}}
    c = doc["tasks"]["c"]
    assert (c["policy"], c["priority"], c["loop"], c["delay"]) == ("SCHED_FIFO", 10, -1, 1000)
    assert list(c["phases"]["x"]) == ["loop", "cpus", "sleep", "runtime"]
    # the timer is absolute for every user: the mode is the timer's, not the event's
    assert c["phases"]["y"] == {"loop": 1, "run0": 5,
                                "timer": {"ref": "t", "period": 10, "mode": "absolute"}}
    z = doc["tasks"][ZERO_TASK]
    assert "delay" not in z and z["phases"]["zero"]["timer"]["period"] == 0


# --- rt-app 1.0's logs ----------------------------------------------------

def test_log_lines_parse_and_other_formats_are_refused():
    rows = parse_log((FIXTURE / "rtapp-per-0.log").read_text())
    assert len(rows) == 10
    assert rows[0] == (0, 50000, 1393, 9867, 13731844076, 13731853943, 20548, 8376, 1000,
                       10000, 97)
    with pytest.raises(ValueError, match="columns"):
        parse_log("#idx perf run period start end rel_st slack c_duration c_period\n")
    with pytest.raises(ValueError, match="not an rt-app 1.0 log line"):
        parse_log("   0 1 2 3 4 5 6 7 8 9\n")


def test_time_zero_from_the_zero_task():
    # its timer of period 0 expired at t_zero: slack before the loop's start
    text = log_path(FIXTURE, ZERO_TASK, 3).read_text()
    assert zero_us(text) == 13731824111 - 265
    with pytest.raises(ValueError, match="no loop"):
        zero_us(text.split("\n   3")[0])


def test_logs_become_the_rtapp_table_numbered_as_the_simulator_numbers_loops():
    cfg = load(FIXTURE / "source.json")
    t0 = zero_us(log_path(FIXTURE, ZERO_TASK, 3).read_text()) + FIXTURE_DELAY_US
    rows = log_table(cfg, FIXTURE, t0).to_pylist()
    per0 = [r for r in rows if r["task"] == "per-0"]
    # loop 2 of phases light x3, heavy x2: every loop ran, in this order
    assert [(r["thread_loop"], r["phase"], r["phase_loop"]) for r in per0] == \
        [(t, 0, i) for i in range(3) for t in [0]] + [(0, 1, 0), (0, 1, 1)] + \
        [(1, 0, 0), (1, 0, 1), (1, 0, 2), (1, 1, 0), (1, 1, 1)]
    assert [r["c_duration_us"] for r in per0] == [1000] * 3 + [3000] * 2 + [1000] * 3 + [3000] * 2
    first = per0[0]
    assert (first["perf"], first["run_us"], first["slack_us"], first["wu_lat_us"]) == \
        (50, 1393, 8376, 97)      # perf in thousands of loops (1.0 logs 50000 loops)
    # times since t0: the first loop started once the delay was over
    assert first["start_us"] == 13731844076 - t0 == first["rel_st_us"]
    assert 0 < first["start_us"] < 1000
    assert first["end_us"] - first["start_us"] == first["period_us"]
    hog = [r for r in rows if r["task"] == "hog-2"]
    assert [(r["idx"], r["thread_loop"], r["phase_loop"]) for r in hog] == \
        [(2, 0, i) for i in range(4)]
    assert {r["cgroup"] for r in rows} == {"/"} and len(rows) == 10 + 10 + 4


def test_a_log_with_more_loops_than_the_task_runs_is_refused(tmp_path):
    for f in FIXTURE.glob("*.log"):
        shutil.copy(f, tmp_path)
    extra = log_path(tmp_path, "hog", 2)
    extra.write_text(extra.read_text() + extra.read_text().splitlines()[-1] + "\n")
    with pytest.raises(ValueError, match="more loops than hog runs"):
        log_table(load(FIXTURE / "source.json"), tmp_path, 0)


# --- refusals -------------------------------------------------------------

@pytest.mark.parametrize("task,path,words", [
    ({"phases": {"a": {"run": 1}, "b": {"policy": "SCHED_RR", "run": 1}}},
     "tasks.t.phases.b", "sets a thread's policy and priority once"),
    ({"phases": {"a": {"run": 1}, "b": {"priority": 3, "run": 1}}},
     "tasks.t.phases.b", "once"),
    ({"taskgroup": "/a", "phases": {"a": {"taskgroup": "/b", "run": 1}}},
     "tasks.t.phases.a.taskgroup", "once, before it starts"),
    ({"cpus": [7], "run": 1}, "tasks.t.cpus", "not the run's"),
    ({"phases": {"a": {"cpus": [0, 5], "run": 1}}}, "tasks.t.phases.a.cpus", "[5]"),
])
def test_what_1_0_cannot_run_is_refused_with_its_path(task, path, words):
    cfg = loads(json.dumps({"tasks": {"t": task}}))
    with pytest.raises(RtAppError) as e:
        check_runnable(cfg, {0, 1}, {0, 1})
    assert e.value.path == path and words in str(e.value)


def test_threads_placed_by_name_need_a_name_rt_app_can_give():
    ok = {"taskgroup": "/g", "run": 1}
    check_runnable(loads(json.dumps({"tasks": {"x" * 15: ok, "y" * 16: {"run": 1}}})),
                   {0}, {0})
    for name in ("y" * 16, "rt-app"):
        with pytest.raises(RtAppError, match="at most 15 characters"):
            check_runnable(loads(json.dumps({"tasks": {name: ok}})), {0}, {0})
    with pytest.raises(RtAppError, match="time zero"):
        check_runnable(loads(json.dumps({"tasks": {ZERO_TASK: {"run": 1}}})), {0}, {0})
    with pytest.raises(RtAppError, match="CPU3"):
        check_runnable(loads('{"tasks": {"t": {"run": 1}}, "global": {"calibration": "CPU3"}}'),
                       {0}, {0, 1})


def test_a_host_without_rt_app_is_refused_before_anything_is_created(monkeypatch, capsys,
                                                                     tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))       # no rt-app there
    before = set(cgroupfs.find_leftovers()) if os.geteuid() == 0 else set()
    out = tmp_path / "run"
    assert main(["run", "backend=real", "workload=rtapp", f"workload.file={COMPARE}",
                 "scheduler=eevdf", "host=this-vm", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "rt-app binary, which is not installed" in err and "apt-get install -y rt-app" in err
    assert not out.exists()
    if os.geteuid() == 0:
        assert set(cgroupfs.find_leftovers()) == before


# --- rt-app itself (hardware) --------------------------------------------

REASON = cgroups_unavailable() or (
    None if shutil.which("rt-app") else "needs rt-app (as root: apt-get install -y rt-app)")
REPEATS = 3


@pytest.mark.parametrize("log_size,logged", [(None, True), ('"file"', False)])
@pytest.mark.hardware
@pytest.mark.skipif(shutil.which("rt-app") is None, reason="needs rt-app")
def test_rt_app_1_0_logs_only_without_log_size(tmp_path, log_size, logged):
    """Why the backend leaves log_size out: 1.0 reads "file" as "disable"."""
    g = {"calibration": 20, "logdir": str(tmp_path), "log_basename": "x"}
    if log_size:
        g["log_size"] = json.loads(log_size)
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"global": g, "tasks": {"t": {"loop": 1, "phases": {
        "p": {"loop": 3, "run": 100, "sleep": 100}}}}}))
    subprocess.run(["rt-app", str(f)], check=True, capture_output=True, timeout=30)
    assert len(parse_log((tmp_path / "x-t-0.log").read_text())) == (3 if logged else 0)


def _snapshot(stop: threading.Event, seen: dict) -> None:
    """While the run lasts: each rt-app thread's name, cgroup (cpu
    hierarchy, below the run's top), policy, RT priority, nice and CPUs, as
    /proc and the kernel tell, counted per thread over the snapshots (a
    snapshot at a thread's start or end can catch it before rt-app set its
    policy or after it reset it)."""
    while not stop.is_set():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/comm").read_text() != "rt-app\n":
                    continue
                for tid in os.listdir(f"/proc/{pid}/task"):
                    t, task = int(tid), f"/proc/{pid}/task/{tid}"
                    cpu = [ln.split(":", 2)[2] for ln in
                           Path(task, "cgroup").read_text().splitlines()
                           if "cpu" in ln.split(":")[1].split(",")][0]
                    state = (Path(task, "comm").read_text().strip(),
                             "/" + "/".join(cpu.split("/")[2:]), os.sched_getscheduler(t),
                             os.sched_getparam(t).sched_priority,
                             os.getpriority(os.PRIO_PROCESS, t),
                             frozenset(os.sched_getaffinity(t)))
                    seen.setdefault(t, Counter())[state] += 1
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        time.sleep(0.05)


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """rtapp_compare.json with rt-app's own ns per loop, REPEATS times on
    this host (the second watched through /proc, one more with
    trace=sched) and once in the simulator."""
    if REASON:
        pytest.skip(REASON)
    d = tmp_path_factory.mktemp("rtapp")
    ns = calibrate(shutil.which("rt-app"), 0)
    doc = json.loads(COMPARE.read_text())
    doc["global"]["calibration"] = ns     # the same work on both backends
    f = d / "compare.json"
    f.write_text(json.dumps(doc))
    base = ["run", "workload=rtapp", f"workload.file={f}", "duration_s=1.5", "warmup_s=0",
            "host=this-vm", "scheduler=eevdf"]
    runs, seen = [], {}
    for i in range(REPEATS):
        stop = threading.Event()
        watcher = threading.Thread(target=_snapshot, args=(stop, seen), daemon=True)
        if i == 1:
            watcher.start()
        try:
            assert main(base + ["backend=real", f"output_dir={d / f'real{i}'}"]) == 0
        finally:
            stop.set()
        runs.append(d / f"real{i}")
    assert main(base + ["backend=real", "trace=sched", f"output_dir={d / 'traced'}"]) == 0
    assert main(base + [f"output_dir={d / 'sim'}"]) == 0
    return {"real": runs, "sim": d / "sim", "traced": d / "traced", "seen": seen, "ns": ns}


def _rtapp(run):
    return pq.read_table(Path(run) / "rtapp.parquet").to_pandas()


@pytest.mark.hardware
def test_same_threads_and_loops_on_both_backends_each_in_its_cgroup(compared):
    sim = _rtapp(compared["sim"]).groupby(["task", "cgroup", "phase"]).size()
    for run in compared["real"]:
        real = _rtapp(run).groupby(["task", "cgroup", "phase"]).size()
        assert real.to_dict() == sim.to_dict()
        s = pq.read_table(run / "summary.parquet").to_pylist()[0]
        assert s["rtapp_ns_per_loop"] == compared["ns"] and s["n_requests"] == 0
        assert pq.read_table(run / "requests.parquet").num_rows == 0


@pytest.mark.hardware
def test_threads_run_in_their_cgroups_with_their_policies_and_cpus(compared):
    seen = {}
    for states in compared["seen"].values():
        # each thread as most snapshots saw it: mid-run
        comm, *state = states.most_common(1)[0][0]
        seen.setdefault(comm, set()).add(tuple(state))
    run_cpus = frozenset(os.sched_getaffinity(0))
    # the file's tasks as rt-app 1.0 and the placement left them mid-run:
    # (cgroup, policy, RT priority, nice, CPUs)
    assert seen["grp"] == {("/rtapp/g", os.SCHED_OTHER, 0, 0, frozenset({1}))}
    assert seen["niced"] == {("/", os.SCHED_OTHER, 0, 5, frozenset({1}))}
    assert seen["rr"] == {("/", os.SCHED_RR, 20, 0, frozenset({0}))}
    assert seen["fifo"] == {("/", os.SCHED_FIFO, 10, 0, frozenset({1}))}
    assert seen["periodic"] == {("/", os.SCHED_OTHER, 0, 0, run_cpus)}


@pytest.mark.hardware
def test_trace_sched_records_the_rt_app_threads_in_their_cgroups(compared):
    t = pq.read_table(compared["traced"] / "sched.parquet").to_pandas()
    ran = t[(t.event == "sched_switch") & (t.time_ns >= 0)]
    where = ran.groupby("next_comm").next_cgroup.agg(set).to_dict()
    assert where["grp"] == {"/rtapp/g"}
    for comm in ("periodic", "niced", "rr", "fifo"):
        assert where[comm] == {"/"}
    # a thread blocks at least once per loop that slept on its timer
    # (slack > 0); it may block more (rt-app writing its log, ending), so
    # only the floor is checked (this VM delivers no sched_wakeup from the
    # idle task's context, so switches are what to count:
    # docs/real-backend.md)
    loops = _rtapp(compared["traced"])
    instances = {"periodic": 1, "grp": 2, "niced": 1, "rr": 1, "fifo": 1}
    for comm, n in instances.items():
        blocked = ran[(ran.prev_comm == comm) & (ran.prev_state == "S")]
        slept = (loops[loops.task.str.rsplit("-", n=1).str[0] == comm].slack_us > 0).sum()
        assert slept <= len(blocked), comm
