"""The interface between the simulated CPUs (sim/machine.py) and a kernel
scheduling class.  The machine owns time, tasks and context switches; the
policy owns the run-queue order.  A new policy is one file in
policies/kernel/ exposing ``POLICY`` (a subclass of KernelScheduler) and
``CONFIG`` (a dataclass deriving from SchedConfig: its keys, types, defaults
and allowed values), plus its option file(s) in scenarios/conf/scheduler/.

The policy receives its option as an instance of that dataclass (built by
``sim.config.from_mapping`` from the scenario's mapping) and reads its attributes once,
at construction: each default is written once, on the dataclass field.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.config import MISSING, tunable
from sim.sched_flags import CPU_NEWLY_IDLE

# task scheduling policies (include/uapi/linux/sched.h)
SCHED_NORMAL = "normal"
SCHED_RR = "rr"
SCHED_FIFO = "fifo"
# what a scenario may give its threads (scheduler.task_policy, cgroups' task_policy)
TASK_POLICIES = (SCHED_NORMAL, SCHED_RR)
# what the machine implements (Machine.sched_setscheduler): SCHED_FIFO is
# SCHED_RR without the round-robin quantum, as in kernel/sched/rt.c
SCHED_POLICIES = (SCHED_NORMAL, SCHED_RR, SCHED_FIFO)
RT_POLICIES = (SCHED_RR, SCHED_FIFO)
RT_PRIORITY_RANGE = (1, 99)      # sched_priority of SCHED_RR and SCHED_FIFO


@dataclass
class SchedConfig:
    """Keys every scheduler option has: its label, the fair-class module in
    policies/kernel that implements it, and the real-time class (always
    present, as rt_sched_class is in the kernel) with its sysctls.  The
    defaults are the kernel's: RT threads may run 950 ms per 1 s period on
    each CPU, so the fair class keeps 5%."""
    name: str = MISSING            # the option's label in results
    policy: str = MISSING          # module name in policies/kernel
    # scheduling policy of workload threads: normal (the fair class) or rr
    # (SCHED_RR; a controller may also move threads to it)
    task_policy: str = tunable(SCHED_NORMAL, choices=TASK_POLICIES)
    rt_priority: int = tunable(50, range=RT_PRIORITY_RANGE)  # of rr threads (chrt -r 50)
    # sysctl_sched_migration_cost (not scaled by CPUs): how long after it ran
    # a task stays cache hot for balancing, and the machine's rq->avg_idle
    # cap (2x) that gates newidle balancing
    migration_cost_ns: int = tunable(500_000, range=(0, None))
    # a busy CPU's tick kicks an idle CPU's balance with an IPI (kick_ilb()),
    # which the idle CPU takes after this CPU's tick is over, so the task
    # the tick preempted is cache hot to it (true; docs/scheduling.md
    # "nohz idle balance"); false: the idle CPU balances inside the tick,
    # before the preemption (colosim before 2026-11-27; cfs and lags keep
    # it until their shipped experiments are re-run)
    nohz_kick_ipi: bool = tunable(False)
    # sched_balance_rq()'s back-off: a periodic or nohz balance that moves
    # nothing because there was no imbalance doubles its domain's
    # sd->balance_interval up to max_interval (twice the span weight, ms),
    # or up to MAX_PINNED_INTERVAL (512 ms) when every task it could have
    # moved was pinned; one that finds an imbalance resets it to the span
    # weight (docs/scheduling.md "The balance interval's back-off").  false: the interval
    # stays at the span weight (colosim before 2026-11-27; cfs and lags
    # keep it until their shipped experiments are re-run)
    balance_backoff: bool = tunable(False)
    # sched_setaffinity() on the running task, which stays where it is,
    # still dequeues and requeues it (__do_set_cpus_allowed(): DEQUEUE_SAVE
    # and ENQUEUE_RESTORE); that dequeue's update_curr() reschedules it under
    # EEVDF once its slice is used up, at the system call's return
    # (calibration/bench/delay_dequeue.py saw it).  false: the change leaves
    # it alone (colosim before 2026-11-27; cfs, lags and eevdf66 keep it)
    affinity_requeue: bool = tunable(False)
    # PELT's propagation up the task-group hierarchy (add_tg_cfs_propagate,
    # update_tg_cfs_load; Linux 4.13 on): a task attached to or removed
    # from a group's cfs_rq (forked, exited, migrated) changes every
    # ancestor's load at once, not as its group entity's own average moves
    # (docs/scheduling.md "Event model").  false: the group entity's average
    # alone carries it up, over tens of ms.  Off for every scheduler until
    # the balancer's gap to this host is understood (docs/host-validation.md
    # "Where the host's migrations come from")
    pelt_propagate: bool = tunable(False)
    # calculate_imbalance()'s migrate_task for an idle CPU (its own tick's
    # balance or the nohz balance done for it): the local group has spare
    # capacity, so it takes (busiest's nr_running - its own) / 2 tasks, up
    # to sysctl_sched_nr_migrate examined, stopping when the source is down
    # to one (detach_tasks()); a newly idle CPU takes one (CONFIG_PREEMPTION).
    # false: every idle balance takes one task.  Off for every scheduler,
    # as pelt_propagate
    migrate_task_half: bool = tunable(False)
    # fork placement when no allowed CPU is idle, as the kernel's
    # sched_balance_find_dst_group() (find_idlest_group(), reworked in 5.5)
    # decides it: each CPU a group, classified overloaded (two or more
    # runnable) or fully busy (one); the parent's CPU keeps the child unless
    # another CPU is of a lower class, or of the same class with a load
    # lighter by NICE_0_LOAD x (imbalance_pct - 100) % and by imbalance_pct
    # (docs/scheduling.md "Fork placement").  This host's native workers
    # started 72 % of their threads on the dispatcher's CPU, the least-loaded
    # rule 38 %.  false: the least loaded CPU, (h_nr_running, load_avg)
    # (colosim before 2026-11-28; cfs, lags and eevdf66 keep it)
    find_idlest_group: bool = tunable(False)
    # tick_nohz_next_event(): an idle CPU keeps its tick while rcu_needs_cpu(),
    # i.e. while RCU callbacks queued on it wait for their grace period, and
    # a CPU whose tick runs is not in nohz.idle_cpus_mask (no nohz kick
    # balances for it): it balances at its own tick, as an idle CPU.  An
    # exiting thread queues one (release_task()'s call_rcu()), pending for
    # the grace-period span the profile's rcu_gp_* keys give
    # (sim/kthreads.py RcuGp; without them no CPU keeps its tick).  This
    # host: 18 % of the time at 5 exits/s, 64 % at 20 (calibration/bench/rcu.py;
    # docs/scheduling.md "The idle tick and RCU").  false: an idle
    # CPU's tick stops (colosim before 2026-11-28; eevdf66 keeps that)
    rcu_idle_tick: bool = tunable(True)
    # /proc/sys/kernel/sched_rr_timeslice_ms: SCHED_RR's round-robin quantum
    sched_rr_timeslice_ms: int = tunable(100, range=(1, None))
    # RT throttling: RT threads may run sched_rt_runtime_us per
    # sched_rt_period_us on each CPU; -1: the whole period (no throttling)
    sched_rt_period_us: int = tunable(1_000_000, range=(1, 2**31 - 1))
    sched_rt_runtime_us: int = tunable(950_000, range=(-1, 2**31 - 1))
    # CFS bandwidth control: the chunk a CPU borrows from a group's quota
    # (/proc/sys/kernel/sched_cfs_bandwidth_slice_us, at least 1 us)
    sched_cfs_bandwidth_slice_us: int = tunable(5_000, range=(1, 2**31 - 1))

# what every scheduling class must implement (KernelScheduler.__init__ checks)
REQUIRED_METHODS = ("enqueue_task", "dequeue_task", "pick_next_task", "put_prev_task",
                    "task_tick", "check_preempt_wakeup", "select_task_rq", "set_task_rq",
                    "migrate_task_rq", "balance", "balance_interval_ns", "update_curr")


class KernelScheduler:
    """The interface.  Compiled (sim/sched_class.pxd) so the machine calls
    it without Python dispatch; a policy written in Python subclasses it (or
    CFS) as usual.  Methods without a default raise NotImplementedError, and
    a subclass that leaves one out fails at construction, as an ABC would.

    ``cfg`` is the policy's CONFIG instance (a SchedConfig).

    Mechanism counters: ``stats`` maps a counter name to how many times
    one of the policy's mechanisms acted (an int that only grows; empty
    for a policy that counts nothing).  The run's summary gets one column
    ``<stats_prefix>_<counter>`` per counter: its growth over the
    measurement window (scenarios/simulate.py policy_stats)."""
    name = "abstract"
    stats_prefix = "policy"

    def __init__(self, cfg, machine):
        missing = [m for m in REQUIRED_METHODS
                   if getattr(type(self), m) is getattr(KernelScheduler, m)]
        if missing:
            raise TypeError(f"{type(self).__name__} does not implement {', '.join(missing)}")
        self.cfg = cfg
        self.machine = machine
        # the machine seeds and caps rq->avg_idle with it
        self.migration_cost = int(cfg.migration_cost_ns)
        self.stats = {}

    def init_task_group(self, tg) -> None:
        """Called once a task group's per-CPU cfs_rqs and entities exist."""

    def enqueue_task(self, rq, p, flags: int) -> None:
        raise NotImplementedError

    def dequeue_task(self, rq, p, flags: int) -> None:
        raise NotImplementedError

    def pick_next_task(self, rq, prev):
        """Return the next task to run (``prev`` may still be runnable and is
        put back by the policy), or None to go idle."""
        raise NotImplementedError

    def put_prev_task(self, rq, prev) -> None:
        raise NotImplementedError

    def task_tick(self, rq, curr) -> None:
        """Scheduler tick on a busy CPU; sets ``rq.need_resched`` to preempt."""
        raise NotImplementedError

    def check_preempt_wakeup(self, rq, p) -> None:
        """A task was just enqueued on ``rq``; set ``rq.need_resched`` to preempt."""
        raise NotImplementedError

    def select_task_rq(self, p, prev_cpu: int, wake_flags: int) -> int:
        raise NotImplementedError

    def set_task_rq(self, p, cpu: int) -> None:
        """Point the task's entity at its task group's run queue on ``cpu``."""
        raise NotImplementedError

    def migrate_task_rq(self, p, new_cpu: int) -> None:
        """The task leaves its CPU (waking elsewhere, or moved by balancing)."""
        raise NotImplementedError

    def task_dead(self, p) -> None:
        """The task exited: drop what the policy tracks for it."""

    def set_next_task(self, rq, p) -> None:
        """``p``, already queued and running on ``rq``, becomes the class's
        current task without a pick (sched_setscheduler on a running task)."""
        raise NotImplementedError(f"{type(self).__name__} cannot take over a running task")

    def switched_from_fair(self, p) -> None:
        """``p`` left the class for RT (sched_setscheduler): drop its load."""

    def switched_to_fair(self, p) -> None:
        """``p`` joined the class from RT: bring its load back."""

    def balance(self, rq, idle: int) -> int:
        """Pull work to ``rq`` from its sched domains; returns tasks moved."""
        raise NotImplementedError

    def balance_interval_ns(self, rq, idle: int) -> int:
        """How long until ``rq`` balances again."""
        raise NotImplementedError

    def newidle_allowed(self, rq) -> bool:
        """Whether a CPU about to go idle should try to pull work first."""
        return True

    def newidle_balance(self, rq) -> int:
        """sched_balance_newidle(): what ``rq``, about to go idle, pulls
        (tasks moved).  By default: balance as an idle CPU if
        newidle_allowed() and some CPU has a task waiting."""
        if not self.newidle_allowed(rq) or not self.machine._overloaded():
            return 0
        return self.balance(rq, CPU_NEWLY_IDLE)

    def update_curr(self, rq) -> None:
        """Bring the accounting of the running task up to now."""
        raise NotImplementedError

    def hrtick_delay(self, rq):
        """Nanoseconds until curr's slice expires if a high-resolution tick
        is wanted (HRTICK), else None."""
        return None

    def cputime_poll_delay(self, rq):
        """Nanoseconds of running until curr, reading its own CPU clock all
        the while (``Machine.cputime_poll``), would be told to reschedule by
        that read's update_curr(), or None if no read can (the kernel's
        update_curr() reschedules under EEVDF only)."""
        return None

    def cputime_poll(self, rq) -> None:
        """One read of curr's CPU clock: task_sched_runtime() runs
        update_curr_fair(), update_curr() of curr's own cfs_rq."""
