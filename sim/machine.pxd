# Compiled declarations of sim/machine.py (docs/performance.md, "Compiled
# core"): attribute and argument types only; the logic is the .py.
cimport cython
from sim.rq cimport SchedEntity, CfsRq, Rq, TaskGroup
from sim.task cimport Task, Request
from sim.sched_class cimport KernelScheduler
from sim.engine cimport Calendar, RngStream, _Call
from sim.heap cimport NodeStack
from sim.costmodel cimport CostModel
from sim.rt cimport RtClass

cdef class RqTimer

# constants the hot paths use, as C integers rather than module globals
cdef long MAX_RT_PRIO, CPU_IDLE, CPU_NOT_IDLE, DEQUEUE_SLEEP, DEQUEUE_DELAYED
cdef long ENQUEUE_DELAYED, ENQUEUE_INITIAL, ENQUEUE_MIGRATED, ENQUEUE_WAKEUP, WF_FORK, WF_TTWU

@cython.locals(levels=cython.long)
cpdef long levels_walked(SchedEntity pse, SchedEntity se)
@cython.locals(total=cython.double)
cpdef double reinsert_log2(SchedEntity pse, SchedEntity se)

cdef class Machine:
    cdef public Calendar engine
    cdef public object topology
    cdef public CostModel cost
    cdef public list rqs
    cdef public list cpus_by_distance
    cdef public long long tick_ns
    cdef public bint smt
    cdef public list siblings
    cdef public list nohz_span
    cdef public TaskGroup root_tg
    cdef public dict groups
    cdef public KernelScheduler policy
    cdef public RtClass rt
    cdef public list rt_rqs
    cdef public tuple default_task_policy
    cdef public dict group_task_policy
    cdef public long nr_idle_cpus
    cdef public list llc_wrap
    cdef public bint rd_overloaded
    cdef public bint nohz_kick_ipi
    cdef public bint affinity_requeue
    cdef public bint rcu_idle_tick
    cdef public long long nr_migrations
    cdef public long long nr_switch_outs
    cdef public long long touched_bytes
    cdef public long long run_delay_ns
    cdef public long long pcount
    cdef public object _pids
    cdef public long long tasks_alive
    cdef public bint cfs_bandwidth_used
    cdef public list cpu_max_log
    cdef public object memory
    cdef public object host_cfg
    cdef public object tracer
    cdef public bint cputime_poll
    cdef public object on_exit
    cdef public RngStream idle_exit_rng
    cdef public RngStream timer_irq_rng
    cdef NodeStack _spare_timers

    cpdef sched_class(self, Task p)
    cpdef _update_curr(self, Rq rq, Task curr)
    cpdef long _select_task_rq(self, Task p, long prev_cpu, long wake_flags)
    cpdef resched_curr(self, Rq rq)
    cpdef bint idle_cpu(self, long cpu)
    @cython.locals(rqs=list)
    cpdef bint idle_core(self, long cpu)
    @cython.locals(p=Task)
    cpdef Task new_task(self, name, TaskGroup tg, long nice, long long burst_ns, long long ws_bytes,
                        owner, request=*)
    cpdef wake_up_new_task(self, Task p, long hint_cpu)
    cpdef wake_up(self, Task p)
    cpdef _finish_delayed(self, Task p)
    cpdef _set_task_cpu(self, Task p, long cpu)
    @cython.locals(was_idle=bint, curr=Task)
    cpdef _enqueue(self, Rq rq, Task p, long flags)
    cpdef _activate(self, Rq rq, Task p, long flags)
    @cython.locals(sample=cython.longlong)
    cpdef _leave_idle(self, Rq rq, long long now)
    cpdef move_queued_task(self, Task p, Rq src, Rq dst)
    @cython.locals(now=cython.longlong, c=cython.longlong, start=cython.longlong,
                   next_balance=cython.longlong,
                   levels=cython.long, reinserted=cython.double, cost=CostModel, prev=Task,
                   exit_ns=cython.longlong, away=cython.longlong,
                   nxt=Task, migrated=bint, req=Request)
    cpdef schedule(self, Rq rq)
    @cython.locals(fair_prev=Task)
    cpdef _pick_next_task(self, Rq rq, Task prev)
    cpdef _dequeue(self, Rq rq, Task p, long flags)
    @cython.locals(ran=cython.longlong, curr=Task)
    @cython.locals(ran=cython.longlong, curr=Task)
    cpdef _charge(self, Rq rq, long long now)
    @cython.locals(remaining=cython.longlong, curr=Task)
    cpdef _arm_completion(self, Rq rq)
    @cython.locals(timer=RqTimer)
    cdef _push_timer(self, long long at, long kind, Rq rq, long long gen)
    @cython.locals(busy=cython.long, smt=cython.double, speed=cython.double, other=Rq, c=cython.long)
    cpdef _smt_update(self, Rq rq, long long now)
    @cython.locals(busy=cython.long)
    cpdef double _smt_speed(self, Rq rq)
    cpdef long _fair_depth(self, Task p)
    cpdef _deferred_schedule(self, Rq rq)
    @cython.locals(r=Rq)
    cpdef bint _overloaded(self)
    @cython.locals(p=Task, now=cython.longlong)
    cpdef _on_burst_end(self, Rq rq, long long gen)
    @cython.locals(tick=cython.longlong, boundary=cython.longlong)
    cpdef long long _next_tick_time(self, Rq rq, long long now) except? -2
    @cython.locals(now=cython.longlong, at=cython.longlong)
    cpdef _ensure_tick(self, Rq rq)
    @cython.locals(curr=Task)
    cpdef _arm_hrtick(self, Rq rq)
    cpdef _on_hrtick(self, Rq rq, long long hrtick_gen)
    cpdef _on_cputime_poll(self, Rq rq, long long hrtick_gen)
    @cython.locals(curr=Task)
    cpdef _arm_runtime_expiry(self, Rq rq)
    cpdef _on_runtime_expiry(self, Rq rq, long long gen)
    @cython.locals(now=cython.longlong, curr=Task)
    cpdef _on_tick(self, Rq rq, long long tick_gen)
    @cython.locals(rq=Rq, cpu=cython.long, now=cython.longlong)
    cpdef _nohz_idle_balance(self, Rq busy)
    @cython.locals(rq=Rq, left=cython.longlong)
    cpdef long long replace_burst(self, Task p, long long burst_ns)
    cpdef timer_sleep(self, Task p, long long expiry, fn)
    @cython.locals(irq=cython.longlong, now=cython.longlong, cost=CostModel)
    cpdef _hrtimer_interrupt(self, Task p, fn)

cdef class RqTimer(_Call):
    cdef Machine machine
    cdef long kind
    cdef Rq rq
    cdef long long gen

    @cython.locals(m=Machine, kind=cython.long, rq=Rq, gen=cython.longlong)
    cpdef int fire(self, Calendar calendar) except -1
