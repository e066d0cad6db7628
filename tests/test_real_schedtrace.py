"""backend=real trace=sched (backends/real/schedtrace.py): tracepoint
records to sched.parquet rows on synthetic events, the clock offset, perf
script parsing, the refusal and trace=optional paths; marked ``hardware``,
two short real runs whose sched.parquet is checked against the run's own
perf counts.  About 15 s."""
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from backends.real import detect, schedtrace
from backends.real.run import RealRunError, run_real
from backends.real.schedtrace import Event, Members, append_row, clock_offset
from cli.main import main
from results.rundir import read_run_dir
from results.schema import SCHED, SCHED_FILE
from scenarios.config import compose
from sim.tracing import SchedRows, TraceConfig
from tests.hardware import cgroups_unavailable


def _rows(**kw):
    return SchedRows(TraceConfig(name="sched", **kw))


class _Members(Members):
    """Members without cgroup files: process 100 is in /f0 from the start."""

    def __init__(self):
        super().__init__(None, [])
        self.tgids = {100: "/f0"}


def test_prev_state_maps_the_kernels_report_bits():
    assert [schedtrace.prev_state(b) for b in (0, 0x100, 0x1, 0x2, 0x80, 0x102, 0x10, 0x20)] \
        == ["R", "R", "S", "S", "S", "S", "X", "X"]
    assert [schedtrace.script_state(t) for t in ("R", "R+", "S", "D", "S|D", "I", "X", "Z")] \
        == ["R", "R", "S", "S", "S", "S", "X", "X"]


def test_events_of_the_runs_tasks_become_rows_and_the_others_do_not():
    m, rows = _Members(), _rows()
    events = [
        # thread 101 of member process 100 leaves for an outside task: kept, its side named
        Event(10, "sched_switch", 0, 100, 101, 555, "bash", 101, "funcworker", "S"),
        # outside to outside: dropped
        Event(20, "sched_switch", 1, 555, 555, 0, "swapper/1", 555, "bash", "S"),
        # 101 creates thread 102, which joins the run (it is in no cgroup file yet)
        Event(30, "sched_wakeup_new", 1, 100, 101, 102, "funcworker"),
        Event(40, "sched_switch", 1, 0, 0, 102, "funcworker", 0, "swapper/1", "R"),
        Event(50, "sched_migrate_task", 0, 7, 7, 102, "funcworker", orig_cpu=1),
        Event(60, "sched_switch", 0, 100, 102, 0, "swapper/0", 102, "funcworker", "X"),
        # a wake-up of an outside task by a member: dropped (it is about the woken task)
        Event(70, "sched_wakeup", 0, 100, 101, 555, "bash"),
    ]
    for e in events:
        sides = m.classify(e)
        if sides is not None:
            append_row(rows, e.time - 5, e, *sides)
    t = rows.table()
    assert t.schema == SCHED
    got = t.to_pylist()
    assert [(r["time_ns"], r["event"]) for r in got] == [
        (5, "sched_switch"), (25, "sched_wakeup_new"), (35, "sched_switch"),
        (45, "sched_migrate_task"), (55, "sched_switch")]
    first = {"cpu": 0, "prev_pid": 101, "prev_comm": "funcworker", "prev_cgroup": "/f0",
             "prev_state": "S", "next_pid": 555, "next_comm": "bash", "next_cgroup": None,
             "cost_ns": None}
    assert {k: got[0][k] for k in first} == first
    assert (got[1]["next_pid"], got[1]["next_cgroup"], got[1]["prev_pid"]) == (102, "/f0", None)
    assert (got[2]["prev_pid"], got[2]["prev_cgroup"], got[2]["next_cgroup"]) == (0, None, "/f0")
    assert (got[3]["cpu"], got[3]["orig_cpu"], got[3]["next_cgroup"]) == (0, 1, "/f0")
    assert got[4]["prev_state"] == "X"


def test_window_and_max_events_apply_as_in_the_simulator(capsys):
    m, rows = _Members(), _rows(max_events=2, window_s=[1e-6, 1.0])
    for t in (500, 2000, 3000, 4000):
        e = Event(t, "sched_switch", 0, 100, 101, 0, "swapper/0", 101, "w", "S")
        append_row(rows, t, e, *m.classify(e))
    assert rows.table().column("time_ns").to_pylist() == [2000, 3000]
    assert rows.truncated and "trace.max_events=2 reached" in capsys.readouterr().err


def test_clock_offset_is_bounded_by_the_thread_starts():
    rng = np.random.default_rng(3)
    offset = 7_654_321
    marks, births, t = [], [], 1_000_000_000
    for _ in range(schedtrace.MARK_THREADS):
        t1 = t
        w = t1 + int(rng.integers(2_000, 20_000))          # in clone(), before it returns
        t2 = w + int(rng.integers(2_000, 20_000))
        marks.append((t1, t2))
        births.append(w + offset)
        t = t2 + 200_000
    got, err = clock_offset(marks, births[::-1])            # in any order
    assert abs(got - offset) <= err and err < 20_000
    with pytest.raises(ValueError, match="7 sched_wakeup_new records .* 8 threads"):
        clock_offset(marks, births[1:])
    with pytest.raises(ValueError, match="empty"):
        clock_offset(marks, [births[0] + 1_000_000] + births[1:])


def test_the_clock_marks_are_thread_starts_inside_their_brackets():
    marks = schedtrace.thread_marks(3)
    assert len(marks) == 3 and all(0 < t2 - t1 < 50_000_000 for t1, t2 in marks)


def test_perf_script_lines_parse_to_events():
    p = schedtrace.parse_script_line
    e = p("20823/20824 [000] 11916.088176193:       sched:sched_switch: prev_comm=mem worker "
          "prev_pid=20824 prev_prio=120 prev_state=R+ ==> next_comm=perf-exec next_pid=20838 "
          "next_prio=120")
    assert (e.time, e.event, e.cpu, e.tgid, e.tid, e.a_pid, e.a_comm, e.state, e.b_pid,
            e.b_comm) == (11916088176193, "sched_switch", 0, 20823, 20824, 20824, "mem worker",
                          "R", 20838, "perf-exec")
    e = p("   18/18    [001] 11916.078938833:       sched:sched_wakeup: comm=perf pid=20837 "
          "prio=120 target_cpu=000")
    assert (e.event, e.cpu, e.b_pid, e.b_comm) == ("sched_wakeup", 0, 20837, "perf")
    e = p("   18/18    [000] 11916.078924572: sched:sched_migrate_task: comm=perf pid=20837 "
          "prio=120 orig_cpu=0 dest_cpu=1")
    assert (e.event, e.cpu, e.orig_cpu) == ("sched_migrate_task", 1, 0)
    # an exited thread's last switch: perf script prints its tid as -1
    e = p("12170/-1    [000] 12811.982249275:     sched:sched_switch: prev_comm=python "
          "prev_pid=12174 prev_prio=120 prev_state=X ==> next_comm=python next_pid=12170 "
          "next_prio=120")
    assert (e.tgid, e.tid, e.a_pid, e.state) == (12170, -1, 12174, "X")
    assert p("perf 1/1 [000] 12.000000001: PERF_RECORD_LOST lost 17") == 17
    assert p("'trace' not valid for software events. Ignoring.") is None


# --- refusals ------------------------------------------------------------

@pytest.fixture
def cannot_trace(monkeypatch):
    monkeypatch.setattr(schedtrace, "tracing_missing",
                        lambda: "root (running as uid 1000; system-wide tracepoints need root "
                                "or kernel.perf_event_paranoid = -1, it is 2)")


def test_trace_sched_is_refused_and_optional_runs_without(cannot_trace, capsys):
    with pytest.raises(schedtrace.TraceRefused, match=r"missing root \(running as uid 1000"):
        schedtrace.plan(TraceConfig(name="sched"))
    p = schedtrace.plan(TraceConfig(name="optional"))
    assert p.method is None and p.status.startswith("off: missing root")
    assert "trace=optional: no sched.parquet (missing root" in capsys.readouterr().err
    assert schedtrace.plan(TraceConfig(name="none")) is None


def test_without_the_binding_perf_record_is_used_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(schedtrace, "tracing_missing", lambda: None)
    monkeypatch.setattr(schedtrace, "perf_binary", lambda: "/usr/bin/perf")
    p = schedtrace.plan(TraceConfig(name="sched"), binding_missing="module perf does not import")
    assert p.method == "perf record"
    assert p.status == "perf record (python-perf missing: module perf does not import)"
    assert "recording with perf record instead" in capsys.readouterr().err

    def no_perf():
        raise schedtrace.PerfUnavailable("perf is not installed")
    monkeypatch.setattr(schedtrace, "perf_binary", no_perf)
    with pytest.raises(schedtrace.TraceRefused, match="binding .* or the perf tool"):
        schedtrace.plan(TraceConfig(name="sched"), binding_missing="module perf does not import")


def test_a_real_run_is_refused_before_anything_is_created(cannot_trace, monkeypatch):
    made = []
    monkeypatch.setattr("backends.real.run.CgroupFS", lambda *a, **k: made.append(a))
    cfg = compose(["backend=real", "host=this-vm", f"scheduler={detect.fair_scheduler()}",
                   "workload.functions=1", "duration_s=1", "warmup_s=0", "trace=sched"])
    with pytest.raises(RealRunError, match="trace=sched cannot record the schedule on this "
                                           "host: missing root"):
        run_real(cfg)
    assert made == []


# --- on this machine -------------------------------------------------------

REASON = (cgroups_unavailable() or schedtrace.tracing_missing()
          or (None if shutil.which("gcc") else "needs gcc to build the native worker")
          or (None if shutil.which("perf") or schedtrace.BINDING_MISSING is None
              else "needs perf's Python binding (make perf-binding) or perf"))
WARMUP_S, DURATION_S = 0.5, 2.0
# perf's time zero is known to its first line's poll (0.5 ms) plus its
# write; the trace's times to the clock offset's uncertainty (~10 us)
EDGE_NS = 2_000_000


def detect_cpus(s):
    return [c for part in s["real_cpus"].split(",")
            for c in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]


def _traced_run(out, seed):
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={detect.fair_scheduler()}",
                 "workload.functions=2", f"duration_s={DURATION_S}", f"warmup_s={WARMUP_S}",
                 f"seed={seed}", "backend.lateness_action=flag", "trace=sched",
                 f"output_dir={out}"]) == 0
    return out


@pytest.fixture(scope="module")
def traced_runs(tmp_path_factory):
    """Two runs through perf's binding (if it imports here), one through
    perf record with the binding hidden (the fallback)."""
    if REASON:
        pytest.skip(REASON)
    outs = [_traced_run(tmp_path_factory.mktemp("sched") / f"st-{os.getpid()}-{i}", i)
            for i in range(2)]
    if schedtrace.BINDING_MISSING is None and shutil.which("perf"):
        mp = pytest.MonkeyPatch()
        mp.setattr(schedtrace, "BINDING_MISSING", "hidden by the test")
        try:
            outs.append(_traced_run(tmp_path_factory.mktemp("sched") / f"st-{os.getpid()}-fb", 2))
        finally:
            mp.undo()
    return outs


@pytest.mark.hardware
def test_sched_parquet_holds_the_runs_tasks(traced_runs):
    for out in traced_runs:
        table = pq.read_table(out / SCHED_FILE)
        assert table.schema == SCHED
        s = read_run_dir(out).summary.to_pylist()[0]
        assert s["sched_trace_events"] == table.num_rows > 100
        assert s["sched_trace_truncated"] is False and s["sched_trace_lost"] == 0
        assert s["sched_trace_status"] in ("python-perf", "perf record (python-perf missing: "
                                           "hidden by the test)") \
            or s["sched_trace_status"].startswith("perf record (python-perf missing: module")
        cpus = dict(map(int, kv.split(":")) for kv in s["sched_trace_cpu_records"].split())
        assert set(cpus) == set(detect_cpus(s)) and sum(cpus.values()) >= table.num_rows
        if s["sched_trace_status"] == "python-perf":
            assert 0 <= s["sched_trace_clock_err_us"] < 1000
        t = table.to_pandas()
        ours = {"/faas.slice/func-0", "/faas.slice/func-1"}
        sw = t[t.event == "sched_switch"]
        assert (sw.prev_cgroup.isin(ours) | sw.next_cgroup.isin(ours)).all()
        named = set(t.prev_cgroup.dropna()) | set(t.next_cgroup.dropna())
        assert named == ours
        assert t.time_ns.is_monotonic_increasing and t.time_ns.iloc[0] >= 0
        assert t.time_ns.iloc[-1] <= DURATION_S * 1e9 + 50e6
        assert t.cost_ns.isna().all() and set(sw.prev_state) <= {"R", "S", "X"}


@pytest.mark.hardware
def test_switch_outs_agree_with_perf_over_the_same_window(traced_runs):
    """perf stat -G counts a run cgroup's context switches when its task
    leaves the CPU: the trace's switch-outs of the run's tasks over the very
    perf intervals the summary counts (perf_window_start_s .. _end_s) are
    the same events.  They may differ only by switch-outs within the
    window edges' uncertainty (EDGE_NS either side of each edge)."""
    for out in traced_runs:
        s = read_run_dir(out).summary.to_pylist()[0]
        if not s["perf_status"].startswith("ok"):
            pytest.skip(f"the run did not count here: {s['perf_status']}")
        t = pq.read_table(out / SCHED_FILE).to_pandas()
        ns = t[(t.event == "sched_switch") & t.prev_cgroup.notna()].time_ns
        a, z = s["perf_window_start_s"] * 1e9, s["perf_window_end_s"] * 1e9
        assert WARMUP_S * 1e9 - 0.1e9 < a and z < DURATION_S * 1e9 + 0.1e9
        traced = ((ns >= a) & (ns < z)).sum()
        edges = sum(((ns >= e - EDGE_NS) & (ns < e + EDGE_NS)).sum() for e in (a, z))
        assert abs(traced - s["ctx_switches"]) <= edges, \
            (out.name, traced, s["ctx_switches"], edges, s["host_disturbed_reason"])


@pytest.mark.hardware
def test_wakeups_precede_the_switch_ins_they_cause(traced_runs):
    """A recorded wake-up of a sleeping run task comes before its next
    switch-in, never after it (the clock offset and the merge of the CPUs'
    rings keep cause before effect).  A switch-in after a sleep may have no
    recorded wake-up at all: this VM does not deliver records raised in the
    idle task's context (docs/real-backend.md), so those are counted, not
    failed."""
    checked = unwoken = 0
    for out in traced_runs:
        t = pq.read_table(out / SCHED_FILE).to_pandas()
        asleep, woken, running = {}, {}, set()
        for r in t.itertuples():
            if r.event == "sched_switch":
                if isinstance(r.prev_cgroup, str):
                    running.discard(int(r.prev_pid))
                    if r.prev_state == "S":
                        asleep[int(r.prev_pid)] = r.time_ns
                if isinstance(r.next_cgroup, str):
                    pid = int(r.next_pid)
                    running.add(pid)
                    if pid in woken:
                        assert woken.pop(pid) <= r.time_ns
                        checked += 1
                    elif asleep.pop(pid, None) is not None:
                        unwoken += 1
            elif r.event in ("sched_wakeup", "sched_wakeup_new"):
                pid = int(r.next_pid)
                # a wake-up recorded while its task is on a CPU came after the switch-in
                assert pid not in running or pid not in asleep, (pid, r.time_ns)
                if asleep.pop(pid, None) is not None:
                    woken[pid] = r.time_ns
    print(f"{checked} wake-ups before their switch-ins, {unwoken} switch-ins after a sleep "
          "without a recorded wake-up")
    assert checked > 20


@pytest.mark.hardware
def test_the_webservers_accept_thread_is_measured_on_both_backends(tmp_path):
    """workload=webserver on the real host (funcworker --accept) and in the
    simulator, trace.thread=accept: both name the thread alike, and the
    thread wakes about as often (once per connection it waits for, once
    per batch window; the same arrivals on both sides; the real thread
    also wakes when it waited for the backlog's lock: 124 against 106 in
    the first run here).  Counts, not latencies, so a busy host cannot
    fail it."""
    if REASON:
        pytest.skip(REASON)
    keys = ["host=this-vm", f"scheduler={detect.fair_scheduler()}", "workload=webserver",
            "workload.rate_rps=20", "workload.mean_service_s=0.01", "workload.workers=2",
            "duration_s=3", "warmup_s=0.5", "seed=4", "trace=sched", "trace.thread=accept"]
    real, sim = tmp_path / f"web-{os.getpid()}", tmp_path / "web-sim"
    assert main(["run", "backend=real", *keys, "backend.lateness_action=flag",
                 f"output_dir={real}"]) == 0
    assert main(["run", *keys, f"output_dir={sim}"]) == 0
    r, s = (read_run_dir(d).summary.to_pylist()[0] for d in (real, sim))
    comms = set(pq.read_table(real / "sched_metrics.parquet").column("comm").to_pylist())
    assert {"accept", "worker-0", "worker-1"} <= comms
    assert r["thread_comm"] == s["thread_comm"] == "accept"
    assert r["thread_tasks"] == s["thread_tasks"] == 1
    arrivals = r["n_requests"] + r["n_unfinished"]
    assert arrivals > 20 and s["thread_wakeups"] > 20
    assert 0.5 * s["thread_wakeups"] <= r["thread_wakeups"] <= 2 * s["thread_wakeups"]
    assert r["thread_migrations"] <= r["migrations"]
