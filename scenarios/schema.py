"""Structured configs: the types of every key in scenarios/conf.

The YAML files hold the values; these dataclasses only fix the keys and their
types, so a typo or a string where a number belongs fails at compose time.
Domain ranges are checked separately in scenarios.validate.  Plug-ins
(workloads, kernel policies, controllers) bring their own dataclass
(``CONFIG``), found through their registries.
"""

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from policies import control, kernel
from sim import workloads
from sim.costmodel import LEVELS, PARAMS as COST_PARAMS, SIZE, CostParam
from sim.plugins import plugin_dirs

CONF_DIR = Path(__file__).resolve().parent / "conf"


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
    # Memory model (sim/memory, docs/memory.md)
    llc_slices: int = MISSING  # LLC slices per LLC (one per core/CHA on Intel server parts)
    mem_bw_gbps: float = MISSING  # peak DRAM bandwidth per socket, GB/s (1e9 B/s)
    rdt_num_closids: int = MISSING  # resctrl num_closids (root's included); 0 = no RDT
    rdt_min_cbm_bits: int = MISSING  # resctrl info/L3/min_cbm_bits
    mba_min_bandwidth: int = MISSING  # resctrl info/MB/min_bandwidth, percent
    mba_bandwidth_gran: int = MISSING  # resctrl info/MB/bandwidth_gran, percent; 0 = no MBA
    # CPI model of the memory model (sim/memory/progress.py); defaults when a preset omits them
    cpu_ghz: float = 2.4  # core clock the memory latencies are counted in
    mem_latency_ns: float = 90.0  # loaded DRAM latency of an LLC miss
    llc_latency_ns: float = 20.0  # LLC hit latency
    llc_hash: str = "auto"  # slice hash: auto (XOR for 2^n slices) | xor | uniform (sim/memory/slicehash.py)


def _cost_field(param: CostParam) -> tuple:
    """A cost-model parameter as a calibration key: sizes are ints, the cache
    levels a list of {name, bytes, ns_per_line, shared}, the rest floats (a
    fitted profile's need not land on whole ns: sim/costmodel.py says how
    they are truncated on load)."""
    if param.kind == LEVELS:
        return param.name, Optional[List[Any]], field(default=None)
    kind = int if param.kind == SIZE else float
    return param.name, kind, field(default=MISSING if param.required else kind(param.default))


# The calibration group: a profile's name, the cost model's parameters (each
# defined once, in sim/costmodel.py PARAMS), and what describes the profile.
CalibrationConfig = make_dataclass("CalibrationConfig", [
    ("name", str, field(default=MISSING)),
    *(_cost_field(p) for p in COST_PARAMS),
    ("description", str, field(default=MISSING)),
    # a profile fitted by `colosim calibrate` (calibration/profile.py): the
    # parameters' 1-sigma, the residual of every point, the host fingerprint
    ("fit", Optional[Dict[str, Any]], field(default=None)),
    # CPU the real backend's native worker spends per request read and per
    # thread it creates on this host (request_path=worker; null:
    # sim/workloads/request_path.py's defaults)
    ("worker_dispatch_us", Optional[float], field(default=None)),
    ("worker_thread_us", Optional[float], field(default=None)),
])
CalibrationConfig.__module__ = __name__   # importable by name: pickled configs refer to it


@dataclass
class SimBackend:
    """backend=sim: the simulated host (sim/); no keys of its own."""
    name: str = MISSING


@dataclass
class RealBackend:
    """backend=real: this machine (backends/real/, docs/real-backend.md)."""
    name: str = MISSING
    cpus: Optional[str] = None  # cpuset of the workers, e.g. "1" or "0-3"; null: all CPUs
    loadgen_cpu: Optional[int] = None  # pin the load generator to this CPU; null: not pinned
    loadgen_rt_priority: Optional[int] = None  # SCHED_FIFO priority of the replay; null: normal
    perf: bool = True  # per-cgroup perf counts (context switches, migrations)
    perf_interval_ms: int = 100  # perf stat -I resolution
    worker: Optional[str] = None  # native worker binary; null: build backends/workers/funcworker.c
    spin_us: int = 100  # busy-wait this long before each dispatch instead of sleeping
    max_lateness_p99_s: Optional[float] = 0.002  # load-generator lateness bound; null: none
    lateness_action: str = "reject"  # reject | flag, when the bound is exceeded
    grace_s: float = 5.0  # workers are killed duration_s + grace_s after they start
    # workload=noisy_jobs (backends/real/jobs.py): the PMU event of memory stall cycles
    # perf_counts reads, and how long each job class runs alone to measure its speed
    stall_event: str = "cycle_activity.stalls_mem_any"
    job_alone_s: float = 0.5


BACKEND_SCHEMAS = {"sim": SimBackend, "real": RealBackend}


@dataclass
class NoCluster:
    """cluster=none: one host."""
    name: str = MISSING


@dataclass
class KubernetesCluster:
    """cluster=kubernetes: nodes of the host preset under a Kubernetes/Knative
    control plane (backends/cluster, docs/cluster.md)."""
    name: str = MISSING
    nodes: Optional[int] = MISSING  # null: the static-reservation count (search = consolidate)
    search: str = MISSING  # none | consolidate (smallest node count meeting the latency target)
    max_nodes: Optional[int] = None  # consolidate: stop adding nodes here; null: 2 x start
    placement: str = MISSING  # least_allocated | most_allocated
    pods_per_node: int = MISSING  # kubelet max-pods
    reserved_pods: int = MISSING  # of those, kept for system services
    node_cpu_mcpu: Optional[int] = None  # allocatable CPU; null: the host's CPUs x 1000
    node_memory_mb: int = MISSING
    cpu_request: Any = MISSING  # per pod: mean | peak (the function's demand) | millicores
    max_pod_cpu_mcpu: int = MISSING  # mean/peak: a busier function's request is split over pods
    cpu_limit: Any = None  # per pod cpu.max: null (none) | request | millicores
    memory_request_mb: int = MISSING
    target_concurrency: float = MISSING  # Knative container-concurrency-target-default
    target_utilization: float = MISSING  # Knative container-concurrency-target-percentage / 100
    stable_window_s: float = MISSING  # Knative stable-window
    panic_window_pct: float = MISSING  # Knative panic-window-percentage
    panic_threshold_pct: float = MISSING  # Knative panic-threshold-percentage
    keep_alive_s: float = MISSING  # idle time before a function scales to zero
    min_scale: int = MISSING  # pods every function keeps (Knative min-scale); > 0: deployed at t = 0
    cold_start_s: float = MISSING  # pod start to ready
    window_s: float = MISSING  # control-plane synchronisation window
    profile_window_s: float = MISSING  # resolution of peak demand and utilisation figures
    parallel: str = MISSING  # serial | ray
    workers: Optional[int] = None  # ray: shards (actors); null: the CPUs Ray sees
    ray_address: Optional[str] = None  # ray: a running cluster; null: start a local Ray


CLUSTER_SCHEMAS = {"none": NoCluster, "kubernetes": KubernetesCluster}


@dataclass
class Config:
    host: HostConfig = MISSING
    calibration: CalibrationConfig = MISSING
    # Options of these groups differ in shape; each option's YAML pulls in its
    # own schema (base_<option>) through its defaults list.
    workload: Any = MISSING
    scheduler: Any = MISSING
    controller: Any = MISSING
    backend: Any = MISSING  # sim | real (BACKEND_SCHEMAS)
    cluster: Any = MISSING  # none | kubernetes (CLUSTER_SCHEMAS)
    experiment: str = MISSING
    seed: int = MISSING
    duration_s: float = MISSING
    warmup_s: float = MISSING
    slo_s: float = MISSING
    interval_s: float = MISSING
    output_dir: Optional[str] = None


SCHEMA_PREFIX = "base_"


def conf_dirs() -> list[Path]:
    """scenarios/conf, then the ``conf`` directory of each COLOSIM_PLUGIN_PATH
    entry that has one (sim/plugins.py), in search order."""
    return [CONF_DIR] + [d / "conf" for d in plugin_dirs() if (d / "conf").is_dir()]


def searchpath_overrides() -> list[str]:
    """The Hydra override adding the plug-in conf directories to the search
    path (none without COLOSIM_PLUGIN_PATH)."""
    extra = [f"'file://{d}'" for d in conf_dirs()[1:]]
    return [f"hydra.searchpath=[{','.join(extra)}]"] if extra else []


def list_options() -> dict[str, list[str]]:
    """Config groups and their options, as found in the conf directories."""
    options: dict[str, set[str]] = {}
    for conf in conf_dirs():
        for group in conf.iterdir():
            if group.is_dir() and group.name != "hydra":   # conf/hydra: launcher presets
                options.setdefault(group.name, set()).update(
                    p.stem for p in group.glob("*.yaml"))
    return {group: sorted(names) for group, names in sorted(options.items())}


def workload_schemas() -> dict[str, type]:
    """Each workload module brings its own config dataclass (CONFIG)."""
    return workloads.schemas()


def scheduler_schemas() -> dict[str, type]:
    """Each kernel policy module brings its own config dataclass (CONFIG)."""
    return {name: kernel.module(name).CONFIG for name in kernel.available()}


def controller_schemas() -> dict[str, type]:
    """Each controller module brings its own config dataclass (CONFIG);
    ``none`` runs no controller and has only the common keys."""
    schemas = {name: control.module(name).CONFIG for name in control.available()}
    return {control.NONE: control.ControlConfig, **schemas}


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name=f"{SCHEMA_PREFIX}config", node=Config)
    for name, node in workload_schemas().items():
        cs.store(group="workload", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in scheduler_schemas().items():
        cs.store(group="scheduler", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in controller_schemas().items():
        cs.store(group="controller", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in BACKEND_SCHEMAS.items():
        cs.store(group="backend", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in CLUSTER_SCHEMAS.items():
        cs.store(group="cluster", name=f"{SCHEMA_PREFIX}{name}", node=node)
