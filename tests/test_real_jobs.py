"""workload=noisy_jobs on the real backend (backends/real/jobs.py): the job
shape a MemoryProfile becomes, admission through the gate, per-job perf
counts, and (hardware: root, cgroups, gcc) a least_loaded run on this
machine checked against the simulator's run of the same jobs."""
import dataclasses
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from backends.host import NO_ADMISSION, PendingJob
from backends.real import detect
from backends.real import jobs as J
from backends.real.loadgen import WORKLOAD_TIMER_SLACK_NS, set_timer_slack, timer_slack
from backends.real.perf import PerfUnavailable
from sim.memory.progress import MemoryProfile
from tests.test_rdt_sidecar import emu_bins, emulated, logging_sidecars  # noqa: F401

MIB = 1 << 20


def _spec(cgroup, arrival=0.0, length=0.2, threads=1, priority=False):
    return J.JobSpec(cgroup, arrival, length, threads, priority, tuple(J.CPU_BOUND), 50.0, 1)


def _gate(specs, perf=None, **kw):
    return J.JobGate(specs, "/bin/false", 10.0, time.monotonic_ns, lambda c: [],
                     lambda c: {0}, perf, **kw)


# --- the job shape ------------------------------------------------------------
def _opt(args, name):
    return args[args.index(name) + 1]


def test_a_profile_becomes_the_worker_shape():
    p = MemoryProfile.from_spec({"archetype": "tsearch_2e17"})
    a = J.job_args(p)
    assert int(_opt(a, "--bytes")) == round(6.4 * MIB)
    assert _opt(a, "--pattern") == "random" and _opt(a, "--pages") == "4k"
    assert _opt(a, "--mlp") == "1" and float(_opt(a, "--write-fraction")) == 0.0
    # 1000 / 19.98 = 50 instructions per reference: 20 for the access, the
    # rest in 7-instruction gap iterations
    assert int(_opt(a, "--gap-ops")) == round((1000 / 19.98 - 20) / 7) == 4
    m = J.job_args(MemoryProfile.from_spec({"archetype": "matrix3d_96", "pages": "2m"}))
    assert _opt(m, "--pattern") == "sequential" and _opt(m, "--mlp") == "2"
    assert _opt(m, "--pages") == "thp"          # a 2 MiB profile page needs no hugetlb pool
    assert float(_opt(m, "--write-fraction")) == pytest.approx(0.3333)
    s = J.job_args(MemoryProfile(buffer_mb=8, pattern="stride", stride_bytes=256,
                                 pages="hugetlb-1g", refs_per_kinstr=1000))
    assert _opt(s, "--stride") == "256" and _opt(s, "--pages") == "1g"
    assert _opt(s, "--gap-ops") == "0"          # a reference every instruction: no gap
    assert J.job_args(None) == J.CPU_BOUND


def test_job_seeds_differ_by_job_and_run_seed():
    assert J.job_seed(0, "job-1") != J.job_seed(0, "job-2")
    assert J.job_seed(0, "job-1") != J.job_seed(1, "job-1")
    assert J.job_seed(3, "job-1") == J.job_seed(3, "job-1")


# --- admission ----------------------------------------------------------------
def test_held_jobs_wait_in_fifo_order_and_admission_is_checked():
    gate = _gate([_spec("/j/a", 0.5, priority=True), _spec("/j/b", 0.1, threads=2)])
    a, b = gate.procs
    gate.hold()
    b.send(b"R 0 400000000 2\n")
    a.send(b"R 1 200000000 1\n")
    # arrival order at the gate, not the spec order
    assert gate.pending() == [PendingJob("/j/b", 0.1, 2, False), PendingJob("/j/a", 0.5, 1, True)]
    assert b.proc is None and b.read_lines() == []      # held: nothing runs
    with pytest.raises(J.JobError, match="dispatched twice"):
        b.send(b"R 0 400000000 2\n")
    with pytest.raises(ValueError, match="not waiting for admission"):
        gate.admit("/j/c")


# --- perf ---------------------------------------------------------------------
def _with_perf_lines(proc, text):
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    os.write(fd, text.encode())
    proc._perf_fd = fd


HW_LINES = (
    "     0.100,1000,,instructions,100,100.00,,\n"
    "     0.100,2000,,cycles,100,100.00,,\n"
    "     0.100,500,,cycle_activity.stalls_mem_any,100,100.00,,\n"
    "     0.100,40,,cache-references,100,100.00,,\n"
    "     0.100,10,,cache-misses,100,100.00,,\n"
    "     0.200,3000,,instructions,100,100.00,,\n"
    "     0.200,4000,,cycles,100,100.00,,\n"
    "     0.200,1500,,cycle_activity.stalls_mem_any,100,100.00,,\n"
    "     0.200,60,,cache-references,100,100.00,,\n"
    "     0.200,30,,cache-misses,100,100.00,,\n"
    "     0.300,7,,instr")     # perf is still writing this line


def test_perf_counts_sum_the_intervals_and_give_ipce():
    gate = _gate([_spec("/j/a")], perf="perf")
    gate.events = J.JOB_EVENTS
    gate.unknown = ()
    p = gate.procs[0]
    _with_perf_lines(p, HW_LINES)
    c = gate.perf_counts("/j/a")
    p.kill()
    assert (c.instructions, c.cycles, c.stall_cycles) == (4000, 6000, 2000)
    assert (c.llc_references, c.llc_misses) == (100, 40)
    # the thesis's IPCE: 1 - stalls / cycles, as cycles without stalls
    assert c.alone_cycles / c.cycles == pytest.approx(1 - 2000 / 6000)
    assert p._perf_tail == b"     0.300,7,,instr"     # the partial line waits


def test_perf_counts_name_what_perf_cannot_count():
    gate = _gate([_spec("/j/a")], perf="perf")
    gate.events = ("instructions", "cycles", "task-clock")
    gate.unknown = (J.STALL_EVENT,)
    p = gate.procs[0]
    _with_perf_lines(p, "0.1,<not supported>,,instructions,0,100.00,,\n"
                        "0.1,<not supported>,,cycles,0,100.00,,\n"
                        "0.1,50.1,msec,task-clock,50100000,100.00,0.5,CPUs utilized\n")
    with pytest.raises(PerfUnavailable, match=f"instructions, cycles, {J.STALL_EVENT}"):
        gate.perf_counts("/j/a")
    assert p.perf_totals()["task-clock"] == pytest.approx(50.1)
    p.kill()
    with pytest.raises(PerfUnavailable, match="backend.perf=true"):
        _gate([_spec("/j/a")]).perf_counts("/j/a")
    with pytest.raises(ValueError, match="not a job"):
        gate.perf_counts("/j/zz")


def _interval_lines(t, cycles, stall, refs, misses, cpu_ms):
    return "".join(f"{t},{v},,{e},100,100.00,,\n" for e, v in (
        ("instructions", cycles), ("cycles", cycles), (J.STALL_EVENT, stall),
        ("cache-references", refs), ("cache-misses", misses), ("task-clock", cpu_ms)))


def test_the_summary_columns_come_from_the_jobs_intervals_after_warmup():
    gate = _gate([_spec("/j/p", priority=True), _spec("/j/b")], perf="perf")
    gate.events, gate.unknown = J.JOB_EVENTS, ()
    p, b = gate.procs
    p.started_ns = b.started_ns = 10 * 10**9
    gate.warmup_end_ns = p.started_ns + 150_000_000       # the 0.1 s intervals are warm-up
    _with_perf_lines(p, _interval_lines(0.1, 5000, 4000, 10, 10, 100)
                     + _interval_lines(0.2, 1000, 50, 100, 10, 100)     # IPCE 0.95: above
                     + _interval_lines(0.3, 1000, 200, 100, 30, 100))   # IPCE 0.80: below
    _with_perf_lines(b, _interval_lines(0.1, 9999, 9999, 1, 1, 100)
                     + _interval_lines(0.2, 2000, 1000, 200, 100, 200))
    s = gate.summary()
    for x in (p, b):
        x.kill()
    assert s["ipce_priority"] == pytest.approx(1 - 250 / 2000)
    assert s["ipce_batch"] == pytest.approx(0.5)
    assert s["ipce_global"] == pytest.approx(1 - 1250 / 4000)
    # one job per class: the job mean is the class's IPCE
    assert s["ipce_priority_job_mean"] == pytest.approx(s["ipce_priority"])
    assert s["ipce_batch_job_mean"] == pytest.approx(0.5)
    assert s["time_above_target_frac"] == pytest.approx(0.5)
    assert s["llc_miss_rate"] == pytest.approx(140 / 400)
    assert (s["llc_miss_rate_min"], s["llc_miss_rate_max"]) == pytest.approx((0.2, 0.5))
    # perf_counts still see every interval, warm-up included
    assert gate.perf_counts("/j/p").cycles == 7000
    # where perf could not count, the columns are missing, not zero
    gate2 = _gate([_spec("/j/a", priority=True)], perf="perf")
    a = gate2.procs[0]
    a.started_ns = 1
    _with_perf_lines(a, "0.1,<not supported>,,cycles,0,100.00,,\n"
                        f"0.1,<not supported>,,{J.STALL_EVENT},0,100.00,,\n"
                        "0.1,50.0,msec,task-clock,50000000,100.00,0.5,CPUs utilized\n")
    s2 = gate2.summary()
    a.kill()
    assert all(math.isnan(s2[k]) for k in ("ipce_global", "ipce_priority", "llc_miss_rate",
                                            "ipce_priority_job_mean", "time_above_target_frac"))


def test_a_realhost_without_jobs_refuses_admission_and_perf_counts():
    from backends.real.host import RealHost
    host = RealHost.__new__(RealHost)
    host._jobs = None
    with pytest.raises(ValueError) as e:
        host.hold_jobs()
    assert str(e.value) == NO_ADMISSION
    with pytest.raises(PerfUnavailable, match="noisy_jobs"):
        host.perf_counts("/x")


def test_a_controller_reading_perf_counts_is_refused_where_perf_cannot(monkeypatch):
    from backends.real import run
    cfg = {"controller": {"controller": "dynamic_priority"}}
    b = run.backend_keys({})
    monkeypatch.setattr(detect, "rdt_missing", lambda: None)
    monkeypatch.setattr(detect, "perf_missing", lambda events: f"cannot count {events[0]}")
    with pytest.raises(run.RealRunError, match="reads each job's instructions, cycles, "
                                               "cycle_activity.stalls_mem_any .*cannot count"):
        run.check_controller(cfg, b)
    with pytest.raises(run.RealRunError, match="backend.perf is false"):
        run.check_controller(cfg, dataclasses.replace(b, perf=False))
    monkeypatch.setattr(detect, "perf_missing", lambda events: None)
    run.check_controller(cfg, b)                         # everything there: accepted
    monkeypatch.setattr(detect, "rdt_missing", lambda: "no resctrl mount")
    with pytest.raises(run.RealRunError, match="needs RDT .*no resctrl mount"):
        run.check_controller(cfg, b)
    run.check_controller({"controller": {"controller": "least_loaded"}}, b)


@pytest.mark.hardware
@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf")
def test_perf_accepts_drops_unknown_event_names():
    got = detect.perf_accepts(["task-clock", "no-such-event-xyz", "context-switches"])
    assert got == ["task-clock", "context-switches"]


# --- on this machine ----------------------------------------------------------
JOBS_CSV = """job,arrival_s,length_s,cores,sensitivity,priority
job-1,0.0,0.6,1,high,true
job-2,0.1,0.5,1,moderate,false
job-3,0.2,0.4,2,moderate,false
job-4,0.3,0.3,1,high,false
"""


def _hardware_reason():
    from tests.hardware import cgroups_unavailable
    return cgroups_unavailable() or (None if shutil.which("gcc") else "needs gcc")


@pytest.fixture(scope="module")
def least_loaded_runs(tmp_path_factory):
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    from results.rundir import read_run_dir
    from cli.main import main
    d = tmp_path_factory.mktemp("jobs")
    (d / "jobs.csv").write_text(JOBS_CSV)
    args = ["host=this-vm", f"scheduler={detect.fair_scheduler()}", "workload=noisy_jobs",
            f"workload.trace_file={d / 'jobs.csv'}", "controller=least_loaded",
            "duration_s=4", "warmup_s=0"]
    assert main(["run", "backend=real", "backend.lateness_action=flag", *args,
                 f"output_dir={d / 'real'}"]) == 0
    assert main(["run", *args, f"output_dir={d / 'sim'}"]) == 0
    return {k: read_run_dir(d / k) for k in ("real", "sim")} | {"dir": d}


@pytest.mark.hardware
def test_least_loaded_admits_real_jobs_fifo_as_the_simulator_does(least_loaded_runs):
    real = least_loaded_runs["real"].requests.to_pandas().set_index("function")
    sim = least_loaded_runs["sim"].requests.to_pandas().set_index("function")
    s = least_loaded_runs["real"].summary.to_pylist()[0]
    assert s["least_loaded_admitted"] == len(real) >= 2
    assert s["job_alone_ns_per_access_cpu"] > 0
    if not detect.perf_events()["hardware"]:           # this VM: no IPCE to report
        assert math.isnan(s["ipce_global"]) and math.isnan(s["time_above_target_frac"])
    # no backfilling: the 2-core job waits for both 1-core jobs, job-4 for it
    # (on a slowed host the last ones may not be admitted before the end)
    if "job-3" in real.index:
        assert real.start_s["job-3"] >= max(real.end_s["job-1"], real.end_s["job-2"])
    if "job-4" in real.index:
        assert real.start_s["job-4"] >= real.start_s["job-3"]
    assert s["host_disturbed"] == bool(s["host_disturbed_reason"])
    if s["host_disturbed"]:
        pytest.skip(f"timing comparison not made: {s['host_disturbed_reason']}")
    assert s["least_loaded_admitted"] == 4
    # the same admissions (controller ticks) and run times as the simulator,
    # up to a job's start-up (fork, perf, fault-in) and a busy host's noise
    for job in real.index:
        assert real.start_s[job] == pytest.approx(sim.start_s[job], abs=0.1), job
        assert real.end_s[job] == pytest.approx(sim.end_s[job], abs=0.2), job
    # a job's CPU: its threads' work at the speed measured alone
    length = {"job-1": 0.6, "job-2": 0.5, "job-3": 0.8, "job-4": 0.3}
    for job, cpu in real.cpu_measured_s.items():
        assert cpu == pytest.approx(length[job], rel=0.25), job


@pytest.mark.hardware
def test_the_real_run_writes_the_job_trace_and_per_job_perf_status(least_loaded_runs):
    import pyarrow.parquet as pq
    trace = pq.read_table(least_loaded_runs["dir"] / "real" / "trace.parquet")
    assert trace.column_names == ["job", "arrival_s", "length_s", "cores", "sensitivity",
                                  "priority"]
    s = least_loaded_runs["real"].summary.to_pylist()[0]
    assert s["perf_status"] == ("per job" if shutil.which("perf") else "off")


def _real_jobs_run(tmp_path, rows: str, *args) -> Path:
    """`colosim run backend=real workload=noisy_jobs` on this VM of the jobs
    in ``rows`` (job trace CSV lines); the run directory."""
    from cli.main import main
    (tmp_path / "jobs.csv").write_text(
        "job,arrival_s,length_s,cores,sensitivity,priority\n" + rows)
    out = tmp_path / "run"
    assert main(["run", "backend=real", "backend.lateness_action=flag", "host=this-vm",
                 f"scheduler={detect.fair_scheduler()}", "workload=noisy_jobs",
                 f"workload.trace_file={tmp_path / 'jobs.csv'}", *args,
                 f"output_dir={out}"]) == 0
    return out


@pytest.mark.hardware
def test_jobs_with_memory_profiles_run_their_shapes(tmp_path):
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    from results.rundir import read_run_dir
    run = read_run_dir(_real_jobs_run(
        tmp_path, "job-1,0.0,0.3,1,high,false\njob-2,0.0,0.3,1,moderate,false\n",
        "+workload.memory.high.archetype=tsearch_2e17",
        "+workload.memory.moderate.archetype=7zip_l5", "backend.job_alone_s=0.2",
        "duration_s=2", "warmup_s=0"))
    s = run.summary.to_pylist()[0]
    assert s["job_alone_ns_per_access_high"] > 0 and s["job_alone_ns_per_access_moderate"] > 0
    req = run.requests.to_pandas()
    assert len(req) == 2
    # no controller: both start at arrival; each thread's fixed work takes
    # about its length (two jobs on two CPUs; a shared host only slows it)
    assert (req.start_s < 0.1).all()
    assert (req.latency_s > 0.25).all() and (req.latency_s < 1.5).all()


@pytest.mark.hardware
def test_dynamic_priority_runs_on_real_jobs_against_emulated_rdt_and_perf(
        tmp_path, monkeypatch, emulated):
    """dynamic_priority through every real lever it uses: jobs held and
    admitted with cpusets (real cgroups), a priority job probed on per-job
    perf counts (tests/fake_perf.py: 5% stalls, so the first point, 1 way
    and 10% MB, reaches the 0.9 target), then given an exclusive class after
    the root group gave up its ways (the RDT sidecar on an emulated resctrl,
    tests/test_rdt_sidecar.py), everything restored at the end."""
    import sys

    from backends.real import host as real_host
    from results.rundir import read_run_dir
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    calls = []
    fake = tmp_path / "perf"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'fake_perf.py'} "
                    '"$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(real_host, "RdtSidecar", logging_sidecars(emulated, calls))
    monkeypatch.setattr(detect, "rdt_missing", lambda: None)
    monkeypatch.setattr(detect, "perf_missing", lambda events: None)
    monkeypatch.setattr(J, "job_perf", lambda: str(fake))
    monkeypatch.setattr(J, "perf_accepts", lambda events, perf=None: list(events))
    monkeypatch.setenv("COLOSIM_RDT_STATE", str(tmp_path / "state"))
    out = _real_jobs_run(
        tmp_path, "job-1,0.0,6.0,1,high,true\njob-2,0.0,6.0,1,moderate,false\n",
        "controller=dynamic_priority", "duration_s=7.5", "warmup_s=0")
    s = read_run_dir(out).summary.to_pylist()[0]
    req = read_run_dir(out).requests.to_pandas().set_index("function")
    assert s["dynamic_priority_allocations"] == 1 and s["perf_status"] == "per job"
    # the summary's IPCE from the jobs' (stand-in) counts: 5% stalls everywhere
    for k in ("ipce_global", "ipce_priority", "ipce_batch"):
        assert s[k] == pytest.approx(0.95, abs=1e-3), k
    assert s["time_above_target_frac"] == 1.0
    # both 6 s jobs end within the 7.5 s run unless the host was slowed
    # (measured: host_disturbed) enough to push one past the end
    assert set(req.index) <= {"job-1", "job-2"}
    assert s["host_disturbed"] or len(req) == 2, s["host_disturbed_reason"]
    ops = [op for op, _, _ in calls]
    # the root group shrinks before the class that takes its ways exists
    first_root, first_conf = ops.index("root"), ops.index("configure")
    assert first_root < first_conf
    # the probe's class, then (after the cool-down in system/default) the
    # allocation's: one class at the end
    last = max(i for i, (op, f, _) in enumerate(calls) if op == "configure" and f["classes"])
    final = calls[last][1]["classes"]
    assert len(final) == 1
    cls = next(iter(final.values()))
    mask0 = int(cls["l3"]["0"])
    # the root group as the class was made: disjoint from it, keeping its
    # reserved top ways (min_cbm_bits = 2 of them here)
    root0 = [int(f["l3"]["0"]) for op, f, _ in calls[:last] if op == "root"][-1]
    assert mask0 & root0 == 0 and root0 & 0x600 == 0x600
    assert bin(mask0).count("1") == 2                # the 1-way point, at min_cbm_bits 2
    assert int(cls["mb"]["0"]) == 10
    assigned = [(f["class"], r["tids"]) for op, f, r in calls if op == "assign"]
    assert assigned and all(tids for _, tids in assigned)
    assert assigned[-1][0] == next(iter(final))      # the job's threads are in its class
    assert ops[-1] == "cleanup" and calls[-1][2]["root_restored"] is True


def test_a_workload_started_after_the_load_generator_keeps_the_default_timer_slack():
    """The load generator lowers its thread's timer slack to 1 ns; a child
    inherits its parent's current slack as its default, so without care an
    rt-app or a job started after that would wake ~50 us earlier than it
    does anywhere else (found by the timer wake-up benchmark)."""
    before = timer_slack()
    assert before == WORKLOAD_TIMER_SLACK_NS
    set_timer_slack(1)
    proc = None
    try:
        proc = J.spawn_in_cgroup(["sleep", "30"], [], os.sched_getaffinity(0))
        slack = int(Path(f"/proc/{proc.pid}/timerslack_ns").read_text())
    finally:
        set_timer_slack(before)
        if proc is not None:
            J.stop_session(proc)
    assert slack == WORKLOAD_TIMER_SLACK_NS and slack > 1
