"""Cluster sizing as the LAGS case study did it [§5.1]:

1. static reservation: every function reserves its peak CPU demand (per
   ``profile_window_s``, from the trace, as profiling it on an oversized
   cluster would measure it); the pods are bin-packed (most_allocated,
   largest first) onto as few nodes as hold them: ``static_nodes``;
2. consolidation: simulate the trace on ``cluster.nodes`` nodes (null: the
   static count) and keep removing a node while the latency target holds
   (p99 <= ``slo_s``, no invocation left unplaced); if the start already
   misses it, add nodes until it holds (at most ``cluster.max_nodes``).
   The answer is the smallest node count that held.

Consolidation assumes that fewer nodes never do better, as the paper's
procedure does; every count tried is in ``sizing.parquet``, so a reader
can see whether that held."""
from __future__ import annotations

import math

import pyarrow as pa

from backends.cluster.placement import NodeAllocation, empty_node, place
from backends.cluster.run import demand_cores, requests_mcpu, simulate_cluster, trace_columns
from sim.engine import s_to_ns
from sim.topology import Topology

SIZING_COLUMNS = ("nodes", "meets_slo", "latency_p50_s", "latency_p99_s", "goodput_rps",
                  "n_unplaced", "cpu_util", "sched_overhead_frac", "perceived_util",
                  "effective_util", "perceived_cores_peak", "effective_cores_peak",
                  "ctx_switch_rate_per_s", "ctx_switch_cost_mean_us", "wall_time_s")


def static_nodes(cfg: dict, trace: pa.Table) -> int:
    """Nodes needed when every function reserves its peak demand."""
    ccfg = cfg["cluster"]
    arrival, names, demand, _ = trace_columns(trace)
    profile_ns = s_to_ns(float(ccfg["profile_window_s"]))
    duration_ns = s_to_ns(float(cfg["duration_s"]))
    per_function = demand_cores(arrival, names, demand, profile_ns,
                                max(1, -(-duration_ns // profile_ns)))
    max_pod = int(ccfg["max_pod_cpu_mcpu"])
    peaks = requests_mcpu(per_function, "peak", max_pod)
    cpus = Topology.from_config(cfg["host"]).nr_cpus
    memory = int(ccfg["memory_request_mb"])
    nodes: list[NodeAllocation] = []
    pods = []
    for name, pod in peaks.items():
        peak = math.ceil(1000 * float(per_function[name].max()))
        pods += [pod] * math.ceil(peak / max_pod)
    for pod in sorted(pods, reverse=True):
        if place(nodes, "most_allocated", pod, memory) is None:
            nodes.append(empty_node(ccfg, cpus))
            nodes[-1].bind(pod, memory)
    return len(nodes)


def meets_slo(summary: pa.Table, slo_s: float) -> bool:
    row = summary.to_pylist()[0]
    return row["latency_p99_s"] <= slo_s and row["n_unplaced"] == 0


def consolidate(cfg: dict, trace: pa.Table, progress=None):
    """The run at the smallest node count meeting the target, with
    ``sizing`` (every count tried) among its extra tables and
    ``static_nodes``, ``sized_nodes`` and ``node_reduction_frac`` summary
    columns."""
    ccfg = cfg["cluster"]
    slo = float(cfg.get("slo_s", 1.0))
    static = static_nodes(cfg, trace)
    n = int(ccfg["nodes"]) if ccfg.get("nodes") is not None else static
    limit = int(ccfg.get("max_nodes") or 2 * max(n, static))
    tried: dict[int, object] = {}

    def run(count):
        tried[count] = simulate_cluster(cfg, trace, count, progress)
        return meets_slo(tried[count].summary, slo)

    held = run(n)
    if held:
        while n > 1 and run(n - 1):
            n -= 1
    else:
        while n < limit and not held:
            n += 1
            held = run(n)
    best = tried[n]          # if no count held: the largest tried
    rows = []
    for count in sorted(tried):
        row = tried[count].summary.to_pylist()[0]
        rows.append({c: (meets_slo(tried[count].summary, slo) if c == "meets_slo" else row[c])
                     for c in SIZING_COLUMNS})
    summary = best.summary
    for name, value in (("static_nodes", static), ("sized_nodes", n if held else -1)):
        summary = summary.append_column(name, pa.array([value], pa.int64()))
    # the paper's "28% smaller cluster" is this, against static reservation
    reduction = (static - n) / static if held else float("nan")
    summary = summary.append_column("node_reduction_frac", pa.array([reduction], pa.float64()))
    best.summary = summary
    best.extra["sizing"] = pa.Table.from_pylist(rows)
    return best
