"""backends/real/disturbance.py: the steal / other-load arithmetic on
synthetic /proc/stat snapshots and the verdict's bounds."""
import math
import os
import shutil

import pytest

from backends.real import disturbance as D


def _stat(tmp_path, user, system, idle, steal):
    p = tmp_path / "stat"
    p.write_text(f"cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4\n")
    return D.host_times(str(p))


def test_other_load_is_busy_time_minus_the_run_and_colosim(tmp_path):
    tick = D._TICK_NS
    a = {"host": _stat(tmp_path, 100, 50, 1000, 0), "/": {"usage_ns": 0}}
    z = {"host": _stat(tmp_path, 300, 150, 1400, 100), "/": {"usage_ns": 150 * tick}}
    a["host"]["self_ns"], z["host"]["self_ns"] = 0, 50 * tick
    f = D.measure(a, z, "/")
    # 800 ticks elapsed: 100 steal, 300 busy of which 150 the run and 50 colosim
    assert math.isclose(f["host_steal_frac"], 100 / 800)
    assert math.isclose(f["host_other_frac"], 100 / 800)
    assert math.isclose(f["colosim_cpu_frac"], 50 / 800)
    # the run's cgroup counts exact ns, /proc/stat ticks: never negative
    z["/"]["usage_ns"] = 400 * tick
    assert D.measure(a, z, "/")["host_other_frac"] == 0.0
    assert math.isnan(D.measure(a, a, "/")["host_steal_frac"])


def test_the_verdict_names_each_bound_exceeded():
    quiet = {"host_steal_frac": 0.01, "host_other_frac": 0.02}
    assert D.verdict(quiet, {"cpu": (40.0, 42.0, 0.05)}, 0.02, 0.05, 0.1) == ""
    why = D.verdict({"host_steal_frac": 0.03, "host_other_frac": 0.2},
                    {"cpu": (24.0, 52.0, 52 / 24 - 1)}, 0.02, 0.05, 0.1)
    assert "steal 3.0%" in why and "other load 20.0%" in why
    assert "cpu alone took 24.0-52.0 ns per access" in why and "spread 117%" in why


def test_host_times_reads_this_host():
    t = D.host_times()
    assert 0 <= t["steal_ns"] <= t["total_ns"] and 0 < t["busy_ns"] < t["total_ns"]


def test_a_vcpu_slower_or_faster_than_the_profile_is_named():
    quiet = {"host_steal_frac": 0.0, "host_other_frac": 0.0}
    assert D.verdict(quiet, {}, 0.02, 0.05, 0.1, (22.0, 20.5), 0.25) == ""
    assert D.verdict(quiet, {}, 0.02, 0.05, 0.1, None, 0.25) == ""
    slow = D.verdict(quiet, {}, 0.02, 0.05, 0.1, (36.1, 20.5), 0.25)
    assert "rt-app's loop at 36.1 ns an iteration" in slow and "20.5" in slow
    assert D.verdict(quiet, {}, 0.02, 0.05, 0.1, (15.0, 20.5), 0.25) != ""


def test_the_speed_probe_keeps_each_cpus_faster_sample_and_the_worst_cpu():
    samples = {0: iter([30.0, 21.0]), 1: iter([24.0, 26.0]), 2: iter([18.0, 40.0])}
    # CPU 0: 21 (1.02x), CPU 1: 24 (1.17x), CPU 2: 18 (1/1.14x)
    assert D.speed_probe(lambda c: next(samples[c]), {0, 1, 2}, 20.5) == 24.0


@pytest.mark.hardware
@pytest.mark.skipif(shutil.which("rt-app") is None, reason="needs rt-app")
def test_rt_apps_loop_probe_reads_this_host():
    from backends.real.rtapp import loop_ns, rtapp_binary
    ns = [loop_ns(rtapp_binary(), cpu) for cpu in sorted(os.sched_getaffinity(0))]
    # an iteration of rt-app's loop: nanoseconds on any CPU of today
    assert all(2 < v < 500 for v in ns), ns
