"""Scheduler invariants, checkable at any instant of a run.  Tests (and
anyone writing a new policy) use them to catch lost, duplicated or
mis-accounted tasks and idle cores next to waiting work."""
from __future__ import annotations

from sim.rt import MAX_RT_PRIO


class InvariantError(AssertionError):
    pass


def check_rq_invariants(machine, tasks=()) -> None:
    """Every runnable task is on exactly one run queue, the counters agree
    with the queues, and the running task belongs to its CPU.  Fair tasks
    under a throttled group (CFS bandwidth) are queued but not runnable:
    they are not in nr_running and never run.  Tasks EEVDF keeps queued
    while asleep (DELAY_DEQUEUE, ``se.sched_delayed``) count in nr_running
    and h_nr_running as the kernel counts them, but are on no task list
    and never run."""
    seen: dict[int, int] = {}
    delayed_on = [[] for _ in machine.rqs]
    for tg in machine.groups.values():
        for p in tg.tasks:
            if p.se.sched_delayed:
                if not p.sleeping or not p.se.on_rq or p in machine.rqs[p.cpu].cfs_tasks \
                        or machine.rqs[p.cpu].curr is p:
                    raise InvariantError(f"delayed task {p.name} has inconsistent state")
                if not throttled(p):
                    delayed_on[p.cpu].append(p)
    for rq, rt_rq in zip(machine.rqs, machine.rt.rt_rqs):
        rt_tasks = [p for q in rt_rq.queue.values() for p in q]
        queued = list(rq.cfs_tasks) + rt_tasks
        fair = [p for p in rq.cfs_tasks if not throttled(p)]
        delayed = len(delayed_on[rq.cpu])
        if rq.nr_running != len(fair) + delayed + len(rt_tasks) \
                or rt_rq.rt_nr_running != len(rt_tasks):
            raise InvariantError(f"cpu{rq.cpu}: nr_running {rq.nr_running} "
                                 f"(rt {rt_rq.rt_nr_running}) but {len(fair)} runnable "
                                 f"fair and {len(rt_tasks)} RT tasks queued")
        if rq.cfs.h_nr_running != len(fair) + delayed:
            raise InvariantError(f"cpu{rq.cpu}: h_nr_running {rq.cfs.h_nr_running} "
                                 f"!= {len(fair)} runnable and {delayed} delayed fair tasks "
                                 f"queued")
        if rq.curr is not None and rq.curr.prio >= MAX_RT_PRIO and throttled(rq.curr):
            raise InvariantError(f"cpu{rq.cpu} runs {rq.curr.name} of a throttled group")
        for p in queued:
            if p.pid in seen:
                raise InvariantError(f"task {p.name} queued on cpu{seen[p.pid]} and cpu{rq.cpu}")
            seen[p.pid] = rq.cpu
            rt = p in rt_tasks
            if p.sleeping or p.dead or p.cpu != rq.cpu or p.se.on_rq == rt \
                    or rt != (machine.sched_class(p) is machine.rt):
                raise InvariantError(f"task {p.name} on cpu{rq.cpu} has inconsistent state")
        if rq.curr is not None and (rq.curr.pid not in seen or rq.curr.cpu != rq.cpu):
            raise InvariantError(f"cpu{rq.cpu} runs {rq.curr.name} which is not queued there")
        runnable = len(fair) + (0 if rt_rq.rt_throttled else len(rt_tasks))
        if rq.curr is None and runnable and rq.switch_end <= machine.engine.now \
                and not rq.resched_pending:
            raise InvariantError(f"cpu{rq.cpu} idles with {runnable} runnable tasks")
    for p in tasks:
        if not p.sleeping and not p.dead and p.pid not in seen:
            raise InvariantError(f"runnable task {p.name} is on no run queue")


def throttled(p) -> bool:
    """A fair task queued under a group that is out of CFS bandwidth."""
    return p.se.cfs_rq.throttle_count > 0


class WorkConservationMonitor:
    """Samples the host every ``period_ns`` and records, per idle CPU, how
    long it stayed idle while a task it was allowed to run waited
    elsewhere.  ``worst_ns`` is the longest such stretch."""

    def __init__(self, machine, period_ns: int, tasks=()):
        self.machine = machine
        self.period_ns = period_ns
        self.tasks = tasks
        self.since: dict[int, int] = {}
        self.worst_ns = 0
        self.samples = 0

    def start(self):
        self.machine.engine.call_later(self.period_ns, self._sample)

    def _sample(self):
        m = self.machine
        now = m.engine.now
        check_rq_invariants(m, self.tasks)
        waiting = [p for rq in m.rqs for p in rq.cfs_tasks
                   if p is not rq.curr and not throttled(p)]
        for rq in m.rqs:
            idle = rq.curr is None and rq.nr_running == 0 and rq.switch_end <= now
            # a task may not move to a CPU where its group is throttled
            # (throttled_lb_pair), so that CPU idling is not a fault
            starved = idle and any((p.cpus_allowed is None or rq.cpu in p.cpus_allowed)
                                   and not p.tg.cfs_rq[rq.cpu].throttle_count
                                   for p in waiting)
            if starved:
                start = self.since.setdefault(rq.cpu, now)
                self.worst_ns = max(self.worst_ns, now - start)
            else:
                self.since.pop(rq.cpu, None)
        self.samples += 1
        m.engine.call_later(self.period_ns, self._sample)
