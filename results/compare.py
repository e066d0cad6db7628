"""`colosim compare`: each policy's metrics, and their deltas against a
baseline policy, with bootstrap confidence intervals over seeds.

Runs are grouped by the parameters that vary between them (the sweep's keys
and any differing config key or identification column; see
results/readers.py), and inside a group by policy: the scheduler, plus the
controllers when those vary, plus the backend when runs of both are read
(``cfs@sim`` against ``cfs@real``, the real host the default baseline, so a
simulated and a real run of a scenario compare as the simulator's error).
Within a (group, policy) cell the seeds are the
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
import warnings
import zlib
from dataclasses import dataclass
from typing import Sequence

from typing import TYPE_CHECKING

import numpy as np

from results.readers import Results, ResultsError
from results.sched import analyse, read_sched
from results.schema import SCHED_FILE

if TYPE_CHECKING:  # pandas loads on first use, so the CLI's parser stays light
    import pandas as pd

# memory model (docs/memory.md); shown only where some run has them
MEMORY_METRICS = ("llc_miss_rate", "llc_occupancy_mb", "ipce_global", "ipce_priority",
                  "ipce_batch", "time_above_target_frac")
DEFAULT_METRICS = ("goodput_rps", "throughput_rps", "latency_p50_s", "latency_p99_s",
                   "unfinished_frac", "sched_overhead_frac", "ctx_switch_cost_mean_us",
                   "ctx_switch_rate_per_s", "cpu_util", *MEMORY_METRICS)
DEFAULT_BASELINE = "cfs"
# with runs of both backends, the default baseline is the real host's, so
# the deltas read simulator minus real
BASELINE_BACKEND = "real"
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
    # per cgroup, each policy's schedule against the baseline's where both
    # cells' runs all have sched.parquet (schedule_rows); None: no such pair
    schedule: pd.DataFrame | None = None
    # requests of the compared runs left unfinished at their end, which
    # their latency statistics leave out
    n_unfinished: int = 0


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


def ks(a, b) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov statistic and p-value (scipy's
    ks_2samp); NaN when either side has no sample (NaN is no sample)."""
    from scipy.stats import ks_2samp
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan
    with warnings.catch_warnings():
        # tied samples (many zero wake-up latencies) make scipy fall back from
        # the exact p-value to the asymptotic one, with a warning per call
        warnings.filterwarnings("ignore", "ks_2samp: Exact calculation unsuccessful")
        r = ks_2samp(a, b)
    return float(r.statistic), float(r.pvalue)


def schedule_rows(cell: dict, base: dict) -> list[dict]:
    """Per cgroup present in both: the KS statistic of wake-up latencies and
    of run lengths (cell vs base) and the involuntary switch shares.  A cell
    is {"wakeup_latency": {cgroup: samples}, "run_length": ..., "switches":
    {cgroup: (involuntary, all)}}, pooled over its runs (:func:`schedule_cell`)."""
    rows = []
    for cgroup in sorted(set(cell["switches"]) & set(base["switches"]), key=str):
        row = {"cgroup": cgroup}
        for kind in ("wakeup_latency", "run_length"):
            a, b = cell[kind].get(cgroup, ()), base[kind].get(cgroup, ())
            row[f"n_{kind}"], row[f"n_{kind}_baseline"] = len(a), len(b)
            row[f"ks_{kind}"], row[f"ks_{kind}_pvalue"] = ks(a, b)
        (inv, n), (inv_b, n_b) = cell["switches"][cgroup], base["switches"][cgroup]
        row["involuntary_frac"] = inv / n if n else math.nan
        row["involuntary_frac_baseline"] = inv_b / n_b if n_b else math.nan
        row["involuntary_frac_delta"] = row["involuntary_frac"] - row["involuntary_frac_baseline"]
        rows.append(row)
    return rows


def schedule_cell(run_dirs) -> dict | None:
    """The pooled schedule samples of runs (None unless every run has sched.parquet)."""
    if not run_dirs or not all((d / SCHED_FILE).is_file() for d in run_dirs):
        return None
    cell = {"wakeup_latency": {}, "run_length": {}, "switches": {}}
    for d in run_dirs:
        a = analyse(read_sched(d))
        for kind, samples in (("wakeup_latency", a.wakeup_latencies()),
                              ("run_length", a.run_lengths())):
            for cgroup, x in samples.items():
                cell[kind][cgroup] = np.concatenate([cell[kind].get(cgroup, []), x])
        m = a.metrics().to_pandas()
        for r in m[m["level"] == "cgroup"].itertuples():
            inv, n = cell["switches"].get(r.cgroup, (0, 0))
            cell["switches"][r.cgroup] = (inv + r.switches_involuntary,
                                          n + r.switches_involuntary + r.switches_voluntary)
    return cell


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
    """Columns whose values differ between runs, policy and seed excluded
    (and the backend, which is part of the policy when it differs).  A
    controller's key is a parameter only where it differs between runs of
    one policy (``controller.margin=0,0.15`` under one controller): keys
    that differ only because the controller does (VPA's interval_s against
    CATCloud's) belong to the policy, and as group keys they would leave
    every policy in a group of its own."""
    candidates = [*_SETUP_COLUMNS[:4], *results.keys, *_SETUP_COLUMNS[4:]]
    policies = policy_labels(summary)
    params = []
    for column in dict.fromkeys(candidates):
        if column in _NOT_PARAMS or column == "backend" or column not in summary:
            continue
        # null may be one of the values (controller.fetch_interval_s=null,60,
        # workload.cpuset_spread=null,node); pandas' str dtype keeps it missing
        values = summary[column].astype(str)
        if column.startswith("controller"):
            if (values.groupby(policies).nunique(dropna=False) > 1).any():
                params.append(column)
        elif values.nunique(dropna=False) > 1:
            params.append(column)
    return params


def policy_labels(summary: pd.DataFrame) -> pd.Series:
    """The scheduler, with the controllers appended when they vary
    (``cfs+vpa``) and the backend when it varies (``cfs@real``, ``cfs@sim``):
    a simulated and a real run of a scenario are two policies compared."""
    labels = summary["scheduler"].astype(str)
    if "controllers" in summary and summary["controllers"].astype(str).nunique() > 1:
        controllers = summary["controllers"].fillna("").astype(str).replace("", "none")
        labels = labels + "+" + controllers
    if "backend" in summary and summary["backend"].astype(str).nunique() > 1:
        labels = labels + "@" + summary["backend"].astype(str)
    return labels


def _scheduler_of(policy: str) -> str:
    return policy.split("@")[0].split("+")[0]


def choose_baseline(policies: Sequence[str], requested: str | None) -> str:
    present = list(dict.fromkeys(policies))
    if requested is None:
        if DEFAULT_BASELINE in present:
            return DEFAULT_BASELINE
        candidates = [p for p in present if _scheduler_of(p) == DEFAULT_BASELINE] or present
        # stable: among equals, the first present
        candidates.sort(key=lambda p: not p.endswith("@" + BASELINE_BACKEND))
        return candidates[0]
    if requested in present:
        return requested
    # "--baseline cfs" when the policies are "cfs+none", "cfs+vpa", ...:
    # accept a scheduler name that picks exactly one policy
    matches = [p for p in present if _scheduler_of(p) == requested]
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
    groups = list(summary.groupby(params, dropna=False, sort=True)) if params else [((), summary)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        cells = {p: g.sort_values("seed") for p, g in group.groupby("policy")}
        for metric in metrics:
            base_cell = cells.get(base)
            for policy in sorted(cells, key=order.get):
                rows.append(_row(metric, dict(zip(params, key)), policy, cells[policy],
                                 base, base_cell, ci, resamples))
    frame = pd.DataFrame(rows)
    unfinished = summary["n_unfinished"].fillna(0).sum() if "n_unfinished" in summary else 0
    return Comparison(frame=frame, params=params, baseline=base, ci=ci, resamples=resamples,
                      metrics=metrics, schedule=_schedule(results, summary, params, base, groups),
                      n_unfinished=int(unfinished))


def _schedule(results: Results, summary: pd.DataFrame, params, base, groups):
    """Each non-baseline policy's schedule_rows against the baseline of its
    group, where both have traces; None when no pair has."""
    import pandas as pd

    where = {run.name: run for run in results.runs}
    rows = []
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        cells = {p: [where[r] for r in g["run_id"] if r in where]
                 for p, g in group.groupby("policy")}
        base_cell = schedule_cell(cells.get(base, []))
        if base_cell is None:
            continue
        for policy in sorted(p for p in cells if p != base):
            cell = schedule_cell(cells[policy])
            if cell is not None:
                rows += [{**dict(zip(params, key)), "policy": policy, **r}
                         for r in schedule_rows(cell, base_cell)]
    return pd.DataFrame(rows) if rows else None


def _row(metric, key, policy, cell, base, base_cell, ci, resamples) -> dict:
    values = cell[metric].to_numpy(dtype=float)
    ident = (metric, tuple(key.items()), policy)
    mean, lo, hi = bootstrap_mean_ci(values, ci, resamples, _rng("mean", *ident))
    overloaded = cell["overloaded"].fillna(False).astype(bool) if "overloaded" in cell else ()
    row = {"metric": metric, **key, "policy": policy,
           "n": int(np.count_nonzero(~np.isnan(values))),
           # runs of the cell whose backlog grew (results/schema.py OVERLOAD_RULE)
           "n_overloaded": int(sum(overloaded)), "n_runs": len(cell),
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
    if metric.endswith("_s") and metric.startswith(("latency", "runqueue", "rtapp_")):
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
    # the column shows only where some compared run was overloaded
    overload = bool(comparison.frame["n_overloaded"].any())
    head = [*comparison.params, "policy", "n", *(["overloaded"] if overload else []),
            "mean", f"{pct}% CI", f"delta vs {comparison.baseline}", "delta %",
            f"delta {pct}% CI"]
    body = []
    k, _ = display_unit(metric)
    for r in comparison.frame[comparison.frame["metric"] == metric].to_dict("records"):
        is_base = r["policy"] == comparison.baseline
        no_base = not is_base and math.isnan(r["delta"])
        body.append([
            *(str(r[p]) for p in comparison.params), r["policy"], str(r["n"]),
            *([f"{r['n_overloaded']}/{r['n_runs']}"] if overload else []),
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
    # latency statistics leave out the requests that never finished
    excluded = (f", of the finished requests ({comparison.n_unfinished:,} unfinished left out)"
                if metric.startswith("latency_") and comparison.n_unfinished else "")
    return (f"{metric}{shown}{excluded}: mean over seeds, {int(round(comparison.ci * 100))}% "
            f"bootstrap CI ({comparison.resamples} resamples); delta vs {comparison.baseline}"
            f"{', paired by seed' if _resampled_pairs(comparison) else ''}")


def _resampled_pairs(comparison: Comparison) -> bool:
    frame = comparison.frame
    return bool((frame["paired"] & (frame["n"] > 1)).any())


SCHEDULE_TITLE = ("schedule (sched.parquet), per cgroup vs {base}: two-sample KS statistic of "
                  "wake-up latencies and of run lengths (runs of a policy pooled), involuntary "
                  "switch-out share")


def schedule_cells(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the schedule table (empty rows: no traced pair)."""
    head = [*comparison.params, "policy", "cgroup", "wake-ups", "KS wake-up", "runs", "KS run",
            "invol %", f"invol % {comparison.baseline}", "delta pp"]
    frame = comparison.schedule
    body = [] if frame is None else [
        [*(str(r[p]) for p in comparison.params), r["policy"], str(r["cgroup"]),
         f"{r['n_wakeup_latency']}/{r['n_wakeup_latency_baseline']}", fmt(r["ks_wakeup_latency"]),
         f"{r['n_run_length']}/{r['n_run_length_baseline']}", fmt(r["ks_run_length"]),
         fmt(100 * r["involuntary_frac"]), fmt(100 * r["involuntary_frac_baseline"]),
         fmt(100 * r["involuntary_frac_delta"], True)]
        for r in frame.to_dict("records")]
    return head, body


def _blocks(comparison: Comparison):
    """(title, header, rows, label columns) of every table."""
    for metric in comparison.metrics:
        yield (table_title(comparison, metric), *table_cells(comparison, metric),
               len(comparison.params) + 1)
    head, body = schedule_cells(comparison)
    if body:
        yield SCHEDULE_TITLE.format(base=comparison.baseline), head, body, \
            len(comparison.params) + 2


def format_text(comparison: Comparison) -> str:
    blocks = []
    for title, head, body, labels in _blocks(comparison):
        rows = [head, *body]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(v.ljust(w) if i < labels else v.rjust(w)
                           for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        blocks.append("\n".join([title, *lines]))
    return "\n\n".join(blocks) + "\n"


def format_markdown(comparison: Comparison) -> str:
    blocks = []
    for title, head, body, labels in _blocks(comparison):
        # group keys and policy: left, numbers: right
        align = ["---"] * labels + ["---:"] * (len(head) - labels)
        lines = [f"### {title}", "",
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
