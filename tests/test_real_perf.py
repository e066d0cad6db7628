"""perf stat CSV parsing (pure, on recorded lines) and, marked hardware, a
real per-cgroup count on this machine."""
import math
import os
import subprocess
import sys
import time

import pytest

from backends.real.perf import (PerfStat, PerfUnavailable, parse_perf_csv, parse_perf_line,
                                perf_binary, perf_command, to_table, totals)

# perf 6.1 on this machine: perf stat -x, -I 500 -a -e ... -G colosim-probe,...
RECORDED = """\
# started on Sat Nov 21 12:20:01 2026

     0.500555590,127,,context-switches,colosim-probe,301251334,100.00,421.584,/sec
     0.500555590,301.24,msec,task-clock,colosim-probe,301251334,100.00,0.602,CPUs utilized
     0.500555590,<not supported>,,instructions,colosim-probe,0,100.00,,
     0.500555590,<not supported>,,cycles,colosim-probe,0,100.00,,
     0.500555590,<not counted>,,cpu-migrations,colosim-idle,0,100.00,,
     1.012568706,33,,context-switches,colosim-probe,393772838,100.00,83.805,/sec
     1.012568706,393.77,msec,task-clock,colosim-probe,393772838,100.00,0.788,CPUs utilized
     1.012568706,<not supported>,,instructions,colosim-probe,0,100.00,,
     1.012568706,2,,cpu-migrations,colosim-idle,1000,100.00,0.5,/sec
"""


def test_parse_recorded_interval_lines():
    s = parse_perf_csv(RECORDED)
    assert len(s) == 9
    first = s[0]
    assert (first.time_s, first.value, first.event, first.cgroup) == (
        0.50055559, 127.0, "context-switches", "colosim-probe")
    assert first.run_ns == 301251334 and first.enabled_pct == 100.0
    tc = s[1]
    assert tc.unit == "msec" and tc.value == pytest.approx(301.24)
    ns = [x for x in s if x.event == "instructions"]
    assert all(x.value is None and x.status == "not supported" for x in ns)
    nc = s[4]
    assert nc.value is None and nc.status == "not counted"   # missing, never zero


def test_totals_and_table_keep_missing_missing():
    s = parse_perf_csv(RECORDED)
    t = totals(s)
    assert t[("colosim-probe", "context-switches")] == 160
    assert t[("colosim-probe", "task-clock")] == pytest.approx(695.01)
    assert t[("colosim-probe", "instructions")] is None
    assert t[("colosim-probe", "cycles")] is None
    assert t[("colosim-idle", "cpu-migrations")] == 2   # one interval counted
    tab = to_table(s)
    vals = tab.column("value").to_pylist()
    assert math.isnan(vals[2]) and vals[0] == 127.0
    assert 0.0 not in vals


def test_cgroup_map_renames():
    s = parse_perf_csv(RECORDED, cgroup_map={"colosim-probe": "/faas.slice/func-1"})
    assert s[0].cgroup == "/faas.slice/func-1" and s[4].cgroup == "colosim-idle"


def test_parse_odd_lines():
    # non-interval, no cgroup (perf stat -x, -e ... -- cmd)
    x = parse_perf_line("211,,context-switches,1020156573,100.00,206.832,/sec",
                        interval=False, has_cgroup=False)
    assert (x.time_s, x.value, x.event, x.cgroup) == (None, 211.0, "context-switches", None)
    # a PMU term list with commas inside the event name
    y = parse_perf_line("     1.0,12345,,cpu/event=0x3c,umask=0x0/,colosim-a/f,1000,50.00,,",)
    assert y.event == "cpu/event=0x3c,umask=0x0/" and y.cgroup == "colosim-a/f"
    assert y.value == 12345 and y.enabled_pct == 50.0
    # short rows, warnings, comments, blanks: skipped
    for junk in ("", "# time counts unit events", "Error: no such cgroup",
                 "     1.0,5", "   2.0,abc,,cycles,g,0,0,,", "not,a,number,row,x"):
        assert parse_perf_line(junk) is None
    # perf's lines without run/pct fields still parse
    z = parse_perf_line("3.0,<not counted>,,cycles,g")
    assert z.value is None and z.run_ns is None


def test_command_pairs_each_event_with_each_cgroup():
    cmd = perf_command(["g1", "g2"], ("a", "b"), 250, "/tmp/o.csv", "perf")
    assert cmd[:6] == ["perf", "stat", "-x,", "-I", "250", "-a"]
    assert cmd[cmd.index("-e") + 1] == "a,b,a,b"
    assert cmd[cmd.index("-G") + 1] == "g1,g1,g2,g2"
    assert cmd[-2:] == ["-o", "/tmp/o.csv"]
    with pytest.raises(ValueError, match="at least 10 ms"):
        perf_command(["g"], interval_ms=5)


def _hardware_reason():
    if os.geteuid() != 0:
        return f"needs root for cgroups and system-wide perf (uid {os.geteuid()})"
    try:
        perf_binary()
    except PerfUnavailable as e:
        return str(e)
    from backends.real import cgroupfs
    try:
        cgroupfs.preflight(cgroupfs.detect_layout(), ("cpu", "cpuacct", "cpuset"))
    except (cgroupfs.CgroupError, OSError) as e:
        return str(e)
    if "perf_event" not in cgroupfs.detect_layout().by_controller:
        return "no perf_event cgroup hierarchy (v1 perf_event mount or cgroup2)"
    return None


@pytest.mark.hardware
def test_perf_counts_a_busy_cgroup():
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    from backends.real.cgroupfs import CgroupFS
    cg = CgroupFS(f"test-{os.getpid()}-perf")
    p = None
    try:
        cg.create("/busy")
        cg.create("/idle")
        p = subprocess.Popen([sys.executable, "-c", "import sys, time\nsys.stdin.readline()\n"
                              "end = time.monotonic() + 5\nwhile time.monotonic() < end: pass"],
                             stdin=subprocess.PIPE, text=True)
        cg.attach("/busy", p.pid)
        p.stdin.write("go\n")
        p.stdin.flush()
        ps = PerfStat({cg.perf_name("/busy"): "/busy", cg.perf_name("/idle"): "/idle"},
                      interval_ms=200)
        ps.start()
        time.sleep(1.2)
        samples = ps.stop()
    finally:
        if p:
            p.kill()
            p.wait()
        cg.remove()
    t = totals(samples)
    assert {s.cgroup for s in samples} == {"/busy", "/idle"}
    assert t[("/busy", "task-clock")] > 300          # msec of CPU in ~1.2 s
    assert t[("/busy", "context-switches")] is not None
    assert t[("/busy", "cpu-migrations")] is not None
    for ev in ("instructions", "cycles"):            # None where the PMU lacks them
        assert t[("/busy", ev)] is None or t[("/busy", ev)] > 0
    for ev in ("stalled-cycles-frontend", "stalled-cycles-backend"):   # a spin may not stall
        assert t[("/busy", ev)] is None or t[("/busy", ev)] >= 0
    assert t[("/idle", "task-clock")] is None or t[("/idle", "task-clock")] < 5
