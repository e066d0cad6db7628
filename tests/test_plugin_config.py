"""One typed config per plug-in: kernel policies, the RT class and
controllers receive their CONFIG dataclass instance (defaults written once,
on the dataclass), unknown keys are refused, option files set only what
differs from the defaults, and the policy-stats interface is declared."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from policies import control, kernel
from policies.control.static import StaticConfig
from policies.kernel.cfs import CFS, CfsConfig
from policies.kernel.eevdf import EevdfConfig
from policies.kernel.lags import LAGS, LagsConfig
from scenarios.config import CONF_DIR
from scenarios.simulate import build, simulate
from sim.bandwidth import RUNTIME_INF
from sim.config import from_mapping
from sim.sched_class import KernelScheduler, SchedConfig
from tests.simcfg import make_cfg, periodic, poisson


def test_a_plain_dict_becomes_the_policy_config_with_the_dataclass_defaults():
    sched = kernel.config({"name": "lags", "window_ticks": 10})
    assert type(sched) is LagsConfig
    assert sched.policy == "lags" and sched.window_ticks == 10
    # everything else is the dataclass's default, not a value re-read elsewhere
    assert sched.migration_cost_ns == LagsConfig.migration_cost_ns == 500_000
    assert sched.sched_rr_timeslice_ms == SchedConfig.sched_rr_timeslice_ms
    assert kernel.config({"name": "cfs_tuned", "policy": "cfs"}).policy == "cfs"
    assert kernel.config(sched) is sched


def test_an_unknown_key_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"scheduler\.sched_latncy_ns is not a valid key; "
                                         r"valid keys of scheduler: name, policy"):
        kernel.config({"name": "cfs", "sched_latncy_ns": 1})
    # EEVDF has no sched_latency_ns: 6.6 replaced it with the base slice
    with pytest.raises(ValueError, match=r"scheduler\.sched_latency_ns is not a valid key; "
                                         r".*base_slice_ns"):
        simulate(make_cfg(periodic(threads=1), duration_s=1.0, warmup_s=0.0,
                          scheduler={"name": "eevdf", "sched_latency_ns": 10**7}))
    with pytest.raises(ValueError, match=r"controller\.quota_ms is not a valid key; "
                                         r"valid keys of controller: .*quota_us"):
        control.build({"name": "static", "controller": "static", "quota_ms": 20})


def test_the_machine_and_its_classes_read_the_typed_config():
    sched = {"name": "cfs", "migration_cost_ns": 250_000, "sched_rr_timeslice_ms": 8,
             "sched_rt_runtime_us": -1, "sched_cfs_bandwidth_slice_us": 1_000,
             "task_policy": "rr", "rt_priority": 7, "hrtick": True}
    _, m, _, _ = build(make_cfg(periodic(threads=1), scheduler=sched))
    assert isinstance(m.policy.cfg, CfsConfig) and m.policy.cfg.hrtick
    assert m.policy.migration_cost == 250_000
    assert all(rq.avg_idle == 500_000 for rq in m.rqs)     # 2 x migration cost
    assert m.rt.rr_timeslice == 2                          # 8 ms in 4 ms ticks
    assert m.rt.rt_runtime == RUNTIME_INF                  # -1
    assert m.policy.bandwidth.slice == 1_000_000
    assert m.default_task_policy == ("rr", 7)


def test_eevdf_reads_its_own_sysctls_and_cfs_its_own():
    _, m, _, _ = build(make_cfg(periodic(threads=1), scheduler={"name": "eevdf",
                                                                "base_slice_ns": 2_000_000}))
    assert m.policy.sysctl_sched_base_slice == 2_000_000
    _, m, _, _ = build(make_cfg(periodic(threads=1), cores=4, scheduler={"name": "cfs"}))
    # None granularities: the kernel's default times the log factor (1 + ilog2(4))
    assert (m.policy.sched_latency, m.policy.min_granularity) == (18_000_000, 2_250_000)


def test_a_controller_receives_its_config_instance():
    ctl = control.build({"name": "static", "controller": "static", "quota_us": 5_000})
    assert isinstance(ctl.cfg, StaticConfig)
    assert (ctl.cfg.quota_us, ctl.cfg.period_us) == (5_000, StaticConfig.period_us)
    assert control.build({"name": "none", "controller": "none"}) is None
    assert control.build(None) is None


def _defaults(schema) -> dict:
    return {f.name: f.default for f in dataclasses.fields(schema)}


@pytest.mark.parametrize("group,key,package", [("scheduler", "policy", kernel),
                                               ("controller", "controller", control)])
def test_option_files_set_only_what_differs_from_the_dataclass_defaults(group, key, package):
    """The rule the option files follow: a default is written once, on its
    dataclass field; a YAML repeating one would be a second place to keep
    in step."""
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        option = yaml.safe_load(path.read_text())
        module = option.get(key)
        if module is None:                  # a variant of another option file
            continue
        schema = control.ControlConfig if module == control.NONE else \
            package.module(module).CONFIG
        defaults = _defaults(schema)
        repeated = [k for k, v in option.items()
                    if k not in ("name", key) and k in defaults and defaults[k] == v]
        assert not repeated, f"{path.name} repeats the defaults of {', '.join(repeated)}"


def test_policy_stats_are_a_declared_interface():
    """KernelScheduler declares ``stats`` (counters) and ``stats_prefix``;
    a policy without counters adds no summary columns, LAGS adds its own."""
    assert KernelScheduler.stats_prefix == CFS.stats_prefix == "policy"
    assert LAGS.stats_prefix == "lags"
    wl = poisson(functions=2, rate_rps=20.0)
    cfs = simulate(make_cfg(wl, duration_s=2.0, warmup_s=0.5)).summary
    assert not [c for c in cfs.column_names if c.startswith("policy_")]
    lags = simulate(make_cfg(wl, duration_s=2.0, warmup_s=0.5,
                             scheduler={"name": "lags"})).summary
    assert {c for c in lags.column_names if c.startswith("lags_")} == {
        "lags_credit_queued", "lags_wakeup_preemptions", "lags_tick_preemptions",
        "lags_placements", "lags_pulls"}


def test_from_mapping_keeps_an_instance_and_reads_a_mapping():
    cfg = EevdfConfig(name="eevdf", policy="eevdf", run_to_parity=False)
    assert from_mapping(EevdfConfig, cfg, "scheduler") is cfg
    assert from_mapping(EevdfConfig, {"name": "e", "policy": "eevdf", "place_lag": False},
                        "scheduler") == \
        EevdfConfig(name="e", policy="eevdf", place_lag=False)
