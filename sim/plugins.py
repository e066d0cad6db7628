"""Plug-ins: one module per kernel policy, controller or workload, found by
name in its package, or in the directories of ``COLOSIM_PLUGIN_PATH``.

A new plug-in is a new file; nothing else lists it.  ``COLOSIM_PLUGIN_PATH``
(directories separated by ``os.pathsep``) adds plug-ins kept outside the
repository, laid out as::

    <dir>/workload/<name>.py          <dir>/conf/workload/<option>.yaml
    <dir>/scheduler/<name>.py         <dir>/conf/scheduler/<option>.yaml
    <dir>/controller/<name>.py        <dir>/conf/controller/<option>.yaml

The module is the plug-in (what its package's modules expose), the YAML its
option, composed like the shipped ones (scenarios/config.py adds each
``<dir>/conf`` to Hydra's search path).  A package module wins over a
plug-in file of the same name.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

PLUGIN_PATH_ENV = "COLOSIM_PLUGIN_PATH"
# plug-in files are imported as modules of this (virtual) package
PLUGIN_PACKAGE = "colosim_plugins"


def plugin_dirs() -> list[Path]:
    """The directories named by COLOSIM_PLUGIN_PATH, in order."""
    return [Path(p) for p in os.environ.get(PLUGIN_PATH_ENV, "").split(os.pathsep) if p]


class Plugins:
    """The plug-ins of one kind: modules of ``package`` (at ``path``) and
    ``<plugin dir>/<group>/*.py``."""

    def __init__(self, package: str, path, kind: str, group: str):
        self.package = package
        self.path = path
        self.kind = kind
        self.group = group
        self._own_names: list[str] | None = None

    def _files(self) -> dict[str, Path]:
        files: dict[str, Path] = {}
        for root in plugin_dirs():
            for p in sorted((root / self.group).glob("*.py")):
                if not p.name.startswith("_"):
                    files.setdefault(p.stem, p)
        return files

    def _own(self) -> list[str]:
        # the package's modules are the shipped files: listed once (every
        # simulate() looks its plug-ins up by name); the plug-in directories,
        # which a user may change between runs, are listed each time
        if self._own_names is None:
            self._own_names = [m.name for m in pkgutil.iter_modules(self.path)
                               if not m.name.startswith("_")]
        return self._own_names

    def available(self) -> list[str]:
        return sorted(set(self._own()) | set(self._files()))

    def module(self, name: str) -> ModuleType:
        """The plug-in module ``name``, with a clear error if it does not exist."""
        if name in self._own():
            return importlib.import_module(f"{self.package}.{name}")
        path = self._files().get(name)
        if path is None:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from: "
                             f"{', '.join(self.available())}")
        qualified = f"{PLUGIN_PACKAGE}.{self.group}.{name}"
        loaded = sys.modules.get(qualified)
        if loaded is not None and Path(loaded.__file__) == path:
            return loaded
        spec = importlib.util.spec_from_file_location(qualified, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
        return module
