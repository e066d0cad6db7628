"""A comparison read in one paragraph (`colosim compare --reading`, and the
report's first section): where each policy's p99 latency passes a threshold
along the density key (the knee), from where the backlog grows, how the
scheduling overhead changes with density, and how the policies differ from
the baseline before and after the knee (p99; at the densest point the
median too).

Every number comes from the comparison (means over seeds and their
bootstrap CIs, results/compare.py); a shape the sentences do not fit is said
as such ("no knee within the sweep"), and a difference whose CI spans zero
is called indistinguishable rather than read.
"""
from __future__ import annotations

import math

import pandas as pd

from results.compare import Comparison, display_unit

# p99 latency past which a policy is read as past its knee (100 ms: two
# orders of magnitude above the requests' own service times in the demo)
KNEE_P99_S = 0.1
# the density keys, most specific first; else the first numeric varying key
DENSITY_KEYS = ("workload.functions", "workload.workers", "workload.threads")
P99, P50 = "latency_p99_s", "latency_p50_s"
OVERHEAD, UNFINISHED = "sched_overhead_frac", "unfinished_frac"


def density_key(params: list[str], frame: pd.DataFrame) -> str | None:
    """The density axis: a known density key if it varies, else the first
    numeric varying parameter (a column of ``frame``), else None."""
    numeric = [p for p in params if pd.api.types.is_numeric_dtype(frame[p])
               and not pd.api.types.is_bool_dtype(frame[p])]
    preferred = [k for k in DENSITY_KEYS if k in numeric]
    return (preferred or numeric or [None])[0]


def reading(comparison: Comparison, knee_s: float = KNEE_P99_S) -> str:
    """One paragraph per combination of the other varying keys (at most a
    few: a density sweep has one)."""
    frame = comparison.frame
    x = density_key(comparison.params, frame)
    if x is None:
        groups = _facets(frame, comparison.params)
        return ("No numeric parameter varies across these runs, so there is no density to "
                "read a knee along. " + " ".join(
                    _separation(comparison, cell, f"At {where}" if where else "Here")
                    for where, cell in groups)).strip()
    others = [p for p in comparison.params if p != x]
    paragraphs = []
    for where, facet in _facets(frame, others):
        text = _density_reading(comparison, facet, x, knee_s)
        paragraphs.append(f"{where}: {text}" if where else text)
    return "\n\n".join(paragraphs)


def _density_reading(comparison: Comparison, facet: pd.DataFrame, x: str,
                     knee_s: float) -> str:
    policies = list(dict.fromkeys(facet["policy"]))
    base = comparison.baseline
    sentences = []
    knees = {}
    if P99 in comparison.metrics:
        xs_all = sorted(facet[x].unique())
        for policy in policies:
            line = _line(facet, P99, policy, x)
            if not line.empty:   # no finished request at any point: nothing to read
                knees[policy] = _crossing(line, knee_s)
        limit = _ms(knee_s)
        if all(k is None for k in knees.values()):
            sentences.append(f"No knee within the sweep: every policy's mean p99 stays below "
                             f"{limit} up to {x}={xs_all[-1]:g}.")
        else:
            parts = []
            for policy in knees:
                line, i = _line(facet, P99, policy, x), knees[policy]
                if i is None:
                    parts.append(f"{policy}'s stays below {limit} up to {x}={line.index[-1]:g} "
                                 f"({_ms(line.iloc[-1])})")
                elif i == 0:
                    parts.append(f"{policy}'s is above {limit} already at {x}="
                                 f"{line.index[0]:g} ({_ms(line.iloc[0])})")
                else:
                    parts.append(f"{policy}'s passes {limit} at {x}={line.index[i]:g} "
                                 f"({_ms(line.iloc[i])}, from {_ms(line.iloc[i - 1])} at "
                                 f"{line.index[i - 1]:g})")
            sentences.append("Mean p99 latency over seeds: " + "; ".join(parts) + ".")
    overload = _overload(comparison, facet, policies, x)
    if overload:
        sentences.append(overload)
    if OVERHEAD in comparison.metrics:
        parts = []
        for policy in policies:
            line = _line(facet, OVERHEAD, policy, x)
            if len(line) >= 2:
                a, b = line.iloc[0], line.iloc[-1]
                trend = "grows" if b > 1.1 * a else "falls" if b < a / 1.1 else "stays"
                parts.append(f"{policy}'s {trend} from {_pct(a)} at {x}={line.index[0]:g} "
                             f"to {_pct(b)} at {line.index[-1]:g}")
        if parts:
            sentences.append("Scheduling overhead (share of CPU time spent switching): "
                             + "; ".join(parts) + ".")
    # before the baseline's knee and at the densest point
    base_line = _line(facet, P99, base, x) if P99 in comparison.metrics else None
    points = []
    if base_line is not None and knees.get(base):
        points.append(base_line.index[knees[base] - 1])
    if len(facet):
        points.append(facet[x].max())
    for point in dict.fromkeys(points):
        sentences.append(_separation(comparison, facet[facet[x] == point], f"At {x}={point:g}"))
    # past the knee the median can part where the tail does not
    if P50 in comparison.metrics and len(facet):
        densest = facet[x].max()
        sentences.append(_separation(comparison, facet[facet[x] == densest],
                                     f"At {x}={densest:g}", P50))
    return " ".join(s for s in sentences if s)


def _facets(frame: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """(``k=v, ...``, rows) per combination of ``keys``; ("", frame) without."""
    if not keys:
        return [("", frame)]
    return [(", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple)
                                                  else (key,))), rows)
            for key, rows in frame.groupby(keys, sort=True, dropna=False)]


def _separation(comparison: Comparison, cell: pd.DataFrame, at: str,
                metric: str | None = None) -> str:
    """Each policy's ``metric`` (default p99, else the first compared)
    against the baseline's in ``cell`` (one group: a density point), with
    the CI of the difference; ``at`` opens the sentence."""
    metric = metric or (P99 if P99 in comparison.metrics else comparison.metrics[0])
    rows = cell[cell["metric"] == metric]
    base = rows[rows["policy"] == comparison.baseline]
    if base.empty or len(rows) < 2:
        return ""
    scale, unit = display_unit(metric)
    name = {P99: "p99", P50: "median"}.get(metric, metric)
    parts = []
    for r in rows[rows["policy"] != comparison.baseline].itertuples():
        if math.isnan(r.delta):
            continue
        value = f"{r.policy}'s {name} is {_value(r.mean, scale, unit)}"
        pct = "" if math.isnan(r.delta_pct) else f"{r.delta_pct:+.0f}%, "
        if math.isnan(r.delta_ci_low):
            parts.append(f"{value} ({pct}no CI with one seed)")
        elif r.delta_ci_low <= 0 <= r.delta_ci_high:
            parts.append(f"{value}, indistinguishable from {comparison.baseline}'s (the "
                         f"{int(round(comparison.ci * 100))}% CI of the difference spans 0)")
        else:
            parts.append(f"{value} ({pct}{int(round(comparison.ci * 100))}% "
                         f"CI of the difference {_value(r.delta_ci_low, scale, unit, True)} to "
                         f"{_value(r.delta_ci_high, scale, unit, True)})")
    if not parts:
        return ""
    base_mean = _value(base["mean"].iloc[0], scale, unit)
    return (f"{at}, against {comparison.baseline}'s {name} of {base_mean}: " + "; ".join(parts)
            + ".")


def _overload(comparison: Comparison, facet: pd.DataFrame, policies: list[str], x: str) -> str:
    """From which density each policy's runs are overloaded (backlog growing)."""
    rows = facet[facet["metric"] == comparison.metrics[0]]
    parts = []
    for policy in policies:
        over = rows[(rows["policy"] == policy) & (rows["n_overloaded"] > 0)]
        if over.empty:
            continue
        first = over[x].min()
        text = f"{policy} from {x}={first:g}"
        if UNFINISHED in comparison.metrics:
            line = _line(facet, UNFINISHED, policy, x)
            if first in line.index:
                text += f" ({_pct(line.loc[first])} of requests unfinished there"
                text += (f", {_pct(line.iloc[-1])} at {line.index[-1]:g})"
                         if line.index[-1] != first else ")")
        parts.append(text)
    if not parts:
        return ""
    return ("The backlog grows (runs overloaded; their unfinished requests are not in the "
            "latency statistics): " + "; ".join(parts) + ".")


def _line(facet: pd.DataFrame, metric: str, policy: str, x: str) -> pd.Series:
    rows = facet[(facet["metric"] == metric) & (facet["policy"] == policy)]
    return rows.set_index(x)["mean"].sort_index().dropna()


def _crossing(line: pd.Series, threshold: float) -> int | None:
    above = [i for i, v in enumerate(line.to_numpy()) if v > threshold]
    return above[0] if above else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.3g} ms"


def _pct(frac: float) -> str:
    return f"{frac * 100:.3g}%"


def _value(v: float, scale: float, unit: str, signed: bool = False) -> str:
    v *= scale
    sign = "+" if signed else ""
    text = f"{v:{sign},.0f}" if abs(v) >= 100 else f"{v:{sign}.3g}"
    return f"{text} {unit}" if unit and unit != "%" else f"{text}{unit}"
