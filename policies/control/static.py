"""A fixed CPU limit: every function cgroup gets the same cpu.max (quota and
period) and cpu.max.burst at t = 0 and keeps it; the baseline the
autoscalers (vpa, catcloud) are compared against, as the CATCloud thesis's
static settings (e.g. 100 or 200 millicores at a 100 ms period)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from policies.control import ControlConfig, Controller
from sim.sched_class import tunable

# cpu.cfs_period_us bounds in the kernel (1 ms .. 1 s)
PERIOD_RANGE_US = (1_000, 1_000_000)
MIN_QUOTA_US = 1_000              # the kernel refuses quotas under 1 ms


def set_cpu_cores(host, cgroup: str, cores: float, period_us: int) -> None:
    """cpu.max of ``cores`` CPUs at ``period_us``, as an autoscaler that
    speaks millicores writes it: quota = cores x period, at least the
    kernel's minimum."""
    host.set_cpu_max(cgroup, max(MIN_QUOTA_US, int(round(cores * period_us))), period_us)


@dataclass
class StaticConfig(ControlConfig):
    quota_us: Optional[int] = tunable(None, range=(1_000, None))  # null = max (no limit)
    period_us: int = tunable(100_000, range=PERIOD_RANGE_US)
    burst_us: int = tunable(0, range=(0, None))                    # cpu.max.burst


class Static(Controller):
    def start(self, host) -> None:
        quota = self.cfg.quota_us
        for cgroup in host.functions():
            host.set_cpu_max(cgroup, None if quota is None else int(quota),
                             int(self.cfg.period_us), int(self.cfg.burst_us))

    def summary(self) -> dict:
        quota = self.cfg.quota_us
        limit = float("nan") if quota is None else 1000.0 * quota / self.cfg.period_us
        return {"static_limit_mcpu": limit}


CONTROLLER = Static
CONFIG = StaticConfig
