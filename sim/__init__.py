"""colosim's simulated host.  ``from sim import simulate``."""
from sim.api import SimResult, simulate

__all__ = ["simulate", "SimResult"]
