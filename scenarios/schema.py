"""Structured configs: the types of every key in scenarios/conf.

The YAML files hold the values; these dataclasses only fix the keys and their
types, so a typo or a string where a number belongs fails at compose time.
Domain ranges are checked separately in scenarios.validate.
"""

from dataclasses import dataclass
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class HostConfig:
    name: str = MISSING
    sockets: int = MISSING
    cores: int = MISSING  # physical cores per socket
    threads_per_core: int = MISSING
    numa_nodes: int = MISSING  # total on the host
    cores_per_llc: int = MISSING  # 0 = one LLC per socket
    llc_mb: float = MISSING  # per LLC
    llc_ways: int = MISSING
    hz: int = MISSING
    smt_throughput: float = MISSING  # core throughput with all threads busy, vs one alone


@dataclass
class CalibrationConfig:
    name: str = MISSING
    # Costs are floats because fitted profiles need not land on whole ns.
    direct_ns: float = MISSING
    per_level_ns: float = MISSING
    migration_ns: float = MISSING
    refill_ns_per_line: float = MISSING
    cache_line_bytes: int = MISSING
    max_refill_bytes: int = MISSING
    cache_decay_ns: float = MISSING
    description: str = MISSING


@dataclass
class FunctionsWorkload:
    """Keys every workload of function cgroups (parent_cgroup/func-N) has."""
    name: str = MISSING
    functions: int = MISSING
    service: str = MISSING
    mean_service_s: float = MISSING
    service_sigma: float = MISSING
    threads_per_request: int = MISSING
    working_set_kb: int = MISSING
    cgroup_weight: int = MISSING
    cgroup_shares: Optional[int] = None
    nice: int = MISSING
    parent_cgroup: str = MISSING


@dataclass
class PoissonWorkload(FunctionsWorkload):
    rate_rps: float = MISSING


@dataclass
class WorkerPoolWorkload:
    name: str = MISSING
    rate_rps: float = MISSING
    service: str = MISSING
    mean_service_s: float = MISSING
    service_sigma: float = MISSING
    workers: int = MISSING
    capacity: int = MISSING
    working_set_kb: int = MISSING
    nice: int = MISSING


@dataclass
class PeriodicGroup:
    # Groups are usually written on the command line, so every field but the
    # name has a default here (there is no YAML to supply one).
    name: str = MISSING
    threads: int = 1
    nice: Any = 0  # int, or a list with one nice per thread
    cgroup_weight: int = 100
    cgroup_shares: Optional[int] = None
    cpuset: Optional[str] = None  # e.g. "0-3,6"
    run_ms: Optional[float] = None    # null: the workload's run_ms
    sleep_ms: Optional[float] = None  # null: the workload's sleep_ms
    task_policy: Optional[str] = None  # normal | rr; null: scheduler.task_policy
    rt_priority: Optional[int] = None  # 1..99 for rr; null: scheduler.rt_priority


@dataclass
class PeriodicWorkload:
    name: str = MISSING
    threads: int = MISSING
    run_ms: float = MISSING
    sleep_ms: float = MISSING
    nice: Any = MISSING  # int, or a list with one nice per thread
    cgroup_weight: int = MISSING
    cgroup_shares: Optional[int] = None
    groups: Optional[List[PeriodicGroup]] = None
    working_set_kb: int = MISSING
    quota_us: Optional[int] = None
    period_us: Optional[int] = None
    burst_us: Optional[int] = None


@dataclass
class GeneratedWorkload(FunctionsWorkload):
    """Functions whose invocation trace scenarios/workloads generates."""
    burstiness: float = MISSING  # inter-arrival coefficient of variation
    trace_file: Optional[str] = None  # set: replay this trace instead of generating one


@dataclass
class Azure2021Workload(GeneratedWorkload):
    source: str = MISSING  # synthetic | azure2019 | azure2021
    source_path: Optional[str] = None  # the public trace's file or directory
    demand_from: str = MISSING  # service | trace


@dataclass
class RandomWorkload(GeneratedWorkload):
    max_rate_rps: float = MISSING
    mean_service_s: Optional[float] = None  # null: matched to azure2021's CPU demand


@dataclass
class ResctlWorkload(FunctionsWorkload):
    model: str = MISSING  # the simulator workload (resctl for every variant)
    mix_s: Optional[List[float]] = None  # service = mix: demands (s) and their probabilities
    mix_p: Optional[List[float]] = None
    lat_target_s: float = MISSING
    lat_target_pct: float = MISSING
    control_period_s: float = MISSING
    rps_target: Optional[float] = None
    initial_concurrency: int = MISSING
    concurrency_max: int = MISSING


@dataclass
class Config:
    host: HostConfig = MISSING
    calibration: CalibrationConfig = MISSING
    # Options of these groups differ in shape; each option's YAML pulls in its
    # own schema (base_<option>) through its defaults list.
    workload: Any = MISSING
    scheduler: Any = MISSING
    experiment: str = MISSING
    seed: int = MISSING
    duration_s: float = MISSING
    warmup_s: float = MISSING
    slo_s: float = MISSING
    interval_s: float = MISSING
    output_dir: Optional[str] = None


SCHEMA_PREFIX = "base_"

WORKLOAD_SCHEMAS = {
    "poisson": PoissonWorkload,
    "worker_pool": WorkerPoolWorkload,
    "periodic": PeriodicWorkload,
    "azure2021": Azure2021Workload,
    "random": RandomWorkload,
    "resctl": ResctlWorkload,
    "resctl_parallel": ResctlWorkload,
    "resctl_mix": ResctlWorkload,
}


def scheduler_schemas() -> dict[str, type]:
    """Each kernel policy module brings its own config dataclass (CONFIG)."""
    from policies import kernel
    return {name: kernel.module(name).CONFIG for name in kernel.available()}


# Names DESIGN.md reserves for options that do not exist yet; selecting one
# says so instead of "unknown option".
PLANNED_OPTIONS = {
    "host": (),
    "calibration": ("e5-2430l",),
    "scheduler": (),
    "workload": (
        "ebizzy",
        "noisy_jobs",
        "webserver",
    ),
}


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name=f"{SCHEMA_PREFIX}config", node=Config)
    for name, node in WORKLOAD_SCHEMAS.items():
        cs.store(group="workload", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in scheduler_schemas().items():
        cs.store(group="scheduler", name=f"{SCHEMA_PREFIX}{name}", node=node)
