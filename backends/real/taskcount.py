"""Per-cgroup counts through perf's Python binding (linux-perf's module
``perf``, linked into the venv by ``make perf-binding``): the real run's
default counting path; ``perf stat -G`` (backends/real/perf.py) is the
fallback (docs/real-backend.md, "Counting").

- **Per task, summed per cgroup.** perf 6.1's ``evsel.open`` takes CPUs,
  threads, ``group`` and ``inherit`` but no cgroup (perf_event_open's
  ``PERF_FLAG_PID_CGROUP``), so each of the run's tasks gets its own
  counters, opened with ``inherit`` when it is in its cgroup for good
  (every thread or child it makes later inherits the cgroup and the
  counters: the kernel adds the children's counts to the parent's, also
  of children that exited, perf_event_read_value), one per event on any
  CPU (cpu -1, as ``perf stat -p``).  :meth:`TaskCounters.read_now` reads
  them all and sums each cgroup's tasks (:func:`interval_counts`) into the
  :class:`~backends.real.perf.PerfSample` rows ``perf stat -I`` gives, so
  the tables are built alike.
- **When.** The run's interval sampler calls it at its own instants (the
  start, every ``interval_s``, the warm-up, the end:
  backends/real/intervals.py ``Sampler``), on the load generator's
  thread, so the summary's window is exact and the reads are the loop's
  timers, which the loadgen microbenchmark measures and the simulator
  charges to its load generator (sim/loadgen.py).  A reader thread of its
  own every 100 ms took ~10 ms of Python per read at 256 functions (about
  5 % of this 2-CPU host) and held the GIL the load generator needs.
- **Reading.** The 6.1 binding's ``evsel`` has ``open`` only: no ``read``,
  no fd, and the ring's records carry no counts; it leaves the fds it opens
  to this process and never closes them (not even when the evsel is
  freed).  So the one ``anon_inode:[perf_event]`` fd an open adds is found
  in /proc/self/fd and read with read(2) (``PERF_FORMAT_TOTAL_TIME_ENABLED
  | _RUNNING``: value, time enabled, time running), and closed here.
- **A task's last switch.** An exiting task's counters are detached
  (do_exit: ``perf_event_exit_task``) before its last switch-out
  (``do_task_dead``), which perf stat -G still counts; so each task also
  counts its ``sched:sched_process_exit`` (fired before the detach), and
  every exit adds the switch-out its counters missed to
  ``context-switches``.  Without that tracepoint the run counts with
  perf stat instead.
- **Missing, never zero.** An event the kernel cannot open (a VM without a
  PMU: ENOENT for ``cycles``) is ``not supported`` in every interval; a
  cgroup none of whose tasks ran in an interval is ``not counted``, as
  perf stat says of a cgroup event that never ran.  A hardware count is
  scaled by time enabled / running per task where the PMU multiplexed it,
  as perf stat scales.
"""
from __future__ import annotations

import errno
import os
import struct
import threading
import time
from typing import Iterable

from backends.real.perf import PerfSample, PerfUnavailable

try:    # linux-perf's binding, for the system Python 3.11 (make perf-binding)
    import perf as binding
    BINDING_MISSING = None
except ImportError as e:
    binding = None
    BINDING_MISSING = f"module perf does not import ({e}; make perf-binding links linux-perf's)"

_SW, _HW = "software", "hardware"
# perf's event names -> (type, the binding's config constant, perf stat's unit)
EVENTS = {
    "context-switches": (_SW, "COUNT_SW_CONTEXT_SWITCHES", ""),
    "cpu-migrations": (_SW, "COUNT_SW_CPU_MIGRATIONS", ""),
    "task-clock": (_SW, "COUNT_SW_TASK_CLOCK", "msec"),
    "instructions": (_HW, "COUNT_HW_INSTRUCTIONS", ""),
    "cycles": (_HW, "COUNT_HW_CPU_CYCLES", ""),
    "stalled-cycles-frontend": (_HW, "COUNT_HW_STALLED_CYCLES_FRONTEND", ""),
    "stalled-cycles-backend": (_HW, "COUNT_HW_STALLED_CYCLES_BACKEND", ""),
    "cache-references": (_HW, "COUNT_HW_CACHE_REFERENCES", ""),
    "cache-misses": (_HW, "COUNT_HW_CACHE_MISSES", ""),
}
# counted with context-switches: each exit is a switch-out the counters miss
EXIT = "sched:sched_process_exit"
# what opening an event the kernel or the PMU does not have fails with
# (perf stat says <not supported>); any other error means counting here fails
_UNSUPPORTED = {errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL}
_READ = struct.Struct("=QQQ")     # value, time enabled, time running
_PERF_FD = "anon_inode:[perf_event]"
MIN_INTERVAL_NS = 1_000_000      # reads closer than this are one (TaskCounters.read_now)

Triple = tuple[int, int, int]


def unavailable(events: Iterable[str]) -> str | None:
    """None when the binding can count ``events`` here, else why not (the
    reason the run falls back to perf stat): the module does not import, or
    an event is a name only the perf tool resolves (a PMU's own events)."""
    if binding is None:
        return f"python-perf missing: {BINDING_MISSING}"
    other = [e for e in events if e not in EVENTS]
    if other:
        return (f"python-perf cannot name {', '.join(other)} (the binding opens generic "
                f"events only; perf stat resolves the PMU's own names)")
    return None


def interval_counts(prev: dict[tuple[str, str], list[Triple]],
                    cur: dict[tuple[str, str], list[Triple]]
                    ) -> dict[tuple[str, str], tuple[float | None, int, int]]:
    """Per (cgroup, event): (count, time running, time enabled) from ``prev``
    to ``cur``, the readings (value, enabled, running) of each of the
    cgroup's tasks in attach order (a task attached since ``prev`` starts
    from zero).  Each task's count is scaled by enabled / running where the
    PMU multiplexed it; the count is None (not counted) when no task ran."""
    out = {}
    for key, now in cur.items():
        before = prev.get(key, [])
        total = 0.0
        run = enabled = 0
        for i, (v, e, r) in enumerate(now):
            v0, e0, r0 = before[i] if i < len(before) else (0, 0, 0)
            dv, de, dr = v - v0, e - e0, r - r0
            if dr > 0:
                total += dv * de / dr if de > dr else dv
            run += dr
            enabled += de
        out[key] = (total if run > 0 else None, run, enabled)
    return out


def samples_of(t_s: float, counts: dict[tuple[str, str], tuple[float | None, int, int]],
               unsupported: Iterable[str], cgroups: Iterable[str]) -> list[PerfSample]:
    """One interval's rows as ``perf stat -I`` gives them: task-clock in
    msec, context switches with the tasks' exits added (:data:`EXIT`), a
    cgroup none of whose tasks ran ``not counted``, an event the host
    cannot count ``not supported`` for every cgroup."""
    out = []
    for (cgroup, event), (value, run, enabled) in counts.items():
        if event == EXIT:
            continue
        exits = counts.get((cgroup, EXIT), (None,))[0]
        if event == "context-switches" and value is not None and exits is not None:
            value += exits
        unit = EVENTS[event][2]
        if value is not None and unit == "msec":
            value /= 1e6
        out.append(PerfSample(t_s, cgroup, event, value, unit, run,
                              100.0 * run / enabled if enabled else None,
                              "" if value is not None else "not counted"))
    for cgroup in cgroups:
        for event in unsupported:
            out.append(PerfSample(t_s, cgroup, event, None, EVENTS[event][2], None, None,
                                  "not supported"))
    return out


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError as e:
        return f"unknown ({e.strerror})"


def _is_perf(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == _PERF_FD
    except OSError:
        return False


def _perf_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd") if _is_perf(int(n))}


def _lowest_free_fd() -> int:
    """The fd the next open(2) gets: POSIX gives the lowest free number."""
    fd = os.open("/dev/null", os.O_RDONLY)
    os.close(fd)
    return fd


class TaskCounters:
    """The run's counts per cgroup through the binding, from :meth:`start` to
    :meth:`stop`, the same interface as :class:`~backends.real.perf.PerfStat`;
    :meth:`attach` adds the tasks placed after the start."""

    def __init__(self, cgroups: Iterable[str], events: Iterable[str]):
        self.cgroups = list(cgroups)
        self.events = tuple(events)
        self.counted: tuple[str, ...] = ()
        self.unsupported: tuple[str, ...] = ()
        self.samples: list[PerfSample] = []
        self.tasks = 0
        self._fds: dict[tuple[str, str], list[int]] = {}
        self._prev: dict[tuple[str, str], list[Triple]] = {}
        self._lock = threading.Lock()      # attach (any thread) and read_now
        self._zero: int | None = None
        self._last_read: int | None = None
        self._owned: set[int] = set()       # the perf fds this object opened
        self._foreign = _perf_fds()         # those others had before (a trace capture's)

    def _evsel(self, event: str):
        p = binding
        if event == EXIT:
            kind, config = p.TYPE_TRACEPOINT, p.tracepoint(*EXIT.split(":"))
            if config < 0:
                raise PerfUnavailable(f"python-perf: tracepoint {EXIT} not found")
        else:
            kind = p.TYPE_SOFTWARE if EVENTS[event][0] == _SW else p.TYPE_HARDWARE
            config = getattr(p, EVENTS[event][1])
        return p.evsel(type=kind, config=config, sample_period=0,
                       read_format=p.FORMAT_TOTAL_TIME_ENABLED | p.FORMAT_TOTAL_TIME_RUNNING)

    def _open(self, event: str, tid: int) -> int:
        """The fd of ``event`` counting ``tid`` and what it will make."""
        # The binding returns no fd: find it.  It is the lowest free number
        # (checked once, not by reading every fd's link: at a dense run's
        # thousand opens that made the start quadratic, ~10 s for 256
        # workers); if another thread took that number meanwhile, the perf
        # fds that are neither ours nor there before counting began.
        low = _lowest_free_fd()
        self._evsel(event).open(threads=binding.thread_map(tid=tid), inherit=1)
        if _is_perf(low) and low not in self._owned:
            self._owned.add(low)
            return low
        new = _perf_fds() - self._owned - self._foreign
        if len(new) != 1:
            for fd in new:
                os.close(fd)
            raise PerfUnavailable(f"python-perf: opening {event} for task {tid} added "
                                  f"{len(new)} perf fds, not 1")
        fd = new.pop()
        self._owned.add(fd)
        return fd

    def _close(self, fd: int) -> None:
        self._owned.discard(fd)
        os.close(fd)

    def _probe(self) -> None:
        """Which events the kernel opens (for this process; the rest are not
        supported); PerfUnavailable when it refuses counting itself."""
        counted, unsupported = [], []
        for event in self.events:
            try:
                fd = self._open(event, threading.get_native_id())
            except OSError as e:
                if e.errno in _UNSUPPORTED:
                    unsupported.append(event)
                    continue
                raise PerfUnavailable(f"python-perf may not count ({os.strerror(e.errno)}: uid "
                                      f"{os.geteuid()}, kernel.perf_event_paranoid = "
                                      f"{_paranoid()}; root may)") from None
            self._close(fd)
            counted.append(event)
        if not counted:
            raise PerfUnavailable(f"python-perf opens none of {', '.join(self.events)}")
        if "context-switches" in counted:
            try:
                self._close(self._open(EXIT, threading.get_native_id()))
            except (OSError, PerfUnavailable) as e:
                raise PerfUnavailable(f"python-perf cannot count task exits ({EXIT}: {e}), so "
                                      f"its context switches would miss each exiting task's "
                                      f"last one") from None
            counted.append(EXIT)
        self.counted, self.unsupported = tuple(counted), tuple(unsupported)

    def attach(self, cgroup: str, tids: Iterable[int]) -> None:
        """Count ``tids`` (and what they create from now on) in ``cgroup``;
        call it once a task is in its cgroup for good, once per task (a
        thread created by a counted one is counted already).  A task that
        has exited is skipped."""
        with self._lock:
            for tid in tids:
                fds = []
                try:
                    for event in self.counted:
                        fds.append(self._open(event, tid))
                except OSError as e:
                    for fd in fds:
                        self._close(fd)
                    if e.errno == errno.ESRCH:
                        continue
                    raise
                for event, fd in zip(self.counted, fds):
                    self._fds.setdefault((cgroup, event), []).append(fd)
                self.tasks += 1

    def start(self, tasks: dict[str, list[int]] | None = None) -> None:
        """Open the counters of ``tasks`` (cgroup -> its tasks now); counting
        starts now (the time zero of the rows' times)."""
        if binding is None:
            raise PerfUnavailable(f"python-perf missing: {BINDING_MISSING}")
        try:
            self._probe()
            for cgroup in self.cgroups:
                for event in self.counted:
                    self._fds.setdefault((cgroup, event), [])
            for cgroup, tids in (tasks or {}).items():
                self.attach(cgroup, tids)
        except BaseException:
            self.close()
            raise
        with self._lock:
            self._zero = self._last_read = time.monotonic_ns()
            self._prev = self._read()

    def _read(self) -> dict[tuple[str, str], list[Triple]]:
        return {key: [_READ.unpack(os.read(fd, _READ.size)) for fd in fds]
                for key, fds in self._fds.items()}

    def read_now(self) -> None:
        """End an interval now: one row per cgroup and event.  A read within
        ``MIN_INTERVAL_NS`` of the previous one adds nothing (two of the
        sampler's instants at the same time, the end read twice)."""
        with self._lock:
            t = time.monotonic_ns()
            if self._zero is None or t - self._last_read < MIN_INTERVAL_NS:
                return
            cur = self._read()
            counts = interval_counts(self._prev, cur)
            self._prev, self._last_read = cur, t
        self.samples += samples_of((t - self._zero) / 1e9, counts, self.unsupported,
                                   self.cgroups)

    def counting_since(self) -> int | None:
        """CLOCK_MONOTONIC (ns) of the counts' time zero."""
        return self._zero

    def stop(self) -> list[PerfSample]:
        """Count the last (partial) interval and close the counters."""
        if self._zero is None:
            raise RuntimeError("TaskCounters.stop() before start()")
        try:
            self.read_now()
        finally:
            self.close()
        return self.samples

    def close(self) -> None:
        """On every exit path: the counters' fds are closed (the binding never does)."""
        with self._lock:
            for fds in self._fds.values():
                for fd in fds:
                    self._close(fd)
            self._fds = {}
