"""Cluster simulator throughput (pytest-benchmark): ten e5-2430l hosts
under the control plane, serially; benchmarks/cluster_scaling.py measures
the larger clusters and Ray (benchmarks/CLUSTER.md)."""
from __future__ import annotations

from benchmarks.cluster_scaling import scenario
from backends.cluster import simulate_cluster

HOSTS = 10
DURATION_S = 10.0


def test_cluster_10_hosts(benchmark):
    cfg, trace = scenario(HOSTS, DURATION_S)
    walls: list[float] = []

    def once():
        result = simulate_cluster(cfg, trace)
        walls.append(result.summary.column("wall_time_s")[0].as_py())
        return result
    result = benchmark.pedantic(once, rounds=3, iterations=1, warmup_rounds=0)
    s = result.summary.to_pylist()[0]
    wall = min(walls)
    benchmark.extra_info.update({
        "hosts": HOSTS, "simulated_s": DURATION_S, "wall_time_s": wall,
        "host_s_per_wall_s": HOSTS * DURATION_S / wall,
        "events_per_wall_s": s["sim_events"] / wall, "n_requests": s["n_requests"]})
    assert s["n_requests"] > 0 and s["n_unplaced"] == 0
