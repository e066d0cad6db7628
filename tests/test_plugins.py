"""Plug-ins kept outside the repository (COLOSIM_PLUGIN_PATH, sim/plugins.py):
a workload and a controller added from a temporary directory, one module and
one option file each, with no edit anywhere else, compose, validate and run."""
from __future__ import annotations

import textwrap

import pytest
from hydra.core.config_store import ConfigStore

from scenarios.config import compose, list_options
from scenarios.validate import ConfigError
from scenarios.simulate import simulate
from sim import workloads

WORKLOAD = '''
"""``workload=bursts``: ``threads`` threads in one cgroup, each running
``bursts`` bursts of ``burst_ms`` back to back, one request each."""
from dataclasses import dataclass

from sim.config import MISSING, tunable
from sim.task import BURST_EXIT, Request
from sim.workloads.base import Workload, WorkloadConfig


@dataclass
class BurstsConfig(WorkloadConfig):
    threads: int = tunable(MISSING, range=(1, None))
    burst_ms: float = tunable(MISSING, above=0)
    bursts: int = tunable(1, range=(1, None))
    max_bursts: int = 1000

    @classmethod
    def check(cls, c, key):
        c.require(f"{key}.bursts", c.get(f"{key}.bursts") <= c.get(f"{key}.max_bursts"),
                  f"must be <= {key}.max_bursts")


class Bursts(Workload):
    CONFIG = BurstsConfig

    def __init__(self, cfg, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.tg = machine.create_group("bursts")
        self.left = {}

    def start(self):
        for i in range(self.cfg.threads):
            req = self._request()
            t = self.machine.new_task(f"bursts/{i}", self.tg, 0, req.demand, 0, self, req)
            self.left[t.pid] = self.cfg.bursts
            self.machine.wake_up_new_task(t, i % self.machine.topology.nr_cpus)

    def _request(self):
        req = Request("bursts", self.tg.name, self.engine.now,
                      int(self.cfg.burst_ms * 1_000_000))
        self.recorder.request_arrived(req)
        return req

    def burst_done(self, task):
        task.request.end = self.engine.now
        self.recorder.request_done(task.request)
        self.left[task.pid] -= 1
        if not self.left[task.pid]:
            return BURST_EXIT
        task.request = self._request()
        task.request.start = self.engine.now
        task.remaining = task.request.demand
        return 0


WORKLOAD = Bursts
'''

WORKLOAD_YAML = '''
defaults:
  - base_bursts
  - _self_

name: bursts
threads: 2
burst_ms: 10.0
bursts: 3
'''

CONTROLLER = '''
from dataclasses import dataclass

from policies.control import ControlConfig, Controller
from sim.config import tunable


@dataclass
class CountConfig(ControlConfig):
    label: str = tunable("steps", choices=("steps", "ticks"))


class Count(Controller):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.steps = 0

    def step(self, host):
        self.steps += 1

    def summary(self):
        return {f"count_{self.cfg.label}": self.steps}


CONFIG = CountConfig
CONTROLLER = Count
'''

CONTROLLER_YAML = '''
defaults:
  - base_count
  - _self_

name: count
controller: count
interval_s: 0.1
label: steps
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    for path, text in {"workload/bursts.py": WORKLOAD,
                       "conf/workload/bursts.yaml": WORKLOAD_YAML,
                       "controller/count.py": CONTROLLER,
                       "conf/controller/count.yaml": CONTROLLER_YAML}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text))
    monkeypatch.setenv("COLOSIM_PLUGIN_PATH", str(tmp_path))
    yield tmp_path
    # compose stored the plug-ins' schemas in Hydra's process-wide ConfigStore;
    # later tests (sweeps pickle the store for their workers) must not see them
    repo = ConfigStore.instance().repo
    repo["workload"].pop("base_bursts.yaml", None)
    repo["controller"].pop("base_count.yaml", None)


RUN = ["workload=bursts", "host=generic", "calibration=ideal", "duration_s=1", "warmup_s=0",
       "interval_s=0.5"]


def test_a_workload_and_a_controller_from_a_plugin_directory_run(plugin_dir):
    assert "bursts" in workloads.available() and "bursts" in list_options()["workload"]
    assert "count" in list_options()["controller"]
    cfg = compose(RUN + ["controller=count"])
    assert cfg.workload.bursts == 3 and cfg.controller.label == "steps"
    summary = simulate(cfg).summary.to_pylist()[0]
    # 2 threads x 3 bursts of 10 ms on one CPU: all six done within the second
    assert summary["n_requests"] == 6 and summary["throughput_rps"] == 6.0
    assert summary["count_steps"] == 9      # at 0.1, 0.2, ..., 0.9 s: the run ends at 1 s


def test_a_plugins_declared_ranges_and_cross_key_check_are_enforced(plugin_dir):
    with pytest.raises(ConfigError) as info:
        compose(RUN + ["workload.threads=0", "workload.burst_ms=0", "workload.bursts=2000",
                       "controller=count", "controller.label=x"])
    assert str(info.value).splitlines() == [
        "controller.label = x is invalid: must be one of steps, ticks",
        "workload.threads = 0 is invalid: must be >= 1",
        "workload.burst_ms = 0.0 is invalid: must be > 0",
        "workload.bursts = 2000 is invalid: must be <= workload.max_bursts",
    ]


def test_without_the_plugin_path_the_option_is_unknown(plugin_dir, monkeypatch):
    monkeypatch.delenv("COLOSIM_PLUGIN_PATH")
    with pytest.raises(ConfigError, match="workload=bursts is not a known option"):
        compose(RUN)


def test_every_workload_option_composes_into_its_modules_typed_config():
    from omegaconf import OmegaConf
    for option in list_options()["workload"]:
        wl = compose([f"workload={option}"]).workload
        cls = workloads.workload_class(wl)
        assert OmegaConf.get_type(wl) is cls.CONFIG
        # the simulator's plain-dict path builds the same instance as OmegaConf's own
        plain = OmegaConf.to_container(wl, resolve=True)
        assert workloads.typed_config(cls, plain) == OmegaConf.to_object(wl)


def test_shipped_workloads_declare_how_the_real_backend_runs_them():
    assert {name: workloads.workload_class(name).REAL_BACKEND
            for name in workloads.available()} == {
        "azure2019": None, "azure2021": "functions", "clients": None, "ebizzy": "periodic",
        "memlookup": "memlookup", "noisy_jobs": "jobs", "periodic": "periodic",
        "pingpong": None, "poisson": "functions", "random": "functions", "resctl": None,
        "rtapp": "rtapp",
        "trace": "functions", "webserver": "webserver", "worker_pool": "worker_pool"}
    # options sharing a module name it with `model`
    resctl_mix = compose(["workload=resctl_mix"]).workload
    assert workloads.workload_class(resctl_mix) is workloads.workload_class("resctl")


def test_a_plain_workload_config_names_a_bad_or_missing_key():
    with pytest.raises(ValueError, match="workload.bogus is not a valid key"):
        workloads.typed_config(workloads.workload_class("poisson"),
                               {"name": "poisson", "bogus": 1})
    with pytest.raises(ValueError, match="workload.rate_rps is required"):
        workloads.typed_config(workloads.workload_class("poisson"),
                               {"name": "poisson", "functions": 1, "mean_service_s": 0.01,
                                "parent_cgroup": "faas.slice"})
