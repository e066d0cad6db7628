"""Simulation engine: a SimPy environment on an integer-nanosecond clock.

Everything inside sim/ and policies/ speaks integer nanoseconds; seconds exist
only at the config and results boundary.  Randomness comes from independent,
named streams so that adding a component never perturbs another one's draws.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import simpy
from simpy.events import NORMAL, Event

NSEC_PER_SEC = 1_000_000_000
NSEC_PER_MSEC = 1_000_000
NSEC_PER_USEC = 1_000


def s_to_ns(seconds: float) -> int:
    return int(round(seconds * NSEC_PER_SEC))


class _Call(Event):
    """A one-shot callback at a future instant (cheaper than a process)."""

    def __init__(self, env, delay, fn, args):
        self.env = env
        self.callbacks = [self._fire]
        self._value = None
        self._ok = True
        self._fn = fn
        self._args = args
        env.schedule(self, NORMAL, delay)

    def _fire(self, _event):
        self._fn(*self._args)


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
    """SimPy environment with an int-ns clock and per-component RNG streams."""

    def __init__(self, seed: int):
        self.env = simpy.Environment(initial_time=0)
        self.seed = int(seed)
        self._streams: dict[str, RngStream] = {}

    @property
    def now(self) -> int:
        return self.env._now

    def rng(self, name: str) -> RngStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = RngStream(self.seed, name)
        return stream

    def call_later(self, delay_ns: int, fn, *args) -> None:
        if delay_ns < 0:
            raise ValueError(f"cannot schedule {fn!r} {delay_ns} ns in the past")
        _Call(self.env, int(delay_ns), fn, args)

    def call_at(self, t_ns: int, fn, *args) -> None:
        self.call_later(t_ns - self.env._now, fn, *args)

    def run(self, until_ns: int, progress=None, progress_every_ns: int | None = None) -> int:
        """Run to ``until_ns``; returns the number of events processed."""
        env = self.env
        if progress is not None and progress_every_ns:
            def report(t):
                progress(t, until_ns)
                if t + progress_every_ns < until_ns:
                    self.call_later(progress_every_ns, report, t + progress_every_ns)
            self.call_later(0, report, 0)
        events = 0
        step = env.step
        stop = simpy.Event(env)
        stop._ok = True
        stop._value = None
        env.schedule(stop, simpy.events.URGENT, until_ns - env._now)
        queue = env._queue
        try:
            while queue:
                if queue[0][3] is stop:
                    break
                step()
                events += 1
        except simpy.core.EmptySchedule:
            pass
        env._now = until_ns
        if progress is not None:
            progress(until_ns, until_ns)
        return events
