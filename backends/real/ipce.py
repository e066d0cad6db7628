"""The simulator's memory summary columns (sim/memory/progress.py) from a
real host's perf intervals: IPCE = 1 - stall cycles / cycles (Eberhardt,
"Mitigating the noisy neighbor problem", §3.1.4, Eq. 3.4; the stall event
is ``backend.stall_event``), LLC miss rate =
cache-misses / cache-references, and the priority share of CPU time spent
in intervals at IPCE >= the target.

A *window* is one cgroup's (a job's, a container's) counts after the
warm-up: per event the sum over its intervals (None once an interval could
not count it), plus ``cpu_ms`` / ``above_ms``, its task-clock in intervals
that counted cycles and stalls, and in those at or above the target.
"""
from __future__ import annotations

import math

from sim.memory.progress import MemorySystem

# the simulator's time-above-target threshold, here on IPCE
IPCE_TARGET = MemorySystem.TARGET


def add_interval(window: dict, values: dict, stall_event: str) -> None:
    """Add one perf interval (event -> count, None: not counted) to ``window``."""
    for event, v in values.items():
        old = window.get(event, 0.0)
        window[event] = None if v is None or old is None else old + v
    cycles, stall = values.get("cycles"), values.get(stall_event)
    cpu_ms = values.get("task-clock")
    if cycles and stall is not None and cpu_ms:
        window["cpu_ms"] = window.get("cpu_ms", 0.0) + cpu_ms
        if 1.0 - stall / cycles >= IPCE_TARGET:
            window["above_ms"] = window.get("above_ms", 0.0) + cpu_ms


def summary(rows: list[tuple[bool, dict]], stall_event: str) -> dict[str, float]:
    """The columns over ``rows`` = (priority?, window); NaN where perf could
    not count or nothing ran.  ``llc_occupancy_mb`` is not a perf count: the
    caller fills it where CMT was read."""
    nan = math.nan

    def total(ws, event):
        vals = [w.get(event) for w in ws if event in w]
        return nan if not vals or any(v is None for v in vals) else sum(vals)

    def ipce(ws):
        cyc = total(ws, "cycles")
        return 1.0 - total(ws, stall_event) / cyc if cyc > 0 else nan

    def job_mean(ws):
        # every window that ran weighs the same (NaN if one could not count)
        jobs = [ipce([w]) for w in ws if w.get("cycles", 0) != 0]
        return sum(jobs) / len(jobs) if jobs else nan

    every = [w for _, w in rows]
    prio = [w for pr, w in rows if pr]
    batch = [w for pr, w in rows if not pr]
    rates = [w["cache-misses"] / w["cache-references"] for w in every
             if w.get("cache-references") and w.get("cache-misses") is not None]
    refs = total(every, "cache-references")
    cpu_p = sum(w.get("cpu_ms", 0.0) for w in prio)
    return {
        "llc_miss_rate": total(every, "cache-misses") / refs if refs > 0 else nan,
        "llc_miss_rate_min": min(rates) if rates else nan,
        "llc_miss_rate_max": max(rates) if rates else nan,
        "llc_occupancy_mb": nan,
        "ipce_global": ipce(every),
        "ipce_priority": ipce(prio),
        "ipce_batch": ipce(batch),
        "ipce_priority_job_mean": job_mean(prio),
        "ipce_batch_job_mean": job_mean(batch),
        "time_above_target_frac": (sum(w.get("above_ms", 0.0) for w in prio) / cpu_p
                                   if cpu_p > 0 else nan),
    }
