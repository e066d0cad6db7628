"""The event loop alone (sim/engine.py), against a bare simpy.Environment.

Two loads, each ``PROCESSES`` timers that re-arm a pseudo-random 1-2 µs
later, ``EVENTS`` times in all:

- ``test_engine_calls``: plain callbacks (``Engine.push``, the kernel
  model's path);
- ``test_engine_processes``: SimPy processes looping on
  ``yield env.timeout(...)`` (the path of a workload or controller written
  as a SimPy process).

Each reports the events its engine ran per wall second and, as
``vs_bare_simpy``, its speed over the same processes on a bare
``simpy.Environment`` timed in the same round (above 1: faster than SimPy).
"""
from __future__ import annotations

import time

import simpy

from sim.engine import Engine

PROCESSES = 100
EVENTS = 200_000
PER_PROCESS = EVENTS // PROCESSES


def _gap(i: int, k: int) -> int:
    # deterministic and spread out, so the heap's order keeps changing
    return 1_000 + (i * 7_919 + k * 104_729) % 997


def _calls() -> tuple[float, int]:
    engine = Engine(0)

    def tick(i: int, k: int) -> None:
        if k < PER_PROCESS:
            engine.push(engine._now + _gap(i, k), tick, (i, k + 1))
    for i in range(PROCESSES):
        engine.push(i, tick, (i, 1))
    start = time.perf_counter()
    events = engine.run()
    wall = time.perf_counter() - start
    assert events == EVENTS
    return wall, events


def _processes(env) -> tuple[float, int | None]:
    """The wall time, and the number of events an Engine ran (each process
    has its start, its timeouts and its end)."""
    def proc(i: int):
        for k in range(2, PER_PROCESS):
            yield env.timeout(_gap(i, k))
    for i in range(PROCESSES):
        env.process(proc(i))
    start = time.perf_counter()
    events = env.run()
    wall = time.perf_counter() - start
    assert events in (None, EVENTS)
    return wall, events


def _bench(benchmark, run_engine, rounds: int = 5) -> None:
    ratios, walls = [], []

    def once():
        wall, _ = run_engine()
        bare, _ = _processes(simpy.Environment())
        walls.append(wall)
        ratios.append(bare / wall)
    benchmark.pedantic(once, rounds=rounds, iterations=1, warmup_rounds=1)
    wall = min(walls)
    benchmark.extra_info.update({
        "events": EVENTS,
        "events_per_wall_s": EVENTS / wall,
        # the median of the rounds' ratios: each pair ran back to back
        "vs_bare_simpy": sorted(ratios)[len(ratios) // 2],
    })


def test_engine_calls(benchmark):
    _bench(benchmark, _calls)


def test_engine_processes(benchmark):
    _bench(benchmark, lambda: _processes(Engine(0)))
