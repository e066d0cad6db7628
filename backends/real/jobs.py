"""``workload=noisy_jobs`` on the real host: each job one memory worker
(backends/workers/memworker.c) in the job's cgroup, started when the job
arrives or, once a controller has called ``Host.hold_jobs``, when it admits
the job (``Host.admit_job``).

What a job does.  The simulator runs a job as ``cores`` threads whose CPU
work is slowed by the memory model according to the sensitivity class's
``MemoryProfile`` (sim/memory/progress.py).  Here the job's threads run that
profile's shape on the machine itself (:func:`job_args`): a buffer of
``buffer_mb`` in ``pages``, accessed with ``pattern``, ``mlp`` dependency
chains, ``dirty_fraction`` of the accesses storing, and core work between
references for ``refs_per_kinstr``.  A job's work is fixed, not its time:
``length_s`` is "run time with a core per thread" alone, so each thread
makes ``length_s`` worth of accesses at the rate the profile reaches alone
on this host, measured once per class before the run starts
(:func:`alone_ns_per_access`, one thread on one of the run's CPUs).  A job
that shares the LLC, memory bandwidth or its cores takes longer than
``length_s``: that is the slowdown the thesis's policies act on.  Without
``workload.memory`` a job is CPU-bound: the same worker on a 4 KiB buffer
that stays in L1, so its time is its core work.

Latency is the job's completion time from its arrival (the wait for
admission included), as in the simulator; ``start_s`` is its admission.

:class:`JobsRunner` is the ``jobs`` capability's runner
(backends/real/runner.py): the job table, the gate, the jobs' perf.

Perf.  With ``backend.perf`` (and ``perf`` installed) each job's worker runs
under ``perf stat -I`` counting :data:`JOB_EVENTS` for the job's process
tree, so ``Host.perf_counts`` reads the job's cumulative instructions,
cycles and memory stall cycles while it runs, whatever the number of jobs
(a run-wide ``perf stat -G`` would open events x cgroups x CPUs counters).
Counts the PMU cannot take (no hardware events in a VM) make
``perf_counts`` raise :class:`PerfUnavailable` naming them; run_real refuses
a controller that reads them (``uses_perf_counts``) before the run starts.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass

import pyarrow as pa

from backends.host import PendingJob, PerfCounts
from backends.real.cgroupfs import CgroupFS
from backends.real.config import STALL_EVENT, RealBackend
from backends.real.detect import perf_accepts
from backends.real.functions import FunctionsRunner
from backends.real.ipce import add_interval, summary
from backends.real.loadgen import WORKLOAD_TIMER_SLACK_NS, set_timer_slack
from backends.real.memworker import MemWorkerError, build_memworker, run_memworker
from backends.real.perf import PerfUnavailable, die_with_parent, parse_perf_csv, perf_binary
from backends.real.runner import RealRunError, Setup, apply_cgroup
from backends.real.trace import jobs_for_real
from sim.memory.progress import MemoryProfile
from sim.workloads.noisy_jobs import to_invocations

NS = 1_000_000_000
MIB = 1 << 20
HW_EVENTS = ("instructions", "cycles", STALL_EVENT, "cache-references", "cache-misses")
JOB_EVENTS = HW_EVENTS + ("task-clock",)


def counted_events(stall_event: str = STALL_EVENT) -> tuple[str, str, str]:
    """What Host.perf_counts needs perf to count: instructions, cycles and
    the memory stall event."""
    return HW_EVENTS[0], HW_EVENTS[1], stall_event
# gcc -O2 on x86-64 compiles memworker's gap_work to a 7-instruction loop
# (mov, shr, xor, add, add, cmp, jne) and one access of run_rounds (address
# draw, load, chain update) to about 20: estimates that set the gap, not
# measurements; where the PMU counts instructions, perf_counts has the truth
GAP_LOOP_INSTRUCTIONS = 7
ACCESS_INSTRUCTIONS = 20
# the CPU-bound job: a buffer that stays in L1 and core work between loads
CPU_BOUND = ["--bytes", "4096", "--pattern", "random", "--pages", "4k", "--gap-ops", "64"]
# memworker pages for the MemoryProfile page sizes: a 2 MiB profile page is
# THP (no hugetlb pool needed); hugetlb-2m and 1g need the pools
_PAGES = {"4k": "4k", "none": "4k", "2m": "thp", "thp": "thp", "hugetlb-2m": "2m",
          "1g": "1g", "hugetlb-1g": "1g"}


class JobError(RuntimeError):
    pass


def job_args(profile) -> list[str]:
    """memworker arguments for a sim.memory.progress.MemoryProfile (None:
    the CPU-bound job)."""
    if profile is None:
        return list(CPU_BOUND)
    pages = str(profile.pages).strip().lower()
    if pages not in _PAGES:
        raise JobError(f"memory.pages {profile.pages!r}: the real backend runs "
                       f"{', '.join(_PAGES)}")
    args = ["--bytes", str(max(64, int(round(profile.buffer_mb * MIB)))),
            "--pattern", profile.pattern, "--pages", _PAGES[pages],
            "--mlp", str(max(1, min(16, int(round(profile.mlp))))),
            "--write-fraction", repr(float(profile.dirty_fraction))]
    if profile.pattern == "stride":
        args += ["--stride", str(int(profile.stride_bytes))]
    if profile.refs_per_kinstr > 0:
        per_ref = 1000.0 / profile.refs_per_kinstr
        gap = max(0, int(round((per_ref - ACCESS_INSTRUCTIONS) / GAP_LOOP_INSTRUCTIONS)))
    else:
        gap = CPU_BOUND[CPU_BOUND.index("--gap-ops") + 1]
    return args + ["--gap-ops", str(gap)]


def _option(args: list[str], name: str, default=None):
    return args[args.index(name) + 1] if name in args else default


def alone_ns_per_access(args: list[str], cpu: int, seconds: float = 0.5,
                        binary=None) -> float:
    """One thread of the job shape alone on ``cpu`` for ``seconds``: wall
    ns per access (the rate that makes ``length_s`` of work)."""
    r = run_memworker(int(_option(args, "--bytes")), _option(args, "--pattern", "random"),
                      _option(args, "--pages", "4k"),
                      stride=int(_option(args, "--stride")) if "--stride" in args else None,
                      duration_s=seconds, cpus={cpu}, binary=binary,
                      gap_ops=int(_option(args, "--gap-ops", 0)),
                      mlp=int(_option(args, "--mlp", 1)),
                      write_fraction=float(_option(args, "--write-fraction", 0.0)))
    return r.ns_per_access


@dataclass(frozen=True)
class JobSpec:
    cgroup: str
    arrival_s: float
    length_s: float
    threads: int
    priority: bool
    args: tuple[str, ...]     # memworker shape (job_args)
    ns_per_access: float      # alone, per thread
    seed: int


def spawn_in_cgroup(cmd: list[str], procs_files: list[str], cpus, pass_fds=(),
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE) -> subprocess.Popen:
    """Start ``cmd`` inside a cgroup (its ``cgroup.procs`` files, every
    hierarchy) on ``cpus``, as a normal task in its own session (so its
    process group can be killed whole), dying with its parent."""
    def pre():
        die_with_parent(signal.SIGKILL)
        # the load generator may run SCHED_FIFO: the workload is a normal task
        # (and an RT task could not join a cgroup without RT runtime)
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        # the load generator's 1 ns timer slack is not the workload's
        if WORKLOAD_TIMER_SLACK_NS is not None:
            set_timer_slack(WORKLOAD_TIMER_SLACK_NS)
        # into the cgroup before exec, so no work happens outside it
        pid = str(os.getpid())
        for f in procs_files:
            with open(f, "w") as fh:
                fh.write(pid)
        os.sched_setaffinity(0, cpus)
    return subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=stderr,
                            pass_fds=pass_fds, preexec_fn=pre, start_new_session=True)


def stop_session(proc: subprocess.Popen) -> None:
    """SIGKILL what spawn_in_cgroup started (its whole session: perf and the
    worker under it), reap it and close its pipes."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


class JobProc:
    """One job.  Looks like a function worker to the load generator
    (backends/real/loadgen.replay): ``send`` gets the job's request at its
    arrival and starts the job, or queues it with the gate while jobs are
    held; ``read_lines`` reports it done ("D" line) once its worker exited."""

    def __init__(self, spec: JobSpec, gate: "JobGate"):
        self.spec = spec
        self.name = spec.cgroup
        self.gate = gate
        self.proc: subprocess.Popen | None = None
        self.req_id: int | None = None     # the load generator's request id
        self.started_ns: int | None = None
        self.finished = False
        self._perf_fd: int | None = None
        self._perf_off = 0
        self._perf_tail = b""
        self._perf_totals: dict[str, float | None] = {}
        self._interval: dict[str, float | None] = {}   # the perf interval being read
        self._interval_t: float | None = None
        self.window: dict[str, float | None] = {}      # counts after the warm-up

    # --- the load generator's side ----------------------------------------
    def send(self, line: bytes) -> None:
        if self.req_id is not None:
            raise JobError(f"job {self.name} was dispatched twice")
        self.req_id = int(line.split()[1])     # "R <id> <demand_ns> <threads>"
        if self.gate.held:
            self.gate.queue.append(self)
        else:
            self.start()

    def read_lines(self) -> list[bytes]:
        if self.proc is None or self.finished or self.proc.poll() is None:
            return []
        self.finished = True
        self._read_perf()     # perf wrote its last interval when it exited
        self._close_interval()
        self._close_perf()
        out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            return [b"E job %s: worker exited with %d: %s" % (
                self.name.encode(), self.proc.returncode, err.strip()[-300:])]
        try:
            r = json.loads(out)
        except ValueError:
            return [b"E job %s: unexpected worker output %r" % (self.name.encode(), out[-200:])]
        cpu_ns = int(round(float(r["cpu_s"]) * NS))
        return [b"D %d %d %d %d" % (self.req_id, self.started_ns, int(r["end_ns"]), cpu_ns)]

    def quit(self) -> None:
        self.kill()

    def kill(self) -> None:
        if self.proc is not None:
            stop_session(self.proc)
        self._close_perf()

    def _close_perf(self) -> None:
        if self._perf_fd is not None:
            os.close(self._perf_fd)
            self._perf_fd = None

    # --- starting -----------------------------------------------------------
    def command(self, perf: str | None, perf_out: str | None) -> list[str]:
        s = self.spec
        accesses = max(1, int(math.ceil(s.length_s * NS / s.ns_per_access)))
        cmd = [str(self.gate.binary), *s.args, "--threads", str(s.threads),
               "--accesses", str(accesses), "--seed", str(s.seed),
               # bounded by the run: memworker stops at its accesses, or here
               "--duration", repr(self.gate.max_s), "--max-seconds", repr(self.gate.max_s + 5)]
        if perf is None:
            return cmd
        return [perf, "stat", "-x,", "-I", str(self.gate.perf_interval_ms),
                "-e", ",".join(self.gate.events), "-o", perf_out, "--", *cmd]

    def start(self) -> None:
        perf_out = None
        pass_fds: tuple[int, ...] = ()
        if self.gate.perf is not None:
            # an unlinked file perf writes through an inherited fd
            fd, path = tempfile.mkstemp(prefix="colosim-jobperf-", suffix=".csv")
            os.unlink(path)
            self._perf_fd, perf_out, pass_fds = fd, f"/dev/fd/{fd}", (fd,)
        cpus = self.gate.cpus_of(self.spec.cgroup)
        self.started_ns = self.gate.clock()
        try:
            self.proc = spawn_in_cgroup(self.command(self.gate.perf, perf_out),
                                        self.gate.procs_files(self.spec.cgroup), cpus,
                                        pass_fds=pass_fds)
        except (OSError, subprocess.SubprocessError) as e:
            self._close_perf()
            raise JobError(f"starting job {self.name} in its cgroup on CPUs "
                           f"{sorted(cpus)}: {e}") from None

    # --- perf -----------------------------------------------------------------
    def _read_perf(self) -> None:
        """Add the interval lines perf wrote since the last read: to the
        running totals at once (perf_counts), and interval by interval, once
        an interval is complete, to the measured window (summary)."""
        if self._perf_fd is None:
            return
        while True:
            b = os.pread(self._perf_fd, 1 << 16, self._perf_off)
            if not b:
                break
            self._perf_off += len(b)
            self._perf_tail += b
        *lines, self._perf_tail = self._perf_tail.split(b"\n")
        for s in parse_perf_csv([ln.decode(errors="replace") for ln in lines],
                                has_cgroup=False):
            event = s.event.split(":")[0]
            if s.value is None:
                self._perf_totals.setdefault(event, None)
            else:
                self._perf_totals[event] = (self._perf_totals.get(event) or 0.0) + s.value
            if s.time_s != self._interval_t:
                self._close_interval()
                self._interval_t = s.time_s
            self._interval[event] = s.value

    def _close_interval(self) -> None:
        """Account the interval read so far if it ended after the warm-up."""
        values, t = self._interval, self._interval_t
        self._interval = {}
        if not values or t is None or self.started_ns is None or \
                self.started_ns + t * NS <= self.gate.warmup_end_ns:
            return
        add_interval(self.window, values, self.gate.stall_event)

    def perf_totals(self) -> dict[str, float | None]:
        """Cumulative counts per event so far (None: perf could not count it)."""
        if not self.finished:
            self._read_perf()
        return dict(self._perf_totals)

    def close_window(self) -> dict[str, float | None]:
        """The counts of the measured window (after warm-up), the last
        interval included: per event, and ``cpu_ms`` / ``above_ms`` (CPU time
        in intervals at IPCE >= the target)."""
        if not self.finished:
            self._read_perf()
        self._close_interval()
        return dict(self.window)


class JobGate:
    """The jobs of a run and their admission (what RealHost's hold_jobs,
    pending_jobs, admit_job and perf_counts act on)."""

    def __init__(self, specs: list[JobSpec], binary, max_s: float, clock, procs_files,
                 cpus_of, perf: str | None = None, perf_interval_ms: int = 100,
                 stall_event: str = STALL_EVENT, alone: dict[str, float] | None = None):
        self.binary = binary
        self.alone = dict(alone or {})   # class -> ns per access alone (the run's summary)
        self.max_s = float(max_s)
        self.clock = clock               # CLOCK_MONOTONIC ns (the Done lines' clock)
        self.procs_files = procs_files   # cgroup -> its cgroup.procs files
        self.cpus_of = cpus_of           # cgroup -> CPUs its threads may use
        self.perf = perf
        self.perf_interval_ms = int(perf_interval_ms)
        self.stall_event = stall_event
        wanted = tuple(stall_event if e == STALL_EVENT else e for e in JOB_EVENTS)
        # perf refuses a whole list with one name it does not know
        known = set(perf_accepts(wanted, perf)) if perf else set()
        self.events = tuple(e for e in wanted if e in known)
        self.unknown = tuple(e for e in wanted if e not in known)
        self.held = False
        self.warmup_end_ns = 0           # CLOCK_MONOTONIC end of the warm-up (JobsRunner.go)
        self.queue: list[JobProc] = []
        self.procs = [JobProc(s, self) for s in specs]
        self.by_cgroup = {p.spec.cgroup: p for p in self.procs}

    def hold(self) -> None:
        self.held = True

    def pending(self) -> list[PendingJob]:
        return [PendingJob(p.spec.cgroup, p.spec.arrival_s, p.spec.threads, p.spec.priority)
                for p in self.queue]

    def admit(self, cgroup: str) -> None:
        for i, p in enumerate(self.queue):
            if p.spec.cgroup == cgroup:
                break
        else:
            raise ValueError(f"job {cgroup} is not waiting for admission")
        del self.queue[i]
        p.start()

    def perf_counts(self, cgroup: str) -> PerfCounts:
        """The job's cumulative counts (zero before it starts)."""
        p = self.by_cgroup.get(cgroup)
        if p is None:
            raise ValueError(f"{cgroup} is not a job of this run")
        if self.perf is None:
            raise PerfUnavailable("perf_counts needs perf counting each job "
                                  "(backend.perf=true and perf installed)")
        t = p.perf_totals()
        missing = [e for e in counted_events(self.stall_event)
                   if e in self.unknown or (e in t and t[e] is None)]
        if missing:
            raise PerfUnavailable(f"perf could not count {', '.join(missing)} for {cgroup} "
                                  f"(this host's PMU lacks them: a VM without PMU "
                                  f"passthrough, or another CPU vendor's event names)")
        cycles = t.get("cycles") or 0.0
        stall = t.get(self.stall_event) or 0.0
        # IPC relative to no stalls: the thesis's IPCE, 1 - stalls / cycles
        return PerfCounts(t.get("instructions") or 0.0, cycles, stall, cycles - stall,
                          t.get("cache-references") or 0.0, t.get("cache-misses") or 0.0)

    def kill(self) -> None:
        for p in self.procs:
            p.kill()

    def summary(self) -> dict[str, float]:
        """The simulator's memory summary columns from the jobs' perf
        intervals after the warm-up (backends/real/ipce.py); occupancy (CMT)
        is not read per job, so llc_occupancy_mb is NaN."""
        return summary([(p.spec.priority, p.close_window())
                        for p in self.procs if p.started_ns], self.stall_event)


def job_seed(seed: int, job: str) -> int:
    """A job's random-stream seed: the run's seed and the job's name."""
    return (int(seed) * 1_000_003 + zlib.crc32(job.encode())) & 0xFFFFFFFF


ALONE_REPEATS = 3


def calibrate(classes: dict[str, list[str]], cpu: int, seconds: float = 0.5,
              binary=None) -> dict[str, list[float]]:
    """ns per access alone for each class's job shape: ALONE_REPEATS
    measurements sharing ``seconds``.  The fastest is the shape's speed (a
    disturbance on a shared host only ever slows a measurement down); their
    spread, with the same measurements after the run, tells whether the
    host's memory speed held still (backends/real/disturbance.py)."""
    binary = binary or build_memworker()
    each = seconds / ALONE_REPEATS
    try:
        return {c: [alone_ns_per_access(a, cpu, each, binary) for _ in range(ALONE_REPEATS)]
                for c, a in classes.items()}
    except MemWorkerError as e:
        raise JobError(f"measuring the jobs' speed alone: {e}") from None


def job_perf() -> str | None:
    """perf's path, or None (jobs then run without perf_counts)."""
    try:
        return perf_binary()
    except PerfUnavailable:
        return None


class JobsRunner(FunctionsRunner):
    """The ``jobs`` capability (workload=noisy_jobs): a cgroup per job
    under ``parent_cgroup``, each job started by the load generator at its
    arrival (or admitted by a controller) through the run's :class:`JobGate`."""

    RUNS = "job streams"
    SPINS_ON_CPU_CLOCK = False    # its jobs are memory workers walking their buffers

    def __init__(self, cfg: dict, b: RealBackend, trace: pa.Table | None = None):
        """``trace``: the job table (None: the workload's own,
        backends/real/trace.jobs_for_real)."""
        try:
            self.jobs = trace if trace is not None else jobs_for_real(cfg)
        except ValueError as e:
            raise RealRunError(str(e)) from None
        super().__init__(cfg, b, to_invocations(self.jobs))
        self.gate: JobGate | None = None
        self.memory: dict[str, float] = {}

    def start(self, s: Setup) -> None:
        for c in s.cgroups:
            apply_cgroup(s.cg, s.host, c, self.w, self.w)
        self.gate = self.job_gate(s)
        s.host.use_jobs(self.gate)
        self.workers = self.gate.procs

    def job_gate(self, s: Setup) -> JobGate:
        """The run's jobs, each class's speed alone measured first on one of
        the run's CPUs."""
        memory = self.w.get("memory") or {}
        jobs = self.jobs
        try:
            profiles = {c: MemoryProfile.from_spec(dict(spec)) for c, spec in memory.items()}
            rows = {name: r for r, name in enumerate(jobs.column("job").to_pylist())}
            cols = {n: jobs.column(n).to_pylist() for n in
                    ("arrival_s", "length_s", "cores", "sensitivity", "priority")}
            classes = sorted(set(cols["sensitivity"])) if profiles else ["cpu"]
            missing = [c for c in classes if profiles and c not in profiles]
            if missing:
                raise ValueError(f"workload.memory needs a profile for {missing}")
            shapes = {c: job_args(profiles.get(c)) for c in classes}
            binary = build_memworker()
            self.alone_samples = calibrate(shapes, min(s.cpus), float(self.b.job_alone_s),
                                           binary)
            alone = self.alone
            self.alone_shapes, self.alone_cpu = shapes, min(s.cpus)
        except (ValueError, JobError) as e:
            raise RealRunError(str(e)) from None
        specs = []
        for f, c in zip(self.names, s.cgroups):
            r = rows[f]
            cls = cols["sensitivity"][r] if profiles else "cpu"
            specs.append(JobSpec(c, cols["arrival_s"][r], cols["length_s"][r], cols["cores"][r],
                                 bool(cols["priority"][r]), tuple(shapes[cls]), alone[cls],
                                 job_seed(s.seed, f)))
        perf = job_perf() if self.b.perf else None
        return JobGate(specs, binary, s.max_s, time.monotonic_ns, s.cg.procs_files,
                       s.host.cpus_of, perf, int(self.b.perf_interval_ms),
                       str(self.b.stall_event), alone)

    def start_perf(self, cg: CgroupFS) -> tuple[None, str]:
        # each job counts under its own perf stat (JobProc.command)
        return None, "per job" if self.gate.perf else "off"

    def go(self, t0_ns: int, warmup_end_ns: int) -> None:
        self.gate.warmup_end_ns = warmup_end_ns

    def finish(self, host) -> None:
        self.memory = self.gate.summary()     # before the jobs still running are stopped

    def summary_columns(self, perf_samples, perf_offset_s: float,
                        warmup_ns: int) -> dict[str, float]:
        return self.memory

    def result_trace(self) -> pa.Table:
        # a job stream's trace is its job table, as the simulator writes it
        return self.jobs
