"""`colosim report`: one self-contained HTML file for a run or sweep directory.

Plots are drawn with matplotlib's Agg canvas (no display, no pyplot global
state) and embedded as base64 PNG, so the file can be mailed or archived
alone. Every section either shows data read from the run directories or says
why it has none; nothing is interpolated or made up.

Sections: a reading of the comparison in a paragraph (results/reading.py);
every compared metric per policy with its bootstrap CI over seeds, against
the density key (results/reading.py density_key) as lines with CI bands, or
as bars with CI whiskers when no numeric key varies; latency tails as
complementary CDFs on log-log axes and p99 latency per time bin, per
policy, from ``requests`` (at most ``MAX_PANELS`` parameter groups, sampled
evenly); CPU
entitlement per interval from ``intervals`` (``cpu_limit_mcpu``, or
``quota_us / period_us``) when a controller limited CPU; a per-CPU
timeline of one traced run per policy (``sched.parquet``, ``trace=sched``)
over a window of ``TIMELINE_S`` (its busiest, or ``--timeline-window``);
per-cgroup scheduling metrics from ``sched_metrics.parquet`` when a run has
one; the comparison tables.
"""
from __future__ import annotations

import base64
import html
import io
import math
import posixpath
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from results.compare import (Comparison, compare, display_unit, policy_labels, table_cells,
                             table_title)
from results.readers import Results, open_results
from results.reading import density_key, reading
from results.sched import throttled_periods
from results.schema import SCHED_FILE, SCHED_METRICS_FILE
from results.validation import VALIDATION_FILE, ks_lines, numeric_column, read_validation, verdict
from results.validation import table_head as validation_head
from results.validation import table_cells as validation_cells

REPORT_FILE = "report.html"
MAX_PANELS = 6          # subplots per figure; more groups are sampled evenly
CDF_POINTS = 400        # quantiles drawn per CDF line: the PNG stays small
TIME_BINS = 40          # bins of the latency-over-time plot
CPU_LIMIT_COLUMN = "cpu_limit_mcpu"
TIMELINE_S = 0.2        # length of the automatic per-CPU timeline window
DPI = 96                # pixels per inch of every PNG (the timeline's image map needs it)
NS = 1_000_000_000      # sched.parquet times are ns


@dataclass
class Section:
    title: str
    figures: list[tuple[str, str]] = field(default_factory=list)  # (png base64, caption)
    notes: list[str] = field(default_factory=list)                # plain sentences
    html: str = ""                                                 # prebuilt body


def write_report(path: str | Path, out: str | Path | None = None, baseline: str | None = None,
                 ci: float = 0.95, resamples: int = 2000,
                 timeline_window: tuple[float, float] | None = None) -> Path:
    """Read ``path`` (run or sweep directory), write the HTML report, return its path.
    ``timeline_window``: (start, end) in seconds of run time for the per-CPU
    timeline; None picks each run's busiest ``TIMELINE_S`` seconds."""
    path = Path(path)
    results = open_results(path)
    comparison = compare(results, baseline=baseline, ci=ci, resamples=resamples)
    out = Path(out) if out else path / REPORT_FILE
    extra = []
    if (path / VALIDATION_FILE).is_file():
        extra.append(validation(path, results))
    page = render(results, comparison, title=f"colosim report: {path.absolute().name}",
                  extra=extra, timeline_window=timeline_window)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)    # a reader never sees half a report
    return out.absolute()


def render(results: Results, comparison: Comparison, title: str,
           extra: list[Section] = (), timeline_window: tuple[float, float] | None = None) -> str:
    """The page; ``extra`` sections (a validation's) follow the overview."""
    summary = results.summary_frame()
    summary["policy"] = _policies(summary)
    colors = _colors(comparison, summary)
    sections = [
        overview(results, comparison, summary),
        reading_section(comparison),
        *extra,
        metrics_per_policy(comparison, summary, colors),
        latency_tails(results, comparison, summary, colors),
        latency_over_time(results, comparison, summary, colors),
        cpu_entitlement(results, comparison, summary, colors),
        timeline(results, comparison, summary, colors, timeline_window),
        *sched_metrics(results, comparison, summary, colors),
        *cluster_sizing(results, summary, colors),
        tables(comparison),
    ]
    return _page(title, sections)


# ---------------------------------------------------------------- sections

def overview(results: Results, comparison: Comparison, summary: pd.DataFrame) -> Section:
    seeds = sorted(summary["seed"].unique().tolist()) if "seed" in summary else []
    items = [
        ("directories", ", ".join(str(p) for p in results.paths)),
        ("runs", str(len(summary))),
        ("policies", ", ".join(comparison.frame["policy"].unique())),
        ("baseline", comparison.baseline),
        ("seeds", ", ".join(map(str, seeds))),
        ("varying parameters", ", ".join(comparison.params) or "none (one scenario)"),
    ]
    for column in ("scenario", "host", "duration_s"):
        if column in summary and column not in comparison.params:
            items.append((column, ", ".join(map(str, summary[column].unique()))))
    body = "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                            for k, v in items) + "</dl>"
    section = Section("Runs", html=body)
    if "n_unfinished" in summary and (summary["n_unfinished"] > 0).any():
        worst = summary.loc[summary["n_unfinished"].idxmax()]
        section.notes.append(
            f"{int((summary['n_unfinished'] > 0).sum())} run(s) ended with requests still "
            f"unfinished (up to {int(worst['n_unfinished'])} in run {worst['run_id']}); their "
            "latencies are not in the statistics, so those runs' latency is biased low.")
    return section


def reading_section(comparison: Comparison) -> Section:
    """The comparison read in a paragraph (results/reading.py), as
    `colosim compare --reading` prints it."""
    text = reading(comparison)
    return Section("Reading", html="".join(f"<p>{html.escape(p)}</p>"
                                           for p in text.split("\n\n")))


def _finished(results: Results, summary: pd.DataFrame, params: list[str],
              columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """Requests completed after warmup, with their run's policy and keys."""
    requests = results.table("requests", columns=["run_id", "latency_s", "dropped",
                                                  *columns]).to_pandas()
    done = requests[~requests["dropped"].astype(bool) & requests["latency_s"].notna()
                    & (requests["latency_s"] > 0)]
    return done.merge(summary[["run_id", "policy", *params]], on="run_id")


def _unfinished_note(summary: pd.DataFrame) -> str:
    n = int(summary["n_unfinished"].fillna(0).sum()) if "n_unfinished" in summary else 0
    return (f" {n:,} requests still unfinished at their run's end are not in them (their "
            "latency is at least their time in the system)." if n else "")


def latency_tails(results: Results, comparison: Comparison, summary: pd.DataFrame,
                  colors: dict) -> Section:
    """The complementary CDF on log-log axes: the tail (p99, p99.9) is
    where policies differ, and a linear CDF squeezes it into its top line."""
    section = Section("Latency tails per policy (CCDF)")
    done = _finished(results, summary, comparison.params)
    if done.empty:
        section.notes.append("No run completed a request after warmup, so there is no "
                             "latency distribution to plot.")
        return section

    def draw(ax, policy, cell):
        ms = cell["latency_s"].to_numpy() * 1e3
        # fractions above, log-spaced from 1 down to one request in n
        above = np.logspace(0, -math.log10(ms.size), min(CDF_POINTS, ms.size))
        ax.step(np.quantile(ms, 1 - above), above, where="post",
                label=f"{policy} (n={ms.size:,})", color=colors.get(policy))

    fig, axes, shown = _group_panels(done, comparison, colors, draw)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_ticks(ax.xaxis)
        ax.axhline(0.01, color="grey", lw=0.8, ls=":")   # p99 where a line crosses it
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("fraction of requests slower (log)")
    section.figures.append((_png(fig), (
        "Complementary CDF of the latency of requests completed after warmup, all seeds "
        "pooled: the fraction of requests slower than x; a line crosses the dotted 1% line "
        "at its p99. Dropped requests are excluded." + _unfinished_note(summary) + shown)))
    return section


def latency_over_time(results: Results, comparison: Comparison, summary: pd.DataFrame,
                      colors: dict) -> Section:
    """p99 of the requests completed in each time bin, per policy: a growing
    backlog shows as a rising line, a transient as a bump."""
    section = Section("Latency over time per policy")
    done = _finished(results, summary, comparison.params, ("end_s",))
    if done.empty:
        section.notes.append("No run completed a request after warmup, so there is no "
                             "latency over time to plot.")
        return section
    lo, hi = done["end_s"].min(), done["end_s"].max()
    edges = np.linspace(lo, hi, TIME_BINS + 1)

    def draw(ax, policy, cell):
        bins = np.clip(np.searchsorted(edges, cell["end_s"], side="right") - 1,
                       0, TIME_BINS - 1)
        p99 = cell["latency_s"].groupby(bins).quantile(0.99) * 1e3
        ax.plot((edges[p99.index] + edges[p99.index + 1]) / 2, p99.to_numpy(),
                marker=".", label=policy, color=colors.get(policy))

    fig, axes, shown = _group_panels(done, comparison, colors, draw)
    for ax in axes:
        ax.set_yscale("log")
        _log_ticks(ax.yaxis)
        ax.set_xlabel("completion time (s of run time)")
        ax.set_ylabel("p99 latency (ms, log scale)")
    section.figures.append((_png(fig), (
        f"p99 latency of the requests completed in each of {TIME_BINS} time bins "
        f"({(hi - lo) / TIME_BINS:.3g} s) after warmup, all seeds pooled."
        + _unfinished_note(summary) + shown)))
    return section


def _group_panels(done: pd.DataFrame, comparison: Comparison, colors: dict, draw):
    """A panel per parameter group of ``done`` (at most ``MAX_PANELS``,
    evenly spaced), ``draw(ax, policy, requests)`` per policy in it, the
    baseline first. Returns the figure, its axes and a caption sentence
    saying which groups are shown when not all are."""
    groups = _groups(done, comparison.params)
    picked = _sample(groups)
    fig, axes = _panels(len(picked))
    for ax, (key, frame) in zip(axes, picked):
        for policy, cell in sorted(frame.groupby("policy"), key=lambda pc: _rank(colors, pc[0])):
            draw(ax, policy, cell)
        ax.set_title(_key_text(comparison.params, key) or "all runs")
        ax.grid(True, alpha=0.3)   # major only: minor log ticks are slow to draw
        ax.legend()
    shown = (f" {len(picked)} of {len(groups)} parameter groups shown (evenly spaced); the "
             "tables below cover all of them." if len(picked) < len(groups) else "")
    return fig, axes, shown


def metrics_per_policy(comparison: Comparison, summary: pd.DataFrame,
                       colors: dict) -> Section:
    """Every compared metric: against the density key (one line per policy,
    its CI as a band) when one varies, else as bars with CI whiskers."""
    section = Section("Compared metrics per policy")
    x = density_key(comparison.params, summary)
    pct = int(round(comparison.ci * 100))
    if x is None:
        section.figures.append(_metric_bars(comparison, colors))
        section.notes.append("No numeric parameter varies across these runs (varying: "
                             f"{', '.join(comparison.params) or 'none'}), so the metrics are "
                             "drawn per policy rather than against a density.")
        return section
    others = [p for p in comparison.params if p != x]
    facets = _groups(comparison.frame, others)
    for key, facet in facets[:MAX_PANELS]:
        fig, axes = _panels(len(comparison.metrics))
        for ax, metric in zip(axes, comparison.metrics):
            _density_lines(ax, facet[facet["metric"] == metric], metric, x, colors)
        name = _key_text(others, key)
        section.figures.append((_png(fig), (f"{name}: " if name else "") + (
            f"each compared metric against {x}: mean over seeds, the band its {pct}% "
            "bootstrap CI (where there is more than one seed); hollow markers: some run of "
            "that point was overloaded (backlog growing), so its latency and rates "
            "understate the load. Latency axes are logarithmic when they span more than "
            "two orders of magnitude.")))
    if len(facets) > MAX_PANELS:
        section.notes.append(f"First {MAX_PANELS} of {len(facets)} combinations of "
                             f"{', '.join(others)}; the tables below cover all of them.")
    return section


def _density_lines(ax, rows: pd.DataFrame, metric: str, x: str, colors: dict) -> None:
    scale, unit = display_unit(metric)
    for policy, line in sorted(rows.groupby("policy"), key=lambda pl: _rank(colors, pl[0])):
        line = line.sort_values(x)
        xs = line[x].to_numpy(dtype=float)
        color = colors.get(policy)
        ax.plot(xs, line["mean"].to_numpy(dtype=float) * scale, color=color, label=policy)
        over = line["n_overloaded"].to_numpy() > 0
        ys = line["mean"].to_numpy(dtype=float) * scale
        ax.scatter(xs[~over], ys[~over], color=color, s=16, zorder=3)
        ax.scatter(xs[over], ys[over], facecolors="white", edgecolors=color, s=22, zorder=3)
        lo = line["ci_low"].to_numpy(dtype=float) * scale
        if not np.all(np.isnan(lo)):
            ax.fill_between(xs, lo, line["ci_high"].to_numpy(dtype=float) * scale,
                            color=color, alpha=0.2, lw=0)
    values = rows["mean"].to_numpy(dtype=float) * scale
    values = values[np.isfinite(values) & (values > 0)]
    if metric.startswith("latency") and values.size and values.max() > 100 * values.min():
        ax.set_yscale("log")
        _log_ticks(ax.yaxis)
    xs = np.unique(rows[x].to_numpy(dtype=float))
    if len(xs) <= 12:   # the swept values themselves, not 2.5 functions
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(f"{metric}{f' ({unit})' if unit else ''}")
    ax.set_title(metric)
    ax.grid(True, alpha=0.3)
    ax.legend()


def _metric_bars(comparison: Comparison, colors: dict) -> tuple[str, str]:
    """One panel per metric: a bar per (group, policy), CI whiskers."""
    frame, params = comparison.frame, comparison.params
    keys = [k for k, _ in _groups(frame, params)]
    fig, axes = _panels(len(comparison.metrics))
    for ax, metric in zip(axes, comparison.metrics):
        scale, unit = display_unit(metric)
        rows = frame[frame["metric"] == metric]
        policies = sorted(rows["policy"].unique(), key=lambda p: _rank(colors, p))
        width = 0.8 / max(len(policies), 1)
        for i, policy in enumerate(policies):
            cells = rows[rows["policy"] == policy]
            at, mean, err = [], [], [[], []]
            for g, key in enumerate(keys):
                cell = cells
                for p, v in zip(params, key):
                    cell = cell[cell[p].astype(str) == str(v)]
                if cell.empty:
                    continue
                r = cell.iloc[0]
                at.append(g + (i - (len(policies) - 1) / 2) * width)
                mean.append(r["mean"] * scale)
                err[0].append((r["mean"] - r["ci_low"]) * scale)
                err[1].append((r["ci_high"] - r["mean"]) * scale)
            has_ci = not np.all(np.isnan(err[0]))
            ax.bar(at, mean, width, yerr=np.array(err) if has_ci else None, capsize=3,
                   color=colors.get(policy), label=policy)
        ax.set_xticks(range(len(keys)), [_key_text(params, k) or "all runs" for k in keys],
                      fontsize=8)
        ax.set_ylabel(f"{metric}{f' ({unit})' if unit else ''}")
        ax.set_title(metric)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
    pct = int(round(comparison.ci * 100))
    return _png(fig), (f"Each compared metric per policy: mean over seeds, whiskers its {pct}% "
                       "bootstrap CI (where there is more than one seed).")


def cpu_entitlement(results: Results, comparison: Comparison, summary: pd.DataFrame,
                    colors: dict) -> Section:
    section = Section("CPU entitlement over time (autoscalers)")
    schema = results.dataset("intervals").schema.names
    has_limit = CPU_LIMIT_COLUMN in schema or {"quota_us", "period_us"} <= set(schema)
    frame = None
    if has_limit:
        wanted = [c for c in ("run_id", "interval_start_s", "interval_end_s", "cgroup",
                              "usage_s", CPU_LIMIT_COLUMN, "quota_us", "period_us")
                  if c in schema]
        frame = results.table("intervals", columns=wanted).to_pandas()
        frame["limit_mcpu"] = _limit_mcpu(frame)
        frame = frame[frame["limit_mcpu"].notna()]
    if frame is None or frame.empty:
        section.notes.append(
            "No controller limited CPU in these runs: the intervals tables have no "
            f"{CPU_LIMIT_COLUMN} (or quota_us/period_us) values, so there is no entitlement "
            "to plot.")
        return section
    picks = _one_run_per_policy(summary, frame["run_id"].unique(), comparison, colors)
    fig, axes = _panels(len(picks))
    for ax, (_, run) in zip(axes, picks.iterrows()):
        rows = frame[frame["run_id"] == run["run_id"]]
        rows = rows[rows["cgroup"].isin(_innermost(rows["cgroup"].unique()))]
        length = (rows["interval_end_s"] - rows["interval_start_s"]).where(lambda s: s > 0)
        rows = rows.assign(usage_mcpu=rows["usage_s"] / length * 1e3)
        per_t = rows.groupby(["interval_start_s", "interval_end_s"])[
            ["limit_mcpu", "usage_mcpu"]].sum().reset_index()
        # each value holds for its whole interval: stairs over the interval edges
        edges = np.append(per_t["interval_start_s"], per_t["interval_end_s"].iloc[-1])
        color = colors.get(run["policy"])
        ax.stairs(per_t["limit_mcpu"], edges, baseline=None, color=color, lw=1.5,
                  label="limit (sum)")
        ax.stairs(per_t["usage_mcpu"], edges, baseline=None, color=color, ls=":", lw=1.5,
                  label="usage (sum)")
        ax.set_ylim(bottom=0)   # entitlement is read against zero, not a zoomed band
        ax.set_xlabel("time (s)")
        ax.set_ylabel("millicores")
        ax.set_title(f"{run['policy']}, run {run['run_id']} "
                     f"({rows['cgroup'].nunique()} limited cgroups)", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    section.figures.append((_png(fig), "Sum over the innermost CPU-limited cgroups of their "
                            "limit (cpu.max quota/period in force at each interval's end, or "
                            f"{CPU_LIMIT_COLUMN}) and of their usage in the interval; one run "
                            "per policy (densest point, lowest seed)."))
    return section


SIZING_FILE = "sizing.parquet"   # a consolidation's node counts (backends/cluster/sizing.py)
CLUSTER_HEAD = ("run", "policy", "seed", "static nodes", "sized nodes", "reduction",
                "perceived peak (cores)", "effective peak (cores)", "p99 (s)")


def cluster_sizing(results: Results, summary: pd.DataFrame, colors: dict) -> list[Section]:
    """Cluster runs (cluster=kubernetes): node counts and utilisation per run
    and, for consolidations, p99 against the node count of every count tried.
    No section for single-host runs."""
    if "nodes" not in summary or summary["nodes"].isna().all():
        return []
    section = Section("Cluster sizing")
    runs = summary[summary["nodes"].notna()].sort_values(["policy", "seed"])
    cells = []
    for _, r in runs.iterrows():
        sized = r.get("sized_nodes")
        cells.append((r["run_id"], r["policy"], str(r["seed"]), _count(r.get("static_nodes")),
                      _count(sized) if sized != -1 else "none met the target",
                      f"{r['node_reduction_frac']:.0%}" if pd.notna(r.get("node_reduction_frac"))
                      else "", f"{r['perceived_cores_peak']:.1f}",
                      f"{r['effective_cores_peak']:.1f}", f"{r['latency_p99_s']:.3f}"))
    section.html = _html_table(CLUSTER_HEAD, cells, numeric=lambda i: i >= 2)
    section.notes.append("Per run at the node count it ended with: static nodes = every "
                         "function reserving its peak demand; sized nodes = the smallest count "
                         "whose p99 met slo_s; reduction = (static - sized) / static; perceived "
                         "= CPU the nodes report busy, effective = CPU the invocations demand "
                         "(docs/cluster.md).")
    by_id = {p.name: p for p in results.runs}
    tried = {rid: pd.read_parquet(by_id[rid] / SIZING_FILE) for rid in runs["run_id"]
             if rid in by_id and (by_id[rid] / SIZING_FILE).is_file()}
    if not tried:
        section.notes.append("No run searched for a node count (cluster.search = none), so "
                             "there is no p99-against-nodes curve.")
        return [section]
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    seeds = sorted(runs["seed"].unique().tolist())
    for _, r in runs[runs["run_id"].isin(tried)].iterrows():
        frame = tried[r["run_id"]].sort_values("nodes")
        # seeds of one policy share its colour: tell them apart by line and marker
        k = seeds.index(r["seed"])
        ax.plot(frame["nodes"], frame["latency_p99_s"], color=colors.get(r["policy"]),
                marker="osd^v<>"[k % 7], ls=("-", "--", ":", "-.")[k % 4],
                label=f"{r['policy']} seed {r['seed']}")
    ax.axhline(float(runs["slo_s"].iloc[0]), color="grey", ls="--", lw=1, label="slo_s")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("nodes")
    ax.set_ylabel("p99 latency (s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    section.figures.append((_png(fig), "p99 latency at every node count each consolidation "
                            "tried (sizing.parquet)."))
    return [section]


# sched.parquet events the timeline draws from (results/schema.py SCHED)
SWITCH = "sched_switch"
TIMELINE_COLORS = [c for i, c in enumerate(matplotlib.colormaps["tab20"].colors)
                   if i not in (14, 15)]   # tab20 without its greys: grey is "other"
OTHER_CGROUPS = "#c8c8c8"


def timeline(results: Results, comparison: Comparison, summary: pd.DataFrame, colors: dict,
             window_s: tuple[float, float] | None = None) -> Section:
    """One run per policy, CPU by CPU: who ran when (sched_switch pairs),
    the switch costs, the throttled cfs_rqs; an image map gives each bar a
    tooltip, as most bars are too narrow to label."""
    section = Section("Per-CPU timeline")
    by_id = {p.name: p for p in results.runs}
    traced = [r for r in summary["run_id"] if r in by_id and (by_id[r] / SCHED_FILE).is_file()]
    untraced = [r for r in summary["run_id"] if r not in traced]
    if untraced:
        shown = ", ".join(untraced[:10]) + (f" and {len(untraced) - 10} more"
                                              if len(untraced) > 10 else "")
        section.notes.append(
            f"{len(untraced)} of {len(summary)} runs have no {SCHED_FILE} ({shown}), so they "
            "have no timeline: run them with trace=sched (colosim run trace=sched ..., or in "
            "a sweep) to record the schedule.")
    if not traced:
        return section
    # the rule goes above the charts it chose the windows of
    rule = (f"Window: per run, the {TIMELINE_S * 1e3:g} ms holding the most sched_switch events "
            "(the earliest such window, starting at a switch), so the schedule is shown where "
            "it is busiest; colosim report --timeline-window START:END sets it."
            if window_s is None else
            f"Window: {window_s[0]:g} to {window_s[1]:g} s of run time, as given with "
            "--timeline-window.")
    section.html = f'<p class="note">{html.escape(rule)}</p>'
    drawn = []
    for _, run in _one_run_per_policy(summary, traced, comparison, colors).iterrows():
        sched = pq.read_table(by_id[run["run_id"]] / SCHED_FILE, columns=[
            "time_ns", "event", "cpu", "next_pid", "next_comm", "next_cgroup",
            "cost_ns"]).to_pandas()
        lo, hi = (busiest_window(sched, int(TIMELINE_S * NS)) if window_s is None
                  else (int(round(window_s[0] * NS)), int(round(window_s[1] * NS))))
        bars = running_intervals(sched, lo, hi)
        if bars.empty:
            span = (f"{sched['time_ns'].min() / NS:.3f} to {sched['time_ns'].max() / NS:.3f} s"
                    if len(sched) else "no events")
            section.notes.append(f"{run['policy']}, run {run['run_id']}: no task ran in "
                                 f"{lo / NS:g} to {hi / NS:g} s (its trace covers {span}).")
            continue
        drawn.append((run, sched, lo, hi, bars))
    # one colour per cgroup on every chart: the most running time first
    ranked = []
    if drawn:
        busy = pd.concat([bars for *_, bars in drawn])
        ranked = ((busy["end_ns"] - busy["start_ns"]).groupby(busy["cgroup"]).sum()
                  .sort_values(ascending=False).index.tolist())
    palette = dict(zip(ranked, TIMELINE_COLORS))
    for run, sched, lo, hi, bars in drawn:
        cpus = _host_cpus(results.configs.get(run["run_id"], {}), sched)
        switches = sched[(sched["event"] == SWITCH) & (sched["time_ns"] >= lo)
                         & (sched["time_ns"] < hi)]
        throttled = throttled_periods(sched, lo, hi)
        png, areas = _timeline_png(bars, switches, throttled, cpus, lo, hi, palette,
                                   len(ranked) - len(palette))
        cost = switches["cost_ns"].dropna()
        cost_text = (f"{len(switches):,} switches costing {cost.sum() / 1e3:,.1f} µs in all "
                     f"(mean {cost.mean() / 1e3:.2f} µs; drawn black where at least a pixel "
                     "wide, and in each bar's tooltip)" if len(cost) else
                     f"{len(switches):,} switches (their cost is not recorded on this backend)")
        caption = (f"{run['policy']}, run {run['run_id']} (seed {run['seed']}): "
                   f"{lo / NS:.3f} to {hi / NS:.3f} s, {cpus} CPUs, {len(bars):,} running "
                   f"intervals, {cost_text}; {len(throttled):,} throttled cfs_rq periods "
                   "(red, below the lane). Idle is blank; hover a bar for its task.")
        section.html += _figure_html(png, caption, f"per-CPU timeline of run {run['run_id']}",
                                     image_map=(f"timeline-{run['run_id']}", areas))
    return section


def busiest_window(sched: pd.DataFrame, length_ns: int) -> tuple[int, int]:
    """[start, start + length_ns) holding the most sched_switch events, start
    at a switch; the earliest of equals. (0, length_ns) without switches."""
    t = np.sort(sched.loc[sched["event"] == SWITCH, "time_ns"].to_numpy())
    if t.size == 0:
        return 0, length_ns
    counts = np.searchsorted(t, t + length_ns, side="left") - np.arange(t.size)
    start = int(t[int(np.argmax(counts))])
    return start, start + length_ns


def running_intervals(sched: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Who ran on each CPU within [lo, hi) ns: from each sched_switch to a
    task until the CPU's next switch (the trace's last event for the last
    one: it was still running then), clipped to the window. Columns cpu,
    start_ns, end_ns, pid, comm, cgroup, cost_ns (the switch into it)."""
    sw = sched[sched["event"] == SWITCH].sort_values(["cpu", "time_ns"], kind="stable")
    end = sw.groupby("cpu")["time_ns"].shift(-1).fillna(sched["time_ns"].max())
    runs = pd.DataFrame({"cpu": sw["cpu"], "start_ns": sw["time_ns"],
                         "end_ns": end.astype("int64"), "pid": sw["next_pid"],
                         "comm": sw["next_comm"], "cgroup": sw["next_cgroup"],
                         "cost_ns": sw["cost_ns"]})
    runs = runs[(runs["pid"] != 0) & (runs["end_ns"] > runs["start_ns"])
                & (runs["start_ns"] < hi) & (runs["end_ns"] > lo)]
    return runs.assign(start_ns=runs["start_ns"].clip(lower=lo),
                       end_ns=runs["end_ns"].clip(upper=hi)).reset_index(drop=True)


# per task and per cgroup, computed from sched.parquet (results/sched.py)
MAX_METRIC_CGROUPS = 24   # bars per policy in the wake-up latency chart
METRICS_HEAD = ("cgroup", "wake-up latency p50 (µs)", "wake-up latency p99 (µs)",
                "run length p50 (µs)", "involuntary switches", "migrations")


def sched_metrics(results: Results, comparison: Comparison, summary: pd.DataFrame,
                  colors: dict) -> list[Section]:
    """Per policy, the cgroup rows of one run's sched_metrics.parquet and a
    chart of their wake-up latency p99; no section when no run has the file."""
    by_id = {p.name: p for p in results.runs}
    have = [r for r in summary["run_id"]
            if r in by_id and (by_id[r] / SCHED_METRICS_FILE).is_file()]
    if not have:
        return []
    section = Section("Task scheduling metrics per cgroup")
    p99 = {}
    for _, run in _one_run_per_policy(summary, have, comparison, colors).iterrows():
        frame = pd.read_parquet(by_id[run["run_id"]] / SCHED_METRICS_FILE)
        rows = frame[frame["level"] == "cgroup"].set_index("cgroup")
        rows = rows.loc[sorted(rows.index, key=_natural)]
        p99[run["policy"]] = rows["wakeup_latency_p99_s"]
        cells = [(str(cgroup), _us(r["wakeup_latency_p50_s"]), _us(r["wakeup_latency_p99_s"]),
                  _us(r["run_length_p50_s"]),
                  "" if pd.isna(r["involuntary_frac"]) else f"{r['involuntary_frac']:.1%}",
                  _count(r["migrations"])) for cgroup, r in rows.iterrows()]
        section.html += (f"<h3>{html.escape(str(run['policy']))}, run "
                         f"{html.escape(str(run['run_id']))} (seed {run['seed']})</h3>"
                         + _html_table(METRICS_HEAD, cells, numeric=lambda i: i >= 1))
    section.notes.append(
        f"The cgroup rows of each run's {SCHED_METRICS_FILE}, one run per policy (densest "
        "point, lowest seed): wake-up latency = wake-up to running, run length = time on a CPU "
        "per switch-in, involuntary switches = the share of switches away that were "
        "preemptions, migrations = moves between CPUs.")
    if all(v.isna().all() for v in p99.values()):
        section.notes.append("No cgroup has a wake-up latency p99 (no wake-ups), so there is "
                             "no chart.")
    else:
        section.figures.append(_p99_chart(p99, colors))
    return [section]


def _p99_chart(p99: dict[str, pd.Series], colors: dict) -> tuple[str, str]:
    """Grouped bars: wake-up latency p99 per cgroup, a bar per policy."""
    worst = pd.concat(p99.values(), axis=1).max(axis=1).dropna()
    cgroups = sorted(worst.nlargest(MAX_METRIC_CGROUPS).index, key=_natural)
    parent = posixpath.commonpath(cgroups) if len(cgroups) > 1 else ""
    labels = [c[len(parent):].lstrip("/") or c for c in cgroups]
    width = min(12.9, max(6.0, 1.5 + 0.25 * len(cgroups) * max(1.0, len(p99) / 2)))
    fig = Figure(figsize=(width, 4.2))
    fig.subplots_adjust(left=0.9 / width, right=1 - 0.15 / width, top=0.95, bottom=0.85 / 4.2)
    ax = fig.add_subplot()
    x = np.arange(len(cgroups))
    step = 0.8 / len(p99)
    for k, (policy, values) in enumerate(p99.items()):
        ax.bar(x - 0.4 + step * (k + 0.5), values.reindex(cgroups).to_numpy() * 1e6, step,
               color=colors.get(policy), label=policy)
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_yscale("log")   # tails span µs to ms
    # 1-2-5 labels in plain µs: a p99 range is often under a decade
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("wake-up latency p99 (µs, log scale)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    caption = f"Wake-up latency p99 per cgroup{f' under {parent}' if parent else ''}."
    if len(cgroups) < len(worst):
        caption += (f" The {len(cgroups)} of {len(worst)} cgroups with the highest p99 "
                    "under any policy; the tables list all of them.")
    return _png(fig), caption


def _natural(name) -> list:
    """func-2 before func-10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(name))]


def _us(seconds) -> str:
    return "" if pd.isna(seconds) else f"{seconds * 1e6:,.1f}"


def _count(value) -> str:
    return "" if value is None or pd.isna(value) else str(int(value))


def validation(path: Path, results: Results) -> Section:
    """`colosim validate`'s error table and, per scenario, the latency CDFs
    of the real and the simulated run."""
    frame = read_validation(path)
    section = Section("Validation: simulator vs this host")
    section.html = (f"<p><b>{html.escape(verdict(frame))}</b></p>"
                    + _html_table(head := validation_head(frame), validation_cells(frame),
                                  numeric=lambda i: numeric_column(head, i))
                    + "<ul>"
                    + "".join(f"<li>{html.escape(line)}</li>" for line in ks_lines(frame))
                    + "</ul>")
    section.notes.append("error = (sim - real) / real; result: pass or MISS against the "
                         "target (with repetitions: against max(target, spread), the real "
                         "host's own spread), missing when either backend has no value "
                         "(never a pass).")
    runs = frame.drop_duplicates("scenario")[["scenario", "real_run", "sim_run"]]
    runs = runs[(runs["real_run"] != "") & (runs["sim_run"] != "")]
    if runs.empty:
        section.notes.append("No scenario ran on both backends, so there are no latency "
                             "distributions to compare.")
        return section
    requests = results.table("requests", columns=["run_id", "latency_s", "dropped"]).to_pandas()
    done = requests[~requests["dropped"].astype(bool) & requests["latency_s"].notna()
                    & (requests["latency_s"] > 0)]
    # workloads without requests (rtapp) have no latency distribution to draw
    with_requests = set(done["run_id"])
    runs = runs[runs["real_run"].isin(with_requests) | runs["sim_run"].isin(with_requests)]
    if runs.empty:
        return section
    shown = list(runs.itertuples())[:MAX_PANELS * 2]
    fig, axes = _panels(len(shown))
    for ax, r in zip(axes, shown):
        for label, run_id, color in (("real", r.real_run, "black"), ("sim", r.sim_run, "C1")):
            ms = done.loc[done["run_id"] == run_id, "latency_s"].to_numpy() * 1e3
            if ms.size:
                q = np.linspace(0, 1, min(CDF_POINTS, ms.size))
                ax.plot(np.quantile(ms, q), q, label=f"{label} (n={ms.size:,})", color=color)
        ax.set_xscale("log")
        # a narrow range (periodic bursts) gets labelled minor ticks that overlap
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(r.scenario, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    caption = "Completed requests after warmup of each scenario's real and simulated run."
    if len(shown) < len(runs):
        caption += f" First {len(shown)} of {len(runs)} scenarios."
    section.figures.append((_png(fig), caption))
    return section


def tables(comparison: Comparison) -> Section:
    parts = []
    for metric in comparison.metrics:
        head, body = table_cells(comparison, metric)
        numeric = len(comparison.params) + 1
        parts.append(f"<h3>{html.escape(table_title(comparison, metric))}</h3>"
                     + _html_table(head, body, numeric=lambda i: i >= numeric))
    return Section("Comparison tables", html="".join(parts))


# ---------------------------------------------------------------- helpers

def _policies(summary: pd.DataFrame) -> pd.Series:
    return policy_labels(summary)


def _colors(comparison: Comparison, summary: pd.DataFrame) -> dict:
    policies = list(dict.fromkeys(comparison.frame["policy"]))
    policies += [p for p in summary["policy"].unique() if p not in policies]
    cmap = matplotlib.colormaps["tab10"]
    return {p: cmap(i % 10) for i, p in enumerate(policies)}


def _rank(colors: dict, policy: str) -> int:
    """Baseline first, then the comparison's order, in every legend."""
    return list(colors).index(policy)


def _groups(frame: pd.DataFrame, params: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    if not params:
        return [((), frame)]
    return [(k if isinstance(k, tuple) else (k,), g)
            for k, g in frame.groupby(params, dropna=False, sort=True)]


def _sample(groups: list) -> list:
    if len(groups) <= MAX_PANELS:
        return groups
    picks = np.linspace(0, len(groups) - 1, MAX_PANELS).round().astype(int)
    return [groups[i] for i in dict.fromkeys(picks)]


def _key_text(params: list[str], key: tuple) -> str:
    return ", ".join(f"{p}={v}" for p, v in zip(params, key))


def _one_run_per_policy(summary: pd.DataFrame, run_ids, comparison: Comparison,
                        colors: dict) -> pd.DataFrame:
    """Summary rows of one of ``run_ids`` per policy: the densest group,
    lowest seed, so policies line up; at most ``MAX_PANELS``, baseline first."""
    runs = summary[summary["run_id"].isin(run_ids)]
    x = density_key(comparison.params, summary)
    if x is not None and runs[x].notna().any():   # runs without the key have NaN
        runs = runs[runs[x] == runs[x].max()]
    picks = runs.sort_values("seed").groupby("policy", sort=False).head(1)
    picks = picks.sort_values("policy", key=lambda p: p.map(lambda x: _rank(colors, x)))
    return picks[:MAX_PANELS]


def _limit_mcpu(frame: pd.DataFrame) -> pd.Series:
    if CPU_LIMIT_COLUMN in frame:
        return frame[CPU_LIMIT_COLUMN].astype(float)
    # cpu.max: quota per period; a null quota means no limit
    return frame["quota_us"].astype(float) / frame["period_us"].astype(float) * 1e3


def _innermost(cgroups) -> list[str]:
    """Limited cgroups with no limited descendant, so nested limits are not
    counted twice."""
    names = [str(c).rstrip("/") or "/" for c in cgroups]
    return [c for c, name in zip(cgroups, names)
            if not any(o != name and o.startswith(name.rstrip("/") + "/") for o in names)]


def _html_table(head, rows, numeric) -> str:
    """A table of text cells; ``numeric(i)``: column i is right-aligned figures."""
    body = "".join("<tr>" + "".join(f"<td{' class=num' if numeric(i) else ''}>"
                                    f"{html.escape(c)}</td>" for i, c in enumerate(row))
                   + "</tr>" for row in rows)
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table>")


def _host_cpus(config: dict, sched: pd.DataFrame) -> int:
    """The timeline's lanes: the host's CPUs (config.yaml's host), and at
    least as many as the trace names."""
    host = config.get("host") or {}
    try:
        n = int(host["sockets"]) * int(host["cores"]) * int(host["threads_per_core"])
    except (KeyError, TypeError, ValueError):
        n = 0
    return max(n, int(sched["cpu"].max()) + 1 if len(sched) else 1)


def _timeline_png(bars: pd.DataFrame, switches: pd.DataFrame, throttled: pd.DataFrame,
                  cpus: int, lo: int, hi: int, palette: dict, n_other: int) -> tuple[str, str]:
    """The chart and its image map's <area> tags (one per bar and throttled
    period, in the PNG's pixels: the figure is laid out in whole pixels)."""
    legend = [Patch(color=c, label=g) for g, c in palette.items()]
    if n_other:
        legend.append(Patch(color=OTHER_CGROUPS, label=f"{n_other} other cgroups"))
    legend += [Patch(color="black", label="switch cost"),
               Patch(color="red", label="throttled cfs_rq")]
    columns = 6
    width, lane, left, right, top = 1240, 22, 70, 12, 10
    bottom = 44 + 17 * math.ceil(len(legend) / columns)   # x labels, then the legend
    height = top + lane * cpus + bottom
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    ax = fig.add_axes((left / width, bottom / height, 1 - (left + right) / width,
                       lane * cpus / height))
    ms = 1e-6   # drawn in ms of run time
    run_y, run_h, thr_y, thr_h = -0.4, 0.7, 0.32, 0.12   # offsets within a lane
    for cpu, rows in bars.groupby("cpu"):
        ax.broken_barh(list(zip(rows["start_ns"] * ms, (rows["end_ns"] - rows["start_ns"]) * ms)),
                       (cpu + run_y, run_h), linewidth=0,
                       facecolors=[palette.get(g, OTHER_CGROUPS) for g in rows["cgroup"]])
    # a cost narrower than a pixel would still be drawn a pixel wide: such
    # costs are in the tooltips and the caption only
    pixel_ns = (hi - lo) / (width - left - right)
    cost = switches[switches["cost_ns"] >= pixel_ns]
    for cpu, rows in cost.groupby("cpu"):
        ax.broken_barh(list(zip(rows["time_ns"] * ms,
                                np.minimum(rows["cost_ns"], hi - rows["time_ns"]) * ms)),
                       (cpu + run_y, run_h), linewidth=0, facecolors="black")
    for cpu, rows in throttled.groupby("cpu"):
        ax.broken_barh(list(zip(rows["start_ns"] * ms, (rows["end_ns"] - rows["start_ns"]) * ms)),
                       (cpu + thr_y, thr_h), linewidth=0, facecolors="red")
    ax.set_xlim(lo * ms, hi * ms)
    ax.set_ylim(cpus - 0.5, -0.5)    # CPU 0 on top
    ax.set_yticks(range(cpus), [f"CPU {c}" for c in range(cpus)], fontsize=7)
    ax.set_xlabel("time since the run's start (ms)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(handles=legend, loc="lower left", ncol=columns, fontsize=7, frameon=False,
               bbox_to_anchor=(left / width, 0))

    def rects(frame, y, h):
        """Pixel boxes (x0, y0, x1, y1, from the top left) of [start, end) x [y, y + h)."""
        x0 = frame["start_ns"].to_numpy() * ms
        x1 = frame["end_ns"].to_numpy() * ms
        cpu = frame["cpu"].to_numpy()
        p0 = ax.transData.transform(np.column_stack([x0, cpu + y + h]))
        p1 = ax.transData.transform(np.column_stack([x1, cpu + y]))
        top, low = height - p0[:, 1], height - p1[:, 1]
        box = np.column_stack([p0[:, 0], np.minimum(top, low), p1[:, 0], np.maximum(top, low)])
        box = np.floor(box).astype(int)
        box[:, 2] = np.maximum(box[:, 2], box[:, 0] + 1)   # narrower than a pixel: one
        return box

    areas = []
    for box, r in zip(rects(bars, run_y, run_h), bars.itertuples()):
        cost_text = ("" if pd.isna(r.cost_ns)
                     else f"; switched in at a cost of {r.cost_ns / 1e3:.1f} µs")
        areas.append((box, r.cpu, "run",
                      f"CPU {r.cpu}: {r.comm} (pid {int(r.pid)}, {r.cgroup}) "
                      f"{r.start_ns * ms:.3f} to {r.end_ns * ms:.3f} ms{cost_text}"))
    for box, r in zip(rects(throttled, thr_y, thr_h), throttled.itertuples()):
        areas.append((box, r.cpu, "throttled", f"CPU {r.cpu}: {r.cgroup} throttled "
                      f"{r.start_ns * ms:.3f} to {r.end_ns * ms:.3f} ms"))
    tags = "".join(f'<area shape="rect" coords="{",".join(map(str, box))}" data-cpu="{cpu}" '
                   f'data-kind="{kind}" title="{html.escape(title)}">'
                   for box, cpu, kind, title in areas)
    return _png(fig), tags


def _log_ticks(axis) -> None:
    """Ticks at 1, 2 and 5 times the powers of ten, labelled as plain
    numbers: a latency range within a decade still gets labels, and
    mathtext minor labels (3x10^-1) no longer overlap."""
    axis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


PANEL_IN = (6.6, 4.4)   # inches per panel: two side by side fill the page at 1:1


def _panels(n: int, columns: int | None = None):
    columns = columns or min(n, 2)
    rows = math.ceil(n / columns)
    w, h = PANEL_IN
    # Fixed margins: a layout engine measures every tick label's extent and
    # was most of the report's run time.
    fig = Figure(figsize=(w * columns, h * rows))
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    fig.subplots_adjust(left=0.8 / (w * columns), right=0.98,
                        bottom=0.6 / (h * rows), top=1 - 0.35 / (h * rows),
                        wspace=0.25, hspace=0.4)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure_html(png: str, caption: str, alt: str,
                 image_map: tuple[str, str] | None = None) -> str:
    """An embedded PNG with its caption. ``image_map`` (name, <area> tags):
    the image keeps its own size (the figure scrolls sideways instead), as
    a scaled image would no longer line up with its areas."""
    img = f'<img class="plot" alt="{html.escape(alt)}" src="data:image/png;base64,{png}"'
    caption = f"<figcaption>{html.escape(caption)}</figcaption>"
    if image_map is None:
        return f"<figure>{img}>{caption}</figure>"
    name, areas = image_map
    return (f'<figure class="mapped"><div class="scroll">{img} usemap="#{name}"></div>'
            f'<map name="{name}">{areas}</map>{caption}</figure>')


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1320px; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
h3 { font-size: 0.95em; margin-top: 1.5em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dt { font-weight: 600; } dd { margin: 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.mapped .scroll { overflow-x: auto; } figure.mapped img { max-width: none; }
figcaption, p.note { font-size: 0.9em; color: #555; }
table { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; } th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
"""


def _page(title: str, sections: list[Section]) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = []
    for s in sections:
        slug = "".join(ch if ch.isalnum() else "-" for ch in s.title.lower()).strip("-")
        parts = [f'<section id="{slug}"><h2>{html.escape(s.title)}</h2>', s.html]
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in s.notes]
        parts += [_figure_html(png, c, s.title) for png, c in s.figures]
        body.append("".join(parts) + "</section>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p class=note>Generated {stamp} by colosim report."
            f"</p>{''.join(body)}</body></html>\n")
