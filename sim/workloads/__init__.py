"""Workloads: the threads a scenario runs and the requests they serve.

Workloads are plug-ins (sim/workloads/base.py says what one declares): the
modules here, or in ``<dir>/workload/`` of COLOSIM_PLUGIN_PATH, that expose
``WORKLOAD``.  A config's ``workload.model`` (if the option has one), else
its ``workload.name``, names the module.  A workload whose config has
no module of its own but a trace to replay (a ``trace_file``, or a trace
table handed in) is replayed by ``trace.TraceWorkload``.
"""
from __future__ import annotations

import pyarrow as pa

from sim.config import from_mapping
from sim.plugins import Plugins
from sim.workloads.base import Workload
from sim.workloads.trace import TraceWorkload

_plugins = Plugins(__name__, __path__, "workload", "workload")
# the module that replays an invocation trace for any function workload
TRACE = "trace"


def available() -> list[str]:
    """The workload modules (those exposing ``WORKLOAD``)."""
    return [name for name in _plugins.available()
            if isinstance(getattr(_plugins.module(name), "WORKLOAD", None), type)]


def workload_class(name_or_model) -> type[Workload]:
    """The Workload class of a module name, or of a workload config (a
    mapping or config dataclass: its ``model``, else its ``name``)."""
    model = name_or_model if isinstance(name_or_model, str) else model_of(name_or_model)
    module = _plugins.module(model)
    cls = getattr(module, "WORKLOAD", None)
    if not isinstance(cls, type):
        raise ValueError(f"unknown workload {model!r}; choose from: {', '.join(available())}")
    return cls


def model_of(wcfg) -> str:
    """The module a workload config runs: its ``model`` key if it has one
    (options sharing a module), else its ``name``."""
    return wcfg.get("model") or wcfg["name"]


def schemas() -> dict[str, type]:
    """Each workload module's config dataclass, by module name."""
    return {name: workload_class(name).CONFIG for name in available()}


def typed_config(cls: type[Workload], wcfg):
    """``wcfg`` (a plain mapping, as scenarios.simulate hands every config on) as an
    instance of ``cls.CONFIG``."""
    return from_mapping(cls.CONFIG, wcfg, "workload")


def generated() -> list[str]:
    """The workload modules that generate the trace they replay."""
    return [name for name in available() if workload_class(name).generate_trace is not None]


def trace_for(cfg) -> pa.Table | None:
    """The trace ``cfg["workload"]`` generates for ``cfg``'s seed and
    duration (None where it has none to give, e.g. closed-loop clients)."""
    wcfg = cfg["workload"]
    cls = workload_class(wcfg)
    if cls.generate_trace is None:
        raise ValueError(f"workload {wcfg['name']!r} has no trace generator; "
                         f"generated workloads: {', '.join(generated())}")
    return cls.generate_trace(typed_config(cls, wcfg), int(cfg["seed"]),
                              float(cfg["duration_s"]))


def class_for(wcfg, has_trace: bool) -> type[Workload]:
    """The Workload class that runs config ``wcfg``: its module's, or, for
    a config with no module of its own but a trace to replay (its
    ``trace_file``, or a trace handed in: ``has_trace``), TraceWorkload."""
    model = model_of(wcfg)
    if model not in available():
        if wcfg.get("trace_file") or has_trace:
            model = TRACE
        else:
            raise ValueError(f"workload {wcfg['name']!r} is not available; choose from: "
                             f"{', '.join(available())}")
    return workload_class(model)


def build(wcfg, machine, recorder, trace=None) -> Workload:
    """The workload of config ``wcfg`` on ``machine``, with the trace it
    replays (generated: scenarios/runner.py hands it in)."""
    cls = class_for(wcfg, trace is not None)
    cfg = typed_config(cls, wcfg)
    if cls.READS_TRACE:
        return cls(cfg, machine, recorder, trace)
    if trace is not None:
        return TraceWorkload(cfg, machine, recorder, trace)
    return cls(cfg, machine, recorder)
