"""Context-switch cost model: the CPU time one switch takes on its core.

cost = direct + per_level x levels walked (put_prev/set_next up to the
common ancestor cgroup) + cache refill of the incoming task's working set
+ migration cost when the task last ran on another CPU.

The refill term models how much of the incoming task's working set was
evicted while it was away: the evicted fraction grows as 1 - exp(-away /
cache_decay), and is total after a migration.  A task that never ran has no
refill cost: its first misses are compulsory and belong to its own work.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    name: str = "ideal"
    direct_ns: int = 0
    per_level_ns: int = 0
    migration_ns: int = 0
    refill_ns_per_line: float = 0.0
    cache_line_bytes: int = 64
    max_refill_bytes: int = 0
    cache_decay_ns: int = 1

    @classmethod
    def from_config(cls, cal) -> CostModel:
        return cls(name=str(cal.get("name", "custom")), direct_ns=int(cal["direct_ns"]),
                   per_level_ns=int(cal["per_level_ns"]), migration_ns=int(cal["migration_ns"]),
                   refill_ns_per_line=float(cal["refill_ns_per_line"]),
                   cache_line_bytes=int(cal["cache_line_bytes"]),
                   max_refill_bytes=int(cal["max_refill_bytes"]),
                   cache_decay_ns=max(1, int(cal["cache_decay_ns"])))

    @property
    def is_ideal(self) -> bool:
        return (self.direct_ns == 0 and self.per_level_ns == 0 and self.migration_ns == 0
                and (self.refill_ns_per_line == 0 or self.max_refill_bytes == 0))

    def refill_ns(self, ws_bytes: int, away_ns: int | None, migrated: bool) -> int:
        if away_ns is None or self.refill_ns_per_line == 0:
            return 0
        lines = min(ws_bytes, self.max_refill_bytes) / self.cache_line_bytes
        evicted = 1.0 if migrated else -math.expm1(-away_ns / self.cache_decay_ns)
        return int(lines * evicted * self.refill_ns_per_line)

    def switch_cost_ns(self, levels: int, ws_bytes: int, away_ns: int | None,
                       migrated: bool) -> int:
        cost = self.direct_ns + self.per_level_ns * levels
        if migrated:
            cost += self.migration_ns
        return cost + self.refill_ns(ws_bytes, away_ns, migrated)
