"""Calibration profiles fitted by ``colosim calibrate``: YAML files that are
options of the ``calibration`` config group (scenarios/conf/calibration/).

A profile holds the cost model's keys (what the simulator reads) and a
``fit`` block (what a reader needs to trust them): every parameter's
1-sigma (``fixed`` for those the points could not move or the user fixed),
the residual of every point, chi2 and degrees of freedom, the host
fingerprint and the benchmark's metadata.  Reading and writing round-trip
exactly (tests/test_calibration_host.py).
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import yaml

from calibration.bench.common import git_commit
from calibration.fit import BASE_PARAMS, FitResult
from scenarios.config import CONF_DIR
from sim.costmodel import NAMES, PARAMS

PROFILE_DIR = CONF_DIR / "calibration"
# the cost-model keys a profile must have (sim/costmodel.py PARAMS)
REQUIRED_KEYS = ("name", *(p.name for p in PARAMS if p.required))


def profile_path(name_or_path: str) -> Path:
    """A bare name is an option of the calibration group; anything with a
    slash or a .yaml suffix is a file path."""
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        return Path(name_or_path)
    if not name_or_path.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"profile name {name_or_path!r}: use letters, digits, - and _")
    return PROFILE_DIR / f"{name_or_path}.yaml"


def _plain(v):
    """numpy scalars and tuples as YAML-friendly Python values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item"):
        return v.item()
    return v


def build_profile(name: str, result: FitResult, fingerprint: dict, bench: dict | None = None,
                  description: str | None = None, more_benches: tuple[str, ...] = ()) -> dict:
    """The profile of a fit; ``more_benches``: benchmarks beyond the fit's
    points that gave keys (the description names them)."""
    cost = result.cost_config()
    for k in BASE_PARAMS:
        cost[k] = round(cost[k], 1)
    for lv in cost["cache_levels"]:
        lv["ns_per_line"] = round(lv["ns_per_line"], 4)
    uncertainty = {k: ("fixed" if k in result.fixed else _round_sigma(result.sigma[k]))
                   for k in result.params}
    cpu = fingerprint.get("cpu_model") or fingerprint.get("model_name") or "this host"
    if description is None:
        kinds = {pt.kind for pt in result.points}
        benches = [b for b, of in (("ctx_switch", {"switch", "migration"}), ("wakeup", {"wakeup"}),
                                   ("timerwake", {"timer", "slack"})) if kinds & of]
        benches += list(more_benches)
        names = ", ".join(benches[:-1]) + " and " + benches[-1] if len(benches) > 1 \
            else "".join(benches)
        description = (f"Fitted by `colosim calibrate` on {cpu} "
                       f"({fingerprint.get('kernel', '?')}, {fingerprint.get('scheduler', '?')}) "
                       f"from the {names} microbenchmarks; see the fit block.")
    return _plain({
        "name": name,
        **cost,
        "description": description,
        "fit": {
            "method": "scipy least_squares on per-switch medians (calibration/fit.py)",
            "fitted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "uncertainty": uncertainty,
            "chi2": round(result.chi2, 3),
            "dof": result.dof,
            "notes": list(result.notes),
            "residuals": result.residual_rows(),
            "fingerprint": fingerprint,
            "bench": bench or {},
        },
    })


def _round_sigma(s: float) -> float:
    if not math.isfinite(s):
        return float("inf")
    return float(f"{s:.3g}")


def write_profile(path: Path, profile: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ("# Context-switch cost profile fitted by `colosim calibrate` (calibration/fit.py).\n"
              "# Do not edit by hand: re-run the command in the fit block's notes or\n"
              "# docs/calibration-host.md.  Use it with calibration=" + profile["name"] + ".\n")
    body = yaml.safe_dump(profile, sort_keys=False, default_flow_style=None, width=100)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(header + body)
    tmp.replace(path)
    return path


def read_profile(name_or_path: str) -> dict:
    path = profile_path(name_or_path)
    if not path.exists():
        known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"no calibration profile {path}; known profiles: "
                                f"{', '.join(known)}")
    data = yaml.safe_load(path.read_text())
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path} is not a calibration profile: missing {', '.join(missing)}")
    return data


def cost_params(profile: dict) -> dict:
    """The simulator's cost-model keys of a profile."""
    return {k: profile[k] for k in NAMES if k in profile}
