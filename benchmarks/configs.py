"""Scenario dicts for the benchmarks (plain ``sim.simulate`` configs)."""
from __future__ import annotations

E5_2430L = {"name": "e5-2430l", "sockets": 1, "cores": 6, "threads_per_core": 2,
            "numa_nodes": 1, "cores_per_llc": 0, "llc_mb": 15, "llc_ways": 20, "hz": 250}
THIS_VM = {"name": "this-vm", "sockets": 1, "cores": 2, "threads_per_core": 1,
           "numa_nodes": 1, "cores_per_llc": 0, "llc_mb": 32, "llc_ways": 16, "hz": 250}
DEFAULT_COSTS = {"name": "default", "direct_ns": 3800, "per_level_ns": 1500,
                 "migration_ns": 5000, "refill_ns_per_line": 8, "cache_line_bytes": 64,
                 "max_refill_bytes": 2097152, "cache_decay_ns": 20000000}
MEAN_SERVICE_S = 0.010


def poisson_cfg(host: dict, functions: int, load: float, duration_s: float,
                seed: int = 1) -> dict:
    """``functions`` Poisson functions offering ``load`` x the host's capacity
    in total (exp service, mean 10 ms, 256 KiB working set, CFS, default
    cost model, no warmup)."""
    ncpus = host["sockets"] * host["cores"] * host["threads_per_core"]
    rate_rps = load * ncpus / MEAN_SERVICE_S / functions
    return {
        "seed": seed, "duration_s": duration_s, "warmup_s": 0.0, "slo_s": 1.0,
        "interval_s": 1.0, "host": dict(host), "scheduler": {"name": "cfs"},
        "calibration": dict(DEFAULT_COSTS),
        "workload": {"name": "poisson", "functions": functions, "rate_rps": rate_rps,
                     "service": "exp", "mean_service_s": MEAN_SERVICE_S,
                     "threads_per_request": 1, "working_set_kb": 256,
                     "parent_cgroup": "faas.slice"},
    }


def dense() -> dict:
    """The core-simulator issue's dense benchmark: e5-2430l (12 CPUs), 228
    functions at 1.2 x capacity, 30 simulated seconds."""
    return poisson_cfg(E5_2430L, 228, 1.2, 30.0)


def small() -> dict:
    """e5-2430l, 36 functions at 60 % load, 10 simulated seconds."""
    return poisson_cfg(E5_2430L, 36, 0.6, 10.0)


def tiny() -> dict:
    """this-vm (2 CPUs), 4 functions at 60 % load, 5 simulated seconds."""
    return poisson_cfg(THIS_VM, 4, 0.6, 5.0)


SCENARIOS = {"dense": dense, "small": small, "tiny": tiny}
