"""The cost of writing a workload as SimPy processes: ``workload=clients``
(sim/workloads/clients.py, a SimPy process per client) against
``workload=poisson`` (plain engine callbacks) at the same request rate.

The clients' run sets the rate: poisson then runs with the throughput the
clients reached, spread over as many functions, so both simulate about as
many requests on the same host.  Reports each run's requests per wall
second and, as ``clients_vs_poisson``, the clients' wall time per request
over poisson's (the median of the rounds; above 1: the processes cost more).
"""
from __future__ import annotations

import time

from scenarios.config import compose
from scenarios.simulate import simulate

FUNCTIONS = 8
COMMON = ["host=e5-2430l", "calibration=ideal", "seed=0", "duration_s=60", "warmup_s=1",
          f"workload.functions={FUNCTIONS}", "workload.mean_service_s=0.01"]


def _timed(cfg) -> tuple[float, int, float]:
    """Wall time, requests finished and throughput (req/s) of one run."""
    start = time.perf_counter()
    result = simulate(cfg)
    wall = time.perf_counter() - start
    summary = result.summary.to_pylist()[0]
    return wall, summary["n_requests"], summary["throughput_rps"]


def test_clients_vs_poisson(benchmark):
    clients_cfg = compose(["workload=clients", "workload.clients=4", "workload.think_s=0.05",
                           *COMMON])
    _, _, rate = _timed(clients_cfg)
    poisson_cfg = compose(["workload=poisson", f"workload.rate_rps={rate / FUNCTIONS}",
                           *COMMON])
    ratios, per_request = [], {"clients": [], "poisson": []}

    def once():
        c_wall, c_n, _ = _timed(clients_cfg)
        p_wall, p_n, _ = _timed(poisson_cfg)
        ratios.append((c_wall / c_n) / (p_wall / p_n))
        per_request["clients"].append(c_n / c_wall)
        per_request["poisson"].append(p_n / p_wall)
    benchmark.pedantic(once, rounds=7, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update({
        "rate_rps": rate,
        "clients_requests_per_wall_s": max(per_request["clients"]),
        "poisson_requests_per_wall_s": max(per_request["poisson"]),
        "clients_vs_poisson": sorted(ratios)[len(ratios) // 2],
    })
