"""The ``Host`` protocol: what a controller (policies/control/) sees of a
host and the only levers it may pull.  The simulator (backends/simhost.py)
and the real backend implement it, so one controller object runs unchanged
on both.

Cgroups are named by their path below the scenario's root (``/faas/func-3``),
as in requests.parquet and intervals.parquet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from omegaconf import DictConfig, OmegaConf


def plain_config(cfg) -> dict:
    """A run's scenario config as the plain dict both backends read: Hydra
    hands them a DictConfig (resolved here), tests and tools a mapping."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


@dataclass(frozen=True)
class CpuStat:
    """The throttling counters of cgroup ``cpu.stat`` (v2 names)."""
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_usec: int = 0


@dataclass(frozen=True)
class Completed:
    """Requests completed since the previous ``Host.completed()`` call:
    parallel arrays, one entry per request (dropped requests excluded)."""
    cgroup: np.ndarray       # str
    latency_s: np.ndarray    # float64
    end_s: np.ndarray        # float64


NO_ADMISSION = ("this workload does not support admission control (hold_jobs/admit_job): "
                "use workload=noisy_jobs")


@dataclass(frozen=True)
class PendingJob:
    """A job waiting for admission (``Host.pending_jobs``)."""
    cgroup: str
    arrival_s: float
    threads: int
    priority: bool = False   # the job's priority hint (the noisy-neighbor thesis §3.4: the only label a scheduler sees)


@dataclass(frozen=True)
class PerfCounts:
    """Cumulative perf counts of a cgroup.  Over an interval:
    IPC = dInstructions / dCycles; IPCE = 1 - dStallCycles / dCycles (memory
    stalls, the noisy-neighbor thesis §3.1.4, Eq. 3.4); IPC relative to alone = dAloneCycles / dCycles."""
    instructions: float = 0.0
    cycles: float = 0.0
    stall_cycles: float = 0.0
    alone_cycles: float = 0.0     # cycles the same instructions take alone (the model knows)
    llc_references: float = 0.0
    llc_misses: float = 0.0


@dataclass(frozen=True)
class RdtLimits:
    """resctrl info/: what RDT classes may use."""
    ways: int                     # info/L3/cbm_mask bits
    domains: tuple[int, ...]      # L3 domains (one per LLC / socket)
    num_closids: int              # root included
    min_cbm_bits: int
    mba_min: int                  # percent; 0 = no MBA
    mba_gran: int


class RdtError(OSError):
    """A rejected resctrl operation; ``str(e)`` is info/last_cmd_status."""


def trace_demand(trace, parent_cgroup: str) -> dict[str, float]:
    """``Host.function_demand`` of a run replaying ``trace`` (a table of
    sim.workloads.trace.TRACE_SCHEMA) with its functions under
    ``parent_cgroup`` ("/faas.slice", or "" at the root)."""
    if trace is None:
        raise ValueError("the workload is not trace-driven, so its future demand is unknown")
    demand = trace.column("demand_s").to_numpy() * trace.column("threads").to_numpy()
    totals: dict[str, float] = {}
    for name, d in zip(trace.column("function").to_pylist(), demand.tolist()):
        cgroup = f"{parent_cgroup}/{name}"
        totals[cgroup] = totals.get(cgroup, 0.0) + d
    return totals


def cores_of(cpus) -> dict[int, list[tuple[int, ...]]]:
    """``Host.cores_by_socket`` from (socket, core, cpu) triples."""
    out: dict[int, dict[int, list[int]]] = {}
    for socket, core, cpu in cpus:
        out.setdefault(socket, {}).setdefault(core, []).append(cpu)
    return {s: [tuple(sorted(v)) for _, v in sorted(cores.items())]
            for s, cores in sorted(out.items())}


def checked_cpuset(cgroup: str, cpus, host_cpus) -> frozenset | None:
    """``Host.set_cpuset``'s argument as a frozenset (None stays None),
    refused when it names CPUs outside ``host_cpus`` or none at all."""
    if cpus is None:
        return None
    allowed = frozenset(int(c) for c in cpus)
    if not allowed <= set(host_cpus):
        raise ValueError(f"cpuset {sorted(allowed)} names CPUs the host does not have "
                         f"(it has {sorted(host_cpus)})")
    if not allowed:
        raise ValueError(f"cgroup {cgroup}: cpuset leaves no CPU to run on")
    return allowed


class Host(Protocol):
    # --- what a controller may read ---------------------------------------
    def now_ns(self) -> int:
        """Host clock (simulated or CLOCK_MONOTONIC since the run started)."""

    def functions(self) -> list[str]:
        """The scenario's function cgroups (leaf cgroups that run its work)."""

    def function_demand(self) -> dict[str, float]:
        """CPU-seconds each function cgroup will ask for over the run, known
        in advance from the scenario's trace: offline knowledge that only
        offline baselines (lags_static) may use.  Raises ValueError when the
        workload is not trace-driven."""

    def cpu_usage_ns(self, cgroup: str) -> int:
        """cpuacct.usage (v2: cpu.stat usage_usec), hierarchical."""

    def cpu_stat(self, cgroup: str) -> CpuStat:
        """Bandwidth-control throttling counters of ``cgroup``."""

    def completed(self) -> Completed:
        """Requests that finished since the previous call."""

    # --- the levers -------------------------------------------------------
    def set_cpu_max(self, cgroup: str, quota_us: int | None, period_us: int,
                    burst_us: int = 0) -> None:
        """cpu.max / cpu.cfs_quota_us: quota None is unlimited ("max")."""

    def set_rt_policy(self, cgroup: str, policy: str, rt_priority: int = 50) -> None:
        """chrt for the cgroup's threads: ``rr`` (SCHED_RR at rt_priority) or
        ``normal``; running and queued threads switch class at once, and
        threads started later inherit the policy."""

    # --- topology and placement (the noisy-neighbor thesis's admission controllers, §3.4-3.5)
    def cores_by_socket(self) -> dict[int, list[tuple[int, ...]]]:
        """Physical cores of each socket, each as its hardware threads (CPU ids)."""

    def set_cpuset(self, cgroup: str, cpus: set[int] | None) -> None:
        """cpuset.cpus of the cgroup (None: every CPU): its live threads move
        off CPUs outside the set at once, and later threads start inside it."""

    def hold_jobs(self) -> None:
        """From now on arriving jobs wait for ``admit_job`` instead of starting
        (workloads that support admission: noisy_jobs).  Call it in start()."""

    def pending_jobs(self) -> list[PendingJob]:
        """Jobs that arrived and wait for admission, in arrival (FIFO) order."""

    def admit_job(self, cgroup: str, cpus: set[int] | None = None) -> None:
        """Start a pending job, its threads confined to ``cpus``."""

    # --- RDT: resctrl classes (CAT L3 CBM, MBA percent), CMT/MBM, perf ------
    # Raise backends.host.RdtError (an OSError) with resctrl's own wording
    # ("The mask 5 has non-consecutive 1-bits", "Out of CLOSIDs", ...).
    def rdt_info(self) -> RdtLimits:
        """What resctrl's info/ says: ways, domains (one per LLC), CLOSIDs, MB range."""

    def rdt_create_class(self, name: str, l3_cbm: int | dict[int, int],
                         mb_percent: int | dict[int, int] = 100,
                         exclusive: bool = False) -> None:
        """mkdir a control group; write its schemata (one CBM / MB value for
        every domain, or per domain); optionally mode=exclusive.  All or
        nothing: a rejected class is removed again."""

    def rdt_update_class(self, name: str, l3_cbm: int | dict[int, int] | None = None,
                         mb_percent: int | dict[int, int] | None = None) -> None:
        """Rewrite a class's schemata (None keeps that resource)."""

    def rdt_remove_class(self, name: str) -> None:
        """rmdir: its cgroups fall back to the root group (system/default)."""

    def rdt_assign(self, cgroup: str, name: str) -> None:
        """Move the cgroup's tasks to class ``name`` ("" = system/default)."""

    def rdt_class_of(self, cgroup: str) -> str:
        """The class the cgroup's tasks are in ("" = system/default)."""

    def rdt_mon(self, name: str) -> dict[int, dict[str, int]]:
        """Per domain: ``llc_occupancy`` (bytes now), ``mbm_total_bytes``,
        ``mbm_local_bytes`` (cumulative)."""

    def perf_counts(self, cgroup: str) -> PerfCounts:
        """Cumulative perf counters of the cgroup (instructions, cycles,
        memory stall cycles); IPC and IPCE over an interval come from deltas."""


class CpuMaxReading(Protocol):
    """An optional Host read (controllers check ``hasattr(host, "cpu_max")``)."""

    def cpu_max(self, cgroup: str) -> tuple[int | None, int]:
        """The cgroup's cpu.max: (quota_us, None for "max"; period_us)."""


class BandwidthTracing(Protocol):
    """An optional Host capability: in-kernel tracing of CFS bandwidth
    control, the hooks a kernel-level controller (the CATCloud thesis, Ch. 3)
    patches into fair.c.  The simulated host provides it (SimHost); a real
    host running an unpatched kernel does not, and controllers check with
    ``hasattr(host, "trace_bandwidth")`` and fall back to a user-space
    approximation (labelled as such in their summary columns)."""

    def bandwidth_slice_ns(self) -> int:
        """sched_cfs_bandwidth_slice: the chunk a CPU borrows from the pool."""

    def trace_bandwidth(self, cgroup: str, observer) -> None:
        """From now on, for the cgroup's own cfs_rqs (one per CPU):

        - ``observer.runtime_assigned(cpu, now_ns, exec_ns, throttled_ns,
          group_exec_ns)`` each time a cfs_rq borrows runtime from the
          group's pool (``__assign_cfs_rq_runtime``): ``exec_ns`` is the CPU
          time that cfs_rq has consumed so far (monotonic), ``throttled_ns``
          the length of the throttles of that cfs_rq that ended since its
          previous borrow (0 if none), ``group_exec_ns`` the CPU time of
          all the group's cfs_rqs;
        - ``observer.period_elapsed(now_ns, period_ns, runtime_ns, throttled)``
          at each expiry of the group's period timer: the period's length,
          the group's CPU time in it and whether any of its cfs_rqs was
          throttled in it.  The timer sleeps through periods in which
          nothing borrowed; those are not reported.

        Tracing follows cpu.max changes (a new period re-phases the
        boundaries); it only sees borrows while the group has a quota."""
