"""Columns of the run-directory tables (DESIGN.md, "Run directory").

Each table has required columns with fixed types. Extra columns are allowed
everywhere (later models add summary and interval columns); a few known
optional interval columns have their types fixed too, so every writer spells
them the same way. Units are in the column names; times are seconds.
"""

import pyarrow as pa

SUMMARY = pa.schema(
    [
        ("run_id", pa.string()),
        ("experiment", pa.string()),
        ("scenario", pa.string()),
        ("scheduler", pa.string()),
        ("controllers", pa.string()),
        ("backend", pa.string()),
        ("host", pa.string()),
        ("seed", pa.int64()),
        ("duration_s", pa.float64()),
        ("n_requests", pa.int64()),
        ("throughput_rps", pa.float64()),
        ("goodput_rps", pa.float64()),
        ("slo_s", pa.float64()),
        ("latency_mean_s", pa.float64()),
        ("latency_p50_s", pa.float64()),
        ("latency_p95_s", pa.float64()),
        ("latency_p99_s", pa.float64()),
        ("cpu_util", pa.float64()),
        ("sched_overhead_frac", pa.float64()),
        ("ctx_switches", pa.int64()),
        ("ctx_switch_rate_per_s", pa.float64()),
        ("ctx_switch_cost_mean_us", pa.float64()),
        ("migrations", pa.int64()),
        ("runqueue_wait_mean_s", pa.float64()),
        ("nr_periods", pa.int64()),
        ("nr_throttled", pa.int64()),
        ("throttled_time_s", pa.float64()),
        ("wall_time_s", pa.float64()),
        ("sim_events", pa.int64()),
        ("n_dropped", pa.int64()),
    ]
)

REQUESTS = pa.schema(
    [
        ("function", pa.string()),
        ("cgroup", pa.string()),
        ("arrival_s", pa.float64()),
        ("start_s", pa.float64()),
        ("end_s", pa.float64()),
        ("latency_s", pa.float64()),
        ("cpu_demand_s", pa.float64()),
        ("dropped", pa.bool_()),
    ]
)

INTERVALS = pa.schema(
    [
        ("interval_start_s", pa.float64()),
        ("interval_end_s", pa.float64()),
        ("cgroup", pa.string()),
        ("usage_s", pa.float64()),  # CPU seconds the cgroup used in the interval
    ]
)

# Optional interval columns: free to omit, but typed when present.
INTERVALS_OPTIONAL = pa.schema(
    [
        ("usage_frac", pa.float64()),  # usage_s / (interval length x host CPUs)
        ("nr_running_mean", pa.float64()),
        # the cgroup's own cpu.stat bandwidth counters, counted over the interval
        ("nr_periods", pa.int64()),
        ("nr_throttled", pa.int64()),
        ("throttled_time_s", pa.float64()),
        ("nr_bursts", pa.int64()),
        ("burst_time_s", pa.float64()),
        # cpu.max in force at the interval's end
        ("quota_us", pa.int64()),  # null = no limit
        ("period_us", pa.int64()),
    ]
)

TABLES = {"summary": SUMMARY, "requests": REQUESTS, "intervals": INTERVALS}
_OPTIONAL = {"intervals": INTERVALS_OPTIONAL}


class SchemaError(ValueError):
    """A results table lacks a required column or has a column of the wrong type."""


def check_table(name: str, table: pa.Table) -> None:
    """Raise SchemaError unless `table` fits the `name` table's schema."""
    if name not in TABLES:
        raise SchemaError(f"unknown results table {name!r}; known: {', '.join(TABLES)}")
    missing = [f.name for f in TABLES[name] if f.name not in table.schema.names]
    if missing:
        raise SchemaError(f"{name} table is missing required columns: {', '.join(missing)}")
    typed = list(TABLES[name]) + list(_OPTIONAL.get(name, []))
    wrong = [
        f"{f.name} is {table.schema.field(f.name).type}, expected {f.type}"
        for f in typed
        if f.name in table.schema.names and table.schema.field(f.name).type != f.type
    ]
    if wrong:
        raise SchemaError(f"{name} table has columns of the wrong type: {'; '.join(wrong)}")
