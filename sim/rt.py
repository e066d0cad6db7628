"""The real-time class: SCHED_RR and SCHED_FIFO as in kernel/sched/rt.c (Linux 5.18).

Like rt_sched_class in the kernel this class is always present and ranks
above the fair class: a runnable RT task preempts a fair one at once, and a
CPU runs fair tasks only while it has no runnable RT task (or its RT
runtime is throttled).  Modelled:

- per-CPU ``rt_rq`` with one FIFO list per priority (``prio = 99 -
  rt_priority``, lower is more important); SCHED_RR rotates a task to the
  tail of its list when its ``sched_rr_timeslice_ms`` quantum, counted in
  ticks, runs out and another task of the same priority is queued;
  SCHED_FIFO has no quantum: it runs until it blocks or a more important
  task preempts it (task_tick_rt() returns early for it);
- RT bandwidth (``sched_rt_runtime_us`` per ``sched_rt_period_us``, per
  CPU as with RT_RUNTIME_SHARE off, the default since v5.1): an rt_rq whose
  ``rt_time`` exceeds the runtime is throttled until the period timer pays
  it back, and the CPU then runs fair tasks or idles;
- placement (``select_task_rq_rt``/``find_lowest_rq``): a woken task stays
  on its CPU unless that CPU runs an RT task it cannot preempt; then it goes
  to a CPU of the lowest cpupri (no runnable RT task: idle and fair-only
  CPUs rank alike since v5.10), its own CPU first, then the nearest;
- push on wake-up to a lower-priority CPU when the CPU is RT-overloaded, and
  pull from overloaded CPUs when a CPU's last RT task sleeps.

Not modelled: SCHED_DEADLINE, RT group scheduling
(CONFIG_RT_GROUP_SCHED), priority inheritance, RT_RUNTIME_SHARE.
"""
from __future__ import annotations

from collections import deque

from sim.bandwidth import RUNTIME_INF
from sim.sched_class import SCHED_RR
from sim.sched_flags import WF_FORK, WF_TTWU

MAX_RT_PRIO = 100
USEC = 1000


def rt_prio(rt_priority: int) -> int:
    """Kernel prio of an RT task: 0 is the highest."""
    return MAX_RT_PRIO - 1 - rt_priority


class RtRq:
    """kernel ``struct rt_rq`` (root level; no RT group scheduling)."""

    __slots__ = ("queue", "rt_nr_running", "highest", "rt_time", "rt_throttled", "exec_start")

    def __init__(self):
        self.queue: dict[int, deque] = {}    # prio -> tasks in run order (curr included)
        self.rt_nr_running = 0
        # rt_rq->highest_prio.curr, kept as the kernel keeps it (inc/dec_rt_prio):
        # placement reads every CPU's at each RT wake-up
        self.highest = MAX_RT_PRIO
        self.rt_time = 0                     # runtime used in this period, ns
        self.rt_throttled = False
        self.exec_start = 0                  # when curr's RT time was last accounted

    def highest_prio(self) -> int:
        """rt_rq->highest_prio.curr (MAX_RT_PRIO: none queued)."""
        return self.highest


class RtClass:
    def __init__(self, cfg, machine):
        """``cfg``: the scheduler option (a sim.sched_class.SchedConfig),
        whose sched_rr_timeslice_ms and sched_rt_* sysctls the class reads."""
        self.machine = machine
        self.clock = machine.engine
        tick = machine.tick_ns
        # sched_rr_timeslice is kept in jiffies: round the sysctl to ticks
        timeslice_ns = int(cfg.sched_rr_timeslice_ms) * 1_000_000
        self.rr_timeslice = max(1, round(timeslice_ns / tick))
        self.rt_period = int(cfg.sched_rt_period_us) * USEC
        runtime = int(cfg.sched_rt_runtime_us)
        self.rt_runtime = RUNTIME_INF if runtime < 0 else runtime * USEC
        self.rt_rqs = [RtRq() for _ in machine.rqs]
        self.rqs = machine.rqs
        self.cpus_by_distance = machine.cpus_by_distance
        self._period_timer_armed = False
        self.nr_pushes = 0
        self.nr_pulls = 0

    # ------------------------------------------------------------------
    # queue
    def enqueue_task(self, rq, p, flags: int) -> None:
        rt_rq = self.rt_rqs[rq.cpu]
        prio = p.prio
        q = rt_rq.queue.get(prio)
        if q is None:
            q = rt_rq.queue[prio] = deque()
            if prio < rt_rq.highest:
                rt_rq.highest = prio
        q.append(p)
        rt_rq.rt_nr_running += 1
        rq.nr_running += 1
        p.rt_time_slice = p.rt_time_slice or self.rr_timeslice
        if not self._period_timer_armed and self.rt_runtime != RUNTIME_INF:
            self._period_timer_armed = True
            self.machine.engine.call_later(self.rt_period, self._sched_rt_period_timer)

    def dequeue_task(self, rq, p, flags: int) -> None:
        rt_rq = self.rt_rqs[rq.cpu]
        if rq.curr is p:
            self.update_curr(rq)
        prio = p.prio
        q = rt_rq.queue[prio]
        q.remove(p)
        if not q:
            del rt_rq.queue[prio]
            if prio == rt_rq.highest:
                rt_rq.highest = min(rt_rq.queue) if rt_rq.queue else MAX_RT_PRIO
        rt_rq.rt_nr_running -= 1
        rq.nr_running -= 1

    def has_runnable(self, rq) -> bool:
        rt_rq = self.rt_rqs[rq.cpu]
        return rt_rq.rt_nr_running > 0 and not rt_rq.rt_throttled

    def pick_next_task(self, rq):
        """pick_next_rt_entity(): the head of the highest-priority list."""
        rt_rq = self.rt_rqs[rq.cpu]
        p = rt_rq.queue[rt_rq.highest][0]
        rt_rq.exec_start = self.clock._now
        return p

    def put_prev_task(self, rq, prev) -> None:
        self.update_curr(rq)

    # ------------------------------------------------------------------
    # time accounting and bandwidth
    def update_curr(self, rq) -> None:
        """update_curr_rt(): charge curr's run time to the rt_rq's budget."""
        curr = rq.curr
        if curr is None or curr.prio >= MAX_RT_PRIO:
            return
        rt_rq = self.rt_rqs[rq.cpu]
        now = self.clock._now
        delta = now - rt_rq.exec_start
        if delta <= 0:
            return
        rt_rq.exec_start = now
        curr.tg.usage_ns += delta            # cpuacct_charge()
        if self.rt_runtime == RUNTIME_INF:
            return
        rt_rq.rt_time += delta
        # sched_rt_runtime_exceeded()
        if not rt_rq.rt_throttled and rt_rq.rt_time > self.rt_runtime:
            rt_rq.rt_throttled = True
            rq.need_resched = True

    def _sched_rt_period_timer(self) -> None:
        """do_sched_rt_period_timer(): pay back one period's runtime and
        unthrottle the rt_rqs that are under budget again."""
        m = self.machine
        for rq, rt_rq in zip(m.rqs, self.rt_rqs):
            if rq.curr is not None and rq.curr.prio < MAX_RT_PRIO:
                self.update_curr(rq)
            if rt_rq.rt_time:
                rt_rq.rt_time -= min(rt_rq.rt_time, self.rt_runtime)
            if rt_rq.rt_throttled and rt_rq.rt_time < self.rt_runtime:
                rt_rq.rt_throttled = False
                if rt_rq.rt_nr_running:
                    m.resched_curr(rq)
        m.engine.call_later(self.rt_period, self._sched_rt_period_timer)

    def task_tick(self, rq, p) -> None:
        """task_tick_rt(): account, then rotate an expired RR quantum."""
        self.update_curr(rq)
        if p.sched_policy != SCHED_RR:
            return
        p.rt_time_slice -= 1
        if p.rt_time_slice > 0:
            return
        p.rt_time_slice = self.rr_timeslice
        q = self.rt_rqs[rq.cpu].queue[p.prio]
        if len(q) > 1:                       # requeue_task_rt(): to the tail
            q.remove(p)
            q.append(p)
            rq.need_resched = True

    def check_preempt_curr(self, rq, p) -> None:
        """check_preempt_curr_rt(): only a strictly higher priority preempts."""
        curr = rq.curr
        if curr is None or p.prio < curr.prio:
            rq.need_resched = True

    # ------------------------------------------------------------------
    # placement and balancing
    def cpupri(self, cpu: int) -> int:
        """The CPU's priority as cpupri sees it: its highest runnable RT
        prio, or MAX_RT_PRIO when it runs fair tasks or nothing."""
        return self.rt_rqs[cpu].highest

    def find_lowest_rq(self, p, cpu: int):
        """A CPU whose cpupri is the lowest one below p's priority: ``cpu``
        (p's CPU) if it qualifies, else the nearest (cpumask of the smallest
        sched domain first); None if every CPU runs RT work at least as
        important.  One pass in distance order (``cpu`` first), keeping the
        first CPU of each better cpupri."""
        allowed = p.cpus_allowed
        best = -1
        best_pri = p.prio            # a candidate must rank strictly below p
        for c in self.cpus_by_distance[cpu]:
            if allowed is not None and c not in allowed:
                continue
            pri = self.rt_rqs[c].highest
            if pri > best_pri:
                best, best_pri = c, pri
                if pri == MAX_RT_PRIO:
                    break            # no RT work at all: nothing ranks lower
        return None if best < 0 else best

    def select_task_rq(self, p, prev_cpu: int, wake_flags: int) -> int:
        """select_task_rq_rt()"""
        allowed = p.cpus_allowed
        if allowed is not None and prev_cpu not in allowed:
            prev_cpu = min(allowed)
        if not wake_flags & (WF_TTWU | WF_FORK):
            return prev_cpu
        curr = self.rqs[prev_cpu].curr
        if curr is not None and curr.prio < MAX_RT_PRIO and curr.prio <= p.prio:
            target = self.find_lowest_rq(p, prev_cpu)
            if target is not None and p.prio < self.cpupri(target):
                return target
        return prev_cpu

    def _pushable(self, rq):
        """pick_next_pushable_task(): the highest-priority queued RT task
        that is not running and may run elsewhere."""
        rt_rq = self.rt_rqs[rq.cpu]
        for prio in sorted(rt_rq.queue):
            for p in rt_rq.queue[prio]:
                if p is not rq.curr and (p.cpus_allowed is None or len(p.cpus_allowed) > 1):
                    return p
        return None

    def push_rt_tasks(self, rq) -> None:
        """push_rt_tasks(): move queued RT tasks to CPUs of lower priority."""
        m = self.machine
        while self.rt_rqs[rq.cpu].rt_nr_running > 1:
            p = self._pushable(rq)
            if p is None:
                return
            target = self.find_lowest_rq(p, rq.cpu)
            if target is None or target == rq.cpu or not p.prio < self.cpupri(target):
                return
            m.move_queued_task(p, rq, m.rqs[target])
            self.nr_pushes += 1
            m.resched_curr(m.rqs[target])

    def task_woken(self, rq, p) -> None:
        """task_woken_rt(): push if p must wait behind an RT task."""
        curr = rq.curr
        if (curr is not p and not rq.need_resched and curr is not None
                and curr.prio < MAX_RT_PRIO and curr.prio <= p.prio
                and (p.cpus_allowed is None or len(p.cpus_allowed) > 1)):
            self.push_rt_tasks(rq)

    def need_pull(self, rq, prev) -> bool:
        """need_pull_rt_task(): prev left and what remains is less important."""
        return self.rt_rqs[rq.cpu].highest > prev.prio

    def pull_rt_task(self, this_rq) -> int:
        """pull_rt_task(): take queued RT tasks more important than ours
        from RT-overloaded CPUs."""
        m = self.machine
        moved = 0
        for cpu, src_rt_rq in enumerate(self.rt_rqs):
            if cpu == this_rq.cpu or src_rt_rq.rt_nr_running < 2:
                continue
            src = m.rqs[cpu]
            p = self._pushable(src)
            if p is None or (p.cpus_allowed is not None and this_rq.cpu not in p.cpus_allowed):
                continue
            if not p.prio < self.rt_rqs[this_rq.cpu].highest:
                continue
            if src.curr is not None and p.prio < src.curr.prio:
                continue   # p is about to preempt there
            m.move_queued_task(p, src, this_rq)
            self.nr_pulls += 1
            moved += 1
        return moved
