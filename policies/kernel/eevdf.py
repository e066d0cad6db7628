# cython: overflowcheck=True
"""EEVDF, the fair class of kernel/sched/fair.c from Linux 6.6 on.

EEVDF kept most of fair.c (PELT, group shares, wake-up and fork placement,
load balancing, task_hot, nohz and newidle balancing), so ``EEVDF``
subclasses ``CFS`` and overrides only what the 6.6 series replaced: the
timeline and its pick, update_curr/update_deadline, place_entity and lag,
entity_tick (no check_preempt_tick), wake-up preemption, reweight_entity and
the sysctls.  Hold it next to fair.c of v6.6; functions carry its names.

Semantics are those of v6.6 (af4cf40470c2 avg_vruntime, 86bfbb7ce4f6 lag
placement, 147f3efaa241 the EEVDF pick, 5e963f2bd465 "Commit to EEVDF",
e8f331bcc270 lag-based cross-runqueue placement, and the 6.6-rc fixes of
pick_eevdf b01db23d5923 and avg_vruntime's rounding), with two later pieces
the simulator's interface asks for:

* a per-task slice, ``task.custom_slice`` (sched_setattr(sched_runtime),
  857b158dc5e8 in 6.12), used by update_deadline and place_entity and
  clamped to [0.1, 100] ms as __setparam_fair() does.  PREEMPT_SHORT, which
  6.12 added with it, is not modelled;
* ENQUEUE_INITIAL reaches place_entity() at a new task's first enqueue
  (c40dd90ac045, 6.12).  In 6.6 task_fork_fair() placed the child with half
  a slice but enqueue_entity() placed it again without the flag, so a new
  task effectively started with a full slice: ``place_deadline_initial:
  false`` reproduces that.

Features as in 6.6 features.h: PLACE_LAG, PLACE_DEADLINE_INITIAL,
RUN_TO_PARITY and WAKEUP_PREEMPTION on (each a config flag), NEXT_BUDDY off
and LAST_BUDDY/the skip buddy removed (5e963f2bd465), so no buddy is ever
set: pick_next_entity() reads the next buddy only under NEXT_BUDDY, and the
one dequeue_task_fair() may still nominate would only count as cache hot
(CACHE_HOT_BUDDY, not modelled).  HRTICK (off in the kernel) is an option
and, as 6.6's hrtick_start_fair(), times what is left of se->slice since the
pick, not the distance to the deadline.  reweight_entity() is 6.6's:
vruntime stays, the relative deadline (queued) or vlag (not queued) is
rescaled; 6.7's reweight_eevdf() is not modelled.  Group entities always use
the base slice (6.6; no min_slice propagation).  Not modelled, beyond what
cfs.py lists: DELAY_DEQUEUE (6.12), sched_yield, idle-policy entities, and
the kernel's fixed-point __calc_delta (exact integer division, as in cfs.py).

Two places where the machine's calls differ from the kernel's: the machine
brings accounting up to date at instants the kernel would not (a burst that
runs on, interval sampling), so its update_curr(rq) charges time without the
deadline check, which the next kernel-side update_curr() makes; and
__schedule() clears TIF_NEED_RESCHED after the pick, so a slice that ends
during pick_next_task/put_prev_task (update_curr on the way) does not leave
a stale reschedule behind.

The timeline is a list sorted by (vruntime, sequence): vruntime, not
deadline, as in 6.6's rbtree.  An entity's key never changes while queued
(curr is not in the tree), eligibility is monotone in vruntime, so the
eligible entities are a prefix of the list and pick_eevdf() scans that
prefix for the earliest deadline: exact, where the kernel descends an
rbtree augmented with min_deadline.  Ties on deadline go to a queued
entity, the smaller vruntime first: curr keeps the CPU only with a strictly
earlier deadline, as pick_eevdf() decides since its tree is sorted by
deadline ("if (!best || (curr && entity_before(curr, best)))", 6.12+;
6.6 kept curr on a tie).  The difference is visible: two equal hogs on one
CPU switch at every tick on this project's 6.18 host, and did at every
other tick in the 6.6 model (calibration/fits/this-vm.md, density).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Optional

from policies.kernel.cfs import CFS, GRANULARITY_RANGE_NS, FairConfig, scaled
from sim.sched_class import tunable
from sim.sched_flags import ENQUEUE_INITIAL, ENQUEUE_MIGRATED

SCHED_BASE_SLICE_NS = 750_000          # normalized_sysctl_sched_base_slice (6.6 .. 6.14)
# __setparam_fair(): the bounds of a sched_runtime slice request
CUSTOM_SLICE_RANGE_NS = (100_000, 100_000_000)


@dataclass
class EevdfConfig(FairConfig):
    """The sysctl and sched_features of EEVDF.  ``base_slice_ns: null`` is
    the kernel default, SCHED_BASE_SLICE_NS times the tunable_scaling
    factor (debugfs sched/base_slice_ns)."""
    base_slice_ns: Optional[int] = tunable(None, range=GRANULARITY_RANGE_NS)
    # sched_features, 6.6 defaults
    # PLACE_LAG: keep a task's lag across sleep and migration
    place_lag: bool = tunable(True)
    # PLACE_DEADLINE_INITIAL: a new task's first deadline is half a slice away
    place_deadline_initial: bool = tunable(True)
    # RUN_TO_PARITY: no wake-up preemption of curr until it uses its slice
    # or loses eligibility
    run_to_parity: bool = tunable(True)


def div_s64(a: int, b: int) -> int:
    """The kernel's signed division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


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
        for rq in machine.rqs:
            rq.cfs.timeline = Timeline()

    def init_sysctls(self, cfg):
        """6.6's: the base slice replaced the granularities, and lag
        placement and RUN_TO_PARITY the sleeper credit and buddies."""
        self.sysctl_sched_base_slice = scaled(cfg.base_slice_ns, SCHED_BASE_SLICE_NS,
                                              self.factor)
        self.place_lag = bool(cfg.place_lag)
        self.place_deadline_initial = bool(cfg.place_deadline_initial)
        self.run_to_parity = bool(cfg.run_to_parity)

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
        insort(cfs_rq.timeline, (se.vruntime, seq, se))

    def _dequeue_timeline(self, cfs_rq, se):
        tl = cfs_rq.timeline
        i = bisect_left(tl, (se.vruntime, se.rb_seq))
        if i == len(tl) or tl[i][2] is not se:
            raise RuntimeError("EEVDF timeline: a queued entity's vruntime changed")
        del tl[i]
        se.rb_seq = 0
        self.avg_vruntime_sub(cfs_rq, se)

    def pick_eevdf(self, cfs_rq):
        """The eligible entity with the earliest virtual deadline."""
        tl = cfs_rq.timeline
        v0 = cfs_rq.min_vruntime
        avg, load = self._avg_sums(cfs_rq)
        curr = cfs_rq.curr
        if curr is not None and (not curr.on_rq or avg < (curr.vruntime - v0) * load):
            curr = None
        # RUN_TO_PARITY: once picked, curr runs until it is no longer
        # eligible or update_deadline() gives it a new slice (vlag holds the
        # deadline it was picked with, see set_next_entity())
        if self.run_to_parity and curr is not None and curr.vlag == curr.deadline:
            return curr
        best = None
        for v, _, se in tl:
            if avg < (v - v0) * load:
                break
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
        (and for group entities) sysctl_sched_base_slice."""
        task = se.task
        if task is not None and task.custom_slice:
            low, high = CUSTOM_SLICE_RANGE_NS
            return min(max(int(task.custom_slice), low), high)
        return self.sysctl_sched_base_slice

    def update_deadline(self, cfs_rq, se):
        if se.vruntime < se.deadline:
            return
        # vd_i = ve_i + r_i / w_i
        se.slice = self.slice_of(se)
        se.deadline = se.vruntime + self.calc_delta_fair(se.slice, se)
        # the request is used up: reschedule (no buddies to clear)
        if cfs_rq.nr_running > 1:
            cfs_rq.rq.need_resched = True

    def _update_curr(self, cfs_rq):
        """update_curr().  The deadline is checked even when no time has
        passed: the kernel's own calls would find nothing to do then, but
        the machine's bookkeeping calls (update_curr(rq)) skip the check, and
        the next kernel call must make it."""
        CFS._update_curr(self, cfs_rq)
        curr = cfs_rq.curr
        if curr is not None:
            self.update_deadline(cfs_rq, curr)

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
        self._update_curr(cfs_rq)
        self.update_load_avg(cfs_rq, se)
        self.update_entity_lag(cfs_rq, se)
        if se is not cfs_rq.curr:
            self._dequeue_timeline(cfs_rq, se)
        se.on_rq = False
        cfs_rq.load_weight -= se.weight
        cfs_rq.nr_running -= 1
        self.update_cfs_group(se)
        self.update_min_vruntime(cfs_rq)

    def set_next_entity(self, cfs_rq, se):
        CFS.set_next_entity(self, cfs_rq, se)
        if se.on_rq:
            # the kernel's HACK: vlag, unused until dequeue, keeps the
            # deadline se was picked with, for RUN_TO_PARITY
            se.vlag = se.deadline

    # ------------------------------------------------------------------
    # task-level interface
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

    def check_preempt_wakeup(self, rq, p):
        """check_preempt_wakeup() of 6.6: preempt if the woken entity is
        what pick_eevdf() would run at the level it shares with curr."""
        curr = rq.curr
        if curr is None:
            rq.need_resched = True
            return
        if curr is p or rq.need_resched or not self.wakeup_preemption:
            return
        se, pse = self.find_matching_se(curr.se, p.se)
        cfs_rq = se.cfs_rq
        self._update_curr(cfs_rq)
        if self.pick_eevdf(cfs_rq) is pse:
            rq.need_resched = True


POLICY = EEVDF
CONFIG = EevdfConfig
