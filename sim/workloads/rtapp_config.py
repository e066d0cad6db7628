"""rt-app's JSON task description, parsed into plain dataclasses.

rt-app (github.com/scheduler-tools/rt-app; doc/tutorial.txt, and the parser
src/rt-app_parse_config.c this module mirrors) describes threads that run,
sleep and wait for timers, phase by phase.  This module reads the subset
colosim runs, with rt-app's own defaults and semantics, and refuses every
other key before anything runs, naming its path (``tasks.t1.phases.p1.lock``)
and listing what is supported.  It imports nothing from colosim: the
simulator (sim/workloads/rtapp.py) and the real backend, which runs the
rt-app binary itself, read the same model.

Supported, with rt-app's defaults:

- ``global``: ``duration`` (s; -1, the default, or 0: until every thread
  ends), ``calibration`` ("CPU<n>", the default "CPU0", or an integer ns per
  loop), ``default_policy`` (SCHED_OTHER), ``cumulative_slack`` (false); and
  ``logdir``, ``log_basename``, ``log_size``, ``ftrace``, ``gnuplot``,
  ``lock_pages``, ``pi_enabled``, ``io_device``, ``mem_buffer_size``, which
  only say where and how rt-app writes its logs and traces, or set up
  mutexes and buffers for events colosim does not run, so they change no
  schedule: OUTPUT_GLOBAL_KEYS.
- ``tasks.<name>``: ``instance`` (1), ``loop`` (-1: forever), ``delay`` (us,
  0), ``policy`` (global.default_policy), ``priority`` (the nice for
  SCHED_OTHER, 0; the RT priority for SCHED_RR/SCHED_FIFO, 10), ``cpus``
  (all), ``taskgroup`` (none: the root cgroup), and ``phases``, or the
  events of its one phase directly.
- ``phases.<name>``: ``loop`` (1), ``policy``, ``priority``, ``cpus``,
  ``taskgroup`` (each unset: unchanged; taskgroup "/" is the root), and
  events.
- events, in the order of their keys, recognised by prefix as rt-app does
  (``run0``, ``sleep1``): ``run`` (us of work at the calibrated CPU's
  speed), ``runtime`` (us of wall-clock time spent running), ``sleep``
  (us), ``timer`` (``{"ref", "period" (us), "mode": "relative" | "absolute"}``;
  ``ref`` defaults to "unknown", ``period`` to 0, ``mode`` to relative).

rt-app's files are json-c's dialect: C and C++ comments and trailing
commas are accepted here as there.  Duplicate keys are refused (rt-app's
workgen renames them; json-c would keep one silently).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Iterator, Optional

SCHED_OTHER = "SCHED_OTHER"
SCHED_RR = "SCHED_RR"
SCHED_FIFO = "SCHED_FIFO"
POLICIES = (SCHED_OTHER, SCHED_RR, SCHED_FIFO)
RT_POLICIES = (SCHED_RR, SCHED_FIFO)
# rt-app knows these too; colosim models none of them
UNSUPPORTED_POLICIES = ("SCHED_BATCH", "SCHED_IDLE", "SCHED_DEADLINE")
NICE_RANGE = (-20, 19)
RT_PRIORITY_RANGE = (1, 99)
# rt-app-types.h: DEFAULT_THREAD_NICE, DEFAULT_THREAD_PRIORITY
DEFAULT_PRIORITY = {SCHED_OTHER: 0, SCHED_RR: 10, SCHED_FIFO: 10}

RUN, RUNTIME, SLEEP, TIMER = "run", "runtime", "sleep", "timer"
# checked in this order: a key is the first event whose name it starts with
# ("runtime1" is a runtime, "run1" a run), as parse_task_event_data does
EVENTS = (RUNTIME, RUN, SLEEP, TIMER)
# rt-app's other events (its events[] table), refused by name
UNSUPPORTED_EVENTS = ("lock", "unlock", "wait", "signal", "broad", "sync", "suspend",
                      "resume", "memrun", "mem", "iorun", "yield", "barrier", "fork",
                      "sem_post", "sem_wait")
TIMER_KEYS = ("ref", "period", "mode")
TIMER_MODES = ("relative", "absolute")
# a timer whose ref starts with this is one timer per thread, not shared
UNIQUE_TIMER = "unique"

GLOBAL_KEYS = ("duration", "calibration", "default_policy", "cumulative_slack")
OUTPUT_GLOBAL_KEYS = {"logdir": str, "log_basename": str, "log_size": (str, int),
                      "ftrace": (str, bool), "gnuplot": bool, "lock_pages": bool,
                      "pi_enabled": bool, "io_device": str, "mem_buffer_size": int}
SCHED_KEYS = ("policy", "priority", "cpus", "taskgroup")
TASK_KEYS = ("instance", "loop", "delay", "phases") + SCHED_KEYS
PHASE_KEYS = ("loop",) + SCHED_KEYS
TOP_KEYS = ("tasks", "global")


class RtAppError(ValueError):
    """The file is not JSON, or uses what colosim does not run; ``path`` is
    the offending key's path (``tasks.t1.phases.p1.barrier``), or ''."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass(frozen=True)
class Sched:
    """A scheduling policy and its priority: the nice for SCHED_OTHER, the
    RT priority (1..99) for SCHED_RR and SCHED_FIFO."""
    policy: str
    priority: int

    @property
    def rt(self) -> bool:
        return self.policy in RT_POLICIES


@dataclass(frozen=True)
class Event:
    """One event of a phase.  ``duration_us`` is the run, runtime or sleep
    length, or the timer's period.  A timer's ``ref`` names its timer, the
    same one for every thread that names it unless it starts with
    "unique" (then one per thread); ``relative`` is that timer's mode (a
    timer is absolute if any of its events says so, as in rt-app, where
    the mode belongs to the timer resource)."""
    kind: str            # run | runtime | sleep | timer
    key: str             # the key as written ("run0")
    duration_us: int
    ref: Optional[str] = None
    relative: bool = True

    @property
    def unique(self) -> bool:
        return self.kind == TIMER and self.ref.startswith(UNIQUE_TIMER)


@dataclass(frozen=True)
class Phase:
    """A phase: its events run ``loop`` times (-1: forever) before the next
    phase.  ``sched`` is the policy and priority rt-app sets when the phase
    starts, resolved as rt-app resolves it (a priority without a policy
    keeps the policy in force; a policy without a priority takes that
    policy's default), or None where the phase leaves them unchanged;
    ``cpus`` is the affinity during the phase (None: the task's), and
    ``taskgroup`` the taskgroup it moves to (None: unchanged)."""
    name: str
    loop: int
    events: tuple
    sched: Optional[Sched] = None
    cpus: Optional[tuple] = None
    taskgroup: Optional[str] = None

    @property
    def c_duration_us(self) -> int:
        """rt-app's c_duration of one loop: the run and runtime events' lengths."""
        return sum(e.duration_us for e in self.events if e.kind in (RUN, RUNTIME))

    @property
    def c_period_us(self) -> int:
        """rt-app's c_period of one loop: the timers' periods."""
        return sum(e.duration_us for e in self.events if e.kind == TIMER)


@dataclass(frozen=True)
class Task:
    """A thread object of ``tasks``: ``instance`` threads run it.  ``loop``
    is how many times the phases run in turn (-1: forever); ``delay_us``
    the wait before the first phase; ``sched``, ``cpus`` (None: all CPUs)
    and ``taskgroup`` (None: the root cgroup) what each thread starts with."""
    name: str
    instance: int
    loop: int
    delay_us: int
    sched: Sched
    cpus: Optional[tuple]
    taskgroup: Optional[str]
    phases: tuple


@dataclass(frozen=True)
class Thread:
    """One thread rt-app creates: ``name`` is how rt-app names it (its
    pthread name, the ``<log_basename>-<name>.log`` file name and the
    ``ftrace`` prefix): ``<task>-<index>``, ``index`` counting every task's
    instances in file order from 0 (rt-app's ``ind``, the log's ``#idx``)."""
    name: str
    index: int
    task: Task


@dataclass(frozen=True)
class RtAppConfig:
    """The whole description; ``duration_s`` -1 runs until every thread ends."""
    tasks: tuple
    duration_s: int = -1
    calibration: object = "CPU0"      # "CPU<n>" or an int: ns per loop
    default_policy: str = SCHED_OTHER
    cumulative_slack: bool = False

    def threads(self) -> list:
        """The threads rt-app creates at start, in its order."""
        index = count()
        return [Thread(f"{t.name}-{i}", i, t)
                for t in self.tasks for i in (next(index) for _ in range(t.instance))]

    @property
    def ns_per_loop(self) -> Optional[int]:
        """The calibration as ns per loop, if the file gives one (else
        rt-app measures it on ``calibration``'s CPU)."""
        return self.calibration if isinstance(self.calibration, int) else None


def loop_positions(task: Task) -> Iterator[tuple]:
    """(thread_loop, phase, phase_loop) of each loop a thread of ``task``
    runs, in order: one rt-app log line each (thread_body's counters)."""
    thread_loop = 0
    while thread_loop != task.loop:
        for phase, p in enumerate(task.phases):
            phase_loop = 0
            while phase_loop != p.loop:
                yield thread_loop, phase, phase_loop
                phase_loop += 1
        thread_loop += 1


def load(path) -> RtAppConfig:
    """Parse the rt-app JSON file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise RtAppError("", f"cannot read {path}: {err.strerror}") from None
    return loads(text, str(path))


def loads(text: str, source: str = "<rt-app json>") -> RtAppConfig:
    """Parse an rt-app JSON description (``source`` names it in errors)."""
    try:
        root = json.loads(_json_c(text), object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        raise RtAppError("", f"{source}: malformed JSON at line {err.lineno} column "
                             f"{err.colno}: {err.msg}") from None
    except _Duplicate as dup:
        raise RtAppError("", f"{source}: duplicate key {dup.key!r} (rt-app's workgen "
                             f"numbers repeated events: run0, run1)") from None
    return _parse(root)


# ---------------------------------------------------------------------------
# json-c's dialect: comments and trailing commas

_COMMENTS = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMAS = re.compile(r'"(?:[^"\\]|\\.)*"|,(?=\s*[}\]])')


def _json_c(text: str) -> str:
    """``text`` without comments and trailing commas, strings untouched; each
    becomes spaces, so a JSON error's line and column still point into the file."""
    def blank(m):
        tok = m.group()
        return tok if tok.startswith('"') else re.sub(r"[^\n]", " ", tok)
    return _TRAILING_COMMAS.sub(blank, _COMMENTS.sub(blank, text))


class _Duplicate(Exception):
    def __init__(self, key):
        self.key = key


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


# ---------------------------------------------------------------------------
# the model

def _parse(root) -> RtAppConfig:
    if not isinstance(root, dict):
        raise RtAppError("", "the file must hold a JSON object with \"tasks\"")
    _only(root, "", TOP_KEYS, "the top level")
    g = root.get("global", {})
    if not isinstance(g, dict):
        raise RtAppError("global", "must be an object")
    _only(g, "global", GLOBAL_KEYS + tuple(OUTPUT_GLOBAL_KEYS), "global")
    for key, types in OUTPUT_GLOBAL_KEYS.items():
        if key in g and not _is(g[key], types):
            raise RtAppError(f"global.{key}", f"has the wrong type ({type(g[key]).__name__})")
    duration = _int(g, "global", "duration", -1)
    if duration < -1:
        raise RtAppError("global.duration", "must be -1 (until the threads end) or >= 0 s")
    calibration = g.get("calibration", "CPU0")
    if _is(calibration, int):
        if calibration <= 0:
            raise RtAppError("global.calibration", "ns per loop must be > 0")
    elif not (isinstance(calibration, str) and re.fullmatch(r"CPU\d+", calibration)):
        raise RtAppError("global.calibration",
                         'must be "CPU<n>" (calibrate on that CPU) or an integer ns per loop')
    default_policy = _policy(g, "global", "default_policy", SCHED_OTHER)
    cumulative = g.get("cumulative_slack", False)
    if not isinstance(cumulative, bool):
        raise RtAppError("global.cumulative_slack", "must be true or false")

    tasks = root.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise RtAppError("tasks", "must be an object with at least one task")
    parsed = [_task(name, obj, f"tasks.{name}", default_policy) for name, obj in tasks.items()]
    parsed = _resolve_timers(parsed)
    return RtAppConfig(tuple(parsed), duration, calibration, default_policy, cumulative)


def _task(name: str, obj, path: str, default_policy: str) -> Task:
    if not isinstance(obj, dict):
        raise RtAppError(path, "a task must be an object")
    phases_obj = obj.get("phases")
    if phases_obj is not None:
        _only(obj, path, TASK_KEYS, "a task with phases (its events go in the phases)")
    else:
        _only(obj, path, TASK_KEYS, "a task", events=True)
    instance = _int(obj, path, "instance", 1)
    if instance < 0:
        raise RtAppError(f"{path}.instance", "must be >= 0")
    delay = _int(obj, path, "delay", 0)
    if delay < 0:
        raise RtAppError(f"{path}.delay", "must be >= 0 us")
    # the task's own policy: the global default, its priority that policy's default
    policy = _policy(obj, path, "policy", default_policy)
    sched = Sched(policy, _priority(obj, path, policy))
    cpus = _cpus(obj, path)
    taskgroup = _taskgroup(obj, path)
    if phases_obj is not None:
        if not isinstance(phases_obj, dict) or not phases_obj:
            raise RtAppError(f"{path}.phases", "must be an object with at least one phase")
        loop = _int(obj, path, "loop", -1)
        phases = []
        current = sched
        for pname, pobj in phases_obj.items():
            phase = _phase(pname, pobj, f"{path}.phases.{pname}", current)
            current = phase.sched or current
            phases.append(phase)
    else:
        # one phase, the task object itself: "loop", if given, is the
        # phase's and the thread runs it once; unset, the phase loops forever
        phase = _phase("", obj, path, sched)
        phases = [Phase("", _int(obj, path, "loop", 1), phase.events)]
        loop = 1 if "loop" in obj else -1
    if loop < -1:
        raise RtAppError(f"{path}.loop", "must be -1 (forever) or >= 0")
    _check_taskgroup_policy(path, sched, taskgroup, phases)
    return Task(name, instance, loop, delay, sched, cpus, taskgroup, tuple(phases))


def _phase(name: str, obj, path: str, current: Sched) -> Phase:
    if not isinstance(obj, dict):
        raise RtAppError(path, "a phase must be an object")
    if name:
        _only(obj, path, PHASE_KEYS, "a phase", events=True)
    loop = _int(obj, path, "loop", 1)
    if loop == 0 or loop < -1:
        raise RtAppError(f"{path}.loop", "must be -1 (forever) or >= 1 (rt-app would count "
                                          "loops until its counter overflows)")
    events = tuple(_event(key, value, f"{path}.{key}")
                   for key, value in obj.items() if _event_kind(key))
    if not events:
        raise RtAppError(path, f"has no events (supported: {', '.join(EVENTS)})")
    sched = None
    if name and ("policy" in obj or "priority" in obj):
        # parse_sched_data(obj, same): a policy alone takes its default
        # priority, a priority alone keeps the policy in force
        policy = _policy(obj, path, "policy", current.policy)
        sched = Sched(policy, _priority(obj, path, policy))
    return Phase(name, loop, events, sched, _cpus(obj, path) if name else None,
                 _taskgroup(obj, path) if name else None)


def _event_kind(key: str) -> Optional[str]:
    for kind in EVENTS:
        if key.startswith(kind):
            return kind
    return None


def _event(key: str, value, path: str) -> Event:
    kind = _event_kind(key)
    if kind != TIMER:
        if not _is(value, int) or value < 0:
            raise RtAppError(path, f"a {kind} event takes an integer >= 0 (us)")
        return Event(kind, key, value)
    if not isinstance(value, dict):
        raise RtAppError(path, 'a timer takes {"ref": name, "period": us, "mode": '
                               '"relative" | "absolute"}')
    _only(value, path, TIMER_KEYS, "a timer")
    ref = value.get("ref", "unknown")
    if not isinstance(ref, str):
        raise RtAppError(f"{path}.ref", "must be a string")
    period = _int(value, path, "period", 0)
    if period < 0:
        raise RtAppError(f"{path}.period", "must be >= 0 us")
    mode = value.get("mode", "relative")
    if mode not in TIMER_MODES:
        raise RtAppError(f"{path}.mode", f"must be one of {', '.join(TIMER_MODES)}")
    return Event(kind, key, period, ref, mode == "relative")


def _resolve_timers(tasks: list) -> list:
    """Give every timer event its timer's mode: absolute if any event of
    that timer says absolute (the mode is the timer resource's; a "unique"
    timer is its task's own)."""
    absolute = set()
    for t in tasks:
        for p in t.phases:
            for e in p.events:
                if e.kind == TIMER and not e.relative:
                    absolute.add(_timer_id(t, e))
    out = []
    for t in tasks:
        phases = tuple(
            Phase(p.name, p.loop,
                  tuple(Event(e.kind, e.key, e.duration_us, e.ref,
                              _timer_id(t, e) not in absolute) if e.kind == TIMER else e
                        for e in p.events),
                  p.sched, p.cpus, p.taskgroup)
            for p in t.phases)
        out.append(Task(t.name, t.instance, t.loop, t.delay_us, t.sched, t.cpus,
                        t.taskgroup, phases))
    return out


def _timer_id(task: Task, event: Event) -> tuple:
    return (task.name if event.unique else None, event.ref)


def _check_taskgroup_policy(path: str, sched: Sched, taskgroup, phases) -> None:
    """rt-app refuses a taskgroup for a thread whose policy is not a fair
    one (check_taskgroup_policy_dep), following the phases in order."""
    current, tg = sched, taskgroup
    for p in [Phase("", 1, (), sched, None, taskgroup)] + list(phases):
        current = p.sched or current
        tg = p.taskgroup or tg
        if tg is not None and current.rt:
            where = f"{path}.phases.{p.name}" if p.name else path
            raise RtAppError(where, f"rt-app puts only SCHED_OTHER threads in taskgroups, "
                                    f"not {current.policy}")


# ---------------------------------------------------------------------------
# keys and values

def _only(obj: dict, path: str, allowed, what: str, events: bool = False) -> None:
    for key in obj:
        if key in allowed or (events and _event_kind(key)):
            continue
        where = f"{path}.{key}" if path else key
        supported = list(allowed) + ([f"events {', '.join(EVENTS)}"] if events else [])
        if events and any(key.startswith(e) for e in UNSUPPORTED_EVENTS):
            raise RtAppError(where, f"the rt-app event {key!r} is not supported; {what} "
                                    f"supports: {', '.join(supported)}")
        raise RtAppError(where, f"unknown or unsupported key; {what} supports: "
                                f"{', '.join(supported)}")


def _is(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _int(obj: dict, path: str, key: str, default: int) -> int:
    value = obj.get(key, default)
    if not _is(value, int):
        raise RtAppError(f"{path}.{key}", "must be an integer")
    return value


def _policy(obj: dict, path: str, key: str, default: str) -> str:
    policy = obj.get(key, default)
    if policy in UNSUPPORTED_POLICIES:
        raise RtAppError(f"{path}.{key}", f"{policy} is not modelled; supported: "
                                          f"{', '.join(POLICIES)}")
    if policy not in POLICIES:
        raise RtAppError(f"{path}.{key}", f"must be one of {', '.join(POLICIES)}")
    return policy


def _priority(obj: dict, path: str, policy: str) -> int:
    priority = _int(obj, path, "priority", DEFAULT_PRIORITY[policy])
    low, high = RT_PRIORITY_RANGE if policy in RT_POLICIES else NICE_RANGE
    if not low <= priority <= high:
        meaning = "RT priority" if policy in RT_POLICIES else "nice"
        raise RtAppError(f"{path}.priority", f"the {meaning} of {policy} must be in "
                                             f"[{low}, {high}]")
    return priority


def _cpus(obj: dict, path: str) -> Optional[tuple]:
    if "cpus" not in obj:
        return None
    cpus = obj["cpus"]
    if not isinstance(cpus, list) or not cpus or not all(_is(c, int) and c >= 0 for c in cpus):
        raise RtAppError(f"{path}.cpus", "must be a non-empty list of CPU numbers")
    return tuple(sorted(set(cpus)))


def _taskgroup(obj: dict, path: str) -> Optional[str]:
    tg = obj.get("taskgroup", "")
    if not isinstance(tg, str):
        raise RtAppError(f"{path}.taskgroup", "must be a string")
    if tg == "":
        return None      # rt-app: an empty taskgroup is no taskgroup
    if not re.fullmatch(r"/|(/[A-Za-z0-9_.-]+)+", tg):
        raise RtAppError(f"{path}.taskgroup", 'must be "/" (the root) or a cgroup path '
                                              'starting with "/" (letters, digits, "_", ".", "-")')
    return tg
