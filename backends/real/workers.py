"""The native function worker (backends/workers/funcworker.c): building it,
and one running worker process per function cgroup.

Protocol (stdin/stdout, one text line per message; times are
CLOCK_MONOTONIC ns, the clock of ``time.monotonic_ns``):

====================================  =====================================
load generator -> worker               worker -> load generator
====================================  =====================================
``P``                                  ``K <pid>``
``R <id> <demand_ns> <threads>``       later ``D <id> <start_ns> <end_ns> <cpu_ns>``
``Q`` (quit now)                       ``E <message>`` (a malformed command)
``G <t0_ns>`` (periodic mode: start)   ``B <thread> <release_ns> <start_ns> <end_ns> <cpu_ns>``
                                       ``X <id> <now_ns>`` (pool mode: queue full, dropped;
                                       accept mode also: backlog full, refused)
====================================  =====================================
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from backends.real.build import compile_c
from backends.real.perf import die_with_parent

WORKERS_DIR = Path(__file__).resolve().parents[1] / "workers"
SOURCE = WORKERS_DIR / "funcworker.c"
BUILT = WORKERS_DIR / "build" / "funcworker"
CFLAGS = ["-O2", "-Wall", "-Wextra", "-pthread"]


class WorkerError(RuntimeError):
    pass


def build_worker(out: Path = BUILT, source: Path = SOURCE, force: bool = False) -> Path:
    """Compile funcworker.c with gcc (what `make workers` does) unless the
    binary is newer than the source.  Atomic: a temp file renamed into place."""
    return compile_c(Path(source), Path(out), CFLAGS, WorkerError, "the native worker",
                     ", or set backend.worker to a built binary", force=force)


def worker_binary(path: str | None = None) -> Path:
    """The worker binary: ``path`` if given (must exist), else the built one."""
    if path:
        p = Path(path)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise WorkerError(f"backend.worker = {path}: not an executable file")
        return p
    return build_worker()


@dataclass(frozen=True)
class Done:
    id: int
    start_ns: int
    end_ns: int
    cpu_ns: int
    # the threads' CPU before their shares began (thread start-up); 0 where
    # the worker does not say (pool mode's reused threads)
    start_cpu_ns: int = 0


@dataclass(frozen=True)
class Burst:
    """One run burst of a periodic thread (a request, as in the simulator)."""
    thread: int
    release_ns: int
    start_ns: int
    end_ns: int
    cpu_ns: int


@dataclass(frozen=True)
class Dropped:
    """A pool-mode request that found every worker busy and the queue full."""
    id: int
    at_ns: int


def request_line(req_id: int, demand_ns: int, threads: int) -> bytes:
    if demand_ns < 1 or threads < 1:
        raise ValueError(f"request {req_id}: demand {demand_ns} ns and threads {threads} "
                         f"must be >= 1")
    return b"R %d %d %d\n" % (req_id, demand_ns, threads)


def parse_line(line: bytes | str):
    """A worker's line as ``Done``, ``Burst``, ``Dropped``, ``("K", pid)`` or ``("E", message)``;
    anything else raises WorkerError."""
    s = line.decode() if isinstance(line, bytes) else line
    s = s.rstrip("\n")
    parts = s.split()
    try:
        if parts and parts[0] == "D" and len(parts) in (5, 6):
            return Done(*(int(p) for p in parts[1:]))
        if parts and parts[0] == "B" and len(parts) == 6:
            return Burst(*(int(p) for p in parts[1:]))
        if parts and parts[0] == "X" and len(parts) == 3:
            return Dropped(int(parts[1]), int(parts[2]))
        if parts and parts[0] == "K" and len(parts) == 2:
            return ("K", int(parts[1]))
    except ValueError:
        pass
    if s.startswith("E "):
        return ("E", s[2:])
    raise WorkerError(f"unexpected line from the worker: {s!r}")


class LineReader:
    """Complete lines from a child's pipe as they arrive, without blocking
    (a partial last line waits for the rest)."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self._buf = b""

    def read(self) -> list[bytes]:
        chunks = []
        while True:
            try:
                b = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not b:
                break
            chunks.append(b)
        if not chunks:
            return []
        data = self._buf + b"".join(chunks)
        *lines, self._buf = data.split(b"\n")
        return lines


# --max-seconds is the last resort behind PDEATHSIG and the cgroup's removal,
# so it must never fire during a run: the run's own time starts only after
# every worker and its counters are up, seconds after the first worker
# (256 functions: ~3 s here, more on a busy host).
STARTUP_MARGIN_S = 60


class WorkerProc:
    """One worker process.  Start it, attach its pid to the function's
    cgroup (``attach(pid)``) and only then send requests: its threads are
    created per request and inherit the cgroup."""

    def __init__(self, binary: Path, name: str, max_seconds: float, attach=None,
                 cpus: set[int] | None = None, nice: int = 0, periodic=None, nices=None,
                 pool=None, accept=None):
        """``periodic`` = (threads, run_us, sleep_us): periodic mode, started
        by :meth:`go`; ``nices``: one nice per periodic thread; ``pool`` =
        (workers, capacity): pool mode (workload=worker_pool); ``accept`` =
        (backlog, batch, window_ns, accept_ns, poll_ns): a listen backlog
        and an accept thread in front of the pool (workload=webserver;
        poll_ns 0: it blocks while nothing waits)."""
        self.name = name
        args = [str(binary), "--max-seconds",
                str(max(1, math.ceil(max_seconds + STARTUP_MARGIN_S)))]
        if periodic is not None:
            args += ["--periodic", *(str(int(x)) for x in periodic)]
            if nices is not None:
                args += ["--nices", ",".join(str(int(n)) for n in nices)]
        if pool is not None:
            args += ["--pool", *(str(int(x)) for x in pool)]
        if accept is not None:
            args += ["--accept", *(str(int(x)) for x in accept)]

        def pre():
            die_with_parent(signal.SIGKILL)   # and --max-seconds, and cgroup removal
            if cpus:
                os.sched_setaffinity(0, cpus)
            if nice:
                os.nice(nice)
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, preexec_fn=pre)
        self.pid = self.proc.pid
        self.fd = self.proc.stdout.fileno()
        self._lines = LineReader(self.fd)
        try:
            if attach is not None:
                attach(self.pid)
            self.send(b"P\n")
            self._handshake()
        except BaseException:
            self.kill()
            raise

    def _handshake(self, timeout_s: float = 5.0) -> None:
        import select
        deadline = __import__("time").monotonic() + timeout_s
        while True:
            for line in self.read_lines():
                msg = parse_line(line)
                if msg == ("K", self.pid):
                    return
                raise WorkerError(f"worker {self.name}: bad handshake {line!r}")
            left = deadline - __import__("time").monotonic()
            if left <= 0 or self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if \
                    self.proc.poll() is not None else ""
                raise WorkerError(f"worker {self.name} did not answer the handshake "
                                  f"(exit {self.proc.poll()}): {err.strip()}")
            select.select([self.fd], [], [], left)

    def go(self, t0_ns: int) -> None:
        """Periodic mode: the threads start at CLOCK_MONOTONIC ``t0_ns``."""
        self.send(b"G %d\n" % t0_ns)

    def send(self, data: bytes) -> None:
        try:
            os.write(self.proc.stdin.fileno(), data)
        except BrokenPipeError as e:
            raise WorkerError(f"worker {self.name} (pid {self.pid}) exited with "
                              f"{self.proc.poll()}") from e

    def read_lines(self) -> list[bytes]:
        """Complete lines available now (non-blocking)."""
        return self._lines.read()

    def quit(self, timeout_s: float = 2.0) -> None:
        if self.proc.poll() is None:
            try:
                self.send(b"Q\n")
            except WorkerError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
        self._close()

    def _close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
