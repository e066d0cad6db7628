"""The cluster config (scenarios/conf/cluster, docs/cluster.md): the keys of
``cluster=kubernetes`` and the choices of those that name a rule."""

from dataclasses import dataclass
from typing import Any, Optional

from sim.config import MISSING

PARALLEL = ("serial", "ray")                 # cluster.parallel
REQUEST_RULES = ("mean", "peak")             # cluster.cpu_request, besides millicores
LIMIT_RULES = ("request",)                   # cluster.cpu_limit, besides millicores and null
SEARCHES = ("none", "consolidate")           # cluster.search
TRACE_WORKLOADS = ("azure2019", "azure2021", "random")   # what a cluster replays


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
