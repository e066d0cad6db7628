# Compiled declarations of sim/workloads/common.py (docs/performance.md,
# "Compiled core"): attribute and argument types only; the logic is the .py.
cimport cython
from sim.engine cimport Calendar, RngStream
from sim.machine cimport Machine
from sim.rq cimport TaskGroup
from sim.task cimport Task, Request

@cython.final
cdef class ServiceTime:
    cdef public object kind
    cdef public double mean_ns
    cdef public double sigma
    cdef public RngStream rng
    cdef public list mix_ns
    cdef public list mix_cdf
    @cython.locals(d=cython.double, u=cython.double, i=Py_ssize_t)
    cpdef long long sample_ns(self)

@cython.locals(share=cython.longlong, extra=cython.longlong, j=cython.long, t=Task)
cpdef long fork_threads(Machine machine, Request req, TaskGroup tg, long nice, long long ws_bytes,
                        owner, long hint, long long start_ns=*)

cdef class ForkJoin:
    cdef public Machine machine
    cdef public Calendar engine
    cdef public object recorder
    cdef public long nice
    cdef public long long ws_bytes
    cdef public object path

    @cython.locals(req=Request)
    cpdef Request new_request(self, name, TaskGroup tg, long long demand, long k, arrival=*)
    cpdef long start_request(self, Request req, TaskGroup tg, long hint)
    @cython.locals(req=Request)
    cpdef burst_done(self, Task task)
    cpdef request_done(self, Request req)

@cython.final
cdef class Replay:
    cdef public list names
    cdef public dict groups
    cdef public dict hints
    cdef public object arrivals
    cdef public object demands
    cdef public object function_of
    cdef public object threads
    cdef public Py_ssize_t next
    cdef public object workload
    cdef public Calendar engine

    @cython.locals(n=Py_ssize_t, i=Py_ssize_t)
    cpdef long long fork_due(self, workload, long long now)
    cpdef start(self, workload)
    @cython.locals(at=cython.longlong)
    cpdef arrive(self)

@cython.final
cdef class PoissonSource:
    cdef public ForkJoin workload
    cdef public object name
    cdef public TaskGroup tg
    cdef public RngStream arrivals
    cdef public ServiceTime service
    cdef public long k
    cdef public double mean_gap_ns
    cdef public long hint

    @cython.locals(engine=Calendar)
    cpdef start(self)
    @cython.locals(engine=Calendar)
    cpdef arrive(self)
