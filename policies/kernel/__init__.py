"""Kernel scheduling classes, one module per scheduler name."""
from __future__ import annotations

import importlib
import pkgutil

PLANNED = ("eevdf", "lags", "rr", "cfs_tuned", "eevdf_tuned")


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_"))


def load(name: str):
    """Return the KernelScheduler class for ``name``."""
    if name not in available():
        if name in PLANNED:
            raise ValueError(f"scheduler {name} is not available yet")
        raise ValueError(f"unknown scheduler {name!r}; choose from: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}").POLICY
