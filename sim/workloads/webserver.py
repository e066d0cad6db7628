"""``workload=webserver``: the HTTP server of the affinity thesis
(Affinity Aware CPU Scheduling for Container Hosts, §A.3).

Connections complete their handshake into the kernel's listen queue
(``backlog``, 512 in the thesis; a connection that finds it full is refused,
i.e. dropped).  One accept thread takes them out, ``accept_us`` of CPU each,
into a batch; a batch is handed to the shared application queue when it
holds ``batch_size`` connections or ``batch_window_ms`` after its first
connection was accepted, whichever comes first.  The hand-over never blocks:
connections that find the queue full (``capacity`` waiting, the thesis's
QUEUE_SIZE) are discarded.  ``workers`` threads serve the queue, each
request ``mean_service_s`` of CPU (400 ms in the thesis).  The worker side is
worker_pool's (sim/workloads/worker_pool.py); this module adds the backlog,
the accept thread and the batching.  With ``batch_size`` 1 and a negligible
``accept_us`` on a host with a CPU to spare, the server is worker_pool's
M/G/c/K with K = workers + capacity.

Load: open loop (``clients`` null) with Poisson arrivals at ``rate_rps``,
drawn on the fly or replayed from an invocation trace (``trace_file``, or
the table worker_pool's ``arrival_trace`` makes from the seed, which holds the very
arrivals and demands the on-the-fly draw would make; every row is one
request to this server, whatever its ``function``, and ``threads`` is
ignored); or ``clients``
closed-loop clients, each sending its next request ``think_s`` after the
response (or the refusal) of its last, as the affinity thesis's ``hey -c 10`` load test
(all clients send their first request at time 0; a connection refused by a
full backlog is retried after at least TCP's 1 s SYN retransmission timeout).

Modelling choices the thesis leaves open: its accept loop polls a
non-blocking socket ("constantly attempting to accept", §4.2.1); by default
(``poll_us`` null) the accept thread sleeps while there is nothing to accept
(as a blocking accept or epoll would), so it costs CPU only per connection.
With ``poll_us`` set it never sleeps: a pass that finds the backlog empty
costs ``poll_us`` of CPU (a non-blocking accept and the loop around it) and
the next pass follows at once, so the thread is always runnable and shares
a CPU with the workers (the thesis's reading of why its main thread gets
less CPU as workers are added, §6.1.1).  Either way a pass takes the next
waiting connection, if any, when it ends.  A batch wakes one idle worker per
connection it brings (no thundering herd).  Latency runs from the
connection's arrival in the backlog to the end of its request's CPU work.

On the real host (``backend=real``) the native worker runs the same server
(backends/real/functions.py ``WebserverRunner``); its threads are named as
the simulator's tasks (``accept``, ``worker-<j>``), so ``trace.thread=accept``
measures the same thread on both backends.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from sim.config import MAX_COUNT, tunable
from sim.engine import NSEC_PER_MSEC, NSEC_PER_SEC
from sim.task import BURST_BLOCK, Request
from sim.workloads.trace import read_trace
from sim.workloads.worker_pool import NAME, WorkerPoolConfig, WorkerPoolWorkload, arrival_trace
# A full listen queue drops the handshake (tcp_abort_on_overflow = 0) and the
# client retransmits after the initial RTO, TCP_TIMEOUT_INIT = 1 s; a closed-
# loop client whose connection is refused tries again no sooner than that.
SYN_RETRY_NS = NSEC_PER_SEC


@dataclass
class WebserverConfig(WorkerPoolConfig):
    """Batched accept thread, bounded app queue (capacity), worker pool."""
    model: str = tunable("webserver", choices=("webserver",))
    # listen backlog: connections waiting to be accepted
    backlog: int = tunable(512, range=(1, MAX_COUNT))
    # connections per batch handed to the queue
    batch_size: int = tunable(1, range=(1, MAX_COUNT))
    # a batch is handed over at most this long after its first
    batch_window_ms: float = tunable(0.0, range=(0, None))
    accept_us: float = tunable(1.0, above=0)  # accept thread CPU per connection
    # null: the accept thread sleeps while nothing waits; a value: it polls,
    # each pass that finds nothing costing this much CPU
    poll_us: Optional[float] = tunable(None, above=0)
    trace_file: Optional[str] = None  # open loop: replay these arrivals (invocation trace)

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        if c.get(f"{key}.clients") is not None:
            c.require(f"{key}.trace_file", c.get(f"{key}.trace_file") is None,
                      f"replays open-loop arrivals; set {key}.clients = null to use it")
        if c.get(f"{key}.trace_file") is not None:
            c.require(f"{key}.trace_file", bool(c.get(f"{key}.trace_file")),
                      "must be a path (or null to draw Poisson arrivals at rate_rps)")


class WebserverWorkload(WorkerPoolWorkload):
    CONFIG = WebserverConfig
    # replays (or draws) its arrivals itself
    READS_TRACE = True
    REAL_BACKEND = "webserver"

    generate_trace = staticmethod(arrival_trace)
    read_trace_file = staticmethod(read_trace)

    def __init__(self, cfg: WebserverConfig, machine, recorder, trace: pa.Table | None = None):
        super().__init__(cfg, machine, recorder)
        if trace is None and cfg.trace_file:
            trace = self.read_trace_file(cfg.trace_file)
        if trace is not None and self.clients is not None:
            raise ValueError("workload webserver: a trace replays open-loop arrivals; "
                             "set workload.clients = null to replay it")
        self.trace = trace
        self.backlog_cap = cfg.backlog
        self.batch_size = cfg.batch_size
        self.window_ns = int(round(float(cfg.batch_window_ms) * NSEC_PER_MSEC))
        self.accept_ns = max(1, int(round(float(cfg.accept_us) * 1000)))
        self.poll_ns = None if cfg.poll_us is None else max(1, int(round(float(cfg.poll_us)
                                                                         * 1000)))
        self.backlog: deque[Request] = deque()
        self.batch: list[Request] = []
        self.window_end = 0
        self.cycle = 0             # batches started; a window timer fires for its own only
        self.acceptor = machine.new_task("accept", self.tg, self.nice, self.accept_ns,
                                         self.ws_bytes, self)
        self.acceptor_forked = False
        self.acceptor_idle = True  # blocked, waiting for a connection or a window's end

    # --- load --------------------------------------------------------------------------
    def start(self):
        if self.poll_ns is not None:
            # a polling accept loop runs from the start, connections or not
            self._run_acceptor()
        if self.clients is None and self.trace is not None:
            t = self.trace.sort_by("arrival_s")
            self.rows = list(zip(
                np.rint(t.column("arrival_s").to_numpy() * NSEC_PER_SEC).astype(np.int64).tolist(),
                np.maximum(1, np.rint(t.column("demand_s").to_numpy() * NSEC_PER_SEC))
                .astype(np.int64).tolist()))
            self.next_row = 0
            if self.rows:
                self.engine.call_at(self.rows[0][0], self._replay)
        else:
            super().start()

    def _replay(self):
        rows, now = self.rows, self.engine.now
        while self.next_row < len(rows) and rows[self.next_row][0] <= now:
            req = Request(NAME, self.tg.name, now, rows[self.next_row][1])
            self.next_row += 1
            self.recorder.request_arrived(req)
            self.receive(req)
        if self.next_row < len(rows):
            self.engine.call_at(rows[self.next_row][0], self._replay)

    # --- listen backlog and accept thread ------------------------------------------------
    def receive(self, req):
        """The connection is established: it waits in the listen backlog."""
        if len(self.backlog) >= self.backlog_cap:
            req.dropped = True       # refused: the listen queue is full
            self.request_done(req, max(self.think_ns, SYN_RETRY_NS))
            return
        self.backlog.append(req)
        if self.acceptor_idle:
            self._run_acceptor()

    def _run_acceptor(self):
        a = self.acceptor
        self.acceptor_idle = False
        a.remaining = self.accept_ns if self.backlog or self.poll_ns is None else self.poll_ns
        if self.acceptor_forked:
            self.machine.wake_up(a)
        else:
            self.acceptor_forked = True
            self.machine.wake_up_new_task(a, 0)

    def _window_closed(self, cycle: int):
        # the accept thread's wait times out: it wakes to hand the batch over
        if cycle == self.cycle and self.batch and self.acceptor_idle:
            self._run_acceptor()

    def burst_done(self, t):
        if t is not self.acceptor:
            return super().burst_done(t)
        now = self.engine.now
        if self.backlog:             # this pass accepted a connection
            self.batch.append(self.backlog.popleft())
            if len(self.batch) == 1:
                self.cycle += 1
                self.window_end = now + self.window_ns
                if self.batch_size > 1 and self.window_ns > 0:
                    self.engine.call_at(self.window_end, self._window_closed, self.cycle)
        if self.batch and (len(self.batch) >= self.batch_size or now >= self.window_end):
            batch, self.batch = self.batch, []
            for req in batch:
                self.admit(req)
        if self.backlog:
            t.remaining = self.accept_ns
            return 0
        if self.poll_ns is not None:
            t.remaining = self.poll_ns      # an empty pass: accept() says EAGAIN
            return 0
        self.acceptor_idle = True
        return BURST_BLOCK


WORKLOAD = WebserverWorkload
