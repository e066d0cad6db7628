# Compiled declarations of policies/kernel/lags.py (docs/performance.md,
# "Compiled core"): attribute and argument types only; the logic is the .py.
cimport cython
from policies.kernel.cfs cimport CFS, find_matching_se, set_next_buddy
from sim.rq cimport SchedEntity, CfsRq, Rq, TaskGroup
from sim.task cimport Task
from sim.machine cimport Machine

# constants the hot paths use, as C numbers rather than module globals
cdef long long NICE_0_LOAD
cdef long CPU_NOT_IDLE, WF_FORK
cdef double INF

@cython.locals(h=cython.long, curr=Task)
cpdef bint waits_on(TaskGroup tg, Rq src)
@cython.locals(src=Rq)
cpdef bint waits_in(TaskGroup tg, list sources)

@cython.final
cdef class LoadCredit:
    cdef public TaskGroup tg
    cdef public double ema
    cdef public double W
    cdef public double D
    cdef public long long T
    cdef public double key
    cdef public bint aware
    cdef public tuple chain

@cython.final
cdef class CreditQueue:
    cdef public list ses
    cdef public list lcs
    cdef public SchedEntity first
    cdef public long long first_at
    cdef public long long contrib_w
    cdef public double contrib_a
    cdef public long long contrib_t
    cdef public bint contrib_read

    @cython.locals(i=Py_ssize_t, ses=list)
    cpdef Py_ssize_t index(self, SchedEntity se)
    @cython.locals(i=Py_ssize_t)
    cpdef put(self, SchedEntity se, LoadCredit lc)
    @cython.locals(i=Py_ssize_t)
    cpdef bint remove(self, SchedEntity se)

cdef class LAGS(CFS):
    cdef public bint leaves
    cdef public list globs
    cdef public long window_ticks
    cdef public str ema_form
    cdef public str load_signal
    cdef public bint tick_preemption
    cdef public bint group_shares_recalc
    cdef public str tie_break
    cdef public double tie_margin
    cdef public str mixed_order
    cdef public bint lags_ordering
    cdef public bint lags_wakeup_preemption
    cdef public bint lags_placement
    cdef public bint lags_balancing
    cdef public double _lambda
    cdef public double _beta
    cdef public long long _fold_dt
    cdef public double _fold_y
    cdef public double _fold_z
    cdef public bint _runnable
    cdef public bint _fifo
    cdef public bint _aware_first
    cdef public dict _credit_of
    cdef public list _queues
    cdef public list _curr_credit
    cdef public list _running
    cdef public list _order
    cdef public long long _order_at

    @cython.locals(lc=LoadCredit, order=list)
    cpdef init_task_group(self, tg)
    @cython.locals(g=TaskGroup, found=list, chain=tuple)
    cpdef tuple _chain(self, TaskGroup tg)
    @cython.locals(q=CfsRq)
    cpdef bint _aware_se(self, SchedEntity se)
    @cython.locals(cq=CreditQueue)
    cpdef CreditQueue _queue_of(self, CfsRq cfs_rq)
    @cython.locals(dt=cython.longlong, lam=cython.double, beta=cython.double, y=cython.double,
                   z=cython.double, W=cython.double, D=cython.double, c=cython.double)
    cpdef _fold(self, LoadCredit lc, long long now)
    cpdef double load_credit(self, TaskGroup tg)
    cpdef double _credit(self, LoadCredit lc, long long now) except? -1
    @cython.locals(lc=LoadCredit, cq=CreditQueue)
    cpdef set_load_credit(self, TaskGroup tg, double value)
    @cython.locals(lc=LoadCredit)
    cpdef _fold_chain(self, tuple chain, long long now)
    @cython.locals(cfs_rq=CfsRq, lam=cython.double, w=cython.longlong, dt=cython.longlong,
                   a=cython.double, w0=cython.longlong, a0=cython.double, t0=cython.longlong,
                   cq=CreditQueue)
    cpdef _resync(self, LoadCredit lc, long cpu, long long now)
    @cython.locals(lc=LoadCredit)
    cpdef _resync_chain(self, tuple chain, long cpu, long long now)
    @cython.locals(old=Task, now=cython.longlong, lc=LoadCredit)
    cpdef _set_running(self, long cpu, Task p)
    @cython.locals(now=cython.longlong, la=cython.double, lb=cython.double)
    cpdef long credit_cmp(self, SchedEntity a, SchedEntity b)
    @cython.locals(chain=tuple, now=cython.longlong)
    cpdef enqueue_task(self, Rq rq, Task p, long flags)
    @cython.locals(chain=tuple, now=cython.longlong)
    cpdef dequeue_task(self, Rq rq, Task p, long flags)
    @cython.locals(chain=tuple, now=cython.longlong, old_cpu=cython.long)
    cpdef migrate_task_rq(self, Task p, long new_cpu)
    @cython.locals(chain=tuple)
    cpdef task_dead(self, Task p)
    @cython.locals(chain=tuple)
    cpdef switched_from_fair(self, Task p)
    @cython.locals(chain=tuple)
    cpdef switched_to_fair(self, Task p)
    cpdef tuple _load_change_begins(self, Task p)
    cpdef _load_change_ends(self, tuple chain, Task p)
    cpdef set_next_task(self, Rq rq, Task p)
    @cython.locals(chain=tuple, now=cython.longlong)
    cpdef task_tick(self, Rq rq, Task curr)
    @cython.locals(p=Task)
    cpdef pick_next_task(self, Rq rq, Task prev)
    cpdef put_prev_task(self, Rq rq, Task prev)
    @cython.locals(cpu=cython.long, chain=tuple)
    cpdef _switched(self, Rq rq, Task p)
    cpdef update_cfs_group(self, SchedEntity se)
    @cython.locals(aa=bint, ab=bint, c=cython.long)
    cpdef entity_before(self, SchedEntity a, SchedEntity b)
    @cython.locals(seq=cython.longlong, cq=CreditQueue)
    cpdef _enqueue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(cq=CreditQueue)
    cpdef _dequeue_timeline(self, CfsRq cfs_rq, SchedEntity se)
    @cython.locals(left=SchedEntity, first=SchedEntity, cq=CreditQueue)
    cpdef _pick_first_entity(self, CfsRq cfs_rq)
    @cython.locals(ses=list, lcs=list, n=Py_ssize_t, i=Py_ssize_t, now=cython.longlong,
                   low=cython.double, se=SchedEntity, best=SchedEntity, lc=LoadCredit)
    cpdef SchedEntity _credit_first(self, CreditQueue cq)
    @cython.locals(c=cython.long)
    cpdef wakeup_preempt_buddy(self, SchedEntity buddy, SchedEntity left)
    @cython.locals(left=SchedEntity, aware_curr=bint, aware_left=bint, c=cython.long)
    cpdef check_preempt_tick(self, CfsRq cfs_rq, SchedEntity curr)
    cpdef hrtick_delay(self, Rq rq)
    @cython.locals(curr=Task, se=SchedEntity, pse=SchedEntity, aware_se=bint, aware_pse=bint,
                   c=cython.long)
    cpdef check_preempt_wakeup(self, Rq rq, Task p)
    @cython.locals(entry=tuple, m=Machine, rq=Rq)
    cpdef _cached_credit(self, long cpu)
    cpdef bint _higher_load(self, long cpu, double credit)
    @cython.locals(chain=tuple)
    cpdef bint cpu_has_higher_load_task(self, long cpu, Task p)
    @cython.locals(cpu=cython.long, chain=tuple, credit=cython.double, m=Machine)
    cpdef select_task_rq(self, Task p, long prev_cpu, long wake_flags)
    @cython.locals(m=Machine, c=cython.long)
    cpdef _first_fit(self, Task p, list cpus, double credit)
    @cython.locals(moved=cython.long)
    cpdef load_balance(self, Rq dst_rq, span, long idle)
    @cython.locals(dst_idle=bint, now=cython.longlong, order=list, n=Py_ssize_t, i=Py_ssize_t,
                   j=Py_ssize_t, k=Py_ssize_t, credit=cython.double, ceiling=cython.double,
                   rqs=list, cpu=cython.long, src=Rq, sources=list, lc=LoadCredit)
    cpdef long _lc_pull(self, Rq dst_rq, span, long idle)
    @cython.locals(order=list, n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, lc=LoadCredit,
                   key=cython.double)
    cpdef list _credit_order(self, long long now)
    @cython.locals(m=Machine, dst_cpu=cython.long, src=Rq, curr=Task,
                   waiting=bint, lc=LoadCredit, p=Task, chain=tuple, tgs=set, se=SchedEntity,
                   one=TaskGroup)
    cpdef bint _pull_first(self, Rq dst_rq, list sources, set run, long long now)
