"""Per-CPU hierarchical run queues: ``rq``, ``cfs_rq``, ``sched_entity``,
``task_group`` — the data the kernel's fair class works on.

The ordering logic (which entity runs next) belongs to the scheduling policy
in ``policies/kernel``; this module holds the state every fair-class policy
shares and the PELT load tracking that group shares and load balancing read.

PELT is kept in continuous time: an entity's ``runnable_avg`` is an
exponential average of its on-rq indicator with the kernel's 32-period half
life (32 x 1024 us), updated lazily whenever its state changes or is read.
The kernel sums the same geometric series in 1024 us segments; the
continuous form differs from it only by that quantisation.

A throttled cfs_rq's PELT clock stops, as in the kernel (pelt.h
cfs_rq_clock_pelt): its own average and those of the entities queued on it
are kept in that cfs_rq's clock, which runs behind the CPU's by the time
the cfs_rq has spent in a throttled hierarchy (``throttled_clock_pelt_time``)
and stands still while it is in one (``throttle_count``).  Otherwise a
throttled group would look ever more loaded while nothing in it can run,
and its shares, the balancer and LAGS's Load Credit would see that.
Groups never throttled keep a clock equal to the CPU's.
"""
from __future__ import annotations

import math

import cython

if cython.compiled:            # the C library's exp: no Python call, no boxing
    from cython.cimports.libc.math import exp
else:
    from math import exp

from sim.bandwidth import CfsBandwidth
from sim.heap import Heap

NICE_0_LOAD = 1024
MIN_SHARES = 2
MAX_SHARES = 1 << 18

# kernel/sched/core.c: sched_prio_to_weight[], nice -20 .. 19
SCHED_PRIO_TO_WEIGHT = (
    88761, 71755, 56483, 46273, 36291,
    29154, 23254, 18705, 14949, 11916,
    9548, 7620, 6100, 4904, 3906,
    3121, 2501, 1991, 1586, 1277,
    1024, 820, 655, 526, 423,
    335, 272, 215, 172, 137,
    110, 87, 70, 56, 45,
    36, 29, 23, 18, 15,
)

PELT_PERIOD_NS = 1024 * 1000
PELT_HALFLIFE_NS = 32 * PELT_PERIOD_NS
_DECAY_PER_NS = math.log(2) / PELT_HALFLIFE_NS


def nice_to_weight(nice: int) -> int:
    return SCHED_PRIO_TO_WEIGHT[nice + 20]


def pelt_decay(delta_ns: int) -> float:
    """Fraction of an average that survives ``delta_ns`` (y^(delta/1024us))."""
    return exp(-delta_ns * _DECAY_PER_NS)


class TaskGroup:
    """kernel ``struct task_group``: one per cgroup with the cpu controller."""

    __slots__ = ("name", "parent", "shares", "cfs_rq", "se", "load_avg", "depth",
                 "cpus_allowed", "usage_ns", "children", "cfs_bandwidth", "tasks",
                 "sched_priv")

    def __init__(self, name: str, parent: TaskGroup | None, shares: int, ncpus: int,
                 cpus_allowed: frozenset[int] | None):
        self.name = name
        self.parent = parent
        self.shares = shares
        self.depth = 0 if parent is None else parent.depth + 1
        self.cfs_rq: list[CfsRq] = []
        self.se: list[SchedEntity | None] = [None] * ncpus
        # tg->load_avg: sum of the per-CPU tg_load_avg_contrib
        self.load_avg = 0.0
        self.cpus_allowed = cpus_allowed
        # cpuacct.usage of tasks directly in this group (children add their own)
        self.usage_ns = 0
        self.children: list[TaskGroup] = []
        if parent is not None:
            parent.children.append(self)
        # cpu.max and cpu.stat throttling counters (sim/bandwidth.py)
        self.cfs_bandwidth = CfsBandwidth()
        # the group's live threads (cgroup.threads), in creation order: what
        # sched_setscheduler on "every thread of the cgroup" reaches
        self.tasks: dict = {}
        # the policy's own state of this group, set by its init_task_group
        # (CFS-LAGS: tg->load_avg_ema, the group's Load Credit); a field
        # where a dict keyed by group cost a hash lookup per event
        self.sched_priv = None


class SchedEntity:
    """kernel ``struct sched_entity`` for a task or for a group on one CPU."""

    __slots__ = ("weight", "vruntime", "exec_start", "sum_exec_runtime",
                 "prev_sum_exec_runtime", "on_rq", "parent", "cfs_rq", "my_q",
                 "depth", "task", "runnable_avg", "avg_last_update", "rb_seq",
                 "vlag", "deadline", "slice", "rel_deadline", "sched_delayed",
                 "group_prev", "group_next", "group_list", "leaf_prev", "leaf_next", "leaf_q")

    def __init__(self, weight: int, parent: SchedEntity | None, cfs_rq: CfsRq,
                 my_q: CfsRq | None = None, task=None):
        self.weight = weight
        self.vruntime = 0
        self.exec_start = 0
        self.sum_exec_runtime = 0
        self.prev_sum_exec_runtime = 0
        self.on_rq = False
        self.parent = parent
        self.cfs_rq = cfs_rq          # the cfs_rq this entity is queued on
        self.my_q = my_q              # the cfs_rq a group entity owns
        self.depth = 0 if parent is None else parent.depth + 1
        self.task = task
        self.runnable_avg = 0.0
        self.avg_last_update = 0
        self.rb_seq = 0               # tree membership token (0: not in tree)
        self.vlag = 0
        self.deadline = 0
        self.slice = 0
        # EEVDF's PLACE_REL_DEADLINE: deadline holds deadline - vruntime
        self.rel_deadline = False
        # EEVDF's DELAY_DEQUEUE: asleep (or, for a group, empty) but left
        # queued until it is picked or woken
        self.sched_delayed = False
        # se->group_node: a task's place in its CPU's rq->cfs_tasks (CfsTasks)
        self.group_prev: SchedEntity | None = None
        self.group_next: SchedEntity | None = None
        self.group_list: CfsTasks | None = None
        # the same list restricted to the task's own cfs_rq (CfsTasks.per_cfs_rq)
        self.leaf_prev: SchedEntity | None = None
        self.leaf_next: SchedEntity | None = None
        self.leaf_q: CfsRq | None = None

    def update_avg(self, now: int) -> None:
        now = self.cfs_rq.cfs_rq_clock_pelt(now)
        delta = now - self.avg_last_update
        if delta > 0:
            y = exp(-delta * _DECAY_PER_NS)
            self.runnable_avg = self.runnable_avg * y + (1.0 - y) if self.on_rq \
                else self.runnable_avg * y
            self.avg_last_update = now

    def load_avg(self, now: int) -> float:
        self.update_avg(now)
        return self.weight * self.runnable_avg


class CfsRq:
    """kernel ``struct cfs_rq``: one per task group per CPU."""

    __slots__ = ("rq", "tg", "cpu", "load_weight", "nr_running", "h_nr_running",
                 "min_vruntime", "curr", "timeline", "load_avg", "avg_last_update",
                 "tg_load_avg_contrib", "se", "next", "last", "runtime_enabled",
                 "runtime_remaining", "throttled", "throttle_count", "throttled_clock",
                 "throttled_clock_pelt", "throttled_clock_pelt_time", "h_load",
                 "last_h_load_update", "tasks_head", "tasks_tail", "sched_priv")

    def __init__(self, rq: Rq, tg: TaskGroup):
        self.rq = rq
        self.tg = tg
        self.cpu = rq.cpu
        self.load_weight = 0          # cfs_rq->load.weight, curr included
        self.nr_running = 0           # entities queued here, curr included
        self.h_nr_running = 0         # tasks queued in this subtree
        self.min_vruntime = 0
        self.curr: SchedEntity | None = None
        self.timeline = Heap()        # the policy's ordered queue (curr not in it)
        self.load_avg = 0.0
        self.avg_last_update = 0
        self.tg_load_avg_contrib = 0.0
        self.se: SchedEntity | None = None   # the group entity owning us (None: root)
        self.next: SchedEntity | None = None  # buddies: the wakee that preempted,
        self.last: SchedEntity | None = None  # and the task it preempted
        # CFS bandwidth control (sim/bandwidth.py)
        self.runtime_enabled = False  # the group has a quota
        self.runtime_remaining = 0    # runtime borrowed from the group's pool
        self.throttled = False        # out of runtime: our entity left the parent
        self.throttle_count = 0       # throttled cfs_rqs at or above us
        self.throttled_clock = 0      # when the current throttle began
        self.throttled_clock_pelt = 0       # when our PELT clock stopped
        self.throttled_clock_pelt_time = 0  # how long it has been stopped in all
        # the policy's update_cfs_rq_h_load(): our share of the CPU's load,
        # and the instant it was computed (-1: never)
        self.h_load = 0.0
        self.last_h_load_update = -1
        # the tasks queued here in rq->cfs_tasks order, kept only where the
        # CPU's CfsTasks has per_cfs_rq set
        self.tasks_head: SchedEntity | None = None
        self.tasks_tail: SchedEntity | None = None
        # the policy's own state of this cfs_rq (CFS-LAGS: its CreditQueue)
        self.sched_priv = None

    def cfs_rq_clock_pelt(self, now: int) -> int:
        """The clock this cfs_rq's PELT runs on (its ``avg_last_update`` and
        its entities' are in it): the CPU's minus the time spent in a
        throttled hierarchy."""
        if self.throttle_count:
            return self.throttled_clock_pelt - self.throttled_clock_pelt_time
        return now - self.throttled_clock_pelt_time

    def update_load_avg(self, now: int) -> None:
        """Decay cfs_rq->avg.load_avg toward the current queued weight.

        Valid because every change of ``load_weight`` is preceded by a call:
        the average of a sum of runnable weights is the sum of their averages.
        """
        now = self.cfs_rq_clock_pelt(now)
        delta = now - self.avg_last_update
        if delta > 0:
            y = exp(-delta * _DECAY_PER_NS)
            self.load_avg = self.load_avg * y + (1.0 - y) * self.load_weight
            self.avg_last_update = now

    def update_tg_load_avg(self) -> None:
        """update_tg_load_avg(): publish our load to tg->load_avg when it has
        moved by more than 1/64 of the last published value."""
        delta = self.load_avg - self.tg_load_avg_contrib
        if abs(delta) > self.tg_load_avg_contrib / 64:
            self.tg.load_avg += delta
            self.tg_load_avg_contrib = self.load_avg


class CfsTasks:
    """rq->cfs_tasks: a CPU's queued fair tasks, least recently run first,
    as the kernel's list threaded through their sched_entities
    (se->group_node).  A switch moves the next task to the tail by
    relinking two entities (list_move_tail), where a dict kept as an
    ordered set deleted and reinserted a key.  Iterating yields tasks.

    With ``per_cfs_rq`` set (by a policy, before any task is queued) each
    task is also linked, in the same order, into a list of its own cfs_rq
    (``cfs_rq.tasks_head``, through se.leaf_prev/leaf_next): every change
    appends at the tail or unlinks, so each cfs_rq's list is the CPU's list
    restricted to that group, and a scan for one group's tasks walks only
    those (CFS-LAGS's credit pull, policies/kernel/lags.py)."""

    __slots__ = ("head", "tail", "count", "per_cfs_rq")

    def __init__(self):
        self.head: SchedEntity | None = None
        self.tail: SchedEntity | None = None
        self.count = 0
        self.per_cfs_rq = False

    def __len__(self) -> int:
        return self.count

    def __contains__(self, p) -> bool:
        return p.se.group_list is self

    def __iter__(self):
        se = self.head
        while se is not None:
            yield se.task
            se = se.group_next

    def first(self, n: int) -> list:
        """The first ``n`` tasks (fewer if fewer are queued), as a list."""
        tasks = []
        se = self.head
        while se is not None and len(tasks) < n:
            tasks.append(se.task)
            se = se.group_next
        return tasks

    def add_tail(self, se: SchedEntity) -> None:
        """Queue a task's entity last; one already queued keeps its place."""
        if se.group_list is self:
            return
        tail = self.tail
        se.group_prev = tail
        se.group_next = None
        if tail is None:
            self.head = se
        else:
            tail.group_next = se
        self.tail = se
        se.group_list = self
        self.count += 1
        if self.per_cfs_rq:
            q = se.cfs_rq
            tail = q.tasks_tail
            se.leaf_prev = tail
            se.leaf_next = None
            if tail is None:
                q.tasks_head = se
            else:
                tail.leaf_next = se
            q.tasks_tail = se
            se.leaf_q = q

    def remove(self, se: SchedEntity) -> None:
        if se.group_list is not self:
            raise KeyError(f"{se.task!r} is not in this CPU's cfs_tasks")
        prev, nxt = se.group_prev, se.group_next
        if prev is None:
            self.head = nxt
        else:
            prev.group_next = nxt
        if nxt is None:
            self.tail = prev
        else:
            nxt.group_prev = prev
        se.group_prev = None
        se.group_next = None
        se.group_list = None
        self.count -= 1
        q = se.leaf_q
        if q is not None:
            prev, nxt = se.leaf_prev, se.leaf_next
            if prev is None:
                q.tasks_head = nxt
            else:
                prev.leaf_next = nxt
            if nxt is None:
                q.tasks_tail = prev
            else:
                nxt.leaf_prev = prev
            se.leaf_prev = None
            se.leaf_next = None
            se.leaf_q = None

    def move_tail(self, se: SchedEntity) -> None:
        """list_move_tail(): the most recently run goes last."""
        if se is not self.tail:
            self.remove(se)
            self.add_tail(se)


class Rq:
    """kernel ``struct rq``: per-CPU run queue state the simulator needs."""

    __slots__ = ("cpu", "cfs", "curr", "nr_running", "cfs_tasks", "need_resched",
                 "gen", "run_start", "switch_end", "idle", "idle_since", "avg_idle",
                 "next_balance", "nr_balance_failed", "ticking",
                 "tick_gen", "tick_at", "hrtick_gen", "resched_pending",
                 "speed", "nr_switches", "busy_ns", "overhead_ns", "runtime_expiry_gen",
                 "touched_bytes", "rcu_cb_until")

    def __init__(self, cpu: int):
        self.cpu = cpu
        self.cfs: CfsRq | None = None
        self.curr = None              # running task (None: idle)
        self.nr_running = 0           # runnable tasks, curr included
        self.cfs_tasks = CfsTasks()   # queued fair tasks, least recently run first
        self.need_resched = False
        self.gen = 0                  # invalidates the pending completion event
        self.run_start = 0            # when curr's useful work (re)started
        self.switch_end = 0           # the context switch in progress ends here
        self.idle = True              # idle_cpu(): nothing runs or waits here
        self.idle_since = 0
        self.avg_idle = 0
        self.next_balance = 0
        self.nr_balance_failed = 0
        self.ticking = False
        self.tick_gen = 0
        self.tick_at = 0
        self.hrtick_gen = 0
        self.resched_pending = False
        self.speed = 1.0              # work done per ns of CPU time (SMT sharing)
        self.nr_switches = 0
        self.busy_ns = 0              # useful task work executed
        self.overhead_ns = 0          # context-switch cost executed
        self.touched_bytes = 0        # working sets its tasks brought in (sim/costmodel.py)
        # RCU callbacks queued here wait for a grace period until then
        # (rcu_needs_cpu(); sim/kthreads.py RcuGp)
        self.rcu_cb_until = 0
        self.runtime_expiry_gen = 0   # invalidates the pending bandwidth expiry event
