"""``workload=worker_pool``: the server of the affinity thesis (Affinity
Aware CPU Scheduling for Container Hosts).  Poisson arrivals (or, with
``interarrival: det``, one every 1 / ``rate_rps``: the thesis's controlled
test sent "exactly 10 requests per second", §6.1.3) join
a FIFO queue of at most ``capacity`` waiting requests (arrivals to a full
queue are dropped and counted); ``workers`` threads serve it.  Worker
threads are spawned on first demand, then block on the queue when it is
empty, so the system is M/G/c/K with K = workers + capacity.

With ``clients`` set, the load is that many closed-loop clients instead:
each sends its first request at time 0 and its next one ``think_s`` (fixed)
after the response, or the drop, of its last (the machine-repairman model;
the real backend's load generator drives its worker pool the same way,
backends/real/loadgen.py closed_loop).

Closed-loop clients cost no CPU unless ``loadgen_threads`` is set: then the
clients are connections of a load generator running on the same host, as
``wrk -t N -c clients`` beside the server it measures.  Client ``i``
belongs to thread ``i % N`` (wrk splits its connections evenly over its
threads).  A thread is an event loop: each of its clients whose response
has come (and whose think time has passed) waits in the thread's FIFO, and
the thread spends ``loadgen_us`` of CPU on each in turn (reading the
response, writing the next request) before the request reaches the server;
with nothing to do it blocks (epoll_wait) until a response wakes it.  The
threads live in a cgroup of their own, ``loadgen``, at the default weight:
a benchmark client started from another session than the daemonised server
lands in another autogroup (CONFIG_SCHED_AUTOGROUP, on in distribution
kernels), which the kernel schedules as a task group of its own.  Every
client's first request also goes through its thread (wrk connects, then
sends).  A request's latency is still the server's, from its arrival to
the end of its work; the cycle of a client is that latency plus the time
its thread takes to turn the response into the next request (its queue,
its wake-up and loadgen_us) plus think_s."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from sim.config import MAX_COUNT, MISSING, tunable
from sim.footprint import Term
from sim.engine import NSEC_PER_SEC, RngStream, s_to_ns
from sim.task import BURST_BLOCK, Request
from sim.workloads.base import Workload, WorkloadConfig
from sim.workloads.common import (NICE_RANGE, SERVICE_DISTRIBUTIONS, ServiceTime,
                                  cgroup_shares)
from sim.workloads.trace import make_trace

NAME = "server"
# the load generator's cgroup (module docstring)
LOADGEN = "loadgen"


@dataclass
class WorkerPoolConfig(WorkloadConfig):
    # the simulator workload (options sharing this module: apache)
    model: str = tunable("worker_pool", choices=("worker_pool",))
    rate_rps: float = tunable(MISSING, above=0)   # open loop
    # open loop: exp (Poisson arrivals) or det (one every 1 / rate_rps)
    interarrival: str = tunable("exp", choices=("exp", "det"))
    service: str = tunable("exp", choices=SERVICE_DISTRIBUTIONS)
    mean_service_s: float = tunable(MISSING, above=0)
    service_sigma: float = tunable(1.0, above=0)  # lognormal shape
    workers: int = tunable(MISSING, range=(1, MAX_COUNT))
    capacity: int = tunable(MISSING, range=(0, MAX_COUNT))  # waiting requests the queue holds
    working_set_kb: int = tunable(0, range=(0, None))
    nice: int = tunable(0, range=NICE_RANGE)
    # null: open loop at rate_rps; N: N closed-loop clients
    clients: Optional[int] = tunable(None, range=(1, MAX_COUNT))
    # closed loop: a client's pause between response and next request
    think_s: float = tunable(0.0, range=(0, None))
    # closed loop: load-generator threads on this host that run the clients
    # (wrk -t N); 0: the clients cost no CPU
    loadgen_threads: int = tunable(0, range=(0, MAX_COUNT))
    # CPU a load-generator thread spends per request (read the response,
    # write the next request)
    loadgen_us: float = tunable(0.0, range=(0, None))

    @classmethod
    def check(cls, c, key: str) -> None:
        threads = c.get(f"{key}.loadgen_threads")
        if not threads:
            return
        clients = c.get(f"{key}.clients")
        if c.require(f"{key}.loadgen_threads", clients is not None,
                     f"runs closed-loop clients; set {key}.clients"):
            # wrk refuses fewer connections than threads
            c.require(f"{key}.loadgen_threads", threads <= clients,
                      f"must be <= {key}.clients = {clients} (each thread runs at least "
                      f"one client)")
        c.positive(f"{key}.loadgen_us")
        c.require(f"{key}.loadgen_threads", c.get("backend.name") in (None, "sim"),
                  "must be 0 with backend=real, which runs its own load generator")

    @classmethod
    def footprint(cls, w, duration_s: float) -> list:
        """The pool's threads, the queue, and the requests (open loop: at
        rate_rps; closed: each client again after response, think time and
        its load-generator thread's work, and no faster than the workers or
        the load-generator threads can go)."""
        if w["clients"] is None:
            rate, key = w["rate_rps"], "rate_rps"
        else:
            loadgen_s = w["loadgen_us"] * 1e-6 if w.get("loadgen_threads") else 0.0
            rate, key = w["clients"] / (w["think_s"] + w["mean_service_s"] + loadgen_s), "clients"
            rate = min(rate, w["workers"] / w["mean_service_s"])
            if loadgen_s:
                rate = min(rate, w["loadgen_threads"] / loadgen_s)
        return [Term("thread", w["workers"], "workers"),
                Term("request", w["capacity"], "capacity"),
                Term("request", rate * duration_s, key)]


class Gaps:
    """Open-loop inter-arrival times in ns: ``exp`` draws them from ``rng``
    (Poisson arrivals at ``rate_rps``), ``det`` is 1 / ``rate_rps`` each."""

    def __init__(self, kind: str, rate_rps: float, rng: RngStream):
        self.kind, self.rng = kind, rng
        self.mean_ns = NSEC_PER_SEC / rate_rps

    def next_ns(self) -> int:
        if self.kind == "det":
            return int(self.mean_ns)
        return int(self.rng.exponential(self.mean_ns))


def arrival_trace(cfg, seed: int, duration_s: float) -> pa.Table | None:
    """The open-loop arrivals over [0, duration_s) as an invocation trace
    (sim/workloads/trace.py), from the same random streams the simulator
    draws on the fly; None for a closed loop, whose arrivals depend on the
    responses.  ``cfg``: a worker_pool or webserver config (typed, or a
    plain mapping)."""
    if cfg.get("clients") is not None:
        return None
    gap = Gaps(cfg.get("interarrival", "exp"), float(cfg["rate_rps"]),
               RngStream(seed, f"workload/{NAME}/arrivals"))
    service = ServiceTime(cfg["service"], float(cfg["mean_service_s"]),
                          float(cfg["service_sigma"]), RngStream(seed, f"workload/{NAME}/service"))
    end = s_to_ns(duration_s)
    arrivals, demands = [], []
    t = gap.next_ns()
    while t < end:
        arrivals.append(t)
        demands.append(service.sample_ns())
        t += gap.next_ns()
    n = len(arrivals)
    return make_trace([NAME] * n, np.asarray(arrivals, np.int64) / NSEC_PER_SEC,
                      np.asarray(demands, np.int64) / NSEC_PER_SEC, [1] * n)


class LoadgenThread:
    """One load-generator thread (module docstring): the clients whose next
    request it owes, in order, and the task that works them off."""

    def __init__(self, workload, machine, tg, index: int, cost_ns: int, ws_bytes: int):
        self.workload = workload
        self.machine = machine
        self.cost_ns = cost_ns
        self.index = index
        self.task = machine.new_task(f"loadgen-{index}", tg, 0, cost_ns, ws_bytes, self)
        self.ready: deque[int] = deque()
        self.forked = False
        self.idle = True              # blocked in epoll_wait

    def client_ready(self, client: int) -> None:
        """``client``'s response is in (or it is about to connect)."""
        self.ready.append(client)
        if self.idle:
            self.idle = False
            t = self.task
            t.remaining = self.cost_ns
            if self.forked:
                self.machine.wake_up(t)
            else:
                self.forked = True
                self.machine.wake_up_new_task(t, self.index % self.machine.topology.nr_cpus)

    def burst_done(self, t) -> int:
        self.workload.client_request(self.ready.popleft())
        if self.ready:
            t.remaining = self.cost_ns
            return 0
        self.idle = True
        return BURST_BLOCK


class WorkerPoolWorkload(Workload):
    CONFIG = WorkerPoolConfig
    REAL_BACKEND = "worker_pool"
    arrivals = staticmethod(arrival_trace)

    def __init__(self, cfg: WorkerPoolConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.workers = cfg.workers
        self.capacity = cfg.capacity
        self.nice = cfg.nice
        self.ws_bytes = cfg.working_set_kb * 1024
        # the server's cgroup, at the default weight (the config has no weight key)
        self.tg = machine.create_group(NAME, cgroup_shares({}))
        self.gaps = Gaps(cfg.interarrival, float(cfg.rate_rps),
                         self.engine.rng(f"workload/{NAME}/arrivals"))
        self.service = ServiceTime(cfg.service, float(cfg.mean_service_s),
                                   float(cfg.service_sigma),
                                   self.engine.rng(f"workload/{NAME}/service"))
        self.queue: deque[Request] = deque()
        self.idle: deque = deque()
        self.spawned = 0
        self.clients = cfg.clients
        self.think_ns = s_to_ns(float(cfg.think_s))
        # closed loop through load-generator threads: each client's thread,
        # and the client each request in flight was sent for
        self.loadgen: list[LoadgenThread] = []
        self.client_of: dict[Request, int] = {}
        if cfg.loadgen_threads:
            tg = machine.create_group(LOADGEN, cgroup_shares({}))
            cost_ns = max(1, int(round(float(cfg.loadgen_us) * 1000)))
            self.loadgen = [LoadgenThread(self, machine, tg, i, cost_ns, self.ws_bytes)
                            for i in range(cfg.loadgen_threads)]

    def start(self):
        if self.clients is None:
            self.engine.call_later(self.gaps.next_ns(), self._arrive)
        elif self.loadgen:
            for client in range(self.clients):
                self._client_ready(client)
        else:
            for _ in range(self.clients):
                self.client_request()

    def _client_ready(self, client: int) -> None:
        self.loadgen[client % len(self.loadgen)].client_ready(client)

    def client_request(self, client: int | None = None) -> None:
        """A client sends its next request (``client``: its number, when a
        load-generator thread has just written the request for it)."""
        req = Request(NAME, self.tg.name, self.engine.now, self.service.sample_ns())
        if client is not None:
            # before receive(): a request refused there is done at once
            self.client_of[req] = client
        self.recorder.request_arrived(req)
        self.receive(req)

    def _arrive(self):
        req = Request(NAME, self.tg.name, self.engine.now, self.service.sample_ns())
        self.recorder.request_arrived(req)
        self.receive(req)
        self.engine.call_later(self.gaps.next_ns(), self._arrive)

    def receive(self, req):
        """A request reaches the server (the webserver overrides this to put
        it through its listen backlog and accept thread first)."""
        self.admit(req)

    def admit(self, req):
        """Hand ``req`` to an idle worker, else queue it, else drop it."""
        m = self.machine
        if self.idle:
            w = self.idle.popleft()
            w.request = req
            w.remaining = req.demand
            m.wake_up(w)
        elif self.spawned < self.workers:
            w = m.new_task(f"worker-{self.spawned}", self.tg, self.nice, req.demand,
                           self.ws_bytes, self, req)
            m.wake_up_new_task(w, self.spawned % m.topology.nr_cpus)
            self.spawned += 1
        elif len(self.queue) < self.capacity:
            self.queue.append(req)
        else:
            req.dropped = True
            self.request_done(req)

    def burst_done(self, w):
        now = self.engine.now
        req = w.request
        req.end = now
        self.request_done(req)
        if self.queue:
            nxt = self.queue.popleft()
            nxt.start = now
            w.request = nxt
            w.remaining = nxt.demand
            return 0
        w.request = None
        self.idle.append(w)
        return BURST_BLOCK

    def request_done(self, req, retry_ns: int | None = None) -> None:
        """Completed or dropped: a closed-loop client hears of both and sends
        its next request ``think_s`` later (or ``retry_ns``); through its
        load-generator thread, if it has one."""
        self.recorder.request_done(req)
        if self.clients is None:
            return
        delay = self.think_ns if retry_ns is None else retry_ns
        if self.loadgen:
            self.engine.call_later(delay, self._client_ready, self.client_of.pop(req))
        else:
            self.engine.call_later(delay, self.client_request)


WORKLOAD = WorkerPoolWorkload
