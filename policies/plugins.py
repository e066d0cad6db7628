"""Policies are plugins: one module per policy in a package, found by name.

A new policy is a new file; nothing else lists it.  Names reserved
for policies that have not landed yet are ``planned``: selecting one says so
instead of "unknown".
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


class Plugins:
    def __init__(self, package: str, path, kind: str, planned: tuple[str, ...] = ()):
        self.package = package
        self.path = path
        self.kind = kind
        self.planned = planned

    def available(self) -> list[str]:
        return sorted(m.name for m in pkgutil.iter_modules(self.path)
                      if not m.name.startswith("_"))

    def module(self, name: str) -> ModuleType:
        """The policy module ``name``, with a clear error if it does not exist."""
        if name not in self.available():
            if name in self.planned:
                raise ValueError(f"{self.kind} {name} is not available yet")
            raise ValueError(f"unknown {self.kind} policy {name!r}; choose from: "
                             f"{', '.join(self.available())}")
        return importlib.import_module(f"{self.package}.{name}")
