"""Fit the context-switch cost model (sim/costmodel.py) to the
microbenchmarks of calibration/bench (``ctx_switch.parquet``).

Points.  Every configuration of the benchmark gives many timed batches of
round trips; a configuration's value is the median ns per round trip (robust
to the occasional tick or hog slice inside a batch), its standard error
1.2533 x 1.4826 MAD / sqrt(n).  As lmbench does, the switch cost is what a
round trip costs beyond the same work without switching:

    switch    = (pingpong - overhead) / 2          two switches per round trip
    migration = (migrate - migrate_ref) / 2        two migrated switches per round trip

Model.  On one CPU the simulator charges each switch of the pair (the
incoming partner B after A blocks; sim/machine.py schedule())

    c0 = direct + per_level x levels + queue_ns_per_log2 x log2(1 + busy)
    R  = L x refill_ns_per_line x (1 - exp(-away / cache_decay)),
         L = min(ws, max_refill_bytes) / line,  away = hop + c0 + R

where ``hop`` is the partner's work between the two switches (half the
overhead round trip: the pipe calls and one warm pass over its working
set), and ``away`` is a fixed point because B was away for A's switch-in
(its own refill included) and A's hop.  The migrated partner's cache is
gone whatever the time away, so ``migration = migration_ns + L x r - R``.
tests/test_calibration_host.py checks these formulas against the simulator
running the same benchmark (sim/workloads/pingpong.py), which is what the
recovery test then fits.

Fitting.  scipy least squares on residuals scaled by each point's error; a
point's error is its standard error floored at ``rel_floor`` of its value
(and ``abs_floor_ns``): batches of one run agree far better than runs of
one day do, and the floor keeps a handful of very tight points from
deciding every parameter.  The parameters' 1-sigma come from the Jacobian
at the solution, inflated by sqrt(chi2/dof) when the scatter exceeds the
errors.  max_refill_bytes and cache_decay_ns are fitted in log space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

# name -> (initial value, lower, upper, log-scaled)
PARAMS = {
    "direct_ns": (3000.0, 0.0, 200_000.0, False),
    "per_level_ns": (500.0, 0.0, 50_000.0, False),
    "queue_ns_per_log2": (200.0, 0.0, 50_000.0, False),
    "migration_ns": (5000.0, 0.0, 1_000_000.0, False),
    "refill_ns_per_line": (2.0, 0.0, 1000.0, False),
    "max_refill_bytes": (float(4 << 20), float(16 << 10), float(4 << 30), True),
    "cache_decay_ns": (100_000.0, 100.0, 10e9, True),
}
LINE_BYTES = 64
REL_FLOOR = 0.02
ABS_FLOOR_NS = 20.0


@dataclass(frozen=True)
class Point:
    """One fitted quantity: a per-switch cost measured in one configuration."""
    kind: str            # "switch" or "migration"
    levels: int
    busy_cgroups: int
    ws_bytes: int
    hop_ns: float        # the partner's work between switches (overhead / 2)
    value_ns: float
    se_ns: float
    n: int

    @property
    def label(self) -> str:
        return (f"{self.kind} levels={self.levels} busy={self.busy_cgroups} "
                f"ws={_size(self.ws_bytes)}")


@dataclass
class FitResult:
    params: dict[str, float]
    sigma: dict[str, float]
    fixed: dict[str, float]
    points: list[Point]
    model_ns: list[float]
    errors_ns: list[float]
    chi2: float
    dof: int
    line_bytes: int = LINE_BYTES
    notes: list[str] = field(default_factory=list)

    def residual_rows(self) -> list[dict]:
        return [{"point": p.label, "kind": p.kind, "levels": p.levels,
                 "busy_cgroups": p.busy_cgroups, "ws_bytes": p.ws_bytes,
                 "measured_ns": round(p.value_ns, 1), "model_ns": round(m, 1),
                 "error_ns": round(e, 1), "scaled": round((m - p.value_ns) / e, 2), "n": p.n}
                for p, m, e in zip(self.points, self.model_ns, self.errors_ns)]


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _median_se(x: np.ndarray) -> tuple[float, float]:
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med))) * 1.4826
    return med, 1.2533 * mad / math.sqrt(len(x))


def config_medians(table: pa.Table) -> dict[tuple, tuple[float, float, int]]:
    """(experiment, levels, busy_cgroups, ws_bytes) -> (median ns per round
    trip, its standard error, number of batches)."""
    cols = {c: table.column(c).to_numpy(zero_copy_only=False)
            for c in ("experiment", "levels", "busy_cgroups", "ws_bytes", "rounds", "elapsed_ns")}
    per_round = cols["elapsed_ns"].astype(float) / cols["rounds"].astype(float)
    keys = list(zip(cols["experiment"], cols["levels"].astype(int),
                    cols["busy_cgroups"].astype(int), cols["ws_bytes"].astype(int)))
    groups: dict[tuple, list[float]] = {}
    for k, v in zip(keys, per_round):
        groups.setdefault(tuple(k), []).append(v)
    out = {}
    for k, vals in groups.items():
        med, se = _median_se(np.asarray(vals))
        out[k] = (med, se, len(vals))
    return out


def points_from_bench(table: pa.Table) -> list[Point]:
    """The switch and migration points of a ctx_switch.parquet table."""
    med = config_medians(table)
    overhead = {ws: v for (exp, _, _, ws), v in med.items() if exp == "overhead"}
    points = []
    for (exp, levels, busy, ws), (m, se, n) in sorted(med.items()):
        if ws not in overhead:
            continue
        ov, ov_se, _ = overhead[ws]
        hop = ov / 2
        if exp == "pingpong":
            points.append(Point("switch", levels, busy, ws, hop, (m - ov) / 2,
                                math.hypot(se, ov_se) / 2, n))
        elif exp == "migrate":
            ref = med.get(("migrate_ref", levels, busy, ws))
            if ref is not None:
                points.append(Point("migration", levels, busy, ws, hop, (m - ref[0]) / 2,
                                    math.hypot(se, ref[1]) / 2, n))
    if not points:
        raise ValueError("no pingpong/overhead pairs in the table: nothing to fit")
    return points


def refill_ns(p: dict, ws_bytes: int, away_ns: float) -> float:
    lines = min(ws_bytes, p["max_refill_bytes"]) / LINE_BYTES
    return lines * p["refill_ns_per_line"] * -math.expm1(-away_ns / p["cache_decay_ns"])


def predict(p: dict, pt: Point) -> float:
    """Per-switch cost the simulator charges in the point's configuration."""
    c0 = p["direct_ns"] + p["per_level_ns"] * pt.levels
    if pt.busy_cgroups:
        c0 += p["queue_ns_per_log2"] * math.log2(1 + pt.busy_cgroups)
    # R = f(hop + c0 + R): a contraction (f' = r L e^(-away/tau) / tau < 1 in
    # practice); a few iterations converge far below a nanosecond
    r = 0.0
    for _ in range(60):
        nxt = refill_ns(p, pt.ws_bytes, pt.hop_ns + c0 + r)
        if abs(nxt - r) < 1e-3:
            r = nxt
            break
        r = nxt
    if pt.kind == "migration":
        full = min(pt.ws_bytes, p["max_refill_bytes"]) / LINE_BYTES * p["refill_ns_per_line"]
        return p["migration_ns"] + full - r
    return c0 + r


def _errors(points: list[Point], rel_floor: float, abs_floor: float) -> np.ndarray:
    return np.array([max(pt.se_ns, rel_floor * abs(pt.value_ns), abs_floor) for pt in points])


def fit(points: list[Point], fixed: dict[str, float] | None = None,
        rel_floor: float = REL_FLOOR, abs_floor_ns: float = ABS_FLOOR_NS) -> FitResult:
    from scipy.optimize import least_squares

    fixed = dict(fixed or {})
    unknown = set(fixed) - set(PARAMS)
    if unknown:
        raise ValueError(f"cannot fix {sorted(unknown)}: parameters are {', '.join(PARAMS)}")
    notes = []
    # a parameter no point can move is fixed at its initial value, and said so
    kinds = {pt.kind for pt in points}
    if not any(pt.busy_cgroups for pt in points):
        fixed.setdefault("queue_ns_per_log2", 0.0)
    if not any(pt.levels for pt in points):
        fixed.setdefault("per_level_ns", 0.0)
    if "migration" not in kinds:
        fixed.setdefault("migration_ns", PARAMS["migration_ns"][0])
    if not any(pt.ws_bytes for pt in points):
        for k in ("refill_ns_per_line", "max_refill_bytes", "cache_decay_ns"):
            fixed.setdefault(k, PARAMS[k][0])
    for k in fixed:
        notes.append(f"{k} fixed at {fixed[k]:g}")
    free = [k for k in PARAMS if k not in fixed]
    err = _errors(points, rel_floor, abs_floor_ns)
    values = np.array([pt.value_ns for pt in points])

    def unpack(x):
        p = dict(fixed)
        for k, v in zip(free, x):
            p[k] = math.exp(v) if PARAMS[k][3] else v
        return p

    def resid(x):
        p = unpack(x)
        return (np.array([predict(p, pt) for pt in points]) - values) / err

    def enc(v, k):
        return math.log(v) if PARAMS[k][3] else v
    x0 = np.array([enc(PARAMS[k][0], k) for k in free])
    lo = np.array([enc(PARAMS[k][1], k) for k in free])
    hi = np.array([enc(PARAMS[k][2], k) for k in free])
    best = None
    # the refill terms make the problem non-convex: start from a few decay times
    starts = [x0]
    if "cache_decay_ns" in free:
        i = free.index("cache_decay_ns")
        for tau in (1e3, 1e5, 1e7):
            s = x0.copy()
            s[i] = math.log(tau)
            starts.append(s)
    for s in starts:
        r = least_squares(resid, s, bounds=(lo, hi), x_scale="jac", method="trf")
        if best is None or r.cost < best.cost:
            best = r
    p = unpack(best.x)
    model = [predict(p, pt) for pt in points]
    chi2 = float(np.sum(best.fun ** 2))
    dof = max(len(points) - len(free), 1)
    sigma = _sigma(best.jac, best.x, free, chi2, dof)
    return FitResult({k: float(p[k]) for k in PARAMS}, sigma, fixed, points, model,
                     list(err), chi2, dof, notes=notes)


def _sigma(jac, x, free, chi2, dof) -> dict[str, float]:
    """1-sigma per free parameter, in its own units (log-scaled ones through
    the derivative of exp); inf where the points do not determine it."""
    jtj = jac.T @ jac
    try:
        cov = np.linalg.pinv(jtj, rcond=1e-12)
    except np.linalg.LinAlgError:
        cov = np.full(jtj.shape, np.inf)
    scale = max(1.0, chi2 / dof)
    out = {}
    for i, k in enumerate(free):
        var = cov[i, i] * scale
        if not np.isfinite(var) or var < 0 or np.allclose(jac[:, i], 0):
            out[k] = float("inf")
            continue
        s = math.sqrt(var)
        out[k] = math.exp(x[i]) * s if PARAMS[k][3] else s
    return out
