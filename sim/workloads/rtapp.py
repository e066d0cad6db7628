"""``workload=rtapp workload.file=X.json``: rt-app's task description
(sim/workloads/rtapp_config.py parses it) run on the simulated host.

Each rt-app thread is a simulated task, in its taskgroup's cgroup (the
root without one), with its policy, priority and affinity, that walks its
phases as rt-app's thread_body() and run_event() do, and logs one row per
loop of a phase with the columns of rt-app's log (results/schema.py RTAPP,
docs/rtapp.md):

- ``run``: CPU work, X us at the speed of the CPU rt-app calibrated on
  (speed 1 here), in rt-app's whole loops when ``calibration`` gives ns
  per loop; it takes longer when the task waits or runs slower (SMT,
  memory contention).  With a profile that measured rt-app's loop on its
  host (``calibration.rtapp_loop_ns``, ``rtapp_calibration_ns``:
  calibration/bench/rtapp_loop.py) the work is what rt-app really runs
  there: X us / pLoad iterations (pLoad the file's number, or for
  ``"CPU<n>"`` what rt-app's own calibration gives on that host) of
  ``rtapp_loop_ns`` each;
- ``runtime``: runs in 32 us slices of work until X us of wall time have
  passed since the event began, as rt-app's loop does;
- ``sleep``: blocks X us, as nanosleep() does, also for X = 0 (the
  hrtimer still has its slack);
- ``timer``: blocks until the timer's next expiry, timer_next += period
  from the first use (rt-app starts every timer at the use case's start
  plus the thread's delay); a late thread does not block, and a relative
  timer then restarts from now; the wake-up latency is measured from the
  expiry to the moment the thread runs again (what clock_gettime sees in
  rt-app after clock_nanosleep returns), switch cost included.

The thread is a generator driven from ``burst_done``: it yields the CPU work
it needs next, or the instant it sleeps until; after a sleep the task
wakes with no work, so its body resumes at the instant it is back on a
CPU, which is when rt-app's next line would run.

``global.duration`` stops the threads as rt-app does (a thread finishes
the event it runs, a sleeping one is cancelled, the loop in progress is
not logged); the run itself lasts ``duration_s``, so the shorter of the
two bounds the threads.  requests.parquet stays empty: rt-app has no
requests, and its latencies are rtapp.parquet's wu_lat_us and slack_us.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from results.schema import RTAPP
from sim.config import MISSING, tunable
from sim.engine import NSEC_PER_SEC
from sim.sched_class import SCHED_FIFO, SCHED_NORMAL, SCHED_RR
from sim.task import BURST_BLOCK, BURST_EXIT
from sim.workloads.base import Workload, WorkloadConfig
from sim.workloads.rtapp_config import (RUN, RUNTIME, SCHED_OTHER, SLEEP, TIMER, RtAppError,
                                        load, loop_positions)

# rt-app's policy names -> the machine's
POLICY = {SCHED_OTHER: SCHED_NORMAL, "SCHED_RR": SCHED_RR, "SCHED_FIFO": SCHED_FIFO}
NSEC_PER_USEC = 1000
# rt-app's runtime event works in loadwait(32) slices between clock reads
RUNTIME_SLICE_US = 32


@dataclass
class RtAppWorkloadConfig(WorkloadConfig):
    # rt-app JSON task description (a path, relative to the working directory)
    file: str = tunable(MISSING, pattern=(r".+\.json", "must name a .json file"))

    @classmethod
    def check(cls, c, key: str) -> None:
        """The file parses, and fits what the simulator models on this host."""
        ncpus = c.get("host.sockets") * c.get("host.cores") * c.get("host.threads_per_core")
        try:
            simulable(load(c.get(f"{key}.file")), ncpus)
        except (RtAppError, ValueError) as err:
            c.require(f"{key}.file", False, str(err))


def simulable(config, ncpus: int) -> None:
    """Raise RtAppError for what rt-app runs but the simulator does not:
    CPUs the host lacks, a thread moving between taskgroups, a fair
    thread changing its nice (the machine fixes a task's nice at fork)."""
    for t in config.tasks:
        path = f"tasks.{t.name}"
        for where, cpus in [(path, t.cpus)] + [(f"{path}.phases.{p.name}", p.cpus)
                                               for p in t.phases]:
            if cpus is not None and max(cpus) >= ncpus:
                raise RtAppError(f"{where}.cpus", f"CPUs must be in 0..{ncpus - 1} (the host "
                                                  f"has {ncpus})")
        for p in t.phases:
            if p.taskgroup is not None and p.taskgroup != (t.taskgroup or "/"):
                raise RtAppError(f"{path}.phases.{p.name}.taskgroup",
                                 "the simulator keeps a thread in its task's taskgroup; "
                                 "moving it in a phase is not modelled")
        _nice(t, path)


def _nice(task, path: str) -> int:
    """The one nice a task's SCHED_OTHER settings use (0 if none)."""
    nices = {s.priority for s in [task.sched] + [p.sched for p in task.phases]
             if s is not None and s.policy == SCHED_OTHER}
    if len(nices) > 1:
        raise RtAppError(f"{path}", f"its phases set nices {sorted(nices)}: the simulator "
                                    "fixes a task's nice when it forks")
    return nices.pop() if nices else 0


def _usec(ns: int) -> int:
    """rt-app's timespec_to_usec: ns to us, rounded half away from zero."""
    q = (abs(ns) + NSEC_PER_USEC // 2) // NSEC_PER_USEC
    return q if ns >= 0 else -q


class _Timer:
    __slots__ = ("t_next",)

    def __init__(self):
        self.t_next = None            # unset until its first use (res.timer.init)


@dataclass
class _Log:
    """One loop's log_data_t."""
    perf: int | None = 0
    duration: int = 0
    wu_latency: int = 0
    c_duration: int = 0
    c_period: int = 0
    slack: int = 0


class RtAppWorkload(Workload):
    CONFIG = RtAppWorkloadConfig
    REAL_BACKEND = "rtapp"

    def __init__(self, cfg: RtAppWorkloadConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.rtapp = load(cfg.file)
        simulable(self.rtapp, machine.topology.nr_cpus)
        self.p_load = self.rtapp.ns_per_loop
        # CPU ns of one of rt-app's iterations on the host (None: p_load, speed 1)
        self.loop_ns: float | None = None
        self.running = True           # rt-app's continue_running
        self.timers: dict = {}
        self.rows: list = []
        self.bodies: dict = {}        # pid -> the thread's generator
        self.tasks = []
        for th in self.rtapp.threads():
            t = th.task
            tg = machine.root_tg if t.taskgroup in (None, "/") else \
                machine.groups.get("/" + t.taskgroup.strip("/")) or \
                machine.create_group(t.taskgroup)
            p = machine.new_task(th.name, tg, _nice(t, ""), 0, 0, self)
            # rt-app sets the policy itself, whatever the scheduler option's default
            machine.sched_setscheduler(p, POLICY[t.sched.policy],
                                       t.sched.priority if t.sched.rt else 0)
            if t.cpus is not None:
                p.cpus_allowed = frozenset(t.cpus)
            self.tasks.append(p)
            self.bodies[p.pid] = self._thread_body(p, th)

    def set_host_loop(self, loop_ns: float, calibration_ns: int | None) -> None:
        """What rt-app's busy loop is on the modelled host (module
        docstring, ``run``): ``loop_ns`` per iteration, and the pLoad its
        calibration gives there when the file does not fix one."""
        if not loop_ns > 0:
            raise ValueError(f"calibration.rtapp_loop_ns = {loop_ns}: must be > 0")
        if calibration_ns is not None and calibration_ns < 1:
            raise ValueError(f"calibration.rtapp_calibration_ns = {calibration_ns}: must be "
                             f">= 1 (rt-app's pLoad, whole ns)")
        self.loop_ns = float(loop_ns)
        if self.p_load is None and calibration_ns is not None:
            self.p_load = int(calibration_ns)

    def start(self):
        # t_zero and main_app_start: the use case starts for every thread at
        # once, anywhere between two of the host's ticks, as a real rt-app's
        # does (the real backend's starts 200 ms after an arbitrary instant).
        # Started on a tick, every timer whose period is a multiple of the
        # tick would expire just after one, always against a task that has
        # just been picked and still holds its slice
        phase = int(self.engine.rng("rtapp.t_zero").uniform() * self.machine.tick_ns)
        self.t_zero = self.engine.now + phase
        if self.rtapp.duration_s > 0:
            self.engine.call_at(self.t_zero + self.rtapp.duration_s * NSEC_PER_SEC, self._shutdown)
        self.engine.call_at(self.t_zero, self._fork_threads)

    def _fork_threads(self):
        ncpus = self.machine.topology.nr_cpus
        for i, p in enumerate(self.tasks):
            hint = min(p.cpus_allowed) if p.cpus_allowed is not None else i % ncpus
            self.machine.wake_up_new_task(p, hint)

    def _shutdown(self):
        self.running = False

    def burst_done(self, p):
        try:
            kind, value = next(self.bodies[p.pid])
        except StopIteration:
            return BURST_EXIT
        if kind == RUN:
            p.remaining = value
            return 0
        # sleep until ``value`` (clock_nanosleep: the machine's hrtimer, its
        # slack and interrupt), then resume the body once back on a CPU
        p.remaining = 0
        self.machine.timer_sleep(p, value, self._expire)
        return BURST_BLOCK

    def _expire(self, p):
        # pthread_cancel() reaches a sleeping thread at once: it never runs again
        if self.running:
            self.machine.wake_up(p)

    def _work(self, us: int) -> tuple[int, int | None]:
        """loadwait(us): the CPU work (ns at speed 1) and perf it counts.
        Without ns per loop the simulator has no loop to count: the work is
        exactly ``us`` and perf unknown."""
        if self.p_load is None:
            return us * NSEC_PER_USEC, None
        p_load = self.p_load
        secs, rest = divmod(us, 1_000_000)   # whole seconds in bursts, as rt-app
        loops = secs * (NSEC_PER_SEC // p_load) + rest * NSEC_PER_USEC // p_load
        work = loops * p_load if self.loop_ns is None else int(loops * self.loop_ns)
        return work, us // p_load

    def _thread_body(self, p, th):
        """thread_body() and run_event() of one rt-app thread: yields
        (RUN, ns of work) or (SLEEP, absolute wake-up time in ns)."""
        engine, machine = self.engine, self.machine
        task = th.task
        cumulative = self.rtapp.cumulative_slack
        t_first = self.t_zero + task.delay_us * NSEC_PER_USEC
        if task.delay_us > 0:
            yield SLEEP, t_first
        cpus = p.cpus_allowed
        sched = task.sched
        for thread_loop, phase, phase_loop in loop_positions(task):
            if not self.running:
                return
            ph = task.phases[phase]
            # set_thread_affinity(): the phase's CPUs, else the task's, else all
            want = frozenset(ph.cpus) if ph.cpus is not None else \
                frozenset(task.cpus) if task.cpus is not None else None
            if want != cpus:
                cpus = want
                # applied once this burst-end callback is over: the machine
                # may move the running task, which it cannot do from inside it
                engine.call_later(0, machine.set_cpus_allowed, p, cpus)
            if ph.sched is not None and ph.sched != sched:
                sched = ph.sched
                engine.call_later(0, machine.sched_setscheduler, p, POLICY[sched.policy],
                                  sched.priority if sched.rt else 0)
            log = _Log(perf=0 if self.p_load is not None else None)
            t_start = engine.now
            for e in ph.events:
                if not self.running:
                    break
                if e.kind in (RUN, RUNTIME):
                    log.c_duration += e.duration_us
                    t0 = engine.now
                    if e.kind == RUN:
                        work, perf = self._work(e.duration_us)
                        if work:
                            yield RUN, work
                    else:
                        perf = None if self.p_load is None else 0
                        while True:
                            work, slice_perf = self._work(RUNTIME_SLICE_US)
                            yield RUN, work
                            if perf is not None:
                                perf += slice_perf
                            if (engine.now - t0) // NSEC_PER_USEC >= e.duration_us:
                                break
                    if log.perf is not None:
                        log.perf += perf
                    log.duration += _usec(engine.now - t0)
                elif e.kind == SLEEP:
                    yield SLEEP, engine.now + e.duration_us * NSEC_PER_USEC
                else:
                    yield from self._timer(e, th, t_first, log, cumulative)
            t_end = engine.now
            if self.running:
                self.rows.append((th.name, p.tg.name, th.index, thread_loop, phase, phase_loop,
                                  log.perf, log.duration, _usec(t_end - t_start),
                                  _usec(t_start - self.t_zero), _usec(t_end - self.t_zero),
                                  _usec(t_start - self.t_zero),
                                  log.slack, log.c_duration, log.c_period, log.wu_latency))

    def _timer(self, e, th, t_first: int, log: _Log, cumulative: bool):
        """rt-app's timer event: sleep to the timer's next expiry."""
        log.c_period += e.duration_us
        key = (th.index if e.unique else None, e.ref)
        timer = self.timers.get(key) or self.timers.setdefault(key, _Timer())
        if timer.t_next is None:
            timer.t_next = t_first
        timer.t_next += e.duration_us * NSEC_PER_USEC
        now = self.engine.now
        slack = _usec(timer.t_next - now)
        log.slack = log.slack + slack if cumulative else slack
        if now < timer.t_next:
            expiry = timer.t_next
            yield SLEEP, expiry
            log.wu_latency += _usec(self.engine.now - expiry)
        else:
            if e.relative:
                timer.t_next = now
            log.wu_latency = 0

    def tables(self) -> dict:
        cols = list(zip(*self.rows)) if self.rows else [[]] * len(RTAPP)
        return {"rtapp": pa.table([pa.array(c, f.type) for c, f in zip(cols, RTAPP)],
                                  schema=RTAPP)}


WORKLOAD = RtAppWorkload
