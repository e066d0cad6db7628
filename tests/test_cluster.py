"""Cluster simulation (backends/cluster): placement, the control plane, sizing,
and the equivalences the design relies on (one node = one host; Ray =
serial)."""
from __future__ import annotations

import dataclasses
import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scenarios.config import compose
from scenarios.validate import ConfigError
from sim.workloads import azure2019
from sim.workloads.azure2019 import Azure2019Config
from scenarios.simulate import simulate
from sim import engine
from backends.cluster import consolidate, node, simulate_cluster, static_nodes
from backends.cluster.placement import NodeAllocation, NodePool, place
from sim.workloads.trace import make_trace
from tests.simcfg import DEFAULT_COSTS, make_cfg

CLUSTER = {"name": "kubernetes", "nodes": 2, "search": "none", "max_nodes": None,
           "placement": "least_allocated", "pods_per_node": 110, "reserved_pods": 10,
           "node_cpu_mcpu": None, "node_memory_mb": 65536, "cpu_request": "mean",
           "max_pod_cpu_mcpu": 4000, "cpu_limit": None, "memory_request_mb": 256, "target_concurrency": 100,
           "target_utilization": 0.7, "stable_window_s": 60, "panic_window_pct": 10,
           "panic_threshold_pct": 200, "keep_alive_s": 60, "min_scale": 0, "cold_start_s": 0.0,
           "window_s": 1.0, "profile_window_s": 10.0, "parallel": "serial", "workers": None,
           "ray_address": None}
PODS = {"name": "azure2019", "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
        "parent_cgroup": "kubepods.slice", "request_path": "direct"}


def cluster_cfg(duration_s=10.0, cores=2, warmup_s=0.0, calibration=DEFAULT_COSTS, **cluster):
    cfg = make_cfg(dict(PODS), cores=cores, duration_s=duration_s, warmup_s=warmup_s,
                   calibration=calibration)
    cfg["cluster"] = {**CLUSTER, **cluster}
    return cfg


def poisson_trace(functions: int, rate: float, demand_s: float, duration_s: float, seed=0,
                  names=None):
    gen = np.random.default_rng(seed)
    rows = []
    for i in range(functions):
        t = np.cumsum(gen.exponential(1 / rate, int(rate * duration_s * 2) + 10))
        t = t[t < duration_s]
        name = names[i] if names else f"fn-{i}"
        rows += [(name, float(a), float(gen.exponential(demand_s)) + 1e-6) for a in t]
    rows.sort(key=lambda r: r[1])
    f, a, d = zip(*rows)
    return make_trace(f, a, d, [1] * len(f))


def without(table, *columns):
    return table.drop_columns([c for c in columns if c in table.column_names])


# --- placement ------------------------------------------------------------------------

def test_placement_respects_pod_cap_and_requests():
    nodes = [NodeAllocation(cpu_mcpu=1000, memory_mb=1000, max_pods=2) for _ in range(2)]
    placed = [place(nodes, "least_allocated", 300, 100) for _ in range(4)]
    assert sorted(placed) == [0, 0, 1, 1]
    assert place(nodes, "least_allocated", 10, 10) is None      # every node at its pod cap
    big = [NodeAllocation(1000, 1000, 100)]
    assert place(big, "most_allocated", 1001, 1) is None        # CPU request too large
    assert place(big, "most_allocated", 10, 1001) is None       # memory request too large
    assert place(big, "most_allocated", 1000, 1000) == 0
    assert big[0].cpu_requested == 1000 and big[0].pods == 1


def test_least_allocated_spreads_and_most_allocated_packs():
    spread = [NodeAllocation(4000, 8000, 100) for _ in range(4)]
    packed = [NodeAllocation(4000, 8000, 100) for _ in range(4)]
    a = [place(spread, "least_allocated", 500, 256) for _ in range(4)]
    b = [place(packed, "most_allocated", 500, 256) for _ in range(4)]
    assert sorted(a) == [0, 1, 2, 3]
    assert b == [0, 0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["least_allocated", "most_allocated"]), st.integers(1, 12),
       st.lists(st.tuples(st.booleans(), st.integers(1, 4000), st.sampled_from([128, 256, 512])),
                max_size=120))
def test_node_pool_chooses_as_the_full_scan(strategy, n, ops):
    # random placements and releases (False: release the oldest pod still
    # bound) on small nodes that fill up: the ordered pool and place()'s scan
    # of every node choose the same node each time, None included
    size = dict(cpu_mcpu=12000, memory_mb=4096, max_pods=6)
    scan = [NodeAllocation(**size) for _ in range(n)]
    pool = NodePool([NodeAllocation(**size) for _ in range(n)], strategy)
    bound = []
    for new, cpu, memory in ops:
        if new or not bound:
            where = place(scan, strategy, cpu, memory)
            assert pool.place(cpu, memory) == where
            if where is not None:
                bound.append((where, cpu, memory))
        else:
            where, cpu, memory = bound.pop(0)
            scan[where].release(cpu, memory)
            pool.release(where, cpu, memory)
    assert pool.nodes == scan


def test_node_pool_refuses_mixed_or_huge_nodes():
    with pytest.raises(ValueError, match="one size"):
        NodePool([NodeAllocation(1000, 1000, 10), NodeAllocation(2000, 1000, 10)], "least_allocated")
    with pytest.raises(ValueError, match="exceeds"):
        NodePool([NodeAllocation(10**7, 10**7, 10)], "most_allocated")
    with pytest.raises(ValueError, match="cluster.placement"):
        NodePool([NodeAllocation(1000, 1000, 10)], "random")


# --- the control plane ----------------------------------------------------------------

def test_one_node_cluster_equals_the_single_host_simulator():
    # functions named in first-arrival order, so the node creates the pods in
    # the order the single-host replay creates the function cgroups (sorted)
    trace = poisson_trace(4, 20.0, 0.02, 8.0)
    names = trace.column("function").to_pylist()
    rank = {name: f"f{i}" for i, name in enumerate(dict.fromkeys(names))}
    trace = make_trace([rank[n] for n in names], trace.column("arrival_s").to_pylist(),
                       trace.column("demand_s").to_pylist(), [1] * len(names))
    cfg = cluster_cfg(duration_s=8.0, nodes=1, cold_start_s=0.0, keep_alive_s=100.0)
    cluster = simulate_cluster(cfg, trace)
    # the same function cgroups replaying the trace on one host
    single_cfg = {k: v for k, v in cfg.items() if k != "cluster"}
    single_cfg["workload"] = {**cfg["workload"], "name": "trace"}
    single = simulate(single_cfg, trace=trace)
    a = without(cluster.requests, "cgroup", "node").sort_by([("arrival_s", "ascending")])
    b = without(single.requests, "cgroup").sort_by([("arrival_s", "ascending")])
    assert a.num_rows > 200
    assert a.equals(b)
    for column in ("ctx_switches", "migrations", "n_requests", "cpu_util"):
        assert cluster.summary.column(column)[0] == single.summary.column(column)[0], column


def test_cold_starts_and_scale_to_zero_are_counted():
    # one function, two lone invocations 30 s apart; keep-alive 10 s
    trace = make_trace(["fn-0", "fn-0"], [1.0, 31.0], [0.01, 0.01], [1, 1])
    cfg = cluster_cfg(duration_s=40.0, nodes=1, cold_start_s=2.0, keep_alive_s=10.0)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    assert row["pod_starts"] == 2 and row["cold_starts"] == 2 and row["scale_to_zero"] == 1
    latency = result.requests.column("latency_s").to_numpy()
    assert np.all(latency >= 2.0) and np.all(latency < 2.1)


def test_warm_pod_serves_without_cold_start():
    trace = make_trace(["fn-0"] * 3, [1.0, 3.0, 5.0], [0.01] * 3, [1] * 3)
    cfg = cluster_cfg(duration_s=8.0, nodes=1, cold_start_s=1.5, keep_alive_s=60.0)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    assert row["pod_starts"] == 1 and row["cold_starts"] == 1 and row["scale_to_zero"] == 0
    latency = sorted(result.requests.column("latency_s").to_pylist())
    assert latency[-1] >= 1.5 and latency[0] < 0.1


def test_min_scale_pods_are_deployed_before_the_run():
    trace = make_trace(["fn-0", "fn-1", "fn-0"], [1.0, 2.0, 31.0], [0.01] * 3, [1] * 3)
    cfg = cluster_cfg(duration_s=40.0, nodes=2, cold_start_s=2.0, keep_alive_s=10.0,
                      min_scale=1)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    assert row["pod_starts"] == 2 and row["cold_starts"] == 0 and row["scale_to_zero"] == 0
    assert np.all(result.requests.column("latency_s").to_numpy() < 0.1)
    assert sorted(result.requests.column("node").to_pylist()) == [0, 0, 1]   # spread


def test_cpu_limit_caps_a_pod_as_the_kubelets_cpu_max():
    # four 1 s requests at once on a 2-CPU node, the pod limited to 500 millicores
    trace = make_trace(["fn-0"] * 4, [0.5] * 4, [1.0] * 4, [1] * 4)
    cfg = cluster_cfg(duration_s=12.0, nodes=1, cpu_limit=500, cpu_request=500)
    result = simulate_cluster(cfg, trace)
    intervals = result.intervals.to_pandas()
    pod = intervals[intervals["cgroup"].str.endswith("/fn-0-0")]
    assert set(pod["quota_us"].dropna()) == {50_000} and set(pod["period_us"]) == {100_000}
    assert pod["nr_throttled"].sum() > 0
    busy = pod[(pod["interval_start_s"] >= 1.0) & (pod["interval_end_s"] <= 5.0)]
    assert np.allclose(busy["usage_s"], 0.5, atol=0.02)     # 0.5 CPU, not the 2 it wants
    unlimited = simulate_cluster(cluster_cfg(duration_s=12.0, nodes=1, cpu_request=500), trace)
    assert unlimited.requests.column("latency_s").to_numpy().max() < \
        result.requests.column("latency_s").to_numpy().min()


def test_unplaceable_invocations_are_dropped_and_counted():
    # 1 pod per node: the third function finds no node
    trace = poisson_trace(3, 5.0, 0.01, 5.0)
    cfg = cluster_cfg(duration_s=5.0, nodes=2, pods_per_node=2, reserved_pods=1)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    dropped = result.requests.filter(result.requests.column("dropped"))
    assert row["n_unplaced"] == dropped.num_rows > 0
    assert set(dropped.column("function").to_pylist()) == {"fn-2"}
    assert row["pods_peak"] == 2


def test_autoscaler_scales_out_under_load_and_pods_spread():
    # one function offering ~3 cores of 50 ms requests: ~60 in flight at
    # target 10 x 0.7 needs several pods, which least_allocated spreads
    trace = poisson_trace(1, 60.0, 0.05, 20.0)
    cfg = cluster_cfg(duration_s=20.0, cores=4, nodes=3, target_concurrency=10,
                      stable_window_s=6, cold_start_s=0.5, cpu_request=500)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    assert row["pods_peak"] >= 2
    nodes = set(result.requests.column("node").to_pylist())
    assert len(nodes) >= 2
    assert row["n_unplaced"] == 0


def test_accounting_invariants():
    trace = poisson_trace(6, 10.0, 0.03, 10.0)
    cfg = cluster_cfg(duration_s=10.0, nodes=2, warmup_s=2.0)
    result = simulate_cluster(cfg, trace)
    row = result.summary.to_pylist()[0]
    arrivals = trace.column("arrival_s").to_numpy()
    served = result.requests.filter(~result.requests.column("dropped").to_numpy())
    # every invocation after warm-up is in requests.parquet, served or not
    assert result.requests.num_rows + row["n_unfinished"] == int((arrivals >= 2.0).sum())
    latency = served.column("latency_s").to_numpy()
    assert np.all(latency >= served.column("cpu_demand_s").to_numpy() - 1e-9)
    nodes = result.extra["nodes"]
    assert np.all(nodes.column("perceived_cores").to_numpy() <= 2 + 1e-9)   # CPUs per node
    assert 0 < row["perceived_util"] <= 1 and 0 < row["effective_util"] <= 1
    demand = trace.filter(trace.column("arrival_s").to_numpy() >= 2.0)
    expected = demand.column("demand_s").to_numpy().sum() / 8.0 / (2 * 2)
    assert math.isclose(row["effective_util"], expected, rel_tol=1e-6)


# --- sizing ---------------------------------------------------------------------------

def test_static_reservation_packs_peaks():
    # four functions each peaking at 0.9 core: two fit a 2-CPU node
    names, times, demands = [], [], []
    for i in range(4):
        names += [f"fn-{i}"] * 9
        times += [0.1 * k for k in range(9)]
        demands += [1.0] * 9      # 9 s of demand in the first 10 s window
    trace = make_trace(names, times, demands, [1] * len(names))
    cfg = cluster_cfg(duration_s=10.0)
    assert static_nodes(cfg, trace) == 2
    assert static_nodes({**cfg, "cluster": {**cfg["cluster"], "pods_per_node": 2,
                                            "reserved_pods": 1}}, trace) == 4


def test_consolidate_finds_the_smallest_count_meeting_the_target():
    trace = poisson_trace(8, 8.0, 0.05, 10.0)      # ~3.2 cores of demand
    cfg = cluster_cfg(duration_s=10.0, cores=2, nodes=4, search="consolidate",
                      target_concurrency=5)
    result = consolidate(cfg, trace)
    row = result.summary.to_pylist()[0]
    sizing = {r["nodes"]: r["meets_slo"] for r in result.extra["sizing"].to_pylist()}
    n = row["sized_nodes"]
    assert n == row["nodes"] and sizing[n]
    assert n == 1 or not sizing[n - 1]
    assert 2 <= n <= 4          # 3.2 cores cannot run on one 2-CPU node
    static = row["static_nodes"]
    assert row["node_reduction_frac"] == pytest.approx((static - n) / static)


def test_a_cluster_run_leaves_the_collector_as_it_found_it(monkeypatch):
    """The run's quiet_gc blocks (the run's own and each shard's, open from
    its creation to its finish) close in order, also when a window fails:
    nothing stays frozen, the thresholds come back."""
    trace = poisson_trace(3, 10.0, 0.02, 3.0)
    cfg = cluster_cfg(duration_s=3.0, nodes=2)
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    simulate_cluster(cfg, trace)
    assert engine._quiet_depth[0] == 0 and gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen
    steps = []

    def failing_step(self, until_ns, commands):
        steps.append(until_ns)
        if len(steps) == 3:
            raise RuntimeError("window failed")
        return real_step(self, until_ns, commands)
    real_step = node.NodeSim.step
    monkeypatch.setattr(node.NodeSim, "step", failing_step)
    with pytest.raises(RuntimeError, match="window failed"):
        simulate_cluster(cfg, trace)
    assert engine._quiet_depth[0] == 0 and gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


@pytest.mark.slow
def test_ray_run_equals_serial_run():
    pytest.importorskip("ray")
    trace = poisson_trace(12, 10.0, 0.02, 6.0)
    cfg = cluster_cfg(duration_s=6.0, nodes=3, warmup_s=1.0)
    serial = simulate_cluster(cfg, trace)
    parallel = simulate_cluster({**cfg, "cluster": {**cfg["cluster"], "parallel": "ray",
                                                    "workers": 2}}, trace)
    assert serial.requests.num_rows > 300
    assert serial.requests.equals(parallel.requests)
    assert serial.intervals.equals(parallel.intervals)
    assert serial.extra["nodes"].equals(parallel.extra["nodes"])
    wall = ("wall_time_s", "sim_s_per_wall_s", "run_id")
    assert without(serial.summary, *wall).equals(without(parallel.summary, *wall))


def test_cli_consolidation_writes_its_tables_and_report(tmp_path):
    from results.report import write_report
    from scenarios.runner import run_scenario

    cfg = compose(["cluster=kubernetes", "workload=azure2019", "host=this-vm",
                   "workload.functions=20", "workload.peak_cores=1.5", "workload.minute_s=5",
                   "duration_s=10", "warmup_s=2", "cluster.search=consolidate",
                   "cluster.nodes=2", "cluster.profile_window_s=5", "cluster.min_scale=1"])
    run_dir = tmp_path / "run"
    summary = run_scenario(cfg, run_dir).to_pylist()[0]
    for table in ("nodes", "sizing", "trace", "requests", "intervals"):
        assert (run_dir / f"{table}.parquet").is_file(), table
    assert summary["sized_nodes"] >= 1 and summary["static_nodes"] >= 1
    page = write_report(run_dir).read_text()
    assert "Cluster sizing" in page and "p99 latency at every node count" in page


# --- the trace and the config ---------------------------------------------------------

WCFG = Azure2019Config(functions=200, source="synthetic", minute_s=2.0, start_minute=None,
                       peak_cores=20.0, service="det", mean_service_s=0.1, burstiness=1.0)


def test_azure2019_scales_the_busiest_minute_to_peak_cores():
    trace = azure2019.generate(WCFG, seed=3, duration_s=20.0)
    t = trace.column("arrival_s").to_numpy()
    d = trace.column("demand_s").to_numpy()
    per_minute = np.bincount((t // 2.0).astype(int), d, minlength=10) / 2.0
    assert per_minute.max() == pytest.approx(20.0, rel=0.05)
    assert len(set(trace.column("function").to_pylist())) > 50
    again = azure2019.generate(WCFG, seed=3, duration_s=20.0)
    assert trace.equals(again)


def test_azure2019_loads_the_public_format():
    wcfg = dataclasses.replace(WCFG, source="azure2019", functions=2,
                               source_path="tests/data/azure2019", minute_s=60.0,
                               peak_cores=1.0)
    trace = azure2019.generate(wcfg, seed=0, duration_s=120.0)
    assert set(trace.column("function").to_pylist()) <= {"fn-0", "fn-1"}
    assert trace.num_rows > 0
    with pytest.raises(Exception, match="fewer than workload.functions"):
        azure2019.generate(dataclasses.replace(wcfg, functions=50), seed=0, duration_s=120.0)


def test_cluster_config_checks_name_the_key():
    with pytest.raises(ConfigError, match="workload.name"):
        compose(["cluster=kubernetes", "workload=poisson"])
    with pytest.raises(ConfigError, match="cluster.nodes"):
        compose(["cluster=kubernetes", "workload=azure2019", "cluster.nodes=0"])
    with pytest.raises(ConfigError, match="cluster.placement"):
        compose(["cluster=kubernetes", "workload=azure2019", "cluster.placement=spread"])
    with pytest.raises(ConfigError, match="cluster.cpu_request"):
        compose(["cluster=kubernetes", "workload=azure2019", "cluster.cpu_request=median"])
    cfg = compose(["experiment=cluster_sizing"])
    assert cfg.cluster.search == "consolidate" and cfg.cluster.nodes is None
