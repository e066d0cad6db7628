"""The resctl closed-loop workload (sim/workloads/resctl.py)."""
import numpy as np
import pytest

from scenarios.simulate import build, simulate
from sim.engine import s_to_ns
from tests.simcfg import make_cfg


def resctl(functions=1, mean_service_s=0.01, service="det", **kw):
    return {"name": "resctl", "functions": functions, "service": service,
            "mean_service_s": mean_service_s, "service_sigma": 0.33, "threads_per_request": 1,
            "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
            "parent_cgroup": "faas.slice", **kw}


def test_concurrency_settles_where_p90_latency_meets_the_target():
    """One function alone on one core, 10 ms requests: the CPU is saturated
    at 100 req/s whatever the concurrency, and latency is concurrency x
    10 ms, so the controller must settle near 10 in flight, p90 ~ 100 ms."""
    res = simulate(make_cfg(resctl(), duration_s=60.0, warmup_s=30.0))
    lat = np.array([r["latency_s"] for r in res.requests.to_pylist()])
    s = res.summary.to_pylist()[0]
    assert s["throughput_rps"] == pytest.approx(100.0, rel=0.02)
    assert 0.07 <= np.percentile(lat, 90) <= 0.13


def test_requests_are_admitted_only_below_the_concurrency():
    engine, machine, recorder, wl = build(make_cfg(resctl(functions=3), cores=2))
    admitted = []
    fork = wl.fork_request

    def recording_fork(name, tg, demand, k, hint):
        fn = wl.functions[name]
        admitted.append((fn.in_flight, int(fn.concurrency)))
        return fork(name, tg, demand, k, hint)
    wl.fork_request = recording_fork
    wl.start()
    engine.run(s_to_ns(20))
    assert len(admitted) > 100
    assert all(in_flight <= concurrency for in_flight, concurrency in admitted)
    assert max(c for _, c in admitted) > 1      # the controller did raise it


def test_a_lower_latency_target_keeps_fewer_requests_in_flight():
    def p50(target):
        res = simulate(make_cfg(resctl(lat_target_s=target), duration_s=40.0, warmup_s=20.0))
        return np.median([r["latency_s"] for r in res.requests.to_pylist()])
    assert p50(0.05) < 0.7 * p50(0.2)


def test_parallel_requests_fork_two_threads_that_both_must_finish():
    """resctl_parallel on two cores with concurrency pinned at 1: each
    request's two 5 ms halves run side by side, so it takes 5 ms."""
    wl = resctl(name="resctl_parallel", model="resctl", threads_per_request=2,
                concurrency_max=1)
    res = simulate(make_cfg(wl, cores=2, duration_s=2.0, warmup_s=0.5))
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    assert lat == pytest.approx([0.005] * len(lat), abs=1e-9)
    assert len(lat) == pytest.approx(1.5 / 0.005, abs=2)


def test_mix_draws_the_three_request_classes_in_proportion():
    wl = resctl(name="resctl_mix", model="resctl", service="mix", mix_s=[0.01, 0.1, 1.0],
                mix_p=[0.3, 0.4, 0.3], functions=12)
    res = simulate(make_cfg(wl, host="e5-2430l", duration_s=60.0, warmup_s=0.0))
    demand = np.array([r["cpu_demand_s"] for r in res.requests.to_pylist()])
    counts = {d: np.mean(np.isclose(demand, d)) for d in (0.01, 0.1, 1.0)}
    assert counts[0.01] == pytest.approx(0.3, abs=0.05)
    assert counts[0.1] == pytest.approx(0.4, abs=0.05)
    assert counts[1.0] == pytest.approx(0.3, abs=0.05)


@pytest.mark.parametrize("option", ["resctl", "resctl_parallel", "resctl_mix"])
def test_options_compose_and_run(option):
    from scenarios.config import compose
    cfg = compose([f"workload={option}", "host=this-vm", "duration_s=3", "warmup_s=1",
                   "workload.functions=2"])
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["scenario"] == option and s["throughput_rps"] > 0


def test_bad_mix_is_rejected_naming_the_key():
    from scenarios.config import compose
    from scenarios.validate import ConfigError
    with pytest.raises(ConfigError, match=r"workload.mix_p = \[0.5, 0.4, 0.3\] is invalid: "
                                          r"must sum to 1"):
        compose(["workload=resctl_mix", "workload.mix_p=[0.5,0.4,0.3]"])
