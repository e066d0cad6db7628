"""Load-generator statistics and replay loop (no root, no processes), and
the poisson trace the real backend replays (same requests as the simulator)."""
import math
import time

import numpy as np
import pytest
import pyarrow.parquet as pq
from omegaconf import OmegaConf

from backends.real.loadgen import Timer, lateness_stats, lateness_verdict, replay
from backends.real.trace import replayable, trace_for_real
from backends.real.workers import Done, parse_line
from sim.workloads.trace import read_trace


def test_lateness_statistics():
    x = np.arange(1, 101) * 1e-6        # 1..100 us
    s = lateness_stats(x)
    assert s["p50"] == pytest.approx(50.5e-6) and s["p99"] == pytest.approx(99.01e-6)
    assert s["max"] == pytest.approx(100e-6) and s["mean"] == pytest.approx(50.5e-6)
    assert all(math.isnan(v) for v in lateness_stats([]).values())


def test_lateness_verdict():
    ok, why = lateness_verdict({"p50": 1e-5, "p99": 1e-4, "max": 1e-3, "mean": 2e-5}, 2e-3)
    assert ok and why == ""
    ok, why = lateness_verdict({"p50": 1e-3, "p99": 5e-3, "max": 9e-3, "mean": 2e-3}, 2e-3)
    assert not ok and "p99 5.000 ms exceeds backend.max_lateness_p99_s = 2.000 ms" in why
    assert lateness_verdict({"p99": 1.0}, None) == (True, "")


class FakeWorker:
    """Answers each request at once, stamping it with its dispatch time."""

    def __init__(self, name):
        self.name, self.sent, self._out = name, [], []

    def send(self, data):
        now = time.monotonic_ns()
        self.sent.append((now, data))
        _, rid, demand, _ = data.split()
        self._out.append(b"D %d %d %d %d" % (int(rid), now, now + int(demand), int(demand)))

    def read_lines(self):
        out, self._out = self._out, []
        return out


def test_replay_dispatches_on_time_in_order_and_runs_timers():
    arrival = np.array([0, 2, 2, 30, 55], dtype=np.int64) * 1_000_000   # ms
    workers = [FakeWorker("a"), FakeWorker("b")]
    fired = []
    done = []
    t0 = time.monotonic_ns() + 5_000_000
    res = replay(arrival, np.array([0, 1, 0, 1, 0]), np.full(5, 1000), np.ones(5, np.int64),
                 workers, t0, 60_000_000,
                 [Timer(0, None, lambda now: fired.append(("start", now))),
                  Timer(20_000_000, 20_000_000, lambda now: fired.append(("tick", now)))],
                 on_done=lambda row, d: done.append(row))
    assert not res.errors and sorted(done) == [0, 1, 2, 3, 4] and set(res.done) == set(range(5))
    late = (res.dispatch_ns - arrival) / 1e9
    assert (late >= 0).all() and (late < 0.005).all()       # generous: a shared CI host
    assert [d for _, d in workers[0].sent] == [b"R 0 1000 1\n", b"R 2 1000 1\n",
                                               b"R 4 1000 1\n"]
    assert [k for k, _ in fired] == ["start", "tick", "tick"]   # 0, 20, 40 ms; end at 60
    assert fired[1][1] >= 20_000_000 and fired[2][1] >= 40_000_000


def test_replay_reports_worker_errors():
    class Bad(FakeWorker):
        def read_lines(self):
            return [b"E bad request: R"]
    res = replay(np.array([0]), np.array([0]), np.array([5]), np.array([1]), [Bad("x")],
                 time.monotonic_ns(), 1_000_000)
    assert res.errors and set(res.errors) == {"x: bad request: R"}


def _cfg(**w):
    workload = {"name": "poisson", "functions": 3, "rate_rps": 20.0, "service": "exp",
                "mean_service_s": 0.005, "service_sigma": 1.0, "threads_per_request": 2,
                "parent_cgroup": "faas.slice"}
    workload.update(w)
    return {"seed": 4, "duration_s": 3.0, "warmup_s": 0.5, "workload": workload}


def test_poisson_trace_is_the_simulators_requests():
    from scenarios.config import compose
    from scenarios.simulate import simulate
    cfg = compose(["host=this-vm", "scheduler=eevdf", "workload.functions=3",
                   "workload.rate_rps=20", "workload.mean_service_s=0.005",
                   "workload.threads_per_request=2", "seed=4", "duration_s=3",
                   "warmup_s=0.5", "calibration=ideal"])
    trace = trace_for_real(_cfg())
    assert set(trace.column("threads").to_pylist()) == {2}
    assert (np.asarray(trace.column("arrival_s")) < 3.0).all()
    sim = simulate(cfg)
    req = sim.requests.to_pandas()
    t = trace.to_pandas()
    t = t[t.arrival_s >= 0.5]
    # every simulated request is a trace row (same arrival, same demand) and
    # every trace row after warm-up is a simulated request or unfinished
    m = req.merge(t, on=["function", "arrival_s"], how="left")
    assert not m.demand_s.isna().any()
    assert np.allclose(m.cpu_demand_s, m.demand_s, rtol=0, atol=1e-12)
    n_unfinished = sim.summary.column("n_unfinished")[0].as_py()
    assert len(req) + n_unfinished == len(t)


def test_worker_pool_trace_is_the_simulators_requests():
    from scenarios.config import compose
    from scenarios.simulate import simulate
    cfg = compose(["host=this-vm", "scheduler=eevdf", "workload=worker_pool",
                   "workload.workers=2", "workload.capacity=2", "workload.rate_rps=60",
                   "workload.mean_service_s=0.02", "seed=3", "duration_s=3", "warmup_s=0.5",
                   "calibration=ideal"])
    trace = trace_for_real(OmegaConf.to_container(cfg, resolve=True)).to_pandas()
    assert set(trace.function) == {"server"} and set(trace.threads) == {1}
    sim = simulate(cfg)
    req = sim.requests.to_pandas()
    t = trace[trace.arrival_s >= 0.5]
    m = req.merge(t, on=["function", "arrival_s"], how="left")
    assert not m.demand_s.isna().any() and req.dropped.any()
    assert np.allclose(m.cpu_demand_s, m.demand_s, rtol=0, atol=1e-12)
    n_unfinished = sim.summary.column("n_unfinished")[0].as_py()
    assert len(req) + n_unfinished == len(t)


def test_trace_for_real_refuses_what_it_cannot_replay(tmp_path):
    """The refusal lists the workloads whose class has the ``arrivals``
    hook (and a real backend), found from the classes, not a name table."""
    with pytest.raises(ValueError, match="workload=periodic is not supported by backend=real") \
            as info:
        trace_for_real({"seed": 0, "duration_s": 1.0, "workload": {"name": "periodic"}})
    assert "workload=azure2021, workload=poisson, workload=random, workload=webserver, " \
        "workload=worker_pool," in str(info.value)
    assert replayable() == ["azure2021", "poisson", "random", "webserver", "worker_pool"]
    # a closed loop's requests depend on the run: none to draw ahead
    closed = {"seed": 0, "duration_s": 1.0,
              "workload": {"name": "worker_pool", "rate_rps": 1.0, "mean_service_s": 0.01,
                           "workers": 1, "capacity": 1, "clients": 2}}
    with pytest.raises(ValueError, match="workload=worker_pool is not supported"):
        trace_for_real(closed)
    # a trace_file wins over the hook
    path = tmp_path / "t.parquet"
    pq.write_table(trace_for_real(_cfg(functions=1)), path)
    assert trace_for_real(_cfg(trace_file=str(path))).equals(read_trace(path))


def test_parse_line_roundtrip_of_fake_worker():
    w = FakeWorker("a")
    w.send(b"R 9 100 1\n")
    (line,) = w.read_lines()
    d = parse_line(line)
    assert isinstance(d, Done) and d.id == 9 and d.end_ns - d.start_ns == 100


def test_refused_scheduler_message_names_the_override(monkeypatch):
    from backends.real import detect
    from backends.real.run import RealRunError, check_host_scheduler
    monkeypatch.setattr(detect, "has_latency_awareness", lambda layout=None: False)
    monkeypatch.setattr(detect.platform, "release", lambda: "6.18.44-test")
    with pytest.raises(RealRunError) as e:
        check_host_scheduler("cfs")
    msg = str(e.value)
    assert "scheduler=cfs needs a kernel before 6.6; this host runs 6.18.44-test (EEVDF)" in msg
    assert "pass scheduler=eevdf" in msg
    assert check_host_scheduler("eevdf") == "eevdf" and check_host_scheduler("rr") == "eevdf"


STEADY = '''
"""``workload=steady``: one request of ``demand_s`` every ``gap_s``."""
from dataclasses import dataclass

from sim.workloads.base import Workload, WorkloadConfig
from sim.workloads.trace import make_trace


@dataclass
class SteadyConfig(WorkloadConfig):
    gap_s: float = 0.5
    demand_s: float = 0.01


class Steady(Workload):
    CONFIG = SteadyConfig
    REAL_BACKEND = "functions"

    @staticmethod
    def arrivals(cfg, seed, duration_s):
        n = int(duration_s / cfg.gap_s)
        return make_trace(["steady"] * n, [i * cfg.gap_s for i in range(n)],
                          [cfg.demand_s] * n, [1] * n)


WORKLOAD = Steady
'''


def test_a_plugin_workload_with_the_arrivals_hook_is_replayed(tmp_path, monkeypatch):
    """The real backend asks the workload's class for its requests: a
    workload added from a plug-in directory, with no edit elsewhere, is
    replayed and listed."""
    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "steady.py").write_text(STEADY)
    monkeypatch.setenv("COLOSIM_PLUGIN_PATH", str(tmp_path))
    trace = trace_for_real({"seed": 0, "duration_s": 2.0,
                            "workload": {"name": "steady", "gap_s": 0.25}}).to_pandas()
    assert trace.arrival_s.tolist() == [0.25 * i for i in range(8)]
    assert set(trace.function) == {"steady"} and set(trace.demand_s) == {0.01}
    assert "steady" in replayable()
