"""One-screen human summary of a run's summary table."""

import math
from typing import Sequence

import pyarrow as pa

from results.schema import OVERLOAD_RULE

MISSING = "-"


def format_summary(summary: pa.Table) -> str:
    """Describe the first row of a summary table in about fifteen lines."""
    row = {name: values[0] for name, values in summary.slice(0, 1).to_pydict().items()}
    get = row.get

    def num(key: str, fmt: str, scale: float = 1.0) -> str:
        value = get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        return format(value * scale if scale != 1.0 else value, fmt)

    real = get("backend") == "real"
    wall, simulated = get("wall_time_s"), get("duration_s")
    speed = (
        f"{simulated / wall:,.1f} simulated s per wall s" if wall and simulated else MISSING
    )
    latency = " / ".join(
        num(f"latency_{q}_s", ",.2f", 1e3) for q in ("mean", "p50", "p95", "p99")
    )
    requests, overload, of_finished = _request_lines(row)
    lines = [
        ("run", f"{get('run_id') or MISSING}  (experiment {get('experiment') or MISSING})"),
        (
            "scenario",
            f"{get('scenario')} on {get('host')}, scheduler {get('scheduler')}, "
            + (f"controller {get('controllers')}, " if get("controllers") not in ("", "none")
               else "")
            + f"seed {get('seed')}",
        ),
        ("duration", f"{num('duration_s', ',.1f')} s "
                     + ("on the real host" if real else "simulated")),
        ("requests", requests),
        *overload,
        (
            "throughput",
            f"{num('throughput_rps', ',.1f')} req/s, goodput {num('goodput_rps', ',.1f')} req/s "
            f"(SLO {num('slo_s', ',.3g')} s)",
        ),
        ("latency ms", f"{latency}  (mean / p50 / p95 / p99{of_finished})"),
        ("CPU util", f"{num('cpu_util', '.1f', 100)} %"),
        ("sched overhead", f"{num('sched_overhead_frac', '.2f', 100)} % of CPU time"),
        (
            "ctx switches",
            f"{num('ctx_switches', ',d')} ({num('ctx_switch_rate_per_s', ',.0f')}/s), "
            f"mean cost {num('ctx_switch_cost_mean_us', ',.2f')} µs",
        ),
        ("migrations", num("migrations", ",d")),
        ("runqueue wait", f"{num('runqueue_wait_mean_s', ',.3f', 1e3)} ms mean"),
    ]
    if get("nr_periods"):   # some cgroup had a cpu.max
        lines.append((
            "throttling",
            f"{num('nr_throttled', ',d')} of {num('nr_periods', ',d')} periods throttled, "
            f"{num('throttled_time_s', ',.3f')} s throttled in all",
        ))
    if real and get("host_disturbed") is not None:
        quiet = (f"steal {num('host_steal_frac', '.1f', 100)} %, other load "
                 f"{num('host_other_frac', '.1f', 100)} %")
        lines.append(("host", f"DISTURBED: {get('host_disturbed_reason')}"
                      if get("host_disturbed") else f"quiet ({quiet})"))
    if not real:   # a real run's wall time is its duration, and it has no events
        lines += [
            ("wall time", f"{num('wall_time_s', ',.2f')} s ({speed})"),
            ("events", num("sim_events", ",d")),
        ]
    width = max(len(label) for label, _ in lines)
    return "\n".join(f"{label:<{width}}  {text}" for label, text in lines)


def _request_lines(row: dict) -> tuple[str, list, str]:
    """The requests line, the overload line (none for a run written before
    the summary had one) and what the latency statistics are over."""
    n, dropped, unfinished = (row.get(k) for k in ("n_requests", "n_dropped", "n_unfinished"))
    if n is None or dropped is None:
        return MISSING, [], ""
    finished = n - dropped
    if unfinished is None:   # an older run directory: nothing known of the unfinished
        return f"{n:,}, {dropped:,} dropped", [], f" of the {finished:,} finished"
    arrived = n + unfinished
    share = f" ({100 * unfinished / arrived:.1f} %)" if arrived else ""
    requests = (f"{arrived:,} arrived in the window: {finished:,} finished, "
                f"{unfinished:,} unfinished{share}, {dropped:,} dropped")
    of_finished = f" of the {finished:,} finished"
    if unfinished:
        of_finished += f"; {unfinished:,} unfinished excluded"
    overloaded = row.get("overloaded")
    if overloaded is None:
        return requests, [], of_finished
    if not overloaded:
        return requests, [("overloaded", "no")], of_finished
    # the rule is OVERLOAD_RULE (docs/results.md); the line gives its measures
    return requests, [("overloaded", (
        f"YES, the backlog grew: {unfinished:,} unfinished, "
        f"{row.get('backlog_ratio'):,.1f}x what a steady state holds in flight"))], of_finished


# label columns of the sweep table: always, and (the second) only where
# they differ between the runs
SWEEP_LABELS = (("scheduler", "scheduler"), ("scenario", "workload"), ("seed", "seed"))
SWEEP_LABELS_IF_VARIED = (("host", "host"), ("controllers", "controllers"),
                          ("backend", "backend"))
# (column, heading, scale, format) of its measures
SWEEP_COLUMNS = (
    ("throughput_rps", "req/s", 1.0, ",.1f"),
    ("latency_p50_s", "p50 ms", 1e3, ",.1f"),
    ("latency_p99_s", "p99 ms", 1e3, ",.1f"),
    ("unfinished_frac", "unfinished %", 1e2, ".1f"),
    ("overloaded", "overloaded", None, "yes/no"),
    ("sched_overhead_frac", "overhead %", 1e2, ".2f"),
    ("ctx_switch_rate_per_s", "switches/s", 1.0, ",.0f"),
)


def format_sweep(summary: pa.Table, keys: Sequence[str] = ()) -> str:
    """One line per run of a sweep's summary, labelled by the scheduler,
    workload and seed, the host, controllers and backend where they vary,
    and ``keys`` (the swept keys: results.readers.Results.keys); sorted by
    the keys, then the labels, numbers in numeric order.  A footer says
    what the latencies are over and which runs were overloaded."""
    rows = summary.to_pylist()
    labels = [*SWEEP_LABELS,
              *((c, h) for c, h in SWEEP_LABELS_IF_VARIED
                if len({str(r.get(c)) for r in rows}) > 1),
              *((k, k) for k in keys if k in summary.column_names)]
    order = [c for c, _ in labels[len(SWEEP_LABELS):]] + [c for c, _ in SWEEP_LABELS]
    rows.sort(key=lambda r: tuple(_sort_key(r.get(c)) for c in order))

    def cell(row, column, scale, fmt):
        value = row.get(column)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        if fmt == "yes/no":
            return "yes" if value else "no"
        return format(value * scale if scale else value, fmt)

    table = [[h for _, h in labels] + [h for _, h, _, _ in SWEEP_COLUMNS]]
    table += [[MISSING if r.get(c) is None else str(r.get(c)) for c, _ in labels]
              + [cell(r, c, scale, fmt) for c, _, scale, fmt in SWEEP_COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(v.rjust(w) if i >= len(labels) else v.ljust(w)
                       for i, (v, w) in enumerate(zip(line, widths))).rstrip()
             for line in table]
    return "\n".join(lines + _sweep_footer(rows))


def _sort_key(value) -> tuple:
    # numbers before text, in numeric order (2 before 10); missing last
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, str(value))


def _sweep_footer(rows: list[dict]) -> list[str]:
    footer = []
    unfinished = sum(r.get("n_unfinished") or 0 for r in rows)
    if unfinished:
        footer.append(f"p50 and p99 are of the finished requests: {unfinished:,} unfinished "
                      "ones are not in them (unfinished %: of each run's arrivals)")
    overloaded = sum(bool(r.get("overloaded")) for r in rows)
    if overloaded:
        footer.append(f"{overloaded} of {len(rows)} runs overloaded (backlog growing: "
                      f"{OVERLOAD_RULE}); their latency and req/s understate the load")
    return [""] + footer if footer else []
