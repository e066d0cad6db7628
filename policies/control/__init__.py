"""Controllers: user-space control loops over a ``Host`` (backends/host.py).

One module per controller exposing ``CONTROLLER`` (a Controller subclass)
and ``CONFIG`` (its ControlConfig dataclass, fields declared with
sim.sched_class.tunable so scenarios.validate checks their ranges), plus an
option file in scenarios/conf/controller/ naming the module with
``controller:``.  The backend calls ``start(host)`` once when the
measurement starts at t = 0 and ``step(host)`` every ``interval_s``; a
controller acts only through the Host's levers, so the same object runs on
the simulator and on a real host.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.config import from_mapping
from sim.plugins import Plugins
from sim.sched_class import MISSING, tunable

# the option that runs no controller
NONE = "none"


@dataclass
class ControlConfig:
    name: str = MISSING           # the option's label in results
    controller: str = MISSING     # module in policies/control (or none)
    interval_s: float = tunable(1.0, range=(0.001, None))


class Controller:
    # acts through host.rdt_*: the real backend refuses the run up front on
    # a host without RDT (backends/real/run.py)
    uses_rdt = False
    # reads host.perf_counts (hardware events): refused up front likewise
    # where perf cannot count them
    uses_perf_counts = False
    # reads host.completed(): the simulated host keeps each finished
    # request until the next read only for a controller that declares it
    reads_completed = False

    def __init__(self, cfg):
        """``cfg``: the controller's option as its module's CONFIG instance
        (``config`` builds it from a mapping)."""
        self.cfg = cfg
        self.interval_s = float(cfg.interval_s)

    def start(self, host) -> None:
        """Called once, at t = 0, before any work arrives."""

    def step(self, host) -> None:
        """Called every ``interval_s`` from then on."""

    def summary(self) -> dict:
        """Extra summary.parquet columns describing what the controller did,
        read once when the run ends: column name (prefixed with the
        controller's module name, e.g. ``catcloud_``) -> one scalar (int,
        float, bool or str).  Every backend appends them as they are."""
        return {}


_plugins = Plugins(__name__, __path__, "controller policy", "controller")
available = _plugins.available
module = _plugins.module


def config(cfg) -> ControlConfig:
    """The controller option ``cfg`` (a mapping: a plain dict or a
    DictConfig) as an instance of its module's CONFIG (ControlConfig for
    ``none``); unknown keys are refused."""
    if isinstance(cfg, ControlConfig):
        return cfg
    name = cfg["controller"]
    schema = ControlConfig if name == NONE else module(name).CONFIG
    return from_mapping(schema, cfg, "controller")


def build(cfg) -> Controller | None:
    """The controller a config selects (None without a controller option
    or for ``controller: none``)."""
    if cfg is None:
        return None
    cfg = config(cfg)
    if cfg.controller == NONE:
        return None
    return module(cfg.controller).CONTROLLER(cfg)
