"""The ``functions``, ``worker_pool`` and ``webserver`` capabilities on the
real host: one native worker (backends/real/workers.py) per function cgroup
replaying an invocation trace open loop, or one pool-mode worker behind a
bounded queue (and, for the webserver, a listen backlog and an accept thread)
driven by the trace or by closed-loop clients (backends/real/loadgen.py).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from backends.real.config import RealBackend
from backends.real.loadgen import client_samplers, closed_loop
from backends.real.runner import RealRunError, Rows, Runner, Setup, apply_cgroup
from backends.real.trace import trace_for_real
from backends.real.workers import WorkerProc
from sim.engine import NSEC_PER_SEC as NS
from sim.workloads.trace import TRACE_SCHEMA
from sim.workloads.worker_pool import NAME as POOL_CGROUP


class FunctionsRunner(Runner):
    """Function workloads replaying an invocation trace (poisson, azure2021,
    random, or any function workload with a ``trace_file``): one worker
    per function cgroup, a thread per request."""

    RUNS = "invocation traces"
    SPINS_ON_CPU_CLOCK = True

    def __init__(self, cfg: dict, b: RealBackend, trace: pa.Table | None = None):
        """``trace``: the rows to replay (None: the workload's own,
        backends/real/trace.trace_for_real)."""
        super().__init__(cfg, b)
        self.trace = self.invocations(trace)
        self.parent = str(self.w.get("parent_cgroup") or "").strip("/")
        self.names = sorted(set(self.trace.column("function").to_pylist()),
                            key=lambda s: (len(s), s))
        if self.w["name"] == "poisson" and not self.w.get("trace_file"):
            # every function of the simulator's run, also one that drew no arrival
            self.names = [f"func-{i}" for i in range(int(self.w["functions"]))]

    def invocations(self, trace: pa.Table | None) -> pa.Table:
        if trace is not None:
            return trace
        try:
            return trace_for_real(self.cfg)
        except ValueError as e:
            raise RealRunError(str(e)) from None

    def worker_mode(self) -> dict:
        """The worker's mode (WorkerProc's ``pool`` / ``accept`` arguments);
        none: a thread per request."""
        return {}

    def start(self, s: Setup) -> None:
        spread = self.w.get("cpuset_spread")
        sets = s.host.cpu_sets(spread) if spread is not None else None
        for i, c in enumerate(s.cgroups):
            apply_cgroup(s.cg, s.host, c, self.w, self.w)
            if sets is not None:   # as sim/workloads/common.py function_cgroup
                s.host.set_cpuset(c, sets[i % len(sets)])
        for f, c in zip(self.names, s.cgroups):
            self.workers.append(WorkerProc(s.binary, f, s.max_s,
                                           attach=lambda pid, c=c: s.cg.attach(c, pid),
                                           cpus=s.cpus, nice=int(self.w.get("nice", 0) or 0),
                                           **self.worker_mode()))


class WorkerPoolRunner(FunctionsRunner):
    """``worker_pool``: one server cgroup, as sim/workloads/worker_pool.py
    makes it, served by one pool-mode worker (funcworker --pool) behind a
    bounded queue; open loop on its arrival trace, or ``clients``
    closed-loop clients (no trace)."""

    RUNS = "a worker pool"

    def __init__(self, cfg: dict, b: RealBackend, trace: pa.Table | None = None):
        self.closed = cfg["workload"].get("clients") is not None
        # a closed loop replays no trace: its clients make the requests
        super().__init__(cfg, b, TRACE_SCHEMA.empty_table() if self.closed else trace)
        self.parent, self.names = "", [POOL_CGROUP]

    def worker_mode(self) -> dict:
        return {"pool": (int(self.w["workers"]), int(self.w["capacity"]))}

    def worker_of(self, functions: np.ndarray) -> np.ndarray:
        # the pool serves every row, whatever its function (as the
        # simulator's worker_pool and webserver replay a trace)
        return np.zeros(len(functions), dtype=np.int64)

    def drive(self, rows, t0_ns, duration_ns, timers, spin_ns, completions):
        if not self.closed:
            return super().drive(rows, t0_ns, duration_ns, timers, spin_ns, completions)
        res = self._closed_loop(t0_ns, duration_ns, timers, spin_ns, completions)
        # the requests the clients made, as rows: scheduled at their due time
        n = len(res.due_ns)
        return res, Rows(res.due_ns, res.demand_ns, np.ones(n, dtype=np.int64),
                         np.full(n, self.names[0], dtype=object), np.zeros(n, dtype=np.int64))

    def _closed_loop(self, t0, duration_ns, timers, spin_ns, completions):
        """``clients`` closed-loop clients on the pool (as
        sim/workloads/worker_pool.py): each client its own seeded demand and
        (fixed) think-time streams."""
        w, seed = self.w, int(self.cfg.get("seed", 0))
        clients = int(w["clients"])
        demand = client_samplers(clients, w.get("service", "exp"), float(w["mean_service_s"]),
                                 seed, "demand", float(w.get("service_sigma", 1.0)))
        think = client_samplers(clients, "det", float(w.get("think_s") or 0.0), seed, "think")
        on_done = None
        if completions is not None:
            cgroup = self.cgroups[0]

            def on_done(rid, d, due_ns):
                end_s = (d.end_ns - t0) / NS
                completions.push_completed(cgroup, end_s - due_ns / NS, end_s)
        return closed_loop(self.workers, [0] * clients, demand, think, t0, duration_ns,
                           timers=timers, on_done=on_done, spin_ns=spin_ns)

    def result_trace(self) -> pa.Table | None:
        # a closed loop's arrivals came from the responses: there is no trace
        return None if self.closed else self.trace


class WebserverRunner(WorkerPoolRunner):
    """``webserver``: worker_pool's pool behind the listen backlog and the
    batching accept thread of sim/workloads/webserver.py (funcworker
    --accept; the thread is named ``accept`` there too, so
    ``trace.thread=accept`` measures the same thread on both backends).
    A closed-loop client whose connection the full backlog refuses sends
    again after ``think_s``, not after TCP's 1 s SYN retry as in the
    simulator (10 clients against a backlog of 512 are never refused)."""

    RUNS = "a web server"

    def worker_mode(self) -> dict:
        w = self.w
        return {**super().worker_mode(),
                "accept": (int(w["backlog"]), int(w["batch_size"]),
                           round(float(w["batch_window_ms"]) * 1e6),
                           max(1, round(float(w["accept_us"]) * 1e3)),
                           # 0: blocks while nothing waits
                           0 if w.get("poll_us") is None
                           else max(1, round(float(w["poll_us"]) * 1e3)))}
