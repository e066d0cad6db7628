"""Scheduler invariants, checkable at any instant of a run.  Tests (and
anyone writing a new policy) use them to catch lost, duplicated or
mis-accounted tasks and idle cores next to waiting work."""
from __future__ import annotations


class InvariantError(AssertionError):
    pass


def check_rq_invariants(machine, tasks=()) -> None:
    """Every runnable task is on exactly one run queue, the counters agree
    with the queues, and the running task belongs to its CPU."""
    seen: dict[int, int] = {}
    for rq in machine.rqs:
        if rq.nr_running != len(rq.cfs_tasks):
            raise InvariantError(f"cpu{rq.cpu}: nr_running {rq.nr_running} but "
                                 f"{len(rq.cfs_tasks)} queued tasks")
        if rq.cfs.h_nr_running != rq.nr_running:
            raise InvariantError(f"cpu{rq.cpu}: h_nr_running {rq.cfs.h_nr_running} "
                                 f"!= nr_running {rq.nr_running}")
        for p in rq.cfs_tasks:
            if p.pid in seen:
                raise InvariantError(f"task {p.name} queued on cpu{seen[p.pid]} and cpu{rq.cpu}")
            seen[p.pid] = rq.cpu
            if p.sleeping or p.dead or p.cpu != rq.cpu or not p.se.on_rq:
                raise InvariantError(f"task {p.name} on cpu{rq.cpu} has inconsistent state")
        if rq.curr is not None and (rq.curr not in rq.cfs_tasks or rq.curr.cpu != rq.cpu):
            raise InvariantError(f"cpu{rq.cpu} runs {rq.curr.name} which is not queued there")
        if rq.curr is None and rq.nr_running and rq.switch_end <= machine.engine.now \
                and not rq.resched_pending:
            raise InvariantError(f"cpu{rq.cpu} idles with {rq.nr_running} runnable tasks")
    for p in tasks:
        if not p.sleeping and not p.dead and p.pid not in seen:
            raise InvariantError(f"runnable task {p.name} is on no run queue")


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
        waiting = [p for rq in m.rqs for p in rq.cfs_tasks if p is not rq.curr]
        for rq in m.rqs:
            idle = rq.curr is None and rq.nr_running == 0 and rq.switch_end <= now
            starved = idle and any(p.cpus_allowed is None or rq.cpu in p.cpus_allowed
                                   for p in waiting)
            if starved:
                start = self.since.setdefault(rq.cpu, now)
                self.worst_ns = max(self.worst_ns, now - start)
            else:
                self.since.pop(rq.cpu, None)
        self.samples += 1
        m.engine.call_later(self.period_ns, self._sample)
