# Compiled declarations of sim/sched_class.py (see docs/performance.md,
# "Compiled core").  The interface is cpdef: the machine calls it through a
# C vtable, and a Python subclass still overrides any method.
from sim.rq cimport Rq
from sim.task cimport Task

cdef class KernelScheduler:
    cdef public object cfg
    cdef public object machine
    cdef public long long migration_cost
    cdef public dict stats

    cpdef init_task_group(self, tg)
    cpdef enqueue_task(self, Rq rq, Task p, long flags)
    cpdef dequeue_task(self, Rq rq, Task p, long flags)
    cpdef pick_next_task(self, Rq rq, Task prev)
    cpdef put_prev_task(self, Rq rq, Task prev)
    cpdef task_tick(self, Rq rq, Task curr)
    cpdef check_preempt_wakeup(self, Rq rq, Task p)
    cpdef select_task_rq(self, Task p, long prev_cpu, long wake_flags)
    cpdef set_task_rq(self, Task p, long cpu)
    cpdef migrate_task_rq(self, Task p, long new_cpu)
    cpdef task_dead(self, Task p)
    cpdef set_next_task(self, Rq rq, Task p)
    cpdef switched_from_fair(self, Task p)
    cpdef switched_to_fair(self, Task p)
    cpdef balance(self, Rq rq, long idle)
    cpdef balance_interval_ns(self, Rq rq, long idle)
    cpdef newidle_allowed(self, Rq rq)
    cpdef long newidle_balance(self, Rq rq)
    cpdef update_curr(self, Rq rq)
    cpdef hrtick_delay(self, Rq rq)
    cpdef cputime_poll_delay(self, Rq rq)
    cpdef cputime_poll(self, Rq rq)
