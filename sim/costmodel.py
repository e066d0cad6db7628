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
product of the per-level queue lengths).  The LAGS paper ("Mitigating
context switching in densely packed Linux clusters with Latency-Aware Group
Scheduling", section 3.1) traces its rising per-switch cost to exactly this:
"reinserting preempted tasks involves multiple calls to put_prev_entity",
and resctl is cheaper per switch because it queues less.  Without it the model cannot
make a switch costlier for a workload that queues more (docs/calibration.md).
It is 0 in the `default` and `ideal` profiles, which therefore behave as
before it existed.

The re-insertion term separates the part of that tree work the paper
names (section 3.1): picking the leftmost entity is cheap, re-inserting the
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
the hypervisor), charged to the switch out of idle.  The switch to the
idle task costs the direct cost and the walk up prev's hierarchy only.

A task's timed sleep (nanosleep, rt-app's timers) ends with an hrtimer
expiry, which the machine times with two more terms (``Machine.timer_sleep``):
``timer_slack_ns``, how much later than asked the timer of a SCHED_OTHER task
expires (the kernel's default ``timer_slack_ns``, 50 us: the hrtimer is armed
over [expiry, expiry + slack] and, alone, fires at the end; an RT task gets
none, hrtimer_nanosleep()), and ``timer_irq_ns``, the hrtimer interrupt on
a busy CPU from the expiry to the wake-up (on a VM the exit of the running
vCPU and the interrupt's injection), during which that CPU runs no task.
On an idle CPU the interrupt is part of ``idle_exit_ns``, charged on the
switch out of idle.  Both are measured by calibration/bench/timerwake.py;
0 (off) unless a profile gives them.

On a VM these wake-ups scatter widely around their median (the this-vm
profile: the middle half of an idle CPU's wake-ups spans 0.84-1.17x the
median, the 1st to 99th percentile 0.48-2.28x).  A profile may give that scatter: ``idle_exit_spread`` and
``timer_irq_spread`` are a wake-up's ratios to the median at
``SPREAD_QUANTILES``, and the machine draws each idle exit and each busy
CPU's timer interrupt from them (inverse CDF, its own random stream per
kind), the median being the formula above.  Empty (the default): every
one is the median.

The parameters are defined once, in ``PARAMS`` below (name, kind, unit,
default, whether a profile must give it, lower bound, meaning): the
calibration schema (scenarios/schema.py), its range checks
(scenarios/validate.py) and the profile keys (calibration/profile.py) are
derived from it, and tests/test_costmodel.py checks that the compiled
fields of costmodel.pxd are the same.

Precision: costs are charged in whole nanoseconds.  A profile's costs,
times and sizes are whole ns and bytes: ``CostModel.from_config`` truncates
the fractional part a fitted profile may carry as it loads the profile
(``loaded``, the one place).  Rates (ns per line, per log2) stay floats,
and each term they give is truncated to whole ns as it is charged.  The
fits (calibration/fit.py, fit_lags_fig3.py) build a CostModel with float
costs directly and evaluate the same formula without truncation
(``switch_cost(..., whole_ns=False)``).
"""
from __future__ import annotations

from collections import namedtuple

import cython

if cython.compiled:            # the C library's functions: no Python call, no boxing
    from cython.cimports.libc.math import expm1, log2, trunc
else:
    from math import expm1, log2, trunc

# What a parameter is, which fixes how it is held and checked:
COST = "cost"      # ns charged as they are: whole ns (the precision rule, ``loaded``)
RATE = "rate"      # ns per unit of a per-switch quantity: a float; its term is truncated
TIME = "time"      # a time constant, whole ns
SIZE = "size"      # bytes, whole
LEVELS = "levels"  # the capacity refill model's cache levels
SPREAD = "spread"  # a cost's ratios to its median at SPREAD_QUANTILES; () none

# the cumulative probabilities of a spread's ratios: its ends are the
# measured 1st and 99th percentiles (a draw stays within them)
SPREAD_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)

CostParam = namedtuple("CostParam", "name kind unit default required minimum doc power_of_two",
                       defaults=(False,))
CostParam.__doc__ = """One cost-model parameter.  ``default``: its value in
``CostModel()`` (the ideal model) and, unless ``required``, when a profile
omits it.  ``minimum``: the smallest valid value (``power_of_two``: it must
also be one)."""

# The cost model's parameters, in the order of a profile's keys.
PARAMS = (
    CostParam("direct_ns", COST, "ns", 0, True, 0,
              "direct cost of every switch (state save/restore, pick_next_task)"),
    CostParam("per_level_ns", COST, "ns", 0, True, 0,
              "per cgroup-hierarchy level walked between prev and next (put_prev/set_next)"),
    CostParam("migration_ns", COST, "ns", 0, True, 0,
              "extra cost when the incoming task last ran on another CPU"),
    CostParam("refill_ns_per_line", RATE, "ns/line", 0.0, True, 0,
              "time form: refill cost per evicted line of the working set"),
    CostParam("cache_line_bytes", SIZE, "bytes", 64, True, 1,
              "cache line size", power_of_two=True),
    CostParam("max_refill_bytes", SIZE, "bytes", 0, True, 0,
              "time form: cap on the working set refilled per switch"),
    CostParam("cache_decay_ns", TIME, "ns", 1, True, 1,
              "time form: time constant of a task's cache footprint decay"),
    CostParam("queue_ns_per_log2", RATE, "ns/log2", 0.0, False, 0,
              "run-queue term: per doubling of the CPU's runnable tasks"),
    CostParam("reinsert_ns_per_log2", RATE, "ns/log2", 0.0, False, 0,
              "re-insertion term: per doubling of a cfs_rq put_prev_entity re-inserts into"),
    CostParam("cache_levels", LEVELS, "", (), False, None,
              "capacity form: [{name, bytes, ns_per_line, shared}], smallest level first"),
    CostParam("idle_exit_ns", COST, "ns", 0, False, 0,
              "wake-up of an idle CPU (interrupt, idle-state exit), charged to the switch "
              "out of idle"),
    CostParam("idle_exit_cold_ns", COST, "ns", 0, False, 0,
              "what that wake-up grows by the longer the CPU was idle (a deeper idle state; "
              "on a VM the halted vCPU's host side): + cold x (1 - exp(-idle / decay))"),
    CostParam("idle_exit_decay_ns", TIME, "ns", 1, False, 1,
              "time constant of that growth with the CPU's idle time"),
    CostParam("idle_exit_spread", SPREAD, "", (), False, None,
              "each idle exit's ratio to that median, drawn from these quantiles at "
              "SPREAD_QUANTILES (the VM's wake-ups scatter); empty: always the median"),
    CostParam("timer_slack_ns", COST, "ns", 0, False, 0,
              "hrtimer slack of a SCHED_OTHER task's timed sleep: its timer expires this "
              "much late (RT tasks: none)"),
    CostParam("timer_irq_ns", COST, "ns", 0, False, 0,
              "hrtimer interrupt on a busy CPU from a sleep timer's expiry to the wake-up; "
              "that CPU runs no task meanwhile (on an idle CPU: idle_exit_ns)"),
    CostParam("timer_irq_spread", SPREAD, "", (), False, None,
              "each such interrupt's ratio to timer_irq_ns, drawn as idle_exit_spread's"),
)
NAMES = tuple(p.name for p in PARAMS)
# the keys of one of ``cache_levels`` in a profile (``shared``: the LLC, kept
# on migration; optional, false)
CACHE_LEVEL_KEYS = ("name", "bytes", "ns_per_line", "shared")


def loaded(param: CostParam, raw):
    """A profile's value of ``param`` as the model holds it: whole ns and
    bytes truncate a fitted profile's fraction; rates stay floats."""
    if param.kind == LEVELS:
        return tuple((int(lv["bytes"]), float(lv["ns_per_line"]), bool(lv.get("shared", False)))
                     for lv in raw)
    if param.kind == RATE:
        return float(raw)
    if param.kind == SPREAD:
        return tuple(float(x) for x in raw)
    return int(raw)


def _charged(ns: float, whole_ns: bool) -> float:
    """A rate's term as charged: whole ns, or as is for the fits."""
    return trunc(ns) if whole_ns else ns


class CostModel:
    """A calibration profile's cost parameters (read-only once built).

    ``CostModel(name, **params)`` holds the given values as they are (the
    fits pass float costs); ``from_config`` loads a profile."""

    def __init__(self, name: str = "ideal", **params):
        unknown = sorted(set(params) - set(NAMES))
        if unknown:
            raise TypeError(f"CostModel has no parameter {', '.join(unknown)}; "
                            f"its parameters: {', '.join(NAMES)}")
        v = {p.name: params.get(p.name, p.default) for p in PARAMS}
        self.name = name
        # the C fields of costmodel.pxd, one per parameter
        self.direct_ns = v["direct_ns"]
        self.per_level_ns = v["per_level_ns"]
        self.migration_ns = v["migration_ns"]
        self.refill_ns_per_line = v["refill_ns_per_line"]
        self.cache_line_bytes = v["cache_line_bytes"]
        self.max_refill_bytes = v["max_refill_bytes"]
        self.cache_decay_ns = v["cache_decay_ns"]
        self.queue_ns_per_log2 = v["queue_ns_per_log2"]
        self.reinsert_ns_per_log2 = v["reinsert_ns_per_log2"]
        # ((capacity_bytes, ns_per_line, shared), ...): capacities are floats,
        # as the fits move them
        self.cache_levels = tuple((float(c), float(r), bool(sh)) for c, r, sh in v["cache_levels"])
        self.idle_exit_ns = v["idle_exit_ns"]
        self.idle_exit_cold_ns = v["idle_exit_cold_ns"]
        self.idle_exit_decay_ns = v["idle_exit_decay_ns"]
        self.idle_exit_spread = tuple(v["idle_exit_spread"])
        self.timer_slack_ns = v["timer_slack_ns"]
        self.timer_irq_ns = v["timer_irq_ns"]
        self.timer_irq_spread = tuple(v["timer_irq_spread"])

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}={getattr(self, p.name)}" for p in PARAMS)
        return f"CostModel({self.name!r}, {params})"

    @classmethod
    def from_config(cls, cal) -> CostModel:
        """The model of a calibration profile (a mapping of the calibration
        group's keys), its values ``loaded`` by the precision rule."""
        values = {}
        for p in PARAMS:
            raw = cal.get(p.name)
            if raw is not None:
                values[p.name] = loaded(p, raw)
            elif p.required:
                raise KeyError(f"calibration.{p.name} is required ({p.doc})")
        return cls(str(cal.get("name", "custom")), **values)

    @property
    def is_ideal(self) -> bool:
        """Every switch is free: every cost, rate and cache level's
        ns_per_line is 0."""
        return (all(getattr(self, p.name) == 0 for p in PARAMS if p.kind in (COST, RATE))
                and all(lv[1] == 0 for lv in self.cache_levels))

    def walk_ns(self, levels: int) -> float:
        """The direct cost and the cgroup levels walked."""
        return self.direct_ns + self.per_level_ns * levels

    def decay_lines(self, ws_bytes: int, away_ns: int, migrated: bool) -> float:
        """The time form's lines to refill: the evicted fraction of the
        capped working set (all of it after a migration)."""
        lines = min(ws_bytes, self.max_refill_bytes) / self.cache_line_bytes
        evicted = 1.0 if migrated else -expm1(-away_ns / self.cache_decay_ns)
        return lines * evicted

    def refill_ns(self, ws_bytes: int, away_ns: int, migrated: bool,
                  touched: int = 0, touched_shared: int = 0) -> float:
        """Refill cost of a task ``away_ns`` away (negative: it never ran)
        while the CPU's other tasks touched ``touched`` bytes and the host's
        ``touched_shared`` (fractional ns)."""
        if away_ns < 0:
            return 0.0
        total = 0.0
        if self.refill_ns_per_line != 0:
            total = self.decay_lines(ws_bytes, away_ns, migrated) * self.refill_ns_per_line
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
        return total

    def idle_exit(self, idle_ns: int, whole_ns: bool = True) -> float:
        """The wake-up of a CPU idle for ``idle_ns``: ``idle_exit_ns``, plus
        the cold term grown with the idle time (truncated as charged)."""
        if self.idle_exit_cold_ns == 0:
            return self.idle_exit_ns
        return self.idle_exit_ns + _charged(
            -self.idle_exit_cold_ns * expm1(-idle_ns / self.idle_exit_decay_ns), whole_ns)

    def switch_cost(self, levels: int, ws_bytes: int, away_ns: int, migrated: bool,
                    nr_running: int = 0, touched: int = 0, touched_shared: int = 0,
                    reinsert_log2: float = 0.0, from_idle: bool = False,
                    whole_ns: bool = True, idle_ns: int = 0) -> float:
        """The cost of a switch to a task (the formula of the module
        docstring); ``whole_ns``: each rate's term truncated as charged;
        ``idle_ns``: how long the CPU was idle, for a switch ``from_idle``."""
        cost = self.walk_ns(levels)
        if self.reinsert_ns_per_log2:
            cost += _charged(self.reinsert_ns_per_log2 * reinsert_log2, whole_ns)
        if migrated:
            cost += self.migration_ns
        if self.queue_ns_per_log2 and nr_running > 1:
            cost += _charged(self.queue_ns_per_log2 * log2(nr_running), whole_ns)
        cost += _charged(self.refill_ns(ws_bytes, away_ns, migrated, touched, touched_shared),
                         whole_ns)
        if from_idle:
            cost += self.idle_exit(idle_ns, whole_ns)
        return cost

    def switch_cost_ns(self, levels: int, ws_bytes: int, away_ns: int,
                       migrated: bool, nr_running: int = 0, touched: int = 0,
                       touched_shared: int = 0, reinsert_log2: float = 0.0,
                       from_idle: bool = False, idle_ns: int = 0) -> int:
        """What the machine charges for a switch to a task, in whole ns."""
        return cython.cast(cython.longlong, self.switch_cost(
            levels, ws_bytes, away_ns, migrated, nr_running, touched, touched_shared,
            reinsert_log2, from_idle, True, idle_ns))

    def idle_exit_ns_at(self, idle_ns: int, ratio: float = 1.0) -> int:
        """The whole ns of idle exit a switch out of ``idle_ns`` of idleness
        is charged, ``ratio`` times the median (a draw from
        ``idle_exit_spread``)."""
        return cython.cast(cython.longlong, self.idle_exit(idle_ns, True) * ratio)

    def switch_to_idle_ns(self, levels: int) -> int:
        """What the machine charges for a switch to the idle task: the walk
        up prev's ``levels``; nothing to refill."""
        return cython.cast(cython.longlong, self.walk_ns(levels))
