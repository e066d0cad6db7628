"""Open-loop trace replay with measured lateness.

The load generator dispatches each trace row to its function's worker at
``t0 + arrival``: it sleeps to ``spin_us`` before the deadline (timer slack
set to 1 ns) and busy-waits the rest, on one thread, with no other thread
competing for the GIL.  Worker completions are drained from non-blocking
pipes between dispatches (the worker timestamps them itself, so draining
late does not change a latency).  Timers (interval sampling, controller
steps, the warm-up snapshot, progress) run on the same loop, between
dispatches.

Lateness = dispatch instant - scheduled instant, for every request.  A
request's latency is measured from its *scheduled* arrival (open loop: a
late dispatch counts against the host, never hides), so the lateness
statistics say how far the replay itself can be trusted.
"""
from __future__ import annotations

import ctypes
import heapq
import math
import time
from dataclasses import dataclass

import numpy as np

from backends.real.workers import Burst, Done, Dropped, WorkerError, parse_line, request_line

PR_SET_TIMERSLACK = 29


def set_timer_slack(ns: int = 1) -> bool:
    """prctl(PR_SET_TIMERSLACK): sleeps of this thread wake within ``ns``
    instead of the default 50 us."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def lateness_stats(lateness_s) -> dict[str, float]:
    """p50, p99, max and mean of the dispatch lateness (seconds; NaN when
    nothing was dispatched)."""
    x = np.asarray(lateness_s, dtype=np.float64)
    if x.size == 0:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan, "mean": math.nan}
    p50, p99 = np.percentile(x, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "max": float(x.max()),
            "mean": float(x.mean())}


def lateness_verdict(stats: dict[str, float], bound_p99_s: float | None) -> tuple[bool, str]:
    """(ok, reason): a run is trusted when its p99 lateness is within the bound."""
    if bound_p99_s is None or math.isnan(stats["p99"]):
        return True, ""
    if stats["p99"] <= bound_p99_s:
        return True, ""
    return False, (f"load-generator lateness p99 {stats['p99'] * 1e3:.3f} ms exceeds "
                   f"backend.max_lateness_p99_s = {bound_p99_s * 1e3:.3f} ms (p50 "
                   f"{stats['p50'] * 1e3:.3f} ms, max {stats['max'] * 1e3:.3f} ms): the host "
                   f"was too busy to replay the trace on time")


@dataclass
class Timer:
    first_ns: int
    period_ns: int | None
    fn: object   # fn(now_rel_ns)


@dataclass
class ReplayResult:
    dispatch_ns: np.ndarray   # relative to t0, per trace row (-1: not dispatched)
    done: dict                # row -> Done (absolute CLOCK_MONOTONIC times)
    errors: list
    bursts: list              # (worker index, Burst) of periodic workers
    dropped: dict             # row -> Dropped (pool workers with a full queue)


def replay(arrival_ns: np.ndarray, worker_of_row: np.ndarray, demand_ns: np.ndarray,
           threads: np.ndarray, workers: list, t0_ns: int, end_ns: int,
           timers: list[Timer] = (), on_done=None, spin_ns: int = 100_000,
           max_sleep_ns: int = 20_000_000) -> ReplayResult:
    """Dispatch row i to ``workers[worker_of_row[i]]`` at ``t0_ns +
    arrival_ns[i]`` (rows sorted by arrival), until ``t0_ns + end_ns``.
    ``on_done(row, Done)`` is called as completions are read."""
    n = len(arrival_ns)
    dispatch = np.full(n, -1, dtype=np.int64)
    done: dict[int, Done] = {}
    errors: list[str] = []
    bursts: list = []
    dropped: dict[int, Dropped] = {}
    heap = [(t.first_ns, k, t) for k, t in enumerate(timers)]
    heapq.heapify(heap)
    mono = time.monotonic_ns
    arrival = arrival_ns.tolist()
    wrow = worker_of_row.tolist()
    lines = [request_line(i, int(d), int(k)) for i, (d, k) in
             enumerate(zip(demand_ns.tolist(), threads.tolist()))]

    def drain():
        for wi, w in enumerate(workers):
            for line in w.read_lines():
                msg = parse_line(line)
                if isinstance(msg, Burst):
                    bursts.append((wi, msg))
                elif isinstance(msg, Dropped):
                    dropped[msg.id] = msg
                elif isinstance(msg, Done):
                    done[msg.id] = msg
                    if on_done is not None:
                        on_done(msg.id, msg)
                else:
                    errors.append(f"{w.name}: {msg[1] if msg[0] == 'E' else msg}")

    i = 0
    while True:
        next_arr = arrival[i] if i < n else end_ns
        # like the simulator, nothing scheduled at or after the end runs
        next_timer = heap[0][0] if heap and heap[0][0] < end_ns else end_ns
        target = min(next_arr, next_timer, end_ns)
        now = mono() - t0_ns
        left = target - now
        if left > spin_ns:
            drain()
            left = target - (mono() - t0_ns)
            if left > spin_ns:
                time.sleep(min(left - spin_ns, max_sleep_ns) / 1e9)
                continue
        while mono() - t0_ns < target:
            pass
        if target == next_timer < end_ns and next_timer <= next_arr:
            _, k, t = heapq.heappop(heap)
            t.fn(mono() - t0_ns)
            if t.period_ns:
                heapq.heappush(heap, (target + t.period_ns, k, t))
            continue
        if i < n and target == next_arr:
            # every row due now goes out before anything else
            while i < n and arrival[i] <= mono() - t0_ns:
                w = workers[wrow[i]]
                dispatch[i] = mono() - t0_ns
                try:
                    w.send(lines[i])
                except WorkerError as e:
                    errors.append(str(e))
                i += 1
            continue
        if target >= end_ns:
            break
    drain()
    return ReplayResult(dispatch, done, errors, bursts, dropped)
