"""Structured configs: the types of every key in scenarios/conf.

The YAML files hold the values; these dataclasses only fix the keys and their
types, so a typo or a string where a number belongs fails at compose time.
Domain ranges are checked separately in scenarios.validate.
"""

from dataclasses import dataclass, field, make_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from policies.control import PLANNED as PLANNED_CONTROLLERS
from sim.costmodel import LEVELS, PARAMS as COST_PARAMS, SIZE, CostParam


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
    # CFS bandwidth per function cgroup: v1 cpu.cfs_quota_us (null or -1: no
    # limit), cpu.cfs_period_us, cpu.cfs_burst_us; or v2 cpu.max, cpu.max.burst
    quota_us: Optional[int] = None
    period_us: Optional[int] = 100_000
    burst_us: Optional[int] = 0
    cpu_max: Optional[str] = None  # "max 100000", "15000 100000" or "15000"
    cpu_max_burst: Optional[int] = None
    # the hops of a request (sim/workloads/request_path.py): direct (threads
    # forked in the function cgroup) | knative (a pod: queue-proxy in, the
    # user container, queue-proxy out, each in its container's cgroup) |
    # bentoml (knative's pod running a BentoML service: API server, the
    # runner's batching dispatcher, PyTorch's threads) |
    # worker (the real backend's native worker: a dispatcher thread per cgroup) |
    # rdhashd (resctl-demo's rd-hashd: dispatch thread, worker pool, sleeps)
    request_path: str = "direct"
    # worker path: dispatcher CPU per request and per thread it creates
    # (null: the calibration profile's worker_dispatch_us, worker_thread_us);
    # rdhashd: dispatch_us per request or completion
    dispatch_us: Optional[float] = None
    thread_us: Optional[float] = None
    # rdhashd path: rd-hashd's per-request sleep, N(mean, ratio x mean)
    # clamped to [0, 2 mean], in three parts (null: rd-hashd's 20 ms, 0.33;
    # 0 drops the sleeps)
    sleep_mean_s: Optional[float] = None
    sleep_stdev_ratio: Optional[float] = None
    # bentoml path (null: the defaults in sim/workloads/request_path.py):
    # API server CPU per request in and out, runner event loop CPU per pass,
    # BentoML's runners.batching.max_batch_size and max_latency_ms, API
    # server workers and torch.set_num_threads (null: the container's CPUs)
    api_us: Optional[float] = None
    api_out_us: Optional[float] = None
    batch_us: Optional[float] = None
    max_batch_size: Optional[int] = None
    max_latency_ms: Optional[float] = None
    api_workers: Optional[int] = None
    torch_threads: Optional[int] = None


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
    clients: Optional[int] = None  # null: open loop at rate_rps; N: N closed-loop clients
    think_s: float = 0.0  # closed loop: a client's pause between response and next request


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
    # cpu.max of this group; all null: the workload's (see PeriodicWorkload)
    quota_us: Optional[int] = None
    period_us: Optional[int] = None
    burst_us: Optional[int] = None
    cpu_max: Optional[str] = None
    cpu_max_burst: Optional[int] = None


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
    # CFS bandwidth of each group's cgroup, spelled as in FunctionsWorkload
    # (period_us null: 100000, burst_us null: 0)
    quota_us: Optional[int] = None
    period_us: Optional[int] = 100_000
    burst_us: Optional[int] = 0
    cpu_max: Optional[str] = None
    cpu_max_burst: Optional[int] = None


@dataclass
class EbizzyWorkload(PeriodicWorkload):
    """Sleeping ebizzy: periodic threads with CATCloud's presets (sim/workloads/ebizzy.py)."""
    preset: Optional[str] = None  # exp1 (20/150) | exp2 (40/30) | null: run_ms/sleep_ms as given
    run_ms: Optional[float] = None  # null: the preset's
    sleep_ms: Optional[float] = None


@dataclass
class WebserverWorkload(WorkerPoolWorkload):
    """Seed 000's server (sim/workloads/webserver.py): batched accept thread,
    bounded app queue (capacity), worker pool."""
    backlog: int = MISSING  # listen backlog: connections waiting to be accepted
    batch_size: int = MISSING  # connections per batch handed to the queue
    batch_window_ms: float = MISSING  # a batch is handed over at most this long after its first
    accept_us: float = MISSING  # accept thread CPU per connection
    trace_file: Optional[str] = None  # open loop: replay these arrivals (invocation trace)


@dataclass
class NoisyJobsWorkload:
    """The noisy-neighbor thesis's job stream (scenarios/workloads/noisy_jobs.py)."""
    name: str = MISSING
    scenario: str = MISSING  # low_demand | high_utilization | exceeding_demand
    priority_share: Optional[float] = None  # null: the scenario's (0.1 / 0.2 / 0.5)
    interarrival_mean_s: float = MISSING
    interarrival_sd_s: float = MISSING
    length_mean_s: float = MISSING
    length_sd_s: float = MISSING
    length_min_s: float = MISSING
    cores: List[int] = MISSING  # threads per job, drawn uniformly from this list
    high_sensitivity_frac: float = MISSING
    working_set_kb: int = MISSING
    cgroup_weight: int = MISSING
    cgroup_shares: Optional[int] = None
    nice: int = MISSING
    parent_cgroup: str = MISSING
    trace_file: Optional[str] = None  # set: replay this job trace instead of generating one
    # memory profiles by sensitivity class ({moderate: {...}, high: {...}}; keys of
    # sim.memory.progress.MemoryProfile); null: the jobs have no memory model
    memory: Optional[Any] = None


@dataclass
class MemLookupWorkload:
    """Random-lookup containers in RDT partitions (sim/workloads/memlookup.py)."""
    name: str = MISSING
    containers: int = MISSING
    threads: int = MISSING  # per container, one physical core each
    burst_ms: float = MISSING  # CPU per request, as alone
    socket: int = 0
    memory: Any = MISSING  # sim.memory.progress.MemoryProfile keys
    partitions: Optional[List[Optional[str]]] = None  # per container: null or "lo-hi" ways
    mb: Optional[List[int]] = None  # per container MB percent
    exclusive: bool = True
    tag: str = "priority"
    cgroup_weight: int = 100
    cgroup_shares: Optional[int] = None
    parent_cgroup: str = MISSING


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
class Azure2019Workload(GeneratedWorkload):
    """The LAGS cluster case study's trace (scenarios/workloads/azure2019.py)."""
    source: str = MISSING  # synthetic | azure2019
    source_path: Optional[str] = None  # invocations_per_function_md.anon.dNN.csv or its directory
    minute_s: float = MISSING  # simulated seconds per trace minute (60: real time)
    start_minute: Optional[int] = None  # first trace minute replayed; null: the busiest window
    peak_cores: float = MISSING  # the replayed window's busiest minute offers this many CPUs


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
    control plane (sim/cluster, docs/cluster.md)."""
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

WORKLOAD_SCHEMAS = {
    "poisson": PoissonWorkload,
    "worker_pool": WorkerPoolWorkload,
    "periodic": PeriodicWorkload,
    "azure2021": Azure2021Workload,
    "azure2019": Azure2019Workload,
    "random": RandomWorkload,
    "resctl": ResctlWorkload,
    "resctl_parallel": ResctlWorkload,
    "resctl_mix": ResctlWorkload,
    "ebizzy": EbizzyWorkload,
    "webserver": WebserverWorkload,
    "noisy_jobs": NoisyJobsWorkload,
    "memlookup": MemLookupWorkload,
}


def scheduler_schemas() -> dict[str, type]:
    """Each kernel policy module brings its own config dataclass (CONFIG)."""
    from policies import kernel
    return {name: kernel.module(name).CONFIG for name in kernel.available()}


def controller_schemas() -> dict[str, type]:
    """Each controller module brings its own config dataclass (CONFIG);
    ``none`` runs no controller and has only the common keys."""
    from policies import control
    schemas = {name: control.module(name).CONFIG for name in control.available()}
    return {control.NONE: control.ControlConfig, **schemas}


# Names DESIGN.md reserves for options that do not exist yet; selecting one
# says so instead of "unknown option".
PLANNED_OPTIONS = {
    "host": (),
    "calibration": (),
    "scheduler": (),
    "controller": PLANNED_CONTROLLERS,
    "workload": (),
    "backend": (),
    "cluster": (),
}


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name=f"{SCHEMA_PREFIX}config", node=Config)
    for name, node in WORKLOAD_SCHEMAS.items():
        cs.store(group="workload", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in scheduler_schemas().items():
        cs.store(group="scheduler", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in controller_schemas().items():
        cs.store(group="controller", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in BACKEND_SCHEMAS.items():
        cs.store(group="backend", name=f"{SCHEMA_PREFIX}{name}", node=node)
    for name, node in CLUSTER_SCHEMAS.items():
        cs.store(group="cluster", name=f"{SCHEMA_PREFIX}{name}", node=node)
