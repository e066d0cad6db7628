"""Calibration microbenchmarks (issue 8; docs/microbenchmarks.md).

Each benchmark writes ``<out>/<bench>.parquet`` of raw samples with the
host fingerprint and its parameters in the schema metadata
(:func:`calibration.bench.common.read_bench` reads them back), and runs
alone as ``python -m calibration.bench.<bench> --out DIR [--quick]``;
``python -m calibration.bench --out DIR [--quick]`` runs them all.

``BENCHES`` ({name: module}) is imported on first use, so that
``python -m calibration.bench.<bench>`` does not import its own module twice.
"""
from __future__ import annotations

import importlib

from calibration.bench.common import BenchUnavailable, check_host, say

NAMES = ("ctx_switch", "density", "wakeup", "throttle", "dispatch", "timerwake", "loadgen",
         "driver", "kthreads", "rcu", "rtapp_loop", "idle_exit")
# measured where the host has what they drive (rt-app), skipped with the reason otherwise
OPTIONAL = ("rtapp_loop",)


def __getattr__(name: str):
    if name == "BENCHES":
        return {n: importlib.import_module(f"calibration.bench.{n}") for n in NAMES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_all(out_dir, quick: bool = False, progress=None) -> dict:
    """Every benchmark in turn; {name: pyarrow.Table}.  Refuses (BenchUnavailable
    naming what is missing) before running any of them; an ``OPTIONAL`` one
    this host cannot run is left out, saying why."""
    check_host()
    tables = {}
    for name, mod in __getattr__("BENCHES").items():
        try:
            tables[name] = mod.run(out_dir, quick=quick, progress=progress)
        except BenchUnavailable as e:
            if name not in OPTIONAL:
                raise
            say(progress, f"{name} skipped: {e}")
    return tables
