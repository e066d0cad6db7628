"""The real backend's config (``backend=real``, scenarios/conf/backend/real.yaml,
docs/real-backend.md): every key with its type and default, said once here;
run_real reads it as this dataclass (``backend_keys``)."""
from dataclasses import dataclass
from typing import Optional

from sim.config import MISSING

# memory stall cycles: the PMU event the noisy-neighbor thesis's load
# heuristic sums ("stalled cycles caused by the memory subsystem": Eberhardt,
# "Mitigating the noisy neighbor problem", §3.4; Intel's
# cycle_activity.stalls_mem_any); backend.stall_event names another
STALL_EVENT = "cycle_activity.stalls_mem_any"


@dataclass
class RealBackend:
    """backend=real: this machine (backends/real/, docs/real-backend.md).
    scenarios/conf/backend/real.yaml selects it and sets nothing else: the
    defaults are these."""
    name: str = MISSING
    cpus: Optional[str] = None  # cpuset of the workers, e.g. "1" or "0-3"; null: every CPU
    # pin the load generator to this CPU; null: one outside cpus if there is one, else not pinned
    loadgen_cpu: Optional[int] = None
    # SCHED_FIFO priority of the replay thread (raised above the workers' rt_priority
    # under scheduler=rr); null: SCHED_OTHER
    loadgen_rt_priority: Optional[int] = 1
    perf: bool = True  # per-cgroup perf stat: context switches, migrations
    perf_interval_ms: int = 100  # perf stat -I resolution (fallback; the binding reads with the sampler)
    worker: Optional[str] = None  # native worker binary; null: build backends/workers/funcworker.c
    spin_us: int = 100  # busy-wait this long before each dispatch (timing precision)
    max_lateness_p99_s: Optional[float] = 0.002  # load-generator lateness bound (p99); null: none
    # when the bound is exceeded: reject (no run directory) | flag (loadgen_ok = false)
    lateness_action: str = "reject"
    grace_s: float = 5.0  # workers are killed duration_s + grace_s (+ a start margin) after they start
    # workload=noisy_jobs (backends/real/jobs.py): the PMU event of memory stall cycles
    # perf_counts reads, and how long each job class runs alone first to measure its speed
    stall_event: str = STALL_EVENT
    job_alone_s: float = 0.5
    # a run is flagged host_disturbed (backends/real/disturbance.py) when, over its
    # summary window, steal or other load exceed these fractions of the host's CPU
    # time, or a job shape's speed alone measured before and after the run spreads
    # by more than disturbed_alone_spread (slowest / fastest - 1), or the vCPUs
    # run rt-app's busy loop before or after the run more than
    # disturbed_speed_frac slower or faster than the calibration profile's
    # rtapp_loop_ns (the VM's speed moved: neighbours on the physical host, which
    # steal does not show)
    disturbed_steal_frac: float = 0.02
    disturbed_other_frac: float = 0.05
    disturbed_alone_spread: float = 0.10
    disturbed_speed_frac: float = 0.25
