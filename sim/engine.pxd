# Compiled declarations of sim/engine.py (docs/performance.md, "Compiled core").
# Engine, the simpy.Environment, stays a Python class (a subclass of Calendar).
cimport cython
from sim.heap cimport Heap, Node, NodeStack

cdef class Calendar

cdef class _Call(Node):
    cdef public object fn
    cdef public tuple args

    cpdef int fire(self, Calendar calendar) except -1

@cython.locals(call=_Call)
cpdef _Call new_call(fn, tuple args, NodeStack spare)

@cython.final
cdef class _Batch:
    cdef str draw
    cdef list values
    cdef Py_ssize_t i

@cython.final
cdef class RngStream:
    cdef public object gen
    cdef long _batch
    cdef _Batch _exp, _uni, _norm

    @cython.locals(i=Py_ssize_t, n=cython.long)
    cdef double _next(self, _Batch batch) except? -1
    cpdef double exponential(self, double mean)
    cpdef double lognormal(self, double mean, double sigma)
    cpdef double uniform(self)
    cpdef double quantile_draw(self, probs, values)

cpdef process_event(event)

cdef class Calendar:
    cdef public long long _now
    cdef public long long _seq
    cdef public Heap _calendar
    cdef NodeStack _spare_calls

    cpdef push(self, long long t_ns, fn, tuple args)
    cpdef push_call(self, long long t_ns, _Call call)
    @cython.locals(delay_ns=cython.longlong, call=_Call)
    cpdef schedule(self, event, long long priority=*, delay=*)
    @cython.locals(call=_Call, calendar=Heap, events=cython.longlong)
    cpdef long long _run_until(self, long long until_ns)
