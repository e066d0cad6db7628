"""Closed-loop clients of the real load generator (backends/real/loadgen.py
``closed_loop``): against fake workers answering through a pipe, and
(``hardware``) against the native function worker."""
import os
import shutil
import time

import numpy as np
import pytest

from backends.real.disturbance import host_times
from backends.real.loadgen import (Timer, client_samplers, closed_loop, lateness_stats,
                                   set_timer_slack, timer_slack)
from backends.real.workers import WorkerProc, build_worker

MS = 1_000_000


@pytest.fixture(autouse=True)
def _restore_timer_slack():
    """The tests lower this thread's timer slack as the load generator does;
    later tests (and the workloads they fork) expect the default back."""
    before = timer_slack()
    yield
    if before is not None:
        set_timer_slack(before)


class PipeWorker:
    """Answers each request at once through a pipe (so select() sees it):
    done after its demand, or dropped (``drop``)."""

    def __init__(self, name, drop=False):
        self.name, self.drop, self.sent = name, drop, []
        self.fd, self._w = os.pipe()
        os.set_blocking(self.fd, False)
        self._buf = b""

    def send(self, data):
        now = time.monotonic_ns()
        _, rid, demand, k = data.split()
        self.sent.append((now, int(rid), int(k)))
        line = (b"X %d %d\n" % (int(rid), now) if self.drop else
                b"D %d %d %d %d\n" % (int(rid), now, now + int(demand), int(demand)))
        os.write(self._w, line)

    def read_lines(self):
        try:
            data = self._buf + os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        *lines, self._buf = data.split(b"\n")
        return lines

    def close(self):
        os.close(self.fd)
        os.close(self._w)


def _by_client(res):
    return {c: np.flatnonzero(res.client == c) for c in np.unique(res.client)}


def test_clients_wait_for_the_response_then_think():
    workers = [PipeWorker("a"), PipeWorker("b")]
    set_timer_slack(1)
    ticks = []
    try:
        t0 = time.monotonic_ns() + 2 * MS
        res = closed_loop(workers, [0, 1, 0], client_samplers(3, "det", 0.001, 0, "demand"),
                          client_samplers(3, "det", 0.004, 0, "think"), t0, 200 * MS,
                          threads=2, timers=[Timer(50 * MS, 50 * MS, ticks.append)])
    finally:
        for w in workers:
            w.close()
    assert not res.errors and not res.dropped
    assert res.max_in_flight <= 3
    n = len(res.client)
    assert set(res.done) == set(range(n))                 # every request answered
    assert sorted(i for w in workers for _, i, _ in w.sent) == list(range(n))
    assert {k for w in workers for _, _, k in w.sent} == {2}
    for wi, w in enumerate(workers):                     # each client to its worker
        assert {[0, 1, 0][res.client[i]] for _, i, _ in w.sent} == {wi}
    for c, ids in _by_client(res).items():
        assert res.due_ns[ids[0]] == 0
        # the next is due exactly think after the previous response
        for a, b in zip(ids, ids[1:]):
            assert res.due_ns[b] == res.done[a].end_ns - t0 + 4 * MS
            assert res.dispatch_ns[b] >= res.done[a].end_ns - t0
        # a 5 ms cycle (1 ms service + 4 ms think) over 200 ms
        assert 30 <= len(ids) <= 40, len(ids)
    late = res.lateness_s
    assert (late >= 0).all() and lateness_stats(late)["p50"] < 0.002
    assert (res.dispatch_ns < 200 * MS).all()            # nothing sent at or after the end
    assert len(ticks) == 3                               # 50, 100, 150 ms


def test_a_refusal_is_a_response():
    w = PipeWorker("full", drop=True)
    try:
        t0 = time.monotonic_ns()
        res = closed_loop([w], [0, 0], client_samplers(2, "det", 0.001, 0, "demand"),
                          client_samplers(2, "det", 0.010, 0, "think"), t0, 55 * MS)
    finally:
        w.close()
    assert not res.done and set(res.dropped) == set(range(len(res.client)))
    assert res.max_in_flight <= 2
    # each next request is due think after the previous refusal; quiet, that
    # is 6 a client (0, 10, ..., 50 ms), fewer when the host delays the loop
    for ids in _by_client(res).values():
        assert 2 <= len(ids) <= 6 and res.due_ns[ids[0]] == 0
        for a, b in zip(ids, ids[1:]):
            assert res.due_ns[b] == res.dropped[a].at_ns - t0 + 10 * MS


def test_think_times_are_seeded_per_client():
    a = [s.sample_ns() for s in client_samplers(3, "exp", 0.01, 7, "think")]
    b = [s.sample_ns() for s in client_samplers(3, "exp", 0.01, 7, "think")]
    c = [s.sample_ns() for s in client_samplers(3, "exp", 0.01, 8, "think")]
    assert a == b and a != c and len(set(a)) == 3
    (one,) = client_samplers(1, "exp", 0.01, 7, "think")
    draws = np.array([one.sample_ns() for _ in range(20000)])
    assert draws.mean() == pytest.approx(10 * MS, rel=0.03)
    assert {s.sample_ns() for s in client_samplers(2, "det", 0.01, 0, "think")} == {10 * MS}


@pytest.mark.hardware
@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the worker")
def test_closed_loop_on_the_native_worker():
    """4 clients on 2 workers, 2 ms of CPU per request, exponential think
    of mean 10 ms, for 2 s."""
    binary = build_worker()
    workers = [WorkerProc(binary, f"w{i}", 10) for i in range(2)]
    clients, think_s, end = 4, 0.010, 2000 * MS
    set_timer_slack(1)
    before = host_times()
    try:
        t0 = time.monotonic_ns() + 5 * MS
        res = closed_loop(workers, [0, 1, 0, 1],
                          client_samplers(clients, "det", 0.002, 1, "demand"),
                          client_samplers(clients, "exp", think_s, 1, "think"), t0, end)
    finally:
        for w in workers:
            w.quit()
    stolen = host_times()["steal_ns"] - before["steal_ns"]
    assert not res.errors and not res.dropped
    n = len(res.client)
    # every request answered, or still running at the end (one per client at most)
    assert set(res.done) <= set(range(n)) and n - len(res.done) <= clients
    # in flight never exceeds the clients, by the load generator's count and
    # by the worker's own timestamps
    assert res.max_in_flight <= clients
    events = sorted([(t0 + res.dispatch_ns[i], 1) for i in res.done] +
                    [(d.end_ns, -1) for d in res.done.values()])
    assert max(np.cumsum([e for _, e in events])) <= clients
    for c, ids in _by_client(res).items():
        for a, b in zip(ids, ids[1:]):
            assert res.done[a].end_ns <= t0 + res.dispatch_ns[b]
    # a spin of 2 ms of thread CPU time stops at its demand and overshoots
    # by one clock read, or by what the hypervisor stole from the vCPU
    # meanwhile (the guest counts it as the thread's), measured over the
    # test.  /proc/stat counts steal in 10 ms ticks and not the interrupts
    # the guest charges to the running thread, so a single stall can inflate
    # one request by any amount with no steal counted (seen: 1.02 ms over
    # in CI, 4.15 ms over in a fresh clone's run): the typical spin is held
    # to a clock read, a millisecond's overshoot to 1 % of the requests
    cpu = np.array([d.cpu_ns for d in res.done.values()])
    assert (cpu >= 2 * MS).all(), cpu.min()
    assert np.median(cpu) < 2 * MS + 100_000, np.median(cpu)
    over = cpu[cpu > 3 * MS + stolen]
    assert len(over) <= max(1, len(cpu) // 100), (over, stolen)
    # throughput = C / (think + latency), latency from the scheduled send
    # (Little's law on each client's cycle) within a generous 20 %
    window = [i for i in res.done if 0.5e9 <= res.done[i].end_ns - t0 < end]
    x = len(window) / 1.5
    latency_s = np.mean([(res.done[i].end_ns - t0 - res.due_ns[i]) / 1e9 for i in res.done])
    assert x == pytest.approx(clients / (think_s + latency_s), rel=0.2), (x, latency_s)
    assert 2e-3 <= latency_s < 0.05
    assert lateness_stats(res.lateness_s)["p50"] < 0.002
