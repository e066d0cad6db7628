"""``trace=sched`` on the real host: the kernel's ``sched_switch``,
``sched_wakeup``, ``sched_wakeup_new`` and ``sched_migrate_task``
tracepoints for the run's own tasks, into sched.parquet (results/schema.py
``SCHED``, written alike by the simulator, sim/tracing.py).

How (docs/real-backend.md, "On the real host"):

- **Capture.** perf's Python binding (linux-perf's module ``perf``, linked
  into the venv by ``make perf-binding``) opens the four tracepoints
  system-wide on every CPU colosim may use (not only the run's: a wake-up
  is recorded on the waker's CPU, the load generator's for a request), one
  mmap ring per CPU; a reader thread
  drains the rings every ``DRAIN_S`` from before t0 to the end.  Without the
  binding, ``perf record -k CLOCK_MONOTONIC`` writes them to a file and
  ``perf script`` is parsed after the run (:class:`PerfRecord`), saying why.
- **Clock.** The binding cannot set ``use_clockid`` (perf 6.1's evsel
  crashes on the keyword), so samples carry perf's clock (``local_clock``).
  :func:`clock_offset` measures its offset to CLOCK_MONOTONIC before t0 and
  after the end from threads started between two CLOCK_MONOTONIC reads
  (their ``sched_wakeup_new`` lies inside each bracket), and times are
  interpolated between the two (the clocks drift apart by ppm).
- **Which tasks.** The run's tasks are the threads of the processes in its
  cgroups (:class:`Members`: ``cgroup.procs`` and ``tasks`` read at every
  drain, plus each thread a member creates, seen in ``sched_wakeup_new``,
  so per-request threads too short to be listed still count).  An event is
  kept when a member is on one side; the other side keeps its pid and comm
  with a null cgroup (an outside task, or the idle task, pid 0).
- **Refusals.** Where tracing is not permitted (not root and
  ``perf_event_paranoid`` above -1, no tracefs, neither the binding nor the
  perf tool), ``trace=sched`` is refused before the run and
  ``trace=optional`` runs without sched.parquet (:func:`plan`).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import _thread
from dataclasses import dataclass, field

import pyarrow as pa

from backends.real.cgroupfs import CgroupFS, format_cpulist
from backends.real.perf import PerfUnavailable, die_with_parent, perf_binary
# linux-perf's binding (None where it does not import), as counting imports it
from backends.real.taskcount import BINDING_MISSING
from backends.real.taskcount import binding as _perf
from results.schema import SCHED_EVENTS
from sim.tracing import SchedRows, TraceConfig

TRACEPOINTS = SCHED_EVENTS[:4]     # the throttle events are the simulator's own
TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
DRAIN_S = 0.05                     # the reader empties the rings this often
RING_PAGES = 1024                  # per CPU: 4 MiB, about 35k sched_switch records
# include/linux/sched.h: the tracepoint reports one TASK_REPORT bit (S 0x1,
# D 0x2, T 0x4, t 0x8, X 0x10, Z 0x20, P 0x40, I 0x80) or 0 (running), and
# TASK_REPORT_MAX (0x100, "R+") when the task was preempted
TASK_REPORT = 0xff
EXIT_DEAD, EXIT_ZOMBIE = 0x10, 0x20
# threads started to measure the clock offset (each bounds it from both sides)
MARK_THREADS = 8


def prev_state(bits: int) -> str:
    """sched_switch's prev_state bits as the schema's R | S | X: running or
    preempted is R, exited (dead or zombie) X, any other blocked state S."""
    s = bits & TASK_REPORT
    if s == 0:
        return "R"
    return "X" if s & (EXIT_DEAD | EXIT_ZOMBIE) else "S"


def script_state(text: str) -> str:
    """The same from ``perf script``'s letters (``R``, ``R+``, ``S``, ``D``,
    ``X``, ``S|D`` ...)."""
    if text.startswith("R"):
        return "R"
    return "X" if "X" in text or "Z" in text else "S"


# --- what is possible here ----------------------------------------------

def tracing_missing() -> str | None:
    """None where this process may read the sched tracepoints system-wide,
    else what is missing (one line)."""
    why = []
    if os.geteuid() != 0:
        try:
            paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
        except OSError:
            paranoid = None
        if paranoid is None or paranoid > -1:
            why.append(f"root (running as uid {os.geteuid()}; system-wide tracepoints need root "
                       f"or kernel.perf_event_paranoid = -1, it is {paranoid})")
    mounted = [d for d in TRACEFS if os.path.isdir(f"{d}/events/sched")]
    if not mounted:
        try:
            known = "tracefs" in open("/proc/filesystems").read()
        except OSError:
            known = False
        # perf (and its binding) mount tracefs themselves when root may
        if not known:
            why.append("tracefs (not in /proc/filesystems: a kernel without CONFIG_FTRACE)")
        elif os.geteuid() != 0:
            why.append("tracefs (not mounted; as root: mount -t tracefs nodev /sys/kernel/tracing)")
    else:
        absent = [t for t in TRACEPOINTS if not os.path.exists(f"{mounted[0]}/events/sched/{t}/id")]
        if absent:
            why.append(f"the tracepoints {', '.join(absent)} (not in {mounted[0]}/events/sched)")
    return "; ".join(why) or None


@dataclass
class Plan:
    """How a run records its schedule: ``method`` "python-perf", "perf
    record" or None (not recorded); ``status`` the summary's
    ``sched_trace_status``."""
    method: str | None
    status: str


class TraceRefused(RuntimeError):
    """trace=sched on a host that cannot trace (nothing was created)."""


def plan(tcfg: TraceConfig, binding_missing: str | None = ...) -> Plan | None:
    """Before the run: None under trace=none; how it records otherwise.
    trace=sched where tracing is impossible raises TraceRefused naming what
    is missing; trace=optional gets method None and prints why.
    ``binding_missing``: by default the module's BINDING_MISSING, read now."""
    if binding_missing is ...:
        binding_missing = BINDING_MISSING
    if tcfg.name == "none":
        return None
    missing = tracing_missing()
    method = "python-perf"
    status = "python-perf"
    if missing is None and binding_missing is not None:
        try:
            perf_binary()
            method, status = "perf record", f"perf record (python-perf missing: {binding_missing})"
            print(f"colosim: trace={tcfg.name}: {binding_missing}; recording with perf record "
                  f"instead", file=sys.stderr)
        except PerfUnavailable as e:
            missing = f"perf's Python binding ({binding_missing}) or the perf tool ({e})"
    if missing is None:
        return Plan(method, status)
    if tcfg.name == "sched":
        raise TraceRefused(f"trace=sched cannot record the schedule on this host: missing "
                           f"{missing}; run as root, or use trace=optional to run without "
                           f"sched.parquet")
    print(f"colosim: trace=optional: no sched.parquet (missing {missing})", file=sys.stderr)
    return Plan(None, f"off: missing {missing}")


# --- events and the run's tasks ------------------------------------------

@dataclass(slots=True)
class Event:
    """One tracepoint record.  ``tgid``/``tid``: the task that ran it
    (sched_switch: the task leaving; sched_wakeup_new: the parent); ``a``:
    sched_switch's prev (pid, comm); ``b``: its next, or the woken or
    migrated task; ``cpu``: the CPU switched on, the wake-up's target, the
    migration's destination."""
    time: int
    event: str
    cpu: int
    tgid: int
    tid: int
    b_pid: int
    b_comm: str
    a_pid: int | None = None
    a_comm: str | None = None
    state: str | None = None
    orig_cpu: int | None = None
    on_cpu: int | None = None       # the CPU that recorded it (perf script's)


class Members:
    """The run's tasks: thread id -> cgroup (the scenario path), and process
    (thread group) id -> cgroup."""

    def __init__(self, cg: CgroupFS | None, cgroups: list[str]):
        self.cg, self.cgroups = cg, list(cgroups)
        self.tids: dict[int, str] = {}
        self.tgids: dict[int, str] = {}

    def refresh(self) -> None:
        """Add what the run's cgroups hold now (never removed: an exited
        task's events may still be waiting in a ring)."""
        for c in self.cgroups:
            try:
                self.tgids.update(dict.fromkeys(self.cg.pids(c), c))
                self.tids.update(dict.fromkeys(self.cg.threads(c), c))
            except OSError:
                pass    # a job's cgroup removed meanwhile

    def of(self, pid: int) -> str | None:
        return self.tids.get(pid) or self.tgids.get(pid)

    def classify(self, e: Event) -> tuple[str | None, str | None] | None:
        """The cgroups of ``e``'s two sides (prev, next) if a member is on
        one of them, else None.  Events come in time order: a thread a
        member creates joins at its sched_wakeup_new, and a task leaving a
        CPU is the one running the tracepoint, so its process tells."""
        if e.event == "sched_switch":
            prev_cg = self.of(e.a_pid) or (self.tgids.get(e.tgid) if e.tid == e.a_pid else None)
            if prev_cg is not None:
                self.tids[e.a_pid] = prev_cg
            next_cg = self.of(e.b_pid)
            return None if prev_cg is None and next_cg is None else (prev_cg, next_cg)
        if e.event == "sched_wakeup_new" and e.b_pid not in self.tids:
            parent = self.of(e.tid) or self.tgids.get(e.tgid)
            if parent is not None:
                self.tids[e.b_pid] = parent     # a thread or a child inherits the cgroup
        cg = self.of(e.b_pid)
        return None if cg is None else (None, cg)


def append_row(rows: SchedRows, now: int, e: Event, prev_cg: str | None,
               next_cg: str | None) -> None:
    """``e`` (a run task on one side) as a sched.parquet row at ``now`` (ns
    since t0), if the window and max_events take it."""
    if not rows.keep(now):
        return
    if e.event == "sched_switch":
        rows.append(now, e.event, e.cpu, (e.a_pid, e.a_comm, prev_cg),
                    (e.b_pid, e.b_comm, next_cg), e.state)
    else:
        rows.append(now, e.event, e.cpu, nxt=(e.b_pid, e.b_comm, next_cg), orig_cpu=e.orig_cpu)


# --- the clock -------------------------------------------------------------

def _nothing() -> None:
    pass


def thread_marks(n: int = MARK_THREADS) -> list[tuple[int, int]]:
    """Start ``n`` threads that return at once, one at a time, each between
    two CLOCK_MONOTONIC reads: (before, after) each.  ``_thread`` returns
    as soon as the thread is cloned (``threading`` would wait for it to
    run), so a bracket is about one clone() wide."""
    marks = []
    for _ in range(n):
        t1 = time.monotonic_ns()
        _thread.start_new_thread(_nothing, ())
        marks.append((t1, time.monotonic_ns()))
        time.sleep(0.0002)      # the thread exits: its records stay apart
    return marks


def clock_offset(marks: list[tuple[int, int]], births: list[int]) -> tuple[int, int]:
    """perf clock - CLOCK_MONOTONIC (ns) and its uncertainty (half the
    bound's width), from :func:`thread_marks` and the ``sched_wakeup_new``
    records of the thread that ran it, in perf time.  A record at ``w``
    between CLOCK_MONOTONIC ``t1`` and ``t2`` bounds the offset to
    ``[w - t2, w - t1]``; the bounds of all are intersected.  The
    tracepoint runs in the parent's own context (never the idle task's,
    whose records this VM's CPU 1 does not deliver), so every one is
    there.  ValueError when the records do not pair with the marks."""
    births = sorted(births)
    if len(births) != len(marks):
        raise ValueError(f"{len(births)} sched_wakeup_new records of the marking thread for "
                         f"{len(marks)} threads started")
    lo = max(w - t2 for w, (_, t2) in zip(births, marks))
    hi = min(w - t1 for w, (t1, _) in zip(births, marks))
    if lo > hi:
        raise ValueError(f"the thread starts bound the clock offset to [{lo}, {hi}] ns: empty")
    return (lo + hi) // 2, (hi - lo) // 2


# --- capture through the binding ------------------------------------------

@dataclass
class Capture:
    """What a capture gives the run: the table, the lost records, how."""
    table: pa.Table
    truncated: bool
    lost: int
    status: str
    offset_ns: tuple[int, int] = (0, 0)     # perf clock - CLOCK_MONOTONIC at start, end
    offset_err_ns: int = 0
    read: int = field(default=0)            # records read, every task's
    per_cpu: dict[int, int] = field(default_factory=dict)   # the same by CPU


class BindingCapture:
    """The four tracepoints through perf's binding on ``cpus``, read by a
    thread from :meth:`start` to :meth:`stop`; the rings overflowing is
    counted in ``lost`` (perf's lost records)."""

    def __init__(self, tcfg: TraceConfig, cg: CgroupFS, cgroups: list[str], cpus: set[int]):
        self.tcfg = tcfg
        self.window = SchedRows(tcfg)       # its t_lo, t_hi, max_events
        self.members = Members(cg, cgroups)
        self.cpus = sorted(cpus)
        self.lost = 0
        self.read = 0
        self.per_cpu = dict.fromkeys(self.cpus, 0)
        self.t0: int | None = None
        self._pending: list[Event] = []
        self._kept: list[tuple[Event, str | None, str | None]] = []
        self._in_window = 0                 # kept events surely inside the window
        self._marker: int | None = None     # the thread whose starts time the clock
        self._marks: list[int] = []     # its sched_wakeup_new records, perf time
        self._offset = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._switchinterval: float | None = None

    def start(self) -> None:
        """Open and map the tracepoints, measure the clock, start the reader."""
        p = _perf
        sample_type = (p.SAMPLE_TID | p.SAMPLE_CPU | p.SAMPLE_TIME | p.SAMPLE_RAW
                       | p.SAMPLE_PERIOD | p.SAMPLE_ID)
        cpus = p.cpu_map(cpustr=format_cpulist(set(self.cpus)))
        self._evlist = p.evlist(cpus, p.thread_map(-1))
        self._kinds = {}
        for name in TRACEPOINTS:
            # perf.tracepoint also loads the format the fields are read with
            config = p.tracepoint("sched", name)
            if config < 0:
                raise PerfUnavailable(f"tracepoint sched:{name} not found")
            self._kinds[config] = name
            # FORMAT_ID + SAMPLE_ID: how read_on_cpu tells the events apart;
            # no wake-up per record (the reader polls on its own clock)
            self._evlist.add(p.evsel(type=p.TYPE_TRACEPOINT, config=config, freq=0,
                                     sample_period=1, wakeup_events=1_000_000,
                                     sample_type=sample_type, read_format=p.FORMAT_ID))
        self._rings = range(len(cpus))
        with _quiet_stderr():       # libperf prints each ring it maps
            self._evlist.open()
            self._evlist.mmap(pages=RING_PAGES)
        self.members.refresh()
        self.offset_start = self._measure_offset()
        self._offset = self.offset_start[0]
        # the reader holds the GIL while it drains: a short switch interval
        # hands it back to the load generator within 0.2 ms, not 5
        self._switchinterval = sys.getswitchinterval()
        sys.setswitchinterval(0.0002)
        self._thread = threading.Thread(target=self._run, name="colosim-schedtrace", daemon=True)
        self._thread.start()

    def set_t0(self, t0: int) -> None:
        """Rows are kept from here on (events before only teach membership)."""
        self.t0 = t0

    def _measure_offset(self) -> tuple[int, int, int]:
        """(offset, uncertainty, when in perf time): this thread starts
        MARK_THREADS threads (:func:`thread_marks`) while the rings record
        its ``sched_wakeup_new``."""
        self._drain()
        self._marker, self._marks = threading.get_native_id(), []
        marks = thread_marks()
        self._drain(final=True)
        self._marker = None
        off, err = clock_offset(marks, self._marks)
        return off, err, marks[len(marks) // 2][0] + off

    def _run(self) -> None:
        while not self._stop.wait(DRAIN_S):
            self.members.refresh()
            self._drain()

    def _drain(self, final: bool = False) -> None:
        """Read every ring empty, then pass on, in time order, the records
        that are surely all in (older than the drain's start, less
        DRAIN_S; all of them if ``final``): a record on one CPU can come
        out after a later one on another, and membership needs time order."""
        p = _perf
        horizon = time.monotonic_ns() + self._offset - int(DRAIN_S * 1e9)
        ev, kinds, pending, marker = self._evlist, self._kinds, self._pending, self._marker
        per_cpu = self.per_cpu
        for i in self._rings:
            while (r := ev.read_on_cpu(i)) is not None:
                if type(r) is not p.sample_event:
                    if type(r) is p.lost_event:
                        self.lost += r.lost
                    continue
                kind = kinds.get(r.common_type)
                if kind == "sched_switch":
                    e = Event(r.sample_time, kind, r.sample_cpu, r.sample_pid, r.sample_tid,
                              r.next_pid, r.next_comm, r.prev_pid, r.prev_comm,
                              prev_state(r.prev_state))
                elif kind == "sched_migrate_task":
                    e = Event(r.sample_time, kind, r.dest_cpu, r.sample_pid, r.sample_tid,
                              r.pid, r.comm, orig_cpu=r.orig_cpu)
                elif kind is not None:
                    e = Event(r.sample_time, kind, r.target_cpu, r.sample_pid, r.sample_tid,
                              r.pid, r.comm)
                    if kind == "sched_wakeup_new" and e.tid == marker:
                        self._marks.append(e.time)
                else:
                    continue
                pending.append(e)
                per_cpu[r.sample_cpu] = per_cpu.get(r.sample_cpu, 0) + 1
        self.read = sum(per_cpu.values())
        pending.sort(key=_time)
        k = len(pending)
        if not final:
            k = 0
            while k < len(pending) and pending[k].time < horizon:
                k += 1
        self._keep(pending[:k])
        del pending[:k]

    def _keep(self, events: list[Event]) -> None:
        """Classify in time order; keep the run's events from t0 (in the
        window, up to max_events + 1 surely inside it, so the table's
        truncation is decided by SchedRows as in the simulator); rows wait
        for the final clock offset (:meth:`stop`)."""
        w, t0, classify = self.window, self.t0, self.members.classify
        margin = 1_000_000     # the clock's drift correction moves times by far less
        for e in events:
            sides = classify(e)
            if sides is None or t0 is None or self._in_window > w.max_events:
                continue
            now = e.time - self._offset - t0
            if now < w.t_lo - margin or (w.t_hi is not None and now > w.t_hi + margin):
                continue
            self._kept.append((e, *sides))
            if now >= w.t_lo + margin and (w.t_hi is None or now <= w.t_hi - margin):
                self._in_window += 1

    def stop(self) -> Capture:
        """Stop the reader, read what is left, measure the clock again and
        build the table, times in ns since t0 (CLOCK_MONOTONIC)."""
        self.close()
        self.members.refresh()
        try:
            end = self._measure_offset()
        except ValueError as e:
            print(f"colosim: warning: sched trace: the clock offset at the end: {e}; using "
                  f"the start's", file=sys.stderr)
            self._drain(final=True)
            end = self.offset_start
        (o0, e0, p0), (o1, e1, p1) = self.offset_start, end
        slope = (o1 - o0) / max(p1 - p0, 1)        # the clocks' drift, interpolated
        rows = SchedRows(self.tcfg)
        for e, prev_cg, next_cg in self._kept:
            now = e.time - o0 - int(slope * (e.time - p0)) - self.t0
            append_row(rows, now, e, prev_cg, next_cg)
        return Capture(rows.table(), rows.truncated, self.lost, "python-perf", (o0, o1),
                       max(e0, e1), self.read, dict(self.per_cpu))

    def close(self) -> None:
        """On every exit path: the reader stops, the switch interval is back."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._switchinterval is not None:
            sys.setswitchinterval(self._switchinterval)
            self._switchinterval = None


def _time(e: Event) -> int:
    return e.time


class _quiet_stderr:
    """fd 2 to /dev/null for a moment (libperf's debug lines on mmap)."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)


# --- the fallback: perf record + perf script --------------------------------

# perf script prints tid -1 for a task's last switch (it has exited: X)
_SCRIPT_HEAD = re.compile(r"^\s*(-?\d+)/(-?\d+)\s+\[(\d+)\]\s+(\d+)\.(\d{9}):\s+sched:(\w+):\s+(.*)$")
_SCRIPT_SWITCH = re.compile(r"^prev_comm=(.*) prev_pid=(-?\d+) prev_prio=-?\d+ prev_state=(\S+) "
                            r"==> next_comm=(.*) next_pid=(-?\d+) next_prio=-?\d+$")
_SCRIPT_WAKEUP = re.compile(r"^comm=(.*) pid=(-?\d+) prio=-?\d+ target_cpu=(\d+)$")
_SCRIPT_MIGRATE = re.compile(r"^comm=(.*) pid=(-?\d+) prio=-?\d+ orig_cpu=(\d+) dest_cpu=(\d+)$")
_SCRIPT_LOST = re.compile(r"PERF_RECORD_LOST.*?lost:?\s*(\d+)")


def parse_script_line(line: str) -> Event | int | None:
    """One line of ``perf script -F pid,tid,cpu,time,event,trace --ns
    --show-lost-events``: an Event (time: CLOCK_MONOTONIC ns, recorded with
    ``-k CLOCK_MONOTONIC``), the count of a lost-records line, or None."""
    m = _SCRIPT_HEAD.match(line)
    if m is None:
        lost = _SCRIPT_LOST.search(line)
        return int(lost.group(1)) if lost else None
    tgid, tid, cpu, sec, nsec, kind, rest = m.groups()
    t = int(sec) * 1_000_000_000 + int(nsec)
    if kind == "sched_switch":
        f = _SCRIPT_SWITCH.match(rest)
        return f and Event(t, kind, int(cpu), int(tgid), int(tid), int(f.group(5)), f.group(4),
                           int(f.group(2)), f.group(1), script_state(f.group(3)),
                           on_cpu=int(cpu))
    if kind == "sched_migrate_task":
        f = _SCRIPT_MIGRATE.match(rest)
        return f and Event(t, kind, int(f.group(4)), int(tgid), int(tid), int(f.group(2)),
                           f.group(1), orig_cpu=int(f.group(3)), on_cpu=int(cpu))
    if kind in ("sched_wakeup", "sched_wakeup_new"):
        f = _SCRIPT_WAKEUP.match(rest)
        return f and Event(t, kind, int(f.group(3)), int(tgid), int(tid), int(f.group(2)),
                           f.group(1), on_cpu=int(cpu))
    return None


class RecordCapture:
    """The fallback without the binding: ``perf record`` of the four
    tracepoints on the run's CPUs into an unlinked file (nothing is left
    behind however colosim ends), ``perf script`` parsed after the run; a
    thread reads the run's cgroups meanwhile (membership)."""

    def __init__(self, tcfg: TraceConfig, cg: CgroupFS, cgroups: list[str], cpus: set[int],
                 status: str):
        self.tcfg, self.cpus, self.status = tcfg, set(cpus), status
        self.members = Members(cg, cgroups)
        self.t0: int | None = None
        self._proc: subprocess.Popen | None = None
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        perf = perf_binary()
        fd, path = tempfile.mkstemp(prefix="colosim-sched-", suffix=".data")
        os.unlink(path)
        self._fd = fd
        cmd = [perf, "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", "-C",
               format_cpulist(self.cpus), "-e", ",".join(f"sched:{t}" for t in TRACEPOINTS),
               "-o", f"/dev/fd/{fd}"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, pass_fds=(fd,),
                                      preexec_fn=lambda: die_with_parent(signal.SIGINT))
        self.members.refresh()
        self._thread = threading.Thread(target=self._run, name="colosim-schedtrace", daemon=True)
        self._thread.start()
        time.sleep(0.2)     # perf record opens its events before t0

    def set_t0(self, t0: int) -> None:
        self.t0 = t0

    def _run(self) -> None:
        while not self._stop.wait(DRAIN_S):
            self.members.refresh()

    def stop(self) -> Capture:
        """Stop perf record, parse perf script's output (times already
        CLOCK_MONOTONIC)."""
        self._stop_thread()
        proc, self._proc = self._proc, None
        proc.send_signal(signal.SIGINT)
        try:
            err = proc.communicate(timeout=30)[1]
            r = subprocess.run([perf_binary(), "script", "-i", f"/dev/fd/{self._fd}", "-F",
                                "pid,tid,cpu,time,event,trace", "--ns", "--show-lost-events"],
                               pass_fds=(self._fd,), capture_output=True, text=True, timeout=600)
        finally:
            self.close()
        if r.returncode != 0:
            raise PerfUnavailable(f"perf script failed: {(r.stderr or err).strip()[-300:]}")
        rows, lost, per_cpu = SchedRows(self.tcfg), 0, dict.fromkeys(sorted(self.cpus), 0)
        for line in r.stdout.splitlines():
            e = parse_script_line(line)
            if isinstance(e, int):
                lost += e
            elif e is not None:
                per_cpu[e.on_cpu] = per_cpu.get(e.on_cpu, 0) + 1
                sides = self.members.classify(e)
                if sides is not None:
                    append_row(rows, e.time - self.t0, e, *sides)
        return Capture(rows.table(), rows.truncated, lost, self.status,
                       read=sum(per_cpu.values()), per_cpu=per_cpu)

    def _stop_thread(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """On every exit path: perf record stopped, its file closed."""
        self._stop_thread()
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def capture(p: Plan, tcfg: TraceConfig, cg: CgroupFS, cgroups: list[str], cpus: set[int]):
    """The capture ``p`` chose: a BindingCapture or a RecordCapture (both:
    start, set_t0, stop -> Capture, close)."""
    if p.method == "python-perf":
        return BindingCapture(tcfg, cg, cgroups, cpus)
    return RecordCapture(tcfg, cg, cgroups, cpus, p.status)
