"""``workload.request_path: rdhashd``: a function served as resctl-demo's
rd-hashd serves its requests (facebookexperimental/resctl-demo,
rd-hashd/src/hasher.rs and workqueue.rs), the program the LAGS benchmark
ran once per function (the LAGS paper, §3).

Per function cgroup:

- one dispatch thread (``DispatchThread::run``) blocks until a request
  arrives or a worker reports a completion; each costs it ``dispatch_us``
  of CPU, then it blocks again.  A request arriving while it works waits in
  its channel.  rd-hashd measures a request's latency from the dispatcher
  queueing it to the dispatcher receiving its completion, so a request
  ends when the dispatcher has handled the completion.
- a worker pool (``WorkQueue``): the dispatcher hands each of the request's
  ``threads_per_request`` parts to an idle worker, most recently idle first
  (the idle list is LIFO), or spawns one when none is idle; a worker blocks
  on its own channel between requests.
- a worker's request (``HasherThread::run``): sleep_dur/3, sleep_dur/3,
  the CPU work, sleep_dur/3, then the completion to the dispatcher.
  ``sleep_dur`` is drawn per request from rd-hashd's clamped normal:
  N(sleep_mean_s, sleep_stdev_ratio x sleep_mean_s), redrawn uniformly on
  [0, 2 x sleep_mean_s] if it falls outside (``ClampedNormal``).  The
  paper replaced rd-hashd's file and anonymous-memory hashing with "a
  simple CPU-bound Fibonacci computation" and does not say whether the
  sleeps stayed; ``sleep_mean_s: 0`` drops them (rd-hashd's own default is
  20 ms, ``Params::sleep_mean``).

Each sleep is a block and a timer wake-up, so one request is
1 + (3 if sleeping) + 1 wake-ups: the worker's hand-off, its three sleeps,
and the dispatcher's completion.  Between two sleeps the worker runs only
the nanosleep return and re-entry, below this model's resolution
(``SYSCALL_NS``).

Not modelled: the main thread's 1 s statistics tick, the idle-worker reaper
(60 s), the logger thread (only with --log-dir), page-cache and anonymous
memory traffic (replaced by the CPU-bound computation).
"""
from __future__ import annotations

import math
from collections import deque

from sim.engine import NSEC_PER_SEC, NSEC_PER_USEC
from sim.task import BURST_BLOCK

# rd-hashd-intf/src/params.rs defaults
SLEEP_MEAN_S = 0.020
SLEEP_STDEV_RATIO = 0.33
# CPU between two back-to-back nanosleeps: the syscall's return and re-entry
# (~1 us on current x86); any positive value gives the same switch count
SYSCALL_NS = 1000


class _Function:
    __slots__ = ("tg", "dispatcher", "inbox", "busy", "idle", "spawned")

    def __init__(self, tg):
        self.tg = tg
        self.dispatcher = None
        self.inbox = deque()      # ("req" | "done", request) the dispatcher has yet to handle
        self.busy = False         # the dispatcher is running an inbox item
        self.idle = []            # idle workers, most recently idle last (LIFO)
        self.spawned = 0


class _Part:
    """A worker's share of one request, as HasherThread::run does it.  With
    a sleep (``third``: a third of sleep_dur) it runs four CPU bursts, each
    of the first three followed by a third of the sleep: a syscall, a
    syscall, its ``part`` of the hashing, a last syscall; without, the
    hashing alone.  ``step`` is the burst running; ``fn`` the function.
    (One object per part, not a list of tuples: an overloaded host keeps
    thousands in flight, and the cyclic collector scans each new object
    once.)"""

    __slots__ = ("fn", "req", "part", "third", "step")

    def __init__(self, fn: _Function, req, part: int, third: int):
        self.fn = fn
        self.req = req
        self.part = part
        self.third = third
        self.step = 0

    def cpu(self, step: int) -> int:
        """The CPU demand of burst ``step``."""
        return self.part if step == (2 if self.third else 0) else SYSCALL_NS

    def sleep(self, step: int) -> int:
        """The sleep after burst ``step`` (0: the part is done)."""
        return self.third if step < 3 else 0


class HashdPath:
    """rd-hashd's dispatch thread and worker pool in front of a ForkJoin
    workload's functions."""

    # the closed loop's next request is issued by the dispatcher as it
    # handles a completion (launch_hashers), in the same burst
    admits_inline = True

    def __init__(self, workload, cfg, dispatch_us: float):
        self.wl = workload
        self.machine = workload.machine
        self.engine = workload.machine.engine
        sleep_mean = cfg.get("sleep_mean_s")
        sleep_mean = SLEEP_MEAN_S if sleep_mean is None else float(sleep_mean)
        ratio = cfg.get("sleep_stdev_ratio")
        ratio = SLEEP_STDEV_RATIO if ratio is None else float(ratio)
        for key, value in (("dispatch_us", dispatch_us), ("sleep_mean_s", sleep_mean),
                           ("sleep_stdev_ratio", ratio)):
            if not value >= 0:
                raise ValueError(f"workload.{key} = {value}: must be >= 0")
        self.dispatch_ns = max(1, int(round(dispatch_us * NSEC_PER_USEC)))
        self.sleep_mean_ns = sleep_mean * NSEC_PER_SEC
        self.sleep_sd_ns = ratio * self.sleep_mean_ns
        self.rng = self.engine.rng("workload/rdhashd/sleep")
        # function cgroup -> _Function; a dispatcher's owner_priv is its
        # _Function, a busy worker's its _Part (None while it idles)
        self.functions: dict = {}

    def add_function(self, tg) -> None:
        self.functions[tg] = _Function(tg)

    # ------------------------------------------------------------------
    # the dispatch thread
    def start(self, req, tg, hint: int) -> int:
        return self._post(self.functions[tg], ("req", req), hint)

    def _post(self, fn: _Function, item, hint: int) -> int:
        """Put ``item`` in the dispatcher's channel, waking it if it blocks."""
        fn.inbox.append(item)
        d = fn.dispatcher
        m = self.machine
        if d is None:
            d = fn.dispatcher = m.new_task(f"{fn.tg.name}/dispatch", fn.tg, self.wl.nice,
                                           self.dispatch_ns, 0, self)
            d.owner_priv = fn
            fn.busy = True
            m.wake_up_new_task(d, hint)
        elif not fn.busy:
            fn.busy = True
            d.remaining = self.dispatch_ns
            m.wake_up(d)
        return d.cpu

    def _dispatched(self, d) -> int:
        fn = d.owner_priv
        kind, req = fn.inbox.popleft()
        if kind == "req":
            self._launch(fn, req, d.cpu)
        else:
            req.end = self.engine.now
            self.wl.request_done(req)    # may post the next request (closed loop)
        if fn.inbox:
            d.remaining = self.dispatch_ns
            return 0
        fn.busy = False
        return BURST_BLOCK

    def _launch(self, fn: _Function, req, hint: int) -> None:
        """WorkQueue::queue() for each part of ``req``: an idle worker, most
        recently idle first, else a new one."""
        m = self.machine
        wl = self.wl
        share, extra = divmod(req.demand, req.pending)
        third = self._sleep_third()
        for j in range(req.pending):
            # HasherThread::run with the hashing replaced by the CPU demand
            plan = _Part(fn, req, max(1, share + (extra if j == 0 else 0)), third)
            if fn.idle:
                w = fn.idle.pop()
                w.request = req
                w.remaining = plan.cpu(0)
                w.owner_priv = plan
                m.wake_up(w)
            else:
                w = m.new_task(f"{fn.tg.name}/worker-{fn.spawned}", fn.tg, wl.nice,
                               plan.cpu(0), wl.ws_bytes, self, req)
                fn.spawned += 1
                w.owner_priv = plan
                m.wake_up_new_task(w, hint)
                hint = w.cpu

    def _sleep_third(self) -> int:
        """A third of this request's sleep_dur (ClampedNormal), in ns."""
        mean = self.sleep_mean_ns
        if mean <= 0:
            return 0
        u1, u2 = self.rng.uniform(), self.rng.uniform()
        x = mean + self.sleep_sd_ns * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2 * math.pi * u2)
        if not 0.0 <= x <= 2.0 * mean:
            x = self.rng.uniform() * 2.0 * mean
        return max(1, int(x / 3))

    # ------------------------------------------------------------------
    # workers
    def burst_done(self, task):
        priv = task.owner_priv
        if type(priv) is _Function:
            return self._dispatched(task)
        plan = priv
        fn = plan.fn
        i = plan.step
        sleep = plan.sleep(i)
        if sleep:
            plan.step = i + 1
            task.remaining = plan.cpu(i + 1)
            return sleep
        # the request's part is done: report it to the dispatcher
        req = plan.req
        task.owner_priv = None
        task.request = None
        fn.idle.append(task)
        req.pending -= 1
        if req.pending == 0:
            self._post(fn, ("done", req), task.cpu)
        return BURST_BLOCK
