"""Domain checks on a composed config.

The structured schemas (scenarios.schema) already guarantee types; this
module checks ranges and cross-key rules before anything runs. Every problem
is reported as "<full.key> = <value> is invalid: <rule>" and all problems are
reported together, so a user fixes a command line in one go.
"""

import dataclasses
import math
import re
from typing import Any, Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from policies.kernel import PLANNED as PLANNED_POLICIES
from sim.sched_class import RT_PRIORITY_RANGE, TASK_POLICIES
from scenarios.schema import (PLANNED_OPTIONS, WORKLOAD_SCHEMAS, Azure2021Workload,
                              FunctionsWorkload, PeriodicWorkload, PoissonWorkload,
                              RandomWorkload, ResctlWorkload, WorkerPoolWorkload,
                              scheduler_schemas)
from scenarios.workloads.azure2021 import DEMAND_FROM, SOURCES

SERVICE_DISTRIBUTIONS = ("exp", "det", "lognormal")
KERNEL_HZ = (100, 250, 300, 1000)  # the CONFIG_HZ choices
NICE_RANGE = (-20, 19)
CPU_WEIGHT_RANGE = (1, 10000)  # cgroup v2 cpu.weight
CPU_SHARES_RANGE = (2, 262144)  # cgroup v1 cpu.shares
BANDWIDTH_NOT_IMPLEMENTED = (
    "CFS bandwidth control is not implemented yet (planned: bandwidth issue)"
)
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
        _check_scheduler(checks)
        _check_calibration(checks)
        _check_workload(checks)
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


def _check_scheduler(c: _Checks) -> None:
    """Scheduler options are plugins: their fields declare the allowed values
    (sim.sched_class.tunable), so a new policy needs no check here."""
    if c.get("scheduler.name") in PLANNED_OPTIONS["scheduler"]:
        c.problems.append(not_available_message("scheduler", c.get("scheduler.name")))
        return
    schemas = scheduler_schemas()
    if not _check_option(c, "scheduler", schemas, key="policy"):
        return
    name, policy = c.get("scheduler.name"), c.get("scheduler.policy")
    c.require("scheduler.name", bool(name), "must not be empty")
    # a label must not pass one policy's results off as another's
    c.require("scheduler.name", name not in schemas or name == policy,
              f"names the {name} policy but scheduler.policy = {policy}")
    for f in dataclasses.fields(schemas[c.get("scheduler.policy")]):
        key, value = f"scheduler.{f.name}", c.get(f"scheduler.{f.name}")
        choices, bounds = f.metadata.get("choices"), f.metadata.get("range")
        if value is None:
            continue
        if choices is not None:
            c.one_of(key, choices)
        if bounds is not None:
            low, high = bounds
            if high is None:
                c.at_least(key, low)
            else:
                c.within(key, bounds)


def _check_calibration(c: _Checks) -> None:
    for key in ("direct_ns", "per_level_ns", "migration_ns", "refill_ns_per_line"):
        c.at_least(f"calibration.{key}", 0)
    line = c.get("calibration.cache_line_bytes")
    c.require(
        "calibration.cache_line_bytes",
        line > 0 and line & (line - 1) == 0,
        "must be a power of two",
    )
    c.at_least("calibration.max_refill_bytes", 0)
    c.positive("calibration.cache_decay_ns")


def _check_workload(c: _Checks) -> None:
    if not _check_option(c, "workload", WORKLOAD_SCHEMAS):
        return
    schema = WORKLOAD_SCHEMAS[c.get("workload.name")]
    if issubclass(schema, FunctionsWorkload):
        _check_functions(c)
    CHECKS[schema](c)


def _check_functions(c: _Checks) -> None:
    """Keys every workload of function cgroups has (FunctionsWorkload)."""
    c.at_least("workload.functions", 1)
    c.positive("workload.service_sigma")
    c.at_least("workload.threads_per_request", 1)
    c.at_least("workload.working_set_kb", 0)
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.within("workload.nice", NICE_RANGE)
    c.cgroup_name("workload.parent_cgroup")


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
    c.positive("workload.run_ms")
    c.at_least("workload.sleep_ms", 0)
    c.within("workload.cgroup_weight", CPU_WEIGHT_RANGE)
    c.optional_within("workload.cgroup_shares", CPU_SHARES_RANGE)
    c.at_least("workload.working_set_kb", 0)
    for key in ("quota_us", "period_us", "burst_us"):
        c.require(f"workload.{key}", c.get(f"workload.{key}") is None, BANDWIDTH_NOT_IMPLEMENTED)
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
    RandomWorkload: _check_random,
    ResctlWorkload: _check_resctl,
}
