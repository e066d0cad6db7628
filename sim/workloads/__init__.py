"""Workloads: the threads a scenario runs and the requests they serve.

Each module exposes ``WORKLOAD`` (a class taking ``(cfg, machine, recorder)``
with ``start()`` and ``burst_done(task)``); the module name is the
``workload.name`` of the config.  Trace-driven workloads (a ``trace_file``
in their config, or a trace table handed in) are replayed by
``trace.TraceWorkload`` whatever their name; their generators live in
scenarios/workloads.
"""
from __future__ import annotations

import importlib

from sim.workloads.trace import TraceWorkload, read_trace


def build(cfg, machine, recorder, trace=None):
    name = cfg["name"]
    own = _module(cfg.get("model") or name)
    # workloads with an input format or a load of their own (noisy_jobs' job
    # trace, the webserver's backlog and closed loop) read their trace themselves
    if own is not None and getattr(own, "READS_TRACE", False):
        return own.WORKLOAD(cfg, machine, recorder, trace)
    if cfg.get("trace_file"):
        trace = read_trace(cfg["trace_file"])
    if trace is not None:
        return TraceWorkload(cfg, machine, recorder, trace)
    if "trace_file" in cfg:
        raise ValueError(f"workload {name} replays a trace: set workload.trace_file, or pass "
                         "trace=scenarios.workloads.trace_for(cfg) to simulate()")
    # options that share a model name it (resctl_mix is a resctl)
    model = cfg.get("model") or name
    try:
        module = importlib.import_module(f"{__name__}.{model}")
    except ModuleNotFoundError:
        raise ValueError(f"workload {name!r} is not available") from None
    return module.WORKLOAD(cfg, machine, recorder)


def _module(model: str):
    """The workload module named ``model``, or None if there is none."""
    try:
        return importlib.import_module(f"{__name__}.{model}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{model}":
            raise
        return None
