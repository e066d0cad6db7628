"""Was the host quiet while a real run measured it?

A shared VM drifts: the hypervisor steals time from its vCPUs, other
processes on the guest take CPU, and neighbours on other guests contend for
the LLC and memory bandwidth, which only shows as a change in the speed a
thread reaches alone.  A run measured under any of these is not comparable
with the simulator, so the real backend measures all three over the run's
summary window and flags the run (``host_disturbed`` with the reason)
instead of letting it be compared silently:

``host_steal_frac``
    steal time over all CPU time of the host, from /proc/stat.
``host_other_frac``
    busy CPU time of the host (/proc/stat, in USER_HZ ticks) that is
    neither the run's cgroups nor the colosim process (load generator,
    sampler), over the host's CPU time: other load on the guest.  Kernel
    threads doing work for the run (kworkers, ksoftirqd, perf) count here
    too, so the threshold leaves room for them.
``colosim_cpu_frac``
    the colosim process's own CPU time (the load generator's dispatches and
    spins, the sampler) over the host's CPU time: not a disturbance (it is
    the run's own driver) but work on the run's CPUs that the simulator
    does not model, so it is reported (docs/host-validation.md).
``job_alone_spread_<class>``
    (memory workers only) one thread of the job shape alone is measured
    three times before the run and three times after it: slowest over
    fastest ns per access, minus one.
``host_loop_ns``
    the vCPUs' speed: ns per iteration of rt-app's busy loop, each run CPU
    probed twice alone before the run and twice after it (the faster of
    each pair; the one furthest from the reference is kept), against the
    calibration profile's ``rtapp_loop_ns`` (``host_loop_ns_ref``).  On
    this VM the loop's cost moved from 18-22 ns to 32-43 ns for an hour
    with no steal counted and no other load on the guest.

The thresholds are ``backend.disturbed_*`` (backends/real/config.py).
"""
from __future__ import annotations

import os
import time

# /proc/stat counts in USER_HZ ticks
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def host_times(path: str = "/proc/stat") -> dict[str, int]:
    """The host's cumulative busy, steal and total CPU time (ns, all CPUs)
    and this process's CPU time (all its threads) now."""
    with open(path) as f:
        fields = f.readline().split()
    if fields[0] != "cpu":
        raise ValueError(f"{path}: first line is not the all-CPU line: {fields[:3]}")
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    t = [int(v) * _TICK_NS for v in fields[1:9]] + [0] * max(0, 9 - len(fields))
    return {"busy_ns": t[0] + t[1] + t[2] + t[5] + t[6], "steal_ns": t[7],
            "total_ns": sum(t[:8]), "self_ns": time.process_time_ns()}


def measure(a: dict, z: dict, run: str) -> dict[str, float]:
    """Steal and other-load fractions of the host's CPU time between two
    sampler snapshots (``a`` before ``z``; each has ``host`` from
    :func:`host_times` and ``usage_ns`` of the run's top cgroup ``run``)."""
    h0, h1 = a["host"], z["host"]
    total = h1["total_ns"] - h0["total_ns"]
    if total <= 0:
        return {"host_steal_frac": float("nan"), "host_other_frac": float("nan"),
                "colosim_cpu_frac": float("nan")}
    other = (h1["busy_ns"] - h0["busy_ns"] - (z[run]["usage_ns"] - a[run]["usage_ns"])
             - (h1["self_ns"] - h0["self_ns"]))
    return {"host_steal_frac": (h1["steal_ns"] - h0["steal_ns"]) / total,
            "host_other_frac": max(0.0, other) / total,
            "colosim_cpu_frac": (h1["self_ns"] - h0["self_ns"]) / total}


def verdict(fracs: dict[str, float], spreads: dict[str, tuple[float, float, float]],
            steal_max: float, other_max: float, spread_max: float,
            speed: tuple[float, float] | None = None, speed_max: float = 0.0) -> str:
    """Why the run counts as disturbed ("" when it does not).  ``speed``:
    (the probe's ns per loop furthest from the reference, the reference)."""
    why = []
    steal, other = fracs["host_steal_frac"], fracs["host_other_frac"]
    if steal > steal_max:
        why.append(f"steal {steal:.1%} of CPU time (bound {steal_max:.1%})")
    if other > other_max:
        why.append(f"other load {other:.1%} of the host's CPU (bound {other_max:.1%})")
    for cls, (fast, slow, spread) in sorted(spreads.items()):
        if spread > spread_max:
            why.append(f"{cls} alone took {fast:.1f}-{slow:.1f} ns per access before and "
                       f"after the run (spread {spread:.0%}, bound {spread_max:.0%}: "
                       f"neighbours sharing the cache or memory)")
    if speed is not None:
        ns, ref = speed
        if not ref / (1 + speed_max) <= ns <= ref * (1 + speed_max):
            why.append(f"the vCPUs ran rt-app's loop at {ns:.1f} ns an iteration around the "
                       f"run, the calibration profile's {ref:.1f} (bound ±{speed_max:.0%}: the "
                       f"VM's speed moved)")
    return "; ".join(why)


def furthest(values, ref: float) -> float:
    """The value furthest from ``ref`` by ratio, slower or faster."""
    return max(values, key=lambda ns: max(ns / ref, ref / ns))


def speed_probe(probe, cpus, ref: float) -> float:
    """Of ``probe(cpu)`` (ns per loop) taken twice on each CPU, the faster of
    each pair, and of those the one furthest from ``ref``."""
    return furthest([min(probe(c), probe(c)) for c in sorted(cpus)], ref)
