"""Run one composed scenario into a run directory: what `colosim run` and
each job of `colosim sweep` do."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import DictConfig, OmegaConf

from backends.cluster import consolidate, simulate_cluster
from backends.real.run import RealRunError, run_real
from results.rundir import write_run_dir
from results.schema import THREAD_SUMMARY
from results.sched import SchedAnalysis, analyse
from scenarios.simulate import simulate
from sim import workloads
from sim.engine import s_to_ns
from sim.workloads.tablefile import TraceError


def replayed_trace(cfg: DictConfig):
    """The trace the run replays, kept as its trace.parquet: the workload's
    trace_file (trace_file) or the one its class generates from the seed;
    None for workloads without a trace (closed loops)."""
    cls = workloads.workload_class(cfg.workload)
    if cfg.workload.get("trace_file"):
        return trace_file(cfg)
    if cls.generate_trace is None:
        return None
    return workloads.trace_for(OmegaConf.to_container(cfg, resolve=True))


def trace_file(cfg: DictConfig):
    """The workload's trace_file, read by its class's reader, which checks
    every row; TraceError also if nothing in it would arrive in the run
    (no row, or every arrival at or after duration_s): such a run would
    report 0 requests as if that were a result."""
    path = cfg.workload.trace_file
    trace = workloads.workload_class(cfg.workload).read_trace_file(path)
    if trace.num_rows == 0:
        raise TraceError(f"workload.trace_file {path}: no rows, nothing to replay")
    first = pc.min(trace.column("arrival_s")).as_py()
    if first >= cfg.duration_s:
        raise TraceError(f"workload.trace_file {path}: every arrival is at or after duration_s "
                         f"= {cfg.duration_s} s (the first at {first} s): nothing would arrive "
                         "in the run")
    return trace


def run_scenario(cfg: DictConfig, out_dir: Path, progress=None) -> pa.Table:
    """Simulate ``cfg`` and write its run directory at ``out_dir`` (named
    after the run id); returns the summary table.  Nothing is written if
    the run fails or is interrupted.  ``backend=real`` runs it on this
    machine instead (backends/real/run.py; same tables)."""
    if cfg.get("backend") is not None and cfg.backend.name == "real":
        return _run_real(cfg, out_dir, progress)
    if cfg.get("cluster") is not None and cfg.cluster.name != "none":
        return _run_cluster(cfg, out_dir, progress)
    trace = replayed_trace(cfg)
    kwargs = {"progress": progress} if progress else {}
    if trace is not None:
        kwargs["trace"] = trace
    return write_result(simulate(cfg, **kwargs), trace, cfg, out_dir)


def _run_cluster(cfg: DictConfig, out_dir: Path, progress=None) -> pa.Table:
    """A trace on a cluster of simulated hosts (backends/cluster), or the search
    for the smallest cluster meeting the latency target."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    trace = replayed_trace(cfg)
    if cfg.cluster.search == "consolidate":
        result = consolidate(plain, trace, progress)
    else:
        result = simulate_cluster(plain, trace, progress=progress)
    return write_result(result, trace, cfg, out_dir)


def _run_real(cfg: DictConfig, out_dir: Path, progress=None) -> pa.Table:
    try:
        result = run_real(cfg, replayed_trace(cfg), progress, run_name=out_dir.name)
    except RealRunError as err:
        raise RunError(str(err)) from None
    return write_result(result, result.trace, cfg, out_dir)


def write_result(result, trace, cfg: DictConfig, out_dir: Path) -> pa.Table:
    """Write a backend's result to the run directory ``out_dir`` and return
    its summary.  Its further tables are the backend's own (its sched trace,
    if any) and, beside a sched trace, its per-task and per-cgroup metrics
    (sched_metrics.parquet; results/sched.py) and, with ``trace.thread``,
    that thread's columns in the summary."""
    extra = dict(getattr(result, "extra", None) or {})
    summary = with_run_id(result.summary, out_dir.name)
    if "sched" in extra:
        analysis = analyse(extra["sched"])
        extra["sched_metrics"] = analysis.metrics()
        summary = with_thread_columns(summary, analysis, cfg)
    tables = SimpleNamespace(summary=summary, requests=result.requests,
                             intervals=result.intervals, trace=trace, extra=extra)
    write_run_dir(tables, out_dir, cfg)
    return summary


def with_thread_columns(summary: pa.Table, analysis: SchedAnalysis, cfg: DictConfig) -> pa.Table:
    """The summary with the ``trace.thread`` thread's columns
    (results/schema.py ``THREAD_SUMMARY``) over the summary's window, from
    warmup_s to duration_s; unchanged without a named thread."""
    comm = OmegaConf.select(cfg, "trace.thread")
    if comm is None:
        return summary
    samples = analysis.thread(comm, s_to_ns(float(cfg.get("warmup_s", 0.0))),
                             s_to_ns(float(cfg.duration_s)))
    for name, value in samples.summary().items():
        summary = summary.append_column(THREAD_SUMMARY.field(name),
                                        pa.array([value], THREAD_SUMMARY.field(name).type))
    return summary


class RunError(RuntimeError):
    """A run that could not start (e.g. backend=real on a host that cannot
    provide the scenario) or was rejected; nothing was written."""


def with_run_id(summary: pa.Table, run_id: str) -> pa.Table:
    """The run directory's name is the run id, whatever the simulator put there."""
    column = pa.array([run_id] * summary.num_rows, pa.string())
    index = summary.schema.get_field_index("run_id")
    if index < 0:
        return summary.append_column("run_id", column)
    return summary.set_column(index, "run_id", column)
