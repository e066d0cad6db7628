"""The schedule as tracepoints: ``trace=sched`` records what the kernel's
``sched_switch``, ``sched_wakeup``, ``sched_wakeup_new`` and
``sched_migrate_task`` tracepoints would show, and the throttling of
cfs_rqs, into sched.parquet (results/schema.py ``SCHED``, docs/tracing.md).

The machine (sim/machine.py) and bandwidth control (sim/bandwidth.py) hold
a ``tracer``: None when tracing is off, so the hot path pays one pointer
test per switch; a :class:`SchedTracer` otherwise, which appends each event
to column lists.  Events outside ``window_s`` are not kept; past
``max_events`` recording stops and the run says so (``truncated``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa

from results.schema import SCHED
from sim.config import MISSING, from_mapping, tunable

NS = 1_000_000_000


@dataclass
class TraceConfig:
    """trace=none | sched | optional (scenarios/conf/trace/): whether a run
    records sched.parquet.  ``optional`` records where the backend can and
    runs without the trace, saying why, where it cannot (a real host
    without perf's tracepoints); ``sched`` refuses to run without it."""
    name: str = tunable(MISSING, choices=("none", "sched", "optional"))
    # recording stops after this many events (the run then says so)
    max_events: int = tunable(2_000_000, range=(1, 10**9))
    # [start, end] in seconds of run time; null: the whole run
    window_s: Optional[list[float]] = field(default=None)
    # comm of a thread whose migrations and wake-up latencies (the tasks of
    # that name pooled, after warmup) go into the summary's thread_* columns
    # (results/sched.py ThreadSamples); null: none.  The kernel keeps 15
    # characters of a comm (TASK_COMM_LEN), so a longer name never matches.
    thread: Optional[str] = tunable(None, pattern=(r"[^\s/]{1,15}",
                                                   "must be a thread name of 1 to 15 characters "
                                                   "without spaces or '/'"))

    @staticmethod
    def check(c, key: str) -> None:
        """Cross-key rules (scenarios/validate.py): the window is [start,
        end]; a named thread needs a trace to be measured in."""
        w = c.get(f"{key}.window_s")
        if w is not None:
            w = list(w)
            c.require(f"{key}.window_s", len(w) == 2 and 0 <= w[0] < w[1],
                      "must be [start, end] in seconds with 0 <= start < end", w)
        if c.get(f"{key}.thread") is not None:
            c.require(f"{key}.thread", c.get(f"{key}.name") != "none",
                      "is measured from the schedule trace: use trace=sched (or optional)")


def enabled(cfg: TraceConfig | None) -> bool:
    return cfg is not None and cfg.name != "none"


def trace_config(cfg: dict) -> TraceConfig:
    """The scenario's ``trace`` keys (trace=none where the config has none)."""
    return from_mapping(TraceConfig, cfg.get("trace") or {"name": "none"}, "trace")


NO_TASK = (None, None, None)   # (pid, comm, cgroup) of the side an event leaves empty


class SchedRows:
    """Column lists of sched.parquet, with ``window_s`` and ``max_events``
    applied: what both backends append events to (the simulator through
    :class:`SchedTracer`'s hooks, the real host through
    backends/real/schedtrace.py)."""

    def __init__(self, cfg: TraceConfig):
        self.max_events = int(cfg.max_events)
        w = cfg.window_s
        self.t_lo = 0 if w is None else int(round(w[0] * NS))
        self.t_hi = None if w is None else int(round(w[1] * NS))
        self.truncated = False
        self.cols: dict[str, list] = {f.name: [] for f in SCHED}
        self._time = self.cols["time_ns"]

    def keep(self, now: int) -> bool:
        """Whether an event at ``now`` (ns since t0) goes in: inside the
        window and below max_events (reaching it warns once)."""
        if now < self.t_lo or (self.t_hi is not None and now > self.t_hi):
            return False
        if len(self._time) >= self.max_events:
            if not self.truncated:
                self.truncated = True
                print(f"colosim: warning: trace.max_events={self.max_events:,} reached at "
                      f"t = {now / NS:.6f} s: sched.parquet holds the events before it "
                      f"(raise trace.max_events or narrow trace.window_s)", file=sys.stderr)
            return False
        return True

    def append(self, now: int, event: str, cpu: int, prev=NO_TASK, nxt=NO_TASK,
               prev_state=None, orig_cpu=None, cost=None) -> None:
        """One row, after :meth:`keep` said yes; ``prev``/``nxt``: (pid,
        comm, cgroup)."""
        c = self.cols
        c["time_ns"].append(now)
        c["event"].append(event)
        c["cpu"].append(cpu)
        c["prev_state"].append(prev_state)
        c["orig_cpu"].append(orig_cpu)
        c["cost_ns"].append(cost)
        for side, (pid, comm, cgroup) in (("prev", prev), ("next", nxt)):
            c[f"{side}_pid"].append(pid)
            c[f"{side}_comm"].append(comm)
            c[f"{side}_cgroup"].append(cgroup)

    def table(self) -> pa.Table:
        return pa.table({f.name: pa.array(self.cols[f.name], f.type) for f in SCHED},
                        schema=SCHED)


def _task(p, cpu: int) -> tuple:
    """(pid, comm, cgroup) of a simulated Task, or of the idle task (None)."""
    if p is None:
        return 0, f"swapper/{cpu}", None
    return p.pid, p.name, p.tg.name


class SchedTracer(SchedRows):
    """The simulator's hooks: each appends the event the kernel's
    tracepoint would record.

    ``idle_exit`` (of a switch out of idle, the cost model's): the machine
    charges an idle CPU's wake-up to the switch out of idle, as a delay
    before the task runs; the kernel's sched_switch fires in __schedule(),
    after the CPU has left its idle state, so a switch from idle is
    recorded that much later, with the rest of the charged cost as its
    ``cost_ns``."""

    def sched_switch(self, now: int, cpu: int, prev, nxt, cost: int,
                     idle_exit: int = 0) -> None:
        """``prev``/``nxt``: Task or None (the idle task)."""
        if prev is None and nxt is not None:
            now += idle_exit
            cost -= idle_exit
        if self.keep(now):
            state = "R" if prev is None else ("X" if prev.dead else
                                              "S" if prev.sleeping else "R")
            self.append(now, "sched_switch", cpu, _task(prev, cpu), _task(nxt, cpu), state,
                        cost=cost)

    def sched_wakeup(self, now: int, cpu: int, p, new: bool) -> None:
        if self.keep(now):
            self.append(now, "sched_wakeup_new" if new else "sched_wakeup", cpu,
                        nxt=_task(p, cpu))

    def sched_migrate_task(self, now: int, p, orig_cpu: int, dest_cpu: int) -> None:
        if self.keep(now):
            self.append(now, "sched_migrate_task", dest_cpu, nxt=_task(p, dest_cpu),
                        orig_cpu=orig_cpu)

    def cfs_throttle(self, now: int, cpu: int, cgroup: str, throttled: bool) -> None:
        if self.keep(now):
            self.append(now, "throttle_cfs_rq" if throttled else "unthrottle_cfs_rq", cpu,
                        nxt=(None, None, cgroup))
