"""The engine is a simpy.Environment (sim/engine.py): SimPy processes,
events and resources run on the simulation clock, interleaved with the
kernel model's callbacks in one documented order, and can drive load into
the simulated machine."""
from __future__ import annotations

import gc

import pytest
import simpy

from policies.kernel.cfs import CFS, CfsConfig
from sim.costmodel import CostModel
from sim.engine import GC_YOUNG_THRESHOLD, Engine, quiet_gc
from sim.machine import Machine
from sim.task import BURST_EXIT, Request
from sim.topology import Topology

MS = 1_000_000


def test_the_engine_is_a_simpy_environment():
    engine = Engine(0)
    assert isinstance(engine, simpy.Environment)
    assert engine.now == 0 and engine.peek() == simpy.core.Infinity
    timeout = engine.timeout(5)
    assert engine.peek() == 5
    engine.step()
    assert engine.now == 5 and timeout.processed and timeout.ok
    with pytest.raises(simpy.core.EmptySchedule):
        engine.step()


def test_order_at_equal_instants():
    """Time first; at one instant URGENT events (a process's start) before
    everything else; then scheduling order, across callbacks and events."""
    engine = Engine(0)
    log = []

    def proc(name, delay):
        log.append((engine.now, f"{name} starts"))
        yield engine.timeout(delay)
        log.append((engine.now, f"{name} wakes"))

    engine.call_at(10, log.append, (10, "call scheduled 1st"))
    engine.process(proc("p", 10))          # starts at 0 (URGENT), its timeout is due at 10
    engine.call_at(0, log.append, (0, "call at 0"))
    engine.call_at(10, log.append, (10, "call scheduled 3rd"))
    engine.call_later(5, lambda: engine.process(proc("q", 5)))

    def at_ten():
        # scheduled while the instant runs: after everything already due then
        log.append((engine.now, "call at 10"))
        engine.call_later(0, log.append, (10, "call added at 10"))
        engine.process(proc("r", 0))       # URGENT: starts before the call added at 10
    engine.call_at(10, at_ten)
    engine.run(11)
    assert log == [
        (0, "p starts"),                   # the process's start is URGENT
        (0, "call at 0"),
        (5, "q starts"),
        (10, "call scheduled 1st"),
        (10, "call scheduled 3rd"),
        (10, "call at 10"),
        (10, "r starts"),
        (10, "p wakes"),                   # p's timeout: scheduled at 0, run after the
        (10, "q wakes"),                   # calls scheduled before the run, as a NORMAL event
        (10, "call added at 10"),
        (10, "r wakes"),
    ]
    assert engine.now == 11


def test_run_until_a_time_leaves_what_is_due_then():
    engine = Engine(0)
    fired = []
    engine.call_at(7, fired.append, "call")
    timeout = engine.timeout(7)
    assert engine.run(7) == 0 and engine.now == 7 and fired == [] and not timeout.processed
    assert engine.run(8) == 2 and fired == ["call"] and timeout.processed
    with pytest.raises(ValueError, match="already reads 8 ns"):
        engine.run(5)


def test_run_until_an_event_returns_its_value():
    engine = Engine(0)

    def answer():
        yield engine.timeout(3 * MS)
        return 42
    proc = engine.process(answer())
    assert engine.run(until=proc) == 42
    assert engine.now == 3 * MS
    assert engine.run(until=proc) == 42    # already processed
    # an event nothing will trigger
    with pytest.raises(RuntimeError, match="no calls or events left"):
        engine.run(until=engine.event())


def test_delays_are_whole_nanoseconds():
    engine = Engine(0)
    assert engine.timeout(2e6) is not None
    with pytest.raises(ValueError, match="whole nanoseconds"):
        engine.timeout(1.5)


def test_a_failing_process_crashes_the_run():
    engine = Engine(0)

    def broken():
        yield engine.timeout(4)
        raise KeyError("no such function")
    engine.process(broken())
    with pytest.raises(KeyError, match="no such function") as info:
        engine.run(10)
    assert isinstance(info.value.__cause__, KeyError)
    assert engine.now == 4


def test_a_failure_waited_for_is_caught_not_raised():
    engine = Engine(0)
    caught = []

    def broken():
        yield engine.timeout(4)
        raise ValueError("bad request")

    def waiter():
        try:
            yield engine.process(broken())
        except ValueError as exc:
            caught.append((engine.now, str(exc)))
    engine.process(waiter())
    engine.run(10)
    assert caught == [(4, "bad request")]


def test_an_untriggered_failure_raises_at_its_instant():
    engine = Engine(0)
    engine.call_at(3, lambda: engine.event().fail(OSError("EIO")))
    with pytest.raises(OSError, match="EIO"):
        engine.run(10)
    assert engine.now == 3


# --- driving the simulated machine from SimPy processes --------------------

class RequestDone:
    """The owner of a request's thread (the machine calls ``burst_done``
    when the thread's burst ends, from its own callback): succeeds ``done``
    with the finished request, so that a process can wait for it."""

    def __init__(self, engine: Engine, req: Request):
        self.engine = engine
        self.req = req
        self.done = engine.event()

    def burst_done(self, task):
        self.req.end = self.engine.now
        self.done.succeed(self.req)
        return BURST_EXIT


def submit(machine: Machine, tg, function: str, demand_ns: int) -> simpy.Event:
    """Start a request of ``demand_ns`` CPU time as one thread in ``tg``; the
    event succeeds, with the request, when it has finished."""
    engine = machine.engine
    req = Request(function, tg.name, engine.now, demand_ns)
    req.pending = 1
    owner = RequestDone(engine, req)
    task = machine.new_task(function, tg, 0, demand_ns, 0, owner, req)
    machine.wake_up_new_task(task, 0)
    return owner.done


def closed_loop_client(machine, tg, name, demand_ns, think_ns, pool, finished):
    """A closed-loop client: take a connection from ``pool`` (a
    simpy.Resource), send a request and wait for its response, release the
    connection, think, repeat."""
    engine = machine.engine
    while True:
        sent = engine.now
        with pool.request() as conn:
            yield conn
            req = yield submit(machine, tg, name, demand_ns)
        finished.append((name, sent, req.arrival, req.start, req.end))
        yield engine.timeout(think_ns)


def one_cpu_machine(engine):
    return Machine(engine, Topology(1, 1), CFS, CfsConfig(name="cfs"), CostModel())


def run_clients(clients: int, connections: int, demand_ns: int, think_ns: int,
                until_ns: int, seed: int = 0):
    engine = Engine(seed)
    machine = one_cpu_machine(engine)
    tg = machine.create_group("clients")
    pool = simpy.Resource(engine, capacity=connections)
    finished = []
    for i in range(clients):
        engine.process(closed_loop_client(machine, tg, f"c{i}", demand_ns, think_ns, pool,
                                          finished))
    engine.run(until_ns)
    machine.sync()
    return engine, machine, finished


def test_a_machine_callback_resumes_the_waiting_process():
    """One client alone on the CPU (no switch costs): each request runs
    from the instant it is sent and ends exactly its demand later, and the
    client sends the next one its think time after that."""
    S, Z = 2 * MS, 1 * MS
    engine, machine, finished = run_clients(1, 1, S, Z, 30 * MS)
    assert [f[1] for f in finished] == [k * (S + Z) for k in range(10)]
    for _, sent, arrival, start, end in finished:
        assert arrival == start == sent and end == sent + S
    # the eleventh request was sent at 30 ms, is due after the run
    assert len(finished) == 10 and engine.now == 30 * MS


def test_closed_loop_through_a_connection_pool():
    """N clients, one connection, one CPU: the connection serialises the
    requests, so the CPU serves one at a time, back to back (N S > S + Z
    keeps a request always waiting), completions fall every S, and once
    every client has had its first response each one waits (N - 1) S - Z
    for the connection and S for the CPU: N S - Z in all."""
    N, S, Z = 3, 2 * MS, 1 * MS
    engine, machine, finished = run_clients(N, 1, S, Z, 200 * MS + 1)
    assert [f[4] for f in finished] == [(k + 1) * S for k in range(100)]
    assert [f[0] for f in finished[:6]] == ["c0", "c1", "c2", "c0", "c1", "c2"]
    responses = [end - sent for _, sent, _, _, end in finished]
    assert responses[:N] == [S, 2 * S, 3 * S]
    assert set(responses[N:]) == {N * S - Z}
    # nobody waits for the CPU: the connection is the queue
    assert all(start == arrival for _, _, arrival, start, _ in finished)


def test_closed_loop_sharing_the_cpu_obeys_the_response_time_law():
    """N clients, a connection each, one CPU shared by CFS: the interactive
    response time law R = N / X - Z holds (X the throughput), and the CPU
    is saturated (N S > S + Z and requests arrive as the CPU works), so
    X = 1 / S and R = N S - Z."""
    N, S, Z, T = 4, 2 * MS, 1 * MS, 2_000 * MS
    engine, machine, finished = run_clients(N, N, S, Z, T)
    X = len(finished) / T
    R = sum(end - sent for _, sent, _, _, end in finished) / len(finished)
    assert R == pytest.approx(N / X - Z, rel=0.01)
    assert X == pytest.approx(1 / S, rel=0.01)
    assert R == pytest.approx(N * S - Z, rel=0.01)
    # requests wait in the run queue now
    assert any(start > arrival for _, _, arrival, start, _ in finished)


def test_a_simpy_driven_run_is_deterministic():
    runs = [run_clients(4, 2, 2 * MS, 1 * MS, 100 * MS)[2] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) > 40


def test_quiet_gc_freezes_what_a_nested_block_made_and_restores_the_collector():
    """quiet_gc (sim/engine.py): a run inside a reporting block leaves its
    survivors frozen for the rest of the block; the outermost exit
    unfreezes and gives the thresholds back."""
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with quiet_gc():
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
        frozen = gc.get_freeze_count()
        with quiet_gc():
            made = [[i] for i in range(1000)]        # tracked containers
        assert gc.get_freeze_count() >= frozen + len(made)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    engine = Engine(1)
    engine.call_later(10, lambda: None)
    engine.run(100)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
