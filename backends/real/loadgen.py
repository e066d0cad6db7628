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

``closed_loop`` drives the same workers with N clients instead of a trace,
as the simulator's closed-loop workloads (webserver ``clients``/``think_s``,
resctl): a client sends a request, waits for its response, thinks, sends
the next.  A request is scheduled at its client's previous response (the
worker's end timestamp) + the think time, so lateness there also covers how
late the load generator learned of the response.  Between dispatches it
waits in select() on the workers' pipes, so a response wakes it at once.
"""
from __future__ import annotations

import ctypes
import heapq
import math
import select
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backends.real.workers import Burst, Done, Dropped, WorkerError, parse_line, request_line
from sim.engine import RngStream
from sim.workloads.common import ServiceTime

PR_SET_TIMERSLACK = 29
PR_GET_TIMERSLACK = 30


class Worker(Protocol):
    """What the load generator drains between dispatches:
    backends/real/workers.WorkerProc (a function's native worker),
    jobs.JobProc (a job), memlookup.ContainerProc (a container), or a
    test's fake."""

    name: str

    def read_lines(self) -> list[bytes]:
        """The complete reply lines written since the last call (never blocks)."""


class RequestWorker(Worker, Protocol):
    """A worker the load generator sends requests to: the worker of a
    replayed row, or of a closed-loop client (WorkerProc, JobProc).
    ``closed_loop`` also waits in select() on a worker's ``fd`` (its
    stdout) where it has one, so a response wakes it at once; without one
    it finds responses at its next poll."""

    def send(self, line: bytes) -> None:
        """Hand over one protocol line (``R <id> <demand_ns> <threads>``)."""


def timer_slack() -> int | None:
    """prctl(PR_GET_TIMERSLACK): this thread's timer slack (ns)."""
    try:
        ns = ctypes.CDLL(None, use_errno=True).prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    except (OSError, AttributeError):
        return None
    return ns if ns >= 0 else None


# The slack the workload's tasks keep (the kernel's 50 us unless colosim was
# started with another): this process's before the load generator lowers its
# own.  A child inherits its parent's current slack as its default, so a
# workload started after that must be given this back (spawn_in_cgroup).
WORKLOAD_TIMER_SLACK_NS = timer_slack()


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


class _Timers:
    """The pending timers of a loop, earliest first."""

    def __init__(self, timers):
        self.heap = [(t.first_ns, k, t) for k, t in enumerate(timers)]
        heapq.heapify(self.heap)

    def next(self, end_ns: int) -> int:
        # like the simulator, nothing scheduled at or after the end runs
        return self.heap[0][0] if self.heap and self.heap[0][0] < end_ns else end_ns

    def fire(self, due_ns: int, now_ns: int) -> None:
        """Run the earliest timer (due at ``due_ns``) and re-arm a periodic one."""
        _, k, t = heapq.heappop(self.heap)
        t.fn(now_ns)
        if t.period_ns:
            heapq.heappush(self.heap, (due_ns + t.period_ns, k, t))


def _drain(workers: list[Worker], on_msg, errors: list) -> None:
    """Parse the lines every worker has written; ``on_msg(worker index,
    msg)`` for Done/Burst/Dropped, anything else is an error."""
    for wi, w in enumerate(workers):
        for line in w.read_lines():
            msg = parse_line(line)
            if isinstance(msg, (Done, Burst, Dropped)):
                on_msg(wi, msg)
            else:
                errors.append(f"{w.name}: {msg[1] if msg[0] == 'E' else msg}")


def _spin_until(t0_ns: int, target_ns: int) -> None:
    mono = time.monotonic_ns
    while mono() - t0_ns < target_ns:
        pass


@dataclass
class ReplayResult:
    dispatch_ns: np.ndarray   # relative to t0, per trace row (-1: not dispatched)
    done: dict                # row -> Done (absolute CLOCK_MONOTONIC times)
    errors: list
    bursts: list              # (worker index, Burst) of periodic workers
    dropped: dict             # row -> Dropped (pool workers with a full queue)


def replay(arrival_ns: np.ndarray, worker_of_row: np.ndarray, demand_ns: np.ndarray,
           threads: np.ndarray, workers: list[Worker], t0_ns: int, end_ns: int,
           timers: list[Timer] = (), on_done=None, spin_ns: int = 100_000,
           max_sleep_ns: int = 20_000_000) -> ReplayResult:
    """Dispatch row i to ``workers[worker_of_row[i]]`` (a RequestWorker) at
    ``t0_ns + arrival_ns[i]`` (rows sorted by arrival), until ``t0_ns + end_ns``.
    ``on_done(row, Done)`` is called as completions are read."""
    n = len(arrival_ns)
    dispatch = np.full(n, -1, dtype=np.int64)
    done: dict[int, Done] = {}
    errors: list[str] = []
    bursts: list = []
    dropped: dict[int, Dropped] = {}
    pending = _Timers(timers)
    mono = time.monotonic_ns
    arrival = arrival_ns.tolist()
    wrow = worker_of_row.tolist()
    lines = [request_line(i, int(d), int(k)) for i, (d, k) in
             enumerate(zip(demand_ns.tolist(), threads.tolist()))]

    def on_msg(wi, msg):
        if isinstance(msg, Burst):
            bursts.append((wi, msg))
        elif isinstance(msg, Dropped):
            dropped[msg.id] = msg
        else:
            done[msg.id] = msg
            if on_done is not None:
                on_done(msg.id, msg)

    i = 0
    while True:
        next_arr = arrival[i] if i < n else end_ns
        next_timer = pending.next(end_ns)
        target = min(next_arr, next_timer, end_ns)
        now = mono() - t0_ns
        left = target - now
        if left > spin_ns:
            _drain(workers, on_msg, errors)
            left = target - (mono() - t0_ns)
            if left > spin_ns:
                time.sleep(min(left - spin_ns, max_sleep_ns) / 1e9)
                continue
        _spin_until(t0_ns, target)
        if target == next_timer < end_ns and next_timer <= next_arr:
            pending.fire(target, mono() - t0_ns)
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
    _drain(workers, on_msg, errors)
    return ReplayResult(dispatch, done, errors, bursts, dropped)


def client_samplers(clients: int, kind: str, mean_s: float, seed: int, what: str,
                    sigma: float = 1.0) -> list[ServiceTime]:
    """One sampler per client (``sample_ns()``; kind ``exp``, ``det`` (fixed)
    or ``lognormal``), each on its own seeded stream
    ``loadgen/client-<c>/<what>``, so a client's draws do not depend on the
    order in which responses come back."""
    return [ServiceTime(kind, mean_s, sigma, RngStream(seed, f"loadgen/client-{c}/{what}"))
            for c in range(clients)]


@dataclass
class ClosedLoopResult:
    client: np.ndarray        # per request id: the client that sent it
    due_ns: np.ndarray        # when it was scheduled, relative to t0 (0 for a first request)
    dispatch_ns: np.ndarray   # when it was sent, relative to t0
    demand_ns: np.ndarray
    done: dict                # id -> Done (absolute CLOCK_MONOTONIC times)
    dropped: dict             # id -> Dropped: a pool worker's refusal, also a response
    errors: list
    max_in_flight: int        # requests sent and not yet answered, at most

    @property
    def lateness_s(self) -> np.ndarray:
        return (self.dispatch_ns - self.due_ns) / 1e9


def closed_loop(workers: list[RequestWorker], client_worker, demand: list, think: list, t0_ns: int,
                end_ns: int, threads: int = 1, timers: list[Timer] = (), on_done=None,
                spin_ns: int = 100_000, max_sleep_ns: int = 20_000_000) -> ClosedLoopResult:
    """Client c sends to ``workers[client_worker[c]]`` requests of
    ``demand[c].sample_ns()`` ns (``threads`` threads each), the first at
    t0, each next one ``think[c].sample_ns()`` after the previous one's
    response, until ``t0_ns + end_ns``; nothing is sent at or after the end.
    ``on_done(id, Done, due_ns)`` is called as completions are read
    (``due_ns``: when the request was scheduled, relative to t0)."""
    client_of: list[int] = []
    due: list[int] = []
    dispatch: list[int] = []
    demands: list[int] = []
    done: dict[int, Done] = {}
    dropped: dict[int, Dropped] = {}
    errors: list[str] = []
    ready = [(0, c) for c in range(len(client_worker))]   # (due, client), earliest first
    heapq.heapify(ready)
    pending = _Timers(timers)
    mono = time.monotonic_ns
    fds = [w.fd for w in workers if getattr(w, "fd", None) is not None]
    in_flight = max_in_flight = 0

    def on_msg(wi, msg):
        nonlocal in_flight
        if isinstance(msg, Burst):
            errors.append(f"{workers[wi].name}: a periodic worker cannot serve clients")
            return
        if isinstance(msg, Dropped):
            dropped[msg.id] = msg
            at = msg.at_ns
        else:
            done[msg.id] = msg
            at = msg.end_ns
            if on_done is not None:
                on_done(msg.id, msg, due[msg.id])
        in_flight -= 1
        c = client_of[msg.id]
        heapq.heappush(ready, (at - t0_ns + think[c].sample_ns(), c))

    while True:
        next_send = ready[0][0] if ready else end_ns
        next_timer = pending.next(end_ns)
        target = min(next_send, next_timer, end_ns)
        left = target - (mono() - t0_ns)
        if left > spin_ns:
            # wakes early when a worker answers: that may bring a send forward
            select.select(fds, [], [], min(left - spin_ns, max_sleep_ns) / 1e9)
            _drain(workers, on_msg, errors)
            continue
        _spin_until(t0_ns, target)
        if target == next_timer < end_ns and next_timer <= next_send:
            pending.fire(target, mono() - t0_ns)
            continue
        if target >= end_ns:
            break
        # the end is checked again at each send: a loop descheduled after its
        # spin (a loaded host) must not send past it
        while ready and ready[0][0] <= mono() - t0_ns < end_ns:
            d, c = heapq.heappop(ready)
            rid = len(client_of)
            client_of.append(c)
            due.append(d)
            demands.append(demand[c].sample_ns())
            dispatch.append(mono() - t0_ns)
            try:
                workers[client_worker[c]].send(request_line(rid, demands[rid], threads))
            except WorkerError as e:
                errors.append(str(e))
                continue    # never answered: the client stops
            in_flight += 1
            max_in_flight = max(max_in_flight, in_flight)
        if mono() - t0_ns >= end_ns:
            break
    _drain(workers, on_msg, errors)
    return ClosedLoopResult(np.asarray(client_of, np.int64), np.asarray(due, np.int64),
                            np.asarray(dispatch, np.int64), np.asarray(demands, np.int64),
                            done, dropped, errors, max_in_flight)
