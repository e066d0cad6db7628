"""The interface between the simulated CPUs (sim/machine.py) and a kernel
scheduling class.  The machine owns time, tasks and context switches; the
policy owns the run-queue order.  A new policy is one file in
policies/kernel/ exposing ``POLICY`` (a subclass of KernelScheduler) plus its
config file in scenarios/conf/scheduler/.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

# enqueue/dequeue flags, as in kernel/sched/sched.h
ENQUEUE_WAKEUP = 0x01
ENQUEUE_INITIAL = 0x80        # a new task (fork)
ENQUEUE_MIGRATED = 0x40
DEQUEUE_SLEEP = 0x01

# wake flags
WF_FORK = 0x02
WF_TTWU = 0x08

# balancing idle types (enum cpu_idle_type)
CPU_IDLE = 0
CPU_NOT_IDLE = 1
CPU_NEWLY_IDLE = 2


class KernelScheduler(ABC):
    name = "abstract"
    # sysctl_sched_migration_cost: the machine seeds rq->avg_idle with it
    migration_cost = 500_000

    def __init__(self, cfg, machine):
        self.cfg = cfg
        self.machine = machine

    def init_task_group(self, tg) -> None:
        """Called once a task group's per-CPU cfs_rqs and entities exist."""

    @abstractmethod
    def enqueue_task(self, rq, p, flags: int) -> None: ...

    @abstractmethod
    def dequeue_task(self, rq, p, flags: int) -> None: ...

    @abstractmethod
    def pick_next_task(self, rq, prev):
        """Return the next task to run (``prev`` may still be runnable and is
        put back by the policy), or None to go idle."""

    @abstractmethod
    def put_prev_task(self, rq, prev) -> None: ...

    @abstractmethod
    def task_tick(self, rq, curr) -> None:
        """Scheduler tick on a busy CPU; sets ``rq.need_resched`` to preempt."""

    @abstractmethod
    def check_preempt_wakeup(self, rq, p) -> None:
        """A task was just enqueued on ``rq``; set ``rq.need_resched`` to preempt."""

    @abstractmethod
    def select_task_rq(self, p, prev_cpu: int, wake_flags: int) -> int: ...

    @abstractmethod
    def set_task_rq(self, p, cpu: int) -> None:
        """Point the task's entity at its task group's run queue on ``cpu``."""

    @abstractmethod
    def migrate_task_rq(self, p, new_cpu: int) -> None:
        """The task leaves its CPU (waking elsewhere, or moved by balancing)."""

    def task_dead(self, p) -> None:
        """The task exited: drop what the policy tracks for it."""

    @abstractmethod
    def balance(self, rq, idle: int) -> int:
        """Pull work to ``rq`` from its sched domains; returns tasks moved."""

    @abstractmethod
    def balance_interval_ns(self, rq, idle: int) -> int:
        """How long until ``rq`` balances again."""

    def newidle_allowed(self, rq) -> bool:
        """Whether a CPU about to go idle should try to pull work first."""
        return True

    @abstractmethod
    def update_curr(self, rq) -> None:
        """Bring the accounting of the running task up to now."""

    def hrtick_delay(self, rq):
        """Nanoseconds until curr's slice expires if a high-resolution tick
        is wanted (HRTICK), else None."""
        return None
