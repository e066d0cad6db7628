"""Generators of invocation traces for the trace-driven workloads.

``trace_for(cfg)`` turns a resolved run config (seed, duration_s,
workload) into the table sim.workloads.trace.TraceWorkload replays, with
columns function, arrival_s, demand_s, threads covering [0, duration_s).
The workload names it generates are ``GENERATED``:

- ``azure2019`` (scenarios.workloads.azure2019): the LAGS cluster case
  study's downscaled Azure Functions Trace 2019, for cluster=kubernetes;
- ``azure2021`` (scenarios.workloads.azure2021): the LAGS benchmark's
  trace-driven load, synthetic or loaded from the public Azure Functions
  traces;
- ``random`` (scenarios.workloads.random_fns): functions at 0-5 req/s
  whose aggregate CPU demand matches azure2021's;
- ``webserver`` (sim.workloads.webserver.arrival_trace): its open-loop
  Poisson arrivals (None for closed-loop clients, which have no trace);
- ``noisy_jobs`` (scenarios.workloads.noisy_jobs): a job trace, in the
  format of sim.workloads.noisy_jobs (job, arrival_s, length_s, cores,
  sensitivity, priority) rather than an invocation trace.
"""
from __future__ import annotations

import pyarrow as pa

from scenarios.workloads import azure2019, azure2021, noisy_jobs, random_fns
from sim.workloads.webserver import arrival_trace

GENERATED = ("azure2019", "azure2021", "random", "webserver", "noisy_jobs")
_GENERATORS = {"azure2019": azure2019.generate, "azure2021": azure2021.generate, "random": random_fns.generate,
               "webserver": arrival_trace, "noisy_jobs": noisy_jobs.generate}


def trace_for(cfg) -> pa.Table | None:
    """The trace of ``cfg["workload"]`` for this seed and duration."""
    wcfg = cfg["workload"]
    name = wcfg["name"]
    if name not in _GENERATORS:
        raise ValueError(f"workload {name!r} has no trace generator; "
                         f"generated workloads: {', '.join(GENERATED)}")
    return _GENERATORS[name](wcfg, int(cfg["seed"]), float(cfg["duration_s"]))
