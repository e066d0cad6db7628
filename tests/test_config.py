import pytest
from omegaconf import DictConfig, OmegaConf

from scenarios.config import compose, default_options, list_options
from scenarios.simulate import simulate
from scenarios.schema import HostConfig
from sim.workloads.periodic import PeriodicConfig
from sim.workloads.poisson import PoissonConfig
from scenarios.validate import ConfigError, validate
from simcfg import DEFAULT_COSTS, make_cfg, poisson


def test_groups_and_options_match_the_documented_names():
    assert list_options() == {
        "backend": ["real", "sim"],
        "calibration": ["default", "e5-2430l", "ideal", "this-vm"],
        "cluster": ["kubernetes", "none"],
        "trace": ["none", "optional", "sched"],
        "controller": ["catcloud", "dynamic_priority", "holt_winters", "lags_static",
                       "least_loaded", "none", "static", "vpa"],
        "experiment": ["affinity_hey", "affinity_hey_this_vm", "affinity_workers",
                       "affinity_workers_this_vm", "catcloud_baselines_exp1", "catcloud_baselines_exp2",
                       "catcloud_exp1", "catcloud_exp2", "catcloud_mixed", "catcloud_vpa_defaults",
                       "cfs_params_fig1", "cfs_params_fig2", "cfs_params_fig3", "cfs_params_fig4",
                       "cluster_pods", "cluster_sizing", "demo_density", "lags_epyc", "lags_fig11", "lags_fig3", "lags_fig5", "lags_fig6", "lags_fig8", "noisy_ablations",
                       "noisy_scenarios", "page_size",
                       "shared_partitions"],
        "host": ["e5-2430l", "epyc-7453", "generic", "silver-4314-2s", "this-vm"],
        "scheduler": ["cfs", "cfs_tuned", "eevdf", "eevdf66", "eevdf_tuned", "lags", "rr"],
        "workload": ["apache", "azure2019", "azure2021", "clients", "ebizzy", "memlookup", "noisy_jobs",
                     "periodic", "poisson", "random", "resctl", "resctl_mix", "resctl_parallel", "rtapp",
                     "webserver", "worker_pool"],
    }
    assert default_options() == {
        "host": "e5-2430l",
        "workload": "poisson",
        "scheduler": "cfs",
        "calibration": "default",
        "controller": "none",
        "backend": "sim",
        "cluster": "none",
        "trace": "none",
        "experiment": None,
    }


def test_default_config_is_typed_and_complete():
    cfg = compose()
    assert isinstance(cfg, DictConfig)
    assert OmegaConf.get_type(cfg.host) is HostConfig
    assert OmegaConf.get_type(cfg.workload) is PoissonConfig
    assert (cfg.experiment, cfg.seed, cfg.duration_s, cfg.warmup_s) == ("default", 0, 10.0, 1.0)
    assert (cfg.slo_s, cfg.interval_s, cfg.output_dir) == (1.0, 1.0, None)
    assert cfg.host.name == "e5-2430l" and cfg.host.cores == 6 and cfg.host.threads_per_core == 2
    assert cfg.scheduler.tunable_scaling == "log" and cfg.scheduler.sched_latency_ns is None
    assert cfg.calibration.direct_ns == 3800 and cfg.calibration.cache_decay_ns == 20_000_000
    assert cfg.workload.cgroup_shares is None and cfg.workload.parent_cgroup == "faas.slice"
    assert not OmegaConf.missing_keys(cfg)


@pytest.mark.parametrize(
    "group, option", [(g, o) for g, options in list_options().items() for o in options]
)
def test_every_option_composes_and_validates(group, option):
    # a cluster replays a trace: the default workload (poisson) has none
    needs = {("cluster", "kubernetes"): ["workload=azure2019"]}
    cfg = compose([f"{group}={option}", *needs.get((group, option), [])])
    # an experiment is a label plus a sweep; every other option is a node
    assert (cfg[group] if group == "experiment" else cfg[group].name) == option


def test_topology_of_the_named_hosts():
    epyc = compose(["host=epyc-7453"]).host
    assert (epyc.sockets, epyc.cores, epyc.threads_per_core) == (2, 28, 2)
    assert (epyc.numa_nodes, epyc.cores_per_llc, epyc.llc_mb) == (8, 7, 16)
    silver = compose(["host=silver-4314-2s"]).host
    assert (silver.sockets, silver.cores, silver.llc_mb, silver.llc_ways) == (2, 16, 24, 12)


def test_ideal_calibration_makes_switches_free():
    cal = compose(["calibration=ideal"]).calibration
    costs = [cal.direct_ns, cal.per_level_ns, cal.migration_ns, cal.refill_ns_per_line]
    assert costs == [0, 0, 0, 0] and cal.max_refill_bytes == 0 and cal.cache_decay_ns > 0


def test_overrides_apply_with_their_types():
    cfg = compose(["host=this-vm", "workload.functions=8", "seed=3", "workload.rate_rps=5"])
    assert (cfg.host.cores, cfg.workload.functions, cfg.seed) == (2, 8, 3)
    assert isinstance(cfg.workload.rate_rps, float)


def test_periodic_accepts_per_thread_nice_and_groups():
    cfg = compose(
        [
            "host=this-vm",
            "workload=periodic",
            "workload.nice=[0,5]",
            "workload.groups=[{name:a,threads:2,nice:[1,2],cpuset:'0-1'},{name:b,cgroup_shares:512}]",
        ]
    )
    assert OmegaConf.get_type(cfg.workload) is PeriodicConfig
    assert list(cfg.workload.nice) == [0, 5]
    assert cfg.workload.groups[1].threads == 1 and cfg.workload.groups[1].cgroup_shares == 512


def _error(overrides):
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    return str(info.value)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["workload.rate_rps=-1"], "workload.rate_rps = -1.0 is invalid: must be > 0"),
        (["duration_s=0"], "duration_s = 0.0 is invalid: must be > 0"),
        (["duration_s=inf"], "duration_s = inf is invalid: must be finite"),
        # the simulated clock counts int64 ns (an OverflowError mid-run before)
        (["duration_s=1e12"], "duration_s = 1000000000000.0 is invalid: must be <= 4.61e+09 s"),
        (["workload.functions=100000000"],
         "workload.functions = 100000000 is invalid: must be in [1, 1000000]"),
        (["host.sockets=8", "host.cores=600", "host.numa_nodes=8"],
         "host.cores = 600 is invalid: sockets x cores x threads_per_core = 9600 CPUs must be "
         "<= 4096"),
        (["warmup_s=10"], "warmup_s = 10.0 is invalid: must be < duration_s = 10.0"),
        (["seed=-1"], "seed = -1 is invalid: must be >= 0"),
        (["workload.nice=20"], "workload.nice = 20 is invalid: must be in [-20, 19]"),
        (["workload.cgroup_weight=0"], "workload.cgroup_weight = 0 is invalid: must be in [1, 10000]"),
        (["workload.cgroup_shares=1"], "workload.cgroup_shares = 1 is invalid: must be in [2, 262144]"),
        (["workload.service=gamma"], "workload.service = gamma is invalid: must be one of exp, det, lognormal"),
        (["workload.threads_per_request=0"], "workload.threads_per_request = 0 is invalid: must be in [1, 1000000]"),
        (["workload.functions=0"], "workload.functions = 0 is invalid: must be in [1, 1000000]"),
        (["host.cores=0"], "host.cores = 0 is invalid: must be in [1, 4096]"),
        (["host.numa_nodes=4"], "host.numa_nodes = 4 is invalid: must divide sockets x cores = 6"),
        (["host.cores_per_llc=4"], "host.cores_per_llc = 4 is invalid: must divide cores = 6"),
        (["host.hz=123"], "host.hz = 123 is invalid: must be one of 100, 250, 300, 1000"),
        (["scheduler.tunable_scaling=cubic"], "scheduler.tunable_scaling = cubic is invalid: must be one of none, log, linear"),
        (["scheduler.sched_latency_ns=10"], "scheduler.sched_latency_ns = 10 is invalid: must be in [100000, 1000000000]"),
        (["calibration.cache_line_bytes=48"], "calibration.cache_line_bytes = 48 is invalid: must be a power of two"),
        (["workload=worker_pool", "workload.workers=0"], "workload.workers = 0 is invalid: must be in [1, 1000000]"),
        (["workload=worker_pool", "workload.capacity=-1"], "workload.capacity = -1 is invalid: must be in [0, 1000000]"),
        (["workload=periodic", "workload.nice=[0,1,2]"], "workload.nice = [0, 1, 2] is invalid: must have one value per thread (2 threads)"),
        (["workload=periodic", "workload.nice=[0,-21]"], "workload.nice[1] = -21 is invalid: must be in [-20, 19]"),
        (["workload=periodic", "workload.groups=[{name:a},{name:a}]"], "workload.groups[1].name = a is invalid: must be unique"),
        (["workload=periodic", "workload.groups=[{name:a,cpuset:'0-12'}]"], "workload.groups[0].cpuset = 0-12 is invalid: CPUs must be in 0..11"),
        (["workload=periodic", "workload.groups=[{threads:2}]"], "workload.groups[0].name is required"),
        (["workload.cpuset_spread=socket"], "workload.cpuset_spread = socket is invalid: must be one of node, llc"),
        (["workload.parent_cgroup=/faas"], "workload.parent_cgroup = /faas is invalid"),
        (["workload.name=periodic"], "select it with workload=periodic"),
        (["~seed"], "seed is required"),
    ],
)
def test_out_of_range_values_name_the_key_value_and_rule(overrides, expected):
    assert expected in _error(overrides)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["workload.quota_us=500"], "workload.quota_us = 500 is invalid: the quota must be "
         "in [1000, 17592186044415] us, or -1/null/max for no limit"),
        (["workload.quota_us=15000", "workload.period_us=2000000"],
         "workload.period_us = 2000000 is invalid: must be in [1000, 1000000]"),
        (["workload.quota_us=15000", "workload.burst_us=20000"],
         "workload.burst_us = 20000 is invalid: must be in [0, 15000]"),
        (["workload.cpu_max='15000 500'"],
         "workload.cpu_max = 15000 500 is invalid: $PERIOD must be in [1000, 1000000] us"),
        (["workload.cpu_max=fifteen"], "workload.cpu_max = fifteen is invalid: cpu.max"),
        (["workload.cpu_max='15000 100000'", "workload.quota_us=15000"],
         "workload.quota_us = 15000 is invalid: conflicts with workload.cpu_max"),
        (["workload.cpu_max_burst=1000"],
         "workload.cpu_max_burst = 1000 is invalid: needs workload.cpu_max"),
        (["workload.groups=[{name:a,quota_us:100}]"],
         "workload.groups[0].quota_us = 100 is invalid: the quota must be in"),
        # a quota without its period was run with 100000 us, whatever was meant
        (["workload.quota_us=15000", "workload.period_us=null"],
         "workload.period_us = null is invalid: must be set (1000..1000000 us) when "
         "workload.quota_us is"),
        (["workload.period_us=50000", "workload.groups=[{name:a,quota_us:15000}]"],
         "workload.groups[0].period_us = null is invalid: must be set"),
    ],
)
def test_bandwidth_keys_are_range_checked(overrides, expected):
    assert expected in _error(["workload=periodic", *overrides])


@pytest.mark.parametrize("overrides", [
    ["workload=periodic", "workload.quota_us=15000", "workload.burst_us=15000"],
    ["workload=periodic", "workload.quota_us=-1"],
    ["workload=poisson", "workload.cpu_max='max 100000'"],
    ["workload=poisson", "workload.cpu_max=15000", "workload.cpu_max_burst=5000"],
])
def test_bandwidth_keys_accept_both_cgroup_spellings(overrides):
    compose(overrides)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("workload.rate_rps=abc", "workload.rate_rps = abc is invalid: must be a float"),
        ("host.cores=1.5", "host.cores = 1.5 is invalid: must be an integer"),
        ("workload.service_sigma=null", "workload.service_sigma = null is invalid: must have a value"),
    ],
)
def test_type_errors_name_the_key(override, expected):
    assert _error([override]) == expected


def test_unknown_option_lists_the_valid_ones():
    assert _error(["scheduler=foo"]) == (
        "scheduler=foo is not a known option; choose from: cfs, cfs_tuned, eevdf, eevdf66, eevdf_tuned, lags, rr")
    assert "choose from: e5-2430l, epyc-7453, generic, silver-4314-2s, this-vm" in _error(
        ["host=nope"]
    )


def test_schema_entries_are_not_selectable_options():
    assert "is not a known option" in _error(["workload=base_poisson"])


def test_scheduler_policy_must_be_a_policy_module():
    assert _error(["scheduler.policy=foo"]) == (
        "scheduler.policy = foo is invalid: must be one of cfs, eevdf, lags")


def test_scheduler_fields_are_checked_from_their_declared_ranges():
    err = _error(["scheduler.sched_rt_runtime_us=-2", "scheduler.task_policy=fifo",
                  "scheduler.min_granularity_ns=5"])
    assert "scheduler.sched_rt_runtime_us = -2 is invalid: must be in [-1, 2147483647]" in err
    assert "scheduler.task_policy = fifo is invalid: must be one of normal, rr" in err
    assert "scheduler.min_granularity_ns = 5 is invalid: must be in [100000, 1000000000]" in err


def test_another_policys_name_inside_cfs_option_is_a_mislabel():
    assert _error(["scheduler.name=lags"]) == (
        "scheduler.name = lags is invalid: names the lags scheduler but scheduler.policy = cfs")


@pytest.mark.parametrize("override", ["workload.bogus=1", "+workload.bogus=1"])
def test_unknown_key_is_named_with_the_valid_keys_of_its_node(override):
    message = _error([override])
    assert message.startswith("workload.bogus is not a valid key; valid keys of workload: ")
    assert "rate_rps" in message and "parent_cgroup" in message


def test_unknown_top_level_key():
    message = _error(["bogus=1"])
    assert message.startswith("bogus is not a valid key; valid keys at the top level: ")
    assert "duration_s" in message


def test_unknown_key_inside_a_list_item():
    message = _error(["workload=periodic", "workload.groups=[{name:a,bogus:2}]"])
    assert "bogus is not a valid key" in message and "cpuset" in message


def test_all_problems_are_reported_together():
    message = _error(["workload.rate_rps=0", "workload.nice=99", "slo_s=-1"])
    assert len(message.splitlines()) == 3


def test_sweep_syntax_is_rejected_with_a_hint():
    assert "one value per key" in _error(["seed=1,2"])


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_validate_rejects_a_config_edited_after_composition():
    cfg = compose()
    cfg.workload.rate_rps = -5.0
    with pytest.raises(ConfigError, match=r"workload\.rate_rps = -5\.0"):
        validate(cfg)


def test_a_run_larger_than_this_machines_memory_is_refused_with_the_estimate():
    """Within every key's range, but 10^6 functions x 1000 req/s for 10^6 s
    are 10^15 requests: more memory than any machine has (sim/footprint.py)."""
    message = _error(["workload.functions=1000000", "workload.rate_rps=1000",
                      "duration_s=1e6"])
    assert message.startswith("workload.rate_rps = 1000.0 is invalid: the run would need "
                              "about 186,264,")
    assert "of memory and this machine has" in message and "GB available" in message


def test_the_memory_estimate_counts_cgroups_per_cpu_threads_and_requests():
    from sim import footprint as fp
    from sim.footprint import Term
    cfg = OmegaConf.to_container(compose(["workload.functions=100", "duration_s=20"]))
    terms = PoissonConfig.footprint(cfg["workload"], cfg["duration_s"])
    assert terms == [Term("cgroup", 100, "functions"),
                     Term("request", 100 * 12.5 * 20, "rate_rps")]
    assert fp.estimate_bytes(terms, 12) == (fp.BASE_BYTES
                                            + 100 * (fp.CGROUP_BYTES + 12 * fp.CGROUP_CPU_BYTES)
                                            + 25_000 * fp.REQUEST_BYTES)
    threads = PeriodicConfig.footprint(
        {"threads": 4, "run_ms": 10.0, "sleep_ms": 90.0, "groups": None}, 2.0)
    assert threads == [Term("cgroup", 1, "groups"), Term("thread", 4, "threads"),
                       Term("request", 4 * 20, "threads")]


def test_simulate_checks_a_plain_dict_as_the_command_line_does():
    """simulate() given a plain dict (tests, tools) refuses what `colosim
    run` refuses, naming the key, before building anything."""
    cfg = OmegaConf.to_container(compose())   # a full config, as the command line's
    cfg["workload"]["functions"] = -3
    with pytest.raises(ConfigError, match=r"^workload\.functions = -3 is invalid: must be in "
                                          r"\[1, 1000000\]$"):
        simulate(cfg)
    with pytest.raises(ConfigError, match=r"^duration_s = 1000000000000\.0 is invalid"):
        simulate(make_cfg(poisson(), duration_s=1e12))
    with pytest.raises(ConfigError, match=r"^workload\.bogus is not a valid key"):
        simulate(make_cfg(poisson(bogus=1)))
    with pytest.raises(ConfigError, match=r"^scheduler\.sched_latency_ns = 10 is invalid"):
        simulate(make_cfg(poisson(), scheduler={"name": "cfs", "sched_latency_ns": 10}))


def test_a_fitted_profiles_whole_floats_pass_the_power_of_two_check():
    """calibration/fit.py writes numbers as floats: 64.0 is a power of two,
    48.0 and 64.5 are not (and are refused, not a TypeError)."""
    ok = make_cfg(poisson(), duration_s=0.2, warmup_s=0,
                  calibration={**DEFAULT_COSTS, "cache_line_bytes": 64.0})
    assert simulate(ok).summary.num_rows == 1
    for bad in (48.0, 64.5):
        with pytest.raises(ConfigError, match="cache_line_bytes = .* must be a power of two"):
            simulate({**ok, "calibration": {**ok["calibration"], "cache_line_bytes": bad}})
