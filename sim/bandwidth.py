"""CFS bandwidth control (cpu.max / cpu.cfs_quota_us), as in the
CONFIG_CFS_BANDWIDTH part of kernel/sched/fair.c (v5.18, with the v5.14
burst and the later burst statistics).  Hold it next to fair.c: functions
carry the kernel's names; ``_assign_cfs_rq_runtime`` and
``_refill_cfs_bandwidth_runtime`` are the kernel's double-underscore ones.

Each task group has a ``CfsBandwidth`` (``struct cfs_bandwidth``): ``quota``
ns of CPU time per ``period`` ns, a global pool ``runtime`` refilled by a
period timer, and the cpu.stat counters.  Each of its per-CPU ``cfs_rq``s
borrows from the pool in ``sched_cfs_bandwidth_slice`` chunks into its own
``runtime_remaining``, which ``update_curr`` charges
(``account_cfs_rq_runtime``).  A cfs_rq that needs runtime when the pool is
dry is throttled: its group entity leaves the parent's queue, so nothing
below it runs, and ``throttle_count`` marks every cfs_rq under it
(``throttled_hierarchy``).  The period timer refills the pool and hands
throttled cfs_rqs enough to pay their debt plus 1 ns
(``distribute_cfs_runtime``), which unthrottles them.  A cfs_rq going idle
keeps ``min_cfs_rq_runtime`` and returns the rest (``return_cfs_rq_runtime``);
a slack timer hands returned runtime to throttled cfs_rqs.

Where the simulator differs from the kernel:

* When runtime runs out.  v5.18 notices at the next update_curr() of that
  cfs_rq (the tick at HZ, or a wake-up or switch on that CPU), so a
  running task overshoots its runtime by up to a tick and the debt is
  charged to its next borrow (HRTICK only times the fair slice).  The
  simulator arms a one-shot event at the exact instant the running task's
  hierarchy runs dry (``runtime_expiry``; the machine's
  ``_on_runtime_expiry``), as the HRTICK_BW sched_feature proposed in 2023
  ("sched/nohz: Add HRTICK_BW", an hrtick at runtime_remaining, off by
  default) would: throttle and unthrottle instants are exact to the
  nanosecond and a group never runs past its pool.
* The period timer's callback takes no simulated time, so the kernel's
  "more than 3 overruns in one callback: double period and quota" case
  (sched_cfs_period_timer) never arises; overruns from the timer's own
  forwarding are counted in nr_periods/nr_throttled as in the kernel.
* Throttling is the v5.18-v6.17 cfs_rq-based model: a throttled cfs_rq's
  group entity leaves its parent at once, its PELT clock stops
  (tg_throttle_down/tg_unthrottle_up, sim/rq.py cfs_rq_clock_pelt), and
  throttled_time runs from throttle_cfs_rq to unthrottle_cfs_rq on every
  cfs_rq, empty or not.  Linux 6.5 stopped counting a throttled cfs_rq
  until a task is queued on it ("sched: don't account throttle time for
  empty groups"), and 6.18 throttles tasks one by one on their return to
  user space ("sched/fair: Switch to task based throttle model", "Task
  based throttle time accounting": a cfs_rq's throttled time starts when
  its first task is dequeued for the throttle, still summed over cfs_rqs;
  its PELT clock stops only once it is empty).  Neither is modelled; see
  docs/calibration-host.md for what that means for this host's 6.18.
* cgroup v1's admission check (tg_cfs_schedulable_down: a child's
  quota/period may not exceed its parent's) is not made; as in cgroup v2,
  any combination is accepted and the tightest ancestor throttles.
"""
from __future__ import annotations

from sim.sched_flags import DEQUEUE_DELAYED, DEQUEUE_SLEEP, DEQUEUE_SPECIAL, ENQUEUE_WAKEUP

# RUNTIME_INF: quota of an unlimited group (cpu.max "max", cfs_quota_us -1)
RUNTIME_INF = -1
NSEC_PER_USEC = 1_000
# kernel/sched/core.c: the bounds tg_set_cfs_bandwidth() enforces
MIN_CFS_QUOTA_PERIOD = 1_000_000                 # 1 ms: min quota and period
MAX_CFS_QUOTA_PERIOD = 1_000_000_000             # 1 s: max period
MAX_CFS_RUNTIME = ((1 << 44) - 1) * NSEC_PER_USEC   # MAX_BW us (BW_SHIFT 20)
DEFAULT_CFS_PERIOD = 100_000_000                 # default_cfs_period(): 100 ms
# kernel/sched/fair.c
MIN_CFS_RQ_RUNTIME = 1_000_000                   # runtime a cfs_rq keeps when idle
CFS_BANDWIDTH_SLACK_PERIOD = 5_000_000           # slack timer delay
MIN_BANDWIDTH_EXPIRATION = 2_000_000             # no slack this close to a refresh



class CfsBandwidth:
    """``struct cfs_bandwidth`` of one task group, with its cpu.stat counters
    (``nr_periods``, ``nr_throttled``, ``throttled_time`` ns, ``nr_burst``,
    ``burst_time`` ns; throttled time is added when a throttle ends, as
    the kernel does)."""

    __slots__ = ("period", "quota", "burst", "runtime", "runtime_snap", "idle",
                 "period_active", "expires", "slack_started", "throttled_cfs_rq",
                 "nr_periods", "nr_throttled", "throttled_time", "nr_burst", "burst_time")

    def __init__(self):
        self.period = DEFAULT_CFS_PERIOD
        self.quota = RUNTIME_INF
        self.burst = 0
        self.runtime = 0              # the global pool
        self.runtime_snap = 0         # the pool right after the last refill
        self.idle = False             # no runtime was asked for this period
        self.period_active = False    # the period timer is armed
        self.expires = 0              # the period timer's expiry (hrtimer phase)
        self.slack_started = False
        self.throttled_cfs_rq: dict = {}   # in throttle order (list_add_tail)
        self.nr_periods = 0
        self.nr_throttled = 0
        self.throttled_time = 0
        self.nr_burst = 0
        self.burst_time = 0

    @property
    def nr_bursts(self) -> int:
        """cpu.stat's spelling of nr_burst."""
        return self.nr_burst

    @property
    def enabled(self) -> bool:
        return self.quota != RUNTIME_INF


def check_cfs_bandwidth(period: int, quota: int, burst: int) -> None:
    """tg_set_cfs_bandwidth()'s domain checks (ns; quota RUNTIME_INF:
    unlimited); raises ValueError naming the value and the allowed range."""
    if not MIN_CFS_QUOTA_PERIOD <= period <= MAX_CFS_QUOTA_PERIOD:
        raise ValueError(f"cfs period {period // NSEC_PER_USEC} us: must be in "
                         f"[{MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC}, "
                         f"{MAX_CFS_QUOTA_PERIOD // NSEC_PER_USEC}] us")
    if burst < 0:
        raise ValueError(f"cfs burst {burst // NSEC_PER_USEC} us: must be >= 0")
    if quota == RUNTIME_INF:
        return
    if not MIN_CFS_QUOTA_PERIOD <= quota <= MAX_CFS_RUNTIME:
        raise ValueError(f"cfs quota {quota // NSEC_PER_USEC} us: must be in "
                         f"[{MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC}, "
                         f"{MAX_CFS_RUNTIME // NSEC_PER_USEC}] us (or unlimited)")
    if burst > quota:
        raise ValueError(f"cfs burst {burst // NSEC_PER_USEC} us: must be <= quota "
                         f"{quota // NSEC_PER_USEC} us")


def parse_cpu_max(value: str, period_us: int = DEFAULT_CFS_PERIOD // NSEC_PER_USEC
                  ) -> tuple[int | None, int]:
    """cgroup v2 cpu.max, "$MAX $PERIOD" or "$MAX" (the period stays
    ``period_us``); $MAX "max" is no limit.  Returns (quota_us or None,
    period_us); raises ValueError on anything else."""
    parts = str(value).split()
    if not 1 <= len(parts) <= 2:
        raise ValueError(f'cpu.max {value!r}: expected "$MAX $PERIOD", e.g. "max 100000" '
                         f'or "15000 100000"')
    try:
        quota = None if parts[0] == "max" else int(parts[0])
        period = int(parts[1]) if len(parts) == 2 else int(period_us)
    except ValueError:
        raise ValueError(f'cpu.max {value!r}: $MAX is "max" or microseconds, $PERIOD '
                         f'microseconds') from None
    return quota, period


def hrtimer_forward(expires: int, now: int, interval: int) -> tuple[int, int]:
    """hrtimer_forward(): move an expiry past ``now`` by whole intervals;
    returns the new expiry and the number of intervals (overruns)."""
    delta = now - expires
    if delta < 0:
        return expires, 0
    orun = 1
    if delta >= interval:
        orun = delta // interval
        expires += interval * orun
        if expires > now:
            return expires, orun
        orun += 1
    return expires + interval, orun


class CfsBandwidthControl:
    """The bandwidth code of fair.c for one fair policy (CFS and the
    policies derived from it) on one machine.  The policy calls
    ``account_cfs_rq_runtime``, ``check_enqueue_throttle``,
    ``check_cfs_rq_runtime`` and ``return_cfs_rq_runtime`` on cfs_rqs with
    ``runtime_enabled``; the machine calls ``tg_set_cfs_bandwidth``,
    ``runtime_expiry`` and ``runtime_expired``.

    Observers, the hooks in-kernel tracers such as CATCloud's use (each a
    list of callables; an empty list costs one test at its hook):

    - ``assign_observers``: ``f(cfs_rq, amount, now)`` each time a cfs_rq
      borrows from its group's pool (``__assign_cfs_rq_runtime``);
    - ``throttle_observers``: ``f(cfs_rq, now)`` when ``throttle_cfs_rq``
      throttles a cfs_rq;
    - ``unthrottle_observers``: ``f(cfs_rq, now, throttled_ns)`` when
      ``unthrottle_cfs_rq`` ends a throttle that lasted ``throttled_ns``
      (what it adds to throttled_time; for the refill, the slack timer or a
      cpu.max write);
    - ``period_observers``: ``f(cfs_b, now, overrun, used, throttled)`` at
      each period-timer expiry of a limited group
      (``do_sched_cfs_period_timer``), before the refill: ``used`` is what
      the pool lost since the last refill (``runtime_snap - runtime``:
      runtime borrowed net of slack returned, the kernel's burst
      arithmetic), ``throttled`` whether cfs_rqs are waiting for it (the
      periods counted in nr_throttled).  A group's timer stops after a
      period in which nothing borrowed, so idle periods are not reported,
      as they are not counted in nr_periods."""

    def __init__(self, policy, machine, slice_us: int):
        self.policy = policy
        self.machine = machine
        self.engine = machine.engine
        self.clock = machine.engine
        # sched_cfs_bandwidth_slice(): the scheduler option's
        # sched_cfs_bandwidth_slice_us
        self.slice = int(slice_us) * NSEC_PER_USEC
        self.nr_enabled = 0           # groups with a quota (cfs_bandwidth_usage)
        self.assign_observers: list = []
        self.throttle_observers: list = []
        self.unthrottle_observers: list = []
        self.period_observers: list = []

    # ------------------------------------------------------------------
    # configuration
    def tg_set_cfs_bandwidth(self, tg, period: int, quota: int, burst: int) -> None:
        """Set a group's period, quota (RUNTIME_INF: unlimited) and burst, in
        ns.  As in the kernel, the pool is refilled, the period timer
        started, every cfs_rq's local runtime cleared and any throttled
        cfs_rq unthrottled."""
        if tg.parent is None:
            raise ValueError("the root cgroup has no cpu.max")
        check_cfs_bandwidth(period, quota, burst)
        cfs_b = tg.cfs_bandwidth
        runtime_enabled = quota != RUNTIME_INF
        runtime_was_enabled = cfs_b.quota != RUNTIME_INF
        if runtime_enabled and not runtime_was_enabled:
            self.nr_enabled += 1
        elif runtime_was_enabled and not runtime_enabled:
            self.nr_enabled -= 1
        cfs_b.period = period
        cfs_b.quota = quota
        cfs_b.burst = burst
        self._refill_cfs_bandwidth_runtime(cfs_b)
        if runtime_enabled:
            self.start_cfs_bandwidth(cfs_b)
        for cfs_rq in tg.cfs_rq:
            cfs_rq.runtime_enabled = runtime_enabled
            cfs_rq.runtime_remaining = 0
            if cfs_rq.throttled:
                self.unthrottle_cfs_rq(cfs_rq)

    # ------------------------------------------------------------------
    # the global pool and its timers
    @staticmethod
    def _refill_cfs_bandwidth_runtime(cfs_b) -> None:
        """__refill_cfs_bandwidth_runtime(): add a quota to the pool, capped
        at quota + burst; what the last period used beyond its quota is
        counted as burst."""
        if cfs_b.quota == RUNTIME_INF:
            return
        cfs_b.runtime += cfs_b.quota
        used_beyond_quota = cfs_b.runtime_snap - cfs_b.runtime
        if used_beyond_quota > 0:
            cfs_b.burst_time += used_beyond_quota
            cfs_b.nr_burst += 1
        cfs_b.runtime = min(cfs_b.runtime, cfs_b.quota + cfs_b.burst)
        cfs_b.runtime_snap = cfs_b.runtime

    def start_cfs_bandwidth(self, cfs_b) -> None:
        """Arm the period timer if it is not armed.  Its expiry keeps its
        phase (hrtimer_forward_now), so periods stay aligned to when the
        timer first ran however long it slept."""
        if cfs_b.period_active:
            return
        cfs_b.period_active = True
        cfs_b.expires, _ = hrtimer_forward(cfs_b.expires, self.clock._now, cfs_b.period)
        self.engine.call_at(cfs_b.expires, self.sched_cfs_period_timer, cfs_b)

    def sched_cfs_period_timer(self, cfs_b) -> None:
        now = self.clock._now
        cfs_b.expires, overrun = hrtimer_forward(cfs_b.expires, now, cfs_b.period)
        if self.do_sched_cfs_period_timer(cfs_b, overrun):
            cfs_b.period_active = False
        else:
            self.engine.call_at(cfs_b.expires, self.sched_cfs_period_timer, cfs_b)

    def do_sched_cfs_period_timer(self, cfs_b, overrun: int) -> bool:
        """A new period: refill, then pay throttled cfs_rqs' debts.  Returns
        True when the timer may stop (no limit, or a whole period passed
        without anyone asking for runtime)."""
        if cfs_b.quota == RUNTIME_INF:
            return True
        throttled = bool(cfs_b.throttled_cfs_rq)
        cfs_b.nr_periods += overrun
        if self.period_observers:
            used = cfs_b.runtime_snap - cfs_b.runtime
            now = self.clock._now
            for observer in self.period_observers:
                observer(cfs_b, now, overrun, used, throttled)
        self._refill_cfs_bandwidth_runtime(cfs_b)
        if cfs_b.idle and not throttled:
            return True
        if not throttled:
            cfs_b.idle = True         # potentially idle for the coming period
            return False
        cfs_b.nr_throttled += overrun
        if cfs_b.runtime > 0:
            self.distribute_cfs_runtime(cfs_b)
        cfs_b.idle = False
        return False

    def distribute_cfs_runtime(self, cfs_b) -> None:
        """Give each throttled cfs_rq, in throttle order, what it owes plus
        1 ns, and unthrottle it, while the pool lasts."""
        for cfs_rq in list(cfs_b.throttled_cfs_rq):
            if not cfs_rq.throttled:
                continue
            runtime = min(-cfs_rq.runtime_remaining + 1, cfs_b.runtime)
            cfs_b.runtime -= runtime
            cfs_rq.runtime_remaining += runtime
            if cfs_rq.runtime_remaining > 0:
                self.unthrottle_cfs_rq(cfs_rq)
            if not cfs_b.runtime:
                break

    def runtime_refresh_within(self, cfs_b, min_expire: int) -> bool:
        """The period timer refreshes the pool in less than ``min_expire``
        (a stopped timer counts with the expiry it was last forwarded to)."""
        return cfs_b.expires - self.clock._now < min_expire

    def start_cfs_slack_bandwidth(self, cfs_b) -> None:
        if self.runtime_refresh_within(cfs_b,
                                       CFS_BANDWIDTH_SLACK_PERIOD + MIN_BANDWIDTH_EXPIRATION):
            return
        if cfs_b.slack_started:
            return                    # don't push an armed slack timer forward
        cfs_b.slack_started = True
        self.engine.call_later(CFS_BANDWIDTH_SLACK_PERIOD, self.do_sched_cfs_slack_timer, cfs_b)

    def do_sched_cfs_slack_timer(self, cfs_b) -> None:
        """Hand runtime returned by idle cfs_rqs to throttled ones."""
        cfs_b.slack_started = False
        if self.runtime_refresh_within(cfs_b, MIN_BANDWIDTH_EXPIRATION):
            return
        if cfs_b.quota != RUNTIME_INF and cfs_b.runtime > self.slice:
            self.distribute_cfs_runtime(cfs_b)

    # ------------------------------------------------------------------
    # per-CPU runtime
    def _assign_cfs_rq_runtime(self, cfs_b, cfs_rq, target_runtime: int) -> bool:
        """__assign_cfs_rq_runtime(): top cfs_rq up to ``target_runtime``
        from the pool, as far as it goes; True if it now has runtime."""
        min_amount = target_runtime - cfs_rq.runtime_remaining
        amount = 0
        if cfs_b.quota == RUNTIME_INF:
            amount = min_amount
        else:
            self.start_cfs_bandwidth(cfs_b)
            if cfs_b.runtime > 0:
                amount = min(cfs_b.runtime, min_amount)
                cfs_b.runtime -= amount
                cfs_b.idle = False
        cfs_rq.runtime_remaining += amount
        if amount and self.assign_observers:
            now = self.clock._now
            for observer in self.assign_observers:
                observer(cfs_rq, amount, now)
        return cfs_rq.runtime_remaining > 0

    def assign_cfs_rq_runtime(self, cfs_rq) -> bool:
        return self._assign_cfs_rq_runtime(cfs_rq.tg.cfs_bandwidth, cfs_rq, self.slice)

    def account_cfs_rq_runtime(self, cfs_rq, delta_exec: int) -> None:
        """update_curr() charged ``delta_exec``: borrow a slice when the local
        runtime is gone, reschedule if the pool is dry too (the throttle
        itself happens when the task is put back: check_cfs_rq_runtime)."""
        cfs_rq.runtime_remaining -= delta_exec
        if cfs_rq.runtime_remaining > 0 or cfs_rq.throttled:
            return
        if not self.assign_cfs_rq_runtime(cfs_rq) and cfs_rq.curr is not None:
            cfs_rq.rq.need_resched = True

    def check_enqueue_throttle(self, cfs_rq) -> None:
        """An idle cfs_rq got its first entity: take runtime for it now, or
        throttle it before anything in it can run."""
        if cfs_rq.curr is not None or cfs_rq.throttled:
            return
        self.account_cfs_rq_runtime(cfs_rq, 0)
        if cfs_rq.runtime_remaining <= 0:
            self.throttle_cfs_rq(cfs_rq)

    def check_cfs_rq_runtime(self, cfs_rq) -> bool:
        """Throttle a cfs_rq that is out of runtime; True if it is throttled."""
        if cfs_rq.runtime_remaining > 0:
            return False
        if cfs_rq.throttled:
            return True
        return self.throttle_cfs_rq(cfs_rq)

    def return_cfs_rq_runtime(self, cfs_rq) -> None:
        """The cfs_rq's last entity left: keep min_cfs_rq_runtime, give the
        rest back to the pool, and have the slack timer pass it to throttled
        cfs_rqs if that is worth a slice."""
        slack_runtime = cfs_rq.runtime_remaining - MIN_CFS_RQ_RUNTIME
        if slack_runtime <= 0:
            return
        cfs_b = cfs_rq.tg.cfs_bandwidth
        if cfs_b.quota != RUNTIME_INF:
            cfs_b.runtime += slack_runtime
            if cfs_b.runtime > self.slice and cfs_b.throttled_cfs_rq:
                self.start_cfs_slack_bandwidth(cfs_b)
        cfs_rq.runtime_remaining -= slack_runtime

    # ------------------------------------------------------------------
    # throttling
    @staticmethod
    def tg_throttle_down(tg, cpu: int, now: int) -> None:
        """Over the subtree: the first throttle above a cfs_rq stops its
        PELT clock (sim/rq.py cfs_rq_clock_pelt)."""
        stack = [tg]
        while stack:
            t = stack.pop()
            cfs_rq = t.cfs_rq[cpu]
            if not cfs_rq.throttle_count:
                cfs_rq.throttled_clock_pelt = now
            cfs_rq.throttle_count += 1
            stack.extend(t.children)

    @staticmethod
    def tg_unthrottle_up(tg, cpu: int, now: int) -> None:
        """Over the subtree: the last throttle above a cfs_rq ending restarts
        its PELT clock, which stays behind by the time it stood still."""
        stack = [tg]
        while stack:
            t = stack.pop()
            cfs_rq = t.cfs_rq[cpu]
            cfs_rq.throttle_count -= 1
            if not cfs_rq.throttle_count:
                cfs_rq.throttled_clock_pelt_time += now - cfs_rq.throttled_clock_pelt
            stack.extend(t.children)

    def throttle_cfs_rq(self, cfs_rq) -> bool:
        """Take the cfs_rq's group entity off its parent's queue (and the
        ancestors' entities it leaves empty); its tasks stop counting as
        runnable.  Returns False if runtime arrived after all."""
        cfs_b = cfs_rq.tg.cfs_bandwidth
        # ask for 1 ns rather than just look: a later check must agree
        # not to throttle once this one has said so
        if self._assign_cfs_rq_runtime(cfs_b, cfs_rq, 1):
            return False
        cfs_b.throttled_cfs_rq[cfs_rq] = None
        rq = cfs_rq.rq
        cpu = rq.cpu
        now = self.clock._now
        self.tg_throttle_down(cfs_rq.tg, cpu, now)
        policy = self.policy
        task_delta = cfs_rq.h_nr_running
        se = cfs_rq.se
        reached_root = True
        while se is not None:
            qcfs_rq = se.cfs_rq
            if not se.on_rq:          # an ancestor is throttled already
                reached_root = False
                break
            # DEQUEUE_SPECIAL: a throttle is no sleep EEVDF may delay (and
            # ends a delay already begun), as throttle_cfs_rq() does
            policy.dequeue_entity(qcfs_rq, se, DEQUEUE_SLEEP | DEQUEUE_SPECIAL |
                                  (DEQUEUE_DELAYED if se.sched_delayed else 0))
            if qcfs_rq.runtime_enabled and not qcfs_rq.nr_running:
                self.return_cfs_rq_runtime(qcfs_rq)
            qcfs_rq.h_nr_running -= task_delta
            se = se.parent
            if qcfs_rq.load_weight:
                break
            policy.blocked_cfs_rqs[cpu][qcfs_rq] = None
        if reached_root:
            while se is not None:
                qcfs_rq = se.cfs_rq
                if not se.on_rq:
                    reached_root = False
                    break
                policy.update_load_avg(qcfs_rq, se)
                qcfs_rq.h_nr_running -= task_delta
                se = se.parent
        if reached_root:
            rq.nr_running -= task_delta
        cfs_rq.throttled = True
        cfs_rq.throttled_clock = now
        if self.throttle_observers:
            for observer in self.throttle_observers:
                observer(cfs_rq, now)
        return True

    def unthrottle_cfs_rq(self, cfs_rq) -> None:
        """Count the throttled time and put the group entity (and any
        ancestors it empties) back; an idle CPU is told to reschedule."""
        rq = cfs_rq.rq
        cfs_b = cfs_rq.tg.cfs_bandwidth
        now = self.clock._now
        cfs_rq.throttled = False
        throttled_ns = now - cfs_rq.throttled_clock
        cfs_b.throttled_time += throttled_ns
        del cfs_b.throttled_cfs_rq[cfs_rq]
        self.tg_unthrottle_up(cfs_rq.tg, rq.cpu, now)
        if self.unthrottle_observers:
            for observer in self.unthrottle_observers:
                observer(cfs_rq, now, throttled_ns)
        if not cfs_rq.load_weight:
            return
        policy = self.policy
        task_delta = cfs_rq.h_nr_running
        se = cfs_rq.se
        while se is not None and not se.on_rq:
            qcfs_rq = se.cfs_rq
            policy.enqueue_entity(qcfs_rq, se, ENQUEUE_WAKEUP)
            qcfs_rq.h_nr_running += task_delta
            se = se.parent
            if qcfs_rq.runtime_enabled:
                if qcfs_rq.nr_running == 1:
                    self.check_enqueue_throttle(qcfs_rq)
                if qcfs_rq.throttled:
                    return
        if se is not None and se.sched_delayed:
            policy.requeue_delayed_entity(se)     # EEVDF: the group has tasks again
        while se is not None:
            qcfs_rq = se.cfs_rq
            policy.update_load_avg(qcfs_rq, se)
            qcfs_rq.h_nr_running += task_delta
            if qcfs_rq.throttled:
                return
            se = se.parent
        rq.nr_running += task_delta
        self.machine.cfs_tasks_unthrottled(rq)

    # ------------------------------------------------------------------
    # the running task's runtime, for the machine's expiry event
    @staticmethod
    def runtime_expiry(p) -> int | None:
        """The instant the running task ``p``'s hierarchy runs out of local
        runtime at some level, if any level is limited."""
        at = None
        se = p.se
        while se is not None:
            cfs_rq = se.cfs_rq
            if cfs_rq.runtime_enabled:
                t = se.exec_start + cfs_rq.runtime_remaining
                if at is None or t < at:
                    at = t
            se = se.parent
        return at

    def runtime_expired(self, rq) -> None:
        """At the expiry instant: charge the running task (update_curr at
        every level borrows or asks for a reschedule); a level whose
        runtime is exactly used up with nothing to charge is checked too."""
        self.policy.update_curr(rq)
        se = rq.curr.se
        while se is not None:
            cfs_rq = se.cfs_rq
            if cfs_rq.runtime_enabled and cfs_rq.runtime_remaining <= 0:
                self.account_cfs_rq_runtime(cfs_rq, 0)
            se = se.parent
