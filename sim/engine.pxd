# Compiled declarations of sim/engine.py (docs/architecture.md, "Compiled core").
cimport cython

cdef class _Call:
    cdef public object fn
    cdef public tuple args

cdef class Engine:
    cdef public object env
    cdef public long long _now
    cdef public object seed
    cdef public dict _streams
    cpdef push(self, long long t_ns, fn, tuple args)
