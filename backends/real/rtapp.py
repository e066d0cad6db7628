"""``workload=rtapp`` on the real host: the rt-app binary (Debian's package
rt-app, version 1.0) runs the task description that
sim/workloads/rtapp_config.py parses for both backends, and its per-thread
logs become rtapp.parquet (results/schema.py ``RTAPP``), as the simulator
writes it.

What rt-app 1.0 lacks, and what the backend does instead (docs/rtapp.md,
"On the real host"):

- **taskgroup.** 1.0 has no cgroups.  The backend writes the JSON itself
  from the parsed config (:func:`rtapp_json`), without taskgroups, with
  every thread's ``delay`` lengthened by ``PLACEMENT_US``; while the
  threads wait out that delay it finds each one of a task with a taskgroup
  by its name (1.0 names a thread with the bare task name, the instance
  index is only in its log file's name: ``/proc/<pid>/task/*/comm``) and
  moves it into the run's cgroup of that taskgroup; the rest stay in the
  run's top cgroup, where the process starts (it joins before exec).
- **the use case's start.** 1.0 takes its time zero (``t_zero``) in thread
  0 with no way to set it from outside, so the JSON also holds one more
  task, ``ZERO_TASK``: a thread with no delay whose one loop waits on a
  timer of period 0, which logs ``slack = t_zero - now`` at ``start = now``
  (so ``t_zero = start + slack``, to about 1.5 us: two roundings to us).
  The run's t0 (:meth:`RtAppRunner.t0`) is ``t_zero + PLACEMENT_US``, when
  the threads start as the simulator's start at its t0.
- **global.duration.** 1.0 counts it from thread creation and in whole
  seconds; the backend leaves it out and sends rt-app SIGTERM (its own
  shutdown: a thread finishes its event, the loop in progress is not
  logged) at t0 + duration, or at the run's end.
- **phase policies.** 1.0 sets a thread's policy once, at its start; a
  phase that changes it, or moves its thread to another taskgroup, is
  refused (:func:`check_runnable`).
- **calibration** ``"CPU<n>"``: rt-app's calibration takes about 5 s, so
  the backend runs it once before the run (:func:`calibrate`) and hands
  the run the ns per loop it measured (summary ``rtapp_calibration``).
- **log_size.** 1.0 reads the string values backwards (``"file"`` and
  ``"auto"`` disable the log, ``"disable"`` enables it) and logs an
  interrupted loop when it buffers (an integer); the backend leaves the
  key out, which is 1.0's per-loop file logging.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

from backends.real.cgroupfs import parse_cpulist
from backends.real.config import RealBackend
from backends.real.jobs import spawn_in_cgroup, stop_session
from backends.real.loadgen import Timer
from backends.real.perf import die_with_parent
from backends.real.runner import RealRunError, Runner, Setup, request_table
from results.schema import RTAPP
from sim.engine import NSEC_PER_SEC as NS
from sim.engine import NSEC_PER_USEC
from sim.workloads.rtapp_config import (RUN, RUNTIME, SLEEP, TIMER, RtAppConfig, RtAppError,
                                        load, loop_positions)

BINARY = "rt-app"
INSTALL = "apt-get install -y rt-app"
LOG_BASENAME = "rtapp"
# every thread's delay grows by this (us): the threads are placed meanwhile
PLACEMENT_US = 200_000
# the extra thread that logs rt-app's t_zero (module docstring); last, so
# it shifts no index of the file's threads
ZERO_TASK = "colosim-t0"
# pthread_setname_np takes 15 characters; rt-app 1.0 leaves a longer
# name's thread with the main thread's name, MAIN_COMM
COMM_LEN = 15
MAIN_COMM = "rt-app"
# rt-app 1.0's log columns (log_timing in src/rt-app_utils.c)
LOG_COLUMNS = ("#idx", "perf", "run", "period", "start", "end", "rel_st", "slack",
               "c_duration", "c_period", "wu_lat")
CALIBRATION = re.compile(r"pLoad = (\d+)ns : calib_cpu (\d+)")
CALIBRATION_TIMEOUT_S = 120


def rtapp_binary() -> str:
    """rt-app's path, or RealRunError with the command that installs it."""
    path = shutil.which(BINARY)
    if path is None:
        raise RealRunError(f"workload=rtapp on backend=real runs the rt-app binary, which is "
                           f"not installed: as root, {INSTALL} (make test and make demo "
                           f"install it)")
    return path


def check_runnable(config: RtAppConfig, cpus: set[int], online: set[int]) -> None:
    """RtAppError (path: message) for what rt-app 1.0 and the backend cannot
    run as the simulator does: ``cpus`` are the run's CPUs, ``online``
    those rt-app's calibration may use."""
    if any(t.name == ZERO_TASK for t in config.tasks):
        raise RtAppError(f"tasks.{ZERO_TASK}", "backend=real uses this task name for the "
                                               "thread that logs rt-app's time zero")
    if config.ns_per_loop is None:
        cpu = int(config.calibration.removeprefix("CPU"))
        if cpu not in online:
            raise RtAppError("global.calibration", f"rt-app would calibrate on CPU{cpu}, which "
                                                   f"colosim may not use (CPUs {sorted(online)})")
    for t in config.tasks:
        path = f"tasks.{t.name}"
        for where, c in [(path, t.cpus)] + [(f"{path}.phases.{p.name}", p.cpus)
                                            for p in t.phases]:
            if c is not None and not set(c) <= cpus:
                raise RtAppError(f"{where}.cpus", f"CPUs {sorted(set(c) - cpus)} are not the "
                                                  f"run's (backend.cpus: {sorted(cpus)})")
        for p in t.phases:
            where = f"{path}.phases.{p.name}"
            if p.sched is not None and p.sched != t.sched:
                raise RtAppError(where, "rt-app 1.0 sets a thread's policy and priority once, "
                                        "when it starts; a phase changing them runs in the "
                                        "simulator only")
            if p.taskgroup is not None and p.taskgroup != (t.taskgroup or "/"):
                raise RtAppError(f"{where}.taskgroup", "backend=real places a thread in its "
                                                       "task's taskgroup once, before it starts")
        if cgroup_of(t) != "/" and (len(t.name) > COMM_LEN or t.name == MAIN_COMM):
            raise RtAppError(path, f"backend=real finds a task's threads by the name rt-app "
                                   f"gives them, which must be at most {COMM_LEN} characters "
                                   f"and not {MAIN_COMM!r} (rt-app's own)")


def cgroup_of(task) -> str:
    """The task's cgroup as the simulator names it: "/" or "/a/b"."""
    return "/" + (task.taskgroup or "/").strip("/")


def rtapp_json(config: RtAppConfig, logdir: Path, ns_per_loop: int,
               delay_us: int = PLACEMENT_US) -> dict:
    """The description as rt-app 1.0 runs it: every task with its phases
    spelled out (1.0 loops a task without phases forever, whatever its
    ``loop``), ``delay_us`` added to every delay, no taskgroup and no
    duration (the backend does both), the logs in ``logdir``, and
    ``ZERO_TASK`` last."""
    tasks = {}
    for t in config.tasks:
        if t.instance == 0:
            continue   # no thread, and 1.0 would still parse its events
        task = {"instance": t.instance, "loop": t.loop, "delay": t.delay_us + delay_us,
                "policy": t.sched.policy, "priority": t.sched.priority}
        if t.cpus is not None:
            task["cpus"] = list(t.cpus)
        task["phases"] = {p.name or "p0": _phase(p) for p in t.phases}
        tasks[t.name] = task
    tasks[ZERO_TASK] = {"instance": 1, "loop": 1, "policy": "SCHED_OTHER", "priority": 0,
                        "phases": {"zero": {"loop": 1, "timer": {"ref": "unique",
                                                                  "period": 0}}}}
    return {"global": {"calibration": int(ns_per_loop), "default_policy": config.default_policy,
                       "cumulative_slack": config.cumulative_slack, "logdir": str(logdir),
                       "log_basename": LOG_BASENAME, "gnuplot": False, "ftrace": False},
            "tasks": tasks}


def _phase(p) -> dict:
    out: dict = {"loop": p.loop}
    if p.cpus is not None:
        out["cpus"] = list(p.cpus)
    for e in p.events:
        if e.kind in (RUN, RUNTIME, SLEEP):
            out[e.key] = e.duration_us
        elif e.kind == TIMER:
            out[e.key] = {"ref": e.ref, "period": e.duration_us,
                          "mode": "relative" if e.relative else "absolute"}
    return out


def log_path(logdir: Path, name: str, index: int) -> Path:
    """rt-app's ``<logdir>/<log_basename>-<task>-<index>.log``."""
    return Path(logdir) / f"{LOG_BASENAME}-{name}-{index}.log"


def parse_log(text: str, source: str = "rt-app log") -> list[tuple[int, ...]]:
    """The loop lines of an rt-app 1.0 log: (idx, perf, run, period, start,
    end, rel_st, slack, c_duration, c_period, wu_lat) each.  ValueError for
    a header or line that is not 1.0's."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "#idx":
            if tuple(fields) != LOG_COLUMNS:
                raise ValueError(f"{source}:{n}: columns {fields}, expected rt-app 1.0's "
                                 f"{list(LOG_COLUMNS)}")
            continue
        if fields[0].startswith("#"):
            continue    # "# Policy : ..."
        try:
            values = tuple(int(f) for f in fields)
        except ValueError:
            values = ()
        if len(values) != len(LOG_COLUMNS):
            raise ValueError(f"{source}:{n}: not an rt-app 1.0 log line: {line!r}")
        rows.append(values)
    return rows


def zero_us(text: str, source: str = "rt-app log") -> int:
    """rt-app's t_zero (us, CLOCK_MONOTONIC) from ZERO_TASK's log: its timer
    expired at t_zero, ``slack`` before the loop's ``start``."""
    rows = parse_log(text, source)
    if not rows:
        raise ValueError(f"{source}: no loop logged")
    return rows[0][4] + rows[0][7]


def log_table(config: RtAppConfig, logdir: Path, t0_us: int) -> pa.Table:
    """rtapp.parquet from the threads' logs: times relative to ``t0_us``
    (the use case's start, when the simulator's threads start), loops
    numbered as the simulator numbers them (loop_positions), perf in
    thousands of loops as the schema says (1.0 logs loops)."""
    rows = []
    for th in config.threads():
        path = log_path(logdir, th.task.name, th.index)
        lines = parse_log(path.read_text(), str(path.name))
        positions = loop_positions(th.task)
        for values in lines:
            idx, perf, run, period, start, end, _, slack, c_dur, c_per, wu = values
            if idx != th.index:
                raise ValueError(f"{path.name}: #idx {idx}, expected {th.index}")
            pos = next(positions, None)
            if pos is None:
                raise ValueError(f"{path.name}: more loops than {th.task.name} runs")
            rows.append((th.name, cgroup_of(th.task), idx, *pos, perf // 1000, run, period,
                         start - t0_us, end - t0_us, start - t0_us, slack, c_dur, c_per, wu))
    cols = list(zip(*rows)) if rows else [[]] * len(RTAPP)
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, RTAPP)], schema=RTAPP)


def _run_once(binary: str, doc: dict, d: str, what: str) -> subprocess.CompletedProcess:
    """rt-app on ``doc`` (written to the directory ``d``), outside the run's
    cgroups; RealRunError naming ``what`` if it takes too long."""
    f = Path(d) / "doc.json"
    f.write_text(json.dumps(doc))
    try:
        return subprocess.run([binary, str(f)], capture_output=True, text=True,
                              timeout=CALIBRATION_TIMEOUT_S, preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise RealRunError(f"{what} took over {CALIBRATION_TIMEOUT_S} s") from None


def calibrate(binary: str, cpu: int) -> int:
    """ns per loop as rt-app measures it on ``cpu`` (its own calibration:
    about 5 s), outside the run's cgroups, before the run."""
    what = f"rt-app's calibration on CPU{cpu}"
    with tempfile.TemporaryDirectory(prefix="colosim-rtapp-cal-") as d:
        r = _run_once(binary, {"global": {"calibration": f"CPU{cpu}", "logdir": d,
                                          "log_basename": "cal"},
                               "tasks": {"cal": {"loop": 1, "phases": {"p": {"loop": 1,
                                                                             "run": 1}}}}},
                      d, what)
    m = CALIBRATION.search(r.stderr)
    if r.returncode != 0 or m is None:
        raise RealRunError(f"{what} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
    return int(m.group(1))


# the speed probe (loop_ns): one run of this length, rt-app told this pLoad
PROBE_RUN_US, PROBE_PLOAD_NS = 20_000, 20


def loop_ns(binary: str, cpu: int) -> float:
    """ns per iteration of rt-app's busy loop on ``cpu`` now: one thread runs
    ``PROBE_RUN_US`` alone there, rt-app told pLoad = ``PROBE_PLOAD_NS``, and
    its log gives the iterations done and the run's wall time (its CPU time,
    the CPU being otherwise idle).  The vCPU's speed of the moment, to set
    beside the profile's ``rtapp_loop_ns`` (calibration/bench/rtapp_loop.py
    measures that the same way)."""
    what = f"rt-app's speed probe on CPU{cpu}"
    with tempfile.TemporaryDirectory(prefix="colosim-rtapp-probe-") as d:
        r = _run_once(binary, {"global": {"calibration": PROBE_PLOAD_NS, "logdir": d,
                                          "log_basename": "probe",
                                          "default_policy": "SCHED_OTHER"},
                               "tasks": {"probe": {"cpus": [cpu], "loop": 1, "phases": {
                                   "p": {"loop": 1, "run": PROBE_RUN_US}}}}},
                      d, what)
        log = Path(d) / "probe-probe-0.log"
        rows = parse_log(log.read_text(), str(log)) if log.exists() else []
    if r.returncode != 0 or not rows or rows[0][1] <= 0:
        raise RealRunError(f"{what} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
    _, perf, run_us = rows[0][:3]
    return run_us * 1000 / perf


class RtAppProc:
    """The rt-app process of a run: started in the run's top cgroup on the
    run's CPUs, its JSON and logs in a temporary directory removed by
    :meth:`kill`.  To the load generator it is a worker that says nothing
    unless rt-app fails."""

    def __init__(self, binary: str, doc, procs_files: list[str], cpus: set[int]):
        """``doc(logdir)``: the JSON to run, given where its logs go."""
        self.name = BINARY
        self.logdir = Path(tempfile.mkdtemp(prefix="colosim-rtapp-"))
        self._stopped = self._reported = False
        try:
            (self.logdir / "taskset.json").write_text(json.dumps(doc(self.logdir), indent=1))
            self._stderr = open(self.logdir / "stderr", "wb")
            self.proc = spawn_in_cgroup([binary, str(self.logdir / "taskset.json")],
                                        procs_files, cpus, stdout=subprocess.DEVNULL,
                                        stderr=self._stderr)
        except BaseException:
            shutil.rmtree(self.logdir, ignore_errors=True)
            raise
        self.pid = self.proc.pid

    def stderr_tail(self) -> str:
        return (self.logdir / "stderr").read_text(errors="replace").strip()[-300:]

    def failed(self) -> str | None:
        """Why rt-app ended badly, if it did (None: running, or exited 0)."""
        code = self.proc.poll()
        return None if code in (None, 0) else f"rt-app exited with {code}: {self.stderr_tail()}"

    def read_lines(self) -> list[bytes]:
        why = self.failed()
        if why is None or self._reported:
            return []
        self._reported = True
        return [b"E " + why.encode()]

    def stop(self) -> None:
        """rt-app's own shutdown (SIGTERM), once."""
        if not self._stopped and self.proc.poll() is None:
            self._stopped = True
            os.kill(self.pid, signal.SIGTERM)

    def quit(self) -> None:
        self.kill()

    def kill(self) -> None:
        stop_session(self.proc)
        self._stderr.close()
        shutil.rmtree(self.logdir, ignore_errors=True)


def find_threads(pid: int, counts: dict[str, int]) -> dict[int, str] | None:
    """tid -> name of ``pid``'s threads named in ``counts``, once each name
    has that many threads (None before; ValueError if more)."""
    found = {}
    for d in os.scandir(f"/proc/{pid}/task"):
        try:
            comm = Path(d.path, "comm").read_text().rstrip("\n")
        except (FileNotFoundError, ProcessLookupError):
            continue      # exited between the listing and the read (ESRCH)
        if comm in counts:
            found[int(d.name)] = comm
    have = Counter(found.values())
    if any(have[n] > k for n, k in counts.items()):
        raise ValueError(f"more threads named {sorted(n for n in counts if have[n] > counts[n])} "
                         f"than the tasks have instances")
    return found if have == Counter(counts) else None


class RtAppRunner(Runner):
    """The ``rtapp`` capability: a cgroup per taskgroup (and its parents, as
    the simulator makes them), rt-app started and its threads placed just
    before t0, stopped at the end, its logs read."""

    RUNS = "rt-app task descriptions"

    def __init__(self, cfg: dict, b: RealBackend, trace=None):
        super().__init__(cfg, b)
        self.binary = rtapp_binary()
        self.file = str(self.w["file"])
        online = os.sched_getaffinity(0)
        try:
            cpus = set(parse_cpulist(b.cpus)) if b.cpus else set(online)
        except ValueError:
            cpus = set(online)     # run_real refuses the bad backend.cpus
        try:
            self.config = load(self.file)
            check_runnable(self.config, cpus, set(online))
        except RtAppError as e:
            raise RealRunError(f"workload.file = {self.file}: {e}") from None
        groups = {cgroup_of(t).strip("/") for t in self.config.tasks if t.instance} - {""}
        self.names = sorted({"/".join(g.split("/")[:i + 1]) for g in groups
                             for i in range(g.count("/") + 1)})
        self.placed = {t.name: cgroup_of(t) for t in self.config.tasks
                       if t.instance and cgroup_of(t) != "/"}
        self.proc: RtAppProc | None = None
        self.setup: Setup | None = None
        self.ns_per_loop = self.config.ns_per_loop
        self.calibration = "the file's ns per loop"
        self.t0_ns: int | None = None
        self.table: pa.Table | None = None

    def host_trace(self):
        return None

    def members(self) -> list[str]:
        return ["/"] + self.cgroups

    def perf_cgroups(self) -> list[str]:
        # the taskgroups nest in the run's top, which counts every thread once
        return ["/"]

    def rt_policies(self) -> dict[str, tuple[bool, int]]:
        return {}     # rt-app sets its threads' policies itself

    def start(self, s: Setup) -> None:
        self.setup = s
        # rt-app starts in the run's top cgroup; the run makes only its
        # taskgroups' cgroups, so a file without any has no top one yet
        s.cg.create("/")
        if self.ns_per_loop is None:
            cpu = int(self.config.calibration.removeprefix("CPU"))
            self.ns_per_loop = calibrate(self.binary, cpu)
            self.calibration = f"CPU{cpu}, measured by rt-app before the run"
        if any(t.sched.rt for t in self.config.tasks if t.instance):
            # an RT thread may only live in a cgroup with RT runtime
            s.host.ensure_rt_runtime("/")
        for c in self.cgroups:
            s.cg.make_threaded(c)

    def t0(self, earliest_ns: int) -> int:
        """Start rt-app now, place its threads while they wait out
        PLACEMENT_US, and return t_zero + PLACEMENT_US: the use case's start."""
        s = self.setup
        self.proc = RtAppProc(self.binary, lambda d: rtapp_json(self.config, d, self.ns_per_loop),
                              s.cg.procs_files("/"), s.cpus)
        self.workers.append(self.proc)
        deadline = time.monotonic() + PLACEMENT_US / 1e6
        counts = {t.name: t.instance for t in self.config.tasks if t.name in self.placed}
        found = self._wait(lambda: find_threads(self.proc.pid, counts), deadline,
                           "its threads to be named")
        for tid, name in found.items():
            s.cg.attach_thread(self.placed[name], tid)
        # every thread rt-app made (all of them at its start, waiting out
        # their delay now) is counted in the run's top, placed or not
        self.count_tasks("/", [int(t) for t in os.listdir(f"/proc/{self.proc.pid}/task")])
        placed_ns = time.monotonic_ns()
        for c in set(self.placed.values()):
            missing = {t for t, n in found.items() if self.placed[n] == c} - set(s.cg.threads(c))
            if missing:
                raise RealRunError(f"rt-app threads {sorted(missing)} are not in {c} after "
                                   f"the move")
        zero_log = log_path(self.proc.logdir, ZERO_TASK, len(self.config.threads()))
        zero = self._wait(lambda: self._zero(zero_log), deadline + 1.0, "its time zero")
        self.t0_ns = (zero + PLACEMENT_US) * NSEC_PER_USEC
        late = max(placed_ns, earliest_ns) - self.t0_ns
        if late >= 0:
            raise RealRunError(f"rt-app's threads started {late / 1e6:.1f} ms before they were "
                               f"placed and the run was ready (PLACEMENT_US = {PLACEMENT_US} "
                               f"us): the host is too slow or too busy")
        return self.t0_ns

    @staticmethod
    def _zero(path: Path) -> int | None:
        try:
            return zero_us(path.read_text(), path.name)
        except (FileNotFoundError, ValueError):
            return None     # not written yet: the thread's stdio flushes when it exits

    def _wait(self, poll, deadline: float, what: str):
        while True:
            got = poll()
            if got is not None:
                return got
            why = self.proc.failed()
            if why is not None:
                raise RealRunError(why)
            if time.monotonic() > deadline:
                raise RealRunError(f"rt-app did not start in time (waited for {what}): "
                                   f"{self.proc.stderr_tail()}")
            time.sleep(0.0005)

    def drive(self, rows, t0_ns, duration_ns, timers, spin_ns, completions):
        stop_ns = self.config.duration_s * NS if self.config.duration_s > 0 else None
        if stop_ns is not None and stop_ns < duration_ns:
            timers = list(timers) + [Timer(stop_ns, None, lambda now: self.proc.stop())]
        return super().drive(rows, t0_ns, duration_ns, timers, spin_ns, completions)

    def finish(self, host) -> None:
        """Stop rt-app (threads end their event; the loop in progress is not
        logged, as in the simulator) and read its logs."""
        self.proc.stop()
        try:
            self.proc.proc.wait(float(self.b.grace_s))
        except subprocess.TimeoutExpired:
            raise RealRunError(f"rt-app did not stop within backend.grace_s = "
                               f"{self.b.grace_s} s of SIGTERM (a thread in a long event); "
                               f"its logs are incomplete") from None
        why = self.proc.failed()
        if why is not None:
            raise RealRunError(why)
        try:
            self.table = log_table(self.config, self.proc.logdir, self.t0_ns // NSEC_PER_USEC)
        except (OSError, ValueError) as e:
            raise RealRunError(f"reading rt-app's logs: {e}") from None

    def requests(self, res, rows, t0, warmup_ns, end_ns):
        # rt-app serves no requests: requests.parquet is empty, as the simulator's
        return request_table([]), 0

    def result_trace(self):
        return None

    def tables(self) -> dict[str, pa.Table]:
        return {"rtapp": self.table} if self.table is not None else {}

    def summary_columns(self, perf_samples, perf_offset_s, warmup_ns):
        return {"rtapp_ns_per_loop": float(self.ns_per_loop),
                "rtapp_calibration": self.calibration}
