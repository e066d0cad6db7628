"""What a long run holds in memory (docs/performance.md, "Memory"): the
simulation's state grows with the backlog only; the results grow by a
fixed, small number of bytes per request and per cgroup interval."""
from __future__ import annotations

import gc
import tracemalloc

from scenarios.simulate import build
from sim import metrics
from sim.engine import s_to_ns
from sim.metrics import IntervalSampler
from tests.simcfg import make_cfg, poisson


def _measure(rate_rps: float, marks: list[float], sampler_s: float | None = None) -> list[dict]:
    """One function of 1 ms exponential requests on 2 CPUs; at each mark
    (simulated s) the live bytes of the results (the recorder's columns, by
    their own count, and the interval rows allocated in sim/metrics.py)
    and of everything else, the requests done and those still in the system.
    The functions' random streams hold pre-drawn batches that double up to
    4,096 variates: at ``rate_rps`` >= 1,000 draws per s and stream they
    are full after 8 s, so marks from there see the steady state."""
    cfg = make_cfg(poisson(functions=1, rate_rps=rate_rps, mean_service_s=0.001), cores=2,
                   duration_s=1000.0, warmup_s=0.0)
    engine, machine, recorder, workload = build(cfg)
    if sampler_s is not None:
        IntervalSampler(machine, s_to_ns(sampler_s)).start()
    workload.start()
    out = []
    tracemalloc.start()
    try:
        for t in marks:
            engine.run(s_to_ns(t))
            gc.collect()
            stats = tracemalloc.take_snapshot().statistics("filename")
            # the recorder is compiled: tracemalloc sees its columns, allocated
            # in C, under whichever Python frame ran the simulation
            results = recorder.nbytes() + sum(s.size for s in stats
                                              if s.traceback[0].filename == metrics.__file__)
            done = len(recorder.rows)
            out.append({"results": results, "state": sum(s.size for s in stats) - results,
                        "done": done, "backlog": recorder.arrived - done})
    finally:
        tracemalloc.stop()
    return out


def test_a_steady_run_holds_no_more_state_as_simulated_time_goes_on():
    """Load 0.5: between 9 and 19 simulated s, 10,000 requests come and
    go; the state must not grow with them, and each costs its 41 bytes of
    results (seven typed columns: Recorder in sim/recorder.py) and little more."""
    a, b = _measure(1000.0, [9.0, 19.0])
    assert b["done"] - a["done"] > 9_500 and b["backlog"] < 50
    assert abs(b["state"] - a["state"]) < 4 << 10           # < 0.5 byte per request
    per_request = (b["results"] - a["results"]) / (b["done"] - a["done"])
    assert 40 < per_request < 48, per_request                # columns over-allocate ~6 %


def test_an_overloaded_run_grows_by_its_backlog():
    """Load 1.5: the backlog grows by ~1,000 requests per simulated s, each a
    Request, a thread (Task and its sched_entity) and its place in a run
    queue; nothing else grows."""
    a, b = _measure(3000.0, [3.0, 5.0])
    grown = b["backlog"] - a["backlog"]
    assert grown > 1_800
    per_queued = (b["state"] - a["state"]) / grown
    assert 400 < per_queued < 1_200, per_queued


def test_interval_rows_are_compact():
    """A row per cgroup per interval (3 cgroups every 5 ms here): about 120
    bytes each (typed columns), where tuples of Python objects took ~320."""
    a, b = _measure(1000.0, [9.0, 19.0], sampler_s=0.005)
    rows = 3 * 2000
    per_row = (b["results"] - a["results"] - 41 * (b["done"] - a["done"])) / rows
    assert 100 < per_row < 160, per_row


def test_exited_tasks_leave_no_cycle_for_the_collector():
    """A thread-per-request run's exited tasks are freed by reference
    counting (the machine cuts se.task once a task has exited): with the
    run still alive, the collector finds no task among the unreachable."""
    cfg = make_cfg(poisson(functions=2, rate_rps=200.0, mean_service_s=0.001), cores=2,
                   duration_s=5.0, warmup_s=0.0)
    engine, machine, recorder, workload = build(cfg)
    workload.start()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        engine.run(s_to_ns(2.0))
        gc.collect()
        exited = [o for o in gc.garbage if type(o).__name__ == "Task"]
        finished = len(recorder.table())
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert finished > 500
    assert exited == []
