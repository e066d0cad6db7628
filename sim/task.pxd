from sim.rq cimport SchedEntity, TaskGroup

cdef class Request:
    cdef public object function
    cdef public object cgroup
    cdef public long long arrival
    cdef public long long start
    cdef public long long end
    cdef public long long demand
    cdef public long pending
    cdef public bint dropped

cdef class Task:
    cdef public long pid
    cdef public object name
    cdef public TaskGroup tg
    cdef public SchedEntity se
    cdef public long nice
    cdef public long long remaining
    cdef public long cpu
    cdef public object cpus_allowed
    cdef public long long last_ran
    cdef public long last_cpu
    cdef public long long ws_bytes
    cdef public object owner
    cdef public object owner_priv
    cdef public Request request
    cdef public bint sleeping
    cdef public bint on_cpu
    cdef public long long wait_start
    cdef public bint dead
    cdef public object custom_slice
    cdef public object sched_policy
    cdef public long prio
    cdef public long rt_time_slice
    cdef public long long touch_mark
    cdef public long long touch_mark_shared
    cdef public bint host
