"""The invocation trace the real backend replays.

Every scenario the real backend runs is replayed from an invocation trace
(sim.workloads.trace.TRACE_SCHEMA: function, arrival_s, demand_s, threads):

- generated workloads (``azure2021``, ``random``) and any workload with a
  ``trace_file``: the same table the simulator replays
  (sim.workloads.trace_for / sim.workloads.trace.read_trace);
- ``poisson``: :func:`poisson_trace` draws the arrivals and demands from the
  very RNG streams ``sim/workloads/poisson.py`` uses
  (``workload/func-N/arrivals`` and ``workload/func-N/service``, seeded from
  ``seed``, the same integer-nanosecond arithmetic), so the simulator's run
  of the same config sees the same requests, request for request (common
  random numbers; tests/test_real_loadgen.py checks it against simulate()).
  The simulator itself is untouched.
- ``worker_pool``: the arrivals and demands of its one ``server`` stream,
  drawn from the streams sim/workloads/worker_pool.py draws on the fly
  (sim.workloads.webserver.arrival_trace, the same server's trace), so
  again the simulator's run of the same config sees the same requests.

The trace is written into the real run's directory as ``trace.parquet``.
"""
from __future__ import annotations

import pyarrow as pa

from sim.engine import NSEC_PER_SEC, RngStream, s_to_ns
from sim.workloads import trace_for
from sim.workloads.common import ServiceTime
from sim.workloads.noisy_jobs import read_jobs
from sim.workloads.trace import make_trace, read_trace
from sim.workloads.webserver import arrival_trace

SUPPORTED = ("poisson", "worker_pool", "azure2021", "random")


def poisson_trace(cfg: dict) -> pa.Table:
    """The requests ``workload=poisson`` makes in the simulator for this
    seed and duration, as a trace table (arrivals in [0, duration_s))."""
    w = cfg["workload"]
    seed = int(cfg.get("seed", 0))
    duration_ns = s_to_ns(float(cfg["duration_s"]))
    mean_gap_ns = NSEC_PER_SEC / float(w["rate_rps"])
    k = int(w.get("threads_per_request", 1))
    names, arrivals, demands = [], [], []
    for i in range(int(w["functions"])):
        name = f"func-{i}"
        arr = RngStream(seed, f"workload/{name}/arrivals")
        svc = ServiceTime(w.get("service", "exp"), float(w["mean_service_s"]),
                          float(w.get("service_sigma", 1.0)),
                          RngStream(seed, f"workload/{name}/service"))
        t = int(arr.exponential(mean_gap_ns))
        while t < duration_ns:
            names.append(name)
            arrivals.append(t / NSEC_PER_SEC)
            demands.append(svc.sample_ns() / NSEC_PER_SEC)
            t += int(arr.exponential(mean_gap_ns))
    return make_trace(names, arrivals, demands, [k] * len(names))


def trace_for_real(cfg: dict) -> pa.Table:
    """The trace a real run replays, or ValueError naming what is supported."""
    w = cfg["workload"]
    if w.get("trace_file"):
        return read_trace(w["trace_file"])
    name = w["name"]
    if name == "poisson":
        return poisson_trace(cfg)
    if name == "worker_pool":
        return arrival_trace(w, int(cfg.get("seed", 0)), float(cfg["duration_s"]))
    if name in ("azure2021", "random"):
        return trace_for(cfg)
    raise ValueError(f"workload={name} is not supported by backend=real yet; it replays "
                     f"invocation traces: workload={', workload='.join(SUPPORTED)}, or any "
                     f"function workload with a trace_file")


def jobs_for_real(cfg: dict) -> pa.Table:
    """The job table a real ``noisy_jobs`` run replays: its trace_file, or
    the one generated from the seed (as the simulator's run of the config)."""
    w = cfg["workload"]
    if w.get("trace_file"):
        return read_jobs(w["trace_file"])
    return trace_for(cfg)
