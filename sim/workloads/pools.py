"""``workload.pools``: how many threads the runtimes in a function's pod
start, i.e. which CPU count they size their thread pools by (the ``knative``
and ``bentoml`` request paths, sim/workloads/request_path.py).

``sizing: runtime`` (the default): each runtime's own rule, which on a
Kubernetes node counts the host's CPUs unless the container has a CPU limit:

- queue-proxy (Go): GOMAXPROCS, the threads that run Go code at once, is the
  CPU count of the affinity mask (Go runtime, runtime/proc.go ``schedinit``:
  ``procs := ncpu``; ncpu from ``sched_getaffinity``, runtime/os_linux.go
  ``getproccount``).  queue-proxy calls go.uber.org/automaxprocs's
  ``maxprocs.Set()`` (knative/serving pkg/queue/sharedmain/main.go ``init``;
  cmd/queue/main.go in 1.3), which lowers it to the container's CPU quota,
  but Knative gives queue-proxy no CPU limit by default
  (pkg/deployment/config.go ``defaultConfig``: a 25m request, no limit; the
  1000m of config-deployment.yaml is in its ``_example`` block): the host's
  CPUs.
- BentoML 1.0 (the API server's workers and the runner's OMP_NUM_THREADS /
  MKL_NUM_THREADS): ``api_server.workers: ~`` is "the number of available CPU
  cores" (src/bentoml/_internal/configuration/default_configuration.yaml),
  and a CPU multi-threading runnable gets one worker with its thread
  variables set to ceil of the CPUs (src/bentoml/_internal/runner/strategy.py
  ``DefaultStrategy.get_worker_env``), both from
  src/bentoml/_internal/resource.py ``query_cgroup_cpu_count``: the
  container's cgroup quota if it has one, else ``os.cpu_count()``, the
  host's CPUs.
- PyTorch without BentoML would start one intra-op thread per physical core
  (aten/src/ATen/ParallelCommon.cpp ``intraop_default_num_threads`` ->
  c10/core/thread_pool.cpp ``TaskThreadPoolBase::defaultNumThreads``:
  cpuinfo's core count, the host's); under BentoML its OMP_NUM_THREADS wins.

``sizing: pod``: every pool sized to the pod's own CPUs, ceil(its CPU limit,
else its CPU request), at least 1: what a deployment that sets GOMAXPROCS
and OMP_NUM_THREADS from the pod's resources would run.  A pod with neither
(one host's function cgroups without a quota) keeps the host's CPUs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sim.config import tunable

SIZINGS = ("runtime", "pod")


@dataclass
class PoolsConfig:
    """``workload.pools`` (scenarios/conf/workload/pools/)."""
    sizing: str = tunable("runtime", choices=SIZINGS)


def _cpus(mcpu, host_cpus: int) -> int:
    return host_cpus if mcpu is None else max(1, min(host_cpus, math.ceil(mcpu / 1000)))


def pool_cpus(cfg: PoolsConfig, host_cpus: int, limit_mcpu: int | None,
              request_mcpu: int | None, reads_quota: bool) -> int:
    """The CPU count a runtime of a pod sizes its pools by: under
    ``runtime``, the container's quota if the runtime reads it
    (``reads_quota``: BentoML; queue-proxy's own container has none) and
    there is one, else the host's CPUs; under ``pod``, the pod's limit,
    else its request."""
    if cfg.sizing == "pod":
        return _cpus(limit_mcpu if limit_mcpu is not None else request_mcpu, host_cpus)
    return _cpus(limit_mcpu if reads_quota else None, host_cpus)
