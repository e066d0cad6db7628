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

from backends.cluster.options import KubernetesCluster
from backends.real.config import RealBackend
from policies import control, kernel
from sim import workloads
from sim.costmodel import LEVELS, PARAMS as COST_PARAMS, SIZE, SPREAD, CostParam
from sim.memory.progress import HOST_DEFAULTS as MEMORY_HOST_DEFAULTS
from sim.plugins import plugin_dirs
from sim.tracing import TraceConfig

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
    cpu_ghz: float = MEMORY_HOST_DEFAULTS["cpu_ghz"]  # core clock the memory latencies are counted in
    mem_latency_ns: float = MEMORY_HOST_DEFAULTS["mem_latency_ns"]  # loaded DRAM latency of an LLC miss
    llc_latency_ns: float = MEMORY_HOST_DEFAULTS["llc_latency_ns"]  # LLC hit latency
    llc_hash: str = "auto"  # slice hash: auto (XOR for 2^n slices) | xor | uniform (sim/memory/slicehash.py)
    # charge the refetch of the lines a cgroup loses when its ways shrink or move
    # (docs/memory.md, "Refill after a move"); false: no transient (an ablation)
    llc_refill: bool = MEMORY_HOST_DEFAULTS["llc_refill"]


def _cost_field(param: CostParam) -> tuple:
    """A cost-model parameter as a calibration key: sizes are ints, the cache
    levels a list of {name, bytes, ns_per_line, shared}, the rest floats (a
    fitted profile's need not land on whole ns: sim/costmodel.py says how
    they are truncated on load)."""
    if param.kind == LEVELS:
        return param.name, Optional[List[Any]], field(default=None)
    if param.kind == SPREAD:
        return param.name, Optional[List[float]], field(default=None)
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
    # the rest of that worker's own CPU (sim/workloads/request_path.py
    # WorkerPath.set_host_costs; null: not measured, not modelled): each
    # request thread's start-up and exit, warm, and how much more the
    # worker's costs are once it has been away from the CPU
    ("worker_thread_start_us", Optional[float], field(default=None)),
    ("worker_thread_exit_us", Optional[float], field(default=None)),
    ("worker_cold_factor", Optional[float], field(default=None)),
    ("worker_cold_thread_factor", Optional[float], field(default=None)),
    ("worker_cold_decay_ms", Optional[float], field(default=None)),
    # what else runs on the host, measured by `colosim calibrate` (null: not
    # measured, not modelled).  The real backend's load generator, a
    # SCHED_FIFO task of the host on the worker path (sim/loadgen.py): CPU
    # per dispatch and per worker it drains, and per read of its sampler
    # (every interval_s) and per cgroup that read reads
    ("loadgen_dispatch_us", Optional[float], field(default=None)),
    ("loadgen_worker_us", Optional[float], field(default=None)),
    ("loadgen_sample_us", Optional[float], field(default=None)),
    ("loadgen_sample_cgroup_us", Optional[float], field(default=None)),
    # and its CPU whatever the dispatch rate, per second and per worker per second
    ("loadgen_background_us_per_s", Optional[float], field(default=None)),
    ("loadgen_background_worker_us_per_s", Optional[float], field(default=None)),
    # the same loop under self-timed workloads (nothing to dispatch): per
    # second for the periodic runner and per worker it reads, per burst line,
    # and per second for rt-app's (calibration/bench/driver.py)
    ("loadgen_periodic_us_per_s", Optional[float], field(default=None)),
    ("loadgen_periodic_worker_us_per_s", Optional[float], field(default=None)),
    ("loadgen_burst_us", Optional[float], field(default=None)),
    ("loadgen_rtapp_us_per_s", Optional[float], field(default=None)),
    # per-CPU kernel threads (sim/kthreads.py): wake-ups per second per CPU,
    # run-time quantiles (us) at sim.kthreads.RUN_QUANTILES, their nice
    ("kthread_rate_per_s", Optional[float], field(default=None)),
    ("kthread_run_us", Optional[List[float]], field(default=None)),
    ("kthread_nice", int, field(default=0)),
    # RCU's grace-period kthread as exiting threads wake it (sim/kthreads.py
    # RcuGp): wake-ups per exit while exits are rare, its period, CPU per wake-up
    ("rcu_gp_wakeups_per_exit", Optional[float], field(default=None)),
    ("rcu_gp_period_ms", Optional[float], field(default=None)),
    ("rcu_gp_run_us", Optional[float], field(default=None)),
    # rt-app's busy loop on this host (sim/workloads/rtapp.py; null: not
    # measured, a run of X us is X us of CPU): CPU ns per iteration, and the
    # pLoad (ns per iteration) rt-app's own calibration gives here, its median
    ("rtapp_loop_ns", Optional[float], field(default=None)),
    ("rtapp_calibration_ns", Optional[int], field(default=None)),
    # switches: model them where the profile measured them (false: leave
    # them out, to show their effect)
    ("loadgen", bool, field(default=True)),
    ("kthreads", bool, field(default=True)),
    ("rcu", bool, field(default=True)),
    ("worker_host_costs", bool, field(default=True)),
    ("rtapp_loops", bool, field(default=True)),
])
CalibrationConfig.__module__ = __name__   # importable by name: pickled configs refer to it


@dataclass
class SimBackend:
    """backend=sim: the simulated host (sim/); no keys of its own."""
    name: str = MISSING


# backends bring their config dataclass (its keys, types and defaults)
BACKEND_SCHEMAS = {"sim": SimBackend, "real": RealBackend}


@dataclass
class NoCluster:
    """cluster=none: one host."""
    name: str = MISSING


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
    trace: TraceConfig = MISSING  # none | sched | optional (sim/tracing.py)
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
    cs.store(group="trace", name=f"{SCHEMA_PREFIX}trace", node=TraceConfig)
