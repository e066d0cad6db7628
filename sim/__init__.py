"""colosim's simulated host.  ``from sim import simulate``."""
from sim import compiled as _compiled

_compiled.install()      # before the compiled modules are first imported

from sim.api import SimResult, simulate  # noqa: E402

__all__ = ["simulate", "SimResult"]
