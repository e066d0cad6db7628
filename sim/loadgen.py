"""The load generator as a task of the simulated host.

On ``backend=real`` one thread replays a function workload's trace
(backends/real/loadgen.py ``replay``): SCHED_FIFO at
``backend.loadgen_rt_priority`` (1, raised above SCHED_RR workers) and
unpinned when the workers need every CPU, as on this project's 2-CPU VM.
Per dispatch it wakes ``spin_us`` before the arrival, drains every
worker's completion pipe (one non-blocking read each, so completions cost
it nothing apart: they are read in the same drain), busy-waits to the
arrival and writes the request to the function's worker.  Being an RT
task it preempts whatever fair task runs on its CPU, and the worker it
wakes is placed knowing that CPU is busy.  The simulator otherwise assumes
arrivals cost no CPU.

``LoadGenerator`` is that thread: one SCHED_FIFO task of the root cgroup
(its CPU shows in the host's usage, as the colosim process's does in the
real root cgroup's), not pinned, woken at each dispatch of the worker path
(sim/workloads/request_path.py ``WorkerPath.start``, which calls
:meth:`dispatch` before waking the function's dispatcher) for
``loadgen_dispatch_us + loadgen_worker_us x workers`` of CPU, the
calibration profile's values measured by calibration/bench/loadgen.py.  A
dispatch while it still runs adds its cost to the run (the real loop sends
every row that is due before it sleeps).  Its placement and preemption are
the RT class's (sim/rt.py: ``select_task_rq_rt`` keeps it on its CPU
unless that runs an RT task it cannot preempt).  Like any task outside the
workload (``Task.host``) its own switch-outs are not counted as the
workload's, as ``perf stat -G`` on the workload's cgroups does not count
them; the workload tasks it preempts are.

The loop's sampler runs on the same thread: at the start, every
``interval_s`` and at the warm-up instant it reads every cgroup's counters
and the perf counters (backends/real/intervals.py ``Sampler``), for
``loadgen_sample_us + loadgen_sample_cgroup_us x cgroups`` of CPU (the
functions' cgroups, their parent and the root: 8.5 ms at 256 functions
here), measured by the same benchmark from the run's own
``sampler_read_us``; :meth:`LoadGenerator.sample_at` schedules them.

The benchmark also finds CPU the thread spends whatever the dispatch
rate: ``loadgen_background_us_per_s + loadgen_background_worker_us_per_s
x workers`` per second (13 ms/s + 0.19 ms/s per worker here on
2026-11-26, 62 ms/s at 256 functions: more than the dispatches at the
dense suite's lower rates).  Which code spends it is not separated (not
the sampler, measured apart; not the progress callback, 50 ms apart and
cheap; the loop's wake-ups every ``max_sleep`` when no arrival is due are
rarer than that at the benchmark's rates); it is charged as measured, in
equal parts every ``BACKGROUND_PERIOD_NS`` (the loop's ``max_sleep``, its
longest sleep), so its CPU is right and its timing an assumption.

Self-timed workloads (``workload=periodic``, ``ebizzy``, ``rtapp``) run
the same loop with nothing to dispatch: it wakes every
``BACKGROUND_PERIOD_NS``, reads the periodic workers' pipes and samples.
There it costs ``loadgen_periodic_us_per_s + loadgen_periodic_worker_us_per_s
x workers`` per second (``loadgen_rtapp_us_per_s`` for rt-app, which it
does not read), charged as the rate-independent CPU above, and
``loadgen_burst_us`` per burst a periodic thread reports, charged at the
wake-up after the burst ends (the loop sleeps; the line waits in the
pipe); measured by calibration/bench/driver.py.

Not modelled: the busy-wait's placement before the arrival (the task runs
its whole cost from the dispatch on; the worker is woken at the arrival
either way, also while the thread is busy reading, where the real loop
dispatches late) and the progress callback (off in `colosim validate`).
"""
from __future__ import annotations

from sim.engine import NSEC_PER_SEC, NSEC_PER_USEC
from sim.hosttask import HostWork
from sim.sched_class import SCHED_FIFO, SCHED_RR

# backend.loadgen_rt_priority's default (backends/real/config.py)
LOADGEN_RT_PRIORITY = 1
NAME = "colosim-loadgen"
# backends/real/loadgen.py replay's max_sleep_ns: the loop's longest sleep,
# the period at which the rate-independent CPU is charged
BACKGROUND_PERIOD_NS = 20_000_000
# the cgroups the real sampler reads beside the functions' own: the root and
# the functions' parent (backends/real/intervals.py ``Sampler.cgroups``)
SAMPLED_BESIDE_FUNCTIONS = 2
# the real backend's runners that time themselves: the loop dispatches
# nothing (the workload classes' REAL_BACKEND)
SELF_TIMED = ("periodic", "rtapp")


class LoadGenerator(HostWork):
    """The replay thread (module docstring); ``workers``: a callable giving
    the number of worker processes it drains per dispatch."""

    def __init__(self, machine, dispatch_us: float, worker_us: float, workers,
                 sample_us: float = 0.0, sample_cgroup_us: float = 0.0, cgroups=None,
                 background_us_per_s: float = 0.0, background_worker_us_per_s: float = 0.0,
                 burst_us: float = 0.0):
        for key, value in (("loadgen_dispatch_us", dispatch_us),
                           ("loadgen_worker_us", worker_us),
                           ("loadgen_sample_us", sample_us),
                           ("loadgen_sample_cgroup_us", sample_cgroup_us),
                           ("loadgen_background_us_per_s", background_us_per_s),
                           ("loadgen_background_worker_us_per_s", background_worker_us_per_s),
                           ("loadgen_burst_us", burst_us)):
            if value < 0:
                raise ValueError(f"calibration.{key} = {value}: must be >= 0")
        super().__init__(machine)
        self.dispatch_ns = dispatch_us * NSEC_PER_USEC
        self.worker_ns = worker_us * NSEC_PER_USEC
        self.workers = workers
        self.sample_ns = sample_us * NSEC_PER_USEC
        self.sample_cgroup_ns = sample_cgroup_us * NSEC_PER_USEC
        self.cgroups = cgroups
        # ns per ns of run time, and per worker
        self.background = background_us_per_s * NSEC_PER_USEC / NSEC_PER_SEC
        self.background_worker = background_worker_us_per_s * NSEC_PER_USEC / NSEC_PER_SEC
        self.background_end_ns = 0
        self.burst_ns = burst_us * NSEC_PER_USEC
        self.bursts = 0               # burst lines waiting in the pipes
        self.make_task(NAME)
        rr = [pr for policy, pr in (machine.default_task_policy,
                                    *machine.group_task_policy.values()) if policy == SCHED_RR]
        prio = max(LOADGEN_RT_PRIORITY, min(99, max(rr) + 1)) if rr else LOADGEN_RT_PRIORITY
        machine.sched_setscheduler(self.task, SCHED_FIFO, prio)

    def cost_ns(self) -> int:
        return max(1, int(self.dispatch_ns + self.worker_ns * self.workers()))

    def dispatch(self, hint_cpu: int) -> None:
        """A request goes out now: the thread runs its cost."""
        self.give(self.cost_ns(), hint_cpu)

    def sample_at(self, interval_ns: int, warmup_ns: int, end_ns: int) -> None:
        """The sampler's reads: at 0, every ``interval_ns`` before
        ``end_ns`` and at ``warmup_ns`` (once where it is one of those)."""
        if not (self.sample_ns or self.sample_cgroup_ns):
            return
        times = set(range(0, end_ns, interval_ns)) if interval_ns > 0 else {0}
        if 0 <= warmup_ns < end_ns:
            times.add(warmup_ns)
        for t_ns in sorted(times):
            self.machine.engine.call_at(t_ns, self._sample)

    def background_until(self, end_ns: int) -> None:
        """Its rate-independent CPU (module docstring), every
        ``BACKGROUND_PERIOD_NS`` from then on until ``end_ns``."""
        if not (self.background or self.background_worker) or end_ns <= BACKGROUND_PERIOD_NS:
            return
        self.background_end_ns = end_ns
        self.machine.engine.call_at(BACKGROUND_PERIOD_NS, self._background)

    def read_bursts(self, recorder) -> None:
        """Charge ``loadgen_burst_us`` for each burst the workload records
        (a periodic worker's line), at the loop's next wake-up."""
        recorder.observers.append(self._burst_done)

    def _burst_done(self, _req) -> None:
        self.bursts += 1

    def _background(self) -> None:
        self.give(max(1, int((self.background + self.background_worker * self.workers())
                              * BACKGROUND_PERIOD_NS + self.burst_ns * self.bursts)), 0)
        self.bursts = 0
        nxt = self.machine.engine.now + BACKGROUND_PERIOD_NS
        if nxt < self.background_end_ns:
            self.machine.engine.call_at(nxt, self._background)

    def _sample(self) -> None:
        self.give(max(1, int(self.sample_ns + self.sample_cgroup_ns * self.cgroups())), 0)
