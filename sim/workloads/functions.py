"""The config keys of workloads of function cgroups
(``parent_cgroup/func-N``): poisson, clients, resctl, the invocation-trace replays
(trace, azure2021, azure2019, random)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sim.config import MAX_COUNT, MISSING, tunable
from sim.footprint import Term
from sim.topology import CPU_SET_LEVELS
from sim.workloads.base import WorkloadConfig
from sim.workloads.common import (CGROUP_PATH, CPU_SHARES_RANGE, CPU_WEIGHT_RANGE, NICE_RANGE,
                                  SERVICE_DISTRIBUTIONS, check_bandwidth)
from sim.workloads.openmp import OpenMPConfig
from sim.workloads.pools import PoolsConfig
from sim.workloads.request_path import DIRECT, REQUEST_PATHS


@dataclass
class FunctionCgroupsConfig(WorkloadConfig):
    """What replaying requests into function cgroups needs: the cgroups'
    settings and the hops of a request."""
    working_set_kb: int = tunable(0, range=(0, None))
    cgroup_weight: int = tunable(100, range=CPU_WEIGHT_RANGE)
    cgroup_shares: Optional[int] = tunable(None, range=CPU_SHARES_RANGE)
    nice: int = tunable(0, range=NICE_RANGE)
    parent_cgroup: str = tunable(MISSING, pattern=CGROUP_PATH)
    # CFS bandwidth per function cgroup: v1 cpu.cfs_quota_us (null or -1: no
    # limit), cpu.cfs_period_us, cpu.cfs_burst_us; or v2 cpu.max, cpu.max.burst
    # (check_bandwidth)
    quota_us: Optional[int] = None
    period_us: Optional[int] = 100_000
    burst_us: Optional[int] = 0
    cpu_max: Optional[str] = None  # "max 100000", "15000 100000" or "15000"
    cpu_max_burst: Optional[int] = None
    # each function cgroup's cpuset.cpus: null (every CPU) | node: one NUMA
    # node's CPUs | llc: one LLC's, dealt in turn so each holds an equal
    # number of functions (sim/workloads/common.py function_cgroup)
    cpuset_spread: Optional[str] = tunable(None, choices=CPU_SET_LEVELS)
    # the hops of a request (sim/workloads/request_path.py): direct (threads
    # forked in the function cgroup) | knative (a pod: queue-proxy in, the
    # user container, queue-proxy out, each in its container's cgroup) |
    # bentoml (knative's pod running a BentoML service: API server, the
    # runner's batching dispatcher, PyTorch's threads) |
    # worker (the real backend's native worker: a dispatcher thread per cgroup) |
    # rdhashd (resctl-demo's rd-hashd: dispatch thread, worker pool, sleeps)
    request_path: str = tunable(DIRECT, choices=REQUEST_PATHS)
    # worker path: dispatcher CPU per request and per thread it creates
    # (null: the calibration profile's worker_dispatch_us, worker_thread_us,
    # else request_path.py's); rdhashd: dispatch_us per request or completion
    dispatch_us: Optional[float] = tunable(None, range=(0, None))
    thread_us: Optional[float] = tunable(None, range=(0, None))
    # rdhashd path: rd-hashd's per-request sleep, N(mean, ratio x mean)
    # clamped to [0, 2 mean], in three parts (null: rd-hashd's 20 ms, 0.33;
    # 0 drops the sleeps)
    sleep_mean_s: Optional[float] = tunable(None, range=(0, None))
    sleep_stdev_ratio: Optional[float] = tunable(None, range=(0, None))
    # bentoml path (null: the defaults in sim/workloads/request_path.py):
    # API server CPU per request in and out, runner event loop CPU per pass,
    # BentoML's runners.batching.max_batch_size and max_latency_ms, API
    # server workers and torch.set_num_threads (null: the container's CPUs)
    api_us: Optional[float] = tunable(None, range=(0, None))
    api_out_us: Optional[float] = tunable(None, range=(0, None))
    batch_us: Optional[float] = tunable(None, range=(0, None))
    max_batch_size: Optional[int] = tunable(None, range=(1, MAX_COUNT))
    max_latency_ms: Optional[float] = tunable(None, above=0)
    api_workers: Optional[int] = tunable(None, range=(1, MAX_COUNT))
    torch_threads: Optional[int] = tunable(None, range=(1, MAX_COUNT))
    # bentoml path: the PyTorch stage's OpenMP team, its regions and how its
    # threads wait at their barriers (sim/workloads/openmp.py; off by default)
    openmp: OpenMPConfig = field(default_factory=OpenMPConfig)
    # knative and bentoml paths: the CPU count the pod's runtimes size their
    # thread pools by (sim/workloads/pools.py; default: each runtime's own rule)
    pools: PoolsConfig = field(default_factory=PoolsConfig)

    @classmethod
    def check(cls, c, key: str) -> None:
        check_bandwidth(c, key)


@dataclass
class FunctionsConfig(FunctionCgroupsConfig):
    """Keys every workload of ``functions`` generated function cgroups has."""
    functions: int = tunable(MISSING, range=(1, MAX_COUNT))
    service: str = tunable("exp", choices=SERVICE_DISTRIBUTIONS)
    mean_service_s: float = tunable(MISSING, above=0)
    service_sigma: float = tunable(1.0, above=0)  # lognormal shape
    threads_per_request: int = tunable(1, range=(1, MAX_COUNT))

    @classmethod
    def footprint(cls, w, duration_s: float) -> list:
        """A cgroup per function, and the requests their rate makes."""
        terms = [Term("cgroup", w["functions"], "functions")]
        rate = cls.rate_per_function(w)
        if rate is not None:
            rps, key = rate
            terms.append(Term("request", w["functions"] * rps * duration_s, key))
        return terms

    @classmethod
    def rate_per_function(cls, w) -> tuple[float, str] | None:
        """(requests per second each function receives at most, the key
        that sets it), or None where no key says."""
        return None


@dataclass
class GeneratedConfig(FunctionsConfig):
    """Functions whose invocation trace the workload generates from the seed."""
    burstiness: float = tunable(1.0, above=0)  # inter-arrival coefficient of variation
    trace_file: Optional[str] = None  # set: replay this trace instead of generating one

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        if c.get(f"{key}.trace_file") is not None:
            c.require(f"{key}.trace_file", bool(c.get(f"{key}.trace_file")),
                      "must be a path (or null to generate the trace)")
