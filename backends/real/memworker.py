"""The native memory worker (backends/workers/memworker.c): building it,
running it once and reading its result.

``run_memworker(bytes_=512 << 20, pattern="random", pages="4k")`` returns a
:class:`MemResult`; a page size the host cannot provide raises
:class:`PageSizeUnavailable` with the worker's message (what is missing and
the command that provides it), bad arguments :class:`MemWorkerError`.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from backends.real.build import compile_c
from backends.real.perf import die_with_parent
from backends.real.workers import CFLAGS, WORKERS_DIR

SOURCE = WORKERS_DIR / "memworker.c"
BUILT = WORKERS_DIR / "build" / "memworker"
# memworker.c's exit code for a page size the host cannot provide
EXIT_UNAVAILABLE = 3


class MemWorkerError(RuntimeError):
    pass


class PageSizeUnavailable(MemWorkerError):
    pass


def build_memworker(out: Path = BUILT, source: Path = SOURCE, force: bool = False) -> Path:
    """Compile memworker.c (what `make workers` does) unless the binary is
    newer than the source; atomic like the function worker's build."""
    return compile_c(Path(source), Path(out), CFLAGS, MemWorkerError, "the memory worker",
                     force=force)


@dataclass(frozen=True)
class MemResult:
    pattern: str
    pages: str              # asked for
    page_size: str          # obtained: 4k, 2m, 1g, or mixed (THP, partly huge)
    kernel_page_bytes: int  # smaps KernelPageSize (4096 under THP)
    huge_bytes: int         # bytes of the buffer in huge pages (THP or hugetlb)
    bytes: int
    mapped_bytes: int       # bytes rounded up to whole pages
    step_bytes: int | None  # between consecutive accesses; None for random
    seed: int
    threads: int
    mlp: int                # dependency chains per thread
    gap_ops: int            # core-work iterations after each load
    write_fraction: float
    accesses: int           # all threads'
    elapsed_s: float
    ns_per_access: float    # one thread's wall time per access of its own
    touch_s: float          # fault-in, not measured
    cpu_s: float            # the process's CPU time (fault-in included)
    start_ns: int           # CLOCK_MONOTONIC when the accesses began
    end_ns: int             # ... and when the last thread finished
    stopped: str            # "accesses" (every thread made its own) or "duration"


def run_memworker(bytes_: int, pattern: str = "random", pages: str = "4k",
                  stride: int | None = None, duration_s: float = 1.0,
                  accesses: int | None = None, seed: int = 0, cpus: set[int] | None = None,
                  grace_s: float = 30.0, binary: Path | None = None, threads: int = 1,
                  gap_ops: int = 0, mlp: int = 1, write_fraction: float = 0.0) -> MemResult:
    """One run of the memory worker, bounded by ``duration_s`` (and
    ``accesses`` per thread); the process is killed after ``duration_s +
    grace_s`` whatever happens (fault-in included), and with its parent.
    ``threads``, ``gap_ops``, ``mlp``, ``write_fraction``: the job shape
    (memworker.c's header)."""
    max_s = duration_s + grace_s
    args = [str(binary or build_memworker()), "--bytes", str(int(bytes_)),
            "--pattern", pattern, "--pages", pages, "--duration", repr(float(duration_s)),
            "--seed", str(int(seed)), "--max-seconds", str(max_s),
            "--threads", str(int(threads)), "--gap-ops", str(int(gap_ops)),
            "--mlp", str(int(mlp)), "--write-fraction", repr(float(write_fraction))]
    if stride is not None:
        args += ["--stride", str(int(stride))]
    if accesses is not None:
        args += ["--accesses", str(int(accesses))]

    def pre():
        die_with_parent(signal.SIGKILL)
        if cpus:
            os.sched_setaffinity(0, cpus)
    try:
        r = subprocess.run(args, capture_output=True, text=True, preexec_fn=pre,
                           timeout=math.ceil(max_s) + 5)
    except subprocess.TimeoutExpired:
        raise MemWorkerError(f"memworker did not finish within {max_s:.0f} s") from None
    err = r.stderr.strip()
    if r.returncode == EXIT_UNAVAILABLE:
        raise PageSizeUnavailable(err)
    if r.returncode != 0:
        raise MemWorkerError(err or f"memworker exited with {r.returncode}")
    try:
        return MemResult(**json.loads(r.stdout))
    except (ValueError, TypeError) as e:
        raise MemWorkerError(f"unexpected output from memworker: {r.stdout!r}") from e
