"""The real backend on this machine's kernel (root, cgroup cpu/cpuacct/cpuset).

Marked ``hardware``; each test skips with the reason when not root or when a
controller is missing.  CPU-share checks pin their hogs to one CPU with a
cpuset and compare ratios, which hold under other load on the machine."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backends.real import cgroupfs
from backends.real.cgroupfs import CgroupError, CgroupFS, PathGuardError
from backends.real.host import RealHost
from tests.hardware import alive, cgroups_unavailable, default_sigint

pytestmark = pytest.mark.hardware
ROOT = str(Path(__file__).resolve().parents[1])
RUN_PREFIX = f"test-{os.getpid()}"


REASON = cgroups_unavailable()
if REASON:
    pytestmark = [pytest.mark.hardware, pytest.mark.skip(reason=REASON)]

_n = 0


@pytest.fixture
def cg():
    global _n
    _n += 1
    c = CgroupFS(f"{RUN_PREFIX}-{_n}")
    yield c
    c.remove()


def hog(seconds: float = 8.0) -> subprocess.Popen:
    """A time-bounded busy loop that starts spinning when told (after it has
    been moved into its cgroup)."""
    code = ("import sys, time\nsys.stdin.readline()\n"
            f"end = time.monotonic() + {seconds}\n"
            "while time.monotonic() < end: pass\n")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True)


def go(*procs):
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def stop(*procs):
    for p in procs:
        p.kill()
        p.wait()


def pick_cpu() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1])


def test_quota_caps_usage(cg):
    f = "/faas.slice/func-1"
    host = RealHost(cg, [f])
    cg.set_cpuset("", pick_cpu())
    # The quota caps usage from above; the top weight makes the hog reach the
    # cap even when other work on the machine competes for that CPU.
    cg.set_weight("", 10000)
    host.set_cpu_max(f, 20_000, 100_000)
    assert cg.cpu_max(f) == (20_000, 100_000, 0)
    p = hog()
    try:
        cg.attach(f, p.pid)
        assert cg.pids(f) == [p.pid]
        go(p)
        time.sleep(0.3)
        u0, s0, t0 = host.cpu_usage_ns(f), host.cpu_stat(f), host.now_ns()
        time.sleep(3.0)
        u1, s1, t1 = host.cpu_usage_ns(f), host.cpu_stat(f), host.now_ns()
    finally:
        stop(p)
    cpu = (u1 - u0) / (t1 - t0)
    periods = s1.nr_periods - s0.nr_periods
    throttled = s1.nr_throttled - s0.nr_throttled
    assert cpu == pytest.approx(0.2, rel=0.05), f"usage {cpu:.3f} CPU"
    assert periods >= 25
    assert throttled >= 0.9 * periods, (throttled, periods)
    assert s1.throttled_usec > s0.throttled_usec
    # the parents' hierarchical usage includes the leaf's
    assert cg.usage_ns("/faas.slice") >= u1
    row, = host.snapshot()
    assert row["cgroup"] == f and row["usage_ns"] >= u1 and row["quota_us"] == 20_000
    host.push_completed(f, 0.5, 1.0)
    done = host.completed()
    assert list(done.cgroup) == [f] and list(done.latency_s) == [0.5]
    assert len(host.completed().cgroup) == 0


def test_same_run_name_twice_is_refused(cg):
    cg.create("/a")
    with pytest.raises(CgroupError, match="already exist.*colosim cleanup --run"):
        CgroupFS(cg.name.removeprefix("colosim-"), cleanup_on_exit=False)


def test_weights_share_one_cpu(cg):
    cpu = pick_cpu()
    cg.create("/a")
    cg.create("/b")
    cg.set_cpuset("", cpu)
    for c in ("/a", "/b"):
        cg.set_cpuset(c, cpu)
    cg.set_weight("/a", 200)
    cg.set_weight("/b", 100)
    assert (cg.dir("cpu", "/a") / "cpu.shares").read_text().strip() == "2048"
    pa, pb = hog(), hog()
    try:
        cg.attach("/a", pa.pid)
        cg.attach("/b", pb.pid)
        go(pa, pb)
        time.sleep(0.3)
        a0, b0 = cg.usage_ns("/a"), cg.usage_ns("/b")
        time.sleep(3.0)
        a1, b1 = cg.usage_ns("/a"), cg.usage_ns("/b")
    finally:
        stop(pa, pb)
    ratio = (a1 - a0) / (b1 - b0)
    assert ratio == pytest.approx(2.0, rel=0.05), f"usage ratio {ratio:.3f}"


def test_rt_policy_on_cgroup_threads(cg):
    f = "/faas.slice/func-1"
    host = RealHost(cg, [f])
    p = subprocess.Popen(["sleep", "5"])
    try:
        cg.attach(f, p.pid)
        host.set_rt_policy(f, "rr", 10)
        assert os.sched_getscheduler(p.pid) == os.SCHED_RR
        assert os.sched_getparam(p.pid).sched_priority == 10
        host.set_rt_policy(f, "normal")
        assert os.sched_getscheduler(p.pid) == os.SCHED_OTHER
    finally:
        stop(p)


def test_cpuset_moves_live_threads_and_cores_cover_the_run(cg):
    """RealHost.set_cpuset on the kernel: a live process's affinity follows
    its cgroup's cpuset at once, and None gives every CPU of the run back;
    cores_by_socket lists each of the run's CPUs exactly once."""
    f = "/faas.slice/func-1"
    host = RealHost(cg, [f])
    cpus = sorted(host.run_cpus())
    p = subprocess.Popen(["sleep", "5"])
    try:
        cg.attach(f, p.pid)
        host.set_cpuset(f, {cpus[-1]})
        assert os.sched_getaffinity(p.pid) == {cpus[-1]}
        host.set_cpuset(f, None)
        assert os.sched_getaffinity(p.pid) == set(cpus)
    finally:
        stop(p)
    seen = [c for cores in host.cores_by_socket().values() for core in cores for c in core]
    assert sorted(seen) == cpus


def test_remove_kills_tasks_and_removes_every_hierarchy(cg):
    cg.create("/x/y")
    p = hog()
    cg.attach("/x/y", p.pid)
    dirs = [m.path / cg.name for m in cg.hierarchies]
    assert all(d.is_dir() for d in dirs)
    removed, killed = cg.remove()
    assert killed == [p.pid]
    assert p.wait(timeout=5) == -signal.SIGKILL
    assert not any(d.exists() for d in dirs)
    assert len(removed) == 3 * len(dirs)


def test_guard_refuses_writes_outside_prefix(cg):
    cg.create("/a")
    cpu_root = cg.controllers["cpu"].path
    before = (cpu_root / "cpu.shares").read_text()
    with pytest.raises(PathGuardError, match="refusing to write"):
        cg._write(cpu_root / "cpu.shares", "2")
    with pytest.raises(PathGuardError):
        cg._write(cg.dir("cpu", "/a") / ".." / ".." / "cpu.shares", "2")
    assert (cpu_root / "cpu.shares").read_text() == before


CHILD = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {root!r})
    from backends.real.cgroupfs import CgroupFS
    cg = CgroupFS({run!r})
    cg.create("/f")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    cg.attach("/f", p.pid)
    print(p.pid, flush=True)
    time.sleep(30)
""")


def _child(run: str):
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=ROOT, run=run)],
                            stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    worker = int(proc.stdout.readline())
    return proc, worker


def _mine(run: str):
    return [p for p in cgroupfs.find_leftovers() if p.name == f"colosim-{run}"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_cleans_up(sig):
    run = f"{RUN_PREFIX}-sig{int(sig)}"
    proc, worker = _child(run)
    assert _mine(run)
    proc.send_signal(sig)
    # what is tested is the clean-up, not its speed: a loaded 2-CPU host
    # took over 10 s to run the child's handler once
    proc.wait(timeout=60)
    assert _mine(run) == []
    time.sleep(0.1)
    assert not alive(worker)


def test_sigkill_then_colosim_cleanup():
    run = f"{RUN_PREFIX}-kill"
    proc, worker = _child(run)
    proc.kill()
    proc.wait()
    # another run, live: a bare cleanup keeps it (it could be another user's)
    other, other_worker = _child(f"{RUN_PREFIX}-live")
    try:
        r = subprocess.run([sys.executable, "-c",
                            "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))",
                            "cleanup", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert f"kept colosim-{RUN_PREFIX}-live: its run is live (pid {other.pid}" in r.stdout
        assert "would remove" in r.stdout and f"colosim-{run}" in r.stdout
        assert "would remove" not in "".join(
            line for line in r.stdout.splitlines(True) if f"{RUN_PREFIX}-live" in line)
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=10)
    time.sleep(0.1)
    assert _mine(f"{RUN_PREFIX}-live") == [] and not alive(other_worker)
    lay = cgroupfs.detect_layout()
    hierarchies = {str(lay.by_controller[c].path) for c in ("cpu", "cpuacct", "cpuset",
                                                              "perf_event")
                   if c in lay.by_controller}
    assert len(_mine(run)) == len(hierarchies) and alive(worker)
    r = subprocess.run([sys.executable, "-c",
                        "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))",
                        "cleanup", "--run", run], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"colosim-{run}" in r.stdout and f"killed {worker}" in r.stdout.replace("pid ", "")
    assert _mine(run) == []
    time.sleep(0.1)
    assert not alive(worker)


def test_zz_nothing_left_behind():
    """After the tests above: no colosim- cgroup of this session remains."""
    assert [p for p in cgroupfs.find_leftovers() if RUN_PREFIX in p.name] == []
