"""`colosim compare`: each policy's metrics, and their deltas against a
baseline policy, with bootstrap confidence intervals over seeds.

Runs are grouped by the parameters that vary between them (the sweep's keys
and any differing config key or identification column; see
results/readers.py), and inside a group by policy: the scheduler, plus the
controllers when those vary. Within a (group, policy) cell the seeds are the
samples. The value shown is their mean, and its CI is a percentile bootstrap
of that mean. The delta against the baseline policy is paired by seed when
both policies ran the same seeds (same seed = same arrivals, so pairing
removes the workload's own noise), and an unpaired difference of means
otherwise. Resampling is seeded per cell, so a table is reproducible and
adding a metric changes no other cell. With a single seed there is nothing
to resample: the cell says "n=1, no CI".
"""
from __future__ import annotations

import io
import math
import zlib
from dataclasses import dataclass
from typing import Sequence

from typing import TYPE_CHECKING

import numpy as np

from results.readers import Results, ResultsError

if TYPE_CHECKING:  # pandas loads on first use, so the CLI's parser stays light
    import pandas as pd

DEFAULT_METRICS = ("goodput_rps", "throughput_rps", "latency_p50_s", "latency_p99_s",
                   "sched_overhead_frac", "ctx_switch_cost_mean_us", "ctx_switch_rate_per_s",
                   "cpu_util",
                   # memory model (docs/memory.md); shown only where some run has them
                   "llc_miss_rate", "llc_occupancy_mb", "ipce_global", "ipce_priority",
                   "ipce_batch", "time_above_target_frac")
MEMORY_METRICS = DEFAULT_METRICS[8:]
DEFAULT_BASELINE = "cfs"
FORMATS = ("text", "markdown", "csv")
NO_CI = "n=1, no CI"

# Never parameters nor metrics: identity, the policy, and the simulator's own
# cost (wall time depends on the machine and its load, not on the scenario).
_NOT_PARAMS = {"run_id", "scheduler", "controllers", "seed", "policy",
               "wall_time_s", "sim_events", "sim_s_per_wall_s"}
# Summary columns that describe a run's setup rather than measure it.
_SETUP_COLUMNS = ("experiment", "scenario", "host", "backend", "duration_s", "slo_s")


class CompareError(ResultsError):
    """Bad metric or baseline: the message lists what is valid."""


@dataclass(frozen=True)
class Comparison:
    """The long-form comparison: one row per (metric, group, policy)."""

    frame: pd.DataFrame
    params: list[str]
    baseline: str
    ci: float
    resamples: int
    metrics: list[str]


# ---------------------------------------------------------------- statistics

def _rng(*key: object) -> np.random.Generator:
    # Seeded per cell, so the numbers are reproducible and adding a metric
    # or a policy does not change the others' intervals.
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _quantiles(means: np.ndarray, ci: float) -> tuple[float, float]:
    lo, hi = np.quantile(means, [(1 - ci) / 2, (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_mean_ci(samples: Sequence[float], ci: float = 0.95, resamples: int = 2000,
                      rng: np.random.Generator | None = None) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap CI of the mean; NaN bounds
    when there are fewer than two samples."""
    x = np.asarray(samples, dtype=float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    rng = rng or np.random.default_rng(0)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    return (mean, *_quantiles(means, ci))


def bootstrap_delta_ci(values: Sequence[float], baseline: Sequence[float], paired: bool,
                       ci: float = 0.95, resamples: int = 2000,
                       rng: np.random.Generator | None = None) -> tuple[float, float, float]:
    """(delta, low, high) of mean(values) - mean(baseline).

    Paired: values[i] and baseline[i] share a seed; the per-seed differences
    are resampled together. Unpaired: each side is resampled on its own.
    NaN bounds when a side has fewer than two samples."""
    x, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    rng = rng or np.random.default_rng(0)
    if paired:
        if x.shape != b.shape:
            raise ValueError("paired samples must have the same length")
        return bootstrap_mean_ci(x - b, ci, resamples, rng)
    x, b = x[~np.isnan(x)], b[~np.isnan(b)]
    if x.size == 0 or b.size == 0:
        return math.nan, math.nan, math.nan
    delta = float(x.mean() - b.mean())
    if x.size < 2 or b.size < 2:
        return delta, math.nan, math.nan
    dx = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    db = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
    return (delta, *_quantiles(dx - db, ci))


# ---------------------------------------------------------------- grouping

def metric_columns(summary: pd.DataFrame, keys: Sequence[str] = ()) -> list[str]:
    """Numeric summary columns that measure a run (valid --metric values);
    ``keys`` are the columns that describe runs (swept or config keys)."""
    import pandas as pd

    skip = _NOT_PARAMS | set(_SETUP_COLUMNS) | set(keys)
    return [c for c in summary.columns
            if c not in skip and "." not in c
            and pd.api.types.is_numeric_dtype(summary[c])
            and not pd.api.types.is_bool_dtype(summary[c])]


def swept_params(results: Results, summary: pd.DataFrame) -> list[str]:
    """Columns whose values differ between runs, policy and seed excluded."""
    candidates = [*_SETUP_COLUMNS[:4], *results.keys, *_SETUP_COLUMNS[4:]]
    params = []
    for column in dict.fromkeys(candidates):
        if column in _NOT_PARAMS or column.startswith("controller") or column not in summary:
            continue
        if summary[column].astype(str).nunique() > 1:
            params.append(column)
    return params


def policy_labels(summary: pd.DataFrame) -> pd.Series:
    """The scheduler, with the controllers appended when they vary."""
    scheduler = summary["scheduler"].astype(str)
    if "controllers" in summary and summary["controllers"].astype(str).nunique() > 1:
        controllers = summary["controllers"].fillna("").astype(str).replace("", "none")
        return scheduler + "+" + controllers
    return scheduler


def choose_baseline(policies: Sequence[str], requested: str | None) -> str:
    present = list(dict.fromkeys(policies))
    if requested is None:
        if DEFAULT_BASELINE in present:
            return DEFAULT_BASELINE
        with_cfs = [p for p in present if p.split("+")[0] == DEFAULT_BASELINE]
        return with_cfs[0] if with_cfs else present[0]
    if requested in present:
        return requested
    # "--baseline cfs" when the policies are "cfs+none", "cfs+vpa", ...:
    # accept a scheduler name that picks exactly one policy
    matches = [p for p in present if p.split("+")[0] == requested]
    if len(matches) == 1:
        return matches[0]
    raise CompareError(f"baseline {requested!r} is not among the policies present: "
                       f"{', '.join(present)}")


def compare(results: Results, metrics: Sequence[str] | None = None,
            baseline: str | None = None, ci: float = 0.95,
            resamples: int = 2000) -> Comparison:
    import pandas as pd

    if not 0 < ci < 1:
        raise CompareError(f"--ci {ci} is invalid: must be between 0 and 1 (e.g. 0.95)")
    if resamples < 1:
        raise CompareError(f"--resamples {resamples} is invalid: must be >= 1")
    summary = results.summary_frame()
    params = swept_params(results, summary)
    valid = metric_columns(summary, [*params, *results.keys])
    metrics = list(metrics or [m for m in DEFAULT_METRICS if m in valid and (
        m not in MEMORY_METRICS or summary[m].notna().any())])
    unknown = [m for m in metrics if m not in valid]
    if unknown:
        raise CompareError(f"unknown metric{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(unknown)}; valid metrics: {', '.join(valid)}")
    summary = summary.assign(policy=policy_labels(summary))
    policies = sorted(summary["policy"].unique())
    base = choose_baseline(policies, baseline)
    # the baseline first, the others in name order
    order = {p: i for i, p in enumerate([base] + [p for p in policies if p != base])}
    rows = []
    groups = summary.groupby(params, dropna=False, sort=True) if params else [((), summary)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        cells = {p: g.sort_values("seed") for p, g in group.groupby("policy")}
        for metric in metrics:
            base_cell = cells.get(base)
            for policy in sorted(cells, key=order.get):
                rows.append(_row(metric, dict(zip(params, key)), policy, cells[policy],
                                 base, base_cell, ci, resamples))
    frame = pd.DataFrame(rows)
    return Comparison(frame=frame, params=params, baseline=base, ci=ci, resamples=resamples,
                      metrics=metrics)


def _row(metric, key, policy, cell, base, base_cell, ci, resamples) -> dict:
    values = cell[metric].to_numpy(dtype=float)
    ident = (metric, tuple(key.items()), policy)
    mean, lo, hi = bootstrap_mean_ci(values, ci, resamples, _rng("mean", *ident))
    row = {"metric": metric, **key, "policy": policy,
           "n": int(np.count_nonzero(~np.isnan(values))),
           "mean": mean, "ci_low": lo, "ci_high": hi,
           "delta": math.nan, "delta_ci_low": math.nan, "delta_ci_high": math.nan,
           "delta_pct": math.nan, "paired": False, "n_baseline": 0}
    if base_cell is None or policy == base:
        return row
    b = base_cell[metric].to_numpy(dtype=float)
    seeds, base_seeds = cell["seed"].tolist(), base_cell["seed"].tolist()
    paired = seeds == base_seeds and len(set(seeds)) == len(seeds)
    if paired:
        keep = ~(np.isnan(values) | np.isnan(b))
        values, b = values[keep], b[keep]
    delta, dlo, dhi = bootstrap_delta_ci(values, b, paired, ci, resamples, _rng("delta", *ident))
    base_mean = float(np.nanmean(b)) if b.size and not np.all(np.isnan(b)) else math.nan
    row.update(delta=delta, delta_ci_low=dlo, delta_ci_high=dhi, paired=paired,
               n_baseline=int(np.count_nonzero(~np.isnan(b))),
               delta_pct=100 * delta / base_mean if base_mean else math.nan)
    return row


# ---------------------------------------------------------------- formatting

def fmt(value: float, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    sign = "+" if signed else ""
    if abs(value) >= 1e4:
        return format(value, f"{sign},.0f")
    return format(value, f"{sign}.4g")


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.2f}%"


def display_unit(metric: str) -> tuple[float, str]:
    """(scale, unit) the tables show a metric in: seconds as ms, fractions
    as %; the CSV keeps the column's own unit."""
    if metric.endswith("_s") and metric.startswith(("latency", "runqueue")):
        return 1e3, "ms"
    if metric.endswith("_frac") or metric == "cpu_util":
        return 1e2, "%"
    return 1.0, ""


def _ci_text(lo: float, hi: float, n: int, signed: bool = False, scale: float = 1.0) -> str:
    if math.isnan(lo):
        return NO_CI if n <= 1 else "-"
    return f"[{fmt(lo * scale, signed)}, {fmt(hi * scale, signed)}]"


def table_cells(comparison: Comparison, metric: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one metric's table, as text, markdown and the HTML
    report show them (display units, "n=1, no CI")."""
    pct = int(round(comparison.ci * 100))
    head = [*comparison.params, "policy", "n", "mean", f"{pct}% CI",
            f"delta vs {comparison.baseline}", "delta %", f"delta {pct}% CI"]
    body = []
    k, _ = display_unit(metric)
    for r in comparison.frame[comparison.frame["metric"] == metric].to_dict("records"):
        is_base = r["policy"] == comparison.baseline
        no_base = not is_base and math.isnan(r["delta"])
        body.append([
            *(str(r[p]) for p in comparison.params), r["policy"], str(r["n"]),
            fmt(r["mean"] * k), _ci_text(r["ci_low"], r["ci_high"], r["n"], scale=k),
            "baseline" if is_base else ("no baseline run" if no_base
                                        else fmt(r["delta"] * k, True)),
            "" if is_base or no_base else _pct(r["delta_pct"]),
            "" if is_base or no_base else _ci_text(r["delta_ci_low"], r["delta_ci_high"],
                                                   min(r["n"], r["n_baseline"]), True, k),
        ])
    return head, body


def table_title(comparison: Comparison, metric: str) -> str:
    unit = display_unit(metric)[1]
    shown = f" (in {unit})" if unit else ""
    return (f"{metric}{shown}: mean over seeds, {int(round(comparison.ci * 100))}% bootstrap CI "
            f"({comparison.resamples} resamples); delta vs {comparison.baseline}"
            f"{', paired by seed' if _resampled_pairs(comparison) else ''}")


def _resampled_pairs(comparison: Comparison) -> bool:
    frame = comparison.frame
    return bool((frame["paired"] & (frame["n"] > 1)).any())


def format_text(comparison: Comparison) -> str:
    blocks = []
    for metric in comparison.metrics:
        head, body = table_cells(comparison, metric)
        rows = [head, *body]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        numeric = set(range(len(comparison.params) + 1, len(head)))
        lines = ["  ".join(v.rjust(w) if i in numeric else v.ljust(w)
                           for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        blocks.append("\n".join([table_title(comparison, metric), *lines]))
    return "\n\n".join(blocks) + "\n"


def format_markdown(comparison: Comparison) -> str:
    blocks = []
    for metric in comparison.metrics:
        head, body = table_cells(comparison, metric)
        labels = len(comparison.params) + 1     # group keys and policy: left, numbers: right
        align = ["---"] * labels + ["---:"] * (len(head) - labels)
        lines = [f"### {table_title(comparison, metric)}", "",
                 "| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def format_csv(comparison: Comparison) -> str:
    """Long form, full precision: one row per (metric, group, policy)."""
    out = io.StringIO()
    frame = comparison.frame.assign(baseline=comparison.baseline, ci=comparison.ci)
    frame.to_csv(out, index=False, lineterminator="\n")
    return out.getvalue()


FORMATTERS = {"text": format_text, "markdown": format_markdown, "csv": format_csv}
