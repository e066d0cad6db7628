# Compiled declarations of sim/costmodel.py (docs/architecture.md, "Compiled
# core"): the parameters are read-only C fields.
cimport cython

cdef class CostModel:
    cdef readonly object name
    cdef readonly long long direct_ns
    cdef readonly long long per_level_ns
    cdef readonly long long migration_ns
    cdef readonly double refill_ns_per_line
    cdef readonly long long cache_line_bytes
    cdef readonly long long max_refill_bytes
    cdef readonly long long cache_decay_ns
    cdef readonly double queue_ns_per_log2
    cdef readonly tuple cache_levels
    cdef readonly long long idle_exit_ns
    cdef readonly double reinsert_ns_per_log2

    @cython.locals(lines=cython.double, evicted=cython.double, total=cython.double,
                   capacity=cython.longlong, ns_per_line=cython.double, shared=cython.bint,
                   resident=cython.longlong)
    cpdef long long refill_ns(self, long long ws_bytes, away_ns, bint migrated,
                              long long touched=*, long long touched_shared=*)
    @cython.locals(cost=cython.longlong)
    cpdef long long switch_cost_ns(self, long levels, long long ws_bytes, away_ns,
                                   bint migrated, long nr_running=*, long long touched=*,
                                   long long touched_shared=*, double reinsert_log2=*)
