"""Per-cgroup counts through the ``perf`` tool (Debian: linux-perf): the
run's fallback where perf's Python binding cannot count
(backends/real/taskcount.py), and the rows both give (:class:`PerfSample`).

``perf stat -x, -I <ms> -a -e <events> -G <cgroups>`` counts system-wide but
only while a task of the cgroup runs.  Each event is repeated once per
cgroup (``-e a,b,a,b -G g1,g1,g2,g2``), which every perf since 3.x accepts.
The cgroup names are paths below the perf_event hierarchy (on this project's
hosts perf_event lives on the cgroup2 mount, so the run's tree is mirrored
there; see ``CgroupFS.perf_name``).

CSV line layout (``-x,``), fields in order:

    [interval time s,] value, unit, event, [cgroup,] run time ns, enabled %,
    [metric value, metric unit]

A value of ``<not supported>`` (the PMU has no such event: e.g. cycles in a
VM) or ``<not counted>`` (the event was never scheduled in the interval: for
a cgroup event, no task of the cgroup ran, or the counter was multiplexed
out) is recorded as missing (None; NaN in tables), never as zero.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable

SOFTWARE_EVENTS = ("context-switches", "cpu-migrations", "task-clock")
# stall cycles are the generic events perf maps to the PMU's (where it has them)
HARDWARE_EVENTS = ("instructions", "cycles", "stalled-cycles-frontend", "stalled-cycles-backend")
DEFAULT_EVENTS = SOFTWARE_EVENTS + HARDWARE_EVENTS
MISSING = {"<not supported>", "<not counted>", ""}


class PerfUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class PerfSample:
    time_s: float | None     # end of the interval since perf started (None: not interval mode)
    cgroup: str | None
    event: str
    value: float | None      # None: not supported / not counted
    unit: str
    run_ns: int | None
    enabled_pct: float | None
    status: str = ""         # "", "not supported", "not counted"


def _num(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return None if math.isnan(v) else v


def parse_perf_line(line: str, *, interval: bool = True,
                    has_cgroup: bool = True) -> PerfSample | None:
    """One ``perf stat -x,`` output line, or None for comments, blank lines
    and lines that are not counter rows (warnings perf mixes into its output)."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    f = s.split(",")
    i = 0
    t = None
    if interval:
        t = _num(f[0])
        if t is None:
            return None
        i = 1
    need = 3 + (1 if has_cgroup else 0)
    if len(f) - i < need:
        return None
    raw, unit = f[i].strip(), f[i + 1].strip()
    # An event spelled as a PMU term list may contain commas: cpu/event=0x3c,umask=0/.
    j = i + 2
    event = f[j]
    while event.count("/") % 2 == 1 and j + 1 < len(f):
        j += 1
        event += "," + f[j]
    event = event.strip()
    rest = f[j + 1:]
    cgroup = None
    if has_cgroup:
        if not rest:
            return None
        cgroup, rest = rest[0].strip() or None, rest[1:]
    if not event:
        return None
    if raw in MISSING:
        value, status = None, raw.strip("<>")
    else:
        value = _num(raw)
        if value is None:
            return None
        status = ""
    run_ns = _num(rest[0]) if rest else None
    pct = _num(rest[1]) if len(rest) > 1 else None
    return PerfSample(t, cgroup, event, value, unit,
                      int(run_ns) if run_ns is not None else None, pct, status)


def parse_perf_csv(text: str | Iterable[str], *, interval: bool = True,
                   has_cgroup: bool = True, cgroup_map: dict[str, str] | None = None
                   ) -> list[PerfSample]:
    """Every counter row of ``perf stat -x,`` output.  ``cgroup_map`` renames
    perf's cgroup names (e.g. back to scenario paths)."""
    lines = text.splitlines() if isinstance(text, str) else text
    out = []
    for line in lines:
        s = parse_perf_line(line, interval=interval, has_cgroup=has_cgroup)
        if s is None:
            continue
        if cgroup_map and s.cgroup in cgroup_map:
            s = PerfSample(s.time_s, cgroup_map[s.cgroup], s.event, s.value, s.unit,
                           s.run_ns, s.enabled_pct, s.status)
        out.append(s)
    return out


def totals(samples: Iterable[PerfSample]) -> dict[tuple[str | None, str], float | None]:
    """Sum per (cgroup, event) over intervals; None when no interval counted."""
    acc: dict[tuple[str | None, str], float | None] = {}
    for s in samples:
        key = (s.cgroup, s.event)
        if s.value is None:
            acc.setdefault(key, None)
        else:
            acc[key] = (acc.get(key) or 0.0) + s.value
    return acc


def to_table(samples: Iterable[PerfSample]):
    """pyarrow table: time_s, cgroup, event, value (NaN when missing), unit,
    status."""
    import pyarrow as pa
    samples = list(samples)
    return pa.table({
        "time_s": pa.array([s.time_s for s in samples], pa.float64()),
        "cgroup": pa.array([s.cgroup for s in samples], pa.string()),
        "event": pa.array([s.event for s in samples], pa.string()),
        "value": pa.array([math.nan if s.value is None else s.value for s in samples],
                          pa.float64()),
        "unit": pa.array([s.unit for s in samples], pa.string()),
        "status": pa.array([s.status for s in samples], pa.string()),
    })


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """prctl(PR_SET_PDEATHSIG) in a child (preexec_fn): ``sig`` when the
    thread that forked it dies, even by SIGKILL."""
    import ctypes
    try:
        ctypes.CDLL(None).prctl(1, int(sig), 0, 0, 0)   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def perf_binary() -> str:
    """Path of a working ``perf``, or raise PerfUnavailable saying what is missing."""
    path = shutil.which("perf")
    if path is None:
        raise PerfUnavailable("perf is not installed (Debian/Ubuntu: apt-get install "
                              "linux-perf); perf counters will be missing")
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PerfUnavailable(f"{path} does not run: {e}") from e
    if r.returncode != 0:
        raise PerfUnavailable(f"{path} --version failed: {(r.stderr or r.stdout).strip()}")
    return path


def perf_command(cgroups: list[str], events=DEFAULT_EVENTS, interval_ms: int = 1000,
                 output: str | None = None, perf: str = "perf") -> list[str]:
    if interval_ms < 10:
        raise ValueError(f"interval {interval_ms} ms: perf stat -I needs at least 10 ms")
    if not cgroups:
        raise ValueError("no cgroups to count")
    evs = [e for _ in cgroups for e in events]
    gs = [g for g in cgroups for _ in events]
    cmd = [perf, "stat", "-x,", "-I", str(int(interval_ms)), "-a",
           "-e", ",".join(evs), "-G", ",".join(gs)]
    if output:
        cmd += ["-o", output]
    return cmd


class PerfStat:
    """``perf stat`` in CSV interval mode over cgroups, from start() to stop().

    ``cgroups`` maps perf cgroup names (paths below the perf_event mount) to
    the labels samples should carry (e.g. scenario paths)."""

    def __init__(self, cgroups: dict[str, str] | list[str], events=DEFAULT_EVENTS,
                 interval_ms: int = 1000):
        self.cgroups = dict(cgroups) if isinstance(cgroups, dict) else {g: g for g in cgroups}
        self.events = tuple(events)
        self.interval_ms = interval_ms
        self._proc: subprocess.Popen | None = None
        self._fd: int | None = None

    def start(self) -> None:
        perf = perf_binary()
        # an unlinked temp file that perf writes through the inherited fd:
        # nothing is left in /tmp however colosim ends
        fd, path = tempfile.mkstemp(prefix="colosim-perf-", suffix=".csv")
        os.unlink(path)
        self._fd = fd
        cmd = perf_command(list(self.cgroups), self.events, self.interval_ms,
                           f"/dev/fd/{fd}", perf)
        # perf runs outside the run's cgroups (it must not be counted), so
        # cgroup removal cannot kill it: it dies with the thread that started it
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True, pass_fds=(fd,),
                                          preexec_fn=lambda: die_with_parent(signal.SIGINT))
        except BaseException:
            os.close(fd)
            self._fd = None
            raise

    def counting_since(self, timeout_s: float = 3.0, poll_s: float = 0.0005) -> int | None:
        """CLOCK_MONOTONIC (ns) of perf's time zero (its interval times count
        from when it enabled its counters, some ms after start()), from when
        its first interval line appears in the file, less the time the line
        gives; known to ``poll_s`` plus perf's write (well under 1 ms here).
        Waits for that line (about one interval); None if it does not come
        within ``timeout_s`` (perf exited, or is very late)."""
        assert self._fd is not None and self._proc is not None
        end = time.monotonic_ns() + int(timeout_s * 1e9)
        seen = os.fstat(self._fd).st_size     # lines written before now are of no use:
        while (now := time.monotonic_ns()) < end and self._proc.poll() is None:
            size = os.fstat(self._fd).st_size  # a line is timed when it appears
            if size > seen:
                text = os.pread(self._fd, size - seen, seen).decode(errors="replace")
                times = [_num(line.split(",", 1)[0]) for line in text.splitlines()
                         if "," in line and not line.startswith("#")]
                times = [t for t in times if t is not None]
                if times:
                    return now - int(max(times) * 1e9)
                seen = size
            time.sleep(poll_s)
        return None

    def stop(self, timeout_s: float = 5.0) -> list[PerfSample]:
        """SIGINT perf (it prints the last partial interval), parse its CSV."""
        if self._proc is None:
            raise RuntimeError("PerfStat.stop() before start()")
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        assert self._fd is not None
        fd, self._fd = self._fd, None
        try:
            chunks, off = [], 0
            while True:
                b = os.pread(fd, 1 << 20, off)
                if not b:
                    break
                chunks.append(b)
                off += len(b)
            text = b"".join(chunks).decode(errors="replace")
        finally:
            os.close(fd)
        samples = parse_perf_csv(text, cgroup_map=self.cgroups)
        if not samples:
            raise PerfUnavailable(f"perf stat counted nothing (exit {proc.returncode}): "
                                  f"{(err or '').strip()[-500:]}")
        return samples

    def __enter__(self) -> "PerfStat":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self.samples = self.stop()
