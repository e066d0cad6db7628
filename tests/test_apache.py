"""worker_pool's closed loop through load-generator threads on the host
(``loadgen_threads``, the ``apache`` option: wrk beside Apache), against
hand-computed cycles, the closed-loop laws, and the RT class's sysctls,
which a host of fair tasks only must not feel (docs/cfs-params.md)."""
import pytest

from scenarios.config import compose
from scenarios.simulate import build, simulate
from scenarios.validate import ConfigError
from sim.engine import s_to_ns
from simcfg import DEFAULT_COSTS, make_cfg, worker_pool

US = 1e-6


def _loop(clients, threads, loadgen_us, service_us, think_s=0.0, workers=None, service="det"):
    return worker_pool(workers=workers or clients, mean_service_s=service_us * US,
                       service=service, clients=clients, think_s=think_s,
                       loadgen_threads=threads, loadgen_us=loadgen_us)


def _summary(cfg):
    return simulate(cfg).summary.to_pylist()[0]


@pytest.mark.parametrize("overrides, message", [
    (["workload.clients=2"], r"workload.loadgen_threads = 4 is invalid: must be <= "
                             r"workload.clients = 2"),
    (["workload.clients=null"], r"workload.loadgen_threads = 4 is invalid: runs closed-loop "
                                r"clients; set workload.clients"),
    (["workload.loadgen_us=0"], r"workload.loadgen_us = 0.0 is invalid: must be > 0"),
    (["backend=real"], r"workload.loadgen_threads = 4 is invalid: must be 0 with backend=real"),
])
def test_bad_config_is_refused_before_running(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(["workload=apache", *overrides])


@pytest.mark.parametrize("clients, think_s, cycle_us", [
    (1, 0.0, 300 + 100),          # send (100 us), serve (300 us), again
    (1, 0.001, 300 + 100 + 1000),
    # one thread, two clients: their 100 us turns interleave while the other
    # is served, so each still cycles in 400 us
    (2, 0.0, 400),
])
def test_cycle_is_response_plus_the_threads_turn_plus_think(clients, think_s, cycle_us):
    """Free switches, a CPU each: a client's cycle is its thread's
    loadgen_us, the request's det 300 us and think_s, so X = c / cycle and
    the server's latency is the service time."""
    cfg = make_cfg(_loop(clients, 1, 100.0, 300.0, think_s=think_s), cores=4,
                   duration_s=2.0, warmup_s=0.2)
    s = _summary(cfg)
    assert s["latency_mean_s"] == pytest.approx(300 * US, abs=1e-9)
    # the 1.8 s window holds whole cycles but for one per client at each edge
    assert s["throughput_rps"] == pytest.approx(clients / (cycle_us * US), abs=2 * clients / 1.8)


@pytest.mark.parametrize("clients", [1, 4, 16])
def test_load_generator_competes_for_the_cpu(clients):
    """On one CPU every request costs 100 us of the thread's and 300 us of a
    worker's: X = 1 / 400 us whatever the concurrency (with zero-cost
    clients it would be 1 / 300 us)."""
    cfg = make_cfg(_loop(clients, 1, 100.0, 300.0), cores=1, duration_s=2.0, warmup_s=0.2)
    assert _summary(cfg)["throughput_rps"] == pytest.approx(1 / (400 * US), rel=0.01)


def test_every_client_has_exactly_one_request_and_littles_law_holds():
    """c = 12 clients on 3 threads, exponential demands, switch costs and 2
    CPUs (the threads and 6 workers contend): at every instant each client
    is in exactly one place (its request in flight, its response on the way
    to its thread, or queued at its thread), and X (R + Z) = c, Z the time
    from a response to the client's next request."""
    c, seconds, warmup = 12, 4.0, 0.5
    cfg = make_cfg(_loop(c, 3, 40.0, 150.0, workers=6, service="exp"), cores=2,
                   duration_s=seconds, warmup_s=warmup, calibration=DEFAULT_COSTS)
    engine, machine, recorder, wl = build(cfg)
    places, responded, gaps = [], {}, []
    # every client starts on its way to its thread (to connect)
    on_the_way = [c]
    send, done, ready = wl.client_request, wl.request_done, wl._client_ready

    def client_request(client=None):
        if client in responded and engine.now >= s_to_ns(warmup):
            gaps.append(engine.now - responded[client])
        send(client)

    def request_done(req, retry_ns=None):
        responded[wl.client_of[req]] = engine.now
        on_the_way[0] += 1
        done(req, retry_ns)

    def client_ready(client):
        on_the_way[0] -= 1
        ready(client)

    def sample():
        places.append((len(wl.client_of), sum(len(t.ready) for t in wl.loadgen), on_the_way[0]))
        engine.call_later(999_983, sample)
    wl.client_request, wl.request_done, wl._client_ready = (client_request, request_done,
                                                            client_ready)
    wl.start()
    engine.call_later(7, sample)
    engine.run(s_to_ns(seconds))
    assert {sum(p) for p in places} == {c}
    assert len({p[0] for p in places}) > 3       # how they split varies
    rows = [r for r in recorder.rows if r[2] >= s_to_ns(warmup)]
    assert not any(r[6] for r in rows)           # nothing dropped
    x = len(rows) / (seconds - warmup)
    r_mean = sum(r[4] - r[2] for r in rows) / len(rows) * 1e-9
    z_mean = sum(gaps) / len(gaps) * 1e-9
    assert z_mean > 40 * US
    assert x * (r_mean + z_mean) == pytest.approx(c, rel=0.02)


def _apache(*overrides):
    return compose(["workload=apache", "host=generic", "calibration=this-vm",
                    "workload.clients=20", "duration_s=0.6", "warmup_s=0.1",
                    "interval_s=0.1", *overrides])


WALL = ("wall_time_s", "sim_s_per_wall_s", "run_id")


def _tables(cfg):
    r = simulate(cfg)
    # repr: NaN (a metric this run has none of) equals itself
    summary = {k: repr(v) for k, v in r.summary.to_pylist()[0].items() if k not in WALL}
    return summary, r.requests.to_pylist()


def test_rt_sysctls_act_on_rt_tasks_only():
    """Apache and wrk are SCHED_OTHER: with no RT task to throttle or
    rotate, the report's sched_rt_runtime_us and sched_rr_timeslice_ms
    values leave every number as the defaults give it; the same runtime
    throttles the run once its threads are SCHED_RR."""
    base = _tables(_apache())
    for knob in ("scheduler.sched_rt_runtime_us=100000", "scheduler.sched_rr_timeslice_ms=10"):
        assert _tables(_apache(knob)) == base, knob
    rr = _summary(_apache("scheduler.task_policy=rr"))
    throttled = _summary(_apache("scheduler.task_policy=rr", "scheduler.sched_rt_runtime_us=100000"))
    assert throttled["throughput_rps"] < 0.5 * rr["throughput_rps"]
