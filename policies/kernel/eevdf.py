# cython: overflowcheck=True
"""EEVDF, the fair class of kernel/sched/fair.c from Linux 6.6 on, as 6.18
runs it (``kernel: "6.18"``, the default) or as 6.6 did (``kernel: "6.6"``
with the 6.12 features off: scheduler=eevdf66).

EEVDF kept most of fair.c (PELT, group shares, wake-up and fork placement,
load balancing, task_hot, nohz and newidle balancing), so ``EEVDF``
subclasses ``CFS`` and overrides only what the 6.6 series replaced: the
timeline and its pick, update_curr/update_deadline, place_entity and lag,
entity_tick (no check_preempt_tick), wake-up preemption, reweight_entity and
the sysctls.  Functions carry fair.c's names.

Common to both: 6.6's EEVDF (af4cf40470c2 avg_vruntime, 86bfbb7ce4f6 lag
placement, 147f3efaa241 the EEVDF pick, 5e963f2bd465 "Commit to EEVDF",
e8f331bcc270 lag-based cross-runqueue placement, the 6.6-rc fixes of
pick_eevdf b01db23d5923 and avg_vruntime's rounding), a per-task slice,
``task.custom_slice`` (sched_setattr(sched_runtime), 857b158dc5e8, 6.12)
clamped to [0.1, 100] ms as __setparam_fair() does, and ENQUEUE_INITIAL at a
new task's first enqueue (c40dd90ac045, 6.12; ``place_deadline_initial:
false`` gives 6.6's full first slice).

What 6.18 changes, each a flag or the ``kernel`` switch:

* the base slice is 0.7 ms x the tunable_scaling factor (2ae891b82695,
  6.15; 0.75 ms before): this host reports se.slice 1.4 ms;
* slice protection (RUN_TO_PARITY): the vruntime up to which curr may not
  be preempted, vprot, is set at the pick to its deadline or, if shorter,
  the shortest slice queued (cfs_rq_min_slice), and without RUN_TO_PARITY
  to the normalized base slice (9de74a9850b9, 3a0baa8e6c57, 6.17); once
  curr is past it, every update_curr() with others queued reschedules
  (74eec63661d4), so at each tick the pick runs again.  6.6 protected curr
  until update_deadline() gave it a new slice, and no further check;
* PREEMPT_SHORT (85e511df3cec, 6.12, in its 6.17 form 052c3d87c82e): a wakee
  with a shorter slice than curr is judged without curr's protection and,
  winning, cancels it; losing, it shrinks it to the shortest slice queued;
* DELAY_DEQUEUE with DELAY_ZERO (152e11f6df29 and the 6.12 series): an
  entity going to sleep while not eligible stays queued (sched_delayed),
  with its load, weight in V, nr_running and h_nr_running, until the pick
  would run it (it is dequeued then, its positive lag cut to zero, and the
  pick starts over) or it is woken (ttwu_runnable(): requeued where it is,
  ENQUEUE_DELAYED, placed again at zero lag only if its lag turned
  positive).  A group entity whose last task left is delayed the same way.
  A throttle never delays (DEQUEUE_SPECIAL), an exit ends the delay
  (task_dead_fair()), and the machine ends it for a sleeping task whose
  class or affinity changes (the kernel's DEQUEUE_DELAYED in
  __sched_setscheduler() and the affinity change).  Its PELT: the load
  stays (the kernel's load_avg counts se->on_rq); 6.13's separate runnable
  count (h_nr_runnable) is not modelled, nor is load balancing of delayed
  tasks (the balancer never moves them: they are not on its list).  The
  wake-up in place is measured on this host (calibration/bench/
  delay_dequeue.py, tests/test_delay_dequeue.py);
* PLACE_REL_DEADLINE (6.12): a task dequeued without sleeping (migration,
  class change) keeps its deadline relative to its vruntime;
* reweight_entity() keeps a queued entity's lag and relative deadline and
  places it again (6d71a9c61604, 6.14; reverted in 7.0).  Since vprot shares
  se->vlag (a union until 80390ead2080 in 7.0), reweighting curr ends its
  slice protection, as it does in 6.18;
* group entities take the min_slice of the cfs_rq they own (aef6987d8954,
  6.12).  The kernel rewrites it on every enqueue and dequeue below; here it
  is read at the group entity's next placement or deadline;
* NI_RANDOM (33cf66d88306, 7.0 and 6.18.5): newidle balancing runs only
  while rd->overloaded and, per sched domain, with a probability that
  follows its recent success rate (``newidle_balance``; this host's
  behaviour: calibration/bench/newidle.py); with it, the nohz balance that
  a busy CPU's tick kicks runs after that tick (``nohz_kick_ipi``, a
  SchedConfig key; not a 6.18 change, but off in the older models), and
  sd->balance_interval backs off after balances that moved nothing
  (``balance_backoff``, likewise; calibration/bench/delay_dequeue.py saw
  it here), and an affinity change of the running task is an update_curr()
  that may reschedule it (``affinity_requeue``, likewise).

Not modelled: NEXT_BUDDY (off), sched_yield, idle-policy entities and
SCHED_BATCH, 6.13's h_nr_runnable, can_migrate_task()'s refusal of an
ineligible task while the balance has not failed yet
(task_is_ineligible_on_dst_cpu()), NI_RATE (7.0's newidle rate term), the
newidle balance's own cost, 6.18's task-based throttling (the
throttle still takes the group entity off, as before 6.18), 6.19's wake-up
preemption rework, proxy execution, and the kernel's fixed-point
__calc_delta (exact integer division, as in cfs.py).  HRTICK (off in the
kernel) is an option and times what is left of se->slice since the pick.
No buddy is ever set (NEXT_BUDDY off, LAST_BUDDY and the skip buddy gone
since 5e963f2bd465).  Stable 6.18.y releases may carry later fixes (the
vlag/vprot separation, the reweight revert); this host's 6.18.44 was not
checked for them.

Two places where the machine's calls differ from the kernel's: the machine
brings accounting up to date at instants the kernel would not (a burst that
runs on, interval sampling), so its update_curr(rq) charges time without the
deadline and protection checks, which the next kernel-side update_curr()
makes; and __schedule() clears TIF_NEED_RESCHED after the pick, so a slice
that ends during pick_next_task/put_prev_task (update_curr on the way) does
not leave a stale reschedule behind.

The timeline is a list sorted by (vruntime, sequence): vruntime, not
deadline, as in 6.6's rbtree.  An entity's key never changes while queued
(curr is not in the tree), eligibility is monotone in vruntime, so the
eligible entities are a prefix of the list and pick_eevdf() scans that
prefix for the earliest deadline: exact, where the kernel descends an
rbtree augmented with min_deadline.  Ties on deadline go to a queued
entity, the smaller vruntime first: curr keeps the CPU only with a strictly
earlier deadline, as pick_eevdf() decides since its tree is sorted by
deadline ("if (!best || (curr && entity_before(curr, best)))", 6.12+;
6.6 kept curr on a tie, which ``kernel: "6.6"`` does not restore).  Two
equal hogs on one CPU switch at every tick on this project's 6.18 host
(calibration/fits/this-vm.md, density); the wake-up probe
calibration/bench/slice_preempt.py is what tests/test_eevdf_618.py holds
the protection and PREEMPT_SHORT to.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import cython

from policies.kernel.cfs import (CFS, GRANULARITY_RANGE_NS, FairConfig, find_matching_se,
                                  scaled)
from sim.rq import NICE_0_LOAD, SchedEntity
from sim.sched_class import tunable
from sim.sched_flags import (CPU_NEWLY_IDLE, DEQUEUE_DELAYED, DEQUEUE_SLEEP, DEQUEUE_SPECIAL,
                             ENQUEUE_DELAYED, ENQUEUE_INITIAL, ENQUEUE_MIGRATED)

# normalized_sysctl_sched_base_slice: 0.75 ms in 6.6 .. 6.14, 0.7 ms since
# 2ae891b82695 "sched: Reduce the default slice to avoid tasks getting an
# extra tick" (6.15); this host's 6.18 reports se.slice 1400000 in
# /proc/PID/sched (0.7 ms x the log factor 2 of its 2 CPUs)
SCHED_BASE_SLICE_NS = {"6.6": 750_000, "6.18": 700_000}
KERNELS = ("6.6", "6.18")
# cfs_rq_min_slice() of a cfs_rq with nothing queued (the kernel's ~0ULL)
NO_SLICE = (1 << 63) - 1
# __setparam_fair(): the bounds of a sched_runtime slice request
CUSTOM_SLICE_RANGE_NS = (100_000, 100_000_000)


@dataclass
class EevdfConfig(FairConfig):
    """The sysctl and sched_features of EEVDF.  ``base_slice_ns: null`` is
    the kernel default, SCHED_BASE_SLICE_NS times the tunable_scaling
    factor (debugfs sched/base_slice_ns)."""
    base_slice_ns: Optional[int] = tunable(None, range=GRANULARITY_RANGE_NS)
    # the fair.c release whose code (beyond the sched_features below)
    # decides: "6.18" (slice protection limited to the queue's shortest
    # slice and a reschedule when it ends, min_slice of group entities,
    # lag-keeping reweight, 0.7 ms base slice) or "6.6"
    kernel: str = tunable("6.18", choices=KERNELS)
    # sched_features, 6.18 defaults (scheduler=eevdf66 restores 6.6's)
    # PLACE_LAG: keep a task's lag across sleep and migration
    place_lag: bool = tunable(True)
    # PLACE_DEADLINE_INITIAL: a new task's first deadline is half a slice away
    place_deadline_initial: bool = tunable(True)
    # PLACE_REL_DEADLINE (6.12): a task dequeued without sleeping (migration)
    # keeps its deadline relative to its vruntime instead of a new slice
    place_rel_deadline: bool = tunable(True)
    # RUN_TO_PARITY: no wake-up preemption of curr until it uses its
    # protected slice (6.18: the shortest slice queued) or loses eligibility
    run_to_parity: bool = tunable(True)
    # PREEMPT_SHORT (6.12): a wakee with a shorter slice than curr ignores
    # curr's slice protection
    preempt_short: bool = tunable(True)
    # DELAY_DEQUEUE (6.12): a sleeper that is not eligible stays queued
    # (sched_delayed) until it is picked or woken
    delay_dequeue: bool = tunable(True)
    # DELAY_ZERO: a delayed entity leaves, or is woken, with a lag of at
    # most zero
    delay_zero: bool = tunable(True)
    # NI_RANDOM (33cf66d88306; 7.0, in 6.18.5+): newidle balancing at each
    # level with a probability that follows its recent success rate
    ni_random: bool = tunable(True)
    # the kernel's asynchronous nohz kick (SchedConfig; eevdf66: off)
    nohz_kick_ipi: bool = tunable(True)
    # sd->balance_interval's back-off (SchedConfig; eevdf66: off)
    balance_backoff: bool = tunable(True)
    # the running task's affinity change as an update_curr() (SchedConfig)
    affinity_requeue: bool = tunable(True)
    # fork placement by the 5.5+ group statistics (SchedConfig)
    find_idlest_group: bool = tunable(True)


def div_s64(a: int, b: int) -> int:
    """The kernel's signed division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def timeline_index(tl, vruntime, seq):
    """Where (vruntime, seq) goes in the timeline (bisect_left over its
    (vruntime, seq, se) entries; seq is unique, so the entity is never
    compared): compiled, C integer comparisons instead of tuples'."""
    lo, hi = 0, len(tl)
    while lo < hi:
        mid = (lo + hi) >> 1
        entry = cython.cast(tuple, tl[mid])
        v, s = entry[0], entry[1]
        if v < vruntime or (v == vruntime and s < seq):
            lo = mid + 1
        else:
            hi = mid
    return lo


class Timeline(list):
    """cfs_rq->tasks_timeline, entries (vruntime, seq, se), with the sums
    6.6 keeps beside it in the cfs_rq: ``avg_vruntime`` = sum of
    (v_i - min_vruntime) * w_i and ``avg_load`` = sum of w_i over the queued
    entities (curr excluded, as it is not in the tree; avg_vruntime() adds
    it).  They live here because sim.rq.CfsRq has no slots for them."""

    __slots__ = ("avg_vruntime", "avg_load")

    def __init__(self):
        super().__init__()
        self.avg_vruntime = 0
        self.avg_load = 0


class EEVDF(CFS):
    name = "eevdf"

    def __init__(self, cfg, machine):
        super().__init__(cfg, machine)
        self.tick_nsec = machine.tick_ns
        # delayed entities per CPU: while there are none, the pick needs no
        # pass to finish their dequeues
        self.nr_delayed = [0] * len(machine.rqs)
        for rq in machine.rqs:
            rq.cfs.timeline = Timeline()
        # NI_RANDOM: each CPU's sched domains' newidle_call, newidle_success
        # and newidle_ratio, as sd_init() starts them (a 50% success rate),
        # and sched_rng() (one stream for every CPU)
        self.newidle_stats = [[[512, 256, 512] for _ in doms] for doms in self.domains]
        self.newidle_rng = machine.engine.rng("host/newidle") if self.ni_random else None

    def init_sysctls(self, cfg):
        """The base slice replaced the granularities, and lag placement and
        RUN_TO_PARITY the sleeper credit and buddies."""
        if cfg.kernel not in KERNELS:
            raise ValueError(f"scheduler.kernel = {cfg.kernel!r}: choose from "
                             f"{', '.join(KERNELS)}")
        self.kernel_618 = cfg.kernel == "6.18"
        self.normalized_base_slice = SCHED_BASE_SLICE_NS[cfg.kernel]
        self.sysctl_sched_base_slice = scaled(cfg.base_slice_ns, self.normalized_base_slice,
                                              self.factor)
        self.place_lag = bool(cfg.place_lag)
        self.place_deadline_initial = bool(cfg.place_deadline_initial)
        self.place_rel_deadline = bool(cfg.place_rel_deadline)
        self.run_to_parity = bool(cfg.run_to_parity)
        self.preempt_short = bool(cfg.preempt_short)
        self.delay_dequeue = bool(cfg.delay_dequeue)
        self.delay_zero = bool(cfg.delay_zero)
        self.ni_random = bool(cfg.ni_random)
        # some task asked for its own slice: until one does, every entity's
        # slice is the base slice and so is every cfs_rq's min_slice
        self.custom_slices = False

    def init_task_group(self, tg):
        for cfs_rq in tg.cfs_rq:
            cfs_rq.timeline = Timeline()

    # ------------------------------------------------------------------
    # avg_vruntime: V, the weighted average of the vruntimes, curr included
    # (methods, not static: a compiled static method cannot be called
    # through self)
    def avg_vruntime_add(self, cfs_rq, se):
        tl = cfs_rq.timeline
        w = se.weight
        tl.avg_vruntime += (se.vruntime - cfs_rq.min_vruntime) * w
        tl.avg_load += w

    def avg_vruntime_sub(self, cfs_rq, se):
        tl = cfs_rq.timeline
        w = se.weight
        tl.avg_vruntime -= (se.vruntime - cfs_rq.min_vruntime) * w
        tl.avg_load -= w

    def _avg_sums(self, cfs_rq):
        """The tree's sums with curr added if it is queued."""
        tl = cfs_rq.timeline
        avg, load = tl.avg_vruntime, tl.avg_load
        curr = cfs_rq.curr
        if curr is not None and curr.on_rq:
            w = curr.weight
            avg += (curr.vruntime - cfs_rq.min_vruntime) * w
            load += w
        return avg, load

    def avg_vruntime(self, cfs_rq):
        avg, load = self._avg_sums(cfs_rq)
        # floor, whatever the sign, so that V never lands right of an entity
        # that holds it back
        return cfs_rq.min_vruntime + (avg // load if load else 0)

    def entity_eligible(self, cfs_rq, se):
        """V >= v_i, without the division: sum (v_j - v0) w_j >= (v_i - v0) W."""
        avg, load = self._avg_sums(cfs_rq)
        return avg >= (se.vruntime - cfs_rq.min_vruntime) * load

    def update_entity_lag(self, cfs_rq, se):
        lag = self.avg_vruntime(cfs_rq) - se.vruntime
        limit = self.calc_delta_fair(max(2 * se.slice, self.tick_nsec), se)
        se.vlag = max(-limit, min(lag, limit))

    def update_min_vruntime(self, cfs_rq):
        curr = cfs_rq.curr
        vruntime = cfs_rq.min_vruntime
        if curr is not None:
            if curr.on_rq:
                vruntime = curr.vruntime
            else:
                curr = None
        tl = cfs_rq.timeline
        if tl:
            left = tl[0][0]
            vruntime = left if curr is None else min(vruntime, left)
        delta = vruntime - cfs_rq.min_vruntime
        if delta > 0:
            # avg_vruntime_update(): every key shrinks by delta
            tl.avg_vruntime -= tl.avg_load * delta
            cfs_rq.min_vruntime = vruntime

    # ------------------------------------------------------------------
    # timeline
    def _enqueue_timeline(self, cfs_rq, se):
        self.avg_vruntime_add(cfs_rq, se)
        seq = self._next_seq()
        se.rb_seq = seq
        tl = cfs_rq.timeline
        tl.insert(timeline_index(tl, se.vruntime, seq), (se.vruntime, seq, se))

    def _dequeue_timeline(self, cfs_rq, se):
        tl = cfs_rq.timeline
        i = timeline_index(tl, se.vruntime, se.rb_seq)
        if i == len(tl) or tl[i][2] is not se:
            raise RuntimeError("EEVDF timeline: a queued entity's vruntime changed")
        del tl[i]
        se.rb_seq = 0
        self.avg_vruntime_sub(cfs_rq, se)

    def pick_eevdf(self, cfs_rq):
        """The eligible entity with the earliest virtual deadline, curr
        kept while its slice is protected."""
        return self._pick_eevdf(cfs_rq, True)

    def _pick_eevdf(self, cfs_rq, protect):
        """__pick_eevdf(); ``protect`` false ignores curr's slice
        protection (a PREEMPT_SHORT wakee asks)."""
        tl = cfs_rq.timeline
        v0 = cfs_rq.min_vruntime
        avg, load = self._avg_sums(cfs_rq)
        curr = cfs_rq.curr
        if curr is not None and (not curr.on_rq or avg < (curr.vruntime - v0) * load):
            curr = None
        # slice protection: once picked, an eligible curr runs on until
        # its protected slice is used up (see set_protect_slice())
        if protect and curr is not None and self.protect_slice(curr):
            return curr
        best = None
        for i in range(len(tl)):
            entry = cython.cast(tuple, tl[i])
            v = entry[0]
            if avg < (v - v0) * load:
                break
            se = cython.cast(SchedEntity, entry[2])
            if best is None or se.deadline < best.deadline:
                best = se
        # curr keeps the CPU only with a strictly earlier deadline
        # (pick_eevdf(): "if (!best || (curr && entity_before(curr, best)))"):
        # on a tie the queued entity runs, so equal hogs alternate every tick
        if curr is not None and (best is None or curr.deadline < best.deadline):
            return curr
        if best is None and tl:
            # the kernel's "EEVDF scheduling fail, picking leftmost"; V is a
            # weighted mean of the entities, so one of them is always eligible
            return tl[0][2]
        return best

    def pick_next_entity(self, cfs_rq, curr):
        return self.pick_eevdf(cfs_rq)

    # ------------------------------------------------------------------
    # time accounting
    def slice_of(self, se):
        """se->slice: the task's sched_runtime request if it made one, else
        sysctl_sched_base_slice.  A group entity's is, since aef6987d8954
        "sched/eevdf: Propagate min_slice up the cgroup hierarchy" (6.12),
        the min_slice of the cfs_rq it owns (6.6: the base slice)."""
        task = se.task
        if task is not None:
            if task.custom_slice:
                self.custom_slices = True
                low, high = CUSTOM_SLICE_RANGE_NS
                return min(max(int(task.custom_slice), low), high)
        elif self.kernel_618 and self.custom_slices:
            slice_ = self.cfs_rq_min_slice(se.my_q)
            if slice_ != NO_SLICE:
                return slice_
        return self.sysctl_sched_base_slice

    def cfs_rq_min_slice(self, cfs_rq):
        """The shortest slice among the queued entities, curr included
        (NO_SLICE if none).  The kernel keeps it in the rbtree's augmented
        data; here a scan, and none while no task has asked for a slice of
        its own (every slice is then the base slice).  A group entity's
        slice is read lazily: the kernel rewrites it on every enqueue and
        dequeue below it, here at its next placement or deadline."""
        curr = cfs_rq.curr
        tl = cfs_rq.timeline
        if not self.custom_slices:
            if tl or (curr is not None and curr.on_rq):
                return self.sysctl_sched_base_slice
            return NO_SLICE
        min_slice = NO_SLICE
        if curr is not None and curr.on_rq:
            min_slice = curr.slice
        for _, _, se in tl:
            if se.slice < min_slice:
                min_slice = se.slice
        return min_slice

    def update_deadline(self, cfs_rq, se):
        """A new request once the old one is used up; true if so."""
        if se.vruntime < se.deadline:
            return False
        # vd_i = ve_i + r_i / w_i
        se.slice = self.slice_of(se)
        se.deadline = se.vruntime + self.calc_delta_fair(se.slice, se)
        return True

    def _update_curr(self, cfs_rq):
        """update_curr().  The deadline (and in 6.18 the protected slice) is
        checked even when no time has passed: the kernel's own calls would
        find nothing to do then, but the machine's bookkeeping calls
        (update_curr(rq)) skip the check, and the next kernel call must make
        it.  A used-up request reschedules (6.6, no buddies to clear); 6.18
        also reschedules once the protected slice is over, 74eec63661d4
        "sched/fair: Always trigger resched at the end of a protected
        period", so that a pick follows every tick after it."""
        CFS._update_curr(self, cfs_rq)
        curr = cfs_rq.curr
        if curr is not None:
            resched = self.update_deadline(cfs_rq, curr)
            if cfs_rq.nr_running > 1 and (resched or (self.kernel_618 and
                                                     not self.protect_slice(curr))):
                cfs_rq.rq.need_resched = True

    # ------------------------------------------------------------------
    # slice protection (RUN_TO_PARITY): 6.6 kept the deadline curr was
    # picked with in se->vlag, unused while it runs; 6.17 made it vprot, the
    # vruntime up to which curr is protected, in a union with vlag
    # (3a0baa8e6c57 "sched/fair: Limit run to parity to the min slice of
    # enqueued entities", 9de74a9850b9 "sched/fair: Fix NO_RUN_TO_PARITY
    # case"); both live in se.vlag here as in the kernel
    def set_protect_slice(self, cfs_rq, se):
        """At the pick: protect curr up to its deadline, or (6.18) for the
        shortest slice queued, at most the normalized base slice without
        RUN_TO_PARITY."""
        if not self.kernel_618:
            se.vlag = se.deadline
            return
        slice_ = self.cfs_rq_min_slice(cfs_rq) if self.run_to_parity \
            else self.normalized_base_slice
        slice_ = min(slice_, se.slice)
        vprot = se.deadline
        if slice_ != se.slice:
            vprot = min(vprot, se.vruntime + self.calc_delta_fair(slice_, se))
        se.vlag = vprot

    def update_protect_slice(self, cfs_rq, se):
        """A shorter slice joined without preempting: curr's protection
        shrinks to it, so the newcomer's wait stays within its slice."""
        se.vlag = min(se.vlag, se.vruntime +
                      self.calc_delta_fair(self.cfs_rq_min_slice(cfs_rq), se))

    def protect_slice(self, se):
        if self.kernel_618:
            return se.vlag > se.vruntime
        # 6.6: until update_deadline() hands out a new slice
        return self.run_to_parity and se.vlag == se.deadline

    def cancel_protect_slice(self, se):
        if self.protect_slice(se):
            se.vlag = se.vruntime if self.kernel_618 else se.deadline + 1

    def update_curr(self, rq):
        """The machine's accounting (a burst ended, a sample is taken):
        charge curr up to now at every level but leave update_deadline() to
        the kernel's own update_curr() calls (tick, enqueue, dequeue, pick,
        wake-up), so that observing the host never reschedules it."""
        curr = rq.curr
        if curr is not None:
            se = curr.se
            while se is not None:
                CFS._update_curr(self, se.cfs_rq)     # CFS's: no deadline check
                se = se.parent

    # ------------------------------------------------------------------
    # group shares
    def reweight_entity(self, cfs_rq, se, weight):
        if self.kernel_618:
            self.reweight_entity_lag(cfs_rq, se, weight)
            return
        old_weight = se.weight
        if se.on_rq:
            if cfs_rq.curr is se:
                self._update_curr(cfs_rq)
            else:
                self.avg_vruntime_sub(cfs_rq, se)
        CFS.reweight_entity(self, cfs_rq, se, weight)
        if not se.on_rq:
            # vlag = V - v_i while lag_i = w_i (V - v_i): keep lag_i
            se.vlag = div_s64(se.vlag * old_weight, weight)
        else:
            # the virtual time slope changed: so does the relative deadline
            deadline = div_s64((se.deadline - se.vruntime) * old_weight, weight)
            se.deadline = se.vruntime + deadline
            if cfs_rq.curr is not se:
                self.avg_vruntime_add(cfs_rq, se)

    def reweight_entity_lag(self, cfs_rq, se, weight):
        """reweight_entity() since 6d71a9c61604 "sched/fair: Fix EEVDF
        entity placement bug causing scheduling lag" (6.14; reverted only in
        7.0): a queued entity keeps its lag, w_i (V - v_i), and its relative
        deadline in real time, and is placed again.  Curr included: its lag
        overwrites se->vlag, which in 6.17+ also holds vprot, so a
        reweighted curr loses its slice protection (separated only in 7.0,
        80390ead2080 "sched/fair: Separate se->vlag from se->vprot")."""
        curr = cfs_rq.curr is se
        on_rq = se.on_rq
        old_weight = se.weight
        if on_rq:
            self._update_curr(cfs_rq)
            self.update_entity_lag(cfs_rq, se)
            cfs_rq.nr_running -= 1
            if not curr:
                self._dequeue_timeline(cfs_rq, se)
        CFS.reweight_entity(self, cfs_rq, se, weight)
        if on_rq:
            # (after CFS's part: its update_curr must see an absolute deadline)
            se.deadline -= se.vruntime
            se.rel_deadline = True
        # vlag = V - v_i while lag_i = w_i (V - v_i): keep lag_i
        se.vlag = div_s64(se.vlag * old_weight, weight)
        if se.rel_deadline:
            se.deadline = div_s64(se.deadline * old_weight, weight)
        if on_rq:
            self.place_entity(cfs_rq, se, False)
            if not curr:
                self._enqueue_timeline(cfs_rq, se)
            cfs_rq.nr_running += 1

    # ------------------------------------------------------------------
    # entity enqueue/dequeue
    def place_entity(self, cfs_rq, se, initial):
        """place_entity(); ``initial`` is flags & ENQUEUE_INITIAL (a truth
        value, as CFS's place_entity() takes it)."""
        vruntime = self.avg_vruntime(cfs_rq)
        lag = 0
        se.slice = self.slice_of(se)
        vslice = self.calc_delta_fair(se.slice, se)
        if self.place_lag and cfs_rq.nr_running:
            # Adding se moves V by -w_i vl_i / (W + w_i), which would eat
            # part of its lag; inflate the lag so that what remains after
            # the insertion is the lag it left with: vl_i (W + w_i) / W.
            curr = cfs_rq.curr
            load = cfs_rq.timeline.avg_load
            if curr is not None and curr.on_rq:
                load += curr.weight
            lag = div_s64(se.vlag * (load + se.weight), load or 1)
        se.vruntime = vruntime - lag
        if se.rel_deadline:
            # PLACE_REL_DEADLINE: the deadline it left with, relative
            se.deadline += se.vruntime
            se.rel_deadline = False
            return
        # joining tasks find the others halfway through their slices
        if self.place_deadline_initial and initial:
            vslice //= 2
        se.deadline = se.vruntime + vslice

    def task_fork_fair(self, cfs_rq, se):
        """6.6's task_fork_fair() placed the child on the parent's cfs_rq,
        and enqueue_entity() placed it again: nothing to do before that."""

    def enqueue_entity(self, cfs_rq, se, flags):
        curr = cfs_rq.curr is se
        if curr:
            self.place_entity(cfs_rq, se, flags & ENQUEUE_INITIAL)
        self._update_curr(cfs_rq)
        self.update_load_avg(cfs_rq, se)
        # reweight first: it rescales vlag, which placement then uses
        self.update_cfs_group(se)
        if not curr:
            self.place_entity(cfs_rq, se, flags & ENQUEUE_INITIAL)
        cfs_rq.load_weight += se.weight
        cfs_rq.nr_running += 1
        if flags & ENQUEUE_MIGRATED:
            se.exec_start = 0          # a migrated task is no longer cache hot
        if not curr:
            self._enqueue_timeline(cfs_rq, se)
        se.on_rq = True

    def dequeue_entity(self, cfs_rq, se, flags):
        """False if DELAY_DEQUEUE keeps ``se`` queued: a sleep
        (DEQUEUE_SLEEP, not DEQUEUE_SPECIAL) of an entity that is not
        eligible, 152e11f6df29 "sched/fair: Implement delayed dequeue"
        (6.12).  It keeps its place, load and weight in V until the pick
        or a wake-up ends the delay; DEQUEUE_DELAYED ends it here, with a
        positive lag cut to zero (DELAY_ZERO)."""
        self._update_curr(cfs_rq)
        if not (flags & DEQUEUE_DELAYED) and self.delay_dequeue and flags & DEQUEUE_SLEEP \
                and not (flags & DEQUEUE_SPECIAL) and not self.entity_eligible(cfs_rq, se):
            self.update_load_avg(cfs_rq, se)
            se.sched_delayed = True
            self.nr_delayed[cfs_rq.cpu] += 1
            return False
        self.update_load_avg(cfs_rq, se)
        self.update_entity_lag(cfs_rq, se)
        if self.place_rel_deadline and not (flags & DEQUEUE_SLEEP):
            se.deadline -= se.vruntime
            se.rel_deadline = True
        if se is not cfs_rq.curr:
            self._dequeue_timeline(cfs_rq, se)
        se.on_rq = False
        cfs_rq.load_weight -= se.weight
        cfs_rq.nr_running -= 1
        self.update_cfs_group(se)
        if flags & DEQUEUE_DELAYED:
            self.clear_delayed(se)
            if self.delay_zero and se.vlag > 0:
                se.vlag = 0
        self.update_min_vruntime(cfs_rq)
        return True

    def clear_delayed(self, se):
        se.sched_delayed = False
        self.nr_delayed[se.cfs_rq.cpu] -= 1

    def requeue_delayed_entity(self, se):
        """A delayed entity is woken (a task) or gets a task again (a
        group): the delay ends where it is queued; with DELAY_ZERO one
        whose lag turned positive meanwhile is placed again at zero lag."""
        cfs_rq = se.cfs_rq
        if self.delay_zero:
            self.update_entity_lag(cfs_rq, se)
            if se.vlag > 0:
                cfs_rq.nr_running -= 1
                if se is not cfs_rq.curr:
                    self._dequeue_timeline(cfs_rq, se)
                se.vlag = 0
                self.place_entity(cfs_rq, se, False)
                if se is not cfs_rq.curr:
                    self._enqueue_timeline(cfs_rq, se)
                cfs_rq.nr_running += 1
        self.update_load_avg(cfs_rq, se)
        self.clear_delayed(se)

    def set_next_entity(self, cfs_rq, se):
        CFS.set_next_entity(self, cfs_rq, se)
        if se.on_rq:
            self.set_protect_slice(cfs_rq, se)

    # ------------------------------------------------------------------
    # task-level interface
    def enqueue_task(self, rq, p, flags):
        """enqueue_task_fair(): a woken delayed task is requeued where it
        is (ttwu_runnable(), ENQUEUE_DELAYED) and counts nowhere anew, as
        it never stopped counting; an ancestor left delayed is requeued
        before the walk stops at it."""
        se = p.se
        if flags & ENQUEUE_DELAYED:
            self.requeue_delayed_entity(se)
            return
        se = se.parent
        while se is not None and not se.on_rq:
            se = se.parent
        if se is not None and se.sched_delayed:
            self.requeue_delayed_entity(se)
        CFS.enqueue_task(self, rq, p, flags)

    def task_dead(self, p):
        """task_dead_fair(): a task that exits while delayed leaves now."""
        if p.se.sched_delayed:
            self.dequeue_entities(self.machine.rqs[p.cpu], p.se, DEQUEUE_SLEEP | DEQUEUE_DELAYED)
        CFS.task_dead(self, p)

    def pick_delayed(self, rq):
        """pick_task_fair()'s retries for a pick that sets each level's
        entity as it descends (nothing ran, _pick_next_task_simple): an
        entity the pick would run that is delayed is dequeued
        (DEQUEUE_DELAYED) and the pick starts over, until it would run a
        task that is not.  (CFS.pick_next_task() retries in its own walk.)"""
        cfs_rq = rq.cfs
        while cfs_rq.nr_running:
            curr = cfs_rq.curr
            if curr is not None and curr.on_rq:
                self._update_curr(cfs_rq)
            se = self.pick_eevdf(cfs_rq)
            if se.sched_delayed:
                self.dequeue_entities(rq, se, DEQUEUE_SLEEP | DEQUEUE_DELAYED)
                cfs_rq = rq.cfs
            elif se.my_q is None:
                return
            else:
                cfs_rq = se.my_q

    def _pick_next_task_simple(self, rq):
        """Also after a throttle in the pick's walk: the pick starts over
        from the root, and may find a delayed entity there; None if only
        delayed ones were left."""
        if self.nr_delayed[rq.cpu]:
            self.pick_delayed(rq)
            if not rq.cfs.nr_running:
                return None
        return CFS._pick_next_task_simple(self, rq)

    def migrate_task_rq(self, p, new_cpu):
        """migrate_task_rq_fair(): only the load moves; the lag the task
        left with places it on the new CPU (no vruntime renormalisation)."""
        self.remove_entity_load_avg(p.se)
        self.set_task_rq(p, new_cpu)

    def switched_from_fair(self, p):
        """Since 6.6 only the load moves: lag, saved at dequeue, places the
        task when it comes back."""
        self.remove_entity_load_avg(p.se)

    def switched_to_fair(self, p):
        self.attach_entity_load_avg(p.se)

    def pick_next_task(self, rq, prev):
        # __schedule() clears TIF_NEED_RESCHED after the pick: a slice
        # that ends while picking (update_curr on the way down) is already
        # accounted for by the pick itself
        resched = rq.need_resched
        p = CFS.pick_next_task(self, rq, prev)
        rq.need_resched = resched
        return p

    def put_prev_task(self, rq, prev):
        resched = rq.need_resched
        CFS.put_prev_task(self, rq, prev)
        rq.need_resched = resched

    # ------------------------------------------------------------------
    # preemption
    def entity_tick(self, cfs_rq, curr):
        """No check_preempt_tick any more: a used-up slice reschedules from
        update_deadline()."""
        self._update_curr(cfs_rq)
        self.update_load_avg(cfs_rq, curr)
        self.update_cfs_group(curr)

    def hrtick_delay(self, rq):
        """hrtick_start_fair() of 6.6: what is left of se->slice since the
        task was picked (real time; a used-up slice asks for a reschedule
        now, which the machine clamps to the kernel's 10 us minimum)."""
        curr = rq.curr
        if not self.hrtick or curr is None or rq.cfs.h_nr_running < 2:
            return None
        se = curr.se
        return se.slice - (se.sum_exec_runtime - se.prev_sum_exec_runtime)

    def cputime_poll_delay(self, rq):
        """Running time until update_curr() of curr's own cfs_rq reschedules
        it: its vruntime reaches its deadline (update_deadline()) or, in
        6.18, the end of its protected slice, with another entity queued
        beside it there (an enqueue re-arms the machine's timer).  Not
        timed: the instant another entity there turns eligible before curr's
        deadline (a read then would switch to it); the next pick finds it."""
        curr = rq.curr
        if curr is None:
            return None
        self.update_curr(rq)
        se = curr.se
        if se.cfs_rq.nr_running < 2:
            return None
        v = se.deadline
        if self.kernel_618 and se.vruntime < se.vlag < v:
            v = se.vlag               # vprot
        # a protection already over (curr picked again after it: the kernel
        # then skips set_next_entity, so it is not renewed) reschedules at
        # every read, each time to pick curr again, until its deadline: a
        # no-op the machine leaves out
        left = v - se.vruntime
        if left <= 0:
            return 0
        w = se.weight
        # the vruntime's slope is NICE_0_LOAD / weight: round the time up
        return left if w == NICE_0_LOAD else (left * w + NICE_0_LOAD - 1) // NICE_0_LOAD

    def cputime_poll(self, rq):
        """task_sched_runtime() -> update_curr_fair(): update_curr() of the
        running task's own cfs_rq, with its deadline and protection checks."""
        if rq.curr is not None:
            self._update_curr(rq.curr.se.cfs_rq)

    def check_preempt_wakeup(self, rq, p):
        """check_preempt_wakeup_fair(): preempt if the woken entity is what
        pick_eevdf() would run at the level it shares with curr.  With
        PREEMPT_SHORT (85e511df3cec, 6.12, in its 6.17 form 052c3d87c82e
        "sched/fair: Remove spurious shorter slice preemption") a wakee with
        a shorter slice is judged without curr's slice protection and, if it
        wins, cancels it; if it does not, curr's protection shrinks to the
        shortest slice now queued."""
        curr = rq.curr
        if curr is None:
            rq.need_resched = True
            return
        if curr is p or rq.need_resched or not self.wakeup_preemption:
            return
        se, pse = find_matching_se(curr.se, p.se)
        cfs_rq = se.cfs_rq
        self._update_curr(cfs_rq)
        preempt_short = self.preempt_short and pse.slice < se.slice
        if self._pick_eevdf(cfs_rq, not preempt_short) is pse:
            if preempt_short:
                self.cancel_protect_slice(se)
            rq.need_resched = True
        elif preempt_short and self.run_to_parity and self.kernel_618:
            self.update_protect_slice(cfs_rq, se)

    # ------------------------------------------------------------------
    # newidle balancing
    def newidle_balance(self, rq):
        """sched_balance_newidle() with NI_RANDOM (33cf66d88306 "sched/fair:
        Proportional newidle balance"): only while rd->overloaded (which
        lags the CPUs' queues: the machine's ``rd_overloaded``), and at each
        sched domain, innermost first, only if a 1024-sided die falls at or
        under 1 + the level's newidle_ratio, its recent success rate in
        1024ths; a pull counts 1024 / (1 + ratio) successes, so the rate is
        not biased by how seldom it is tried.  After a run of failures
        (pinned, cache-hot or no waiting tasks) a CPU going idle rarely
        pulls for the next ~1000 newidle calls, and waits for a busy CPU's
        tick to kick its nohz balance (calibration/bench/newidle.py measured
        both on this host).  The simulator charges no time for the balance
        itself, so 6.18's gate on avg_idle against that cost
        (max_newidle_lb_cost) never closes here."""
        if not self.ni_random:
            return CFS.newidle_balance(self, rq)
        if not self.machine.rd_overloaded:
            return 0
        self.update_blocked_averages(rq.cpu)
        levels = self.newidle_stats[rq.cpu]
        for i, sd in enumerate(self.domains[rq.cpu]):
            stats = levels[i]
            weight = 1 + stats[2]
            if int(self.newidle_rng.uniform() * 1024) > weight:
                update_newidle_stats(stats, 0)
                continue
            weight = (1024 + weight // 2) // weight
            moved = self.load_balance(rq, sd.span, CPU_NEWLY_IDLE)
            update_newidle_stats(stats, weight if moved else 0)
            if moved:
                return moved
        return 0


def update_newidle_stats(stats: list, success: int) -> None:
    """update_newidle_stats(): ``stats`` = [newidle_call, newidle_success,
    newidle_ratio]; every 512 calls (from 1024 down to 512) the ratio
    becomes the successes counted, and both counts halve."""
    stats[0] += 1
    stats[1] += success
    if stats[0] >= 1024:
        stats[2] = stats[1]
        stats[0] //= 2
        stats[1] //= 2


POLICY = EEVDF
CONFIG = EevdfConfig
