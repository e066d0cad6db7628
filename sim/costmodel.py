"""Context-switch cost model: the CPU time one switch takes on its core.

cost = direct + per_level x levels walked (put_prev/set_next up to the
common ancestor cgroup) + cache refill of the incoming task's working set
+ migration cost when the task last ran on another CPU
+ queue_ns_per_log2 x log2(runnable tasks on the CPU)
+ reinsert_ns_per_log2 x sum of log2(cfs_rq size) over the entities of
  the previous task that put_prev_entity re-inserts.

The run-queue term is the red-black-tree work of pick_next_task_fair:
put_prev_entity re-inserts the preempted entity, and set_next_entity takes
the next one out, at every level of the hierarchy, each O(log n) in the
entities queued there; in a dense host those sched_entities are cold, so
every step down a tree is a cache miss.  Summed over the levels, the tree
depths add up to about log2 of the runnable tasks on the CPU (log2 of the
product of the per-level queue lengths).  The LAGS paper traces its rising
per-switch cost to exactly this (seed 001 L152-161: "reinserting preempted
tasks involves multiple calls to put_prev_entity", and resctl is cheaper
per switch because it queues less, L147-148).  Without it the model cannot
make a switch costlier for a workload that queues more (docs/calibration.md).
It is 0 in the `default` and `ideal` profiles, which therefore behave as
before it existed.

The re-insertion term separates the part of that tree work the paper
names (L152-161): picking the leftmost entity is cheap, re-inserting the
preempted task "and its descendants" is not.  pick_next_task_fair walks
prev's and next's hierarchies up to their common cfs_rq and calls
put_prev_entity on prev's side at every level; an entity still queued
there (the task itself if it was preempted, a group entity whose cgroup
still has runnable tasks on the CPU) is put back into its cfs_rq's tree,
a descent of log2(entities queued) cold nodes.  The machine sums
log2(cfs_rq nr_running) over those re-insertions (``reinsert_log2``), so
a switch after a sleep re-inserts only the group levels that stay busy, a
switch between siblings only one level, and a preemption across cgroups
every level up to the common one.

The refill term models how much of the incoming task's working set was
evicted while it was away, in two forms that add up:

- time: the evicted fraction grows as 1 - exp(-away / cache_decay) (what
  the machine's other, unmodelled activity evicts), refilled at
  refill_ns_per_line per line of min(ws, max_refill_bytes);
- capacity (``cache_levels``, fitted by ``colosim calibrate``): a cache
  level of (effective) capacity C holds r = min(ws, C) of a task's working
  set (a thrash-resistant cache keeps a C-sized part of a larger one).
  While the task was away other tasks touched B bytes (each touches its
  working set once per run): those of its CPU for a private level, of the
  whole host for a shared one (the LLC; with several LLCs this
  over-counts).  Its resident lines' LRU stack distances then lie between B
  and r + B, so the fraction clip((r + B - C) / r, 0, 1) of them is gone
  and refilled from the level below at the level's ns_per_line (Mattson et
  al.'s stack-distance model, spread uniformly).  This is what the
  ping-pong microbenchmark shows on a real host: a working set that fits in
  L2 with its partner's costs nothing extra per switch, one that does not
  costs its L2 refill, whatever the time away.

A migration empties the private levels (and the time form).  A task that
never ran has no refill cost: its first misses are compulsory and belong
to its own work.

``idle_exit_ns`` is the time an idle CPU takes to start running a task
woken onto it (interrupt, idle-state exit; on a VM the vCPU's wake-up by
the hypervisor), charged to the switch out of idle.
"""
from __future__ import annotations

import cython

if cython.compiled:            # the C library's functions: no Python call, no boxing
    from cython.cimports.libc.math import expm1, log2
else:
    from math import expm1, log2


class CostModel:
    """A calibration profile's cost parameters (read-only once built)."""

    def __init__(self, name: str = "ideal", direct_ns: int = 0, per_level_ns: int = 0,
                 migration_ns: int = 0, refill_ns_per_line: float = 0.0,
                 cache_line_bytes: int = 64, max_refill_bytes: int = 0,
                 cache_decay_ns: int = 1, queue_ns_per_log2: float = 0.0,
                 cache_levels: tuple = (), idle_exit_ns: int = 0,
                 reinsert_ns_per_log2: float = 0.0):
        self.name = name
        self.direct_ns = direct_ns
        self.per_level_ns = per_level_ns
        self.migration_ns = migration_ns
        self.refill_ns_per_line = refill_ns_per_line
        self.cache_line_bytes = cache_line_bytes
        self.max_refill_bytes = max_refill_bytes
        self.cache_decay_ns = cache_decay_ns
        self.queue_ns_per_log2 = queue_ns_per_log2
        # ((capacity_bytes, ns_per_line, shared), ...), smallest level first
        self.cache_levels = tuple((int(c), float(r), bool(sh)) for c, r, sh in cache_levels)
        self.idle_exit_ns = idle_exit_ns
        self.reinsert_ns_per_log2 = reinsert_ns_per_log2

    def __repr__(self) -> str:
        return (f"CostModel({self.name!r}, direct_ns={self.direct_ns}, "
                f"per_level_ns={self.per_level_ns}, migration_ns={self.migration_ns}, "
                f"refill_ns_per_line={self.refill_ns_per_line}, "
                f"cache_line_bytes={self.cache_line_bytes}, "
                f"max_refill_bytes={self.max_refill_bytes}, "
                f"cache_decay_ns={self.cache_decay_ns}, "
                f"queue_ns_per_log2={self.queue_ns_per_log2}, "
                f"cache_levels={self.cache_levels}, idle_exit_ns={self.idle_exit_ns}, "
                f"reinsert_ns_per_log2={self.reinsert_ns_per_log2})")

    @classmethod
    def from_config(cls, cal) -> CostModel:
        return cls(name=str(cal.get("name", "custom")), direct_ns=int(cal["direct_ns"]),
                   per_level_ns=int(cal["per_level_ns"]), migration_ns=int(cal["migration_ns"]),
                   refill_ns_per_line=float(cal["refill_ns_per_line"]),
                   cache_line_bytes=int(cal["cache_line_bytes"]),
                   max_refill_bytes=int(cal["max_refill_bytes"]),
                   cache_decay_ns=max(1, int(cal["cache_decay_ns"])),
                   queue_ns_per_log2=float(cal.get("queue_ns_per_log2", 0.0) or 0.0),
                   cache_levels=tuple((int(lv["bytes"]), float(lv["ns_per_line"]),
                                       bool(lv.get("shared", False)))
                                      for lv in cal.get("cache_levels") or ()),
                   idle_exit_ns=int(cal.get("idle_exit_ns", 0) or 0),
                   reinsert_ns_per_log2=float(cal.get("reinsert_ns_per_log2", 0.0) or 0.0))

    @property
    def is_ideal(self) -> bool:
        return (self.direct_ns == 0 and self.per_level_ns == 0 and self.migration_ns == 0
                and self.queue_ns_per_log2 == 0 and self.idle_exit_ns == 0
                and self.reinsert_ns_per_log2 == 0
                and all(lv[1] == 0 for lv in self.cache_levels)
                and (self.refill_ns_per_line == 0 or self.max_refill_bytes == 0))

    def refill_ns(self, ws_bytes: int, away_ns: int | None, migrated: bool,
                  touched: int = 0, touched_shared: int = 0) -> int:
        """Refill cost of a task ``away_ns`` away (None: never ran) while the
        CPU's other tasks touched ``touched`` bytes and the host's
        ``touched_shared``."""
        if away_ns is None:
            return 0
        total = 0.0
        if self.refill_ns_per_line != 0:
            lines = min(ws_bytes, self.max_refill_bytes) / self.cache_line_bytes
            evicted = 1.0 if migrated else -expm1(-away_ns / self.cache_decay_ns)
            total = lines * evicted * self.refill_ns_per_line
        for capacity, ns_per_line, shared in self.cache_levels:
            resident = ws_bytes if ws_bytes < capacity else capacity
            if resident == 0:
                continue
            if migrated and not shared:
                evicted = 1.0
            else:
                evicted = (resident + (touched_shared if shared else touched) - capacity) \
                    / resident
                if evicted <= 0.0:
                    continue
                if evicted > 1.0:
                    evicted = 1.0
            total += resident / self.cache_line_bytes * evicted * ns_per_line
        return int(total)

    def switch_cost_ns(self, levels: int, ws_bytes: int, away_ns: int | None,
                       migrated: bool, nr_running: int = 0, touched: int = 0,
                       touched_shared: int = 0, reinsert_log2: float = 0.0) -> int:
        cost = self.direct_ns + self.per_level_ns * levels
        if self.reinsert_ns_per_log2:
            cost += int(self.reinsert_ns_per_log2 * reinsert_log2)
        if migrated:
            cost += self.migration_ns
        if self.queue_ns_per_log2 and nr_running > 1:
            cost += int(self.queue_ns_per_log2 * log2(nr_running))
        return cost + self.refill_ns(ws_bytes, away_ns, migrated, touched, touched_shared)
