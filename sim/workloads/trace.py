"""Invocation traces: the file format both backends replay, and the
open-loop replay of one in the simulator.

A trace is a table with one row per invocation (request):

| column | type | meaning |
|---|---|---|
| ``function`` | string | function name; one cgroup per function under ``parent_cgroup`` |
| ``arrival_s`` | float64 | arrival time, seconds from the start of the run (>= 0) |
| ``demand_s`` | float64 | total CPU demand of the request, seconds (> 0) |
| ``threads`` | int32 | threads forked for it (>= 1); the demand is split evenly and the request ends when the last one exits |

Files are Parquet (``.parquet``) or CSV with that header (``.csv``).  Rows
may come in any order; the replay sorts them by arrival.  Reading checks
every row and reports the file, the line (CSV) or row (Parquet), and what
is wrong, before anything runs.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from sim.engine import NSEC_PER_SEC
from sim.workloads import request_path
from sim.workloads.base import Workload
from sim.workloads.common import ForkJoin, Replay, function_cgroup
from sim.workloads.functions import FunctionCgroupsConfig
from sim.workloads.tablefile import TableFormat, TraceError, parse_field

__all__ = ["TRACE_SCHEMA", "TRACE_FORMAT", "TraceConfig", "TraceError", "TraceWorkload",
           "make_trace", "read_trace", "write_trace"]

TRACE_SCHEMA = pa.schema([
    ("function", pa.string()),
    ("arrival_s", pa.float64()),
    ("demand_s", pa.float64()),
    ("threads", pa.int32()),
])
TRACE_FORMAT = ("an invocation trace: Parquet or CSV with columns "
                "function (string), arrival_s (float, >= 0), demand_s (float, > 0), "
                "threads (int, >= 1)")


def make_trace(function, arrival_s, demand_s, threads) -> pa.Table:
    """Build a trace table from columns, checking every row."""
    table = pa.table({
        "function": pa.array(function, pa.string()),
        "arrival_s": pa.array(arrival_s, pa.float64()),
        "demand_s": pa.array(demand_s, pa.float64()),
        "threads": pa.array(threads, pa.int32()),
    }, schema=TRACE_SCHEMA)
    _check_rows(table, "trace", first_row=0, what="row")
    return table


def _check_rows(table: pa.Table, where: str, first_row: int, what: str) -> None:
    checks = (
        ("function", lambda a: np.array([bool(s) for s in a], dtype=bool), "empty function name"),
        ("arrival_s", lambda a: np.isfinite(a) & (a >= 0), "arrival_s must be finite and >= 0"),
        ("demand_s", lambda a: np.isfinite(a) & (a > 0), "demand_s must be finite and > 0"),
        ("threads", lambda a: a >= 1, "threads must be >= 1"),
    )
    for column, ok, rule in checks:
        values = table.column(column).to_numpy(zero_copy_only=False)
        if column != "function" and table.column(column).null_count:
            bad = int(np.flatnonzero(table.column(column).is_null().to_numpy(
                zero_copy_only=False))[0])
            raise TraceError(f"{where}, {what} {bad + first_row}: {column} is missing")
        good = ok(values)
        if not good.all():
            bad = int(np.flatnonzero(~good)[0])
            # as_py: numpy's repr would say np.float64(-1.0)
            raise TraceError(f"{where}, {what} {bad + first_row}: {rule} "
                             f"(got {table.column(column)[bad].as_py()!r})")


def _parse_csv_row(row: list[str]) -> tuple:
    name, arrival, demand, threads = row
    return (name, parse_field("arrival_s", arrival, float), parse_field("demand_s", demand, float),
            parse_field("threads", threads, int))


TRACE_FILE = TableFormat(
    noun="trace file", schema=TRACE_SCHEMA, description=TRACE_FORMAT, parse=_parse_csv_row,
    format=lambda r: [r[0], repr(r[1]), repr(r[2]), r[3]], check_rows=_check_rows)
write_trace = TRACE_FILE.write
read_trace = TRACE_FILE.read


@dataclass
class TraceConfig(FunctionCgroupsConfig):
    """``workload.name: trace``: replay ``trace_file`` (or the trace handed in)."""
    trace_file: Optional[str] = None


class TraceWorkload(ForkJoin, Workload):
    """Open-loop replay: each function is a cgroup ``parent_cgroup/<name>``;
    each invocation forks ``threads`` threads at ``arrival_s``.  Generated
    workloads (azure2021, azure2019, random) are replays of the trace their
    ``generate_trace`` makes."""
    CONFIG = TraceConfig
    READS_TRACE = True
    REAL_BACKEND = "functions"
    read_trace_file = staticmethod(read_trace)

    def __init__(self, cfg, machine, recorder, trace: pa.Table | None = None):
        super().__init__(cfg, machine, recorder)
        if trace is None and getattr(cfg, "trace_file", None):
            trace = self.read_trace_file(cfg.trace_file)
        if trace is None:
            raise ValueError(f"workload {cfg.name} replays a trace: set workload.trace_file, "
                             "or pass trace=sim.workloads.trace_for(cfg) to simulate()")
        self.nice = cfg.nice
        self.ws_bytes = cfg.working_set_kb * 1024
        trace = trace.sort_by([("arrival_s", "ascending"), ("function", "ascending")])
        self.trace = trace  # what offline-knowledge controllers may read
        names = trace.column("function").to_pylist()
        arrivals = np.rint(trace.column("arrival_s").to_numpy() * NSEC_PER_SEC).astype(np.int64)
        demands = np.maximum(1, np.rint(trace.column("demand_s").to_numpy() *
                                        NSEC_PER_SEC)).astype(np.int64)
        self.path = request_path.build(cfg, self)
        self.groups = {}
        self.hints = {}   # the CPU each function's dispatcher last forked from
        for i, name in enumerate(sorted(set(names))):
            self.groups[name], self.hints[name] = function_cgroup(machine, cfg, name, i)
            if self.path is not None:
                self.path.add_function(self.groups[name])
        # the invocations to come, one typed entry per column (24 bytes an
        # invocation, against ~160 as a tuple of Python objects): a long
        # replay holds millions (docs/performance.md, "Memory")
        fnames = list(self.groups)
        index = {name: i for i, name in enumerate(fnames)}
        self.replay = Replay(fnames, self.groups, self.hints, _typed("q", arrivals),
                             _typed("q", demands), array("i", (index[n] for n in names)),
                             _typed("i", trace.column("threads").to_numpy()))

    def start(self):
        self.replay.start(self)


def _typed(code: str, values: np.ndarray) -> array:
    """``values`` as an array.array of ``code`` (same item size): Python
    ints on indexing, without a Python object per entry."""
    out = array(code)
    out.frombytes(np.ascontiguousarray(values).tobytes())
    return out


WORKLOAD = TraceWorkload
