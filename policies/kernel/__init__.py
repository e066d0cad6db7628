"""Kernel scheduling classes, one module per fair-class policy.

Each module exposes ``POLICY`` (a sim.sched_class.KernelScheduler) and
``CONFIG`` (its sim.sched_class.SchedConfig dataclass).  Scheduler options in
scenarios/conf/scheduler/ name their module with ``policy:``; several options
may share one module (``cfs`` and ``cfs_tuned``).
"""
from __future__ import annotations

from sim.plugins import Plugins

_plugins = Plugins(__name__, __path__, "scheduler policy", "scheduler")
available = _plugins.available
module = _plugins.module


def load(name: str):
    """Return the KernelScheduler class for ``name``."""
    return module(name).POLICY
