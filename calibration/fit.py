"""Fit the context-switch cost model (sim/costmodel.py) to the
microbenchmarks of calibration/bench (``ctx_switch.parquet``,
``wakeup.parquet`` and ``timerwake.parquet``).

Points.  Every configuration of the benchmark gives many timed batches of
round trips; its value in one sweep is the median ns per round trip (robust
to the occasional tick or hog slice inside a batch), with standard error
1.2533 x 1.4826 MAD / sqrt(n).  The sweep is repeated (calibration/bench/
ctx_switch.py): the point is the mean of the repeats' medians, its error
the standard error of that mean, because medians move between runs minutes
apart far more than batches scatter within one.  As lmbench does, the switch cost is what a
round trip costs beyond the same work without switching:

    switch    = (pingpong - overhead) / 2          two switches per round trip
    migration = (migrate - migrate_ref) / 2        two migrated switches per round trip
    wakeup    = median lateness of a timer wake-up on an idle CPU
    timer     = the same with the CPU busy: an RT sleeper beside a hog
    slack     = a SCHED_OTHER sleeper's lateness at the default timer slack
                minus at 1 ns, both beside a hog, per sweep

Model.  On one CPU the simulator charges each switch of the pair (the
incoming partner B after A blocks; sim/machine.py schedule())

    direct + per_level x levels + queue_ns_per_log2 x log2(1 + busy)
      + sum over cache levels k, holding h_k = min(ws, C_k):
            h_k / line x r_k x clip((h_k + ws - C_k) / h_k, 0, 1)

because while B was away its partner touched its own ws bytes (the
stack-distance refill model of sim/costmodel.py; r_k and the effective
capacity C_k fitted, C_k between a sixteenth of the sysfs size and that
size).  A migrated partner finds its private levels empty, so
``migration = migration_ns + sum over private k of h_k / line x r_k x
(1 - evicted_k) + idle_exit_ns / 2`` (once a round trip the pair
lands on the CPU it left idle).  A timer wake-up on an idle CPU costs the
switch out of idle, ``direct + per_level x depth + idle_exit(period)`` (the
idle exit includes the interrupt; its growth with the idle time,
``idle_exit_cold_ns`` and ``idle_exit_decay_ns``, is no point's here: the
idle_exit benchmark's ladder gives it, and then idle_exit_ns too, and these
points become checks, calibration/calibrate.py); on a busy CPU the hrtimer interrupt and the
wakee's preemption of the hog, ``timer_irq_ns + direct + per_level x depth
+ queue_ns_per_log2``; the slack point is ``timer_slack_ns``.  So each
timer parameter has its own point, and the others fit as without them.
``predict`` does not restate them: it evaluates the simulator's own
CostModel at float parameters (``switch_cost(..., whole_ns=False)``), the
migration point as a migrated switch minus an unmigrated one.
tests/test_calibration_host.py checks these formulas against the simulator
running the same benchmark (sim/workloads/pingpong.py), which is what the
recovery test then fits.

Fitting.  scipy least squares within the bounds, on residuals scaled by
each point's error, from a grid of starting capacities (they put kinks in
the model); a point's error
is its standard error floored at ``rel_floor`` of its value (and
``abs_floor_ns``): batches of one run agree far better than runs of one day
do, and the floor keeps a handful of very tight points from deciding every
parameter.  The parameters' 1-sigma come from the Jacobian at the solution,
inflated by sqrt(chi2/dof) when the scatter exceeds the errors.  A
parameter no point can move is fixed (at 0, or the literature's migration
cost) and said so.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sim.costmodel import SPREAD_QUANTILES, CostModel

# name -> (initial value, lower, upper)
BASE_PARAMS = {
    "direct_ns": (3000.0, 0.0, 200_000.0),
    "per_level_ns": (500.0, 0.0, 50_000.0),
    "queue_ns_per_log2": (200.0, 0.0, 50_000.0),
    "migration_ns": (5000.0, 0.0, 1_000_000.0),
    "idle_exit_ns": (0.0, 0.0, 1_000_000.0),
    # the idle exit's growth with the idle time: no point here measures it;
    # given from the idle_exit benchmark's ladder (calibrate), else off
    "idle_exit_cold_ns": (0.0, 0.0, 1_000_000.0),
    "idle_exit_decay_ns": (1.0, 1.0, 1e9),
    "timer_irq_ns": (0.0, 0.0, 1_000_000.0),
    "timer_slack_ns": (0.0, 0.0, 1_000_000.0),
}
REFILL_BOUNDS = (2.0, 0.0, 1000.0)          # ns per line refilled into a level
LINE_BYTES = 64
REL_FLOOR = 0.02
ABS_FLOOR_NS = 20.0
# a parameter no point moves is held here (literature's migration cost, else 0)
UNMOVED = {"migration_ns": 5000.0, "idle_exit_decay_ns": 1.0}


@dataclass(frozen=True)
class CacheLevel:
    name: str            # L1d, L2, L3 as in sysfs
    bytes: int
    shared: bool         # shared by every CPU (the LLC): migrations do not empty it

    @property
    def param(self) -> str:
        return f"{self.name}_ns_per_line"

    @property
    def capacity(self) -> str:
        """The effective capacity's parameter (at most the sysfs size)."""
        return f"{self.name}_bytes"


def cache_levels(caches: dict[str, int]) -> list[CacheLevel]:
    """Data and unified levels from the benchmark's sysfs cache sizes,
    smallest first; the last (the LLC) is shared."""
    names = sorted((n for n in caches if not n.endswith("i")), key=lambda n: (caches[n], n))
    return [CacheLevel(n, int(caches[n]), i == len(names) - 1 and len(names) > 1)
            for i, n in enumerate(names)]


def param_names(levels: list[CacheLevel]) -> list[str]:
    return [*BASE_PARAMS, *(lv.param for lv in levels), *(lv.capacity for lv in levels)]


def _bounds(levels: list[CacheLevel]) -> dict[str, tuple[float, float, float]]:
    """(initial, lower, upper) per parameter; a level's effective capacity
    lies between a sixteenth of its sysfs size and that size."""
    out = {**BASE_PARAMS, **{lv.param: REFILL_BOUNDS for lv in levels}}
    for lv in levels:
        out[lv.capacity] = (lv.bytes * 0.75, lv.bytes / 16, float(lv.bytes))
    return out


@dataclass(frozen=True)
class Point:
    """One fitted quantity measured in one configuration."""
    kind: str            # "switch", "migration", "wakeup", "timer_idle", "timer", "slack"
    levels: int          # cgroup levels walked (wakeup: the sleeper's depth)
    busy_cgroups: int
    ws_bytes: int
    value_ns: float
    se_ns: float
    n: int
    idle_ns: int = 0     # wakeup, timer_idle: how long the CPU was idle (the period)

    @property
    def label(self) -> str:
        if self.kind == "wakeup":
            return f"wakeup idle depth={self.levels}"
        if self.kind == "timer_idle":
            return f"timerwake idle depth={self.levels}"
        if self.kind == "timer":
            return f"timerwake busy depth={self.levels}"
        if self.kind == "slack":
            return "timerwake slack"
        return (f"{self.kind} levels={self.levels} busy={self.busy_cgroups} "
                f"ws={_size(self.ws_bytes)}")


@dataclass
class FitResult:
    params: dict[str, float]
    sigma: dict[str, float]
    fixed: dict[str, float]
    levels: list[CacheLevel]
    points: list[Point]
    model_ns: list[float]
    errors_ns: list[float]
    chi2: float
    dof: int
    notes: list[str] = field(default_factory=list)

    def residual_rows(self) -> list[dict]:
        return [{"point": p.label, "kind": p.kind, "levels": p.levels,
                 "busy_cgroups": p.busy_cgroups, "ws_bytes": p.ws_bytes,
                 "measured_ns": round(p.value_ns, 1), "model_ns": round(m, 1),
                 "error_ns": round(e, 1), "scaled": round((m - p.value_ns) / e, 2), "n": p.n}
                for p, m, e in zip(self.points, self.model_ns, self.errors_ns)]

    def cost_config(self) -> dict:
        """The fitted values as the simulator's calibration keys."""
        p = self.params
        return {"direct_ns": p["direct_ns"], "per_level_ns": p["per_level_ns"],
                "migration_ns": p["migration_ns"], "queue_ns_per_log2": p["queue_ns_per_log2"],
                "idle_exit_ns": p["idle_exit_ns"], "idle_exit_cold_ns": p["idle_exit_cold_ns"],
                "idle_exit_decay_ns": p["idle_exit_decay_ns"], "timer_irq_ns": p["timer_irq_ns"],
                "timer_slack_ns": p["timer_slack_ns"],
                # the time-decay form is not what the benchmark shows: off
                "refill_ns_per_line": 0.0, "max_refill_bytes": 0, "cache_decay_ns": 1,
                "cache_line_bytes": LINE_BYTES,
                "cache_levels": [{"name": lv.name, "bytes": int(round(p[lv.capacity])),
                                  "ns_per_line": p[lv.param], "shared": lv.shared}
                                 for lv in self.levels]}


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
    """(experiment, levels, busy_cgroups, ws_bytes) -> (ns per round trip,
    its standard error, number of batches).  With repeated sweeps (column
    ``repeat``) the value is the mean of the repeats' medians and the error
    their standard error, or the batches' if larger."""
    cols = {c: table.column(c).to_numpy(zero_copy_only=False)
            for c in ("experiment", "levels", "busy_cgroups", "ws_bytes", "rounds", "elapsed_ns")}
    per_round = cols["elapsed_ns"].astype(float) / cols["rounds"].astype(float)
    repeat = (table.column("repeat").to_numpy(zero_copy_only=False).astype(int)
              if "repeat" in table.column_names else np.zeros(table.num_rows, int))
    keys = zip(cols["experiment"], cols["levels"].astype(int),
               cols["busy_cgroups"].astype(int), cols["ws_bytes"].astype(int))
    groups: dict[tuple, dict[int, list[float]]] = {}
    for k, r, v in zip(keys, repeat, per_round):
        groups.setdefault(tuple(k), {}).setdefault(int(r), []).append(v)
    out = {}
    for k, reps in groups.items():
        meds = [_median_se(np.asarray(v)) for v in reps.values()]
        values = np.array([m for m, _ in meds])
        se = math.sqrt(sum(s * s for _, s in meds)) / len(meds)
        if len(meds) > 1:
            se = max(se, float(values.std(ddof=1)) / math.sqrt(len(meds)))
        out[k] = (float(values.mean()), se, sum(len(v) for v in reps.values()))
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
        if exp == "pingpong":
            points.append(Point("switch", levels, busy, ws, (m - ov) / 2,
                                math.hypot(se, ov_se) / 2, n))
        elif exp == "migrate":
            ref = med.get(("migrate_ref", levels, busy, ws))
            if ref is not None:
                points.append(Point("migration", levels, busy, ws, (m - ref[0]) / 2,
                                    math.hypot(se, ref[1]) / 2, n))
    if not points:
        raise ValueError("no pingpong/overhead pairs in the table: nothing to fit")
    return points


def wakeup_point(table: pa.Table, depth: int) -> Point | None:
    """The idle-CPU wake-up point of a wakeup.parquet table (busy_cgroups 0)."""
    busy = table.column("busy_cgroups").to_numpy(zero_copy_only=False)
    late = table.column("lateness_ns").to_numpy(zero_copy_only=False).astype(float)[busy == 0]
    if late.size < 10:
        return None
    med, se = _median_se(late)
    period = table.column("period_ns").to_numpy(zero_copy_only=False)[busy == 0]
    return Point("wakeup", depth, 0, 0, med, se, int(late.size), int(np.median(period)))


def _sweep_medians(values: np.ndarray, repeat: np.ndarray) -> np.ndarray:
    """The median of each sweep (repeat), in order."""
    return np.array([np.median(values[repeat == r]) for r in np.unique(repeat)])


def quiet_sweeps(table: pa.Table) -> pa.Table:
    """The rows of the timerwake sweeps (repeats) in which no configuration
    was measured on a disturbed host (``host_disturbed``; tables written
    before the benchmark measured it have no such column and are taken
    whole).  ValueError if every sweep was disturbed."""
    if "host_disturbed" not in table.column_names:
        return table
    repeat = table.column("repeat").to_numpy()
    bad = np.unique(repeat[table.column("host_disturbed").to_numpy(zero_copy_only=False)])
    keep = ~np.isin(repeat, bad)
    if not keep.any():
        raise ValueError(f"timerwake: all {np.unique(repeat).size} sweeps were measured on a "
                         "disturbed host (steal or other load above the real backend's "
                         "disturbed_* bounds): run the benchmark again on a quiet host")
    return table.filter(pa.array(keep))


def timer_points(table: pa.Table, depth: int) -> list[Point]:
    """The points of a timerwake.parquet table (calibration/bench/
    timerwake.py): per sweep the median lateness, their mean over the
    sweeps, its error the sweeps' standard error (or a sweep's own, if
    larger); the slack point pairs each sweep's two medians.  Sweeps
    measured on a disturbed host are left out (``quiet_sweeps``)."""
    table = quiet_sweeps(table)
    cols = {c: table.column(c).to_numpy(zero_copy_only=False)
            for c in ("repeat", "sleeper", "load", "kind", "lateness_ns", "period_ns")}
    wake = cols["kind"] == "wake"

    def per_sweep(sleeper: str, load: str) -> tuple[np.ndarray, float, int]:
        sel = wake & (cols["sleeper"] == sleeper) & (cols["load"] == load)
        late = cols["lateness_ns"][sel].astype(float)
        return (_sweep_medians(late, cols["repeat"][sel]),
                max(_median_se(late[cols["repeat"][sel] == r])[1]
                    for r in np.unique(cols["repeat"][sel])), int(late.size))

    def point(kind: str, meds: np.ndarray, se_one: float, n: int) -> Point:
        se = se_one if meds.size < 2 else max(se_one, float(meds.std(ddof=1))
                                              / math.sqrt(meds.size))
        idle_ns = int(np.median(cols["period_ns"][wake])) if kind == "timer_idle" else 0
        return Point(kind, depth, 1 if kind != "timer_idle" else 0, 0, float(meds.mean()), se, n,
                     idle_ns)

    idle, idle_se, idle_n = per_sweep("other-1ns", "idle")
    busy, busy_se, busy_n = per_sweep("fifo-50us", "same")
    slack, slack_se, slack_n = per_sweep("other-50us", "same")
    tight, tight_se, tight_n = per_sweep("other-1ns", "same")
    return [point("timer_idle", idle, idle_se, idle_n), point("timer", busy, busy_se, busy_n),
            point("slack", slack - tight, math.hypot(slack_se, tight_se), slack_n + tight_n)]


def spread(ratios: np.ndarray) -> list[float]:
    """A cost's spread (sim/costmodel.py ``SPREAD_QUANTILES``) from its
    samples' ratios to their configuration's median: the pooled ratios'
    quantiles, the ends at their 1st and 99th percentiles, over their median
    (which is then exactly 1)."""
    ratios = np.asarray(ratios, float)
    q = np.quantile(ratios, np.clip(SPREAD_QUANTILES, 0.01, 0.99)) / np.median(ratios)
    return [round(float(x), 3) for x in q]


def timer_irq_spread(table: pa.Table, switch_ns: float) -> list[float] | None:
    """``timer_irq_spread`` from the timer point's wake-ups (the SCHED_FIFO
    sleeper beside the hog it preempts, quiet sweeps): each one's lateness
    less the switch (``switch_ns``), over its sweep's median of the same;
    None with fewer than 100 wake-ups."""
    df = quiet_sweeps(table).to_pandas()
    df = df[(df.kind == "wake") & (df.sleeper == "fifo-50us") & (df.load == "same")]
    if len(df) < 100:
        return None
    irq = (df.lateness_ns - switch_ns).clip(lower=1.0)
    return spread(irq / irq.groupby(df.repeat).transform("median"))


def work_after_sleep(table: pa.Table) -> dict[str, float]:
    """Per load, the median wall time of the fixed work right after a
    sleep over the same work run back to back, minus 1 (the timerwake
    benchmark's work rows): what a sleep costs the work that follows;
    undisturbed sweeps only (``quiet_sweeps``)."""
    table = quiet_sweeps(table)
    cols = {c: table.column(c).to_numpy(zero_copy_only=False)
            for c in ("kind", "load", "work_wall_ns")}
    out = {}
    for load in sorted(set(cols["load"][cols["kind"] == "work"].tolist())):
        sel = cols["load"] == load
        after = cols["work_wall_ns"][sel & (cols["kind"] == "work")].astype(float)
        hot = cols["work_wall_ns"][sel & (cols["kind"] == "hot")].astype(float)
        out[load] = float(np.median(after) / np.median(hot) - 1)
    return out


def cost_model(p: dict, levels: list[CacheLevel]) -> CostModel:
    """The simulator's cost model at the fit's parameters ``p``, costs and
    capacities as floats (nothing truncated); the time form is off."""
    return CostModel("fit", **{k: p[k] for k in BASE_PARAMS}, cache_line_bytes=LINE_BYTES,
                     cache_levels=[(p[lv.capacity], p[lv.param], lv.shared) for lv in levels])


def predict(p: dict, pt: Point, levels: list[CacheLevel]) -> float:
    """Per-switch cost the simulator charges in the point's configuration,
    evaluated by its cost model without truncation to whole ns."""
    model = cost_model(p, levels)
    if pt.kind in ("wakeup", "timer_idle"):
        # the switch out of idle to the timer's sleeper (no working set)
        return model.switch_cost(pt.levels, 0, 0, False, 1, from_idle=True, whole_ns=False,
                                 idle_ns=pt.idle_ns)
    if pt.kind == "timer":
        # the interrupt on the hog's CPU, then the RT sleeper preempts it:
        # the hog's hierarchy walked, two tasks runnable
        return model.timer_irq_ns + model.switch_cost(pt.levels, 0, 0, False, 2,
                                                      whole_ns=False)
    if pt.kind == "slack":
        return model.timer_slack_ns

    def partner(migrated: bool, from_idle: bool = False) -> float:
        # the incoming partner: while it was away the other touched its own
        # ws, and 1 + busy tasks are runnable on the CPU
        return model.switch_cost(pt.levels, pt.ws_bytes, 1, migrated, 1 + pt.busy_cgroups,
                                 pt.ws_bytes, pt.ws_bytes, from_idle=from_idle, whole_ns=False)

    if pt.kind == "migration":
        # a migrated switch beyond the reference's unmigrated one; each round
        # trip the pair lands once on the CPU it left idle
        return (partner(True, True) + partner(True)) / 2 - partner(False)
    return partner(False)


def _errors(points: list[Point], rel_floor: float, abs_floor: float) -> np.ndarray:
    return np.array([max(pt.se_ns, rel_floor * abs(pt.value_ns), abs_floor) for pt in points])


def _unmoved(points: list[Point], levels: list[CacheLevel]) -> list[str]:
    """Parameters no point can move."""
    kinds = {pt.kind for pt in points}
    out = []
    if not any(pt.busy_cgroups for pt in points):
        out.append("queue_ns_per_log2")
    if not any(pt.levels for pt in points):
        out.append("per_level_ns")
    if "migration" not in kinds:
        out.append("migration_ns")
    if not kinds & {"wakeup", "timer_idle"}:
        out.append("idle_exit_ns")
    out += ["idle_exit_cold_ns", "idle_exit_decay_ns"]
    if "timer" not in kinds:
        out.append("timer_irq_ns")
    if "slack" not in kinds:
        out.append("timer_slack_ns")
    for lv in levels:
        # a level is measured by pairs of working sets that can overflow it
        if not any(pt.kind in ("switch", "migration") and 2 * pt.ws_bytes > lv.bytes / 16
                   for pt in points):
            out += [lv.param, lv.capacity]
    return out


def fit(points: list[Point], levels: list[CacheLevel], fixed: dict[str, float] | None = None,
        rel_floor: float = REL_FLOOR, abs_floor_ns: float = ABS_FLOOR_NS) -> FitResult:
    from scipy.optimize import least_squares

    names = param_names(levels)
    bounds = _bounds(levels)
    fixed = dict(fixed or {})
    unknown = set(fixed) - set(names)
    if unknown:
        raise ValueError(f"cannot fix {sorted(unknown)}: parameters are {', '.join(names)}")
    notes = [f"{k} fixed at {v:g} (given)" for k, v in fixed.items()]
    for k in _unmoved(points, levels):
        if k not in fixed:
            fixed[k] = UNMOVED.get(k, bounds[k][2] if k.endswith("_bytes") else 0.0)
            notes.append(f"{k} fixed at {fixed[k]:g}: no point measures it")
    free = [k for k in names if k not in fixed]
    err = _errors(points, rel_floor, abs_floor_ns)
    values = np.array([pt.value_ns for pt in points])
    logs = {k for k in free if k.endswith("_bytes")}

    def enc(k, v):
        return math.log(v) if k in logs else v

    def unpack(x):
        return {**fixed, **{k: math.exp(v) if k in logs else v for k, v in zip(free, x)}}

    def resid(x):
        p = unpack(x)
        return (np.array([predict(p, pt, levels) for pt in points]) - values) / err

    lo = np.array([enc(k, bounds[k][1]) for k in free])
    hi = np.array([enc(k, bounds[k][2]) for k in free])
    # capacities put kinks in the residuals: start from every combination of
    # a few capacities per level and keep the best
    grids = [[bounds[k][1] * (bounds[k][2] / bounds[k][1]) ** f for f in (0.0, 0.6, 1.0)]
             if k in logs else [bounds[k][0]] for k in free]
    best = None
    for start in itertools.product(*grids):
        x0 = np.clip([enc(k, v) for k, v in zip(free, start)], lo, hi)
        r = least_squares(resid, x0, bounds=(lo, hi), x_scale="jac", method="trf")
        if best is None or r.cost < best.cost:
            best = r
    p = unpack(best.x)
    model = [predict(p, pt, levels) for pt in points]
    chi2 = float(np.sum(best.fun ** 2))
    dof = max(len(points) - len(free), 1)
    sigma = _sigma(best.jac, best.x, free, logs, chi2, dof)
    return FitResult({k: float(p[k]) for k in names}, sigma, fixed, levels, points, model,
                     list(err), chi2, dof, notes=notes)


def _sigma(jac, x, free, logs, chi2, dof) -> dict[str, float]:
    """1-sigma per free parameter (log-fitted ones through exp's
    derivative); inf where the points do not determine it."""
    cov = np.linalg.pinv(jac.T @ jac, rcond=1e-12)
    scale = max(1.0, chi2 / dof)
    out = {}
    for i, k in enumerate(free):
        var = cov[i, i] * scale
        ok = np.isfinite(var) and var >= 0 and not np.allclose(jac[:, i], 0)
        sd = math.sqrt(var) if ok else float("inf")
        out[k] = math.exp(x[i]) * sd if k in logs and ok else sd
    return out
