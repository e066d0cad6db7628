"""Generators of invocation traces for the trace-driven workloads.

``trace_for(cfg)`` turns a resolved run config (seed, duration_s,
workload) into the table sim.workloads.trace.TraceWorkload replays, with
columns function, arrival_s, demand_s, threads covering [0, duration_s).
The workload names it generates are ``GENERATED``:

- ``azure2021`` (scenarios.workloads.azure2021): the LAGS benchmark's
  trace-driven load, synthetic or loaded from the public Azure Functions
  traces;
- ``random`` (scenarios.workloads.random_fns): functions at 0-5 req/s
  whose aggregate CPU demand matches azure2021's.
"""
from __future__ import annotations

import pyarrow as pa

from scenarios.workloads import azure2021, random_fns

GENERATED = ("azure2021", "random")
_GENERATORS = {"azure2021": azure2021.generate, "random": random_fns.generate}


def trace_for(cfg) -> pa.Table:
    """The invocation trace of ``cfg["workload"]`` for this seed and duration."""
    wcfg = cfg["workload"]
    name = wcfg["name"]
    if name not in _GENERATORS:
        raise ValueError(f"workload {name!r} has no trace generator; "
                         f"generated workloads: {', '.join(GENERATED)}")
    return _GENERATORS[name](wcfg, int(cfg["seed"]), float(cfg["duration_s"]))
