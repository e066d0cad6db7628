"""Simulation engine: a SimPy environment on an integer-nanosecond clock.

Everything inside sim/ and policies/ speaks integer nanoseconds; seconds exist
only at the config and results boundary.  Randomness comes from independent,
named streams so that adding a component never perturbs another one's draws.
"""
from __future__ import annotations

import gc
import math
import zlib
from heapq import heappop, heappush

import numpy as np
import simpy
from simpy.events import NORMAL, URGENT

NSEC_PER_SEC = 1_000_000_000
NSEC_PER_MSEC = 1_000_000
NSEC_PER_USEC = 1_000
# allocations between young-generation collections while a run executes
GC_YOUNG_THRESHOLD = 100_000


def s_to_ns(seconds: float) -> int:
    return int(round(seconds * NSEC_PER_SEC))


class _Call:
    """A one-shot callback at a future instant.  It sits in the SimPy
    environment's queue like an event (same (time, priority, id) order), but
    ``Engine.run`` calls it directly instead of going through Event callbacks,
    which is most of the cost of an event."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args):
        self.fn = fn
        self.args = args


class RngStream:
    """A named, seeded random stream that draws in batches (numpy calls are
    expensive one at a time, cheap in bulk)."""

    _BATCH = 4096

    def __init__(self, seed: int, name: str):
        seq = np.random.SeedSequence(entropy=seed, spawn_key=(zlib.crc32(name.encode()),))
        self.gen = np.random.Generator(np.random.PCG64(seq))
        self._exp = iter(())
        self._uni = iter(())
        self._norm = iter(())

    def exponential(self, mean: float) -> float:
        try:
            return next(self._exp) * mean
        except StopIteration:
            self._exp = iter(self.gen.standard_exponential(self._BATCH).tolist())
            return next(self._exp) * mean

    def lognormal(self, mean: float, sigma: float) -> float:
        """A lognormal draw with the given mean and shape sigma."""
        try:
            z = next(self._norm)
        except StopIteration:
            self._norm = iter(self.gen.standard_normal(self._BATCH).tolist())
            z = next(self._norm)
        return mean * math.exp(sigma * z - 0.5 * sigma * sigma)

    def uniform(self) -> float:
        try:
            return next(self._uni)
        except StopIteration:
            self._uni = iter(self.gen.random(self._BATCH).tolist())
            return next(self._uni)


class Engine:
    """SimPy environment with an int-ns clock and per-component RNG streams.

    ``_now`` is the clock (the kernel's rq_clock, in ns); ``Engine.run``
    keeps the SimPy environment's own clock equal to it, so SimPy events
    and processes a component schedules on ``env`` run in the same order
    and time as the machine's callbacks."""

    def __init__(self, seed: int):
        self.env = simpy.Environment(initial_time=0)
        self._now = 0
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
        env = self.env
        heappush(env._queue, (t_ns, NORMAL, next(env._eid), _Call(fn, args)))

    def run(self, until_ns: int, progress=None, progress_every_ns: int | None = None) -> int:
        """Run to ``until_ns``; returns the number of events processed.

        Entries are popped in SimPy's order; a ``_Call`` runs its function,
        anything else (SimPy events and processes a component may use) goes
        through its callbacks as ``Environment.step`` would.  The cyclic
        garbage collector runs with a larger young generation meanwhile
        (the run allocates millions of short-lived acyclic tuples, which
        would otherwise trigger a collection every 700 allocations)."""
        env = self.env
        if progress is not None and progress_every_ns:
            def report(t):
                progress(t, until_ns)
                if t + progress_every_ns < until_ns:
                    self.call_later(progress_every_ns, report, t + progress_every_ns)
            self.call_later(0, report, 0)
        events = 0
        queue = env._queue
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, thresholds[1], thresholds[2])
        gc.freeze()
        try:
            while queue:
                entry = queue[0]
                t = entry[0]
                if t > until_ns or (t == until_ns and entry[1] > URGENT):
                    break
                heappop(queue)
                self._now = t
                env._now = t
                event = entry[3]
                events += 1
                if type(event) is _Call:
                    event.fn(*event.args)
                    continue
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        self._now = until_ns
        env._now = until_ns
        if progress is not None:
            progress(until_ns, until_ns)
        return events
