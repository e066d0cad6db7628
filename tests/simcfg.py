"""Plain-dict scenario configs for tests of the simulator core."""
from __future__ import annotations

import copy

HOSTS = {
    "generic": {"name": "generic", "sockets": 1, "cores": 1, "threads_per_core": 1,
                "numa_nodes": 1, "cores_per_llc": 0, "llc_mb": 8, "llc_ways": 16, "hz": 250,
                "smt_throughput": 1.0, "llc_slices": 4, "mem_bw_gbps": 51.2,
                "rdt_num_closids": 16, "rdt_min_cbm_bits": 1, "mba_min_bandwidth": 10,
                "mba_bandwidth_gran": 10},
    "e5-2430l": {"name": "e5-2430l", "sockets": 1, "cores": 6, "threads_per_core": 2,
                 "numa_nodes": 1, "cores_per_llc": 0, "llc_mb": 15, "llc_ways": 20, "hz": 250,
                 "smt_throughput": 1.25, "llc_slices": 6, "mem_bw_gbps": 32.0,
                 "rdt_num_closids": 0, "rdt_min_cbm_bits": 1, "mba_min_bandwidth": 0,
                 "mba_bandwidth_gran": 0},
}
IDEAL = {"name": "ideal", "direct_ns": 0, "per_level_ns": 0, "migration_ns": 0,
         "refill_ns_per_line": 0, "cache_line_bytes": 64, "max_refill_bytes": 0,
         "cache_decay_ns": 1}
DEFAULT_COSTS = {"name": "default", "direct_ns": 3800, "per_level_ns": 1500,
                 "migration_ns": 5000, "refill_ns_per_line": 8, "cache_line_bytes": 64,
                 "max_refill_bytes": 2097152, "cache_decay_ns": 20000000}


def make_cfg(workload: dict, host: str = "generic", cores: int | None = None,
             duration_s: float = 10.0, warmup_s: float = 1.0, seed: int = 1,
             calibration: dict = IDEAL, scheduler: dict | None = None, **host_overrides) -> dict:
    h = copy.deepcopy(HOSTS[host])
    if cores is not None:
        h["cores"] = cores
    h.update(host_overrides)
    # intervals of 1 s, or one over a shorter run (interval_s <= duration_s, as
    # simulate() checks)
    return {"seed": seed, "duration_s": duration_s, "warmup_s": warmup_s, "slo_s": 1.0,
            "interval_s": min(1.0, duration_s), "host": h, "scheduler": scheduler or {"name": "cfs"},
            "calibration": dict(calibration), "workload": workload}


def poisson(functions=1, rate_rps=10.0, mean_service_s=0.01, service="exp", **kw) -> dict:
    return {"name": "poisson", "functions": functions, "rate_rps": rate_rps,
            "service": service, "mean_service_s": mean_service_s, "service_sigma": 1.0,
            "threads_per_request": 1, "working_set_kb": 256, "cgroup_weight": 100,
            "nice": 0, "parent_cgroup": "faas.slice", **kw}


def trace_replay(**kw) -> dict:
    """Function cgroups replaying the trace handed to simulate (sim/workloads/trace.py)."""
    return {"name": "trace", "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
            "parent_cgroup": "faas.slice", **kw}


def periodic(threads=2, run_ms=10.0, sleep_ms=0.0, **kw) -> dict:
    return {"name": "periodic", "threads": threads, "run_ms": run_ms, "sleep_ms": sleep_ms,
            "nice": 0, "cgroup_weight": 100, "working_set_kb": 256, **kw}


def worker_pool(workers=5, rate_rps=10.0, mean_service_s=0.4, capacity=100000, **kw) -> dict:
    return {"name": "worker_pool", "rate_rps": rate_rps, "service": "exp",
            "mean_service_s": mean_service_s, "service_sigma": 1.0, "workers": workers,
            "capacity": capacity, "working_set_kb": 256, "nice": 0, **kw}


def run_for(cfg: dict, seconds: float):
    """Build and run a scenario by hand, for tests that inspect the machine:
    returns (machine, workload, recorder) with accounting brought to the end."""
    from scenarios.simulate import build
    from sim.engine import s_to_ns
    engine, machine, recorder, workload = build(cfg)
    workload.start()
    engine.run(s_to_ns(seconds))
    machine.sync()
    return machine, workload, recorder

