"""A Host for controller unit tests: one container whose CPU usage per step
the test scripts, and whose cpu.max the controller reads and writes."""
from __future__ import annotations


class UsageHost:
    def __init__(self, quota_us: int | None = None, period_us: int = 100_000):
        self.now, self.usage_ns = 0, 0
        self.limit = (quota_us, period_us)
        self.writes: list[tuple[float, int, int]] = []   # (t_s, quota_us, period_us)

    def now_ns(self):
        return self.now

    def functions(self):
        return ["/ebizzy"]

    def cpu_usage_ns(self, cgroup):
        return self.usage_ns

    def cpu_max(self, cgroup):
        return self.limit

    def set_cpu_max(self, cgroup, quota_us, period_us, burst_us=0):
        self.limit = (quota_us, period_us)
        self.writes.append((self.now / 1e9, quota_us, period_us))

    def run(self, ctl, cores, interval_s: float):
        """One ``ctl.step`` per ``interval_s``, the container using each of
        ``cores`` in turn over the step."""
        for value in cores:
            self.now += round(interval_s * 1e9)
            self.usage_ns += round(value * interval_s * 1e9)
            ctl.step(self)
