# Compiled declarations of policies/kernel/cfs.py (docs/performance.md,
# "Compiled core"): attribute and argument types only; the logic is the .py.
cimport cython
from sim.sched_class cimport KernelScheduler
from sim.rq cimport SchedEntity, CfsRq, Rq, TaskGroup
from sim.task cimport Task
from sim.engine cimport Calendar
from sim.heap cimport Heap, Node, NodeStack
from sim.machine cimport Machine

# constants the hot paths use, as C integers rather than module globals
cdef long long NICE_0_LOAD, MIN_SHARES, BUSY_FACTOR, IMBALANCE_PCT, SCHED_NR_MIGRATE
cdef long long LOAD_AVG_PERIOD_NS, MAX_LOAD_BALANCE_INTERVAL_MS_PER_CPU
cdef long CPU_IDLE, CPU_NEWLY_IDLE, CPU_NOT_IDLE, DEQUEUE_SLEEP, DEQUEUE_DELAYED
cdef long DEQUEUE_SPECIAL, ENQUEUE_INITIAL
cdef long ENQUEUE_MIGRATED, ENQUEUE_WAKEUP, WF_FORK

cpdef set_next_buddy(SchedEntity se)
cpdef set_last_buddy(SchedEntity se)
cpdef tuple find_matching_se(SchedEntity se, SchedEntity pse)

cdef class RbNode(Node):
    cdef public SchedEntity se

@cython.locals(node=RbNode)
cpdef RbNode rb_node(long long vruntime, long long seq, SchedEntity se, NodeStack spare)

cdef class CFS(KernelScheduler):
    cdef public long long factor
    cdef public long long sched_latency
    cdef public long long min_granularity
    cdef public long long wakeup_granularity
    cdef public long long sched_nr_latency
    cdef public bint gentle_fair_sleepers
    cdef public bint start_debit
    cdef public bint wakeup_preemption
    cdef public bint hrtick
    cdef public long cache_nice_tries
    cdef public long long _rb_seq
    cdef NodeStack _spare_nodes
    cdef public Calendar clock
    cdef public list blocked_cfs_rqs
    cdef public long long next_blocked
    cdef public object bandwidth
    cdef public list domains
    cdef public bint balance_backoff
    cdef public bint pelt_propagate
    cdef public bint migrate_task_half
    cdef public bint find_idlest_group
    cdef public list sd_balance_interval
    cdef public long long max_lb_interval_ms
    cdef public long lb_result

    cpdef long long _next_seq(self)
    @cython.locals(seq=cython.longlong)
    cpdef _enqueue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    cpdef _dequeue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(se=SchedEntity, node=RbNode, timeline=Heap)
    cpdef _pick_first_entity(self, CfsRq cfs_rq)
    @cython.locals(w=cython.longlong)
    cpdef long long calc_delta_fair(self, long long delta, SchedEntity se)
    cpdef long long _sched_period(self, long nr_running)
    @cython.locals(slice_=cython.longlong, load=cython.longlong, nr_running=cython.long)
    cpdef long long sched_slice(self, CfsRq cfs_rq, SchedEntity se)
    cpdef long long sched_vslice(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(vruntime=cython.longlong, curr=SchedEntity, leftmost=SchedEntity)
    cpdef update_min_vruntime(self, CfsRq cfs_rq)
    @cython.locals(now=cython.longlong, delta_exec=cython.longlong, w=cython.longlong,
                   curr=SchedEntity, task=Task)
    cpdef _update_curr(self, CfsRq cfs_rq)
    @cython.locals(se=SchedEntity, curr=Task)
    cpdef update_curr(self, Rq rq)
    @cython.locals(now=cython.longlong)
    cpdef update_load_avg(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(tg=TaskGroup, load=cython.double, tg_weight=cython.double,
                   shares=cython.double, tg_shares=cython.longlong)
    cpdef long long calc_group_shares(self, CfsRq cfs_rq)
    @cython.locals(now=cython.longlong)
    cpdef reweight_entity(self, CfsRq cfs_rq, SchedEntity se, long long weight)
    @cython.locals(gcfs_rq=CfsRq, shares=cython.longlong)
    cpdef update_cfs_group(self, SchedEntity se)
    @cython.locals(vruntime=cython.longlong, thresh=cython.longlong)
    cpdef place_entity(self, CfsRq cfs_rq, SchedEntity se, bint initial)
    @cython.locals(renorm=bint, curr=bint)
    cpdef enqueue_entity(self, CfsRq cfs_rq, SchedEntity se, long flags)
    cpdef bint dequeue_entity(self, CfsRq cfs_rq, SchedEntity se, long flags)
    cpdef set_next_entity(self, CfsRq cfs_rq, SchedEntity se)
    cpdef put_prev_entity(self, CfsRq cfs_rq, SchedEntity prev)
    @cython.locals(s=SchedEntity)
    cpdef clear_buddies(self, CfsRq cfs_rq, SchedEntity se)
    cpdef entity_before(self, SchedEntity a, SchedEntity b)
    cpdef wakeup_preempt_buddy(self, SchedEntity buddy, SchedEntity left)
    @cython.locals(left=SchedEntity, se=SchedEntity, last=SchedEntity, nxt=SchedEntity)
    cpdef pick_next_entity(self, CfsRq cfs_rq, SchedEntity curr)
    @cython.locals(tg=TaskGroup, se=SchedEntity)
    @cython.locals(se=SchedEntity, cfs_rq=CfsRq, now=cython.longlong, old_clock=cython.longlong)
    cpdef set_task_rq(self, Task p, long cpu)
    @cython.locals(cfs_rq=CfsRq, now=cython.longlong)
    cpdef _move_entity_load_avg(self, SchedEntity se, long sign)
    @cython.locals(now=cython.longlong, se=SchedEntity, cfs_rq=CfsRq, old=cython.double,
                   new=cython.double)
    cpdef propagate_entity_load_avg(self, CfsRq gcfs_rq, double runnable)
    @cython.locals(now=cython.longlong, blocked=dict, cfs_rq=CfsRq)
    cpdef update_blocked_averages(self, long cpu)
    cpdef attach_entity_load_avg(self, SchedEntity se)
    cpdef remove_entity_load_avg(self, SchedEntity se)
    @cython.locals(se=SchedEntity)
    cpdef migrate_task_rq(self, Task p, long new_cpu)
    cpdef task_dead(self, Task p)
    @cython.locals(se=SchedEntity)
    cpdef switched_from_fair(self, Task p)
    @cython.locals(se=SchedEntity)
    cpdef switched_to_fair(self, Task p)
    @cython.locals(se=SchedEntity)
    cpdef set_next_task(self, Rq rq, Task p)
    cpdef task_fork_fair(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(se=SchedEntity, cfs_rq=CfsRq, initial=cython.long)
    cpdef enqueue_task(self, Rq rq, Task p, long flags)
    cpdef dequeue_task(self, Rq rq, Task p, long flags)
    @cython.locals(cfs_rq=CfsRq, h_nr=cython.long, task_se=SchedEntity)
    cpdef dequeue_entities(self, Rq rq, SchedEntity se, long flags)
    @cython.locals(se=SchedEntity, cfs_rq=CfsRq)
    cpdef _pick_next_task_simple(self, Rq rq)
    @cython.locals(se=SchedEntity)
    cpdef put_prev_task(self, Rq rq, Task prev)
    @cython.locals(se=SchedEntity, pse=SchedEntity, cfs_rq=CfsRq, curr=SchedEntity, p=Task,
                   se_depth=cython.long, pse_depth=cython.long)
    cpdef pick_next_task(self, Rq rq, Task prev)
    @cython.locals(ideal_runtime=cython.longlong, delta_exec=cython.longlong,
                   delta=cython.longlong, se=SchedEntity)
    cpdef check_preempt_tick(self, CfsRq cfs_rq, SchedEntity curr)
    cpdef entity_tick(self, CfsRq cfs_rq, SchedEntity curr)
    @cython.locals(se=SchedEntity)
    cpdef task_tick(self, Rq rq, Task curr)
    @cython.locals(now=cython.longlong, cpu=cython.long)
    cpdef nohz_stats_kick(self)
    @cython.locals(curr=Task, se=SchedEntity)
    cpdef hrtick_delay(self, Rq rq)
    @cython.locals(vdiff=cython.longlong)
    cpdef long wakeup_preempt_entity(self, SchedEntity curr, SchedEntity se)
    @cython.locals(curr=Task, se=SchedEntity, pse=SchedEntity, scale=bint)
    cpdef check_preempt_wakeup(self, Rq rq, Task p)
    cpdef select_task_rq(self, Task p, long prev_cpu, long wake_flags)
    @cython.locals(m=Machine)
    cpdef select_idle_sibling(self, Task p, long target)
    @cython.locals(m=Machine, cpu=cython.long, rqs=list)
    cpdef _first_idle(self, Task p, list cpus, fallback)
    @cython.locals(m=Machine, now=cython.longlong, cfs=CfsRq, rqs=list, best=cython.long,
                   best_nr=cython.long, best_load=cython.double, cpu=cython.long, order=list)
    cpdef find_idlest_cpu(self, Task p, long prev_cpu)
    @cython.locals(m=Machine, rq=Rq, now=cython.longlong, rqs=list, idlest=cython.long,
                   idlest_type=cython.long, idlest_load=cython.double, group_type=cython.long,
                   local_type=cython.long, local_load=cython.double, cpu=cython.long)
    cpdef long find_dst_group_cpu(self, Task p, long this_cpu)
    @cython.locals(now=cython.longlong)
    cpdef double cfs_rq_h_load(self, CfsRq cfs_rq)
    @cython.locals(se=SchedEntity, parent=CfsRq, h_load=cython.double)
    cpdef double _compute_h_load(self, CfsRq cfs_rq, long long now) except? -1
    @cython.locals(se=SchedEntity, cfs_rq=CfsRq, now=cython.longlong)
    cpdef double task_h_load(self, Task p)
    cpdef bint task_hot(self, Task p, long long now)
    @cython.locals(tg_cfs_rq=list)
    cpdef bint lb_pinned(self, Task p, long dst_cpu, Rq src_rq)
    cpdef bint can_detach(self, Task p, Rq src_rq, long long now)
    cpdef bint can_migrate_task(self, Task p, long dst_cpu, Rq src_rq, long long now)
    @cython.locals(m=Machine, rqs=list, now=cython.longlong, rq=Rq, busiest=Rq, cpu=cython.long,
                   busiest_nr=cython.long, busiest_load=cython.double, nr=cython.long,
                   load=cython.double, greater=bint)
    cpdef find_busiest_queue(self, span, Rq dst_rq, long idle, skip)
    @cython.locals(src_rq=Rq, moved=cython.long, m=Machine)
    cpdef load_balance(self, Rq dst_rq, span, long idle)
    @cython.locals(m=Machine, now=cython.longlong, moved=cython.long, dst_cpu=cython.long,
                   p=Task, busiest_load=cython.double, local_load=cython.double,
                   load=cython.double, all_pinned=cython.bint, nr_tasks=cython.long)
    cpdef long _detach_tasks(self, Rq src_rq, Rq dst_rq, long idle)
    cpdef balance(self, Rq rq, long idle)
    cpdef balance_interval_ns(self, Rq rq, long idle)
    cpdef tune_balance_interval(self, long cpu, long level, long long min_interval_ms)
    cpdef newidle_allowed(self, Rq rq)
