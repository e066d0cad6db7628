"""colosim's simulated host: the engine, the machine and its kernel
mechanisms, the workload and memory models.  ``scenarios.simulate`` runs a
scenario on it."""
from sim import compiled as _compiled

_compiled.install()      # before the compiled modules are first imported
