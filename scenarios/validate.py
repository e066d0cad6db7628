"""Domain checks on a composed config.

The structured schemas (scenarios.schema) already guarantee types; this
module checks ranges and cross-key rules before anything runs. Every problem
is reported as "<full.key> = <value> is invalid: <rule>" and all problems are
reported together, so a user fixes a command line in one go.

Plug-in groups (workload, scheduler, controller) are checked from what their
config dataclass declares (sim/config.py): each field's allowed values, then
the dataclass's own ``check`` for rules across keys; nothing here names a
plug-in.

``validate`` checks a composed DictConfig (the command line's);
``validate_mapping`` the plain dicts handed to ``simulate()`` (tests,
tools), with the same rules.
"""

import dataclasses
from collections.abc import Mapping
import math
import re
import typing
from typing import Any, Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf

from policies import control, kernel

from backends.cluster.options import LIMIT_RULES, PARALLEL, REQUEST_RULES, SEARCHES, TRACE_WORKLOADS
from backends.cluster.placement import STRATEGIES
from scenarios.schema import (BACKEND_SCHEMAS, CLUSTER_SCHEMAS, controller_schemas,
                              list_options, scheduler_schemas, workload_schemas)
from sim import workloads
from sim.config import nested_dataclass
from sim.costmodel import CACHE_LEVEL_KEYS, LEVELS, PARAMS as COST_PARAMS, SPREAD, SPREAD_QUANTILES
from sim.engine import NO_LIMIT_NS, NSEC_PER_SEC
from sim.footprint import available_bytes, estimate_bytes, term_bytes
from sim.topology import MAX_CPUS
from sim.tracing import TraceConfig, trace_config
from sim.workloads.common import check_cpuset

KERNEL_HZ = (100, 250, 300, 1000)  # the CONFIG_HZ choices
# The simulated clock counts int64 nanoseconds; half its range leaves room
# for the timers a run sets past its end (292 / 2 years).
MAX_DURATION_S = NO_LIMIT_NS // 2 // NSEC_PER_SEC


class ConfigError(ValueError):
    """A config that cannot be run; the message names the offending key."""


def unknown_key_message(key: str, valid: Iterable[str]) -> str:
    parent, _, _ = key.rpartition(".")
    where = f"of {parent}" if parent else "at the top level"
    return f"{key} is not a valid key; valid keys {where}: {', '.join(valid)}"


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError listing every problem in cfg; return None if it is runnable."""
    problems: list[str] = []
    _check_structure(cfg, "", problems)
    # Range checks read every key, so they only make sense on a complete tree.
    if not problems:
        problems = _check_ranges(_Checks(cfg))
    if problems:
        raise ConfigError("\n".join(problems))


def validate_mapping(cfg: Mapping, has_trace: bool = False) -> None:
    """``validate`` for a plain config (``simulate()``'s dicts): each
    plug-in node is completed with its dataclass's defaults, as the
    simulator builds it (sim.config.from_mapping, which also refuses
    unknown keys and missing required ones), then the same range checks
    run.  A top-level or host key a dict leaves out is not checked: the
    simulator's default applies.  ``has_trace``: a trace is handed in
    (the workload replays it whatever its name)."""
    try:
        schema, full = _completed(cfg, has_trace)
    except (KeyError, ValueError) as err:
        raise ConfigError(err.args[0] if isinstance(err, ValueError)
                          else f"{err.args[0]} is required but has no value") from None
    problems = _check_ranges(_Checks(full), schema)
    if problems:
        raise ConfigError("\n".join(problems))


def _completed(cfg: Mapping, has_trace: bool) -> tuple[type, dict]:
    """The workload's config class, and ``cfg`` with its plug-in nodes as
    plain dicts of every key."""
    full = dict(cfg)
    wcfg = cfg["workload"]
    cls = workloads.class_for(wcfg, has_trace)
    full["workload"] = dataclasses.asdict(workloads.typed_config(cls, wcfg))
    full["scheduler"] = dataclasses.asdict(kernel.config(cfg["scheduler"]))
    if cfg.get("controller") is not None:
        full["controller"] = dataclasses.asdict(control.config(cfg["controller"]))
    full["trace"] = dataclasses.asdict(trace_config(cfg))
    # simulate() runs one simulated host
    full.setdefault("backend", {"name": "sim"})
    full.setdefault("cluster", {"name": "none"})
    return cls.CONFIG, full


def _check_ranges(checks: "_Checks", workload_schema: type | None = None) -> list[str]:
    _check_run(checks)
    _check_host(checks)
    _check_plugin(checks, "scheduler", scheduler_schemas(), key="policy")
    _check_plugin(checks, "controller", controller_schemas(), key="controller")
    _check_calibration(checks)
    _check_workload(checks, workload_schema)
    _check_backend(checks)
    _check_cluster(checks)
    _check_fields(checks, "trace", TraceConfig)
    checks.require("trace.name", checks.get("trace.name") == "none"
                   or checks.get("cluster.name") == "none",
                   "records one host's schedule: use it without cluster=",
                   checks.get("trace.name"))
    # the estimate reads every size key, so only of a config that passed
    if not checks.problems:
        _check_memory(checks, workload_schema)
    return checks.problems


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
    """Collects range problems; each helper reads the value at a full key.
    A rule on a value that is None (a key a plain dict leaves out) does
    not hold and says nothing: the rules that depend on it are skipped."""

    def __init__(self, cfg: DictConfig | Mapping):
        self.cfg = cfg
        self.typed = isinstance(cfg, DictConfig)
        self.problems: list[str] = []

    def node(self, key: str) -> Any:
        """The config node at ``key`` as OmegaConf (or the plain dict) holds it."""
        if self.typed:
            return OmegaConf.select(self.cfg, key)
        node = self.cfg
        for part in re.findall(r"[^.\[\]]+", key):
            if isinstance(node, list):
                node = node[int(part)] if int(part) < len(node) else None
            elif isinstance(node, Mapping):
                node = node.get(part)
            else:
                return None
        return node

    def get(self, key: str) -> Any:
        """The value at ``key``; lists and mappings as plain Python ones."""
        return _plain(self.node(key))

    def require(self, key: str, ok: bool, rule: str, value: Any = None) -> bool:
        if not ok:
            shown = self.get(key) if value is None else value
            self.problems.append(f"{key} = {_show(shown)} is invalid: {rule}")
        return ok

    def positive(self, key: str) -> bool:
        return self.above(key, 0)

    def above(self, key: str, low: float) -> bool:
        value = self.get(key)
        return value is not None and self.require(
            key, math.isfinite(value), "must be finite") and self.require(
            key, value > low, f"must be > {low}")

    def at_least(self, key: str, low: float, value: Any = None) -> bool:
        value = self.get(key) if value is None else value
        return value is not None and self.require(
            key, math.isfinite(value), "must be finite", value) and self.require(
            key, value >= low, f"must be >= {low}", value)

    def within(self, key: str, bounds: tuple[int, int], value: Any = None) -> bool:
        value = self.get(key) if value is None else value
        low, high = bounds
        return value is not None and self.require(
            key, low <= value <= high, f"must be in [{low}, {high}]", value)

    def one_of(self, key: str, choices: Iterable[Any]) -> bool:
        choices = tuple(choices)
        value = self.get(key)
        return value is not None and self.require(
            key, value in choices, f"must be one of {', '.join(map(str, choices))}")

    def field(self, key: str, f: dataclasses.Field) -> None:
        """The allowed values a plug-in config field declares (sim.config.tunable)."""
        value = self.get(key)
        if value is None:
            return
        choices, bounds = f.metadata.get("choices"), f.metadata.get("range")
        above, pattern = f.metadata.get("above"), f.metadata.get("pattern")
        if choices is not None:
            self.one_of(key, choices)
        if above is not None:
            self.above(key, above)
        if bounds is not None:
            low, high = bounds
            if high is None:
                self.at_least(key, low)
            else:
                self.within(key, bounds)
        if pattern is not None:
            regex, rule = pattern
            self.require(key, isinstance(value, str) and bool(re.fullmatch(regex, value)), rule)


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


_show = _plain


def _check_run(c: _Checks) -> None:
    if c.get("experiment") is not None:
        c.require("experiment", bool(c.get("experiment")), "must not be empty")
    c.at_least("seed", 0)
    if not c.positive("duration_s") or not c.require(
            "duration_s", c.get("duration_s") <= MAX_DURATION_S,
            f"must be <= {MAX_DURATION_S:.3g} s (the simulated clock's range)"):
        return
    if c.at_least("warmup_s", 0):
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
    if not all([c.within(f"host.{k}", (1, MAX_CPUS)) for k in counts]):
        return
    cpus = c.get("host.sockets") * c.get("host.cores") * c.get("host.threads_per_core")
    if not c.require("host.cores", cpus <= MAX_CPUS,
                     f"sockets x cores x threads_per_core = {cpus} CPUs must be <= {MAX_CPUS}"):
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
    """The selected option of ``group`` exists and its ``key`` (which names
    the schema) matches the schema that was composed."""
    if not c.one_of(f"{group}.{key}", schemas):
        return False
    return _check_schema_matches(c, group, schemas[c.get(f"{group}.{key}")], key)


def _check_fields(c: _Checks, key: str, schema: type) -> None:
    """Every field of a plug-in config node against the allowed values it
    declares (sim.config.tunable), nested configs (lists of them) alike,
    then the dataclass's own cross-key ``check`` (sim/config.py)."""
    for f in dataclasses.fields(schema):
        field_key = f"{key}.{f.name}"
        c.field(field_key, f)
        value = c.get(field_key)
        if isinstance(value, (list, dict)):
            nested = nested_dataclass(typing.get_type_hints(schema)[f.name])
            if nested is not None and isinstance(value, list):
                for i in range(len(value)):
                    _check_fields(c, f"{field_key}[{i}]", nested)
            elif nested is not None:
                _check_fields(c, field_key, nested)
    check = getattr(schema, "check", None)
    if check is not None:
        check(c, key)


def _check_plugin(c: _Checks, group: str, schemas: dict, key: str) -> None:
    """Scheduler and controller options are plugins: the module named by
    ``group.key`` declares its fields' allowed values (sim.config.tunable),
    so a new policy needs no check here."""
    if not _check_option(c, group, schemas, key=key):
        return
    name, module = c.get(f"{group}.name"), c.get(f"{group}.{key}")
    c.require(f"{group}.name", bool(name), "must not be empty")
    # a label must not pass one policy's results off as another's
    c.require(f"{group}.name", name not in schemas or name == module,
              f"names the {name} {group} but {group}.{key} = {module}")
    _check_fields(c, group, schemas[module])


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
        elif param.kind == SPREAD:
            spread = list(c.get(key) or ())
            ok = not spread or (
                len(spread) == len(SPREAD_QUANTILES)
                and all(isinstance(x, (int, float)) and x > 0 for x in spread)
                and all(b >= a for a, b in zip(spread, spread[1:]))
                and spread[SPREAD_QUANTILES.index(0.5)] == 1)
            c.require(key, ok, f"must be empty or {len(SPREAD_QUANTILES)} non-decreasing ratios "
                               f"> 0 at the probabilities {list(SPREAD_QUANTILES)}, the "
                               f"median's 1", spread)
        elif c.at_least(key, param.minimum) and param.power_of_two:
            value = c.get(key)
            # a fitted profile may hold 64.0: what counts is the number
            whole = float(value).is_integer()
            c.require(key, whole and int(value) & (int(value) - 1) == 0,
                      "must be a power of two", value)


def _check_workload(c: _Checks, schema: type | None) -> None:
    """Workloads are plugins too (sim/workloads/base.py): the option's
    ``workload.model`` (options sharing a module), else its name, names the
    module whose CONFIG declares the allowed values and cross-key rules.
    ``schema``: a plain dict's, the CONFIG of the class the simulator
    builds for it (its name is a label there: a trace replay may be called
    anything)."""
    if schema is None:
        if not c.one_of("workload.name", list_options().get("workload", ())):
            return
        schemas = workload_schemas()
        key = "model" if "model" in c.node("workload") else "name"
        if key == "model" and not c.one_of("workload.model", schemas):
            return
        schema = schemas.get(c.get(f"workload.{key}"))
        if not _check_schema_matches(c, "workload", schema, key):
            return
    _check_fields(c, "workload", schema)


def _check_memory(c: _Checks, schema: type | None) -> None:
    """A simulated run must fit in this machine's memory (sim/footprint.py
    estimates it from the workload's sizes); the key named is the one that
    sets the largest share."""
    if c.get("backend.name") != "sim" or c.get("cluster.name") != "none":
        return
    if schema is None:
        key = "model" if "model" in c.node("workload") else "name"
        schema = workload_schemas()[c.get(f"workload.{key}")]
    cpus = c.get("host.sockets") * c.get("host.cores") * c.get("host.threads_per_core")
    terms = schema.footprint(c.get("workload"), c.get("duration_s"))
    need, have = estimate_bytes(terms, cpus), available_bytes()
    if not terms or have is None or need <= have:
        return
    largest = max(terms, key=lambda t: term_bytes(t, cpus))
    key = f"workload.{largest.key}"
    c.require(key, False, f"the run would need about {_gb(need)} of memory and this machine "
              f"has {_gb(have)} available ({largest.count:,.0f} {largest.kind}s take "
              f"{_gb(term_bytes(largest, cpus))}; sim/footprint.py)")


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.1f} GB"


def _check_backend(c: _Checks) -> None:
    """backend=real keys (backends/real/run.py); whether this machine can
    run it (root, controllers, scheduler=) is checked when the run starts."""
    if not _check_option(c, "backend", BACKEND_SCHEMAS) or c.get("backend.name") != "real":
        return
    if c.get("backend.cpus") is not None:
        check_cpuset(c, "backend.cpus", MAX_CPUS)
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
    for key in ("disturbed_steal_frac", "disturbed_other_frac", "disturbed_alone_spread",
                "disturbed_speed_frac"):
        c.within(f"backend.{key}", (0, 1))
    path = c.get("workload.request_path")
    c.require("workload.request_path", path in (None, "direct", "worker"),
              "backend=real runs its native worker (direct and worker are that same "
              "path; knative, bentoml and rdhashd are simulated)", path)


def _check_cluster(c: _Checks) -> None:
    """cluster=kubernetes keys (backends/cluster, docs/cluster.md)."""
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
    """`workload.name=periodic` on top of `workload=poisson` would mix two shapes
    (a plain dict has no shape of its own: its keys are the schema's)."""
    if not c.typed:
        return schema is not None
    selected = OmegaConf.get_type(c.node(group))
    name = c.get(f"{group}.{key}")
    hint = f"select it with {group}={name}" if key == "name" else f"select a {group} option that uses it"
    return c.require(
        f"{group}.{key}",
        selected is schema,
        f"does not match the selected {group} option; {hint}",
    )
