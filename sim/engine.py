"""Simulation engine: a SimPy environment on an integer-nanosecond clock.

Everything inside sim/ and policies/ speaks integer nanoseconds; seconds exist
only at the config and results boundary.  Randomness comes from independent,
named streams so that adding a component never perturbs another one's draws.
"""
from __future__ import annotations

import gc
import math
import zlib
from heapq import heappop

import numpy as np
import simpy
from simpy.events import URGENT

from sim.heap import Node, heap_pop, heap_push

NSEC_PER_SEC = 1_000_000_000
NSEC_PER_MSEC = 1_000_000
NSEC_PER_USEC = 1_000
# allocations between young-generation collections while a run executes
GC_YOUNG_THRESHOLD = 100_000


def s_to_ns(seconds: float) -> int:
    return int(round(seconds * NSEC_PER_SEC))


class _Call(Node):
    """A one-shot callback: ``fn(*args)`` at instant ``key`` (ns); ``seq``
    orders callbacks due at the same instant by when they were scheduled."""

    __slots__ = ("fn", "args")


def new_call(t: int, seq: int, fn, args: tuple) -> _Call:
    # __new__ and field stores: compiled, a direct allocation instead of a
    # generic constructor call with its argument tuple
    call = _Call.__new__(_Call)
    call.key = t
    call.seq = seq
    call.fn = fn
    call.args = args
    return call


class RngStream:
    """A named, seeded random stream that draws in batches (numpy calls are
    expensive one at a time, cheap in bulk).  Batches start small and double
    up to 4096, so the hundreds of streams of a dense host that each draw a
    few hundred values do not generate thousands; the values are the same
    for any batch sizes, since each stream draws one kind of variate and
    numpy's Generator produces them one after another."""

    _FIRST_BATCH = 64
    _MAX_BATCH = 4096

    def __init__(self, seed: int, name: str):
        seq = np.random.SeedSequence(entropy=seed, spawn_key=(zlib.crc32(name.encode()),))
        self.gen = np.random.Generator(np.random.PCG64(seq))
        self._batch = self._FIRST_BATCH
        self._exp = iter(())
        self._uni = iter(())
        self._norm = iter(())

    def _next_batch(self) -> int:
        n = self._batch
        self._batch = min(2 * n, self._MAX_BATCH)
        return n

    def exponential(self, mean: float) -> float:
        try:
            return next(self._exp) * mean
        except StopIteration:
            self._exp = iter(self.gen.standard_exponential(self._next_batch()).tolist())
            return next(self._exp) * mean

    def lognormal(self, mean: float, sigma: float) -> float:
        """A lognormal draw with the given mean and shape sigma."""
        try:
            z = next(self._norm)
        except StopIteration:
            self._norm = iter(self.gen.standard_normal(self._next_batch()).tolist())
            z = next(self._norm)
        return mean * math.exp(sigma * z - 0.5 * sigma * sigma)

    def uniform(self) -> float:
        try:
            return next(self._uni)
        except StopIteration:
            self._uni = iter(self.gen.random(self._next_batch()).tolist())
            return next(self._uni)


class Engine:
    """SimPy environment with an int-ns clock and per-component RNG streams.

    The simulator's own callbacks live in the engine's calendar, a binary
    heap of ``_Call`` ordered by (time, scheduling order): the machine
    schedules about two per context switch, and a heap entry that holds its
    time as a C integer costs a fraction of a SimPy event (an event object,
    a queue tuple and Python-level comparisons).  SimPy events and processes
    a component schedules on ``env`` still run, in their own queue, at the
    right instant: ``Engine.run`` takes whichever is due first (SimPy's
    first at equal instants) and keeps ``env``'s clock equal to ``_now``."""

    def __init__(self, seed: int):
        self.env = simpy.Environment(initial_time=0)
        self._now = 0
        self._seq = 0
        self._calendar: list[_Call] = []
        self.seed = int(seed)
        self._streams: dict[str, RngStream] = {}

    @property
    def now(self) -> int:
        return self._now

    def rng(self, name: str) -> RngStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = RngStream(self.seed, name)
        return stream

    def call_later(self, delay_ns: int, fn, *args) -> None:
        self.push(self._now + int(delay_ns), fn, args)

    def call_at(self, t_ns: int, fn, *args) -> None:
        self.push(int(t_ns), fn, args)

    def push(self, t_ns: int, fn, args: tuple) -> None:
        """call_at with the arguments as a tuple (the machine's fast path)."""
        if t_ns < self._now:
            raise ValueError(f"cannot schedule {fn!r} {self._now - t_ns} ns in the past")
        self._seq += 1
        heap_push(self._calendar, new_call(t_ns, self._seq, fn, args))

    def run(self, until_ns: int, progress=None, progress_every_ns: int | None = None) -> int:
        """Run to ``until_ns`` (what is due exactly then is left for later);
        returns the number of events processed.

        The cyclic garbage collector skips the objects that existed before
        the run (gc.freeze) and collects the young generation less often
        meanwhile: the run allocates millions of short-lived objects, which
        would otherwise trigger a collection every 700 allocations."""
        if progress is not None and progress_every_ns:
            self.call_later(0, self._report, progress, until_ns, progress_every_ns, 0)
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, thresholds[1], thresholds[2])
        gc.freeze()
        try:
            events = self._run_until(until_ns)
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        self._now = until_ns
        self.env._now = until_ns
        if progress is not None:
            progress(until_ns, until_ns)
        return events

    def _run_until(self, until_ns: int) -> int:
        env = self.env
        queue = env._queue
        calendar = self._calendar
        events = 0
        while True:
            if queue and (not calendar or queue[0][0] <= calendar[0].key):
                t, priority, _, event = queue[0]
                if t > until_ns or (t == until_ns and priority > URGENT):
                    break
                # Environment.step()
                heappop(queue)
                self._now = t
                env._now = t
                events += 1
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
                continue
            if not calendar or calendar[0].key >= until_ns:
                break
            call = heap_pop(calendar)
            self._now = call.key
            env._now = call.key
            events += 1
            call.fn(*call.args)
        return events

    def _report(self, progress, until_ns: int, every_ns: int, t: int) -> None:
        progress(t, until_ns)
        if t + every_ns < until_ns:
            self.call_later(every_ns, self._report, progress, until_ns, every_ns, t + every_ns)
