"""The interface between the simulated CPUs (sim/machine.py) and a kernel
scheduling class.  The machine owns time, tasks and context switches; the
policy owns the run-queue order.  A new policy is one file in
policies/kernel/ exposing ``POLICY`` (a subclass of KernelScheduler) and
``CONFIG`` (a dataclass deriving from SchedConfig: its keys, types, defaults
and allowed values), plus its option file(s) in scenarios/conf/scheduler/.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

# a required key (omegaconf.MISSING, spelled out so sim/ does not import omegaconf)
MISSING: Any = "???"


def tunable(default: Any = MISSING, *, choices: tuple | None = None,
            range: tuple | None = None) -> Any:
    """A scheduler config field with its allowed values, checked by
    scenarios.validate before a run: ``choices`` (a tuple of values) or an
    inclusive numeric ``range`` (low, high); high may be None (no upper
    bound).  ``None`` is always allowed for Optional fields (kernel default)."""
    return field(default=default, metadata={"choices": choices, "range": range})


# task scheduling policies (include/uapi/linux/sched.h)
SCHED_NORMAL = "normal"
SCHED_RR = "rr"
TASK_POLICIES = (SCHED_NORMAL, SCHED_RR)
RT_PRIORITY_RANGE = (1, 99)      # sched_priority of SCHED_RR


@dataclass
class SchedConfig:
    """Keys every scheduler option has: its label, the fair-class module in
    policies/kernel that implements it, and the real-time class (always
    present, as rt_sched_class is in the kernel) with its sysctls."""
    name: str = MISSING            # the option's label in results
    policy: str = MISSING          # module name in policies/kernel
    # scheduling policy of workload threads: normal (the fair class) or rr
    task_policy: str = tunable(SCHED_NORMAL, choices=TASK_POLICIES)
    rt_priority: int = tunable(50, range=RT_PRIORITY_RANGE)  # of rr threads
    sched_rr_timeslice_ms: int = tunable(100, range=(1, None))
    sched_rt_period_us: int = tunable(1_000_000, range=(1, 2**31 - 1))
    # -1: RT threads may take the whole period (no throttling)
    sched_rt_runtime_us: int = tunable(950_000, range=(-1, 2**31 - 1))
    # CFS bandwidth control: the chunk a CPU borrows from a group's quota
    # (/proc/sys/kernel/sched_cfs_bandwidth_slice_us, at least 1 us)
    sched_cfs_bandwidth_slice_us: int = tunable(5_000, range=(1, 2**31 - 1))

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
