"""``simulate_cluster(cfg, trace)``: one run of a trace on a cluster of
``cluster.nodes`` hosts, each the full host model of ``host``,
``scheduler`` and ``calibration``.

Time advances in windows of ``cluster.window_s``: at each boundary the
control plane (backends/cluster/controlplane.py) reads the nodes' reports,
autoscales, places pods and routes the next window's invocations; then
every node simulates the window on its own (backends/cluster/parallel.py).

Utilisation, per ``cluster.profile_window_s`` (default a minute):

- perceived: the CPU time the nodes report busy (tasks plus scheduling
  overhead, what cpuacct and node exporters see), in cores;
- effective: the CPU demand of the invocations arriving in the window, in
  cores: the useful work, what the trace needs from an uncontended cluster.

``perceived_util`` and ``effective_util`` are their means over the run
after warm-up as fractions of the cluster's CPUs; ``*_cores_peak`` their
largest window.  The LAGS paper reports the peaks: about 60 cores
effective, 65 perceived under CFS-LAGS and 120 under CFS on 10 nodes
[§5.1]."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from backends.cluster.controlplane import ControlPlane
from backends.cluster.options import REQUEST_RULES
from backends.cluster.parallel import start_nodes
from results.schema import request_columns, run_identity
from sim.engine import NSEC_PER_SEC, quiet_gc, s_to_ns
from sim.metrics import HostCounters
from sim.topology import Topology
from sim.workloads.openmp import summary_columns

MIN_REQUEST_MCPU = 1


@dataclass
class ClusterResult:
    summary: pa.Table
    requests: pa.Table
    intervals: pa.Table
    config: dict
    extra: dict = field(default_factory=dict)    # further tables of the run directory


def trace_columns(trace: pa.Table):
    """(arrival ns, function, demand ns, threads) of a trace, by arrival."""
    trace = trace.sort_by([("arrival_s", "ascending"), ("function", "ascending")])
    arrival = np.rint(trace.column("arrival_s").to_numpy() * NSEC_PER_SEC).astype(np.int64)
    demand = np.maximum(1, np.rint(trace.column("demand_s").to_numpy() * NSEC_PER_SEC)
                        ).astype(np.int64)
    return arrival, trace.column("function").to_pylist(), demand, \
        trace.column("threads").to_numpy().astype(np.int64)


def demand_cores(arrival_ns, names, demand_ns, window_ns: int, windows: int) -> dict:
    """Per function, the CPU demand of its invocations per window, in cores."""
    out: dict[str, np.ndarray] = {}
    k = np.minimum(arrival_ns // window_ns, windows - 1)
    for name, w, d in zip(names, k.tolist(), demand_ns.tolist()):
        row = out.get(name)
        if row is None:
            row = out[name] = np.zeros(windows)
        row[w] += d
    return {name: row / window_ns for name, row in sorted(out.items())}


def requests_mcpu(per_function: dict, rule, max_pod_mcpu: int) -> dict:
    """Each function's pod CPU request: a fixed number of millicores, or
    the function's mean or peak demand per profile window (millicores,
    rounded up) split evenly over the fewest pods of at most
    ``max_pod_mcpu`` each (a function busier than a pod may be is
    deployed to run several)."""
    if isinstance(rule, (int, float)) and not isinstance(rule, bool):
        return {name: int(rule) for name in per_function}
    if rule not in REQUEST_RULES:
        raise ValueError(f"cluster.cpu_request = {rule!r}: choose from "
                         f"{', '.join(REQUEST_RULES)} or a number of millicores")
    pick = np.mean if rule == "mean" else np.max
    out = {}
    for name, row in per_function.items():
        mcpu = max(MIN_REQUEST_MCPU, math.ceil(1000 * float(pick(row))))
        out[name] = math.ceil(mcpu / math.ceil(mcpu / max_pod_mcpu))
    return out


def simulate_cluster(cfg: dict, trace: pa.Table, nodes: int | None = None,
                     progress=None) -> ClusterResult:
    """Simulate ``trace`` on ``nodes`` nodes (default ``cluster.nodes``).
    ``progress(sim_s, duration_s)`` is called after every window."""
    ccfg = cfg["cluster"]
    n = int(nodes if nodes is not None else ccfg["nodes"])
    duration_ns = s_to_ns(float(cfg["duration_s"]))
    warmup_ns = s_to_ns(float(cfg.get("warmup_s", 0.0)))
    window_ns = s_to_ns(float(ccfg["window_s"]))
    profile_ns = s_to_ns(float(ccfg["profile_window_s"]))
    arrival, names, demand, threads = trace_columns(trace)
    profiles = max(1, math.ceil(duration_ns / profile_ns))
    per_function = demand_cores(arrival, names, demand, profile_ns, profiles)
    cpus = Topology.from_config(cfg["host"]).nr_cpus
    cp = ControlPlane(ccfg, n, cpus, requests_mcpu(per_function, ccfg["cpu_request"],
                                                   int(ccfg["max_pod_cpu_mcpu"])), window_ns)
    wall0 = time.perf_counter()
    # one quiet_gc block for the whole run: each node's engine.run inside it
    # freezes what the windows made, instead of unfreezing every node's
    # objects at its exit for the collector to traverse again
    with quiet_gc():
        finished, rows = _run_windows(cfg, cp, n, duration_ns, window_ns,
                                      (arrival, names, demand, threads), progress)
    wall = time.perf_counter() - wall0
    requests = _requests(finished, cp.dropped, warmup_ns)
    intervals = _concat([tables[1] for tables in finished])
    node_windows = _node_windows(rows)
    summary = _summary(cfg, n, cpus, cp, requests, rows, (arrival, demand), warmup_ns,
                       duration_ns, profile_ns, wall, sum(f[2] for f in finished),
                       sum(f[3] for f in finished))
    return ClusterResult(summary, requests, intervals, cfg, {"nodes": node_windows})


def _run_windows(cfg: dict, cp: ControlPlane, n: int, duration_ns: int, window_ns: int,
                 columns, progress):
    """The nodes stepped window by window under the control plane: each
    node's (requests, intervals, events, unfinished) and the per-window
    rows (window start ns, end ns, node, HostCounters, path counters)."""
    arrival, names, demand, threads = columns
    runner = start_nodes(cfg, n)
    rows = []
    try:
        reports, t = None, 0
        while t < duration_ns:
            end = min(t + window_ns, duration_ns)
            lo, hi = np.searchsorted(arrival, [t, end])
            commands = cp.boundary(t, reports, zip(arrival[lo:hi].tolist(), names[lo:hi],
                                                   demand[lo:hi].tolist(),
                                                   threads[lo:hi].tolist()))
            reports = runner.step(end, commands)
            rows += [(t, end, i, r.counters, r.stats) for i, r in enumerate(reports)]
            if progress is not None:
                progress(end / NSEC_PER_SEC, duration_ns / NSEC_PER_SEC)
            t = end
        return runner.finish(), rows
    finally:
        runner.close()


def _with_node(table: pa.Table, node: int) -> pa.Table:
    return table.append_column("node", pa.array(np.full(table.num_rows, node), pa.int64()))


def _concat(tables: list) -> pa.Table:
    return pa.concat_tables([_with_node(t, i) for i, t in enumerate(tables)])


def _requests(finished, dropped, warmup_ns: int) -> pa.Table:
    served = _concat([tables[0] for tables in finished])
    lost = [(f, a, d) for f, a, d in dropped if a >= warmup_ns]
    if not lost:
        return served
    f, a, d = zip(*lost)
    a = np.asarray(a, dtype=np.float64) / NSEC_PER_SEC
    nan = np.full(len(a), np.nan)
    return pa.concat_tables([served, pa.table({
        "function": pa.array(f, pa.string()), "cgroup": pa.array([""] * len(a), pa.string()),
        "arrival_s": a, "start_s": nan, "end_s": nan, "latency_s": nan,
        "cpu_demand_s": np.asarray(d, dtype=np.float64) / NSEC_PER_SEC,
        "dropped": pa.array(np.ones(len(a), dtype=bool)),
        "node": pa.array(np.full(len(a), -1), pa.int64())}, schema=served.schema)])


def _node_windows(rows) -> pa.Table:
    """nodes.parquet: per window and node, the CPU the node reported busy."""
    t0, t1, node, c, _ = zip(*rows) if rows else ([], [], [], [], [])
    span = (np.asarray(t1, dtype=np.float64) - np.asarray(t0, dtype=np.float64)) / NSEC_PER_SEC
    busy = np.array([x.busy_ns for x in c], dtype=np.float64) / NSEC_PER_SEC
    overhead = np.array([x.overhead_ns for x in c], dtype=np.float64) / NSEC_PER_SEC
    return pa.table({
        "interval_start_s": np.asarray(t0, dtype=np.float64) / NSEC_PER_SEC,
        "interval_end_s": np.asarray(t1, dtype=np.float64) / NSEC_PER_SEC,
        "node": pa.array(node, pa.int64()),
        "busy_s": busy, "sched_overhead_s": overhead,
        "perceived_cores": (busy + overhead) / np.maximum(span, 1e-12),
        "ctx_switches": pa.array([x.switches for x in c], pa.int64()),
    })


def _binned(t_ns, ns, start_ns: int, end_ns: int, profile_ns: int) -> np.ndarray:
    """Cores in each profile window of [start_ns, end_ns): the ``ns`` of CPU
    time at instants ``t_ns`` summed per window over the window's length."""
    bins = max(1, -(-(end_ns - start_ns) // profile_ns))
    t_ns, ns = np.asarray(t_ns, dtype=np.int64), np.asarray(ns, dtype=np.float64)
    keep = t_ns >= start_ns
    total = np.bincount((t_ns[keep] - start_ns) // profile_ns, ns[keep], minlength=bins)
    spans = np.minimum(profile_ns, end_ns - start_ns - np.arange(bins) * profile_ns)
    return total[:bins] / spans


def _summary(cfg, n, cpus, cp, requests, rows, demands, warmup_ns, duration_ns, profile_ns,
             wall_s, events, unfinished) -> pa.Table:
    kept = [r for r in rows if r[0] >= warmup_ns]
    start_ns = min((r[0] for r in kept), default=duration_ns)
    window_s = (duration_ns - start_ns) / NSEC_PER_SEC
    c = HostCounters()
    stats: dict = {}
    for r in kept:
        c = c + r[3]
        for k, v in r[4].items():
            stats[k] = stats.get(k, 0) + v
    capacity_ns = max(window_s, 1e-12) * NSEC_PER_SEC * n * cpus
    # per profile window after warm-up: perceived (reported) and effective (demanded) cores
    perceived = _binned([r[0] for r in kept], [r[3].busy_ns + r[3].overhead_ns for r in kept],
                        start_ns, duration_ns, profile_ns)
    effective = _binned(*demands, start_ns, duration_ns, profile_ns)
    row = {
        **run_identity(cfg, "sim"),
        **request_columns(requests, window_s, float(cfg.get("slo_s", 1.0)), int(unfinished)),
        "cpu_util": (c.busy_ns + c.overhead_ns) / capacity_ns,
        "sched_overhead_frac": c.overhead_ns / capacity_ns,
        "ctx_switches": c.switches,
        "ctx_switch_rate_per_s": c.switches / window_s if window_s else 0.0,
        "ctx_switch_cost_mean_us": (c.overhead_ns / c.switches / 1000) if c.switches else 0.0,
        "switch_out_rate_per_s": c.switch_outs / window_s if window_s else 0.0,
        "migrations": c.migrations,
        "runqueue_wait_mean_s": (c.run_delay_ns / c.pcount / NSEC_PER_SEC) if c.pcount else 0.0,
        "nr_periods": c.nr_periods,
        "nr_throttled": c.nr_throttled,
        "throttled_time_s": c.throttled_time_ns / NSEC_PER_SEC,
        "wall_time_s": wall_s,
        "sim_events": int(events),
        "sim_s_per_wall_s": float(cfg["duration_s"]) / wall_s if wall_s > 0 else float("inf"),
        "nodes": int(n),
        "perceived_util": float(perceived.mean() / (n * cpus)),
        "effective_util": float(effective.mean() / (n * cpus)),
        "perceived_cores_peak": float(perceived.max()),
        "effective_cores_peak": float(effective.max()),
        "pods_peak": int(cp.pods_peak),
        "pod_starts": int(cp.pod_starts),
        "cold_starts": int(cp.cold_starts),
        "scale_to_zero": int(cp.scale_to_zero),
        "n_unplaced": int(len(cp.dropped)),
        **summary_columns(stats, capacity_ns),
    }
    return pa.Table.from_pylist([row])
