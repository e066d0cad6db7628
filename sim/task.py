"""Tasks (threads) and the requests they serve."""
from __future__ import annotations

from sim.rq import SchedEntity, nice_to_weight

# what a task does when its CPU burst ends (returned by its owner)
BURST_EXIT = None        # the thread exits
BURST_BLOCK = -1         # sleeps until someone wakes it (machine.wake_up)


class Request:
    """One unit of work whose latency the user cares about."""

    __slots__ = ("function", "cgroup", "arrival", "start", "end", "demand",
                 "pending", "dropped")

    def __init__(self, function: str, cgroup: str, arrival: int, demand: int):
        self.function = function
        self.cgroup = cgroup
        self.arrival = arrival
        self.start = -1           # first instant any of its work ran on a CPU
        self.end = -1
        self.demand = demand      # total CPU demand, ns
        self.pending = 0          # threads still working on it
        self.dropped = False


class Task:
    """task_struct: a thread with its fair-class entity.

    ``owner`` decides what follows each CPU burst: ``owner.burst_done(task)``
    sets ``task.remaining`` for the next burst and returns 0 (run on), a
    sleep in ns, BURST_BLOCK, or BURST_EXIT.  ``owner_priv`` is the owner's
    own state for the task (the machine never reads it), so an owner finds
    it without a lookup per burst.
    """

    __slots__ = ("pid", "name", "tg", "se", "nice", "remaining", "cpu", "cpus_allowed",
                 "last_ran", "last_cpu", "ws_bytes", "owner", "request", "sleeping",
                 "on_cpu", "wait_start", "dead", "custom_slice", "sched_policy", "prio",
                 "rt_time_slice", "touch_mark", "touch_mark_shared", "host", "owner_priv")

    def __init__(self, pid: int, name: str, tg, nice: int, burst_ns: int, ws_bytes: int,
                 owner, request: Request | None = None):
        self.pid = pid
        self.name = name
        self.tg = tg
        self.nice = nice
        self.se = SchedEntity(nice_to_weight(nice), None, None, task=self)
        # init_entity_runnable_average(): a new task counts at full load
        # until PELT learns otherwise
        self.se.runnable_avg = 1.0
        self.remaining = burst_ns
        self.cpu = -1
        self.cpus_allowed = tg.cpus_allowed
        self.last_ran = -1            # when it last stopped running (-1: never ran)
        self.last_cpu = -1            # where it last ran
        self.touch_mark = 0           # its CPU's touched_bytes after its last switch-in
        self.touch_mark_shared = 0    # the host's, then
        self.ws_bytes = ws_bytes
        self.owner = owner
        self.owner_priv = None
        self.request = request
        self.sleeping = True          # not on a run queue
        self.on_cpu = False
        self.wait_start = 0           # when it last became runnable-but-waiting
        self.dead = False
        # sched_setattr(sched_runtime) on SCHED_NORMAL: a requested slice in
        # ns, honoured by EEVDF (None: the scheduler's base slice)
        self.custom_slice: int | None = None
        # the machine sets these (sched_setscheduler); prio < 100 is RT,
        # 100 + 20 + nice a fair task, as in task_struct->prio
        self.sched_policy = "normal"
        self.prio = 120 + nice
        self.rt_time_slice = 0        # RR quantum left, in ticks
        # a task of the host itself, outside the workload (the load generator,
        # kernel threads: sim/loadgen.py, sim/kthreads.py): perf stat -G, which
        # the real backend counts switches with, does not see it, so its
        # switch-outs and waits stay out of the workload's counters
        self.host = False
