"""A task of the simulated host, outside the workload, run by what wakes it.

The real backend's load generator (sim/loadgen.py), the per-CPU kernel
threads and RCU's grace-period kthread (sim/kthreads.py) are each one
thread that something else hands work: a dispatch, a sampler read, a
kworker's item, a grace period's scan.
``HostWork`` is that thread's owner: its task is forked with the first
work, woken with work while it sleeps, and work handed to it while it runs
is added to the run (the real thread finds more to do before it sleeps
again).  Its task is a host task (``Task.host``, root cgroup): its own
switch-outs are not the workload's, and ``ran_ns`` gives its CPU to the
summary's host time.
"""
from __future__ import annotations

from sim.task import BURST_BLOCK


class HostWork:
    """The owner of one host task (module docstring)."""

    def __init__(self, machine):
        self.machine = machine
        self.task = None
        self.forked = False
        self.queued_ns = 0            # work handed to it while it ran
        self.given_ns = 0             # CPU handed to it so far (ran_ns)

    def make_task(self, name: str, nice: int = 0):
        """Its task, fair at ``nice`` in the root cgroup until the owner says
        otherwise; not running until it is given work."""
        t = self.machine.new_task(name, self.machine.root_tg, nice, 1, 0, self)
        t.host = True
        self.task = t
        return t

    def give(self, ns: int, hint_cpu: int) -> None:
        """``ns`` of work now (``hint_cpu``: where a first fork is placed from)."""
        t = self.task
        m = self.machine
        if not self.forked:
            self.forked = True
            self._run(ns)
            m.wake_up_new_task(t, hint_cpu)
        elif t.sleeping:
            self._run(ns)
            m.wake_up(t)
        else:
            self.queued_ns += ns

    def _run(self, ns: int) -> None:
        self.task.remaining = ns
        self.given_ns += ns

    def ran_ns(self, task) -> int:
        """Its CPU time so far (as of the machine's last sync)."""
        return self.given_ns - task.remaining

    def burst_done(self, task) -> int:
        if self.queued_ns:
            self._run(self.queued_ns)
            self.queued_ns = 0
            return 0
        return BURST_BLOCK
