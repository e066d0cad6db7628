"""CFS, the Completely Fair Scheduler, as in kernel/sched/fair.c of Linux 5.18.

Hold this file next to fair.c: functions carry the kernel's names and follow
its order of operations.  Features on by default in 5.18 and modelled here:
GENTLE_FAIR_SLEEPERS, START_DEBIT, WAKEUP_PREEMPTION, LAST_BUDDY (and the
next buddy a preempting wakee always gets), ALT_PERIOD, BASE_SLICE, LB_MIN.
HRTICK (off by default in the kernel) is an option.  Not modelled: the skip
buddy (no sched_yield), SIS_PROP scan limits, wake_affine (no waker is
modelled), active balancing of running tasks, misfit and asym-packing
balancing, and util-based balancing (load and task counts only).

The timeline is a binary heap (sim/heap.py) keyed by vruntime with lazy
deletion: an entry is live while its sequence number equals the entity's
``rb_seq``.

CFS bandwidth control (cpu.max) is in sim/bandwidth.py; this file has fair.c's
call sites: account_cfs_rq_runtime() in update_curr(), check_enqueue_throttle()
on a cfs_rq's first enqueue, check_cfs_rq_runtime() in put_prev_entity() and
in the pick's walk, return_cfs_rq_runtime() on its last dequeue, the stops at
a throttled cfs_rq in enqueue_task()/dequeue_task(), and throttled_lb_pair().
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import cython

from sim.bandwidth import CfsBandwidthControl
from sim.sched_class import KernelScheduler, SchedConfig, tunable
from sim.sched_flags import (CPU_IDLE, CPU_NEWLY_IDLE, CPU_NOT_IDLE, DEQUEUE_DELAYED,
                             DEQUEUE_SLEEP, DEQUEUE_SPECIAL, ENQUEUE_INITIAL, ENQUEUE_MIGRATED,
                             ENQUEUE_WAKEUP, WF_FORK)
from sim.heap import Heap, Node, NodeStack
from sim.rq import MIN_SHARES, NICE_0_LOAD, CfsRq, Rq

SCHED_LATENCY_NS = 6_000_000
SCHED_MIN_GRANULARITY_NS = 750_000
SCHED_WAKEUP_GRANULARITY_NS = 1_000_000
BUSY_FACTOR = 16                 # sd_init() since v5.10
IMBALANCE_PCT = 117
MAX_LOAD_BALANCE_INTERVAL_MS_PER_CPU = 100   # update_max_interval(): HZ*ncpus/10 jiffies
SCHED_NR_MIGRATE = 32           # sysctl_sched_nr_migrate
MAX_PINNED_INTERVAL_MS = 512    # the back-off's cap when every task was pinned
# how a load_balance() ended, for the back-off of sd->balance_interval:
# it found an imbalance (moved or not), found none, or every task it could
# have moved was pinned (the kernel's out_balanced / LBF_ALL_PINNED)
LB_UNBALANCED, LB_BALANCED, LB_ALL_PINNED = 0, 1, 2
# LOAD_AVG_PERIOD (32 ms): how often idle CPUs' blocked load is refreshed
# (nohz.next_blocked)
LOAD_AVG_PERIOD_NS = 32 * 1024 * 1000


# kernel/sysctl.c bounds of the granularity sysctls
GRANULARITY_RANGE_NS = (100_000, 1_000_000_000)
WAKEUP_GRANULARITY_RANGE_NS = (0, 1_000_000_000)
TUNABLE_SCALING = ("none", "log", "linear")


@dataclass
class FairConfig(SchedConfig):
    """The keys every fair class built on this CFS model reads (CFS, EEVDF
    and CFS-LAGS)."""
    # sysctl_sched_tunable_scaling: how the slice sysctls whose default is
    # None scale with the CPU count (sysctl_factor; under log the factor is
    # 1 + ilog2(min(ncpus, 8)))
    tunable_scaling: str = tunable("log", choices=TUNABLE_SCALING)
    wakeup_preemption: bool = tunable(True)      # WAKEUP_PREEMPTION
    # HRTICK: end each slice exactly with a high-resolution timer (off in
    # the kernel's default features; preemption then waits for the next
    # tick at HZ)
    hrtick: bool = tunable(False)


@dataclass
class CfsConfig(FairConfig):
    """The sysctls and sched_features of CFS.  ``None`` granularities are the
    kernel defaults (SCHED_LATENCY_NS, SCHED_MIN_GRANULARITY_NS,
    SCHED_WAKEUP_GRANULARITY_NS) times the tunable_scaling factor
    (sysctl_factor)."""
    sched_latency_ns: Optional[int] = tunable(None, range=GRANULARITY_RANGE_NS)
    min_granularity_ns: Optional[int] = tunable(None, range=GRANULARITY_RANGE_NS)
    wakeup_granularity_ns: Optional[int] = tunable(None, range=WAKEUP_GRANULARITY_RANGE_NS)
    gentle_fair_sleepers: bool = tunable(True)   # sched_features
    start_debit: bool = tunable(True)


def scaled(value: Optional[int], kernel_default: int, factor: int) -> int:
    """A granularity sysctl: its configured value, or (None) the kernel's
    default times the tunable_scaling factor, as update_sysctl() sets it."""
    return kernel_default * factor if value is None else int(value)


def sysctl_factor(ncpus: int, scaling: str) -> int:
    """get_update_sysctl_factor(): the CPU count is capped at 8."""
    cpus = min(ncpus, 8)
    if scaling == "none":
        return 1
    if scaling == "linear":
        return cpus
    if scaling == "log":
        return 1 + cpus.bit_length() - 1
    raise ValueError(f"scheduler.tunable_scaling = {scaling!r}: choose from none, log, linear")


def set_next_buddy(se):
    while se is not None:
        se.cfs_rq.next = se
        se = se.parent


def set_last_buddy(se):
    while se is not None:
        se.cfs_rq.last = se
        se = se.parent


def find_matching_se(se, pse):
    """find_matching_se(): walk both entities up to the first cfs_rq they share."""
    while se.depth > pse.depth:
        se = se.parent
    while pse.depth > se.depth:
        pse = pse.parent
    while se.cfs_rq is not pse.cfs_rq:
        se = se.parent
        pse = pse.parent
    return se, pse


class RbNode(Node):
    """A timeline entry: ``se`` queued at vruntime ``key``; live while
    ``se.rb_seq`` is still this entry's ``seq`` (lazy deletion)."""

    __slots__ = ("se",)


def rb_node(vruntime: int, seq: int, se, spare: NodeStack) -> RbNode:
    """A timeline entry, a spare one if there is one (an entry popped as
    stale is kept for reuse: one enqueue in two would otherwise allocate)."""
    node = spare.pop()
    if node is None:
        # __new__: compiled, a direct allocation instead of a generic
        # constructor call with its argument tuple
        node = RbNode.__new__(RbNode)
    node.key = vruntime
    node.seq = seq
    node.se = se
    return node


class CFS(KernelScheduler):
    name = "cfs"

    def __init__(self, cfg, machine):
        super().__init__(cfg, machine)
        self.factor = sysctl_factor(machine.topology.nr_cpus, cfg.tunable_scaling)
        self.wakeup_preemption = bool(cfg.wakeup_preemption)
        self.hrtick = bool(cfg.hrtick)
        self.init_sysctls(cfg)
        self.cache_nice_tries = 1
        self._rb_seq = 0               # the last timeline token handed out
        self._spare_nodes = NodeStack()  # stale timeline entries, for reuse
        self.clock = machine.engine
        # rq->leaf_cfs_rq_list, reduced to the cfs_rqs whose load is blocked
        # (nothing queued, load not yet decayed): only they need
        # update_blocked_averages to decay and republish their load
        self.blocked_cfs_rqs: list[dict] = [{} for _ in machine.rqs]
        # the sched domains are fixed: their spans and intervals are read
        # once, not on every balance
        topology = machine.topology
        self.domains = topology.domains
        # sd->balance_interval of each CPU's levels, in ms: sd_init() starts
        # it at the span weight, where it stays without the back-off
        # (SchedConfig.balance_backoff)
        self.balance_backoff = bool(cfg.balance_backoff)
        # a task's load attached to or removed from a group reaches the
        # root at once (SchedConfig.pelt_propagate)
        self.pelt_propagate = bool(cfg.pelt_propagate)
        # an idle CPU's balance evens out the run queues' lengths
        # (SchedConfig.migrate_task_half)
        self.migrate_task_half = bool(cfg.migrate_task_half)
        # fork placement by group class and load (SchedConfig.find_idlest_group)
        self.find_idlest_group = bool(cfg.find_idlest_group)
        self.sd_balance_interval = [[sd.interval_ms for sd in d] for d in topology.domains]
        self.max_lb_interval_ms = MAX_LOAD_BALANCE_INTERVAL_MS_PER_CPU * topology.nr_cpus
        self.lb_result = LB_UNBALANCED
        self.next_blocked = 0
        # CFS bandwidth control (cpu.max), for the groups that get a quota
        self.bandwidth = CfsBandwidthControl(self, machine, cfg.sched_cfs_bandwidth_slice_us)

    def init_sysctls(self, cfg):
        """The class's own sysctls and sched_features (5.18's: the slice
        granularities, GENTLE_FAIR_SLEEPERS, START_DEBIT); a fair class of
        another kernel version overrides it with its own."""
        factor = self.factor
        self.sched_latency = scaled(cfg.sched_latency_ns, SCHED_LATENCY_NS, factor)
        self.min_granularity = scaled(cfg.min_granularity_ns, SCHED_MIN_GRANULARITY_NS, factor)
        self.wakeup_granularity = scaled(cfg.wakeup_granularity_ns,
                                         SCHED_WAKEUP_GRANULARITY_NS, factor)
        # sched_nr_latency = DIV_ROUND_UP(latency, min_granularity)
        self.sched_nr_latency = -(-self.sched_latency // self.min_granularity)
        self.gentle_fair_sleepers = bool(cfg.gentle_fair_sleepers)
        self.start_debit = bool(cfg.start_debit)

    # ------------------------------------------------------------------
    # timeline (the rbtree): the kernel's __enqueue_entity,
    # __dequeue_entity and __pick_first_entity, hooks that EEVDF and LAGS
    # override to keep their own orderings
    def _next_seq(self):
        """A fresh timeline token: tells a live entry from a stale one, and
        orders entities queued at the same key."""
        self._rb_seq += 1
        return self._rb_seq

    def _enqueue_timeline(self, cfs_rq, se):
        seq = self._next_seq()
        se.rb_seq = seq
        # CFS's timelines are Heaps (the field is untyped: EEVDF keeps another kind)
        cython.cast(Heap, cfs_rq.timeline).push(rb_node(se.vruntime, seq, se, self._spare_nodes))

    def _dequeue_timeline(self, cfs_rq, se):
        se.rb_seq = 0

    def _pick_first_entity(self, cfs_rq):
        timeline = cfs_rq.timeline
        while timeline.n:
            # only RbNodes are queued: compiled, no type test per read
            node = cython.cast(RbNode, timeline.items[0])
            se = node.se
            if se.rb_seq == node.seq:
                return se
            self._spare_nodes.push(timeline.pop())
        return None

    # ------------------------------------------------------------------
    # time accounting
    def calc_delta_fair(self, delta, se):
        w = se.weight
        return delta if w == NICE_0_LOAD else delta * NICE_0_LOAD // w

    def _sched_period(self, nr_running):
        """fair.c's __sched_period() (one underscore: Python would mangle two)."""
        if nr_running > self.sched_nr_latency:
            return nr_running * self.min_granularity
        return self.sched_latency

    def sched_slice(self, cfs_rq, se):
        # ALT_PERIOD: the period follows the number of tasks on the CPU
        nr_running = cfs_rq.rq.cfs.h_nr_running
        slice_ = self._sched_period(nr_running + (not se.on_rq))
        while se is not None:
            load = se.cfs_rq.load_weight
            if not se.on_rq:
                load += se.weight
            slice_ = slice_ * se.weight // load
            se = se.parent
        # BASE_SLICE
        return max(slice_, self.min_granularity)

    def sched_vslice(self, cfs_rq, se):
        return self.calc_delta_fair(self.sched_slice(cfs_rq, se), se)

    def update_min_vruntime(self, cfs_rq):
        curr = cfs_rq.curr
        vruntime = cfs_rq.min_vruntime
        if curr is not None:
            if curr.on_rq:
                vruntime = curr.vruntime
            else:
                curr = None
        leftmost = self._pick_first_entity(cfs_rq)
        if leftmost is not None:
            vruntime = leftmost.vruntime if curr is None else min(vruntime, leftmost.vruntime)
        if vruntime > cfs_rq.min_vruntime:
            cfs_rq.min_vruntime = vruntime

    def _update_curr(self, cfs_rq):
        curr = cfs_rq.curr
        if curr is None:
            return
        now = self.clock._now
        delta_exec = now - curr.exec_start
        if delta_exec <= 0:
            return
        curr.exec_start = now
        curr.sum_exec_runtime += delta_exec
        w = curr.weight
        curr.vruntime += delta_exec if w == NICE_0_LOAD else delta_exec * NICE_0_LOAD // w
        self.update_min_vruntime(cfs_rq)
        task = curr.task
        if task is not None:
            task.tg.usage_ns += delta_exec     # cpuacct_charge()
        if cfs_rq.runtime_enabled:
            self.bandwidth.account_cfs_rq_runtime(cfs_rq, delta_exec)

    def update_curr(self, rq):
        curr = rq.curr
        if curr is not None:
            se = curr.se
            while se is not None:
                self._update_curr(se.cfs_rq)
                se = se.parent

    # ------------------------------------------------------------------
    # PELT and group shares
    def update_load_avg(self, cfs_rq, se):
        now = self.clock._now
        cfs_rq.update_load_avg(now)
        se.update_avg(now)
        cfs_rq.update_tg_load_avg()

    def calc_group_shares(self, cfs_rq):
        tg = cfs_rq.tg
        tg_shares = tg.shares
        load = max(cfs_rq.load_weight, cfs_rq.load_avg)
        tg_weight = tg.load_avg - cfs_rq.tg_load_avg_contrib + load
        shares = tg_shares * load / tg_weight if tg_weight > 0 else tg_shares
        if shares < MIN_SHARES:
            return MIN_SHARES
        return tg_shares if shares > tg_shares else int(shares)

    def reweight_entity(self, cfs_rq, se, weight):
        now = self.clock._now
        if se.on_rq:
            if cfs_rq.curr is se:
                self._update_curr(cfs_rq)
            cfs_rq.update_load_avg(now)
            cfs_rq.load_weight += weight - se.weight
        else:
            cfs_rq.update_load_avg(now)
        se.update_avg(now)
        # the entity's load_avg is weight x runnable_avg: move the cfs_rq sum with it
        cfs_rq.load_avg = max(0.0, cfs_rq.load_avg + (weight - se.weight) * se.runnable_avg)
        se.weight = weight

    def update_cfs_group(self, se):
        gcfs_rq = se.my_q
        if gcfs_rq is None:
            return
        gcfs_rq.update_load_avg(self.clock._now)
        shares = self.calc_group_shares(gcfs_rq)
        if shares != se.weight:
            self.reweight_entity(se.cfs_rq, se, shares)

    # ------------------------------------------------------------------
    # entity enqueue/dequeue
    def place_entity(self, cfs_rq, se, initial):
        vruntime = cfs_rq.min_vruntime
        if initial and self.start_debit:
            vruntime += self.sched_vslice(cfs_rq, se)
        if not initial:
            thresh = self.sched_latency
            if self.gentle_fair_sleepers:
                thresh >>= 1
            vruntime -= thresh
        if vruntime > se.vruntime:
            se.vruntime = vruntime

    def enqueue_entity(self, cfs_rq, se, flags):
        renorm = not (flags & ENQUEUE_WAKEUP) or (flags & ENQUEUE_MIGRATED)
        curr = cfs_rq.curr is se
        if renorm and curr:
            se.vruntime += cfs_rq.min_vruntime
        self._update_curr(cfs_rq)
        if renorm and not curr:
            se.vruntime += cfs_rq.min_vruntime
        self.update_load_avg(cfs_rq, se)
        self.update_cfs_group(se)
        cfs_rq.load_weight += se.weight
        cfs_rq.nr_running += 1
        se.on_rq = True
        if flags & ENQUEUE_WAKEUP:
            self.place_entity(cfs_rq, se, False)
        if not curr:
            self._enqueue_timeline(cfs_rq, se)

    def dequeue_entity(self, cfs_rq, se, flags):
        self._update_curr(cfs_rq)
        self.update_load_avg(cfs_rq, se)
        self.clear_buddies(cfs_rq, se)
        if se is not cfs_rq.curr:
            self._dequeue_timeline(cfs_rq, se)
        se.on_rq = False
        cfs_rq.load_weight -= se.weight
        cfs_rq.nr_running -= 1
        if not (flags & DEQUEUE_SLEEP):
            se.vruntime -= cfs_rq.min_vruntime
        self.update_cfs_group(se)
        self.update_min_vruntime(cfs_rq)
        return True

    def set_next_entity(self, cfs_rq, se):
        if se.on_rq:
            self._dequeue_timeline(cfs_rq, se)
            self.update_load_avg(cfs_rq, se)
        cfs_rq.curr = se
        se.exec_start = self.clock._now
        se.prev_sum_exec_runtime = se.sum_exec_runtime

    def put_prev_entity(self, cfs_rq, prev):
        if prev.on_rq:
            self._update_curr(cfs_rq)
            if cfs_rq.runtime_enabled:
                # throttle cfs_rqs exceeding runtime
                self.bandwidth.check_cfs_rq_runtime(cfs_rq)
            self._enqueue_timeline(cfs_rq, prev)
            self.update_load_avg(cfs_rq, prev)
        elif cfs_rq.runtime_enabled:
            self.bandwidth.check_cfs_rq_runtime(cfs_rq)
        cfs_rq.curr = None

    def clear_buddies(self, cfs_rq, se):
        if cfs_rq.last is se:
            s = se
            while s is not None and s.cfs_rq.last is s:
                s.cfs_rq.last = None
                s = s.parent
        if cfs_rq.next is se:
            s = se
            while s is not None and s.cfs_rq.next is s:
                s.cfs_rq.next = None
                s = s.parent

    def entity_before(self, a, b):
        return a.vruntime < b.vruntime

    def wakeup_preempt_buddy(self, buddy, left):
        """pick_next_entity()'s wakeup_preempt_entity() test of a buddy
        against the leftmost entity; a policy that orders entities by
        something other than vruntime overrides it with entity_before."""
        return self.wakeup_preempt_entity(buddy, left)

    def pick_next_entity(self, cfs_rq, curr):
        left = self._pick_first_entity(cfs_rq)
        if left is None or (curr is not None and self.entity_before(curr, left)):
            left = curr
        se = left
        # prefer the last buddy: give the CPU back to a preempted task
        last = cfs_rq.last
        if last is not None and self.wakeup_preempt_buddy(last, left) < 1:
            se = last
        # someone really wants this to run: if it is not unfair, run it
        nxt = cfs_rq.next
        if nxt is not None and self.wakeup_preempt_buddy(nxt, left) < 1:
            se = nxt
        if last is not None or nxt is not None:
            self.clear_buddies(cfs_rq, se)
        return se

    # ------------------------------------------------------------------
    # task-level interface
    def set_task_rq(self, p, cpu):
        tg = p.tg
        se = p.se
        cfs_rq = tg.cfs_rq[cpu]
        # the entity's PELT timestamp moves to the new cfs_rq's clock (they
        # differ by the time each spent throttled; a new task's is the CPU's)
        now = self.clock._now
        old_clock = now if se.cfs_rq is None else se.cfs_rq.cfs_rq_clock_pelt(now)
        se.avg_last_update += cfs_rq.cfs_rq_clock_pelt(now) - old_clock
        se.cfs_rq = cfs_rq
        se.parent = tg.se[cpu]
        se.depth = tg.depth

    def _move_entity_load_avg(self, se, sign):
        cfs_rq = se.cfs_rq
        now = self.clock._now
        cfs_rq.update_load_avg(now)
        se.update_avg(now)
        cfs_rq.load_avg = max(0.0, cfs_rq.load_avg + sign * se.weight * se.runnable_avg)
        if sign < 0:
            self.blocked_cfs_rqs[cfs_rq.cpu][cfs_rq] = None
        if self.pelt_propagate and cfs_rq.se is not None:
            self.propagate_entity_load_avg(cfs_rq, sign * se.runnable_avg)

    def propagate_entity_load_avg(self, gcfs_rq, runnable):
        """add_tg_cfs_propagate() and, level by level up to the root,
        propagate_entity_load_avg()'s update_tg_cfs_load(): a task's
        runnable average attached to (``runnable`` > 0) or removed from (< 0)
        group cfs_rq ``gcfs_rq`` reaches every ancestor's load at once, so
        the balancer sees a new, arriving or departed task in the CPU's load
        as the kernel does, not after its group entity's average catches up.
        Attached, the group entity becomes more runnable, up to always;
        removed, it is taken to be as runnable as the weight still queued in
        its group on average, never more than it was (0 when the group is
        empty: the kernel keeps the entity's running average there, which
        the simulator does not track).  The kernel applies the removal at the
        group's next blocked-load update, which every balance does first
        (update_blocked_averages), so the balancer reads the same."""
        now = self.clock._now
        se = gcfs_rq.se
        while se is not None:
            cfs_rq = se.cfs_rq
            cfs_rq.update_load_avg(now)
            se.update_avg(now)
            old = se.runnable_avg
            if runnable >= 0:
                new = min(1.0, old + runnable)
            elif gcfs_rq.load_weight > 0:
                new = min(old, gcfs_rq.load_avg / gcfs_rq.load_weight)
            else:
                new = 0.0
            se.runnable_avg = new
            cfs_rq.load_avg = max(0.0, cfs_rq.load_avg + se.weight * (new - old))
            if cfs_rq.se is not None:
                cfs_rq.update_tg_load_avg()
                if runnable < 0:
                    self.blocked_cfs_rqs[cfs_rq.cpu][cfs_rq] = None
            gcfs_rq = cfs_rq
            se = cfs_rq.se

    def update_blocked_averages(self, cpu):
        """update_blocked_averages(): decay the load of cfs_rqs with nothing
        queued and publish it to tg->load_avg, so other CPUs' group shares
        stop counting load that left; a fully decayed cfs_rq leaves the list
        (cfs_rq_is_decayed)."""
        now = self.clock._now
        blocked = self.blocked_cfs_rqs[cpu]
        for cfs_rq in list(blocked):
            cfs_rq.update_load_avg(now)
            if cfs_rq.nr_running:
                del blocked[cfs_rq]       # queued again: its own updates publish it
            elif cfs_rq.load_avg < 1.0:
                cfs_rq.load_avg = 0.0
                del blocked[cfs_rq]
            cfs_rq.update_tg_load_avg()

    def attach_entity_load_avg(self, se):
        """Bring an arriving (new or migrated) task's load to its cfs_rq."""
        self._move_entity_load_avg(se, 1)

    def remove_entity_load_avg(self, se):
        """Take a departing task's (blocked) load out of its cfs_rq."""
        self._move_entity_load_avg(se, -1)

    def migrate_task_rq(self, p, new_cpu):
        """migrate_task_rq_fair(): the task moves to another CPU.  Its load
        leaves the old cfs_rq; a waking task's vruntime becomes relative."""
        se = p.se
        self.remove_entity_load_avg(se)
        if p.sleeping:
            se.vruntime -= se.cfs_rq.min_vruntime
        self.set_task_rq(p, new_cpu)

    def task_dead(self, p):
        """task_dead_fair()"""
        self.remove_entity_load_avg(p.se)

    def switched_from_fair(self, p):
        """detach_task_cfs_rq(): the task's load leaves its cfs_rq, and a
        sleeping task's vruntime becomes relative (a queued one's already
        is: it was dequeued without DEQUEUE_SLEEP)."""
        se = p.se
        self.remove_entity_load_avg(se)
        if p.sleeping:
            se.vruntime -= se.cfs_rq.min_vruntime

    def switched_to_fair(self, p):
        """attach_task_cfs_rq(): the reverse; a queued task's vruntime was
        made absolute again by its enqueue."""
        se = p.se
        self.attach_entity_load_avg(se)
        if p.sleeping:
            se.vruntime += se.cfs_rq.min_vruntime

    def set_next_task(self, rq, p):
        """set_next_task_fair()"""
        se = p.se
        while se is not None:
            self.set_next_entity(se.cfs_rq, se)
            se = se.parent

    def task_fork_fair(self, cfs_rq, se):
        """task_fork_fair(), run at the new task's first enqueue on the CPU
        it was given: it starts a vslice after min_vruntime (relative, as
        enqueue_entity renormalises it; init_entity_runnable_average()
        already gave it full load)."""
        se.vruntime = 0
        self.place_entity(cfs_rq, se, True)
        se.vruntime -= cfs_rq.min_vruntime

    def enqueue_task(self, rq, p, flags):
        se = p.se
        if flags & (ENQUEUE_MIGRATED | ENQUEUE_INITIAL):
            self.attach_entity_load_avg(se)
        initial = flags & ENQUEUE_INITIAL
        while se is not None and not se.on_rq:
            cfs_rq = se.cfs_rq
            if initial:
                self.task_fork_fair(cfs_rq, se)
                initial = 0
            self.enqueue_entity(cfs_rq, se, flags)
            cfs_rq.h_nr_running += 1
            if cfs_rq.runtime_enabled:
                if cfs_rq.nr_running == 1:
                    self.bandwidth.check_enqueue_throttle(cfs_rq)
                if cfs_rq.throttled:
                    return            # queued, but not runnable until unthrottled
            flags = ENQUEUE_WAKEUP
            se = se.parent
        while se is not None:
            cfs_rq = se.cfs_rq
            self.update_load_avg(cfs_rq, se)
            self.update_cfs_group(se)
            cfs_rq.h_nr_running += 1
            if cfs_rq.throttled:
                return
            se = se.parent
        rq.nr_running += 1

    def dequeue_task(self, rq, p, flags):
        """False if the task stays queued (EEVDF's DELAY_DEQUEUE)."""
        return self.dequeue_entities(rq, p.se, flags)

    def dequeue_entities(self, rq, se, flags):
        """dequeue_entities(): take ``se`` (a task, or an EEVDF group
        entity left delayed) off its cfs_rq and the ancestors it empties.
        An entity dequeue_entity() keeps queued (DELAY_DEQUEUE) stops the
        walk: a task's then changes nothing else (False); a group's keeps
        its place while the levels above lose the task."""
        h_nr = 1 if se.task is not None else se.my_q.h_nr_running
        task_se = se if se.task is not None else None
        while se is not None:
            cfs_rq = se.cfs_rq
            if not self.dequeue_entity(cfs_rq, se, flags):
                if se is task_se:
                    return False
                break
            cfs_rq.h_nr_running -= h_nr
            se = se.parent
            if cfs_rq.runtime_enabled:
                if not cfs_rq.nr_running:
                    self.bandwidth.return_cfs_rq_runtime(cfs_rq)
                if cfs_rq.throttled:
                    return True
            if cfs_rq.load_weight:
                # don't dequeue the parent while it has other entities
                break
            self.blocked_cfs_rqs[cfs_rq.cpu][cfs_rq] = None
            flags = (flags | DEQUEUE_SLEEP) & ~(DEQUEUE_DELAYED | DEQUEUE_SPECIAL)
        while se is not None:
            cfs_rq = se.cfs_rq
            self.update_load_avg(cfs_rq, se)
            self.update_cfs_group(se)
            cfs_rq.h_nr_running -= h_nr
            if cfs_rq.throttled:
                return True
            se = se.parent
        rq.nr_running -= h_nr
        return True

    def _pick_next_task_simple(self, rq):
        """pick_next_task_fair()'s ``simple`` path: nothing is running on
        the fair class (prev is put back already)."""
        cfs_rq = rq.cfs
        se = None
        while cfs_rq is not None:
            se = self.pick_next_entity(cfs_rq, None)
            self.set_next_entity(cfs_rq, se)
            cfs_rq = se.my_q
        return se.task

    def put_prev_task(self, rq, prev):
        se = prev.se
        while se is not None:
            self.put_prev_entity(se.cfs_rq, se)
            se = se.parent

    def pick_next_task(self, rq, prev):
        cfs_rq = rq.cfs
        if not cfs_rq.nr_running:
            if prev is not None:
                self.put_prev_task(rq, prev)
            return None
        if prev is None:
            return self._pick_next_task_simple(rq)
        # walk down without touching prev's entities, then put/set only the
        # levels that differ (the common ancestors keep running)
        se = None
        while cfs_rq is not None:
            curr = cfs_rq.curr
            if curr is not None:
                if curr.on_rq:
                    self._update_curr(cfs_rq)
                else:
                    curr = None
                # out of runtime: the throttle takes its entity off the
                # parent, so pick again from the root
                if cfs_rq.runtime_enabled and self.bandwidth.check_cfs_rq_runtime(cfs_rq):
                    self.put_prev_task(rq, prev)
                    if not rq.cfs.nr_running:
                        return None
                    return self._pick_next_task_simple(rq)
            se = self.pick_next_entity(cfs_rq, curr)
            if se.sched_delayed:
                # EEVDF's DELAY_DEQUEUE: a delayed entity the pick would run
                # leaves instead, and the pick starts over (pick_task_fair())
                self.dequeue_entities(rq, se, DEQUEUE_SLEEP | DEQUEUE_DELAYED)
                cfs_rq = rq.cfs
                if not cfs_rq.nr_running:
                    self.put_prev_task(rq, prev)
                    return None
                continue
            cfs_rq = se.my_q
        p = se.task
        if p is not prev:
            pse = prev.se
            while se.cfs_rq is not pse.cfs_rq:
                se_depth, pse_depth = se.depth, pse.depth
                if se_depth <= pse_depth:
                    self.put_prev_entity(pse.cfs_rq, pse)
                    pse = pse.parent
                if se_depth >= pse_depth:
                    self.set_next_entity(se.cfs_rq, se)
                    se = se.parent
            self.put_prev_entity(se.cfs_rq, pse)
            self.set_next_entity(se.cfs_rq, se)
        return p

    # ------------------------------------------------------------------
    # preemption
    def check_preempt_tick(self, cfs_rq, curr):
        ideal_runtime = self.sched_slice(cfs_rq, curr)
        delta_exec = curr.sum_exec_runtime - curr.prev_sum_exec_runtime
        if delta_exec > ideal_runtime:
            cfs_rq.rq.need_resched = True
            self.clear_buddies(cfs_rq, curr)
            return
        if delta_exec < self.min_granularity:
            return
        se = self._pick_first_entity(cfs_rq)
        if se is None:
            return
        delta = curr.vruntime - se.vruntime
        if delta > ideal_runtime:
            cfs_rq.rq.need_resched = True

    def entity_tick(self, cfs_rq, curr):
        self._update_curr(cfs_rq)
        self.update_load_avg(cfs_rq, curr)
        self.update_cfs_group(curr)
        if cfs_rq.nr_running > 1:
            self.check_preempt_tick(cfs_rq, curr)

    def task_tick(self, rq, curr):
        """task_tick_fair(): entity_tick() at every level of curr's hierarchy."""
        self.nohz_stats_kick()
        se = curr.se
        while se is not None:
            self.entity_tick(se.cfs_rq, se)
            se = se.parent

    def nohz_stats_kick(self):
        """nohz_balancer_kick() with NOHZ_STATS_KICK: idle CPUs do not tick,
        so a busy CPU's tick has every CPU's blocked load refreshed once per
        LOAD_AVG_PERIOD."""
        now = self.clock._now
        if now >= self.next_blocked:
            self.next_blocked = now + LOAD_AVG_PERIOD_NS
            for cpu in range(len(self.blocked_cfs_rqs)):
                self.update_blocked_averages(cpu)

    def hrtick_delay(self, rq):
        """hrtick_start_fair(): time left in curr's slice.  A slice already
        used up asks for a reschedule now (the caller clamps the timer to the
        kernel's 10 us minimum)."""
        curr = rq.curr
        if not self.hrtick or curr is None or rq.cfs.h_nr_running < 2:
            return None
        se = curr.se
        return self.sched_slice(se.cfs_rq, se) - (se.sum_exec_runtime -
                                                 se.prev_sum_exec_runtime)

    def wakeup_preempt_entity(self, curr, se):
        vdiff = curr.vruntime - se.vruntime
        if vdiff <= 0:
            return -1
        return 1 if vdiff > self.calc_delta_fair(self.wakeup_granularity, se) else 0

    def check_preempt_wakeup(self, rq, p):
        curr = rq.curr
        if curr is None:
            rq.need_resched = True
            return
        if curr is p or rq.need_resched or not self.wakeup_preemption:
            return
        scale = curr.se.cfs_rq.nr_running >= self.sched_nr_latency
        se, pse = find_matching_se(curr.se, p.se)
        self._update_curr(se.cfs_rq)
        if self.wakeup_preempt_entity(se, pse) == 1:
            set_next_buddy(pse)
            rq.need_resched = True
            if scale and se.task is not None:      # LAST_BUDDY
                set_last_buddy(se)

    # ------------------------------------------------------------------
    # placement
    def select_task_rq(self, p, prev_cpu, wake_flags):
        allowed = p.cpus_allowed
        if allowed is not None and prev_cpu not in allowed:
            prev_cpu = min(allowed)
        if wake_flags & WF_FORK:
            return self.find_idlest_cpu(p, prev_cpu)
        return self.select_idle_sibling(p, prev_cpu)

    def select_idle_sibling(self, p, target):
        """The target CPU if idle, else an idle core sharing its LLC, else
        an idle CPU there (select_idle_core/select_idle_cpu), else target."""
        m = self.machine
        if m.idle_cpu(target):
            return target
        return self._first_idle(p, m.llc_wrap[target], target)

    def _first_idle(self, p, cpus, fallback):
        """The first allowed CPU of ``cpus`` on a fully idle core, else the
        first idle one, else ``fallback``."""
        m = self.machine
        rqs = m.rqs
        allowed = p.cpus_allowed
        first_idle = None
        for cpu in cpus:
            # idle_cpu(cpu), read in place: a wake-up scans the whole LLC
            if cython.cast(Rq, rqs[cpu]).idle and (allowed is None or cpu in allowed):
                if m.idle_core(cpu):
                    return cpu
                if first_idle is None:
                    first_idle = cpu
        return fallback if first_idle is None else first_idle

    def find_idlest_cpu(self, p, prev_cpu):
        """Fork balancing (SD_BALANCE_FORK): an idle core, nearest first, else
        an idle CPU, else the least loaded allowed CPU."""
        m = self.machine
        order = m.cpus_by_distance[prev_cpu]
        if m.nr_idle_cpus:
            idle = self._first_idle(p, order, None)
            if idle is not None:
                return idle
        if self.find_idlest_group:
            return self.find_dst_group_cpu(p, prev_cpu)
        allowed = p.cpus_allowed
        # the least (h_nr_running, load_avg), the nearest of equals
        best, best_nr, best_load = prev_cpu, -1, 0.0
        now = self.clock._now
        rqs = m.rqs
        for cpu in order:
            if allowed is not None and cpu not in allowed:
                continue
            cfs = cython.cast(Rq, rqs[cpu]).cfs
            cfs.update_load_avg(now)
            if best_nr < 0 or cfs.h_nr_running < best_nr or \
                    (cfs.h_nr_running == best_nr and cfs.load_avg < best_load):
                best, best_nr, best_load = cpu, cfs.h_nr_running, cfs.load_avg
        return best

    def find_dst_group_cpu(self, p, this_cpu):
        """sched_balance_find_dst_group() over the widest sched domain, each
        CPU a group, when none is idle: the busy CPUs' classes (overloaded:
        two or more runnable, else fully busy; the kernel reads PELT's
        utilisation and runnable averages, the simulator the queue as it
        is), the idlest other CPU the one of the lowest class, then of the
        least load_avg (nearest first among equals), and the parent's CPU
        ``this_cpu`` kept unless the idlest is of a lower class, or of the
        same class and lighter by NICE_0_LOAD x (imbalance_pct - 100) % and
        by the imbalance_pct ratio."""
        m = self.machine
        rqs = m.rqs
        now = self.clock._now
        allowed = p.cpus_allowed
        idlest, idlest_type, idlest_load = -1, 0, 0.0
        for cpu in m.cpus_by_distance[this_cpu]:
            if cpu == this_cpu or (allowed is not None and cpu not in allowed):
                continue
            rq = cython.cast(Rq, rqs[cpu])
            rq.cfs.update_load_avg(now)
            group_type = 2 if rq.nr_running >= 2 else rq.nr_running
            if idlest < 0 or group_type < idlest_type or (
                    group_type == idlest_type and rq.cfs.load_avg < idlest_load):
                idlest, idlest_type, idlest_load = cpu, group_type, rq.cfs.load_avg
        if idlest < 0:
            return this_cpu
        if allowed is not None and this_cpu not in allowed:
            return idlest
        rq = cython.cast(Rq, rqs[this_cpu])
        rq.cfs.update_load_avg(now)
        local_type = 2 if rq.nr_running >= 2 else rq.nr_running
        local_load = rq.cfs.load_avg
        if local_type != idlest_type:
            return this_cpu if local_type < idlest_type else idlest
        if idlest_load >= local_load + NICE_0_LOAD * (IMBALANCE_PCT - 100) / 100 or \
                100 * local_load <= IMBALANCE_PCT * idlest_load:
            return this_cpu
        return idlest

    # ------------------------------------------------------------------
    # load balancing
    def cfs_rq_h_load(self, cfs_rq):
        """update_cfs_rq_h_load(): the share of the CPU's load this cfs_rq
        carries, computed at most once per instant (the kernel once per
        jiffy: cfs_rq->last_h_load_update)."""
        now = self.clock._now
        if cfs_rq.last_h_load_update != now:
            cfs_rq.h_load = self._compute_h_load(cfs_rq, now)
            cfs_rq.last_h_load_update = now
        return cfs_rq.h_load

    def _compute_h_load(self, cfs_rq, now):
        """The root's load, scaled down level by level to ``cfs_rq``
        (recursion from the top: no list per call)."""
        se = cfs_rq.se
        if se is None:
            cfs_rq.update_load_avg(now)
            return cfs_rq.load_avg
        parent = se.cfs_rq
        h_load = self._compute_h_load(parent, now)
        parent.update_load_avg(now)
        return h_load * se.load_avg(now) / (parent.load_avg + 1)

    def task_h_load(self, p):
        se = p.se
        cfs_rq = se.cfs_rq
        now = self.clock._now
        cfs_rq.update_load_avg(now)
        return self.cfs_rq_h_load(cfs_rq) * se.load_avg(now) / (cfs_rq.load_avg + 1)

    def task_hot(self, p, now):
        return now - p.se.exec_start < self.migration_cost

    def lb_pinned(self, p, dst_cpu, src_rq):
        """The reasons in can_migrate_task() that hold for every attempt from
        src to dst: throttled_lb_pair() (no moves out of or into a throttled
        hierarchy) and cpus_ptr.  A queue whose every task is pinned is
        dropped and the balance redone (LBF_ALL_PINNED)."""
        if p.cpus_allowed is not None and dst_cpu not in p.cpus_allowed:
            return True
        tg_cfs_rq = p.tg.cfs_rq
        return cython.cast(CfsRq, tg_cfs_rq[src_rq.cpu]).throttle_count or \
            cython.cast(CfsRq, tg_cfs_rq[dst_cpu]).throttle_count

    def can_detach(self, p, src_rq, now):
        """can_migrate_task() past the pinning checks: not running, and not
        cache hot unless balancing kept failing."""
        if p is src_rq.curr:
            return False
        if self.task_hot(p, now):
            return src_rq.nr_balance_failed > self.cache_nice_tries
        return True

    def can_migrate_task(self, p, dst_cpu, src_rq, now):
        return not self.lb_pinned(p, dst_cpu, src_rq) and self.can_detach(p, src_rq, now)

    def find_busiest_queue(self, span, dst_rq, idle, skip):
        m = self.machine
        rqs = m.rqs
        now = self.clock._now
        # the greatest (nr_running, load_avg) when idle, else (load_avg,
        # nr_running); the first of equals
        busiest, busiest_nr, busiest_load = None, 0, 0.0
        for cpu in span:
            rq = cython.cast(Rq, rqs[cpu])
            if rq is dst_rq or rq.nr_running < 2 or (skip is not None and cpu in skip):
                continue
            rq.cfs.update_load_avg(now)
            nr, load = rq.nr_running, rq.cfs.load_avg
            if busiest is None:
                greater = True
            elif idle != CPU_NOT_IDLE:
                greater = nr > busiest_nr or (nr == busiest_nr and load > busiest_load)
            else:
                greater = load > busiest_load or (load == busiest_load and nr > busiest_nr)
            if greater:
                busiest, busiest_nr, busiest_load = rq, nr, load
        return busiest

    def load_balance(self, dst_rq, span, idle):
        """load_balance(): pull from the busiest queue of ``span``.  When
        every task there is pinned away from dst (affinity or a throttled
        hierarchy) that queue is dropped and the search redone, as the
        kernel does on LBF_ALL_PINNED; otherwise a queue whose only
        waiting task belongs to a group throttled on dst would hide the
        movable work of every other queue."""
        m = self.machine
        if len(span) == len(m.rqs):
            # update_sd_lb_stats() at the root domain re-evaluates rd->overloaded
            m.rd_overloaded = m._overloaded()
        skip = None
        while True:
            src_rq = self.find_busiest_queue(span, dst_rq, idle, skip)
            if src_rq is None:
                self.lb_result = LB_BALANCED if skip is None else LB_ALL_PINNED
                return 0
            self.lb_result = LB_UNBALANCED
            moved = self._detach_tasks(src_rq, dst_rq, idle)
            if moved >= 0:
                return moved
            if skip is None:
                skip = set()
            skip.add(src_rq.cpu)

    def _detach_tasks(self, src_rq, dst_rq, idle):
        """detach_tasks() + attach: the number of tasks moved, or -1 if every
        examined task was pinned (LBF_ALL_PINNED)."""
        now = self.clock._now
        nr_tasks = 1
        if idle != CPU_NOT_IDLE:
            # migrate_task: an idle CPU takes waiting tasks, one when newly
            # idle (CONFIG_PREEMPTION's early stop); with migrate_task_half
            # an idle CPU's own or nohz balance takes half the difference of
            # the two run queues' lengths (SchedConfig.migrate_task_half)
            imbalance = None
            if self.migrate_task_half and idle == CPU_IDLE:
                nr_tasks = (src_rq.nr_running - dst_rq.nr_running) >> 1
                if nr_tasks <= 0:       # the kernel finds no imbalance
                    self.lb_result = LB_BALANCED
                    return 0
        else:
            dst_rq.cfs.update_load_avg(now)
            busiest_load, local_load = src_rq.cfs.load_avg, dst_rq.cfs.load_avg
            if busiest_load * 100 <= local_load * IMBALANCE_PCT:
                self.lb_result = LB_BALANCED
                return 0
            imbalance = (busiest_load - local_load) / 2
        moved = 0
        all_pinned = True
        dst_cpu = dst_rq.cpu
        m = self.machine
        # detach_tasks() examines at most loop_max = sysctl_sched_nr_migrate
        # tasks, least recently run first
        for p in src_rq.cfs_tasks.first(SCHED_NR_MIGRATE):
            if self.lb_pinned(p, dst_cpu, src_rq):
                continue
            all_pinned = False
            if not self.can_detach(p, src_rq, now):
                continue
            if imbalance is not None:
                load = self.task_h_load(p)
                if load < 16 and not src_rq.nr_balance_failed:     # LB_MIN
                    continue
                if load / 2 > imbalance:
                    continue
                imbalance -= load
            m.move_queued_task(p, src_rq, dst_rq)
            moved += 1
            if imbalance is None:
                # detach_tasks() stops an idle CPU's pull when the source
                # is down to one task
                if moved >= nr_tasks or src_rq.nr_running <= 1:
                    break
            elif imbalance <= 0:
                break
        if all_pinned:
            return -1
        if moved:
            src_rq.nr_balance_failed = 0
        else:
            src_rq.nr_balance_failed += 1
        return moved

    def balance(self, rq, idle):
        """rebalance_domains() / newidle_balance() over rq's sched domains,
        innermost first; stops at the first level that moved work.  Blocked
        load is refreshed first (run_rebalance_domains, newidle_balance)."""
        self.update_blocked_averages(rq.cpu)
        for level, sd in enumerate(self.domains[rq.cpu]):
            # a class whose load_balance() does not report (CFS-LAGS's
            # credit pull) leaves it unbalanced: no back-off
            self.lb_result = LB_UNBALANCED
            moved = self.load_balance(rq, sd.span, idle)
            if self.balance_backoff and idle != CPU_NEWLY_IDLE:
                self.tune_balance_interval(rq.cpu, level, sd.interval_ms)
            if moved:
                return moved
        return 0

    def tune_balance_interval(self, cpu, level, min_interval_ms):
        """The end of sched_balance_rq(), not for newly idle balances (they
        disregard intervals): an imbalance found resets sd->balance_interval
        to min_interval (the span weight), none doubles it up to
        max_interval (twice that), and every task pinned up to
        MAX_PINNED_INTERVAL."""
        intervals = self.sd_balance_interval[cpu]
        ms = intervals[level]
        result = self.lb_result
        if result == LB_UNBALANCED:
            intervals[level] = min_interval_ms
        elif ms < 2 * min_interval_ms or (result == LB_ALL_PINNED
                                          and ms < MAX_PINNED_INTERVAL_MS):
            intervals[level] = 2 * ms

    def balance_interval_ns(self, rq, idle):
        """get_sd_balance_interval() of the innermost level, which decides:
        its sd->balance_interval (ms), x busy_factor when busy, capped at
        max_load_balance_interval; a CPU without domains, every tick."""
        intervals = self.sd_balance_interval[rq.cpu]
        if not intervals:
            return self.machine.tick_ns
        ms = intervals[0]
        if idle == CPU_NOT_IDLE:
            ms *= BUSY_FACTOR
        return min(ms, self.max_lb_interval_ms) * 1_000_000

    def newidle_allowed(self, rq):
        return rq.avg_idle >= self.migration_cost


POLICY = CFS
CONFIG = CfsConfig
