"""The compiled core (sim/compiled.py): built, identical to the Python
sources it is compiled from, and never stale."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.host import plain_config
from scenarios.config import compose
from scenarios.simulate import simulate
from sim import compiled
from sim.sched_class import KernelScheduler
from sim.workloads import workload_class
from tests.simcfg import DEFAULT_COSTS, make_cfg, periodic, poisson

ROOT = Path(__file__).resolve().parent.parent


def test_every_pxd_is_a_compiled_module():
    pxds = {str(p.relative_to(ROOT).with_suffix("")).replace(os.sep, ".")
            for p in ROOT.glob("**/*.pxd") if ".venv" not in p.parts and "build" not in p.parts}
    assert pxds == set(compiled.COMPILED_MODULES)


@pytest.mark.skipif(compiled.pure_python(), reason=f"{compiled.PURE_ENV} is set")
def test_the_core_runs_compiled():
    """make install compiles the core; a build that silently fell back to
    the Python sources would run several times slower."""
    assert [m for m in compiled.COMPILED_MODULES if not compiled.is_compiled(m)] == []


# Scenarios covering every compiled path: each kernel policy (EEVDF and LAGS
# compiled as C subclasses of CFS), SMT, cgroup bandwidth, fork-join.
SCENARIOS = {
    "cfs-smt": make_cfg(poisson(functions=6, rate_rps=60.0, threads_per_request=2),
                        cores=2, threads_per_core=2, duration_s=1.0, warmup_s=0.1,
                        calibration=DEFAULT_COSTS),
    "eevdf": make_cfg(poisson(functions=4, rate_rps=80.0), cores=2, duration_s=1.0,
                      warmup_s=0.1, scheduler={"name": "eevdf"}, calibration=DEFAULT_COSTS),
    "lags": make_cfg(poisson(functions=8, rate_rps=40.0), cores=2, duration_s=1.0,
                     warmup_s=0.1, scheduler={"name": "lags"}, calibration=DEFAULT_COSTS),
    # LAGS's other paths: nested functions next to a plain cgroup, the running
    # load signal, no smoothing, fifo ties, HRTICK
    "lags-options": make_cfg(
        periodic(groups=[{"name": "p/a", "threads": 2, "run_ms": 3.0, "sleep_ms": 2.0},
                         {"name": "p/b", "threads": 1, "run_ms": 7.0, "sleep_ms": 5.0},
                         {"name": "q", "threads": 2, "run_ms": 20.0, "sleep_ms": 0.0}]),
        cores=2, threads_per_core=2, duration_s=1.0, warmup_s=0.1, calibration=DEFAULT_COSTS,
        scheduler={"name": "lags", "latency_aware": "/p,/p/*", "mixed_order": "aware_first",
                   "load_signal": "running", "window_ticks": 1, "tie_break": "fifo",
                   "hrtick": True}),
    "rr": make_cfg(periodic(threads=4, run_ms=2.0, sleep_ms=1.0), cores=2, duration_s=1.0,
                   scheduler={"name": "rr", "policy": "cfs", "task_policy": "rr"}, warmup_s=0.1),
    "quota": make_cfg(periodic(threads=3, run_ms=4.0, sleep_ms=0.0, quota_us=50_000,
                               period_us=100_000), cores=2, duration_s=1.0, warmup_s=0.1),
    # timed sleeps' hrtimers (timer slack, the interrupt on idle and busy
    # CPUs) with fair and RR sleepers beside a hog
    "timers": make_cfg(
        periodic(groups=[{"name": "f", "threads": 2, "run_ms": 0.5, "sleep_ms": 2.0},
                         {"name": "r", "threads": 1, "run_ms": 0.3, "sleep_ms": 1.0,
                          "task_policy": "rr"},
                         {"name": "h", "threads": 1, "run_ms": 50.0, "sleep_ms": 3.0}]),
        cores=2, duration_s=1.0, warmup_s=0.1,
        calibration={**DEFAULT_COSTS, "idle_exit_ns": 30_000, "timer_slack_ns": 50_000,
                     "timer_irq_ns": 13_000}),
    # what else runs on the host: the load generator (SCHED_FIFO, unpinned)
    # on the worker path and per-CPU kernel threads (sim/loadgen.py, kthreads.py)
    "host-tasks": make_cfg(poisson(functions=6, rate_rps=30.0, request_path="worker"),
                           cores=2, duration_s=1.0, warmup_s=0.1, scheduler={"name": "eevdf"},
                           calibration={**DEFAULT_COSTS, "loadgen_dispatch_us": 150.0,
                                        "loadgen_worker_us": 2.0, "loadgen_sample_us": 300.0,
                                        "loadgen_sample_cgroup_us": 30.0,
                                        "kthread_rate_per_s": 200.0,
                                        "kthread_run_us": [2, 4, 6, 10, 20, 60, 300, 2000]}),
    # rd-hashd's dispatch thread, worker pool and sleeps (sim/workloads/hashd.py)
    "rdhashd": make_cfg(poisson(functions=4, rate_rps=50.0, request_path="rdhashd",
                                threads_per_request=2, sleep_mean_s=0.002),
                        cores=2, duration_s=1.0, warmup_s=0.1, calibration=DEFAULT_COSTS),
    # tasks reading their own CPU clock: EEVDF ends their slices on time
    "cputime-poll": make_cfg(poisson(functions=4, rate_rps=60.0, request_path="worker",
                                     cputime_poll=True),
                             cores=2, duration_s=1.0, warmup_s=0.1, scheduler={"name": "eevdf"}),
    # an OpenMP team's threads leaving their spins (Machine.replace_burst)
    # on SMT siblings shared with other pods' teams (sim/workloads/openmp.py)
    "openmp": make_cfg(poisson(functions=3, rate_rps=20.0, mean_service_s=0.02,
                               request_path="bentoml", parent_cgroup="kubepods",
                               openmp={"enabled": True, "regions": 6, "spin_count": 20_000}),
                       cores=2, threads_per_core=2, duration_s=1.0, warmup_s=0.1,
                       calibration=DEFAULT_COSTS),
}
# the balancer's opt-in pieces (tests/test_pelt_propagate.py): PELT's
# propagation through function groups and an idle CPU's half of the queue
SCENARIOS["balance-options"] = make_cfg(
    poisson(functions=6, rate_rps=70.0, request_path="worker"), cores=2, duration_s=1.0,
    warmup_s=0.1, calibration=DEFAULT_COSTS,
    scheduler={"name": "eevdf", "pelt_propagate": True, "migrate_task_half": True})
# EEVDF as Linux 6.6 had it (no PREEMPT_SHORT, no delayed dequeue)
SCENARIOS["eevdf66"] = make_cfg(poisson(functions=4, rate_rps=80.0), cores=2, duration_s=1.0,
                                warmup_s=0.1, calibration=DEFAULT_COSTS,
                                scheduler={"name": "eevdf66", "policy": "eevdf", "kernel": "6.6",
                                           "preempt_short": False, "place_rel_deadline": False,
                                           "delay_dequeue": False, "delay_zero": False})
# Every controller (policies/control), composed as a user would, with its
# intervals shortened so it acts within a few simulated seconds, and the
# summary column that shows it acted.  Trace-driven ones replay the trace
# their seed generates, as `colosim run` does.
_EBIZZY = ["workload=ebizzy", "host=this-vm", "duration_s=3", "warmup_s=0.5"]
_NOISY = ["experiment=noisy_scenarios", "workload.scenario=exceeding_demand", "duration_s=20"]
CONTROLLERS = {
    "static": (["workload=poisson", "workload.functions=4", "workload.rate_rps=40",
                "controller.quota_us=5000", "duration_s=1", "warmup_s=0.1"], "nr_throttled"),
    "catcloud": (_EBIZZY, "catcloud_cpu_max_writes"),
    "vpa": (_EBIZZY + ["controller.interval_s=0.1", "controller.recommender_interval_s=0.5",
                       "controller.update_interval_s=1"], "vpa_target_mcpu_mean"),
    "holt_winters": (_EBIZZY + ["controller.interval_s=0.05", "controller.recommend_interval_s=0.6",
                                "controller.warmup_s=1.2", "controller.history_s=1.2"],
                     "holt_winters_recommendations"),
    "lags_static": (["workload=azure2021", "workload.functions=24", "host=e5-2430l",
                     "controller.interval_s=0.5", "controller.min_requests=5", "duration_s=3",
                     "warmup_s=0.5"], "lags_static_rr_functions"),
    "least_loaded": (_NOISY, "least_loaded_admitted"),
    "dynamic_priority": (_NOISY + ["controller.warmup_s=0.5", "controller.probe_s=2"],
                         "dynamic_priority_allocations"),
}
# the schedule trace (sim/tracing.py) of a run with throttling, one with SMT
# and one with host tasks
SCENARIOS["quota"]["trace"] = SCENARIOS["cfs-smt"]["trace"] = {"name": "sched"}
SCENARIOS["host-tasks"]["trace"] = {"name": "sched"}
_DUMP = """
import json, sys
from scenarios.simulate import simulate
from sim import compiled
from omegaconf import OmegaConf
from scenarios.runner import replayed_trace
cfgs, traced = json.load(sys.stdin)
out = {"compiled": [m for m in compiled.COMPILED_MODULES if compiled.is_compiled(m)]}
for name, cfg in cfgs.items():
    r = simulate(cfg, trace=replayed_trace(OmegaConf.create(cfg)) if name in traced else None)
    s = r.summary.to_pylist()[0]
    for measured in ("wall_time_s", "sim_s_per_wall_s", "run_id"):
        s.pop(measured)
    out[name] = {"summary": s, "requests": r.requests.to_pylist(),
                 "intervals": r.intervals.to_pylist(),
                 "sched": r.extra["sched"].to_pylist() if "sched" in r.extra else None}
json.dump(out, sys.stdout, default=str)
"""


def _scenarios() -> tuple[dict, list[str]]:
    """Every scenario as a plain config, and the names of those that replay a trace."""
    cfgs = dict(SCENARIOS)
    for name, (overrides, _) in CONTROLLERS.items():
        cfgs[name] = plain_config(compose([f"controller={name}", *overrides]))
    traced = [name for name, cfg in cfgs.items() if name in CONTROLLERS
              and workload_class(cfg["workload"]).generate_trace is not None]
    return cfgs, traced


def _run(pure: bool) -> dict:
    env = dict(os.environ)
    env.pop(compiled.PURE_ENV, None)
    if pure:
        env[compiled.PURE_ENV] = "1"
    proc = subprocess.run([sys.executable, "-c", _DUMP], input=json.dumps(_scenarios()),
                          capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # NaN (a metric the run does not model) compares unequal to itself
    return json.loads(proc.stdout, parse_constant=lambda c: c)


@pytest.mark.skipif(compiled.pure_python(), reason=f"{compiled.PURE_ENV} is set")
def test_compiled_and_python_sources_give_identical_results():
    """The .pxd types must not change a single number: same tables, to the
    last bit, from the compiled core and from its Python sources."""
    fast, pure = _run(False), _run(True)
    assert pure.pop("compiled") == []
    assert fast.pop("compiled") == list(compiled.COMPILED_MODULES)
    for name in SCENARIOS:
        assert fast[name]["summary"]["ctx_switches"] > 0, name
        assert fast[name] == pure[name], name
    for name, (_, acted) in CONTROLLERS.items():
        assert fast[name]["summary"]["controllers"] == name
        assert fast[name]["summary"][acted] > 0, (name, acted)
        assert fast[name] == pure[name], name
    assert len(fast["quota"]["sched"]) > 100


def test_a_stale_compiled_module_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "ROOT", tmp_path)
    (tmp_path / "sim").mkdir()
    py, pxd = tmp_path / "sim" / "machine.py", tmp_path / "sim" / "machine.pxd"
    so = tmp_path / "sim" / ("machine" + compiled.importlib.machinery.EXTENSION_SUFFIXES[0])
    for path, mtime in ((py, 100), (pxd, 100), (so, 200)):
        path.write_text("")
        os.utime(path, (mtime, mtime))
    assert compiled._StaleGuard.find_spec("sim.machine") is None     # up to date
    assert compiled._StaleGuard.find_spec("sim.workloads.poisson") is None
    os.utime(pxd, (300, 300))
    with pytest.raises(ImportError, match=r"older than sim/machine.pxd.*make build"):
        compiled._StaleGuard.find_spec("sim.machine")


def test_an_incomplete_core_runs_the_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "ROOT", tmp_path)
    monkeypatch.delenv(compiled.PURE_ENV, raising=False)
    assert compiled.choose_finder() is compiled._StaleGuard       # nothing compiled
    (tmp_path / "sim").mkdir()
    suffix = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "sim" / ("machine" + suffix)).write_text("")
    with pytest.warns(RuntimeWarning, match="incomplete.*no compiled policies.kernel.cfs"):
        assert compiled.choose_finder() is compiled._SourceFinder
    monkeypatch.setenv(compiled.PURE_ENV, "1")
    assert compiled.choose_finder() is compiled._SourceFinder


def test_a_policy_missing_part_of_the_interface_fails_at_construction():
    class Partial(KernelScheduler):
        def enqueue_task(self, rq, p, flags):
            pass
    with pytest.raises(TypeError, match="Partial does not implement dequeue_task, "):
        Partial({}, None)


def test_python_subclass_overrides_reach_the_compiled_machine():
    """A policy written in Python overrides compiled CFS methods (the
    machine calls through cpdef dispatch, which must see the override)."""
    from policies.kernel.cfs import CFS
    calls = []

    class Counting(CFS):
        def task_tick(self, rq, curr):
            calls.append(rq.cpu)
            super().task_tick(rq, curr)
    cfg = make_cfg(periodic(threads=3, run_ms=5.0, sleep_ms=0.0), duration_s=0.2, warmup_s=0.0)
    import backends.simhost
    orig = backends.simhost.load_policy
    try:
        backends.simhost.load_policy = lambda name: Counting
        s = simulate(cfg).summary.to_pylist()[0]
    finally:
        backends.simhost.load_policy = orig
    assert s["ctx_switches"] > 0
    assert len(calls) >= 0.2 * 250 * 0.9          # a tick per 4 ms on the busy CPU
