"""The finished requests of a run: one entry of seven typed columns each.

A long run keeps millions of them, so each is 41 bytes (four int64 times,
two uint32 indices into the names seen, a byte for dropped) rather than a
tuple of Python ints (about 230 bytes); docs/performance.md, "Memory".
Every request passes through ``request_done``, so the module is compiled
(sim/recorder.pxd): the columns are typed memoryviews written in place,
where appending to seven ``array.array``s from interpreted code was a
tenth of a dense run (benchmarks/BASELINE.md, step 10).  Times leave here
in seconds (float64); inside the simulator they are integer nanoseconds.
"""
from __future__ import annotations

import cython
import numpy as np
import pyarrow as pa

from sim.engine import NSEC_PER_SEC

# columns start with room for this many requests and grow by an eighth
# (plus this) when full: ~6 % slack on average, as array.array's
_FIRST_ROWS = 1024


def _grown(column, n: int, rows: int):
    """A copy of the first ``n`` entries of ``column`` with room for ``rows``."""
    old = np.asarray(column)
    new = np.empty(rows, dtype=old.dtype)
    new[:n] = old[:n]
    return new


class Recorder:
    """Collects requests; those arriving before warmup are excluded."""

    def __init__(self, warmup_ns: int):
        self.warmup_ns = warmup_ns
        self.arrived = 0
        # called with every finished request, warm-up included (controllers)
        self.observers: list = []
        self._names: dict[str, int] = {}
        self.n = 0
        self._function = np.empty(_FIRST_ROWS, np.uint32)
        self._cgroup = np.empty(_FIRST_ROWS, np.uint32)
        self._arrival = np.empty(_FIRST_ROWS, np.int64)
        self._start = np.empty(_FIRST_ROWS, np.int64)
        self._end = np.empty(_FIRST_ROWS, np.int64)
        self._demand = np.empty(_FIRST_ROWS, np.int64)
        self._dropped = np.empty(_FIRST_ROWS, np.int8)

    def request_arrived(self, req) -> None:
        if req.arrival >= self.warmup_ns:
            self.arrived += 1

    # n is below every column's length by construction: compiled, no bounds
    # tests (the decorators do nothing in the sources)
    @cython.boundscheck(False)
    @cython.wraparound(False)
    def request_done(self, req) -> None:
        for observe in self.observers:
            observe(req)
        if req.arrival >= self.warmup_ns:
            n = self.n
            if n == self._arrival.shape[0]:
                self._grow(n + (n >> 3) + _FIRST_ROWS)
            names = self._names
            self._function[n] = names.setdefault(req.function, len(names))
            self._cgroup[n] = names.setdefault(req.cgroup, len(names))
            self._arrival[n] = req.arrival
            self._start[n] = req.start
            self._end[n] = req.end
            self._demand[n] = req.demand
            self._dropped[n] = req.dropped
            self.n = n + 1

    def _grow(self, rows: int) -> None:
        n = self.n
        self._function = _grown(self._function, n, rows)
        self._cgroup = _grown(self._cgroup, n, rows)
        self._arrival = _grown(self._arrival, n, rows)
        self._start = _grown(self._start, n, rows)
        self._end = _grown(self._end, n, rows)
        self._demand = _grown(self._demand, n, rows)
        self._dropped = _grown(self._dropped, n, rows)

    def _column(self, column) -> np.ndarray:
        return np.asarray(column)[:self.n]

    def _columns(self) -> list[np.ndarray]:
        """The seven columns, whole, in the order of a row."""
        columns = [self._function, self._cgroup, self._arrival, self._start, self._end,
                   self._demand, self._dropped]
        return [np.asarray(c) for c in columns]

    def nbytes(self) -> int:
        """Bytes the columns hold (their capacity)."""
        return sum([c.nbytes for c in self._columns()])

    @property
    def rows(self) -> list[tuple]:
        """The requests recorded so far as (function, cgroup, arrival,
        start, end, demand, dropped) tuples, times in ns."""
        names = list(self._names)
        return [(names[f], names[c], a, s, e, d, bool(x)) for f, c, a, s, e, d, x in
                zip(*[c[:self.n].tolist() for c in self._columns()])]

    def table(self) -> pa.Table:
        def seconds(column):
            return self._column(column).astype(np.float64) / NSEC_PER_SEC

        def names(column):
            return pa.array(list(self._names), pa.string()).take(pa.array(self._column(column)))
        arrival, start, end = seconds(self._arrival), seconds(self._start), seconds(self._end)
        dropped = self._column(self._dropped).astype(bool)
        start[dropped] = np.nan
        end[dropped] = np.nan
        return pa.table({
            "function": names(self._function),
            "cgroup": names(self._cgroup),
            "arrival_s": arrival,
            "start_s": start,
            "end_s": end,
            "latency_s": end - arrival,
            "cpu_demand_s": seconds(self._demand),
            "dropped": pa.array(dropped, pa.bool_()),
        })
