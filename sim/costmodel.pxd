# Compiled declarations of sim/costmodel.py (docs/performance.md, "Compiled
# core"): the parameters are read-only C fields, one per entry of PARAMS
# (tests/test_costmodel.py checks they match).  Costs are doubles so that the
# fits can hold float values; a loaded profile's are whole ns.
cimport cython

cdef double _charged(double ns, bint whole_ns)

cdef class CostModel:
    cdef readonly object name
    cdef readonly double direct_ns
    cdef readonly double per_level_ns
    cdef readonly double migration_ns
    cdef readonly double refill_ns_per_line
    cdef readonly long long cache_line_bytes
    cdef readonly long long max_refill_bytes
    cdef readonly long long cache_decay_ns
    cdef readonly double queue_ns_per_log2
    cdef readonly double reinsert_ns_per_log2
    cdef readonly tuple cache_levels
    cdef readonly double idle_exit_ns
    cdef readonly double idle_exit_cold_ns
    cdef readonly long long idle_exit_decay_ns
    cdef readonly tuple idle_exit_spread
    cdef readonly double timer_slack_ns
    cdef readonly double timer_irq_ns
    cdef readonly tuple timer_irq_spread

    cpdef double walk_ns(self, long levels)
    @cython.locals(lines=cython.double, evicted=cython.double)
    cpdef double decay_lines(self, long long ws_bytes, long long away_ns, bint migrated)
    @cython.locals(evicted=cython.double, total=cython.double, capacity=cython.double,
                   ns_per_line=cython.double, shared=cython.bint, resident=cython.double)
    cpdef double refill_ns(self, long long ws_bytes, long long away_ns, bint migrated,
                           long long touched=*, long long touched_shared=*)
    cpdef double idle_exit(self, long long idle_ns, bint whole_ns=*)
    @cython.locals(cost=cython.double)
    cpdef double switch_cost(self, long levels, long long ws_bytes, long long away_ns,
                             bint migrated,
                             long nr_running=*, long long touched=*, long long touched_shared=*,
                             double reinsert_log2=*, bint from_idle=*, bint whole_ns=*,
                             long long idle_ns=*)
    cpdef long long switch_cost_ns(self, long levels, long long ws_bytes, long long away_ns,
                                   bint migrated, long nr_running=*, long long touched=*,
                                   long long touched_shared=*, double reinsert_log2=*,
                                   bint from_idle=*, long long idle_ns=*)
    cpdef long long idle_exit_ns_at(self, long long idle_ns, double ratio=*)
    cpdef long long switch_to_idle_ns(self, long levels)
