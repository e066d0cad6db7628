"""Columns of the run-directory tables (README.md, "Run directory"; what
each column means: docs/results.md).

Each table has required columns with fixed types. Extra columns are allowed
everywhere (later models add summary and interval columns); a few known
optional interval columns have their types fixed too, so every writer spells
them the same way. Units are in the column names; times are seconds.
"""

import uuid

import numpy as np
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
        # switches away from the workload's tasks per second: what perf's
        # context-switches event counts per cgroup, so both backends measure it
        ("switch_out_rate_per_s", pa.float64()),
        ("migrations", pa.int64()),
        ("runqueue_wait_mean_s", pa.float64()),
        ("nr_periods", pa.int64()),
        ("nr_throttled", pa.int64()),
        ("throttled_time_s", pa.float64()),
        ("wall_time_s", pa.float64()),
        ("sim_events", pa.int64()),
        ("n_dropped", pa.int64()),
        # requests of the window still running or queued at the end, and
        # whether they show a growing backlog (request_columns)
        ("n_unfinished", pa.int64()),
        ("unfinished_frac", pa.float64()),
        ("backlog_ratio", pa.float64()),
        ("overloaded", pa.bool_()),
    ]
)

# The run's identity on every row of requests.parquet and intervals.parquet
# (constant per file, copied from the summary by results/rundir.py), so
# many runs' files read as one table with a glob, e.g. DuckDB's
# read_parquet('sweeps/x/runs/*/requests.parquet'), without a join on
# file names.  They come first in those files.
RUN_LABELS = pa.schema(
    [
        ("run_id", pa.string()),
        ("scheduler", pa.string()),
        ("controllers", pa.string()),
        ("seed", pa.int64()),
    ]
)

REQUESTS = pa.schema(
    [
        *RUN_LABELS,
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
        *RUN_LABELS,
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
        # per-cgroup perf counts: the real backend's where the PMU has them;
        # the simulator's for cgroups with a memory profile
        ("instructions", pa.int64()),
        ("cycles", pa.int64()),
        ("stalled_cycles_frontend", pa.int64()),
        ("stalled_cycles_backend", pa.int64()),
        # memory model (sim/memory/progress.py, docs/memory.md): cgroups with
        # a memory profile, null on the other rows; absent from runs without
        # profiles.  Rates over the interval (null if the cgroup did not run):
        ("ipc", pa.float64()),  # instructions / cycles
        ("ipce", pa.float64()),  # 1 - memory stall cycles / cycles (thesis Eq. 3.3-3.4)
        ("ipc_rel_alone", pa.float64()),  # IPC / IPC alone (the policy's target measure)
        ("llc_miss_rate", pa.float64()),  # LLC misses / LLC references
        ("llc_occupancy_mb", pa.float64()),  # CMT llc_occupancy at the end, MiB
        ("mbm_bytes", pa.int64()),  # DRAM bytes moved in the interval (MBM total)
        # the RDT allocation in force at the end (null where the host lacks CAT / MBA)
        ("l3_ways", pa.int64()),
        ("mb_percent", pa.int64()),
    ]
)

# A named thread's schedule (``trace.thread``, either backend; results/sched.py
# ThreadSamples): from sched.parquet, over the window after warmup, the tasks
# with that comm pooled.  Only in runs traced with a thread named.
THREAD_SUMMARY = pa.schema(
    [
        ("thread_comm", pa.string()),
        ("thread_tasks", pa.int64()),             # tasks with that comm (0: none ran)
        ("thread_migrations", pa.int64()),        # their sched_migrate_task events
        ("thread_wakeups", pa.int64()),           # wake-up latency samples
        ("thread_wakeup_latency_mean_s", pa.float64()),  # wake-up to the next switch-in
        ("thread_wakeup_latency_p50_s", pa.float64()),
        ("thread_wakeup_latency_p95_s", pa.float64()),
        ("thread_wakeup_latency_p99_s", pa.float64()),
        ("thread_wakeup_latency_max_s", pa.float64()),
    ]
)

# Optional summary columns: free to omit (a real-host run may lack them),
# typed when present.
SUMMARY_OPTIONAL = pa.schema(
    [
        # CPU limit (1000 x quota / period) of the cgroups that had a cpu.max,
        # summed over them: time-averaged over the window after warmup, and at
        # the end; NaN when no cgroup was ever limited (scenarios/simulate.py)
        ("cpu_limit_mcpu_mean", pa.float64()),
        ("cpu_limit_mcpu_final", pa.float64()),
        # memory model (sim/memory/progress.py, docs/memory.md); NaN when no
        # cgroup had a memory profile
        ("llc_miss_rate", pa.float64()),
        ("llc_miss_rate_min", pa.float64()),
        ("llc_miss_rate_max", pa.float64()),
        ("llc_occupancy_mb", pa.float64()),
        ("ipce_global", pa.float64()),
        ("ipce_priority", pa.float64()),
        ("ipce_batch", pa.float64()),
        # the same per job, then the mean over the jobs (each weighs the same)
        ("ipce_priority_job_mean", pa.float64()),
        ("ipce_batch_job_mean", pa.float64()),
        ("time_above_target_frac", pa.float64()),
        # CFS-LAGS's mechanism counters over the window after warmup
        # (policies/kernel/lags.py LAGS.stats; scenarios/simulate.py policy_stats):
        # entities queued by Load Credit, wakeup and tick preemptions decided
        # by credit, placements that differ from CFS's, balancer credit pulls
        ("lags_credit_queued", pa.int64()),
        ("lags_wakeup_preemptions", pa.int64()),
        ("lags_tick_preemptions", pa.int64()),
        ("lags_placements", pa.int64()),
        ("lags_pulls", pa.int64()),
        # the bentoml request path's OpenMP teams over the window after
        # warmup (sim/workloads/openmp.py summary_columns): CPU time spent
        # spinning at barriers and the dock (seconds, share of window x
        # CPUs), sleeps at them, regions and inferences run
        ("omp_spin_s", pa.float64()),
        ("omp_spin_frac", pa.float64()),
        ("omp_futex_waits", pa.int64()),
        ("omp_regions", pa.int64()),
        ("omp_inferences", pa.int64()),
        *THREAD_SUMMARY,
    ]
)

# sched.parquet (``trace=sched``): the schedule as the kernel's tracepoints
# give it, one row per event, written alike by the simulator
# (sim/tracing.py) and the real backend.  Times are ns since the run's t0.
# Who an event is about: ``sched_switch`` fills prev_* (the task leaving the
# CPU, with its state: R preempted, S sleeping, X exited) and next_* (the task
# switched to; pid 0 is the idle task, comm ``swapper/<cpu>``); every other
# event names its task in next_*.  ``cpu`` is the CPU switched on, the
# target CPU of a wake-up, the destination of a migration (``orig_cpu`` its
# source) and the CPU of a throttled or unthrottled cfs_rq (whose group is
# ``next_cgroup``).  ``cost_ns`` is the switch's charged cost (the
# simulator's cost model; null on the real host); a switch from idle is
# recorded after the idle exit, which its cost_ns leaves out (docs/tracing.md).
SCHED_EVENTS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task",
                "throttle_cfs_rq", "unthrottle_cfs_rq")
SCHED = pa.schema(
    [
        ("time_ns", pa.int64()),
        ("event", pa.string()),       # one of SCHED_EVENTS
        ("cpu", pa.int32()),
        ("prev_pid", pa.int64()),
        ("prev_comm", pa.string()),
        ("prev_cgroup", pa.string()),
        ("prev_state", pa.string()),  # R | S | X (sched_switch only)
        ("next_pid", pa.int64()),
        ("next_comm", pa.string()),
        ("next_cgroup", pa.string()),
        ("orig_cpu", pa.int32()),     # sched_migrate_task only
        ("cost_ns", pa.int64()),      # sched_switch on the simulator only
    ]
)
SCHED_FILE = "sched.parquet"

# sched_metrics.parquet: per-task and per-cgroup scheduling metrics computed
# from sched.parquet (results/sched.py, which defines each one), written
# beside it.  One row per task (level "task": pid, comm and cgroup of the
# task) and one per cgroup (level "cgroup": pid and comm null; the cgroup's
# tasks pooled, so its percentiles are over all their samples).
SCHED_METRICS = pa.schema(
    [
        ("level", pa.string()),                  # "task" | "cgroup"
        ("pid", pa.int64()),                     # null on cgroup rows
        ("comm", pa.string()),                   # null on cgroup rows
        ("cgroup", pa.string()),
        ("runtime_s", pa.float64()),             # sum of the run lengths
        ("n_runs", pa.int64()),                  # runs: switch-in to the next switch-out
        ("n_wakeups", pa.int64()),               # sched_wakeup + sched_wakeup_new events
        ("wakeup_latency_mean_s", pa.float64()),  # wake-up to the next switch-in
        ("wakeup_latency_p50_s", pa.float64()),
        ("wakeup_latency_p95_s", pa.float64()),
        ("wakeup_latency_p99_s", pa.float64()),
        ("wakeup_latency_max_s", pa.float64()),
        ("run_length_mean_s", pa.float64()),
        ("run_length_p50_s", pa.float64()),
        ("run_length_p99_s", pa.float64()),
        ("switches_voluntary", pa.int64()),      # switch-outs with prev_state S or X
        ("switches_involuntary", pa.int64()),    # switch-outs with prev_state R (preempted)
        ("involuntary_frac", pa.float64()),      # involuntary / all switch-outs
        ("migrations", pa.int64()),              # sched_migrate_task events
        # of those, the ones placing the task at a wake-up (the task's next
        # event is the wake-up: ttwu's set_task_cpu()); the rest moved it
        # while runnable (the balancers, a stopper)
        ("migrations_wakeup", pa.int64()),
    ]
)
SCHED_METRICS_FILE = "sched_metrics.parquet"

# rtapp.parquet (workload=rtapp, docs/rtapp.md): one row per loop of a phase
# of each thread, as rt-app logs it in <log_basename>-<thread>.log, written
# alike by the simulator (sim/workloads/rtapp.py) and the real backend (from
# rt-app's logs).  Columns after the first six are the log's, in its order,
# in its integer microseconds (the unit in the name): rt-app's values,
# exactly, rather than seconds rounded twice.  start_us, end_us and
# rel_st_us are since the use case began (the threads' start), on both.
RTAPP = pa.schema(
    [
        ("task", pa.string()),          # rt-app's thread name, <task>-<index>
        ("cgroup", pa.string()),        # its cgroup in the loop: the taskgroup, "/" the root
        ("idx", pa.int64()),            # the log's #idx: the thread's index
        ("thread_loop", pa.int64()),    # rt-app's loop counters (its ftrace rtapp_loop event)
        ("phase", pa.int64()),
        ("phase_loop", pa.int64()),
        ("perf", pa.int64()),           # thousands of calibration loops run; null if unknown
        ("run_us", pa.int64()),         # wall time in run and runtime events
        ("period_us", pa.int64()),      # wall time of the whole loop
        ("start_us", pa.int64()),
        ("end_us", pa.int64()),
        ("rel_st_us", pa.int64()),
        ("slack_us", pa.int64()),       # timer deadline minus the time it was reached
        ("c_duration_us", pa.int64()),  # configured run + runtime
        ("c_period_us", pa.int64()),    # configured timer periods
        ("wu_lat_us", pa.int64()),      # timer wake-up latency
    ]
)
RTAPP_FILE = "rtapp.parquet"

TABLES = {"summary": SUMMARY, "requests": REQUESTS, "intervals": INTERVALS}
# Tables a run directory has only under trace=sched: checked like the others
# (check_table) but never required of a run.
TRACE_TABLES = {"sched": SCHED, "sched_metrics": SCHED_METRICS}
# Tables a workload adds to its runs (SimResult.extra): checked like the others.
WORKLOAD_TABLES = {"rtapp": RTAPP}
_OPTIONAL = {"summary": SUMMARY_OPTIONAL, "intervals": INTERVALS_OPTIONAL}


class SchemaError(ValueError):
    """A results table lacks a required column or has a column of the wrong type."""


def check_table(name: str, table: pa.Table) -> None:
    """Raise SchemaError unless `table` fits the `name` table's schema."""
    schemas = {**TABLES, **TRACE_TABLES, **WORKLOAD_TABLES}
    if name not in schemas:
        raise SchemaError(f"unknown results table {name!r}; known: {', '.join(schemas)}")
    missing = [f.name for f in schemas[name] if f.name not in table.schema.names]
    if missing:
        raise SchemaError(f"{name} table is missing required columns: {', '.join(missing)}")
    typed = list(schemas[name]) + list(_OPTIONAL.get(name, []))
    wrong = [
        f"{f.name} is {table.schema.field(f.name).type}, expected {f.type}"
        for f in typed
        if f.name in table.schema.names and table.schema.field(f.name).type != f.type
    ]
    if wrong:
        raise SchemaError(f"{name} table has columns of the wrong type: {'; '.join(wrong)}")


def with_run_labels(table: pa.Table, summary: pa.Table) -> pa.Table:
    """``table`` with the RUN_LABELS columns set from the summary's row
    (added in front, or replaced where the table has them already)."""
    for i, field in enumerate(RUN_LABELS):
        value = pa.scalar(summary.column(field.name)[0].as_py(), field.type)
        column = pa.repeat(value, table.num_rows)
        index = table.schema.get_field_index(field.name)
        table = (table.set_column(index, field, column) if index >= 0
                 else table.add_column(i, field, column))
    return table


def run_identity(cfg: dict, backend: str) -> dict:
    """The summary columns that say what ran (a fresh run id, to be replaced
    by the run directory's name): the same for every backend."""
    return {
        "run_id": uuid.uuid4().hex[:12],
        "experiment": str(cfg.get("experiment") or "default"),
        "scenario": str(cfg["workload"]["name"]),
        "scheduler": str(cfg["scheduler"]["name"]),
        "controllers": str((cfg.get("controller") or {}).get("name", "none")),
        "backend": backend,
        "host": str(cfg["host"].get("name", "generic")),
        "seed": int(cfg.get("seed", 0)),
        "duration_s": float(cfg["duration_s"]),
    }


# A run is overloaded (its backlog grew) when more than this share of the
# requests that arrived in the window had not finished by its end ...
OVERLOAD_UNFINISHED_FRAC = 0.05
# ... and they are more than this many times what a steady state holds in
# flight (Little's law), so requests merely long against the window (a
# stable run of 5 s jobs in a 30 s window) are not taken for a backlog.
# A stable run's ratio is about 1; at the onset of overload only 1.5 to 2,
# as the finished requests' own latencies grow with the backlog.
OVERLOAD_BACKLOG_RATIO = 1.5
# ... and at least this many: a handful of requests in flight at the end of
# a short run is chance, whatever its share (two of 30 in a 0.4 s run).
OVERLOAD_MIN_UNFINISHED = 10
OVERLOAD_RULE = (f"unfinished > {OVERLOAD_UNFINISHED_FRAC:.0%} of the window's arrivals, "
                 f"> {OVERLOAD_BACKLOG_RATIO:g}x a steady state's in-flight count "
                 f"(throughput x mean latency) and >= {OVERLOAD_MIN_UNFINISHED}")


def request_columns(requests: pa.Table, window_s: float, slo_s: float,
                    n_unfinished: int) -> dict:
    """The summary columns computed from requests.parquet and the count of
    requests of the window that had not finished by its end (dropped
    requests count in n_requests, not in throughput or latency; unfinished
    ones in none of these, so the latency statistics are of the finished
    requests only)."""
    dropped = requests.column("dropped").to_numpy(zero_copy_only=False)
    lat = requests.column("latency_s").to_numpy(zero_copy_only=False)[~dropped]
    if lat.size:
        mean, (p50, p95, p99) = float(lat.mean()), np.percentile(lat, [50, 95, 99])
    else:
        mean = p50 = p95 = p99 = float("nan")
    throughput = int(lat.size) / window_s
    arrived = int(requests.num_rows) + n_unfinished
    unfinished_frac = n_unfinished / arrived if arrived else float("nan")
    # Little's law: a steady state holds throughput x mean latency in flight
    in_flight = throughput * mean if lat.size else 0.0
    backlog_ratio = (n_unfinished / in_flight if in_flight > 0
                     else float("inf") if n_unfinished else float("nan"))
    return {
        "n_requests": int(requests.num_rows),
        "n_dropped": int(dropped.sum()),
        "n_unfinished": int(n_unfinished),
        "unfinished_frac": unfinished_frac,
        "backlog_ratio": backlog_ratio,
        "overloaded": bool(unfinished_frac > OVERLOAD_UNFINISHED_FRAC
                           and backlog_ratio > OVERLOAD_BACKLOG_RATIO
                           and n_unfinished >= OVERLOAD_MIN_UNFINISHED),
        "throughput_rps": throughput,
        "goodput_rps": int((lat <= slo_s).sum()) / window_s,
        "slo_s": slo_s,
        "latency_mean_s": mean,
        "latency_p50_s": float(p50),
        "latency_p95_s": float(p95),
        "latency_p99_s": float(p99),
    }
