"""The real backend dispatches on the capability a workload declares
(backends/real/run.py ``capability``) to one runner per capability
(backends/real/runner.py): the runners' up-front checks (no root, no
processes), and (hardware: root, cgroups, gcc) teardown when starting the
workers fails and on SIGTERM during a run."""
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from backends.real import cgroupfs, detect, periodic, run
from backends.real.config import RealBackend
from backends.real.functions import FunctionsRunner, WebserverRunner, WorkerPoolRunner
from backends.real.jobs import JobProc, JobsRunner
from backends.real.memlookup import ContainerProc, MemLookupRunner
from backends.real.periodic import PeriodicRunner
from backends.real.rtapp import RtAppProc, RtAppRunner
from backends.real.loadgen import RequestWorker, Worker
from backends.real.runner import BurstWorker, RealRunError, Runner, RunWorker
from backends.real.workers import WorkerProc
from scenarios.config import compose
from sim.workloads.periodic import PeriodicWorkload
from tests.hardware import alive, cgroups_unavailable

ROOT = str(Path(__file__).resolve().parents[1])

# the workload options shipped in scenarios/conf/workload and how they run here
SHIPPED = {"poisson": FunctionsRunner, "azure2021": FunctionsRunner, "random": FunctionsRunner,
           "worker_pool": WorkerPoolRunner, "periodic": PeriodicRunner,
           "ebizzy": PeriodicRunner, "noisy_jobs": JobsRunner, "memlookup": MemLookupRunner,
           "rtapp": RtAppRunner, "webserver": WebserverRunner, "azure2019": None, "resctl": None,
           "resctl_mix": None, "resctl_parallel": None}
# what a shipped option needs to compose with backend=real and make cgroups
OVERRIDES = {"azure2019": ["workload.request_path=direct"], "noisy_jobs": ["duration_s=30"],
             "rtapp": ["workload.file=scenarios/rtapp/cgroup_weighted.json"]}


def _cfg(*overrides):
    cfg = compose(["host=this-vm", "scheduler=eevdf", "backend=real", "duration_s=2",
                   "warmup_s=0.5", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def _runner(cfg, trace=None):
    return run.runner_for(cfg, run.backend_keys(cfg), trace)


def test_the_backend_keys_are_the_typed_config_with_its_defaults():
    """backend=real's option sets only its name: a composed config and a
    plain dict without backend keys both get RealBackend's defaults, and an
    override reaches the runners typed; a key RealBackend lacks is named."""
    composed = run.backend_keys(_cfg())
    assert composed == run.backend_keys({}) == RealBackend(name="real")
    assert composed.loadgen_rt_priority == 1 and composed.stall_event == "cycle_activity.stalls_mem_any"
    tuned = run.backend_keys(_cfg("backend.spin_us=0", "backend.cpus=0-1"))
    assert (tuned.spin_us, tuned.cpus, tuned.perf) == (0, "0-1", True)
    with pytest.raises(ValueError, match="backend.spin is not a valid key"):
        run.backend_keys({"backend": {"spin": 1}})


@pytest.mark.parametrize("workload", sorted(SHIPPED))
def test_every_shipped_workload_has_its_runner_or_a_refusal_naming_what_runs(workload):
    cfg = _cfg(f"workload={workload}", *OVERRIDES.get(workload, []))
    want = SHIPPED[workload]
    assert run.capability(cfg["workload"]) == next(
        (c for c, r in run.RUNNERS.items() if r is want), None)
    if want is None:
        with pytest.raises(RealRunError) as e:
            _runner(cfg)
        msg = str(e.value)
        assert msg.startswith(f"workload={workload} is not supported by backend=real yet")
        # every runnable workload is named, under what it runs
        for name, runner in SHIPPED.items():
            if runner is not None:
                assert f"workload={name}" in msg, name
        assert "periodic threads (workload=ebizzy, workload=periodic)" in msg
        assert "a function workload with a trace_file" in msg
        return
    if want is RtAppRunner and shutil.which("rt-app") is None:
        pytest.skip("needs rt-app (as root: apt-get install -y rt-app)")
    r = _runner(cfg)
    assert type(r) is want and r.cgroups and len(r.cgroups) == len(set(r.cgroups))


def test_runners_name_the_cgroups_the_simulator_makes():
    r = _runner(_cfg("workload=poisson", "workload.functions=3"))
    # every function, also one that drew no arrival
    assert r.cgroups == ["/faas.slice/func-0", "/faas.slice/func-1", "/faas.slice/func-2"]
    assert r.trace.num_rows > 0 and r.result_trace() is r.trace
    pool = _runner(_cfg("workload=worker_pool"))
    assert pool.cgroups == ["/server"] and pool.trace.num_rows > 0
    assert (pool.rows(2 * 10**9).worker == 0).all()    # the pool serves every row
    closed = _runner(_cfg("workload=worker_pool", "workload.clients=2"))
    assert closed.trace.num_rows == 0 and closed.result_trace() is None
    # the webserver: the same pool, its backlog and accept thread in front
    web = _runner(_cfg("workload=webserver", "workload.workers=3"))
    assert web.cgroups == ["/server"] and web.trace.num_rows > 0
    assert web.worker_mode() == {"pool": (3, 64), "accept": (512, 4, 5_000_000, 10_000, 0)}
    periodic = _runner(_cfg("workload=periodic"))
    assert periodic.host_trace() is None and periodic.cgroups == ["/periodic"]
    ml = _runner(_cfg("workload=memlookup", "workload.containers=2",
                      "workload.partitions=null"))
    assert ml.cgroups == ["/memlookup/c0", "/memlookup/c1"]
    jobs = _runner(_cfg("workload=noisy_jobs"))
    assert jobs.result_trace() is jobs.jobs       # trace.parquet is the job table
    assert set(jobs.names) == set(jobs.jobs.column("job").to_pylist())


def test_rows_are_sorted_by_arrival_and_cut_at_the_end():
    r = _runner(_cfg("workload=poisson", "workload.functions=2"))
    rows = r.rows(10**9)
    assert (np.diff(rows.arrival_ns) >= 0).all() and (rows.arrival_ns < 10**9).all()
    assert [r.names[w] for w in rows.worker] == list(rows.function)
    assert (rows.demand_ns >= 1).all()


def test_dispatch_follows_the_capability_not_the_name(monkeypatch):
    cfg = _cfg("workload=periodic")
    cfg["workload"]["name"] = "my_hog"

    class MyHog(PeriodicWorkload):  # a plug-in that does not declare a capability
        REAL_BACKEND = None
    shipped, hog = run.workload_class, cfg["workload"]
    for module in (run, periodic):
        monkeypatch.setattr(module, "workload_class",
                            lambda w: MyHog if w == "my_hog" or w is hog else shipped(w))
    with pytest.raises(RealRunError, match="workload=my_hog is not supported"):
        _runner(cfg)
    MyHog.REAL_BACKEND = "periodic"  # ... and one that does
    r = _runner(cfg)
    assert type(r) is PeriodicRunner and r.cgroups == ["/my_hog"]
    # a function workload without a capability of its own replays its trace_file
    cfg = _cfg("workload=azure2019", *OVERRIDES["azure2019"])
    cfg["workload"]["trace_file"] = "x.parquet"
    with pytest.raises(RealRunError, match="x.parquet"):
        _runner(cfg)        # a FunctionsRunner, reading the (missing) file


def test_up_front_refusals_are_real_run_errors():
    cfg = _cfg("workload=periodic")
    cfg["workload"]["run_ms"] = 0       # past the validator: the runner still refuses
    with pytest.raises(RealRunError, match="run_ms must be > 0"):
        _runner(cfg)
    cfg = _cfg("workload=memlookup")
    cfg["workload"]["containers"] = 0
    with pytest.raises(RealRunError, match="containers, threads and burst_ms must be >= 1"):
        _runner(cfg)


def test_workers_have_the_declared_interfaces():
    def members(protocol):
        return {n for n, v in vars(protocol).items()
                if inspect.isfunction(v) and not n.startswith("_")}
    assert members(RequestWorker) == {"send"} and members(Worker) == {"read_lines"}
    assert members(BurstWorker) == {"go"} and members(RunWorker) == {"quit", "kill"}
    for cls, protocols in ((WorkerProc, (RunWorker, RequestWorker, BurstWorker)),
                           (JobProc, (RunWorker, RequestWorker)),
                           (ContainerProc, (RunWorker, BurstWorker)),
                           (RtAppProc, (RunWorker,))):
        for p in protocols:
            for name in members(p) | members(Worker):
                assert callable(getattr(cls, name, None)), (cls, name)
        assert "name" in Worker.__annotations__
    for cap, runner in run.RUNNERS.items():
        assert issubclass(runner, Runner) and runner.RUNS, cap
        assert not inspect.isabstract(runner), cap


# --- teardown on every exit path (root, cgroups, gcc) ----------------------------------
def _hardware_reason():
    return cgroups_unavailable() or (
        None if shutil.which("gcc") else "needs gcc to build the native worker")


def _ours(name):
    return [p for p in cgroupfs.find_leftovers() if p.name.startswith(f"colosim-{name}")]


def _two_groups(second_cpuset: str):
    cfg = _cfg("workload=periodic", "backend.cpus=0", "backend.lateness_action=flag",
               f"scheduler={detect.fair_scheduler()}")
    cfg["workload"]["groups"] = [
        {"name": "first", "threads": 1, "run_ms": 5, "sleep_ms": 5},
        {"name": "second", "threads": 1, "run_ms": 5, "sleep_ms": 5, "cpuset": second_cpuset}]
    return cfg


@pytest.mark.hardware
def test_a_failure_while_starting_workers_stops_those_started(monkeypatch):
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    started = []

    class Recorded(WorkerProc):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            started.append(self.pid)
    monkeypatch.setattr(periodic, "WorkerProc", Recorded)
    name = f"rt-{os.getpid()}-setup"
    # the second group's cpuset is outside backend.cpus: refused after the
    # first group's worker is running in its cgroup
    with pytest.raises(RealRunError, match="group second: cpuset 1 is not inside"):
        run.run_real(_two_groups("1"), run_name=name)
    assert len(started) == 1 and not _ours(name)
    time.sleep(0.1)
    assert not alive(started[0])


@pytest.mark.hardware
def test_sigterm_during_a_run_tears_everything_down():
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    name = f"rt-{os.getpid()}-term"
    cfg = _two_groups("0")
    cfg["duration_s"] = 60.0
    code = ("import json, sys; from backends.real.run import run_real; "
            f"run_real(json.loads(sys.argv[1]), run_name={name!r})")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while len(pids) < 2 and time.monotonic() < deadline and proc.poll() is None:
        for top in _ours(name):
            for procs in top.rglob("cgroup.procs"):
                pids |= {int(p) for p in procs.read_text().split()}
        time.sleep(0.2)
    assert len(pids) == 2, proc.stderr.read() if proc.poll() is not None else pids
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM    # it dies of the signal, after teardown
    assert not _ours(name)
    time.sleep(0.1)
    assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("overrides, warned", [
    (["workload=poisson"], True),                               # the default 256 KiB
    (["workload=poisson", "workload.working_set_kb=0"], False),
    (["workload=periodic"], True),
    (["workload=noisy_jobs", "workload.working_set_kb=512"], False),   # memory workers
])
def test_a_simulated_working_set_on_the_spinning_workers_is_warned_about(
        monkeypatch, capsys, overrides, warned):
    """The native workers spin on their CPU clock and walk no memory: a
    working_set_kb the simulator would refill is said to have no
    counterpart, before anything is created (the run stops at the next
    step here: no worker binary)."""
    def no_binary(_):
        raise run.WorkerError("no worker (test)")
    monkeypatch.setattr(run, "worker_binary", no_binary)
    with pytest.raises(RealRunError, match="no worker"):
        run.run_real(_cfg(*overrides), run_name=f"rt-{os.getpid()}-ws")
    err = capsys.readouterr().err
    assert ("workload.working_set_kb=" in err) == warned, err
    if warned:
        assert "simulate this run with workload.working_set_kb=0" in err
