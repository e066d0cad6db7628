"""The invocation trace the real backend replays.

Every scenario the real backend runs is replayed from an invocation trace
(sim.workloads.trace.TRACE_SCHEMA: function, arrival_s, demand_s, threads):
the workload's ``trace_file`` if it has one, else the requests the workload
makes as its ``arrivals`` hook draws them (sim/workloads/base.py): from the
very random streams the simulator draws, with the same integer-nanosecond
arithmetic, so the simulator's run of the same config sees the same
requests, request for request (common random numbers; tests/test_real_loadgen.py
checks it against simulate()).  Generated workloads (azure2021, random) give
the trace they replay; poisson and worker_pool draw theirs the way their
runs draw them on the fly.

The trace is written into the real run's directory as ``trace.parquet``.
"""
from __future__ import annotations

import pyarrow as pa

from sim.workloads import available, trace_for, typed_config, workload_class
from sim.workloads.noisy_jobs import read_jobs
from sim.workloads.trace import read_trace


def replayable() -> list[str]:
    """The workloads the real backend runs whose requests can be drawn ahead."""
    return [name for name in available()
            if workload_class(name).arrivals is not None
            and workload_class(name).REAL_BACKEND is not None]


def trace_for_real(cfg: dict) -> pa.Table:
    """The trace a real run replays, or ValueError naming what is supported."""
    w = cfg["workload"]
    if w.get("trace_file"):
        return read_trace(w["trace_file"])
    cls = workload_class(w)
    trace = None
    if cls.arrivals is not None:
        trace = cls.arrivals(typed_config(cls, w), int(cfg.get("seed", 0)),
                             float(cfg["duration_s"]))
    if trace is None:
        raise ValueError(f"workload={w['name']} is not supported by backend=real yet; it replays "
                         f"invocation traces: workload={', workload='.join(replayable())}, or any "
                         f"function workload with a trace_file")
    return trace


def jobs_for_real(cfg: dict) -> pa.Table:
    """The job table a real ``noisy_jobs`` run replays: its trace_file, or
    the one generated from the seed (as the simulator's run of the config)."""
    w = cfg["workload"]
    if w.get("trace_file"):
        return read_jobs(w["trace_file"])
    return trace_for(cfg)
