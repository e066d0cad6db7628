"""Tests of optional extras (ray, slurm): `make test` installs both (its
launchers stamp), so in CI a missing extra is a failure, not a skip."""
from __future__ import annotations

import importlib
import os

import pytest

# launcher sweeps in these tests: tiny runs, so process start-up dominates
LAUNCHER_BASE = ["host=this-vm", "duration_s=1", "warmup_s=0.2", "workload.functions=2",
                 "workload.rate_rps=20"]


def require_extra(extra: str, *modules: str) -> list:
    """Import ``modules`` or skip the calling test module (outside CI)."""
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as err:
        if os.environ.get("CI", "") not in ("", "0", "false"):
            raise
        pytest.skip(f"the {extra} extra is not installed ({err}); pip install -e '.[{extra}]'",
                    allow_module_level=True)
