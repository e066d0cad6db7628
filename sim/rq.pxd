# Compiled declarations of sim/rq.py (docs/performance.md, "Compiled core").

cimport cython

# the PELT decay rate, a C double in the hot paths
cdef double _DECAY_PER_NS

cdef class CfsTasks

cdef class TaskGroup:
    cdef public object name
    cdef public TaskGroup parent
    cdef public long long shares
    cdef public list cfs_rq
    cdef public list se
    cdef public double load_avg
    cdef public long depth
    cdef public object cpus_allowed
    cdef public long long usage_ns
    cdef public list children
    cdef public object cfs_bandwidth
    cdef public dict tasks
    cdef public object sched_priv

@cython.final
cdef class SchedEntity:
    cdef public long long weight
    cdef public long long vruntime
    cdef public long long exec_start
    cdef public long long sum_exec_runtime
    cdef public long long prev_sum_exec_runtime
    cdef public bint on_rq
    cdef public SchedEntity parent
    cdef public CfsRq cfs_rq
    cdef public CfsRq my_q
    cdef public long depth
    cdef public object task
    cdef public double runnable_avg
    cdef public long long avg_last_update
    cdef public long long rb_seq
    cdef public long long vlag
    cdef public long long deadline
    cdef public long long slice
    cdef public bint rel_deadline
    cdef public bint sched_delayed
    cdef public SchedEntity group_prev
    cdef public SchedEntity group_next
    cdef public CfsTasks group_list
    cdef public SchedEntity leaf_prev
    cdef public SchedEntity leaf_next
    cdef public CfsRq leaf_q
    @cython.locals(delta=cython.longlong, y=cython.double)
    cpdef update_avg(self, long long now)
    cpdef double load_avg(self, long long now)

@cython.final
cdef class CfsRq:
    cdef public Rq rq
    cdef public TaskGroup tg
    cdef public long cpu
    cdef public long long load_weight
    cdef public long nr_running
    cdef public long h_nr_running
    cdef public long long min_vruntime
    cdef public SchedEntity curr
    cdef public object timeline
    cdef public double load_avg
    cdef public long long avg_last_update
    cdef public double tg_load_avg_contrib
    cdef public SchedEntity se
    cdef public SchedEntity next
    cdef public SchedEntity last
    cdef public bint runtime_enabled
    cdef public object runtime_remaining
    cdef public bint throttled
    cdef public long throttle_count
    cdef public object throttled_clock
    cdef public long long throttled_clock_pelt
    cdef public long long throttled_clock_pelt_time
    cdef public double h_load
    cdef public long long last_h_load_update
    cdef public SchedEntity tasks_head
    cdef public SchedEntity tasks_tail
    cdef public object sched_priv
    cpdef long long cfs_rq_clock_pelt(self, long long now)
    @cython.locals(delta=cython.longlong, y=cython.double)
    cpdef update_load_avg(self, long long now)
    @cython.locals(delta=cython.double)
    cpdef update_tg_load_avg(self)

@cython.final
cdef class CfsTasks:
    cdef public SchedEntity head
    cdef public SchedEntity tail
    cdef public Py_ssize_t count
    cdef public bint per_cfs_rq

    @cython.locals(tasks=list, se=SchedEntity)
    cpdef list first(self, Py_ssize_t n)
    @cython.locals(tail=SchedEntity, q=CfsRq)
    cpdef add_tail(self, SchedEntity se)
    @cython.locals(prev=SchedEntity, nxt=SchedEntity, q=CfsRq)
    cpdef remove(self, SchedEntity se)
    cpdef move_tail(self, SchedEntity se)

cdef class Rq:
    cdef public long cpu
    cdef public CfsRq cfs
    cdef public object curr
    cdef public long nr_running
    cdef public CfsTasks cfs_tasks
    cdef public bint need_resched
    cdef public long long gen
    cdef public long long run_start
    cdef public long long switch_end
    cdef public bint idle
    cdef public long long idle_since
    cdef public long long avg_idle
    cdef public long long next_balance
    cdef public long nr_balance_failed
    cdef public bint ticking
    cdef public long long tick_gen
    cdef public long long tick_at
    cdef public long long hrtick_gen
    cdef public bint resched_pending
    cdef public double speed
    cdef public long long nr_switches
    cdef public long long busy_ns
    cdef public long long overhead_ns
    cdef public long long touched_bytes
    cdef public long long runtime_expiry_gen
    cdef public long long rcu_cb_until
