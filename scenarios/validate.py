"""Domain checks on a composed config.

The structured schemas (scenarios.schema) already guarantee types; this
module checks ranges and cross-key rules before anything runs. Every problem
is reported as "<full.key> = <value> is invalid: <rule>" and all problems are
reported together, so a user fixes a command line in one go.
"""

import dataclasses
from collections.abc import Mapping
import math
import re
from typing import Any, Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from policies.kernel import PLANNED as PLANNED_POLICIES
from sim.bandwidth import (MAX_CFS_QUOTA_PERIOD, MAX_CFS_RUNTIME, MIN_CFS_QUOTA_PERIOD,
                           NSEC_PER_USEC, parse_cpu_max)
from sim.costmodel import CACHE_LEVEL_KEYS, LEVELS, PARAMS as COST_PARAMS
from sim.sched_class import RT_PRIORITY_RANGE, TASK_POLICIES
from scenarios.schema import (BACKEND_SCHEMAS, CLUSTER_SCHEMAS, PLANNED_OPTIONS,
                              WORKLOAD_SCHEMAS, Azure2019Workload, Azure2021Workload,
                              FunctionsWorkload, PeriodicWorkload, PoissonWorkload,
                              RandomWorkload, ResctlWorkload, WorkerPoolWorkload,
                              EbizzyWorkload, NoisyJobsWorkload, WebserverWorkload,
                              MemLookupWorkload, controller_schemas, scheduler_schemas)
from scenarios.workloads.azure2019 import SOURCES as AZURE2019_SOURCES
from scenarios.workloads.azure2021 import DEMAND_FROM, SOURCES
from sim.cluster.options import LIMIT_RULES, PARALLEL, REQUEST_RULES, SEARCHES, TRACE_WORKLOADS
from sim.cluster.placement import STRATEGIES
from scenarios.workloads.noisy_jobs import SCENARIOS as NOISY_SCENARIOS
from sim.workloads.ebizzy import PRESETS as EBIZZY_PRESETS
from sim.workloads.request_path import REQUEST_PATHS

SERVICE_DISTRIBUTIONS = ("exp", "det", "lognormal")
KERNEL_HZ = (100, 250, 300, 1000)  # the CONFIG_HZ choices
NICE_RANGE = (-20, 19)
CPU_WEIGHT_RANGE = (1, 10000)  # cgroup v2 cpu.weight
CPU_SHARES_RANGE = (2, 262144)  # cgroup v1 cpu.shares
# tg_set_cfs_bandwidth()'s bounds, in us
CFS_PERIOD_US_RANGE = (MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC, MAX_CFS_QUOTA_PERIOD // NSEC_PER_USEC)
CFS_QUOTA_US_RANGE = (MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC, MAX_CFS_RUNTIME // NSEC_PER_USEC)
_CGROUP_PATH = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
_CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


class ConfigError(ValueError):
    """A config that cannot be run; the message names the offending key."""


def unknown_key_message(key: str, valid: Iterable[str]) -> str:
    parent, _, _ = key.rpartition(".")
    where = f"of {parent}" if parent else "at the top level"
    return f"{key} is not a valid key; valid keys {where}: {', '.join(valid)}"


def not_available_message(group: str, option: str) -> str:
    return f"{group} {option} is not available yet"


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError listing every problem in cfg; return None if it is runnable."""
    problems: list[str] = []
    _check_structure(cfg, "", problems)
    # Range checks read every key, so they only make sense on a complete tree.
    if not problems:
        checks = _Checks(cfg)
        _check_run(checks)
        _check_host(checks)
        _check_plugin(checks, "scheduler", scheduler_schemas(), key="policy")
        _check_plugin(checks, "controller", controller_schemas(), key="controller")
        _check_calibration(checks)
        _check_workload(checks)
        _check_backend(checks)
        _check_cluster(checks)
        problems = checks.problems
    if problems:
        raise ConfigError("\n".join(problems))


def _check_structure(node: Any, path: str, problems: list[str]) -> None:
    """Missing values, and keys added with `+key=` that the schema does not know."""
    if isinstance(node, ListConfig):
        for i, item in enumerate(node):
            _check_structure(item, f"{path}[{i}]", problems)
        return
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        fields = [f.name for f in dataclasses.fields(schema)]
        keys = list(node.keys())  # `in node` is False for keys whose value is missing
        for key in keys:
            if key not in fields:
                problems.append(unknown_key_message(_join(path, key), fields))
        for key in fields:
            if key not in keys:
                problems.append(f"{_join(path, key)} is required but was removed")
    for key in node:
        child = _join(path, key)
        if OmegaConf.is_missing(node, key):
            problems.append(f"{child} is required but has no value")
        else:
            _check_structure(node[key], child, problems)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class _Checks:
    """Collects range problems; each helper reads the value at a full key."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.problems: list[str] = []

    def get(self, key: str) -> Any:
        return OmegaConf.select(self.cfg, key)

    def require(self, key: str, ok: bool, rule: str, value: Any = None) -> bool:
        if not ok:
            shown = self.get(key) if value is None else value
            self.problems.append(f"{key} = {_show(shown)} is invalid: {rule}")
        return ok

    def positive(self, key: str) -> bool:
        value = self.get(key)
        return self.require(key, math.isfinite(value), "must be finite") and self.require(
            key, value > 0, "must be > 0"
        )

    def at_least(self, key: str, low: float, value: Any = None) -> bool:
        value = self.get(key) if value is None else value
        return self.require(key, math.isfinite(value), "must be finite", value) and self.require(
            key, value >= low, f"must be >= {low}", value
        )

    def within(self, key: str, bounds: tuple[int, int], value: Any = None) -> bool:
        value = self.get(key) if value is None else value
        low, high = bounds
        return self.require(key, low <= value <= high, f"must be in [{low}, {high}]", value)

    def one_of(self, key: str, choices: Iterable[Any]) -> bool:
        choices = tuple(choices)
        return self.require(
            key, self.get(key) in choices, f"must be one of {', '.join(map(str, choices))}"
        )

    def optional_within(self, key: str, bounds: tuple[int, int]) -> None:
        if self.get(key) is not None:
            self.within(key, bounds)

    def nice(self, key: str, threads: int) -> None:
        """nice is one int, or a list with one int per thread."""
        value = self.get(key)
        if isinstance(value, ListConfig):
            values = list(value)
            self.require(
                key,
                len(values) == threads,
                f"must have one value per thread ({threads} threads)",
                values,
            )
            for i, v in enumerate(values):
                if self.require(f"{key}[{i}]", _is_int(v), "must be an integer", v):
                    self.within(f"{key}[{i}]", NICE_RANGE, v)
        elif self.require(key, _is_int(value), "must be an integer or a list of integers"):
            self.within(key, NICE_RANGE)

    def cgroup_name(self, key: str) -> None:
        value = self.get(key)
        self.require(
            key,
            bool(_CGROUP_PATH.fullmatch(value)),
            "must be a relative cgroup path of letters, digits, '_', '.', '-' and '/'",
        )

    def cpuset(self, key: str, ncpus: int) -> None:
        value = self.get(key)
        if not self.require(
            key, bool(_CPU_LIST.fullmatch(value)), 'must be a CPU list such as "0-3,6"'
        ):
            return
        for part in value.split(","):
            low, _, high = part.partition("-")
            low, high = int(low), int(high or low)
            self.require(key, low <= high, "ranges must be ascending (low-high)")
            self.require(
                key, high < ncpus, f"CPUs must be in 0..{ncpus - 1} (the host has {ncpus})"
            )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value)
    return value


def _check_run(c: _Checks) -> None:
    c.require("experiment", bool(c.get("experiment")), "must not be empty")
    c.at_least("seed", 0)
    if c.positive("duration_s") and c.at_least("warmup_s", 0):
        c.require(
            "warmup_s",
            c.get("warmup_s") < c.get("duration_s"),
            f"must be < duration_s = {c.get('duration_s')}",
        )
    c.positive("slo_s")
    if c.positive("interval_s") and math.isfinite(c.get("duration_s")):
        c.require(
            "interval_s",
            c.get("interval_s") <= c.get("duration_s"),
            f"must be <= duration_s = {c.get('duration_s')}",
        )


def _check_host(c: _Checks) -> None:
    counts = ("sockets", "cores", "threads_per_core", "numa_nodes", "llc_ways")
    if not all([c.at_least(f"host.{k}", 1) for k in counts]):
        return
    c.positive("host.llc_mb")
    c.one_of("host.hz", KERNEL_HZ)
    sockets, cores, numa = c.get("host.sockets"), c.get("host.cores"), c.get("host.numa_nodes")
    c.require(
        "host.numa_nodes",
        (sockets * cores) % numa == 0,
        f"must divide sockets x cores = {sockets * cores}",
    )
    c.require(
        "host.numa_nodes",
        numa % sockets == 0,
        f"must be a multiple of sockets = {sockets} (a NUMA node does not span sockets)",
    )
    tpc = c.get("host.threads_per_core")
    c.require("host.smt_throughput", 1.0 <= c.get("host.smt_throughput") <= tpc,
              f"must be in [1, threads_per_core = {tpc}]")
    if c.at_least("host.cores_per_llc", 0) and c.get("host.cores_per_llc") > 0:
        c.require(
            "host.cores_per_llc",
            cores % c.get("host.cores_per_llc") == 0,
            f"must divide cores = {cores} (or be 0 for one LLC per socket)",
        )
    _check_host_memory(c)


def _check_host_memory(c: _Checks) -> None:
    """Memory-model keys (sim/memory, docs/memory.md)."""
    ways = c.get("host.llc_ways")
    if c.at_least("host.llc_slices", 1):
        slices = c.get("host.llc_slices")
        llc_bytes = round(c.get("host.llc_mb") * (1 << 20))
        c.require("host.llc_slices", llc_bytes % (ways * slices * 64) == 0,
                  f"llc_mb x 2^20 must be a whole number of sets of llc_ways = {ways} x "
                  f"llc_slices = {slices} x 64-byte lines")
    c.positive("host.mem_bw_gbps")
    c.at_least("host.rdt_num_closids", 0)
    c.within("host.rdt_min_cbm_bits", (0, ways))
    c.within("host.mba_min_bandwidth", (0, 100))
    c.within("host.mba_bandwidth_gran", (0, 100))


def _check_option(c: _Checks, group: str, schemas: dict, key: str = "name") -> bool:
    """The selected option of ``group`` exists (planned ones say so) and its
    ``key`` (which names the schema) matches the schema that was composed."""
    name = c.get(f"{group}.{key}")
    if name in PLANNED_OPTIONS[group] or (group == "scheduler" and name in PLANNED_POLICIES):
        c.problems.append(not_available_message(group, name))
        return False
    if not c.one_of(f"{group}.{key}", schemas):
        return False
    return _check_schema_matches(c, group, schemas[name], key)


def _check_plugin(c: _Checks, group: str, schemas: dict, key: str) -> None:
    """Scheduler and controller options are plugins: the module named by
    ``group.key`` declares its fields' allowed values (sim.sched_class.tunable),
    so a new policy needs no check here."""
    if c.get(f"{group}.name") in PLANNED_OPTIONS[group]:
        c.problems.append(not_available_message(group, c.get(f"{group}.name")))
        return
    if not _check_option(c, group, schemas, key=key):
        return
    name, module = c.get(f"{group}.name"), c.get(f"{group}.{key}")
    c.require(f"{group}.name", bool(name), "must not be empty")
    # a label must not pass one policy's results off as another's
    c.require(f"{group}.name", name not in schemas or name == module,
              f"names the {name} {group} but {group}.{key} = {module}")
    for f in dataclasses.fields(schemas[module]):
        field_key, value = f"{group}.{f.name}", c.get(f"{group}.{f.name}")
        choices, bounds = f.metadata.get("choices"), f.metadata.get("range")
        if value is None:
            continue
        if choices is not None:
            c.one_of(field_key, choices)
        if bounds is not None:
            low, high = bounds
            if high is None:
                c.at_least(field_key, low)
            else:
                c.within(field_key, bounds)


def _check_calibration(c: _Checks) -> None:
    """Each cost-model parameter against its bound in sim/costmodel.py PARAMS."""
    for param in COST_PARAMS:
        key = f"calibration.{param.name}"
        if param.kind == LEVELS:
            for i, level in enumerate(c.get(key) or ()):
                ok = (isinstance(level, Mapping) and set(level) <= set(CACHE_LEVEL_KEYS)
                      and isinstance(level.get("bytes"), int) and level["bytes"] > 0
                      and isinstance(level.get("ns_per_line"), (int, float))
                      and level["ns_per_line"] >= 0)
                c.require(f"{key}[{i}]", ok,
                          "must be {name, bytes > 0, ns_per_line >= 0, shared: bool}", level)
        elif c.at_least(key, param.minimum) and param.power_of_two:
            value = c.get(key)
            c.require(key, value & (value - 1) == 0, "must be a power of two")


def _check_workload(c: _Checks) -> None:
    if not _check_option(c, "workload", WORKLOAD_SCHEMAS):
        return
    schema = WORKLOAD_SCHEMAS[c.get("workload.name")]
    if issubclass(schema, FunctionsWorkload):
        _check_functions(c)
    CHECKS[schema](c)


def _check_bandwidth(c: _Checks, prefix: str) -> None:
    """A cgroup's cpu.max in one of its two spellings: v1 quota_us (null or
    -1: no limit), period_us, burst_us, or v2 cpu_max and cpu_max_burst;
    the kernel's ranges (tg_set_cfs_bandwidth)."""
    quota_key, period_key, burst_key = (f"{prefix}.{k}" for k in
                                        ("quota_us", "period_us", "burst_us"))
    max_key, max_burst_key = f"{prefix}.cpu_max", f"{prefix}.cpu_max_burst"
    period = c.get(period_key)
    if period is not None:
        c.within(period_key, CFS_PERIOD_US_RANGE)
    if c.get(max_key) is not None:
        for key in (quota_key, burst_key):
            c.require(key, not c.get(key), f"conflicts with {max_key}: set the limit in one "
                      "spelling (v1 quota_us/period_us/burst_us or v2 cpu_max/cpu_max_burst)")
        try:
            quota, period = parse_cpu_max(c.get(max_key), period or 100_000)
        except ValueError as err:
            c.require(max_key, False, str(err))
            return
        c.require(max_key, CFS_PERIOD_US_RANGE[0] <= period <= CFS_PERIOD_US_RANGE[1],
                  f"$PERIOD must be in [{CFS_PERIOD_US_RANGE[0]}, {CFS_PERIOD_US_RANGE[1]}] us")
        quota_key, burst_key = max_key, max_burst_key
    else:
        c.require(max_burst_key, c.get(max_burst_key) is None,
                  f"needs {max_key} (or use burst_us with quota_us)")
        quota = c.get(quota_key)
        if quota == -1:
            quota = None
    if quota is not None:
        low, high = CFS_QUOTA_US_RANGE
        c.require(quota_key, low <= quota <= high,
                  f"the quota must be in [{low}, {high}] us, or -1/null/max for no limit",
                  quota if quota_key.endswith("quota_us") else None)
    burst = c.get(burst_key)
    if burst is not None:
        high = quota if quota is not None else CFS_QUOTA_US_RANGE[1]
        c.within(burst_key, (0, high))


def _check_functions(c: _Checks) -> None:
    """Keys every workload of function cgroups has (FunctionsWorkload)."""
    _check_bandwidth(c, "workload")
    c.at_least("workload.functions", 1)
    c.positive("workload.service_sigma")
    c.at_least("workload.threads_per_request", 1)
    c.at_least("workload.working_set_kb", 0)
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.within("workload.nice", NICE_RANGE)
    c.cgroup_name("workload.parent_cgroup")
    c.one_of("workload.request_path", REQUEST_PATHS)
    # the bentoml path's keys (null: its defaults)
    for key, low in (("api_us", 0), ("api_out_us", 0), ("batch_us", 0), ("max_batch_size", 1),
                     ("api_workers", 1), ("torch_threads", 1)):
        if c.get(f"workload.{key}") is not None:
            c.at_least(f"workload.{key}", low)
    if c.get("workload.max_latency_ms") is not None:
        c.positive("workload.max_latency_ms")
    for key in ("sleep_mean_s", "sleep_stdev_ratio", "dispatch_us"):
        if c.get(f"workload.{key}") is not None:
            c.at_least(f"workload.{key}", 0)


def _check_poisson(c: _Checks) -> None:
    c.positive("workload.rate_rps")
    c.one_of("workload.service", SERVICE_DISTRIBUTIONS)
    c.positive("workload.mean_service_s")


def _check_worker_pool(c: _Checks) -> None:
    c.positive("workload.rate_rps")
    c.one_of("workload.service", SERVICE_DISTRIBUTIONS)
    c.positive("workload.mean_service_s")
    c.positive("workload.service_sigma")
    c.at_least("workload.working_set_kb", 0)
    c.within("workload.nice", NICE_RANGE)
    c.at_least("workload.workers", 1)
    c.at_least("workload.capacity", 0)
    if c.get("workload.clients") is not None:
        c.at_least("workload.clients", 1)
    c.at_least("workload.think_s", 0)


def _check_resctl(c: _Checks) -> None:
    c.require("workload.model", c.get("workload.model") == "resctl", "must be resctl")
    if c.one_of("workload.service", SERVICE_DISTRIBUTIONS + ("mix",)):
        if c.get("workload.service") == "mix":
            _check_mix(c)
        else:
            c.positive("workload.mean_service_s")
    c.positive("workload.lat_target_s")
    if c.positive("workload.lat_target_pct"):
        c.require("workload.lat_target_pct", c.get("workload.lat_target_pct") <= 1,
                  "must be <= 1 (a quantile)")
    c.positive("workload.control_period_s")
    if c.get("workload.rps_target") is not None:
        c.positive("workload.rps_target")
    c.at_least("workload.initial_concurrency", 1)
    c.at_least("workload.concurrency_max", c.get("workload.initial_concurrency"))


def _check_mix(c: _Checks) -> None:
    """service = mix: demands mix_s drawn with probabilities mix_p."""
    mix_s, mix_p = c.get("workload.mix_s"), c.get("workload.mix_p")
    if not c.require("workload.mix_s", bool(mix_s), "must list demands when service = mix",
                     None if mix_s is None else list(mix_s)):
        return
    if not c.require("workload.mix_p", mix_p is not None and len(mix_p) == len(mix_s),
                     "must give one probability per mix_s entry",
                     None if mix_p is None else list(mix_p)):
        return
    for i in range(len(mix_s)):
        c.positive(f"workload.mix_s[{i}]")
        c.within(f"workload.mix_p[{i}]", (0, 1))
    c.require("workload.mix_p", abs(sum(mix_p) - 1) < 1e-9, "must sum to 1", list(mix_p))


def _check_azure2021(c: _Checks) -> None:
    _check_generated(c)
    c.positive("workload.mean_service_s")
    c.one_of("workload.demand_from", DEMAND_FROM)
    if not c.one_of("workload.source", SOURCES):
        return
    source = c.get("workload.source")
    if source == "synthetic":
        c.require("workload.demand_from", c.get("workload.demand_from") != "trace",
                  "needs a recorded trace (workload.source = azure2019 or azure2021)")
    else:
        c.require("workload.source_path", bool(c.get("workload.source_path")),
                  f"must name the trace file or directory when workload.source = {source}")


def _check_azure2019(c: _Checks) -> None:
    _check_generated(c)
    c.positive("workload.mean_service_s")
    c.positive("workload.minute_s")
    c.positive("workload.peak_cores")
    if c.get("workload.start_minute") is not None:
        c.within("workload.start_minute", (0, 1439))
    if c.one_of("workload.source", AZURE2019_SOURCES) and c.get("workload.source") != "synthetic":
        c.require("workload.source_path", bool(c.get("workload.source_path")),
                  "must name the trace file or directory when workload.source = azure2019")


def _check_random(c: _Checks) -> None:
    _check_generated(c)
    c.positive("workload.max_rate_rps")
    if c.get("workload.mean_service_s") is not None:
        c.positive("workload.mean_service_s")


def _check_generated(c: _Checks) -> None:
    """Keys azure2021 and random add: functions with generated request streams."""
    c.one_of("workload.service", SERVICE_DISTRIBUTIONS)
    c.positive("workload.burstiness")
    if c.get("workload.trace_file") is not None:
        c.require("workload.trace_file", bool(c.get("workload.trace_file")),
                  "must be a path (or null to generate the trace)")


def _check_periodic(c: _Checks) -> None:
    if c.at_least("workload.threads", 1):
        c.nice("workload.nice", c.get("workload.threads"))
    # null only in ebizzy, where the preset supplies them (_check_ebizzy)
    if c.get("workload.run_ms") is not None:
        c.positive("workload.run_ms")
    if c.get("workload.sleep_ms") is not None:
        c.at_least("workload.sleep_ms", 0)
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.at_least("workload.working_set_kb", 0)
    _check_bandwidth(c, "workload")
    groups = c.get("workload.groups")
    if groups is None:
        return
    c.require("workload.groups", len(groups) > 0, "must not be empty (use null for no groups)")
    ncpus = c.get("host.sockets") * c.get("host.cores") * c.get("host.threads_per_core")
    names = [g.name for g in groups]
    for i, group in enumerate(groups):
        key = f"workload.groups[{i}]"
        c.cgroup_name(f"{key}.name")
        c.require(f"{key}.name", names.count(group.name) == 1, "must be unique among groups")
        if c.at_least(f"{key}.threads", 1):
            c.nice(f"{key}.nice", group.threads)
        c.within(f"{key}.cgroup_weight", CPU_WEIGHT_RANGE)
        c.optional_within(f"{key}.cgroup_shares", CPU_SHARES_RANGE)
        if group.cpuset is not None:
            c.cpuset(f"{key}.cpuset", ncpus)
        if group.run_ms is not None:
            c.positive(f"{key}.run_ms")
        if group.sleep_ms is not None:
            c.at_least(f"{key}.sleep_ms", 0)
        if group.task_policy is not None:
            c.one_of(f"{key}.task_policy", TASK_POLICIES)
        if group.rt_priority is not None:
            c.within(f"{key}.rt_priority", RT_PRIORITY_RANGE)
        _check_bandwidth(c, key)


def _check_ebizzy(c: _Checks) -> None:
    preset = c.get("workload.preset")
    if preset is None:
        for key in ("workload.run_ms", "workload.sleep_ms"):
            c.require(key, c.get(key) is not None, "must be set when workload.preset is null")
    else:
        c.one_of("workload.preset", EBIZZY_PRESETS)
    _check_periodic(c)


def _check_webserver(c: _Checks) -> None:
    _check_worker_pool(c)
    if c.get("workload.clients") is not None:
        c.require("workload.trace_file", c.get("workload.trace_file") is None,
                  "replays open-loop arrivals; set workload.clients = null to use it")
    c.at_least("workload.backlog", 1)
    c.at_least("workload.batch_size", 1)
    c.at_least("workload.batch_window_ms", 0)
    c.positive("workload.accept_us")
    if c.get("workload.trace_file") is not None:
        c.require("workload.trace_file", bool(c.get("workload.trace_file")),
                  "must be a path (or null to draw Poisson arrivals at rate_rps)")


def _check_noisy_jobs(c: _Checks) -> None:
    c.one_of("workload.scenario", NOISY_SCENARIOS)
    if c.get("workload.priority_share") is not None:
        c.within("workload.priority_share", (0, 1))
    c.within("workload.high_sensitivity_frac", (0, 1))
    c.positive("workload.interarrival_mean_s")
    c.at_least("workload.interarrival_sd_s", 0)
    c.positive("workload.length_mean_s")
    c.at_least("workload.length_sd_s", 0)
    c.positive("workload.length_min_s")
    cores = c.get("workload.cores")
    if c.require("workload.cores", len(cores) > 0, "must list at least one core count",
                 list(cores)):
        for i in range(len(cores)):
            c.at_least(f"workload.cores[{i}]", 1)
    c.at_least("workload.working_set_kb", 0)
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.within("workload.nice", NICE_RANGE)
    c.cgroup_name("workload.parent_cgroup")
    if c.get("workload.trace_file") is not None:
        c.require("workload.trace_file", bool(c.get("workload.trace_file")),
                  "must be a path (or null to generate the job trace)")
    memory = c.get("workload.memory")
    if memory is not None:
        for cls in memory:
            _check_memory_profile(c, f"workload.memory.{cls}", memory[cls])


def _check_memory_profile(c: _Checks, key: str, spec) -> None:
    """A memory profile (sim.memory.progress.MemoryProfile) builds."""
    from omegaconf import OmegaConf
    from sim.memory.progress import MemoryProfile
    try:
        plain = OmegaConf.to_container(spec, resolve=True) if OmegaConf.is_config(spec) else spec
        MemoryProfile.from_spec(plain)
    except (TypeError, ValueError) as err:
        c.require(key, False, str(err), spec)


def _check_memlookup(c: _Checks) -> None:
    c.at_least("workload.containers", 1)
    c.at_least("workload.threads", 1)
    c.positive("workload.burst_ms")
    c.at_least("workload.socket", 0)
    _check_memory_profile(c, "workload.memory", c.get("workload.memory"))
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.cgroup_name("workload.parent_cgroup")


def _check_backend(c: _Checks) -> None:
    """backend=real keys (backends/real/run.py); whether this machine can
    run it (root, controllers, scheduler=) is checked when the run starts."""
    if not _check_option(c, "backend", BACKEND_SCHEMAS) or c.get("backend.name") != "real":
        return
    if c.get("backend.cpus") is not None:
        c.cpuset("backend.cpus", 4096)
    if c.get("backend.loadgen_cpu") is not None:
        c.at_least("backend.loadgen_cpu", 0)
    if c.get("backend.loadgen_rt_priority") is not None:
        c.within("backend.loadgen_rt_priority", (1, 99))
    c.within("backend.perf_interval_ms", (10, 60_000))
    c.at_least("backend.spin_us", 0)
    if c.get("backend.max_lateness_p99_s") is not None:
        c.positive("backend.max_lateness_p99_s")
    c.one_of("backend.lateness_action", ("reject", "flag"))
    c.at_least("backend.grace_s", 0)
    c.require("backend.stall_event", bool(str(c.get("backend.stall_event") or "").strip()),
              "must name a perf event", c.get("backend.stall_event"))
    c.within("backend.job_alone_s", (0.05, 60))
    path = c.get("workload.request_path")
    c.require("workload.request_path", path in (None, "direct", "worker"),
              "backend=real runs its native worker (direct and worker are that same "
              "path; knative, bentoml and rdhashd are simulated)", path)


def _check_cluster(c: _Checks) -> None:
    """cluster=kubernetes keys (sim/cluster, docs/cluster.md)."""
    if not _check_option(c, "cluster", CLUSTER_SCHEMAS) or c.get("cluster.name") == "none":
        return
    if c.get("cluster.nodes") is not None:
        c.at_least("cluster.nodes", 1)
    else:
        c.require("cluster.nodes", c.get("cluster.search") == "consolidate",
                  "may only be null with cluster.search = consolidate (it then starts from "
                  "the static-reservation count)")
    c.one_of("cluster.search", SEARCHES)
    if c.get("cluster.max_nodes") is not None:
        c.at_least("cluster.max_nodes", 1)
    c.one_of("cluster.placement", STRATEGIES)
    if c.at_least("cluster.pods_per_node", 1) and c.at_least("cluster.reserved_pods", 0):
        c.require("cluster.reserved_pods",
                  c.get("cluster.reserved_pods") < c.get("cluster.pods_per_node"),
                  f"must be < pods_per_node = {c.get('cluster.pods_per_node')}")
    if c.get("cluster.node_cpu_mcpu") is not None:
        c.at_least("cluster.node_cpu_mcpu", 1)
    c.at_least("cluster.node_memory_mb", 1)
    rule = c.get("cluster.cpu_request")
    c.require("cluster.cpu_request", rule in REQUEST_RULES or (
        isinstance(rule, (int, float)) and not isinstance(rule, bool) and rule >= 1),
        f"must be {' or '.join(REQUEST_RULES)} or a number of millicores >= 1", rule)
    c.at_least("cluster.max_pod_cpu_mcpu", 1)
    limit = c.get("cluster.cpu_limit")
    c.require("cluster.cpu_limit", limit is None or limit in LIMIT_RULES or (
        isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1),
        f"must be null, {' or '.join(LIMIT_RULES)}, or a number of millicores >= 1", limit)
    c.at_least("cluster.memory_request_mb", 0)
    c.positive("cluster.target_concurrency")
    c.require("cluster.target_utilization", 0 < c.get("cluster.target_utilization") <= 1,
              "must be in (0, 1]")
    c.within("cluster.panic_window_pct", (1, 100))
    c.at_least("cluster.panic_threshold_pct", 110)
    for key in ("stable_window_s", "window_s", "profile_window_s"):
        c.positive(f"cluster.{key}")
    c.at_least("cluster.keep_alive_s", 0)
    c.at_least("cluster.cold_start_s", 0)
    c.at_least("cluster.min_scale", 0)
    if c.one_of("cluster.parallel", PARALLEL) and c.get("cluster.workers") is not None:
        c.at_least("cluster.workers", 1)
    c.require("backend.name", c.get("backend.name") == "sim",
              "cluster=kubernetes is simulated only (backend=sim)")
    c.require("workload.name", c.get("workload.name") in TRACE_WORKLOADS,
              f"cluster=kubernetes replays an invocation trace: choose from "
              f"{', '.join(TRACE_WORKLOADS)}")


def _check_schema_matches(c: _Checks, group: str, schema: type, key: str = "name") -> bool:
    """`workload.name=periodic` on top of `workload=poisson` would mix two shapes."""
    selected = OmegaConf.get_type(c.get(group))
    name = c.get(f"{group}.{key}")
    hint = f"select it with {group}={name}" if key == "name" else f"select a {group} option that uses it"
    return c.require(
        f"{group}.{key}",
        selected is schema,
        f"does not match the selected {group} option; {hint}",
    )


# the range checks of each workload schema (FunctionsWorkload keys first)
CHECKS = {
    PoissonWorkload: _check_poisson,
    WorkerPoolWorkload: _check_worker_pool,
    PeriodicWorkload: _check_periodic,
    Azure2021Workload: _check_azure2021,
    Azure2019Workload: _check_azure2019,
    RandomWorkload: _check_random,
    ResctlWorkload: _check_resctl,
    EbizzyWorkload: _check_ebizzy,
    WebserverWorkload: _check_webserver,
    NoisyJobsWorkload: _check_noisy_jobs,
    MemLookupWorkload: _check_memlookup,
}
