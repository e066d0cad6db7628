"""The yardstick of the speed issue: a bare SimPy loop, 100 processes each
doing ``yield env.timeout(1)``, timed in the same session as the simulator.

This VM's absolute speed moves by tens of percent between minutes and
days; a ratio to this loop, measured back to back with the run it
qualifies, does not (benchmarks/BASELINE.md, "Speed against SimPy")."""
from __future__ import annotations

import time

import simpy

PROCESSES = 100
TIMEOUTS = 200_000


def bare_simpy_loop(processes: int = PROCESSES,
                    timeouts: int = TIMEOUTS) -> tuple[simpy.Environment, int]:
    """A ``simpy.Environment`` with the loop's processes started, ready to
    run, and the number of timeouts its run makes."""
    env = simpy.Environment()
    per_process = timeouts // processes

    def proc():
        for _ in range(per_process):
            yield env.timeout(1)
    for _ in range(processes):
        env.process(proc())
    return env, processes * per_process


def bare_simpy_rate(processes: int = PROCESSES, timeouts: int = TIMEOUTS) -> float:
    """Timeouts per wall second of a bare ``simpy.Environment``."""
    env, count = bare_simpy_loop(processes, timeouts)
    start = time.perf_counter()
    env.run()
    return count / (time.perf_counter() - start)
