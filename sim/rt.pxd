# Compiled declarations of sim/rt.py (docs/performance.md, "Compiled core"):
# attribute and argument types only; the logic is the .py.  The machine
# calls the class through its C vtable (machine.pxd types Machine.rt).
cimport cython
from sim.engine cimport Calendar
from sim.rq cimport Rq
from sim.task cimport Task

cdef long WF_FORK, WF_TTWU
cdef long long RUNTIME_INF
cdef object SCHED_RR

cdef class RtRq:
    cdef public dict queue
    cdef public long rt_nr_running
    cdef public long highest
    cdef public long long rt_time
    cdef public bint rt_throttled
    cdef public long long exec_start

    cpdef long highest_prio(self)

cdef class RtClass:
    cdef public object machine
    cdef public Calendar clock
    cdef public long rr_timeslice
    cdef public long long rt_period
    cdef public long long rt_runtime
    cdef public list rt_rqs
    cdef public list rqs
    cdef public list cpus_by_distance
    cdef public bint _period_timer_armed
    cdef public long long nr_pushes
    cdef public long long nr_pulls

    @cython.locals(rt_rq=RtRq, prio=cython.long, q=object)
    cpdef enqueue_task(self, Rq rq, Task p, long flags)
    @cython.locals(rt_rq=RtRq, prio=cython.long, q=object)
    cpdef dequeue_task(self, Rq rq, Task p, long flags)
    @cython.locals(rt_rq=RtRq)
    cpdef bint has_runnable(self, Rq rq)
    @cython.locals(rt_rq=RtRq, p=Task)
    cpdef pick_next_task(self, Rq rq)
    cpdef put_prev_task(self, Rq rq, Task prev)
    @cython.locals(curr=Task, rt_rq=RtRq, now=cython.longlong, delta=cython.longlong)
    cpdef update_curr(self, Rq rq)
    @cython.locals(rq=Rq, rt_rq=RtRq)
    cpdef _sched_rt_period_timer(self)
    cpdef task_tick(self, Rq rq, Task p)
    @cython.locals(curr=Task)
    cpdef check_preempt_curr(self, Rq rq, Task p)
    cpdef long cpupri(self, long cpu)
    @cython.locals(best=cython.long, best_pri=cython.long, c=cython.long, pri=cython.long)
    cpdef find_lowest_rq(self, Task p, long cpu)
    @cython.locals(curr=Task)
    cpdef long select_task_rq(self, Task p, long prev_cpu, long wake_flags)
    @cython.locals(rt_rq=RtRq, p=Task)
    cpdef _pushable(self, Rq rq)
    @cython.locals(p=Task)
    cpdef push_rt_tasks(self, Rq rq)
    @cython.locals(curr=Task)
    cpdef task_woken(self, Rq rq, Task p)
    cpdef bint need_pull(self, Rq rq, Task prev)
    @cython.locals(moved=cython.long, cpu=cython.long, src_rt_rq=RtRq, src=Rq, p=Task)
    cpdef long pull_rt_task(self, Rq this_rq)
