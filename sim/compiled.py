"""The compiled core: which modules Cython compiles, and how to run without.

The simulator's hot path (event loop, run queues, the machine, CFS, EEVDF
and LAGS) is plain Python, compiled by Cython when the package is built
(setup.py).  Each
compiled module ``x.py`` has a ``x.pxd`` next to it that declares its
classes' attribute types and its methods' argument types; the logic lives
only in the ``.py``, which stays importable and runnable as it is.

Safeguards, applied when ``sim`` is imported (``choose_finder``):

- ``COLOSIM_PURE_PYTHON=1`` in the environment imports the ``.py`` sources
  even where a compiled module exists (for debuggers, coverage, and the test
  that checks both give identical results).
- A compiled module older than its ``.py`` or ``.pxd`` would silently run old
  code, so importing it fails, naming the file and the command that rebuilds
  it.
- A core compiled only in part cannot run (its compiled modules need each
  other's C types), so then every module comes from its source, with a
  warning.

This module imports only the standard library: setup.py reads
``COMPILED_MODULES`` from it before anything is installed.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

# dotted names, in dependency order (a module's .pxd cimports earlier ones)
COMPILED_MODULES = (
    "sim.heap",
    "sim.engine",
    "sim.rq",
    "sim.task",
    "sim.sched_class",
    "sim.costmodel",
    "sim.rt",
    "sim.machine",
    "sim.recorder",
    "sim.workloads.common",
    "sim.workloads.hashd",
    "policies.kernel.cfs",
    "policies.kernel.eevdf",
    "policies.kernel.lags",
)

PURE_ENV = "COLOSIM_PURE_PYTHON"
REBUILD_HINT = "make build  (or: python setup.py build_ext --inplace)"
ROOT = Path(__file__).resolve().parent.parent


def source_files(module: str) -> tuple[Path, Path]:
    """The .py and .pxd of a compiled module."""
    base = ROOT.joinpath(*module.split("."))
    return base.with_suffix(".py"), base.with_suffix(".pxd")


def compiled_file(module: str) -> Path | None:
    """The extension module built in place for ``module``, if any."""
    base = ROOT.joinpath(*module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.exists():
            return path
    return None


def pure_python() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def is_compiled(module: str) -> bool:
    """Whether ``module`` (imported) runs compiled code."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    return not str(getattr(mod, "__file__", "")).endswith(".py")


class _SourceFinder:
    """Finds the .py of a compiled module (COLOSIM_PURE_PYTHON=1)."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname not in COMPILED_MODULES:
            return None
        py, _ = source_files(fullname)
        return importlib.util.spec_from_file_location(fullname, py)


class _StaleGuard:
    """Refuses a compiled module older than its sources."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname not in COMPILED_MODULES:
            return None
        built = compiled_file(fullname)
        if built is None:
            return None
        mtime = built.stat().st_mtime
        for src in source_files(fullname):
            if src.exists() and src.stat().st_mtime > mtime:
                raise ImportError(
                    f"{built.name} is older than {src.relative_to(ROOT)}: the compiled "
                    f"module would run old code.  Rebuild it with `{REBUILD_HINT}`, or "
                    f"set {PURE_ENV}=1 to run the Python sources.")
        return None


def choose_finder():
    """The finder for this environment: the sources' (COLOSIM_PURE_PYTHON set,
    or a core compiled only in part) or the stale-module guard."""
    if pure_python():
        return _SourceFinder
    built = [m for m in COMPILED_MODULES if compiled_file(m) is not None]
    if built and len(built) < len(COMPILED_MODULES):
        missing = sorted(set(COMPILED_MODULES) - set(built))
        warnings.warn(f"the compiled core is incomplete (no compiled {', '.join(missing)}); "
                      f"running the Python sources.  Rebuild with `{REBUILD_HINT}`.",
                      RuntimeWarning, stacklevel=3)
        return _SourceFinder
    return _StaleGuard


def install() -> None:
    """Put the chosen finder in front of the import system."""
    finder = choose_finder()
    if not any(f is finder for f in sys.meta_path):
        sys.meta_path.insert(0, finder)
