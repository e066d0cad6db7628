"""The memory a simulated run needs, estimated from its config before
anything is built, so that scenarios.validate can refuse a run this
machine cannot hold instead of letting it swap or be killed half-way.

The estimate is a base plus a cost per object the run keeps:

- a cgroup (a function, a container, a thread group) holds a task_group
  and, on every CPU, a cfs_rq and a sched_entity: ``CGROUP_BYTES`` plus
  ``CGROUP_CPU_BYTES`` per CPU;
- a thread alive for the whole run: ``THREAD_BYTES``;
- a request: its record and its requests.parquet row, ``REQUEST_BYTES``.

Measured with ``benchmarks/footprint.py``: peak RSS (getrusage ru_maxrss)
of a fresh process running one ``simulate()`` of each point, CPython 3.11
with the compiled core, on the 2-CPU development VM:

| run | peak RSS | per object |
|---|---|---|
| poisson, 1 function, ~no requests, 1 and 16 CPUs | 133 MB both | the base |
| 2,000 functions, 1 CPU / 16 CPUs | 151 / 165 MB | 8.6 / 15.7 KB |
| 10,000 functions, 4 CPUs | 230 MB | 9.7 KB |
| 200,000 / 500,000 requests, 1 function | 170 / 222 MB | 0.19 / 0.18 KB |
| 20,000 periodic threads | 164 MB | 1.5 KB |

so a cgroup costs about 8 KB + 0.5 KB per CPU (requests re-measured on
2026-11-26 after the records became typed columns: 0.43 KB before; what
a run holds while it goes: docs/performance.md, "Memory").  The constants below round
the measurements up; the estimate is what a run needs at least.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

BASE_BYTES = 140 << 20          # the interpreter, numpy, pyarrow and the simulator
CGROUP_BYTES = 9 << 10
CGROUP_CPU_BYTES = 512
THREAD_BYTES = 1600
REQUEST_BYTES = 200


@dataclass(frozen=True)
class Term:
    """One kind of object of a run: how many, and the config key (relative
    to the workload node) that sets their number."""
    kind: str        # "cgroup", "thread" or "request"
    count: float
    key: str


PER_OBJECT = {"cgroup": CGROUP_BYTES, "thread": THREAD_BYTES, "request": REQUEST_BYTES}


def term_bytes(term: Term, cpus: int) -> float:
    per = PER_OBJECT[term.kind] + (CGROUP_CPU_BYTES * cpus if term.kind == "cgroup" else 0)
    return term.count * per


def estimate_bytes(terms: list[Term], cpus: int) -> float:
    """The memory a run of these objects on ``cpus`` CPUs needs, in bytes."""
    return BASE_BYTES + sum(term_bytes(t, cpus) for t in terms)


def available_bytes() -> int | None:
    """Memory this machine can give a run without swapping: MemAvailable
    of /proc/meminfo (Linux), else the physical memory; None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
