"""The simulator against queueing and scheduling theory (issue: core
simulator, validations 1-4).  Each statistical check prints its confidence
interval; the default-suite runs check that theory lies inside the 99%
batch-means CI, the slow runs are long enough for the CI to be narrower than
the tolerance and then assert the tolerance itself (tests/stats.py)."""
from __future__ import annotations

from math import factorial

import numpy as np
import pytest

from scenarios.simulate import simulate
from simcfg import make_cfg, periodic, poisson, run_for, worker_pool
from stats import assert_matches_theory


def _latencies(result):
    t = result.requests.to_pydict()
    assert not any(t["dropped"])
    return np.asarray(t["latency_s"])


# --- 1. processor sharing: M/M/1 mean response time E[S]/(1-rho) -----------
# Any work-conserving discipline that ignores service times has the M/M/1
# mean; CFS time-slicing one cgroup on one core is one.
@pytest.mark.parametrize("rho,duration_s", [
    (0.5, 150.0),
    (0.8, 150.0),
    pytest.param(0.5, 600.0, marks=pytest.mark.slow),
    pytest.param(0.8, 3000.0, marks=pytest.mark.slow),
])
def test_processor_sharing_mean_latency(rho, duration_s):
    es = 0.001
    cfg = make_cfg(poisson(functions=1, rate_rps=rho / es, mean_service_s=es),
                   duration_s=duration_s, warmup_s=2.0)
    lat = _latencies(simulate(cfg))
    assert_matches_theory(f"rho={rho} mean latency (s)", lat, es / (1 - rho), 0.03,
                          long_run=duration_s >= 600)


# --- 2. M/M/c/K queueing delay (the affinity thesis's numbers) --------------
def erlang_c_wq(lam: float, mu: float, c: int) -> float:
    a = lam / mu
    head = sum(a ** k / factorial(k) for k in range(c))
    tail = a ** c / factorial(c) / (1 - a / c)
    return tail / (head + tail) / (c * mu - lam)


def test_erlang_c_matches_seed_000():
    # the affinity thesis ("Affinity Aware CPU Scheduling for Container
    # Hosts") quotes Wq = 0.2216 s, 0.0570 s and 5.9 ms for c = 5, 6, 8
    assert erlang_c_wq(10, 2.5, 5) == pytest.approx(0.2216, abs=5e-5)
    assert erlang_c_wq(10, 2.5, 6) == pytest.approx(0.0570, abs=5e-5)
    assert erlang_c_wq(10, 2.5, 8) == pytest.approx(0.0059, abs=5e-5)


@pytest.mark.parametrize("c,duration_s", [
    (5, 8000.0), (6, 8000.0), (8, 8000.0),
    pytest.param(5, 160000.0, marks=pytest.mark.slow),
    pytest.param(6, 160000.0, marks=pytest.mark.slow),
    pytest.param(8, 160000.0, marks=pytest.mark.slow),
])
def test_mmck_queueing_delay(c, duration_s):
    cfg = make_cfg(worker_pool(workers=c, rate_rps=10.0, mean_service_s=0.4,
                               capacity=100000), cores=8, duration_s=duration_s, warmup_s=50.0)
    t = simulate(cfg).requests.to_pydict()
    assert not any(t["dropped"])
    wq = np.asarray(t["start_s"]) - np.asarray(t["arrival_s"])
    assert_matches_theory(f"c={c} Wq (s)", wq, erlang_c_wq(10.0, 2.5, c), 0.05,
                          long_run=duration_s >= 100000)


# --- 3. weights -----------------------------------------------------------
def test_nice_weights_share_one_core():
    machine, wl, _ = run_for(make_cfg(periodic(threads=2, run_ms=1000.0, nice=[0, 5])), 20.0)
    a, b = (t.se.sum_exec_runtime for t in wl.threads)
    expected = 1024 / (1024 + 335)
    assert a / (a + b) == pytest.approx(expected, rel=0.01)
    assert a / b == pytest.approx(1024 / 335, rel=0.01)


@pytest.mark.parametrize("cores", [1, 2])
def test_cgroups_share_equally_regardless_of_thread_count(cores):
    groups = [{"name": "A", "threads": 1}, {"name": "B", "threads": 10}]
    cfg = make_cfg(periodic(groups=groups, run_ms=1000.0), cores=cores)
    machine, _, _ = run_for(cfg, 20.0)
    a, b = machine.groups["/A"].usage_ns, machine.groups["/B"].usage_ns
    assert a / (a + b) == pytest.approx(0.5, rel=0.01)
    assert a + b == pytest.approx(cores * 20e9, rel=1e-6)


# --- 4. slices --------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 8, 32])
def test_slice_length_with_hrtick(n):
    """With HRTICK the slice ends exactly: 1/max(latency/n, min_gran) per s."""
    cfg = make_cfg(periodic(threads=n, run_ms=1e6), scheduler={"name": "cfs", "hrtick": True})
    machine, _, _ = run_for(cfg, 10.0)
    expected = 1 / max(0.006 / n, 0.00075)     # one CPU: tunables scale by 1
    assert machine.rqs[0].nr_switches / 10.0 == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("n", [2, 8, 32])
def test_slice_length_at_hz(n):
    """Without HRTICK (the kernel default) preemption waits for the tick:
    each slice is rounded up to a whole number of ticks."""
    cfg = make_cfg(periodic(threads=n, run_ms=1e6))
    machine, _, _ = run_for(cfg, 10.0)
    tick = 1 / 250
    slice_s = max(0.006 / n, 0.00075)
    expected = 1 / (np.ceil(slice_s / tick - 1e-9) * tick)
    assert machine.rqs[0].nr_switches / 10.0 == pytest.approx(expected, rel=0.02)


def _closed_loop(clients: int, workers: int, cores: int, service_s: float, think_s: float,
                 duration_s: float = 30.0):
    cfg = make_cfg(worker_pool(workers=workers, rate_rps=1.0, mean_service_s=service_s,
                               clients=clients, think_s=think_s, service="exp"),
                   cores=cores, duration_s=duration_s, warmup_s=5.0)
    return simulate(cfg).summary.to_pylist()[0]


def test_closed_loop_throughput_is_clients_over_cycle_time():
    # as many workers and CPUs as clients: no queueing, response = service,
    # so the interactive response-time law gives X = N / (S + Z)
    s = _closed_loop(clients=3, workers=3, cores=3, service_s=0.05, think_s=0.15)
    assert s["throughput_rps"] == pytest.approx(3 / 0.2, rel=0.06)
    assert s["latency_mean_s"] == pytest.approx(0.05, rel=0.08)


def test_closed_loop_on_one_worker_is_the_machine_repairman():
    # N clients, one server, exponential service and fixed think time: the
    # server is never idle when N S >> Z, so X -> 1 / S and R -> N S - Z
    s = _closed_loop(clients=8, workers=1, cores=1, service_s=0.02, think_s=0.02)
    assert s["throughput_rps"] == pytest.approx(1 / 0.02, rel=0.06)
    assert s["latency_mean_s"] == pytest.approx(8 * 0.02 - 0.02, rel=0.1)
