"""Kernel scheduling classes, one module per fair-class policy.

Each module exposes ``POLICY`` (a sim.sched_class.KernelScheduler) and
``CONFIG`` (its sim.sched_class.SchedConfig dataclass).  Scheduler options in
scenarios/conf/scheduler/ name their module with ``policy:``; several options
may share one module (``cfs`` and ``cfs_tuned``).  An option file sets only
``name``, ``policy`` and the keys whose values differ from the CONFIG
defaults: what each key means and why its default was chosen is said once,
on the dataclass field.
"""
from __future__ import annotations

from sim.config import from_mapping
from sim.plugins import Plugins
from sim.sched_class import SchedConfig

_plugins = Plugins(__name__, __path__, "scheduler policy", "scheduler")
available = _plugins.available
module = _plugins.module


def load(name: str):
    """Return the KernelScheduler class for ``name``."""
    return module(name).POLICY


def config(sched) -> SchedConfig:
    """The scheduler option ``sched`` (a mapping: a plain dict or a
    DictConfig) as an instance of its policy module's CONFIG, which is what
    the policy and the machine read.  A plain dict may leave out ``policy``
    when the option is named after its module (``{"name": "cfs"}``)."""
    if isinstance(sched, SchedConfig):
        return sched
    policy = sched["policy"] if "policy" in sched else sched["name"]
    return from_mapping(module(policy).CONFIG, {**sched, "policy": policy}, "scheduler")
