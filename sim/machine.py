"""The simulated host: CPUs executing tasks, context switches and their
cost, scheduler ticks, wake-ups and load-balancing triggers.

The machine owns time and tasks; the kernel scheduling class (policies/
kernel) owns run-queue order.  Every context switch charges its cost-model
time to the core: during it the core runs no task, and that time is
reported as scheduler overhead.  As in the kernel, the incoming task's
exec_start is taken before the switch, so cgroup usage (cpuacct) includes
switch time while useful work does not.
"""
from __future__ import annotations

from itertools import count

import cython

from sim.bandwidth import NSEC_PER_USEC, RUNTIME_INF
from sim.costmodel import SPREAD_QUANTILES, CostModel
from sim.engine import Engine, _Call
from sim.heap import NodeStack
from sim.memory.progress import MemorySystem
from sim.rq import CfsRq, Rq, SchedEntity, TaskGroup
from sim.rt import MAX_RT_PRIO, RtClass, rt_prio
from sim.sched_class import RT_POLICIES, SCHED_POLICIES, SCHED_RR, TASK_POLICIES
from sim.sched_flags import (CPU_IDLE, CPU_NOT_IDLE, DEQUEUE_DELAYED,
                             DEQUEUE_SLEEP, ENQUEUE_DELAYED, ENQUEUE_INITIAL, ENQUEUE_MIGRATED,
                             ENQUEUE_WAKEUP, WF_FORK, WF_TTWU)
from sim.task import BURST_BLOCK, BURST_EXIT, Task
from sim.topology import Topology

if cython.compiled:            # the C library's log2: no Python call, no boxing
    from cython.cimports.libc.math import log2
else:
    from math import log2

ROOT = "/"
# hrtick_start(): the kernel never arms the slice timer closer than 10 us
HRTICK_MIN_DELAY_NS = 10_000
# a task reading its own CPU clock in a loop (Machine.cputime_poll) reads it
# about once a microsecond: clock_gettime(CLOCK_THREAD_CPUTIME_ID) is a
# system call, not vDSO, of a few hundred ns on this project's VM
CPUTIME_POLL_NS = 1_000


# the kinds of RqTimer
TICK, BURST_END, HRTICK, CPUTIME_POLL, RUNTIME_EXPIRY = range(5)


class RqTimer(_Call):
    """A per-CPU timer of the machine in the calendar: its ``kind``, run
    queue and the generation it was armed at (a timer re-armed since finds
    its generation stale and does nothing).  Ticks, burst ends and slice
    timers are most of a run's events, and most burst ends are stale; as
    a typed entry each costs no argument tuple, bound method or boxed
    integer, and a fired timer is kept for reuse (``Machine._push_timer``)."""

    __slots__ = ("machine", "kind", "rq", "gen")

    def fire(self, calendar) -> int:
        m, kind, rq, gen = self.machine, self.kind, self.rq, self.gen
        m._spare_timers.push(self)       # its fields are read: reusable from here
        if kind == TICK:
            m._on_tick(rq, gen)
        elif kind == BURST_END:
            m._on_burst_end(rq, gen)
        elif kind == HRTICK:
            m._on_hrtick(rq, gen)
        elif kind == CPUTIME_POLL:
            m._on_cputime_poll(rq, gen)
        else:
            m._on_runtime_expiry(rq, gen)
        return 0


def levels_walked(pse: SchedEntity, se: SchedEntity) -> int:
    """put_prev_entity/set_next_entity calls beyond the shared level."""
    levels = 0
    while pse.depth > se.depth:
        pse = pse.parent
        levels += 1
    while se.depth > pse.depth:
        se = se.parent
        levels += 1
    while pse.cfs_rq is not se.cfs_rq:
        pse = pse.parent
        se = se.parent
        levels += 2
    return levels


def reinsert_log2(pse: SchedEntity, se: SchedEntity | None) -> float:
    """Sum of log2(entities queued) over the put_prev_entity calls of
    pick_next_task_fair that re-insert an entity: prev's side of the walk
    up to the common cfs_rq with ``se`` (to the root when ``se`` is None,
    put_prev_task_fair), that level included.  An entity off its run queue
    (the task that slept, a group left empty) is not re-inserted."""
    while se is not None and se.depth > pse.depth:
        se = se.parent            # next's side alone: set_next_entity only
    total = 0.0
    while pse is not None:
        if pse.on_rq:
            total += log2(pse.cfs_rq.nr_running)
        if se is not None:
            if pse.cfs_rq is se.cfs_rq:
                break
            if se.depth == pse.depth:
                se = se.parent
        pse = pse.parent
    return total


class Machine:
    def __init__(self, engine: Engine, topology: Topology, policy_cls, sched_cfg,
                 costmodel: CostModel):
        self.engine = engine
        self.topology = topology
        self.cost = costmodel
        self._spare_timers = NodeStack()  # of RqTimer
        n = topology.nr_cpus
        self.rqs = [Rq(cpu) for cpu in range(n)]
        self.cpus_by_distance = [self._by_distance(cpu) for cpu in range(n)]
        # the other CPUs of each CPU's LLC from the next one on, wrapping:
        # select_idle_cpu()'s for_each_cpu_wrap(cpu, llc, target + 1)
        self.llc_wrap = [self._llc_wrap(cpu) for cpu in range(n)]
        self.tick_ns = topology.tick_ns
        self.smt = topology.threads_per_core > 1
        self.siblings = topology.siblings
        # the widest sched domain of each CPU: where its nohz kick looks
        self.nohz_span = [d[-1].span if d else (cpu,) for cpu, d in enumerate(topology.domains)]
        self.root_tg = TaskGroup(ROOT, None, 1024, n, None)
        self.groups: dict[str, TaskGroup] = {ROOT: self.root_tg}
        for rq in self.rqs:
            rq.cfs = CfsRq(rq, self.root_tg)
            self.root_tg.cfs_rq.append(rq.cfs)
        # the fair class is the pluggable policy; the RT class ranks above
        # it.  Both read the scheduler option's typed config (its policy's
        # CONFIG, a sim.sched_class.SchedConfig) here, once.
        self.policy = policy_cls(sched_cfg, self)
        self.rt = RtClass(sched_cfg, self)
        self.rt_rqs = self.rt.rt_rqs
        self.default_task_policy = (sched_cfg.task_policy, int(sched_cfg.rt_priority))
        self.group_task_policy: dict[TaskGroup, tuple[str, int]] = {}
        # rd->overloaded: set when a CPU gets a second task, re-evaluated
        # (and cleared) only by a balance of the widest domain
        # (update_sd_lb_stats()); what 6.18's newidle balance reads
        self.rd_overloaded = False
        self.nohz_kick_ipi = bool(sched_cfg.nohz_kick_ipi)
        self.affinity_requeue = bool(sched_cfg.affinity_requeue)
        self.rcu_idle_tick = bool(sched_cfg.rcu_idle_tick)
        # avg_idle starts at 2 x migration cost, as in sched_init()
        for rq in self.rqs:
            rq.avg_idle = 2 * self.policy.migration_cost
        # the wake-ups' scatter, where the profile gives it (sim/costmodel.py):
        # each kind its own stream, so the rest of the run's draws stay put
        self.idle_exit_rng = engine.rng("host/idle_exit") if costmodel.idle_exit_spread \
            else None
        self.timer_irq_rng = engine.rng("host/timer_irq") if costmodel.timer_irq_spread \
            else None
        self.nr_idle_cpus = n         # CPUs whose rq is idle (rq.idle)
        self.nr_migrations = 0
        # switches away from a task (to another task or to idle): what perf's
        # context-switches event counts for a cgroup's tasks (perf stat -G)
        self.nr_switch_outs = 0
        # working sets touched on all CPUs (shared cache levels, sim/costmodel.py)
        self.touched_bytes = 0
        # schedstat: time tasks waited runnable, and how many times they ran
        self.run_delay_ns = 0
        self.pcount = 0
        self._pids = count(1)
        self.tasks_alive = 0
        # cfs_bandwidth_used(): some group has a quota, so switches arm the
        # runtime-expiry event (groups without limits pay nothing)
        self.cfs_bandwidth_used = False
        # every cpu.max write that took effect: (t_ns, tg, quota_us or None, period_us),
        # for the time-averaged limit in the summary (scenarios/simulate.py)
        self.cpu_max_log: list = []
        # the memory model (sim/memory/progress.py): None until a cgroup gets a
        # memory profile or RDT is used, so runs without one never consult it
        self.memory = None
        self.host_cfg: dict | None = None     # the host preset (set by backends.simhost.build_host)
        # trace=sched: the tracepoints' recorder (sim/tracing.py); None costs
        # the hot paths one pointer test
        self.tracer = None
        # the workload's tasks read their own CPU clock as they run (the real
        # backend's native workers do: backends/workers/funcworker.c
        # spin_cpu); set by the workload (WorkloadConfig.cputime_poll)
        self.cputime_poll = False
        # called with every task that exits (release_task's call_rcu:
        # sim/kthreads.py RcuGp); None costs an exit one pointer test
        self.on_exit = None

    def _by_distance(self, cpu: int) -> list[int]:
        me = self.topology.cpus[cpu]
        n = self.topology.nr_cpus

        def key(c):
            o = self.topology.cpus[c]
            return (o.core != me.core, o.llc != me.llc, o.numa != me.numa,
                    o.socket != me.socket, (c - cpu) % n)
        return sorted(range(n), key=key)

    def _llc_wrap(self, cpu: int) -> list[int]:
        span = self.topology.llc_span(cpu)
        start = span.index(cpu)
        return [span[(start + i) % len(span)] for i in range(1, len(span))]

    # ------------------------------------------------------------------
    # cgroups
    def create_group(self, path: str, shares: int = 1024,
                     cpuset: frozenset[int] | None = None) -> TaskGroup:
        """mkdir a cpu cgroup (parents are created with default shares)."""
        path = "/" + path.strip("/")
        if path in self.groups:
            raise ValueError(f"cgroup {path} already exists")
        parent_path = path.rsplit("/", 1)[0] or ROOT
        parent = self.groups.get(parent_path) or self.create_group(parent_path)
        allowed = cpuset
        if parent.cpus_allowed is not None:
            allowed = parent.cpus_allowed if allowed is None else allowed & parent.cpus_allowed
        if allowed is not None and not allowed:
            raise ValueError(f"cgroup {path}: cpuset leaves no CPU to run on")
        tg = TaskGroup(path, parent, shares, len(self.rqs), allowed)
        for rq in self.rqs:
            cfs_rq = CfsRq(rq, tg)
            parent_cfs_rq = parent.cfs_rq[rq.cpu]
            se = SchedEntity(shares, parent.se[rq.cpu], parent_cfs_rq, my_q=cfs_rq)
            cfs_rq.se = se
            tg.cfs_rq.append(cfs_rq)
            tg.se[rq.cpu] = se
        self.groups[path] = tg
        self.policy.init_task_group(tg)
        return tg

    def set_cfs_bandwidth(self, tg: TaskGroup | str, quota_us: int | None, period_us: int,
                          burst_us: int = 0) -> None:
        """Write a cgroup's cpu.max (and cpu.max.burst): ``quota_us`` of CPU
        time per ``period_us``; None or -1 is unlimited ("max").  Raises
        ValueError outside the kernel's ranges (sim/bandwidth.py)."""
        if isinstance(tg, str):
            tg = self.groups["/" + tg.strip("/")]
        quota = RUNTIME_INF if quota_us is None or quota_us == -1 else int(quota_us) * NSEC_PER_USEC
        # charge running tasks up to now, so time before the change is not
        # charged to the new runtime
        self.sync()
        bw = self.policy.bandwidth
        bw.tg_set_cfs_bandwidth(tg, int(period_us) * NSEC_PER_USEC, quota,
                                int(burst_us) * NSEC_PER_USEC)
        self.cpu_max_log.append((self.engine._now, tg,
                                 None if quota == RUNTIME_INF else int(quota_us), int(period_us)))
        self.cfs_bandwidth_used = bw.nr_enabled > 0
        for rq in self.rqs:
            if rq.curr is not None:
                # local runtime was cleared: the running task borrows anew
                self._arm_runtime_expiry(rq)

    def set_group_task_policy(self, tg: TaskGroup, policy: str, rt_priority: int = 50) -> None:
        """Threads created in ``tg`` from now on get this scheduling policy
        (as if the function's process had been started under chrt)."""
        if policy not in TASK_POLICIES:
            raise ValueError(f"task policy {policy!r}: choose from {', '.join(TASK_POLICIES)}")
        self.group_task_policy[tg] = (policy, rt_priority)

    # ------------------------------------------------------------------
    # task lifecycle
    def new_task(self, name: str, tg: TaskGroup, nice: int, burst_ns: int, ws_bytes: int,
                 owner, request=None) -> Task:
        p = Task(next(self._pids), name, tg, nice, burst_ns, ws_bytes, owner, request)
        p.se.avg_last_update = self.engine._now
        policy, rt_priority = self.group_task_policy.get(tg, self.default_task_policy)
        if policy == SCHED_RR:
            p.sched_policy = SCHED_RR
            p.prio = rt_prio(rt_priority)
        tg.tasks[p] = None
        return p

    def sched_setscheduler(self, p: Task, policy: str, rt_priority: int = 50) -> None:
        """__sched_setscheduler() on a live task: take it out of its class
        (dequeue, and put_prev if it runs), change policy and prio, put it
        back (enqueue, and set_next if it runs), then check_class_changed():
        switched_from/switched_to move its fair load, a running task that
        falls back to fair or an RT task now behind a more important one
        reschedules, and a queued one preempts as a wakee would."""
        if policy not in SCHED_POLICIES:
            raise ValueError(f"task policy {policy!r}: choose from {', '.join(SCHED_POLICIES)}")
        prio = rt_prio(rt_priority) if policy in RT_POLICIES else 120 + p.nice
        if p.dead or (prio == p.prio and policy == p.sched_policy):
            return
        was_rt = p.prio < MAX_RT_PRIO
        is_rt = prio < MAX_RT_PRIO
        fair = self.policy
        if p.sleeping:
            self._finish_delayed(p)
            # (a task not yet forked has no cfs_rq: its first enqueue attaches it)
            if was_rt != is_rt and p.se.cfs_rq is not None:
                if was_rt:
                    fair.switched_to_fair(p)
                else:
                    fair.switched_from_fair(p)
            self._set_prio(p, policy, prio)
            return
        rq = self.rqs[p.cpu]
        running = rq.curr is p
        now = self.engine._now
        if running:
            self._charge(rq, now)
            self._update_curr(rq, p)
        self._dequeue(rq, p, 0)
        if running:
            if was_rt:
                self.rt.put_prev_task(rq, p)
            else:
                fair.put_prev_task(rq, p)
        if not was_rt and is_rt:
            fair.switched_from_fair(p)
        self._set_prio(p, policy, prio)
        if not running:
            self._enqueue(rq, p, 0)
            if is_rt:
                self.rt.task_woken(rq, p)             # switched_to_rt(): push
        elif is_rt:
            self.rt.enqueue_task(rq, p, 0)
            self.rt.rt_rqs[rq.cpu].exec_start = now   # set_next_task_rt()
            if self.rt.rt_rqs[rq.cpu].highest_prio() < prio:
                rq.need_resched = True                # prio_changed_rt()
        else:
            fair.enqueue_task(rq, p, 0)
            rq.cfs_tasks.add_tail(p.se)
            fair.set_next_task(rq, p)
            rq.need_resched = True                    # switched_to_fair() on curr
        if was_rt and not is_rt:
            fair.switched_to_fair(p)
            if not self.rt.rt_rqs[rq.cpu].rt_nr_running:
                self.rt.pull_rt_task(rq)              # switched_from_rt()
        if running:
            self._arm_hrtick(rq)
            self._ensure_tick(rq)
        if rq.need_resched:
            self.schedule(rq)

    def set_cpus_allowed(self, p: Task, cpus: frozenset[int] | None) -> None:
        """__set_cpus_allowed_ptr() on a live task (sched_setaffinity, or a
        write to its cpuset's cpuset.cpus).  A sleeping task takes the mask
        at its next wake-up; a queued one on a CPU outside it is moved at
        once (move_queued_task); a running one is pushed off its CPU, as
        migration_cpu_stop does, and queued where its class would wake it."""
        p.cpus_allowed = cpus
        if p.dead or cpus is None:
            return
        if p.cpu in cpus:
            if self.affinity_requeue and not p.sleeping and p.prio >= MAX_RT_PRIO:
                self._requeue_running(p)
            return
        if p.sleeping:
            self._finish_delayed(p)       # woken where it is, it would stay outside
            return
        self._affine_move(p, cpus)

    def _requeue_running(self, p: Task) -> None:
        """__do_set_cpus_allowed() on a task that may stay: dequeued with
        DEQUEUE_SAVE and requeued, so the running one's accounting is
        brought up to now (update_curr()), which under EEVDF reschedules it
        if its slice is used up; the reschedule happens at the system
        call's return, after the caller's own step (an event now)."""
        rq = self.rqs[p.cpu]
        if rq.curr is not p:
            return
        self._update_curr(rq, p)
        self.policy.cputime_poll(rq)
        if rq.need_resched:
            self.engine.push(self.engine._now, self._resched_running, (rq, p))

    def _resched_running(self, rq: Rq, p: Task) -> None:
        if rq.curr is p and rq.need_resched:
            self.schedule(rq)

    def _affine_move(self, p: Task, cpus: frozenset[int]) -> None:
        if p.cpus_allowed is not cpus or p.sleeping or p.dead or p.cpu in cpus:
            return                        # superseded, asleep or already inside
        # (a task still being switched in moves once that is done, when the
        # stopper would run)
        src = self.rqs[p.cpu]
        now = self.engine._now
        if src.curr is p and now < src.switch_end:
            self.engine.push(src.switch_end, self._affine_move, (p, cpus))
            return
        cpu = self._select_task_rq(p, p.cpu, 0)
        dst = self.rqs[cpu if cpu in cpus else min(cpus)]
        if src.curr is not p:
            self.move_queued_task(p, src, dst)
        else:
            self._charge(src, now)
            self._update_curr(src, p)
            self._dequeue(src, p, 0)
            p.sleeping = True             # off every queue while it moves
            self.schedule(src)
            p.sleeping = False
            self._set_task_cpu(p, dst.cpu)
            p.wait_start = now
            self._enqueue(dst, p, ENQUEUE_MIGRATED)
        if dst.need_resched:
            self.schedule(dst)

    def _finish_delayed(self, p: Task) -> None:
        """A sleeping task EEVDF still holds queued (DELAY_DEQUEUE) leaves
        its queue for good, as __sched_setscheduler() and the affinity
        change do with DEQUEUE_DELAYED."""
        if p.se.sched_delayed:
            self.policy.dequeue_task(self.rqs[p.cpu], p, DEQUEUE_SLEEP | DEQUEUE_DELAYED)

    @staticmethod
    def _set_prio(p: Task, policy: str, prio: int) -> None:
        p.sched_policy = policy
        p.prio = prio
        p.rt_time_slice = 0          # a fresh RR quantum at its next enqueue

    def sched_class(self, p: Task):
        """The class a task is scheduled by (rt_sched_class above fair)."""
        return self.rt if p.prio < MAX_RT_PRIO else self.policy

    # sched_class(p).<method>, each without the dynamic dispatch (compiled,
    # the fair policy's methods are C calls)
    def _update_curr(self, rq: Rq, curr: Task) -> None:
        if curr.prio < MAX_RT_PRIO:
            self.rt.update_curr(rq)
        else:
            self.policy.update_curr(rq)

    def _select_task_rq(self, p: Task, prev_cpu: int, wake_flags: int) -> int:
        if p.prio < MAX_RT_PRIO:
            return self.rt.select_task_rq(p, prev_cpu, wake_flags)
        return self.policy.select_task_rq(p, prev_cpu, wake_flags)

    def resched_curr(self, rq: Rq) -> None:
        rq.need_resched = True
        self.schedule(rq)

    def idle_cpu(self, cpu: int) -> bool:
        """idle_cpu(): nothing runs or waits on ``cpu``."""
        return cython.cast(Rq, self.rqs[cpu]).idle

    def idle_core(self, cpu: int) -> bool:
        """All SMT siblings of ``cpu`` (itself included) are idle."""
        rqs = self.rqs
        for c in self.siblings[cpu]:
            if not cython.cast(Rq, rqs[c]).idle:
                return False
        return True

    def wake_up_new_task(self, p: Task, hint_cpu: int) -> None:
        cpu = self._select_task_rq(p, hint_cpu, WF_FORK)
        p.cpu = cpu
        # the fair entity's pointers are kept for RT tasks too (set_task_rq)
        self.policy.set_task_rq(p, cpu)
        self.tasks_alive += 1
        if self.tracer is not None:
            self.tracer.sched_wakeup(self.engine._now, cpu, p, True)
        self._activate(self.rqs[cpu], p, ENQUEUE_INITIAL)

    def wake_up(self, p: Task) -> None:
        """try_to_wake_up()"""
        if not p.sleeping or p.dead:
            return
        if p.se.sched_delayed:
            # ttwu_runnable(): still queued (EEVDF's DELAY_DEQUEUE), so
            # woken where it is, no CPU selection
            if self.tracer is not None:
                self.tracer.sched_wakeup(self.engine._now, p.cpu, p, False)
            self._activate(self.rqs[p.cpu], p, ENQUEUE_WAKEUP | ENQUEUE_DELAYED)
            return
        cpu = self._select_task_rq(p, p.cpu, WF_TTWU)
        flags = ENQUEUE_WAKEUP
        if cpu != p.cpu:
            self._set_task_cpu(p, cpu)
            flags |= ENQUEUE_MIGRATED
        if self.tracer is not None:
            self.tracer.sched_wakeup(self.engine._now, cpu, p, False)
        self._activate(self.rqs[cpu], p, flags)

    def _set_task_cpu(self, p: Task, cpu: int) -> None:
        """set_task_cpu(): the task moves CPUs; every move is a migration."""
        if self.tracer is not None:
            self.tracer.sched_migrate_task(self.engine._now, p, p.cpu, cpu)
        if p.prio < MAX_RT_PRIO:
            self.policy.set_task_rq(p, cpu)
        else:
            self.policy.migrate_task_rq(p, cpu)
        p.cpu = cpu
        self.nr_migrations += 1

    def _enqueue(self, rq: Rq, p: Task, flags: int) -> None:
        """Queue ``p`` on ``rq`` and let it preempt; the caller reschedules."""
        was_idle = rq.nr_running == 0
        if p.prio < MAX_RT_PRIO:
            self.rt.enqueue_task(rq, p, flags)
        else:
            self.policy.enqueue_task(rq, p, flags)
            rq.cfs_tasks.add_tail(p.se)
        if was_idle and rq.nr_running:
            # (a task queued under a throttled group leaves the CPU idle)
            self._leave_idle(rq, self.engine._now)
        elif rq.nr_running >= 2:
            self.rd_overloaded = True     # add_nr_running()
        # check_preempt_curr(): a higher class always preempts a lower one
        curr = rq.curr
        if p.prio < MAX_RT_PRIO:
            self.rt.check_preempt_curr(rq, p)
        elif (curr is None or curr.prio >= MAX_RT_PRIO) and not p.se.cfs_rq.throttle_count:
            # check_preempt_wakeup_fair() ignores a wakee in a throttled hierarchy
            self.policy.check_preempt_wakeup(rq, p)
        self._ensure_tick(rq)

    def _activate(self, rq: Rq, p: Task, flags: int) -> None:
        p.sleeping = False
        p.wait_start = self.engine._now
        self._enqueue(rq, p, flags)
        if p.prio < MAX_RT_PRIO:
            self.rt.task_woken(rq, p)
        if rq.need_resched:
            self.schedule(rq)
        elif rq.curr is not None:
            self._arm_hrtick(rq)      # hrtick_update(): the slice just shrank

    def _leave_idle(self, rq: Rq, now: int) -> None:
        if rq.idle:
            rq.idle = False
            self.nr_idle_cpus -= 1
        if rq.curr is None:
            # update_avg(&rq->avg_idle, idle duration), capped at 2 x migration cost
            sample = max(0, now - rq.idle_since)
            rq.avg_idle += (sample - rq.avg_idle) // 8
            rq.avg_idle = min(rq.avg_idle, 2 * self.policy.migration_cost)

    def move_queued_task(self, p: Task, src: Rq, dst: Rq) -> None:
        """detach_task() + attach_task() for the load balancers."""
        self._dequeue(src, p, 0)
        self._set_task_cpu(p, dst.cpu)
        self._enqueue(dst, p, ENQUEUE_MIGRATED)

    # ------------------------------------------------------------------
    # the CPU loop
    def schedule(self, rq: Rq) -> None:
        """__schedule(): pick the next task and switch to it."""
        now = self.engine._now
        if now < rq.switch_end:
            # a switch is in progress on this core: reschedule when it ends
            if not rq.resched_pending:
                rq.resched_pending = True
                self.engine.push(rq.switch_end, self._deferred_schedule, (rq,))
            return
        rq.need_resched = False
        policy = self.policy
        prev = rq.curr
        if prev is not None:
            self._charge(rq, now)
        nxt = self._pick_next_task(rq, prev)
        if self.cfs_bandwidth_used:
            # __schedule() clears TIF_NEED_RESCHED after the pick: a group
            # that ran out of runtime during it was throttled by it
            rq.need_resched = False
        if nxt is None:
            if policy.newidle_balance(rq):
                nxt = policy.pick_next_task(rq, None)
                # the pull's preemption check ran against the departing task
                rq.need_resched = False
            # newidle_balance() ends by moving next_balance forward to the
            # idle interval: a CPU that went idle balances (nohz, on a busy
            # CPU's tick) at the idle rate, not busy_factor times later.  The
            # kernel counts from sd->last_balance; we count from now, which
            # is at most one interval later
            next_balance = now + policy.balance_interval_ns(rq, CPU_IDLE)
            if next_balance < rq.next_balance:
                rq.next_balance = next_balance
        if nxt is prev:
            self._arm_hrtick(rq)
            return
        rq.nr_switches += 1
        rq.gen += 1
        if prev is not None:
            if not prev.host:
                self.nr_switch_outs += 1
            prev.on_cpu = False
            prev.last_ran = now
            prev.last_cpu = rq.cpu
            if not prev.sleeping:
                prev.wait_start = now
        cost = self.cost
        if nxt is None:
            c = cost.switch_to_idle_ns(self._fair_depth(prev))
            rq.curr = None
            rq.overhead_ns += c
            rq.switch_end = now + c
            rq.idle_since = now + c
            if self.tracer is not None:
                self.tracer.sched_switch(now, rq.cpu, prev, None, c)
            if rq.nr_running == 0 and not rq.idle:
                rq.idle = True
                self.nr_idle_cpus += 1
            if self.rcu_idle_tick and rq.rcu_cb_until > now:
                self._ensure_tick(rq)     # tick_nohz_idle_stop_tick() keeps it
            if self.smt:
                self._smt_update(rq, now)
            return
        reinserted = 0.0
        if prev is None or prev.prio < MAX_RT_PRIO or nxt.prio < MAX_RT_PRIO:
            # across classes the fair side walks its whole hierarchy
            levels = self._fair_depth(prev) + self._fair_depth(nxt)
            if prev is not None and prev.prio >= MAX_RT_PRIO:
                # put_prev_task_fair: a fair prev goes back at every level
                reinserted = reinsert_log2(prev.se, None)
        else:
            levels = levels_walked(prev.se, nxt.se)
            reinserted = reinsert_log2(prev.se, nxt.se)
        migrated = nxt.last_cpu >= 0 and nxt.last_cpu != rq.cpu
        away = -1 if nxt.last_ran < 0 else now - nxt.last_ran     # -1: never ran
        exit_ns = 0
        if prev is None:
            exit_ns = cost.idle_exit_ns_at(
                now - rq.idle_since, 1.0 if self.idle_exit_rng is None else
                self.idle_exit_rng.quantile_draw(SPREAD_QUANTILES, cost.idle_exit_spread))
        # switch_cost's own from_idle term is exit_ns at the median
        c = cost.switch_cost_ns(levels, nxt.ws_bytes, away, migrated, rq.nr_running,
                                rq.touched_bytes - nxt.touch_mark,
                                self.touched_bytes - nxt.touch_mark_shared,
                                reinserted) + exit_ns
        # it touches its working set once on this run (the cache_levels model)
        rq.touched_bytes += nxt.ws_bytes
        self.touched_bytes += nxt.ws_bytes
        nxt.touch_mark = rq.touched_bytes
        nxt.touch_mark_shared = self.touched_bytes
        rq.overhead_ns += c
        if self.tracer is not None:
            self.tracer.sched_switch(now, rq.cpu, prev, nxt, c, exit_ns)
        rq.curr = nxt
        nxt.on_cpu = True
        if not nxt.host:
            self.run_delay_ns += now - nxt.wait_start
            self.pcount += 1
        if nxt.prio >= MAX_RT_PRIO:
            rq.cfs_tasks.move_tail(nxt.se)     # most recently run goes last
        start = now + c
        rq.switch_end = start
        rq.run_start = start
        req = nxt.request
        if req is not None and req.start < 0:
            req.start = start
        if self.smt and prev is None:
            self._smt_update(rq, now)
        if self.memory is not None:
            rq.speed = self._smt_speed(rq) * self.memory.task_speed(nxt, rq.cpu)
        self._arm_completion(rq)
        self._arm_hrtick(rq)
        if self.cfs_bandwidth_used:
            self._arm_runtime_expiry(rq)
        if nxt.prio < MAX_RT_PRIO:
            # set_next_task_rt() queues a push of the RT tasks left waiting
            self.rt.push_rt_tasks(rq)

    def _pick_next_task(self, rq: Rq, prev: Task | None) -> Task | None:
        """Class by class, highest first: RT, then the fair policy.  The
        class of ``prev`` puts it back; an RT CPU whose last RT task left
        pulls queued RT work first (balance_rt)."""
        rt, fair = self.rt, self.policy
        fair_prev = prev
        if prev is not None and prev.prio < MAX_RT_PRIO:
            rt.put_prev_task(rq, prev)
            fair_prev = None
            if prev.sleeping and rt.need_pull(rq, prev):
                rt.pull_rt_task(rq)
        if rt.has_runnable(rq):
            if fair_prev is not None:
                fair.put_prev_task(rq, fair_prev)
            return rt.pick_next_task(rq)
        return fair.pick_next_task(rq, fair_prev)

    def _fair_depth(self, p: Task | None) -> int:
        """Hierarchy levels a fair task's switch walks (none for RT or idle)."""
        return p.tg.depth if p is not None and p.prio >= MAX_RT_PRIO else 0

    def _dequeue(self, rq: Rq, p: Task, flags: int) -> None:
        if p.prio < MAX_RT_PRIO:
            self.rt.dequeue_task(rq, p, flags)
        else:
            self.policy.dequeue_task(rq, p, flags)
            rq.cfs_tasks.remove(p.se)

    # ------------------------------------------------------------------
    # work progress: a task's remaining demand shrinks at the core's speed
    def _charge(self, rq: Rq, now: int) -> None:
        ran = now - rq.run_start
        if ran > 0:
            curr = rq.curr
            # (a cast: int() of a C double would box it as a Python int)
            curr.remaining -= ran if rq.speed == 1.0 else cython.cast(cython.longlong,
                                                                      ran * rq.speed)
            rq.busy_ns += ran
            rq.run_start = now

    def _arm_completion(self, rq: Rq) -> None:
        curr = rq.curr
        remaining = curr.remaining
        if rq.speed != 1.0:
            remaining = -int(-remaining // rq.speed)
        self._push_timer(rq.run_start + remaining, BURST_END, rq, rq.gen)

    def _push_timer(self, at: int, kind: int, rq: Rq, gen: int) -> None:
        """Arm an RqTimer, a spare one if there is one."""
        timer = self._spare_timers.pop()
        if timer is None:
            timer = RqTimer.__new__(RqTimer)
            timer.machine = self
        timer.kind = kind
        timer.rq = rq
        timer.gen = gen
        self.engine.push_call(at, timer)

    def _smt_update(self, rq: Rq, now: int) -> None:
        """SMT siblings share their core: with n hardware threads busy each
        runs at smt_throughput / n of a lone thread's speed.  Called when
        ``rq`` turns busy or idle; re-times the siblings' running work."""
        siblings = self.siblings[rq.cpu]
        rqs = self.rqs
        smt = self._smt_speed(rq)
        mem = self.memory
        for c in siblings:
            other = rqs[c]
            speed = smt if mem is None or other.curr is None else \
                smt * mem.task_speed(other.curr, c)
            if other.speed == speed:
                continue
            if other.curr is not None and other is not rq:
                self._charge(other, now)
                other.speed = speed
                other.gen += 1
                self._arm_completion(other)
            else:
                other.speed = speed

    # ------------------------------------------------------------------
    # memory-model hooks (only called once self.memory exists)
    def memory_model(self):
        """The run's memory system (sim/memory/progress.py), created on first use."""
        if self.memory is None:
            if self.host_cfg is None:
                raise ValueError("the memory model needs the host preset (Machine.host_cfg)")
            self.memory = MemorySystem(self, self.host_cfg)
        return self.memory

    def _smt_speed(self, rq: Rq) -> float:
        if not self.smt:
            return 1.0
        rqs = self.rqs
        busy = 0
        for c in self.siblings[rq.cpu]:
            if rqs[c].curr is not None:
                busy += 1
        return 1.0 if busy <= 1 else self.topology.smt_throughput / busy

    def refresh_speed(self, rq: Rq) -> None:
        """The running task's memory speed changed: charge it up to now at
        the old speed and re-time its burst (as _smt_update does)."""
        curr = rq.curr
        if curr is None:
            return
        speed = self._smt_speed(rq) * self.memory.task_speed(curr, rq.cpu)
        if rq.speed == speed:
            return
        self._charge(rq, self.engine._now)
        rq.speed = speed
        rq.gen += 1
        self._arm_completion(rq)

    def _deferred_schedule(self, rq: Rq) -> None:
        rq.resched_pending = False
        if rq.need_resched:
            self.schedule(rq)

    def _overloaded(self) -> bool:
        """Some CPU has a task waiting now (the kernel's rd->overloaded is
        ``rd_overloaded``, which lags this)."""
        for r in self.rqs:
            if r.nr_running > 1:
                return True
        return False

    def _on_burst_end(self, rq: Rq, gen: int) -> None:
        if gen != rq.gen:
            return
        p = rq.curr
        now = self.engine._now
        self._charge(rq, now)
        p.remaining = 0               # the event was timed to the burst's end
        self._update_curr(rq, p)
        action = p.owner.burst_done(p)
        if action == 0:
            if p.remaining <= 0:
                raise RuntimeError(f"{p.owner!r} continued {p.name} with no work")
            self._arm_completion(rq)
            return
        self._dequeue(rq, p, DEQUEUE_SLEEP)
        p.sleeping = True
        if action is BURST_EXIT:
            p.dead = True
            del p.tg.tasks[p]
            self.tasks_alive -= 1
            if p.prio >= MAX_RT_PRIO:
                self.policy.task_dead(p)
            if self.on_exit is not None:
                self.on_exit(p)
        elif action != BURST_BLOCK:
            self.timer_sleep(p, now + int(action), self.wake_up)
        self.schedule(rq)
        if p.dead:
            # put_task_struct(): once switched away from, nothing reaches an
            # exited task through its entity; cutting se.task ends the
            # task <-> entity cycle, so reference counting frees them and
            # the cyclic collector need not (one cycle per exited task was
            # nearly all of a thread-per-request run's cyclic garbage)
            p.se.task = None

    def replace_burst(self, p: Task, burst_ns: int) -> int:
        """The work left in the current burst of ``p`` (running or runnable)
        is dropped and ``burst_ns`` becomes its burst, without a switch: a
        thread that leaves a busy-wait loop because the flag it polls
        changed (an OpenMP thread spinning at a barrier that has just been
        released, sim/workloads/openmp.py) and goes on to other work.
        Returns the work that was left."""
        if p.sleeping or p.dead:
            raise RuntimeError(f"replace_burst: {p.name} is not runnable")
        if burst_ns <= 0:
            raise ValueError(f"replace_burst: burst_ns = {burst_ns} must be > 0")
        rq = self.rqs[p.cpu]
        if rq.curr is not p:
            # queued: its completion is armed when it next runs
            left = p.remaining
            p.remaining = burst_ns
            return left
        self._charge(rq, self.engine._now)
        left = p.remaining
        p.remaining = burst_ns
        rq.gen += 1                   # the old completion event is void
        self._arm_completion(rq)
        return left

    # ------------------------------------------------------------------
    # timed sleeps: hrtimers (sim/costmodel.py, timer_slack_ns and timer_irq_ns)
    def timer_sleep(self, p: Task, expiry: int, fn) -> None:
        """hrtimer_nanosleep(): ``p`` sleeps until ``expiry`` (ns) and
        ``fn(p)`` wakes it (wake_up, or a workload's own).  A fair task's
        timer expires timer_slack_ns late, an RT task's on time; on a busy
        CPU the interrupt then takes timer_irq_ns before the wake-up."""
        cost = self.cost
        if p.prio >= MAX_RT_PRIO:
            expiry += cython.cast(cython.longlong, cost.timer_slack_ns)
        if cost.timer_irq_ns == 0:
            self.engine.push(expiry, fn, (p,))
        else:
            self.engine.push(expiry, self._hrtimer_interrupt, (p, fn))

    def _hrtimer_interrupt(self, p: Task, fn) -> None:
        """hrtimer_interrupt() on the CPU the sleeper's timer was queued on
        (where it went to sleep).  On a busy one the running task makes no
        progress until the wake-up, timer_irq_ns later; that time is
        overhead, as a switch's.  An idle one wakes the sleeper at once: its
        interrupt is in the idle exit the switch out of idle charges."""
        rq = self.rqs[p.cpu]
        if rq.curr is None:
            fn(p)
            return
        cost = self.cost
        irq = cython.cast(cython.longlong, cost.timer_irq_ns if self.timer_irq_rng is None else
                          cost.timer_irq_ns * self.timer_irq_rng.quantile_draw(
                              SPREAD_QUANTILES, cost.timer_irq_spread))
        now = self.engine._now
        self._charge(rq, now)
        rq.run_start = (rq.run_start if rq.run_start > now else now) + irq
        rq.overhead_ns += irq
        rq.gen += 1
        self._arm_completion(rq)
        self.engine.push(now + irq, fn, (p,))

    # ------------------------------------------------------------------
    # ticks and balancing
    def _next_tick_time(self, rq: Rq, now: int) -> int:
        """When ``rq``'s tick is next needed (-1: not at all, a nohz idle CPU)."""
        tick = self.tick_ns
        boundary = (now // tick + 1) * tick
        if rq.nr_running >= 2 or self.rt_rqs[rq.cpu].rt_nr_running:
            return boundary           # RT runtime and RR quanta are counted in ticks
        if rq.nr_running == 1:
            # a lone task needs no preemption check; only periodic balancing
            return max(boundary, -(-rq.next_balance // tick) * tick)
        if self.rcu_idle_tick and rq.rcu_cb_until > now:
            return boundary           # rcu_needs_cpu(): the idle CPU keeps its tick
        return -1

    def _ensure_tick(self, rq: Rq) -> None:
        now = self.engine._now
        at = self._next_tick_time(rq, now)
        if at < 0 or (rq.ticking and rq.tick_at <= at):
            return
        rq.tick_gen += 1
        rq.tick_at = at
        rq.ticking = True
        self._push_timer(at, TICK, rq, rq.tick_gen)

    def _arm_hrtick(self, rq: Rq) -> None:
        """hrtick_start(): (re)arm the slice timer; any older one is void.
        Without HRTICK, a task that reads its own CPU clock as it runs
        (``cputime_poll``) has the same timer at the first read whose
        update_curr() would reschedule it (``_on_cputime_poll``): to the
        kernel each read is a system call, task_sched_runtime(), which
        brings curr's accounting up to date, so its slice ends when it is
        used up, not at the next tick (this host's traces: preempted
        funcworker threads ran 1.40 ms, the base slice, not 4 ms ticks)."""
        rq.hrtick_gen += 1
        curr = rq.curr
        if curr is not None and curr.prio < MAX_RT_PRIO:
            return
        delay = self.policy.hrtick_delay(rq)
        if delay is not None:
            self._push_timer(self.engine._now + int(max(delay, HRTICK_MIN_DELAY_NS)),
                             HRTICK, rq, rq.hrtick_gen)
        elif self.cputime_poll and curr is not None and not curr.host:
            delay = self.policy.cputime_poll_delay(rq)
            if delay is not None:
                self._push_timer(self.engine._now + int(max(delay, CPUTIME_POLL_NS)),
                                 CPUTIME_POLL, rq, rq.hrtick_gen)

    def _on_hrtick(self, rq: Rq, hrtick_gen: int) -> None:
        """hrtick(): a queued tick always reschedules (entity_tick, queued=1)."""
        if hrtick_gen == rq.hrtick_gen and rq.curr is not None:
            self._update_curr(rq, rq.curr)
            rq.need_resched = True
            self.schedule(rq)

    def _on_cputime_poll(self, rq: Rq, hrtick_gen: int) -> None:
        """The read of its CPU clock after which curr is rescheduled, or, if
        its cfs_rq changed meanwhile so that it is not, the timer again."""
        if hrtick_gen == rq.hrtick_gen and rq.curr is not None:
            self._update_curr(rq, rq.curr)
            self.policy.cputime_poll(rq)
            if rq.need_resched:
                self.schedule(rq)
            else:
                self._arm_hrtick(rq)

    def _arm_runtime_expiry(self, rq: Rq) -> None:
        """Time the instant the running task's hierarchy runs out of local
        runtime (sim/bandwidth.py explains why an event, not the tick)."""
        rq.runtime_expiry_gen += 1
        curr = rq.curr
        if curr is None or curr.prio < MAX_RT_PRIO:
            return
        at = self.policy.bandwidth.runtime_expiry(curr)
        if at is not None:
            self._push_timer(max(at, self.engine._now), RUNTIME_EXPIRY, rq,
                             rq.runtime_expiry_gen)

    def _on_runtime_expiry(self, rq: Rq, gen: int) -> None:
        if gen != rq.runtime_expiry_gen or rq.curr is None:
            return
        self.policy.bandwidth.runtime_expired(rq)
        if rq.need_resched:
            self.schedule(rq)
        else:
            self._arm_runtime_expiry(rq)     # it borrowed another slice

    def cfs_tasks_unthrottled(self, rq: Rq) -> None:
        """unthrottle_cfs_rq() made tasks runnable on ``rq``: an idle CPU
        picks them up, a busy one ticks so they get their turn."""
        if rq.nr_running >= 2:
            self.rd_overloaded = True     # add_nr_running()
        if rq.curr is None:
            if rq.idle:
                self._leave_idle(rq, self.engine._now)
            self.resched_curr(rq)
        self._ensure_tick(rq)

    def _on_tick(self, rq: Rq, tick_gen: int) -> None:
        if tick_gen != rq.tick_gen:
            return
        rq.ticking = False
        now = self.engine._now
        policy = self.policy
        curr = rq.curr
        if curr is not None:
            if curr.prio < MAX_RT_PRIO:
                self.rt.task_tick(rq, curr)
            else:
                policy.task_tick(rq, curr)
        if rq.nr_running >= 2 and self.nr_idle_cpus:
            if self.nohz_kick_ipi:
                # the idle CPU balances when it takes the kick's IPI, after
                # this tick's reschedule below (SchedConfig.nohz_kick_ipi)
                self.engine.push(now, self._nohz_idle_balance, (rq,))
            else:
                self._nohz_idle_balance(rq)
        if now >= rq.next_balance:
            idle = CPU_NOT_IDLE if curr is not None else CPU_IDLE
            policy.balance(rq, idle)
            interval = policy.balance_interval_ns(rq, idle)
            rq.next_balance = now + (interval or self.tick_ns)
        if rq.need_resched:
            self.schedule(rq)
        self._ensure_tick(rq)

    def _nohz_idle_balance(self, busy: Rq) -> None:
        """The kicked idle CPU's _nohz_idle_balance(): it balances on behalf
        of the idle ones whose balance interval has expired."""
        now = self.engine._now
        for cpu in self.nohz_span[busy.cpu]:
            if busy.nr_running < 2:
                break
            if not self.idle_cpu(cpu):
                continue
            rq = self.rqs[cpu]
            if now < rq.next_balance or (self.rcu_idle_tick and rq.rcu_cb_until > now):
                # not due, or its tick runs: it is not in nohz.idle_cpus_mask
                continue
            self.policy.balance(rq, CPU_IDLE)
            rq.next_balance = now + self.policy.balance_interval_ns(rq, CPU_IDLE)
            if rq.need_resched:
                self.schedule(rq)

    # ------------------------------------------------------------------
    def sync(self) -> None:
        """Bring every CPU's accounting up to now (for sampling)."""
        now = self.engine._now
        for rq in self.rqs:
            if rq.curr is not None:
                self._charge(rq, now)
                self._update_curr(rq, rq.curr)
