"""Workloads: the threads a scenario runs and the requests they serve.

Each module exposes ``WORKLOAD`` (a class taking ``(cfg, machine, recorder)``
with ``start()`` and ``burst_done(task)``); the module name is the
``workload.name`` of the config.
"""
from __future__ import annotations

import importlib


def build(cfg, machine, recorder):
    name = cfg["name"]
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError:
        raise ValueError(f"workload {name!r} is not available") from None
    return module.WORKLOAD(cfg, machine, recorder)
