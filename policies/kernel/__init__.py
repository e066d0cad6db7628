"""Kernel scheduling classes, one module per fair-class policy.

Each module exposes ``POLICY`` (a sim.sched_class.KernelScheduler) and
``CONFIG`` (its sim.sched_class.SchedConfig dataclass).  Scheduler options in
scenarios/conf/scheduler/ name their module with ``policy:``; several options
may share one module (``cfs`` and ``cfs_tuned``).
"""
from __future__ import annotations

import importlib
import pkgutil

# Modules DESIGN.md reserves that have not landed yet.
PLANNED = ()


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_"))


def module(name: str):
    """The policy module ``name``, with a clear error if it does not exist."""
    if name not in available():
        if name in PLANNED:
            raise ValueError(f"scheduler {name} is not available yet")
        raise ValueError(f"unknown scheduler policy {name!r}; choose from: "
                         f"{', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}")


def load(name: str):
    """Return the KernelScheduler class for ``name``."""
    return module(name).POLICY
