"""The request path through a function's pod (sim/workloads/request_path.py):
``workload.request_path: knative`` sends each request through Knative's
queue-proxy sidecar and back; ``direct`` (the default) is unchanged."""
import hashlib
import json

import pytest

from sim import simulate
from sim.api import build
from sim.engine import s_to_ns
from sim.workloads.request_path import PROXY_IN_US, PROXY_OUT_US
from sim.workloads.trace import make_trace
from tests.simcfg import DEFAULT_COSTS, make_cfg

PROXY_S = (PROXY_IN_US + PROXY_OUT_US) * 1e-6
KUBEPODS = "kubepods.slice/kubepods-burstable.slice"


def _trace_workload(path="knative", parent=KUBEPODS, **kw):
    return {"name": "trace", "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
            "parent_cgroup": parent, "trace_file": None, "request_path": path, **kw}


def _resctl(path="knative", **kw):
    return {"name": "resctl", "functions": 1, "service": "det", "mean_service_s": 0.01,
            "service_sigma": 0.33, "threads_per_request": 1, "working_set_kb": 256,
            "cgroup_weight": 100, "nice": 0, "parent_cgroup": KUBEPODS,
            "request_path": path, **kw}


def _spaced(n=20, gap_s=0.05, demand_s=0.002, threads=1, function="f"):
    """``n`` requests far enough apart that each finds the host idle."""
    return make_trace([function] * n, [0.01 + gap_s * i for i in range(n)], [demand_s] * n,
                      [threads] * n)


def _run(trace, cores=1, calibration=None, path="knative", **kw):
    cfg = make_cfg(_trace_workload(path, **kw), cores=cores, duration_s=1.5, warmup_s=0.0,
                   **({} if calibration is None else {"calibration": calibration}))
    return simulate(cfg, trace=trace)


def test_alone_a_request_takes_proxy_in_plus_demand_plus_proxy_out():
    trace = _spaced()
    ideal = _run(trace)
    lat = [r["latency_s"] for r in ideal.requests.to_pylist()]
    assert len(lat) == 20
    # no switch costs: exactly the three hops' CPU, one after the other
    assert lat == pytest.approx([PROXY_S + 0.002] * 20, abs=1e-9)
    # with switch costs every hop also waits for its switch
    costly = _run(trace, calibration=DEFAULT_COSTS)
    assert all(r["latency_s"] > PROXY_S + 0.002 for r in costly.requests.to_pylist())
    direct = _run(trace, path="direct")
    assert [r["latency_s"] for r in direct.requests.to_pylist()] == \
        pytest.approx([0.002] * 20, abs=1e-9)


def test_switches_per_request_on_an_idle_cpu_count_the_hops():
    """One CPU, one request at a time.  direct: idle -> worker -> idle, 2
    switches.  knative: idle -> queue-proxy (in), queue-proxy -> user
    container, user container -> queue-proxy (out), queue-proxy -> idle: 4,
    one per hop plus the return to idle."""
    trace = _spaced()
    for path, per_request in (("direct", 2), ("knative", 4)):
        s = _run(trace, path=path, calibration=DEFAULT_COSTS).summary.to_pylist()[0]
        assert s["n_requests"] == 20
        assert s["ctx_switches"] == per_request * 20, path


def test_fork_join_behind_the_proxy_waits_for_the_last_thread():
    """Two 10 ms threads run side by side behind queue-proxy.  They are
    forked while the queue-proxy thread still runs (it hands the request
    over, then sleeps), so fork balancing sees its CPU busy: with two idle
    CPUs besides it, each thread gets one."""
    trace = make_trace(["f"], [0.5], [0.02], [2])
    res = _run(trace, cores=3)
    assert [r["latency_s"] for r in res.requests.to_pylist()] == \
        pytest.approx([PROXY_S + 0.01], abs=1e-9)


def test_pod_cgroup_holds_queue_proxy_and_user_container(monkeypatch):
    import sim.api
    from sim.machine import Machine
    trace = make_trace(["a", "b", "a"], [0.0, 0.0, 0.5], [0.01] * 3, [1] * 3)
    placed = set()

    class Recording(Machine):
        def new_task(self, name, tg, *args, **kw):
            placed.add((name, tg.name))
            return super().new_task(name, tg, *args, **kw)
    monkeypatch.setattr(sim.api, "Machine", Recording)
    engine, machine, recorder, wl = build(make_cfg(_trace_workload(), cores=2,
                                                   duration_s=1.0, warmup_s=0.0), trace)
    wl.start()
    engine.run(s_to_ns(1.0))
    for pod in ("a", "b"):
        base = f"/{KUBEPODS}/{pod}"
        assert machine.groups[base].depth == 3       # kubepods / burstable / pod
        for container in ("queue-proxy", "user-container"):
            assert machine.groups[f"{base}/{container}"].parent is machine.groups[base]
            assert machine.groups[f"{base}/{container}"].depth == 4
        assert sorted(c.name for c in machine.groups[base].children) == \
            [f"{base}/queue-proxy", f"{base}/user-container"]
        assert placed >= {(f"{pod}/queue-proxy", f"{base}/queue-proxy"),
                          (pod, f"{base}/user-container")}
    # no thread runs in the pod cgroup itself; requests name the pod
    assert not any(tg in (f"/{KUBEPODS}/a", f"/{KUBEPODS}/b") for _, tg in placed)
    res = _run(trace, cores=2)
    assert sorted(r["cgroup"] for r in res.requests.to_pylist()) == \
        [f"/{KUBEPODS}/a", f"/{KUBEPODS}/a", f"/{KUBEPODS}/b"]


def test_switches_between_pods_walk_the_container_level_too():
    """A switch from one pod's container to another's walks 4 levels below
    their common ancestor (container and pod on each side); direct walks 2."""
    from sim.machine import levels_walked
    engine, machine, recorder, wl = build(make_cfg(_trace_workload(), duration_s=1.0),
                                          make_trace(["a", "b"], [0.0, 0.0], [0.01] * 2,
                                                     [1] * 2))
    a = machine.new_task("a", machine.groups[f"/{KUBEPODS}/a/user-container"], 0, 1, 0, wl)
    b = machine.new_task("b", machine.groups[f"/{KUBEPODS}/b/queue-proxy"], 0, 1, 0, wl)
    qa = machine.new_task("a", machine.groups[f"/{KUBEPODS}/a/queue-proxy"], 0, 1, 0, wl)
    for t in (a, b, qa):
        machine.policy.set_task_rq(t, 0)
    assert levels_walked(a.se, b.se) == 4
    assert levels_walked(a.se, qa.se) == 2      # within the pod


def test_queue_proxy_threads_are_reused_and_capped_at_the_cpus():
    """Requests one after another reuse one queue-proxy thread; a burst of
    simultaneous requests on one CPU (GOMAXPROCS = 1) queues in the pod."""
    engine, machine, recorder, wl = build(make_cfg(_trace_workload(), duration_s=1.0),
                                          _spaced(n=10))
    wl.start()
    engine.run(s_to_ns(1.0))
    pod = next(iter(wl.path.pods.values()))
    assert pod.proxy.nr_threads == 1 and len(pod.proxy.idle) == 1
    burst = make_trace(["f"] * 5, [0.1] * 5, [0.001] * 5, [1] * 5)
    res = _run(burst)
    lat = sorted(r["latency_s"] for r in res.requests.to_pylist())
    assert len(lat) == 5
    assert lat[-1] == pytest.approx(5 * (PROXY_S + 0.001), abs=1e-9)   # all CPU, no idling
    engine, machine, recorder, wl = build(make_cfg(_trace_workload(), duration_s=1.0), burst)
    wl.start()
    engine.run(s_to_ns(1.0))
    pod = next(iter(wl.path.pods.values()))
    assert pod.proxy.nr_threads == 1 and not pod.proxy.backlog and not pod.proxy.jobs


def test_resctl_closed_loop_through_the_pod():
    """concurrency pinned at 1 on one CPU: each 10 ms request takes the two
    proxy hops on top, and the closed loop still admits the next one."""
    res = simulate(make_cfg(_resctl(concurrency_max=1), duration_s=2.0, warmup_s=0.5))
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    assert len(lat) > 100
    assert lat == pytest.approx([0.01 + PROXY_S] * len(lat), abs=1e-9)


def _digest(result) -> str:
    s = result.summary.drop_columns(["run_id", "wall_time_s", "sim_s_per_wall_s"])
    h = hashlib.sha256()
    for t in (s, result.requests, result.intervals):
        h.update(json.dumps(t.to_pydict(), default=str, sort_keys=True).encode())
    return h.hexdigest()


def test_direct_is_the_default_and_changes_nothing():
    wl = {"name": "poisson", "functions": 3, "rate_rps": 50.0, "service": "exp",
          "mean_service_s": 0.005, "service_sigma": 1.0, "threads_per_request": 2,
          "working_set_kb": 256, "cgroup_weight": 100, "nice": 0, "parent_cgroup": "faas.slice"}
    cfg = make_cfg(wl, cores=2, duration_s=2.0, warmup_s=0.5, calibration=DEFAULT_COSTS)
    explicit = make_cfg(dict(wl, request_path="direct"), cores=2, duration_s=2.0,
                        warmup_s=0.5, calibration=DEFAULT_COSTS)
    assert _digest(simulate(cfg)) == _digest(simulate(explicit))
    knative = make_cfg(dict(wl, request_path="knative"), cores=2, duration_s=2.0,
                       warmup_s=0.5, calibration=DEFAULT_COSTS)
    assert _digest(simulate(knative)) != _digest(simulate(cfg))


def test_unknown_request_path_is_refused():
    with pytest.raises(ValueError, match="request_path"):
        simulate(make_cfg(_resctl(path="istio"), duration_s=1.0, warmup_s=0.0))


def test_config_validation_names_the_key():
    from scenarios.config import compose
    from scenarios.validate import ConfigError
    cfg = compose(["workload=azure2021", "workload.request_path=knative"])
    assert cfg.workload.request_path == "knative"
    assert compose(["workload=resctl"]).workload.request_path == "direct"
    with pytest.raises(ConfigError, match="workload.request_path"):
        compose(["workload=resctl", "workload.request_path=istio"])
    with pytest.raises(ConfigError, match="backend=real runs its native worker"):
        compose(["workload=azure2021", "backend=real", "workload.request_path=knative"])


# ``worker``: the real backend's native worker, a dispatcher thread per cgroup
# (dispatch_us per request + thread_us per thread it creates)

def _worker(trace, calibration=None, cores=1, **kw):
    return _run(trace, cores=cores, calibration=calibration, path="worker", parent="faas", **kw)


def test_worker_path_alone_takes_dispatch_plus_demand():
    lat = [r["latency_s"] for r in _worker(_spaced(), dispatch_us=30.0, thread_us=20.0)
           .requests.to_pylist()]
    assert lat == pytest.approx([50e-6 + 0.002] * 20, abs=1e-9)


def test_worker_path_dispatch_scales_with_threads_and_queues_in_the_pipe():
    # two 2-thread requests at once on two CPUs: the second is read after the
    # first's two threads were created (2 x 50 us), then waits 2 x 50 us more
    trace = make_trace(["f", "f"], [0.01, 0.01], [0.004, 0.004], [2, 2])
    rows = sorted(r["latency_s"] for r in _worker(trace, cores=2, dispatch_us=0.0,
                                                  thread_us=50.0).requests.to_pylist())
    assert rows[0] >= 100e-6 + 0.002 - 1e-9
    assert rows[1] >= 200e-6 + 0.002 - 1e-9


def test_worker_path_adds_one_switch_out_per_request():
    trace = _spaced()
    outs = {p: _run(trace, path=p, parent="faas", dispatch_us=50.0).summary
            .column("switch_out_rate_per_s")[0].as_py() for p in ("direct", "worker")}
    # 20 requests in 1.5 s: direct switches out of each thread once (it
    # exits), worker also out of the dispatcher when it blocks again
    assert outs["direct"] * 1.5 == pytest.approx(20)
    assert outs["worker"] * 1.5 == pytest.approx(40)


def test_worker_dispatch_defaults_to_the_calibration_profile():
    ideal = {k: 0 for k in DEFAULT_COSTS} | {"name": "ideal", "cache_line_bytes": 64,
                                              "cache_decay_ns": 1, "worker_dispatch_us": 150.0,
                                              "worker_thread_us": 50.0}
    lat = [r["latency_s"] for r in _worker(_spaced(), calibration=ideal).requests.to_pylist()]
    assert lat == pytest.approx([200e-6 + 0.002] * 20, abs=1e-9)
    # a workload key wins over the profile
    lat = [r["latency_s"] for r in _worker(_spaced(), calibration=ideal, thread_us=0.0)
           .requests.to_pylist()]
    assert lat == pytest.approx([150e-6 + 0.002] * 20, abs=1e-9)
