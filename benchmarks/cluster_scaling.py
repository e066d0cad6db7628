"""How the cluster simulator scales with the number of hosts, serial and on
Ray: ``python benchmarks/cluster_scaling.py [--hosts 10,100,1000]
[--duration 10] [--workers 2] [--out FILE]`` prints (and with --out writes)
a Markdown table of wall time, simulated host-seconds per wall-second and
events per second.  benchmarks/CLUSTER.md holds the recorded run.

Each host is an e5-2430l (12 hardware threads, calibration e5-2430l) with
``FUNCTIONS_PER_HOST`` Knative functions (one pod each, deployed before the
run), offered half its CPUs: Poisson invocations of lognormal 100 ms
requests.  The load per host is fixed, so ideal scaling is flat host-seconds
per wall-second serially and ``workers`` times that on Ray."""
from __future__ import annotations

import argparse
import time

import numpy as np
from omegaconf import OmegaConf

from scenarios.config import compose
from backends.cluster import simulate_cluster
from sim.workloads.trace import make_trace

FUNCTIONS_PER_HOST = 50
LOAD_CORES_PER_HOST = 6.0
MEAN_SERVICE_S = 0.1


def trace_for(hosts: int, duration_s: float, seed: int = 0):
    gen = np.random.default_rng(seed)
    count = gen.poisson(hosts * LOAD_CORES_PER_HOST / MEAN_SERVICE_S * duration_s)
    arrival = np.sort(gen.uniform(0.0, duration_s, count))
    function = gen.integers(0, hosts * FUNCTIONS_PER_HOST, count)
    demand = MEAN_SERVICE_S * np.exp(gen.standard_normal(count) - 0.5)
    return make_trace([f"fn-{i}" for i in function], arrival, demand, np.ones(count, int))


def scenario(hosts: int, duration_s: float, parallel: str = "serial", workers: int = 1):
    """The config and trace of a cluster of ``hosts``."""
    cfg = compose(["cluster=kubernetes", "workload=azure2019", "calibration=e5-2430l",
                   f"cluster.nodes={hosts}", "cluster.min_scale=1", f"duration_s={duration_s}",
                   "warmup_s=0", f"cluster.parallel={parallel}", f"cluster.workers={workers}",
                   f"cluster.profile_window_s={duration_s}"])
    return OmegaConf.to_container(cfg, resolve=True), trace_for(hosts, duration_s)


def run(hosts: int, duration_s: float, parallel: str, workers: int) -> dict:
    cfg, trace = scenario(hosts, duration_s, parallel, workers)
    wall0 = time.perf_counter()
    row = simulate_cluster(cfg, trace).summary.to_pylist()[0]
    wall = time.perf_counter() - wall0
    return {"hosts": hosts, "parallel": parallel, "workers": workers if parallel == "ray" else 1,
            "requests": row["n_requests"], "wall_s": wall,
            "host_s_per_wall_s": hosts * duration_s / wall, "events_per_s": row["sim_events"] / wall}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="10,100,1000")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lines = ["| hosts | run | requests | wall s | simulated host-s / wall-s | events / wall-s |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for hosts in [int(h) for h in args.hosts.split(",")]:
        for parallel in ("serial", "ray"):
            r = run(hosts, args.duration, parallel, args.workers)
            how = "serial" if parallel == "serial" else f"Ray, {r['workers']} actors"
            lines.append(f"| {hosts:,} | {how} | {r['requests']:,} | {r['wall_s']:.1f} | "
                         f"{r['host_s_per_wall_s']:.0f} | {r['events_per_s']:,.0f} |")
            print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
