"""workload=webserver: the server of "Affinity Aware CPU Scheduling for Container
Hosts" (listen backlog, batched accept thread, bounded application queue,
worker pool), against hand-computed timelines, queueing theory and the
closed-loop laws."""
from math import factorial

import numpy as np
import pytest
from omegaconf import OmegaConf

from scenarios.config import compose
from scenarios.validate import ConfigError
from sim.workloads import trace_for
from scenarios.simulate import build, simulate
from sim.engine import s_to_ns
from sim.workloads.trace import make_trace, read_trace, write_trace
from results.sched import sched_metrics
from sim.workloads.webserver import arrival_trace
from simcfg import make_cfg, worker_pool
from stats import assert_matches_theory


def webserver(**kw) -> dict:
    keys = dict(clients=None, think_s=0.0, backlog=512, batch_size=1, batch_window_ms=0.0,
                accept_us=0.001)
    keys.update({k: kw.pop(k) for k in list(kw) if k in keys})
    return {**worker_pool(**kw), "name": "webserver", **keys}


def _req(result):
    t = result.requests.to_pydict()
    return {k: np.asarray(v) for k, v in t.items()}


def mmck(lam, mu, c, k):
    """M/M/c/K: (P_K, Wq of admitted requests) from the state probabilities."""
    a, rho = lam / mu, lam / (c * mu)
    p = np.array([a ** n / factorial(n) if n <= c else a ** c / factorial(c) * rho ** (n - c)
                  for n in range(k + 1)])
    p /= p.sum()
    lq = sum((n - c) * p[n] for n in range(c, k + 1))
    return p[k], lq / (lam * (1 - p[k]))


def test_config_defaults_and_checks():
    w = OmegaConf.to_container(compose(["workload=webserver"]), resolve=True)["workload"]
    assert (w["rate_rps"], w["mean_service_s"], w["service"], w["backlog"]) == (10.0, 0.4, "det",
                                                                                 512)
    with pytest.raises(ConfigError,
                       match=r"workload.batch_size = 0 is invalid: must be in \[1, 1000000\]"):
        compose(["workload=webserver", "workload.batch_size=0"])
    with pytest.raises(ConfigError, match="workload.trace_file = x.parquet is invalid: replays "
                                          "open-loop arrivals"):
        compose(["workload=webserver", "workload.clients=4", "workload.trace_file=x.parquet"])


def test_batch_of_one_reduces_to_mmck():
    """batch_size 1, a 1 ns accept and a spare CPU for the accept thread:
    the same seed draws the same arrivals and demands as worker_pool, the
    same requests are dropped and every wait differs by the accept time;
    and both match M/M/c/K (c = 2, K = 2 + 3, lambda = 10, mu = 2.5)."""
    common = dict(workers=2, capacity=3, rate_rps=10.0, mean_service_s=0.4)
    runs = [_req(simulate(make_cfg(wl, cores=4, duration_s=700.0, warmup_s=10.0)))
            for wl in (worker_pool(**common), webserver(**common))]
    pool, web = runs
    np.testing.assert_array_equal(pool["arrival_s"], web["arrival_s"])
    np.testing.assert_array_equal(pool["dropped"], web["dropped"])
    ok = ~web["dropped"]
    np.testing.assert_allclose(web["start_s"][ok], pool["start_s"][ok], rtol=0, atol=1e-8)
    p_k, wq = mmck(10.0, 2.5, 2, 5)
    assert_matches_theory("P(drop)", web["dropped"].astype(float), p_k, 0.05, long_run=False)
    assert_matches_theory("Wq (s)", (web["start_s"] - web["arrival_s"])[ok], wq, 0.05,
                          long_run=False)


def _cfg_from_trace(tmp_path, arrivals, demand=0.4, **kw):
    path = write_trace(make_trace(["server"] * len(arrivals), arrivals, [demand] * len(arrivals),
                                  [1] * len(arrivals)), tmp_path / "arrivals.parquet")
    return make_cfg(webserver(trace_file=str(path), **kw), cores=4, duration_s=20.0,
                    warmup_s=0.0)


def test_batch_window_and_batch_size_timeline(tmp_path):
    """accept a = 10 us, window w = 5 ms, batch of 2, det 0.4 s, free switches.
    A lone connection at t waits for the window: accepted at t + a, the window
    times out at t + a + w, the woken accept thread hands it over after one
    more pass (a): latency 0.4 + w + 2a.  A pair 1 ms apart fills the batch:
    both are handed over when the second is accepted, at 10.001 + a."""
    a, w = 10e-6, 5e-3
    cfg = _cfg_from_trace(tmp_path, [1.0, 3.0, 10.0, 10.001], workers=2, batch_size=2,
                          batch_window_ms=w * 1e3, accept_us=a * 1e6)
    lat = _req(simulate(cfg))["latency_s"]
    assert lat == pytest.approx([0.4 + w + 2 * a, 0.4 + w + 2 * a, 0.401 + a, 0.4 + a],
                                abs=1e-9)


def test_queue_bound_and_backlog_refusals():
    """The application queue never holds more than `capacity` and overflow is
    dropped; a slow accept thread fills a small listen backlog and further
    connections are refused."""
    cfg = make_cfg(webserver(workers=1, capacity=2, rate_rps=50.0, mean_service_s=0.1,
                             batch_size=8, batch_window_ms=20.0, backlog=4, accept_us=30000.0),
                   cores=2, duration_s=10.0, warmup_s=0.0)
    engine, machine, recorder, wl = build(cfg)
    seen = {"queue": 0, "backlog": 0}

    def sample():
        seen["queue"] = max(seen["queue"], len(wl.queue))
        seen["backlog"] = max(seen["backlog"], len(wl.backlog))
        engine.call_later(s_to_ns(0.001), sample)
    wl.start()
    sample()
    engine.run(s_to_ns(10.0))
    assert seen == {"queue": 2, "backlog": 4}
    rows = recorder.rows
    dropped = [r for r in rows if r[6]]
    served = [r for r in rows if not r[6]]
    # 50 req/s offered; the accept thread takes 30 ms each (33/s) and the
    # worker serves 10/s: most are dropped, in the backlog or the queue
    assert len(served) <= 10 * 10 + 1
    assert len(dropped) > 0.7 * len(rows)


def test_closed_loop_clients_refused_by_a_full_backlog_retry_after_a_second():
    """8 clients with no think time, a one-slot backlog and an accept thread
    of 50 ms per connection: refused clients come back after the 1 s SYN
    retransmission timeout, so the run advances (no retry storm in zero
    time) and refusals are recorded as drops."""
    cfg = make_cfg(webserver(workers=2, clients=8, think_s=0.0, mean_service_s=0.05,
                             service="det", backlog=1, accept_us=50000.0),
                   cores=4, duration_s=10.0, warmup_s=0.0)
    req = _req(simulate(cfg))
    refused = req["arrival_s"][req["dropped"]]
    assert 0 < len(refused) < 8 * 10
    # all 8 clients start at 0: one is taken into the backlog, 7 are refused
    # and retry together at 1 s
    assert (refused == 0).sum() == 7 and (refused == 1.0).sum() >= 1


def test_closed_loop_follows_the_response_time_law():
    """N = 10 clients, think Z = 0.5 s, 2 workers at det 0.4 s on 4 CPUs: the
    workers are the bottleneck, X = 2 / 0.4 = 5 req/s, and R = N / X - Z =
    1.5 s (the thesis's hey table has Z = 0: X R = N = 10)."""
    cfg = make_cfg(webserver(workers=2, clients=10, think_s=0.5, service="det",
                             mean_service_s=0.4, capacity=64, batch_size=4, batch_window_ms=5.0,
                             accept_us=10.0), cores=4, duration_s=120.0, warmup_s=20.0)
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["n_dropped"] == 0
    # only requests arriving and completing inside the 100 s window count, so
    # up to N = 10 straddling its edges are missing: 0.1 req/s
    assert s["throughput_rps"] == pytest.approx(5.0, abs=10 / 100)
    assert s["latency_mean_s"] == pytest.approx(10 / 5.0 - 0.5, rel=0.02)
    assert s["throughput_rps"] * (s["latency_mean_s"] + 0.5) == pytest.approx(10, rel=0.02)


def test_arrivals_round_trip_through_a_trace_file(tmp_path):
    """The open-loop arrivals written as an invocation trace and replayed
    give the very run the on-the-fly draw gives."""
    wl = webserver(workers=5, rate_rps=10.0, mean_service_s=0.4, capacity=64, batch_size=4,
                   batch_window_ms=5.0, accept_us=10.0)
    cfg = make_cfg(wl, cores=4, duration_s=30.0, warmup_s=0.0, seed=3)
    trace = arrival_trace(wl, 3, 30.0)
    assert trace_for(cfg).equals(trace)
    for suffix in (".parquet", ".csv"):
        path = write_trace(trace, tmp_path / f"arrivals{suffix}")
        assert read_trace(path).equals(trace)
        replay = dict(cfg, workload=dict(wl, trace_file=str(path)))
        assert _req(simulate(replay))["latency_s"].tolist() == \
            _req(simulate(cfg))["latency_s"].tolist()
    # a closed loop has no arrival trace: its arrivals depend on the responses
    assert trace_for(dict(cfg, workload=dict(wl, clients=4))) is None


def test_affinity_workers_experiment_composes():
    cfg = compose(["experiment=affinity_workers", "workload.workers=7"])
    assert (cfg.experiment, cfg.host.cores, cfg.host.threads_per_core) == ("affinity_workers", 4,
                                                                           1)
    assert (cfg.workload.name, cfg.workload.workers, cfg.workload.rate_rps) == ("webserver", 7,
                                                                                 10.0)


def test_a_polling_accept_thread_never_sleeps_and_takes_a_connection_at_a_pass_end(tmp_path):
    """poll_us = 1 ms: the accept thread runs passes back to back from t = 0
    (alone on its CPU: it is never preempted), so a connection arriving at
    1.0005 s is taken when the pass ending at 1.001 s ends, and one at
    3.0002 s at 3.001 s; the thread uses a whole CPU and never blocks."""
    cfg = _cfg_from_trace(tmp_path, [1.0005, 3.0002], workers=2, batch_size=1, accept_us=10.0,
                          poll_us=1000.0) | {"trace": {"name": "sched"}}
    res = simulate(cfg)
    assert _req(res)["latency_s"] == pytest.approx([0.4005, 0.4008], abs=1e-9)
    s = res.summary.to_pylist()[0]
    assert s["cpu_util"] == pytest.approx((20.0 + 0.8) / (4 * 20.0), rel=1e-3)
    m = sched_metrics(res.extra["sched"]).to_pandas().query("comm == 'accept'").iloc[0]
    assert m["switches_voluntary"] == 0 and m["n_wakeups"] == 1       # its fork only
    # blocking (the default): the same connections wake it twice, once each
    block = simulate(_cfg_from_trace(tmp_path, [1.0005, 3.0002], workers=2, batch_size=1,
                                     accept_us=10.0) | {"trace": {"name": "sched"}})
    m = sched_metrics(block.extra["sched"]).to_pandas().query("comm == 'accept'").iloc[0]
    assert m["switches_voluntary"] == 2 and m["n_wakeups"] == 2


def test_paced_arrivals_come_exactly_one_period_apart():
    """interarrival=det (the thesis's controlled test, "exactly 10 requests
    per second"): arrivals at k / rate_rps whatever the seed, the same in the
    run and in the trace the real backend replays; 5 workers of 400 ms on
    4 CPUs then serve 10 req/s, each request waiting only for its batch
    window (5 ms) and slowed only while it shares a CPU at a hand-over (the
    CPUs are exactly full: 4 requests in service on average)."""
    wl = webserver(workers=5, rate_rps=10.0, mean_service_s=0.4, service="det", capacity=64,
                   batch_size=4, batch_window_ms=5.0, accept_us=10.0, interarrival="det")
    trace = arrival_trace(wl, 7, 3.0).to_pandas()
    assert np.allclose(trace.arrival_s, np.arange(1, 30) / 10, rtol=0, atol=1e-9)
    assert trace.equals(arrival_trace(wl, 8, 3.0).to_pandas())
    cfg = make_cfg(wl, cores=4, duration_s=30.0, warmup_s=5.0)
    res = simulate(cfg)
    s, req = res.summary.to_pylist()[0], _req(res)
    assert s["n_dropped"] == 0 and s["n_unfinished"] <= 5
    assert np.allclose(req["start_s"] - req["arrival_s"], 0.005, atol=1e-4)
    assert (req["latency_s"] >= 0.405 - 1e-9).all() and (req["latency_s"] < 0.5).all()
    assert s["throughput_rps"] == pytest.approx(10.0, abs=5 / 25)
