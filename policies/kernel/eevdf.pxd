# Compiled declarations of policies/kernel/eevdf.py (docs/performance.md,
# "Compiled core"): attribute and argument types only; the logic is the .py.
cimport cython
from policies.kernel.cfs cimport CFS, find_matching_se
from sim.rq cimport SchedEntity, CfsRq, Rq
from sim.task cimport Task
from sim.engine cimport RngStream

# constants the hot paths use, as C integers rather than module globals
cdef long CPU_NEWLY_IDLE, DEQUEUE_SLEEP, DEQUEUE_DELAYED, DEQUEUE_SPECIAL, ENQUEUE_DELAYED, ENQUEUE_INITIAL
cdef long ENQUEUE_MIGRATED
cdef long long NO_SLICE

@cython.locals(q=cython.longlong)
cpdef long long div_s64(long long a, long long b)

@cython.locals(lo=Py_ssize_t, hi=Py_ssize_t, mid=Py_ssize_t, entry=tuple, v=cython.longlong,
               s=cython.longlong)
cpdef Py_ssize_t timeline_index(list tl, long long vruntime, long long seq)

cdef class Timeline(list):
    cdef public long long avg_vruntime
    cdef public long long avg_load

cdef class EEVDF(CFS):
    cdef public long long sysctl_sched_base_slice
    cdef public long long normalized_base_slice
    cdef public bint kernel_618
    cdef public bint place_lag
    cdef public bint place_deadline_initial
    cdef public bint place_rel_deadline
    cdef public bint run_to_parity
    cdef public bint preempt_short
    cdef public bint custom_slices
    cdef public bint delay_dequeue
    cdef public bint delay_zero
    cdef public bint ni_random
    cdef public list newidle_stats
    cdef public RngStream newidle_rng
    cdef public list nr_delayed
    cdef public long long tick_nsec

    cpdef init_task_group(self, tg)
    @cython.locals(tl=Timeline, w=cython.longlong)
    cpdef avg_vruntime_add(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(tl=Timeline, w=cython.longlong)
    cpdef avg_vruntime_sub(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(tl=Timeline, avg=cython.longlong, load=cython.longlong, curr=SchedEntity,
                   w=cython.longlong)
    cpdef (long long, long long) _avg_sums(self, CfsRq cfs_rq)
    @cython.locals(avg=cython.longlong, load=cython.longlong)
    cpdef long long avg_vruntime(self, CfsRq cfs_rq)
    @cython.locals(avg=cython.longlong, load=cython.longlong)
    cpdef bint entity_eligible(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(lag=cython.longlong, limit=cython.longlong)
    cpdef update_entity_lag(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(curr=SchedEntity, vruntime=cython.longlong, tl=Timeline, left=cython.longlong,
                   delta=cython.longlong)
    cpdef update_min_vruntime(self, CfsRq cfs_rq)
    @cython.locals(seq=cython.longlong, tl=Timeline)
    cpdef _enqueue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(tl=Timeline, i=Py_ssize_t)
    cpdef _dequeue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    cpdef pick_eevdf(self, CfsRq cfs_rq)
    @cython.locals(tl=Timeline, v0=cython.longlong, avg=cython.longlong, load=cython.longlong,
                   curr=SchedEntity, best=SchedEntity, v=cython.longlong, se=SchedEntity,
                   i=Py_ssize_t, entry=tuple)
    cpdef _pick_eevdf(self, CfsRq cfs_rq, bint protect)
    cpdef pick_next_entity(self, CfsRq cfs_rq, SchedEntity curr)
    @cython.locals(task=Task, low=cython.longlong, high=cython.longlong, slice_=cython.longlong)
    cpdef long long slice_of(self, SchedEntity se)
    @cython.locals(curr=SchedEntity, tl=Timeline, min_slice=cython.longlong, se=SchedEntity)
    cpdef long long cfs_rq_min_slice(self, CfsRq cfs_rq)
    cpdef bint update_deadline(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(curr=SchedEntity, resched=bint)
    cpdef _update_curr(self, CfsRq cfs_rq)
    @cython.locals(slice_=cython.longlong, vprot=cython.longlong)
    cpdef set_protect_slice(self, CfsRq cfs_rq, SchedEntity se)
    cpdef update_protect_slice(self, CfsRq cfs_rq, SchedEntity se)
    cpdef bint protect_slice(self, SchedEntity se)
    cpdef cancel_protect_slice(self, SchedEntity se)
    @cython.locals(curr=Task, se=SchedEntity)
    cpdef update_curr(self, Rq rq)
    @cython.locals(old_weight=cython.longlong, deadline=cython.longlong)
    cpdef reweight_entity(self, CfsRq cfs_rq, SchedEntity se, long long weight)
    @cython.locals(curr=bint, on_rq=bint, old_weight=cython.longlong)
    cpdef reweight_entity_lag(self, CfsRq cfs_rq, SchedEntity se, long long weight)
    @cython.locals(vruntime=cython.longlong, lag=cython.longlong, vslice=cython.longlong,
                   curr=SchedEntity, load=cython.longlong)
    cpdef place_entity(self, CfsRq cfs_rq, SchedEntity se, bint initial)
    cpdef task_fork_fair(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(curr=bint)
    cpdef enqueue_entity(self, CfsRq cfs_rq, SchedEntity se, long flags)
    cpdef bint dequeue_entity(self, CfsRq cfs_rq, SchedEntity se, long flags)
    cpdef clear_delayed(self, SchedEntity se)
    @cython.locals(cfs_rq=CfsRq)
    cpdef requeue_delayed_entity(self, SchedEntity se)
    @cython.locals(se=SchedEntity)
    cpdef enqueue_task(self, Rq rq, Task p, long flags)
    cpdef task_dead(self, Task p)
    @cython.locals(cfs_rq=CfsRq, curr=SchedEntity, se=SchedEntity)
    cpdef pick_delayed(self, Rq rq)
    cpdef _pick_next_task_simple(self, Rq rq)
    cpdef set_next_entity(self, CfsRq cfs_rq, SchedEntity se)
    cpdef migrate_task_rq(self, Task p, long new_cpu)
    cpdef switched_from_fair(self, Task p)
    cpdef switched_to_fair(self, Task p)
    @cython.locals(resched=bint)
    cpdef pick_next_task(self, Rq rq, Task prev)
    @cython.locals(resched=bint)
    cpdef put_prev_task(self, Rq rq, Task prev)
    cpdef entity_tick(self, CfsRq cfs_rq, SchedEntity curr)
    @cython.locals(curr=Task, se=SchedEntity)
    cpdef hrtick_delay(self, Rq rq)
    @cython.locals(curr=Task, se=SchedEntity, v=cython.longlong, left=cython.longlong,
                   w=cython.longlong)
    cpdef cputime_poll_delay(self, Rq rq)
    cpdef cputime_poll(self, Rq rq)
    @cython.locals(curr=Task, se=SchedEntity, pse=SchedEntity, cfs_rq=CfsRq, preempt_short=bint)
    cpdef check_preempt_wakeup(self, Rq rq, Task p)
    @cython.locals(levels=list, stats=list, i=Py_ssize_t, weight=cython.long, moved=cython.long)
    cpdef long newidle_balance(self, Rq rq)

@cython.locals(success=cython.long)
cpdef update_newidle_stats(list stats, long success)
