"""The request path through a function's pod (sim/workloads/request_path.py):
``workload.request_path: knative`` sends each request through Knative's
queue-proxy sidecar and back; ``direct`` (the default) is unchanged."""
import hashlib
import json

import math

import pytest

from scenarios.simulate import build, simulate
from sim.engine import s_to_ns
from sim.workloads.hashd import SYSCALL_NS
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
    import backends.simhost
    from sim.machine import Machine
    trace = make_trace(["a", "b", "a"], [0.0, 0.0, 0.5], [0.01] * 3, [1] * 3)
    placed = set()

    class Recording(Machine):
        def new_task(self, name, tg, *args, **kw):
            placed.add((name, tg.name))
            return super().new_task(name, tg, *args, **kw)
    monkeypatch.setattr(backends.simhost, "Machine", Recording)
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


def _worker_host(start_us=4.0, exit_us=10.0, factor=2.0, thread_factor=1.0, decay_ms=5.0, **kw):
    """The ideal profile with the worker's own host costs (dispatch 20 us,
    5 us per thread created)."""
    return {k: 0 for k in DEFAULT_COSTS} | {
        "name": "ideal", "cache_line_bytes": 64, "cache_decay_ns": 1,
        "worker_dispatch_us": 20.0, "worker_thread_us": 5.0,
        "worker_thread_start_us": start_us, "worker_thread_exit_us": exit_us,
        "worker_cold_factor": factor, "worker_cold_thread_factor": thread_factor,
        "worker_cold_decay_ms": decay_ms} | kw


def _cgroup_cpu_s(res) -> float:
    rows = [r for r in res.intervals.to_pylist() if r["cgroup"] == "/faas/f"]
    return sum(r["usage_s"] for r in rows)


def test_worker_threads_start_before_and_exit_after_their_share():
    # no cold part: each request costs the dispatcher 25 us, its thread 4 us
    # before the share (in the latency) and 10 us after it (not)
    res = _worker(_spaced(), calibration=_worker_host(factor=0.0, thread_factor=0.0))
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    assert lat == pytest.approx([25e-6 + 4e-6 + 0.002] * 20, abs=1e-9)
    assert _cgroup_cpu_s(res) == pytest.approx(20 * (25e-6 + 4e-6 + 0.002 + 10e-6), abs=1e-8)


def test_worker_costs_grow_with_the_time_away_and_not_from_a_backlog():
    # 50 ms apart (10 decay times): every request finds the worker cold,
    # (20 + 5) x 3 for the dispatcher, (4 + 10) x 2 for the thread
    cold = 1 + 2.0 * -math.expm1(-50 / 5.0)
    thread_cold = 1 + 1.0 * -math.expm1(-50 / 5.0)
    res = _worker(_spaced(), calibration=_worker_host())
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    # the first request's dispatcher is new: fully cold
    assert lat[0] == pytest.approx(75e-6 + 8e-6 + 0.002, abs=2e-9)
    assert lat[1:] == pytest.approx([int(25e3 * cold) * 1e-9 + int(4e3 * thread_cold) * 1e-9
                                     + 0.002] * 19, abs=2e-9)
    # two requests at once: the second is read from the pipe right after
    # the first, warm (25 us), and its thread starts warm (4 us)
    both = make_trace(["f", "f"], [0.01, 0.01], [0.002, 0.002], [1, 1])
    lat = sorted(r["latency_s"] for r in _worker(both, cores=2,
                                                calibration=_worker_host()).requests.to_pylist())
    assert lat[0] == pytest.approx(75e-6 + 8e-6 + 0.002, abs=2e-9)
    assert lat[1] == pytest.approx(75e-6 + 25e-6 + 4e-6 + 0.002, abs=2e-9)


def test_worker_host_costs_switch_off_to_the_dispatch_alone():
    trace = _spaced()
    off = _worker(trace, calibration=_worker_host(worker_host_costs=False))
    plain = {k: v for k, v in _worker_host().items()
             if not k.startswith(("worker_thread_start", "worker_thread_exit", "worker_cold"))}
    assert _digest(off) == _digest(_worker(trace, calibration=plain))
    assert _digest(off) != _digest(_worker(trace, calibration=_worker_host()))


# ``bentoml``: knative's pod running a BentoML service (API server, the
# runner's batching dispatcher, PyTorch's intra-op threads)

from sim.workloads.request_path import API_OUT_US, API_US, BATCH_US  # noqa: E402


def _bento_run(trace, cores=1, calibration=None, **kw):
    return _run(trace, cores=cores, calibration=calibration, path="bentoml", **kw)


def _bento_built(trace, cores=4, duration_s=2.0, **kw):
    engine, machine, recorder, wl = build(make_cfg(_trace_workload("bentoml", **kw),
                                                   cores=cores, duration_s=duration_s,
                                                   warmup_s=0.0), trace)
    wl.start()
    engine.run(s_to_ns(duration_s))
    return wl


@pytest.mark.parametrize("torch_threads", [1, 2])
def test_bentoml_every_request_completes_once_and_no_faster_than_its_stages(torch_threads):
    """Four pods on four CPUs, 300 requests in a second: each ends once, and
    no sooner than its stages' CPU plus its demand over the torch threads
    (a batch ends when all of it does)."""
    import numpy as np
    rng = np.random.default_rng(7)
    n = 300
    functions = [f"f{i}" for i in rng.integers(0, 4, n)]
    arrivals = np.sort(rng.uniform(0.0, 1.0, n)).tolist()
    demands = rng.lognormal(np.log(0.004), 0.8, n).clip(1e-5, 0.05).tolist()
    res = _bento_run(make_trace(functions, arrivals, demands, [1] * n), cores=4,
                     calibration=DEFAULT_COSTS, torch_threads=torch_threads, max_batch_size=4)
    rows = res.requests.to_pylist()
    assert len(rows) == n
    want = sorted(zip(functions, arrivals))
    got = sorted((r["function"], r["arrival_s"]) for r in rows)
    assert [f for f, _ in got] == [f for f, _ in want]
    assert [a for _, a in got] == pytest.approx([a for _, a in want], abs=1e-9)
    assert not any(r["dropped"] for r in rows)
    stages_s = (PROXY_IN_US + API_US + 2 * BATCH_US + API_OUT_US + PROXY_OUT_US) * 1e-6
    assert all(r["latency_s"] >= stages_s + r["cpu_demand_s"] / torch_threads - 1e-9
               for r in rows)


def test_bentoml_alone_a_request_takes_every_stage_and_its_demand_split():
    """An idle host with a CPU for each thread and no switch costs: the
    stages run one after another (queue-proxy in, API server, a runner pass,
    the batch over torch_threads, a runner pass, API server, queue-proxy
    out), the demand split evenly over the three torch threads."""
    stages_s = (PROXY_IN_US + API_US + 2 * BATCH_US + API_OUT_US + PROXY_OUT_US) * 1e-6
    lat = [r["latency_s"] for r in _bento_run(_spaced(demand_s=0.003), cores=5,
                                              torch_threads=3).requests.to_pylist()]
    assert lat == pytest.approx([stages_s + 0.001] * 20, abs=1e-9)
    # the workload's keys replace the defaults
    lat = [r["latency_s"] for r in _bento_run(_spaced(demand_s=0.003), cores=5, torch_threads=1,
                                              api_us=500.0, api_out_us=0.0, batch_us=10.0)
           .requests.to_pylist()]
    assert lat == pytest.approx([(PROXY_IN_US + PROXY_OUT_US + 520.0) * 1e-6 + 0.003] * 20,
                                abs=1e-9)


def test_bentoml_batches_requests_that_arrive_together():
    """Requests reaching the runner together go to the model as one batch
    (at most max_batch_size); those arriving while a batch runs wait for it
    and go together next."""
    burst = make_trace(["f"] * 12, [0.1] * 12, [0.01] * 12, [1] * 12)
    runner = next(iter(_bento_built(burst, cores=16, max_latency_ms=1e6, torch_threads=2)
                       .path.pods.values())).runner
    assert runner.batches == 1
    assert not runner.waiting and runner.batch is None
    runner = next(iter(_bento_built(burst, cores=16, max_latency_ms=1e6, torch_threads=2,
                                    max_batch_size=5).path.pods.values())).runner
    assert runner.batches == 3
    # one request, then six more during its 25 ms inference
    trickle = make_trace(["f"] * 7, [0.1] + [0.1 + 0.003 * i for i in range(1, 7)],
                         [0.05] * 7, [1] * 7)
    pod = next(iter(_bento_built(trickle, cores=8, torch_threads=2).path.pods.values()))
    assert pod.runner.batches == 2
    assert len(pod.runner.threads) == 2          # the model's threads are reused
    assert pod.api.nr_threads <= 8 and not pod.api.jobs
    rows = _bento_run(trickle, cores=8, torch_threads=2).requests.to_pylist()
    assert len(rows) == 7 and not any(r["dropped"] for r in rows)


def test_bentoml_cancels_requests_that_waited_max_latency():
    burst = make_trace(["f"] * 12, [0.1] * 12, [0.05] * 12, [1] * 12)
    rows = _bento_run(burst, cores=2, torch_threads=1, max_latency_ms=60.0).requests.to_pylist()
    assert len(rows) == 12
    dropped = [r for r in rows if r["dropped"]]
    assert 0 < len(dropped) < 12
    served = [r["latency_s"] for r in rows if not r["dropped"]]
    assert all(lat >= 0.05 for lat in served)


def test_bentoml_switches_more_per_request_than_knative():
    trace = make_trace(["a", "b"] * 40, [0.01 + 0.012 * i for i in range(80)], [0.004] * 80,
                       [1] * 80)
    switches = {}
    for path in ("knative", "bentoml"):
        s = _run(trace, cores=2, path=path, calibration=DEFAULT_COSTS).summary.to_pylist()[0]
        assert s["n_requests"] == 80, path
        switches[path] = s["ctx_switches"] / s["n_requests"]
    # knative: 4 a request alone; bentoml adds the API server twice, two
    # runner passes and the torch threads
    assert switches["bentoml"] > switches["knative"] + 4


def test_bentoml_config_keys_are_checked():
    from scenarios.config import compose
    from scenarios.validate import ConfigError
    cfg = compose(["workload=azure2019", "workload.request_path=bentoml",
                   "workload.torch_threads=4"])
    assert cfg.workload.request_path == "bentoml" and cfg.workload.torch_threads == 4
    for bad in ("max_batch_size=0", "torch_threads=0", "api_workers=0", "api_us=-1",
                "max_latency_ms=0"):
        with pytest.raises(ConfigError, match=f"workload.{bad.split('=')[0]}"):
            compose(["workload=azure2019", "workload.request_path=bentoml", f"workload.{bad}"])
    with pytest.raises(ConfigError, match="backend=real runs its native worker"):
        compose(["workload=azure2021", "backend=real", "workload.request_path=bentoml"])


# ``rdhashd``: resctl-demo's rd-hashd (sim/workloads/hashd.py): a dispatch
# thread, a LIFO pool of reused workers, three sleeps per request

def _hashd(trace, cores=1, calibration=None, **kw):
    return _run(trace, cores=cores, calibration=calibration, path="rdhashd", parent="faas", **kw)


def test_rdhashd_alone_a_request_takes_dispatch_sleeps_demand_and_completion():
    """No switch costs, one request at a time: the dispatcher's CPU at the
    arrival and at the completion, the demand, the two nanosleep re-entries
    between sleeps (SYSCALL_NS each, and one after the last) and the
    request's sleep (three equal thirds of a clamped-normal draw)."""
    res = _hashd(_spaced(), dispatch_us=30.0, sleep_mean_s=0.01)
    lat = [r["latency_s"] for r in res.requests.to_pylist()]
    assert len(lat) == 20
    fixed = 2 * 30e-6 + 0.002 + 3 * SYSCALL_NS * 1e-9
    sleeps = [x - fixed for x in lat]
    # ClampedNormal(10 ms, 3.3 ms, 0, 20 ms), in ns thirds
    assert all(0.0 <= s <= 0.020 + 3e-9 for s in sleeps)
    assert 0.007 < sum(sleeps) / len(sleeps) < 0.013
    assert len(set(round(s, 9) for s in sleeps)) > 10      # drawn per request
    # without the sleeps: exactly the two dispatches and the demand
    flat = _hashd(_spaced(), dispatch_us=30.0, sleep_mean_s=0.0)
    assert [r["latency_s"] for r in flat.requests.to_pylist()] == \
        pytest.approx([2 * 30e-6 + 0.002] * 20, abs=1e-9)


def test_rdhashd_switches_per_request_count_every_wake_up():
    """One CPU, one request at a time, switches counted as in the knative
    test (to idle too): idle -> dispatcher (arrival) -> worker -> idle
    (sleep) -> worker -> idle (sleep) -> worker -> idle (sleep) -> worker ->
    dispatcher (completion) -> idle: 10 per request; without the sleeps
    idle -> dispatcher -> worker -> dispatcher -> idle: 4."""
    trace = _spaced()
    for sleep_mean_s, per_request in ((0.01, 10), (0.0, 4)):
        s = _hashd(trace, calibration=DEFAULT_COSTS, sleep_mean_s=sleep_mean_s) \
            .summary.to_pylist()[0]
        assert s["n_requests"] == 20
        assert s["ctx_switches"] == per_request * 20, sleep_mean_s


def test_rdhashd_workers_are_reused_most_recently_idle_first():
    """Requests one after another reuse one worker; five at once need five
    workers, after which the pool serves later requests from them, the last
    to go idle first."""
    burst = make_trace(["f"] * 5 + ["f"], [0.1] * 5 + [0.5], [0.001] * 6, [1] * 6)
    cfg = make_cfg(_trace_workload("rdhashd", parent="faas", sleep_mean_s=0.0),
                   cores=2, duration_s=1.0, warmup_s=0.0)
    engine, machine, recorder, wl = build(cfg, burst)
    wl.start()
    engine.run(s_to_ns(0.4))
    fn = next(iter(wl.path.functions.values()))
    assert fn.spawned == 5 and len(fn.idle) == 5
    assert all(w.owner_priv is None for w in fn.idle)      # no part left in hand
    last_idle = fn.idle[-1]
    engine.run(s_to_ns(0.6))
    assert fn.spawned == 5 and fn.idle[-1] is last_idle    # it served the 6th request
    assert recorder.rows and len(recorder.rows) == 6


def test_rdhashd_closed_loop_admits_from_the_dispatcher():
    """resctl with concurrency pinned at 1 on one CPU and no sleeps: the
    dispatcher handles the completion and issues the next request in the
    same burst, as launch_hashers does, so each request costs the worker's
    hand-off, its return to the dispatcher, and nothing more: 2 switches."""
    res = simulate(make_cfg(_resctl("rdhashd", concurrency_max=1, parent_cgroup="faas",
                                    sleep_mean_s=0.0, dispatch_us=20.0),
                            duration_s=2.0, warmup_s=0.5, calibration=DEFAULT_COSTS))
    s = res.summary.to_pylist()[0]
    n = s["n_requests"]
    assert n > 100
    assert s["ctx_switches"] / n == pytest.approx(2.0, rel=0.02)


def test_rdhashd_config_keys_are_checked():
    from scenarios.config import compose
    from scenarios.validate import ConfigError
    cfg = compose(["workload=resctl", "workload.request_path=rdhashd"])
    assert cfg.workload.sleep_mean_s is None
    for key in ("sleep_mean_s", "sleep_stdev_ratio", "dispatch_us"):
        with pytest.raises(ConfigError, match=f"workload.{key}"):
            compose(["workload=resctl", "workload.request_path=rdhashd", f"workload.{key}=-1"])
    with pytest.raises(ConfigError, match="rdhashd are simulated"):
        compose(["workload=resctl", "backend=real", "workload.request_path=rdhashd"])
