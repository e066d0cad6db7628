"""Simulation engine: a SimPy environment on an integer-nanosecond clock.

Everything inside sim/ and policies/ speaks integer nanoseconds; seconds exist
only at the config and results boundary.  Randomness comes from independent,
named streams so that adding a component never perturbs another one's draws.

``Engine`` is a ``simpy.Environment``: a workload or a controller may be a
SimPy process (``env.process``, ``yield env.timeout(ns)``, events,
``simpy.Resource``) next to the kernel model's plain callbacks
(``call_at``, ``call_later``, ``push``).  Both kinds live in one calendar,
a binary heap of ``_Call`` (sim/heap.py), on one clock, ordered by

1. time (ns);
2. SimPy priority: URGENT (a process's start, an interrupt) before NORMAL
   (everything else: timeouts, succeeded events, and every callback);
3. scheduling order.

which is SimPy's own rule (time, priority, event id) with the callbacks as
NORMAL events sharing the event ids.  A run without SimPy processes orders
its callbacks by (time, scheduling order), as before SimPy events joined the
calendar.
"""
from __future__ import annotations

import gc
import math
import zlib
from contextlib import contextmanager

import numpy as np
import simpy
from simpy.core import BoundClass, EmptySchedule, Infinity, StopSimulation
from simpy.events import NORMAL, URGENT, Event

from sim.heap import Heap, Node, NodeStack

NSEC_PER_SEC = 1_000_000_000
NSEC_PER_MSEC = 1_000_000
NSEC_PER_USEC = 1_000
# allocations between young-generation collections while a run executes
GC_YOUNG_THRESHOLD = 100_000
# a SimPy priority p schedules its event (p - NORMAL) strides from NORMAL in
# the calendar's sequence numbers: URGENT events precede every NORMAL one due
# at the same instant, since no run schedules 2**56 calls
PRIORITY_STRIDE = 1 << 56
# run(until=None) or run(until=event): no time limit
NO_LIMIT_NS = (1 << 63) - 1
_quiet_depth = [0]            # how many quiet_gc() blocks are open


@contextmanager
def quiet_gc():
    """The cyclic garbage collector while a simulation runs and reports:
    what exists at entry, and at the exit of a nested block, is frozen
    (gc.freeze: never traversed again), and the young generation is
    collected every GC_YOUNG_THRESHOLD allocations instead of 700.  A run
    allocates millions of short-lived objects and creates almost no
    cyclic garbage (a few dozen objects in a 10 s run), so collections
    only ever found live objects: scanning the run's survivors once more
    while its tables were built cost a tenth of a dense run.  The outermost
    exit unfreezes, so the run's garbage is collected afterwards."""
    outer = _quiet_depth[0] == 0
    if outer:
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, thresholds[1], thresholds[2])
    gc.freeze()
    _quiet_depth[0] += 1
    try:
        yield
    finally:
        _quiet_depth[0] -= 1
        if outer:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        else:
            gc.freeze()


def s_to_ns(seconds: float) -> int:
    return int(round(seconds * NSEC_PER_SEC))


class _Call(Node):
    """A one-shot callback: ``fn(*args)`` at instant ``key`` (ns); ``seq``
    orders callbacks due at the same instant (module docstring).  A
    subclass may run typed code instead (``fire``, a C virtual method when
    compiled): the machine's per-CPU timers carry their run queue and
    generation as C fields, with no argument tuple, bound method or
    boxed integers per event (sim/machine.py ``RqTimer``).  Once due and
    read, a call is kept for reuse by whoever made it (one allocation and
    release per event otherwise): a plain one on ``calendar``'s spares."""

    __slots__ = ("fn", "args")

    def fire(self, calendar: Calendar) -> int:
        fn, args = self.fn, self.args
        self.fn = None
        self.args = None
        calendar._spare_calls.push(self)     # read: reusable from here
        fn(*args)
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn!r})"


def new_call(fn, args: tuple, spare: NodeStack) -> _Call:
    """A call of ``fn(*args)``, a spare one if there is one (its key and
    sequence number are the scheduler's to set)."""
    call = spare.pop()
    if call is None:
        # __new__ and field stores: compiled, a direct allocation instead
        # of a generic constructor call with its argument tuple
        call = _Call.__new__(_Call)
    call.fn = fn
    call.args = args
    return call


class _Batch:
    """Values of one variate drawn in bulk (by the generator's method
    ``draw``) and handed out one at a time: ``values[i]`` is the next."""

    __slots__ = ("draw", "values", "i")

    def __init__(self, draw: str):
        self.draw = draw
        self.values = []
        self.i = 0


class RngStream:
    """A named, seeded random stream that draws in batches (numpy calls are
    expensive one at a time, cheap in bulk).  Batches start small and double
    up to 4096, so the hundreds of streams of a dense host that each draw a
    few hundred values do not generate thousands; the values are the same
    for any batch sizes, since each stream draws one kind of variate and
    numpy's Generator produces them one after another.  Compiled
    (sim/engine.pxd), a draw is an index into the batch's list: no
    iterator, no exception at the batch's end."""

    _FIRST_BATCH = 64
    _MAX_BATCH = 4096

    def __init__(self, seed: int, name: str):
        seq = np.random.SeedSequence(entropy=seed, spawn_key=(zlib.crc32(name.encode()),))
        self.gen = np.random.Generator(np.random.PCG64(seq))
        self._batch = self._FIRST_BATCH
        self._exp = _Batch("standard_exponential")
        self._uni = _Batch("random")
        self._norm = _Batch("standard_normal")

    def _next(self, batch: _Batch) -> float:
        """The next value of ``batch``, drawing a new batch when it is used up."""
        i = batch.i
        if i == len(batch.values):
            n = self._batch
            self._batch = min(2 * n, self._MAX_BATCH)
            batch.values = getattr(self.gen, batch.draw)(n).tolist()
            i = 0
        batch.i = i + 1
        return batch.values[i]

    def exponential(self, mean: float) -> float:
        return self._next(self._exp) * mean

    def lognormal(self, mean: float, sigma: float) -> float:
        """A lognormal draw with the given mean and shape sigma."""
        z = self._next(self._norm)
        return mean * math.exp(sigma * z - 0.5 * sigma * sigma)

    def uniform(self) -> float:
        return self._next(self._uni)

    def quantile_draw(self, probs, values) -> float:
        """A draw from the distribution whose quantiles at ``probs`` (0 ...
        1, increasing) are ``values`` (non-decreasing), linear between them."""
        return inverse_cdf(probs, values, self.uniform())


def inverse_cdf(probs, values, u: float) -> float:
    """The value at cumulative probability ``u`` of the distribution whose
    quantiles at ``probs`` (from 0 to 1) are ``values``, interpolated
    linearly."""
    i = 1
    while i < len(probs) - 1 and u > probs[i]:
        i += 1
    lo, hi = values[i - 1], values[i]
    return lo + (hi - lo) * (u - probs[i - 1]) / (probs[i] - probs[i - 1])


def process_event(event: Event) -> None:
    """SimPy's ``Environment.step`` once the event is due: run its callbacks
    (resuming the processes waiting for it), and crash the run with a copy
    of a failed event's exception unless it was defused."""
    callbacks, event.callbacks = event.callbacks, None
    try:
        for callback in callbacks:
            callback(event)
    except StopSimulation:
        # run(until=event) stops here: the remaining callbacks run first
        # when the simulation resumes, as in SimPy
        event.callbacks = callbacks[callbacks.index(callback) + 1:]
        event.env.schedule(event, URGENT - 1)
        raise
    # _ok and _defused, as SimPy's own step() reads them: the public ok and
    # defused are Python properties, a fifth of the cost of an event
    if not event._ok and not hasattr(event, "_defused"):
        exc = type(event.value)(*event.value.args)
        exc.__cause__ = event.value
        raise exc


class Calendar:
    """The clock (``_now``, ns) and the calendar of pending ``_Call``s.

    Compiled (sim/engine.pxd), the machine and the kernel policies read the
    clock and push callbacks at C speed through this class's typed fields;
    the machine schedules about two calls per context switch, and a heap
    entry that holds its time as a C integer costs a fraction of a SimPy
    queue entry (a tuple compared by Python-level rich comparisons).
    ``Engine`` adds the SimPy environment on top (a compiled class cannot
    inherit from a Python one, the other way round is fine)."""

    def __init__(self):
        self._now = 0
        self._seq = 0
        self._calendar = Heap()       # of _Call
        self._spare_calls = NodeStack()

    @property
    def now(self) -> int:
        return self._now

    def call_later(self, delay_ns: int, fn, *args) -> None:
        self.push(self._now + int(delay_ns), fn, args)

    def call_at(self, t_ns: int, fn, *args) -> None:
        self.push(int(t_ns), fn, args)

    def push(self, t_ns: int, fn, args: tuple) -> None:
        """call_at with the arguments as a tuple (the machine's fast path)."""
        self.push_call(t_ns, new_call(fn, args, self._spare_calls))

    def push_call(self, t_ns: int, call: _Call) -> None:
        """Schedule ``call`` (its own fields set) at ``t_ns``."""
        if t_ns < self._now:
            raise ValueError(f"cannot schedule {call!r} {self._now - t_ns} ns in the past")
        self._seq += 1
        call.key = t_ns
        call.seq = self._seq
        self._calendar.push(call)

    def schedule(self, event: Event, priority: int = NORMAL, delay: int = 0) -> None:
        """simpy.Environment.schedule: process ``event`` ``delay`` ns from
        now (SimPy calls this for every triggered event and timeout)."""
        delay_ns = int(delay)
        if delay_ns != delay:
            raise ValueError(f"SimPy delay {delay!r}: the engine's clock counts whole "
                             f"nanoseconds (round the delay)")
        self._seq += 1
        call = new_call(process_event, (event,), self._spare_calls)
        call.key = self._now + delay_ns
        call.seq = self._seq + (priority - NORMAL) * PRIORITY_STRIDE
        self._calendar.push(call)

    def _run_until(self, until_ns: int) -> int:
        """Run every call due before ``until_ns``; the number run."""
        calendar = self._calendar
        events = 0
        while calendar.n:
            call = calendar.items[0]
            if call.key >= until_ns:
                break
            calendar.pop()
            self._now = call.key
            events += 1
            call.fire(self)
        return events


class Engine(Calendar, simpy.Environment):
    """The simulation's ``simpy.Environment``: int-ns clock, one calendar
    for SimPy events and the kernel model's callbacks (module docstring),
    and per-component RNG streams.

    SimPy's ``schedule``, ``peek``, ``step`` and ``run`` are overridden to
    use the calendar; SimPy's own queue (``Environment._queue``) stays empty.
    A SimPy delay must be a whole number of nanoseconds."""

    def __init__(self, seed: int):
        Calendar.__init__(self)
        simpy.Environment.__init__(self, initial_time=0)
        # SimPy binds its event classes (env.timeout, env.process, ...) to
        # the instance once, but finds only those of the instance's own class
        # (BoundClass.bind_early): without this, every env.timeout(...) of a
        # subclass's instance would build a bound method
        for name, attr in vars(simpy.Environment).items():
            if type(attr) is BoundClass:
                setattr(self, name, getattr(self, name))
        self.seed = int(seed)
        self._streams: dict[str, RngStream] = {}

    def rng(self, name: str) -> RngStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = RngStream(self.seed, name)
        return stream

    # --- simpy.Environment (schedule: Calendar) ----------------------------
    def peek(self) -> int | float:
        """The time of the next call or event (SimPy's ``Infinity`` if none)."""
        return self._calendar.items[0].key if self._calendar.n else Infinity

    def step(self) -> None:
        """Run the next call or event (``EmptySchedule`` if there is none)."""
        if not self._calendar.n:
            raise EmptySchedule
        call = self._calendar.pop()
        self._now = call.key
        call.fire(self)

    def run(self, until=None, progress=None, progress_every_ns: int | None = None):
        """Run until ``until``:

        - a time (ns): every call and event due before it runs (what is due
          exactly then is left for later), then the clock reads ``until``;
          returns the number of calls and events run.  ``progress(t, until)``,
          if given, is called every ``progress_every_ns`` and at the end.
        - a SimPy event: until it has been processed; returns its value
          (SimPy's ``run(until=event)``).
        - None: until nothing is left to run; returns the number run.

        The run is a quiet_gc() block."""
        stop = isinstance(until, Event)
        if stop:
            if until.callbacks is None:
                return until.value
            until.callbacks.append(StopSimulation.callback)
        until_ns = NO_LIMIT_NS if until is None or stop else int(until)
        if until_ns < self._now:
            raise ValueError(f"run(until={until!r}): the clock already reads {self._now} ns")
        if progress is not None and progress_every_ns:
            if until_ns == NO_LIMIT_NS:
                raise ValueError("run(progress=...) needs a time for until")
            self.call_later(0, self._report, progress, until_ns, progress_every_ns, 0)
        try:
            with quiet_gc():
                events = self._run_until(until_ns)
        except StopSimulation as stopped:
            return stopped.args[0]
        if stop:
            raise RuntimeError(f"no calls or events left but run(until={until!r}) "
                               f"was not processed")
        if until_ns != NO_LIMIT_NS:
            self._now = until_ns
            if progress is not None:
                progress(until_ns, until_ns)
        return events

    def _report(self, progress, until_ns: int, every_ns: int, t: int) -> None:
        progress(t, until_ns)
        if t + every_ns < until_ns:
            self.call_later(every_ns, self._report, progress, until_ns, every_ns, t + every_ns)
