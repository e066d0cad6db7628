# Compiled declarations of sim/recorder.py (docs/performance.md, "Compiled core").
cimport cython
from sim.task cimport Request

@cython.final
cdef class Recorder:
    cdef public long long warmup_ns
    cdef public long long arrived
    cdef public list observers
    cdef dict _names
    cdef public Py_ssize_t n
    cdef unsigned int[::1] _function
    cdef unsigned int[::1] _cgroup
    cdef long long[::1] _arrival
    cdef long long[::1] _start
    cdef long long[::1] _end
    cdef long long[::1] _demand
    cdef signed char[::1] _dropped

    cpdef request_arrived(self, Request req)
    @cython.locals(n=Py_ssize_t, names=dict)
    cpdef request_done(self, Request req)
    cdef _grow(self, Py_ssize_t rows)
