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
        ``normal``."""
