"""``workload=clients`` (sim/workloads/clients.py): closed-loop clients,
each a SimPy process, against function cgroups."""
from __future__ import annotations

import numpy as np
import pytest

from scenarios.config import compose
from scenarios.validate import ConfigError
from scenarios.simulate import simulate


def clients(*overrides: str, duration_s: float = 10.0, warmup_s: float = 0.0):
    return compose(["workload=clients", "host=this-vm", "calibration=ideal", "seed=1",
                    f"duration_s={duration_s}", f"warmup_s={warmup_s}",
                    f"interval_s={min(1.0, duration_s)}", *overrides])


def requests(cfg):
    result = simulate(cfg)
    return result, result.requests.to_pandas()


def test_one_client_sends_each_request_its_think_time_after_the_last_response():
    """One client, deterministic S and Z, alone on an idle host with ideal
    costs: request k is sent at k (S + Z) and ends S later."""
    S, Z = 0.002, 0.001
    _, req = requests(clients("workload.functions=1", "workload.clients=1",
                              "workload.service=det", "workload.think=det",
                              f"workload.mean_service_s={S}", f"workload.think_s={Z}",
                              duration_s=0.1))
    ns = (req[["arrival_s", "start_s", "end_s"]] * 1e9).round().astype(np.int64)
    k = np.arange(len(req))
    assert len(req) == 33                   # sent at 0, 3, ..., 96 ms; the 34th at 99 ms ends after
    assert (ns.arrival_s == k * 3_000_000).all()
    assert (ns.start_s == ns.arrival_s).all()
    assert (ns.end_s == ns.arrival_s + 2_000_000).all()


def test_requests_per_client_stops_each_client():
    _, req = requests(clients("workload.functions=2", "workload.clients=3",
                              "workload.requests_per_client=4", duration_s=5.0))
    assert req.groupby("function").size().to_dict() == {"func-0": 12, "func-1": 12}


def test_response_time_law_and_saturation_bound():
    """The interactive response time law N = X (R + Z) holds on the run's
    own throughput X and mean response time R (an operational law: only the
    window's edges, requests in flight at its start and end, separate the
    two sides); and X <= CPUs / S (the CPUs cannot do more work than they
    have time for), here nearly attained since N S / (S + Z) > CPUs."""
    N_PER, FUNCS, S, Z, T, W = 4, 2, 0.01, 0.02, 20.0, 1.0
    N = N_PER * FUNCS
    result, req = requests(clients(f"workload.functions={FUNCS}", f"workload.clients={N_PER}",
                                   "workload.think=det", f"workload.mean_service_s={S}",
                                   f"workload.think_s={Z}", duration_s=T, warmup_s=W))
    X = len(req) / (T - W)
    R = req.latency_s.mean()
    assert N == pytest.approx(X * (R + Z), rel=0.01)
    cpus = 2                                               # host=this-vm
    assert X * req.cpu_demand_s.mean() <= cpus * 1.005
    assert X * req.cpu_demand_s.mean() >= cpus * 0.95      # saturated
    assert R > S                                           # and requests queue for CPUs


def test_at_low_load_the_response_time_is_the_service_time():
    _, req = requests(clients("workload.functions=4", "workload.clients=1",
                              "workload.think_s=0.5", "workload.mean_service_s=0.005",
                              duration_s=30.0))
    assert len(req) > 200
    assert req.latency_s.mean() == pytest.approx(req.cpu_demand_s.mean(), rel=0.02)
    assert req.latency_s.mean() == pytest.approx(0.005, rel=0.15)


def test_deterministic_with_a_seed_and_streams_per_client():
    cfg = clients("workload.functions=2", "workload.clients=2", duration_s=2.0)
    _, a = requests(cfg)
    _, b = requests(cfg)
    assert a.equals(b) and len(a) > 50
    cfg.seed = 2
    _, c = requests(cfg)
    assert not np.array_equal(a.cpu_demand_s, c.cpu_demand_s)
    # a function's one client draws the same demands whatever other
    # functions run beside it (its own streams)
    one = lambda f: requests(clients(f"workload.functions={f}", "workload.clients=1",
                                     "workload.requests_per_client=20", duration_s=5.0))[1]
    alone, crowded = one(1), one(3)
    assert (alone.function == "func-0").all() and len(alone) == 20
    first = crowded[crowded.function == "func-0"].sort_values("arrival_s")
    assert np.array_equal(alone.sort_values("arrival_s").cpu_demand_s, first.cpu_demand_s)


@pytest.mark.parametrize("override, key, message", [
    ("workload.clients=0", "workload.clients", "must be in \\[1, 1000000\\]"),
    ("workload.think_s=-1", "workload.think_s", "must be >= 0"),
    ("workload.think=pareto", "workload.think", "exp"),
    ("workload.request_path=knative", "workload.request_path", "direct path only"),
])
def test_config_errors_name_the_key(override, key, message):
    with pytest.raises(ConfigError, match=f"{key} = .*{message}"):
        compose(["workload=clients", override])
