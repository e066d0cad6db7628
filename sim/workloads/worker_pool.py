"""``workload=worker_pool``: the server of seed 000.  Poisson arrivals join
a FIFO queue of at most ``capacity`` waiting requests (arrivals to a full
queue are dropped and counted); ``workers`` threads serve it.  Worker
threads are spawned on first demand, then block on the queue when it is
empty, so the system is M/G/c/K with K = workers + capacity.

With ``clients`` set, the load is that many closed-loop clients instead:
each sends its first request at time 0 and its next one ``think_s`` (fixed)
after the response, or the drop, of its last (the machine-repairman model;
the real backend's load generator drives its worker pool the same way,
backends/real/loadgen.py closed_loop)."""
from __future__ import annotations

from collections import deque

from sim.engine import NSEC_PER_SEC, s_to_ns
from sim.task import BURST_BLOCK, Request
from sim.workloads.common import ServiceTime, cgroup_shares

NAME = "server"


class WorkerPoolWorkload:
    def __init__(self, cfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        self.workers = int(cfg["workers"])
        self.capacity = int(cfg["capacity"])
        self.nice = int(cfg.get("nice", 0))
        self.ws_bytes = int(cfg.get("working_set_kb", 0)) * 1024
        self.mean_gap_ns = NSEC_PER_SEC / float(cfg["rate_rps"])
        self.tg = machine.create_group(NAME, cgroup_shares(cfg))
        self.arrivals = self.engine.rng(f"workload/{NAME}/arrivals")
        self.service = ServiceTime(cfg.get("service", "exp"), float(cfg["mean_service_s"]),
                                   float(cfg.get("service_sigma", 1.0)),
                                   self.engine.rng(f"workload/{NAME}/service"))
        self.queue: deque[Request] = deque()
        self.idle: deque = deque()
        self.spawned = 0
        self.clients = cfg.get("clients")
        self.think_ns = s_to_ns(float(cfg.get("think_s") or 0.0))

    def start(self):
        if self.clients is not None:
            for _ in range(int(self.clients)):
                self._client_request()
        else:
            self.engine.call_later(int(self.arrivals.exponential(self.mean_gap_ns)),
                                   self._arrive)

    def _client_request(self):
        req = Request(NAME, self.tg.name, self.engine.now, self.service.sample_ns())
        self.recorder.request_arrived(req)
        self.receive(req)

    def _arrive(self):
        req = Request(NAME, self.tg.name, self.engine.now, self.service.sample_ns())
        self.recorder.request_arrived(req)
        self.receive(req)
        self.engine.call_later(int(self.arrivals.exponential(self.mean_gap_ns)), self._arrive)

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
        its next request ``think_s`` later (or ``retry_ns``)."""
        self.recorder.request_done(req)
        if self.clients is not None:
            self.engine.call_later(self.think_ns if retry_ns is None else retry_ns,
                                   self._client_request)


WORKLOAD = WorkerPoolWorkload
