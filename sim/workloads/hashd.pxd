# Compiled declarations of sim/workloads/hashd.py (docs/performance.md,
# "Compiled core"): attribute and argument types only; the logic is the .py.
cimport cython
from sim.machine cimport Machine
from sim.task cimport Task, Request
from sim.engine cimport RngStream

cdef class _Function:
    cdef public object tg
    cdef public Task dispatcher
    cdef public object inbox
    cdef public bint busy
    cdef public list idle
    cdef public long spawned

cdef class _Part:
    cdef public _Function fn
    cdef public Request req
    cdef public long long part
    cdef public long long third
    cdef public long step

    cpdef long long cpu(self, long step)
    cpdef long long sleep(self, long step)

cdef class HashdPath:
    cdef public object wl
    cdef public Machine machine
    cdef public object engine
    cdef public long long dispatch_ns
    cdef public double sleep_mean_ns
    cdef public double sleep_sd_ns
    cdef public RngStream rng
    cdef public dict functions

    cpdef add_function(self, tg)
    cpdef long start(self, Request req, tg, long hint)
    @cython.locals(d=Task, m=Machine)
    cpdef long _post(self, _Function fn, item, long hint)
    @cython.locals(fn=_Function, req=Request)
    cpdef _dispatched(self, Task d)
    @cython.locals(m=Machine, share=cython.longlong, extra=cython.longlong,
                   third=cython.longlong, j=cython.long, plan=_Part, w=Task)
    cpdef _launch(self, _Function fn, Request req, long hint)
    @cython.locals(mean=cython.double, u1=cython.double, u2=cython.double, x=cython.double)
    cpdef long long _sleep_third(self)
    @cython.locals(fn=_Function, plan=_Part, req=Request, i=cython.long, sleep=cython.longlong)
    cpdef burst_done(self, Task task)
