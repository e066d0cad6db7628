"""Per-CPU kernel threads: what a real host runs besides the workload.

Every CPU of a Linux host runs kernel threads that wake on their own:
rcu_preempt's grace periods, kworkers' deferred work, ksoftirqd's softirqs
when interrupts pile up, compaction.  Each one that wakes on a busy CPU
switches the workload's task out and takes its CPU for a while.
calibration/bench/kthreads.py measures them on a host as the workload sees
them (one CPU hog per CPU, the whole host's sched_switch recorded): on this
project's VM nearly all are SCHED_OTHER at nice 0, about 15
interruptions per second per busy CPU, most of 5-50 us with a tail of
milliseconds (DAMON's kdamond; docs/microbenchmarks.md, "kthreads").

``KernelThreads`` models them as one task per CPU, bound to it as the
per-CPU kthreads are (``cpus_allowed``), in the root cgroup at the
measured nice, woken as a Poisson process at the measured rate of
interruptions per CPU; each wake-up runs a time drawn from the measured
run-time distribution (its quantiles ``kthread_run_us`` at
``RUN_QUANTILES``, interpolated linearly: an inverse-CDF draw).  They are
fair tasks, so the fair policy decides when a woken one preempts (EEVDF's
wake-up preemption, or the tick) and, being outside the workload
(``Task.host``), their own switch-outs are not counted as the workload's.
A wake-up while the thread still runs adds its work to the run (a kworker
finds more work queued).  Each CPU draws from its own stream
(``host/kthreads/<cpu>``), so the rest of the run's randomness is
unchanged.

``RcuGp`` is the one kernel thread a workload itself wakes: RCU's
grace-period kthread (``rcu_preempt``).  An exiting thread's task_struct is
freed after a grace period (release_task() -> put_task_struct_rcu_user()
-> call_rcu()), and the kthread drives each grace period, waking several
times along it (its start, the force-quiescent-state scans every
``jiffies_till_next_fqs``, its end) on jiffy timeouts.  The kthreads
benchmark's hogs never exit, so it misses this; calibration/bench/rcu.py
measures it apart (a native worker's threads exiting at 0-400/s): here
about 4 wake-ups per exit while exits are rare, at most one every 2
jiffies (~125/s) once they are not, 11-20 us each.  The model: each exit
(``Machine.on_exit``, workload tasks only) keeps the kthread waking for
``rcu_gp_wakeups_per_exit`` periods of ``rcu_gp_period_ms`` after it; it
wakes at tick boundaries, one period apart, while any exit's span lasts,
and runs ``rcu_gp_run_us`` each time.  One unbound fair task of the root
cgroup (as rcu_preempt, SCHED_OTHER nice 0 unless rcutree.kthread_prio
is set), placed by the fair class's wake-up like any task; a host task.

Not modelled: their wake-ups on idle CPUs differ from busy ones (NOHZ
defers timers; the benchmark measures busy CPUs, and the same rate is used
whether the CPU is busy or idle), unbound kthreads moving between CPUs,
and several kthreads chaining in one interruption (the first one's run is
measured; those after it are counted in the benchmark's ``n_tasks``).
"""
from __future__ import annotations

from sim.engine import NSEC_PER_SEC, NSEC_PER_USEC, inverse_cdf
from sim.hosttask import HostWork

# the probabilities at which the profile gives the run-time quantiles
RUN_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)


class KernelThreads:
    """The per-CPU kernel threads of the simulated host (module docstring)."""

    def __init__(self, machine, rate_per_s: float, run_us, nice: int = 0):
        run_us = [float(x) for x in run_us]
        if rate_per_s < 0:
            raise ValueError(f"calibration.kthread_rate_per_s = {rate_per_s}: must be >= 0")
        if len(run_us) != len(RUN_QUANTILES) or run_us[0] < 0 or \
                any(b < a for a, b in zip(run_us, run_us[1:])):
            raise ValueError(f"calibration.kthread_run_us = {run_us}: must be "
                             f"{len(RUN_QUANTILES)} non-decreasing run times >= 0 (us) at "
                             f"the quantiles {list(RUN_QUANTILES)}")
        self.machine = machine
        self.engine = machine.engine
        self.mean_gap_ns = NSEC_PER_SEC / rate_per_s if rate_per_s > 0 else 0.0
        self.run_ns = [x * NSEC_PER_USEC for x in run_us]
        self.cpus: list[HostWork] = []   # each CPU's kthread task and its work
        self.rngs = []
        for cpu in range(len(machine.rqs)):
            work = HostWork(machine)
            work.make_task(f"kthread/{cpu}", nice).cpus_allowed = frozenset((cpu,))
            self.cpus.append(work)
            self.rngs.append(self.engine.rng(f"host/kthreads/{cpu}"))
        if self.mean_gap_ns:
            for cpu, rng in enumerate(self.rngs):
                self.engine.call_later(int(rng.exponential(self.mean_gap_ns)), self._wake, cpu)

    def draw_run_ns(self, u: float) -> int:
        """The run time at cumulative probability ``u`` (inverse CDF)."""
        return max(1, int(inverse_cdf(RUN_QUANTILES, self.run_ns, u)))

    def _wake(self, cpu: int) -> None:
        rng = self.rngs[cpu]
        self.cpus[cpu].give(self.draw_run_ns(rng.uniform()), cpu)
        self.engine.call_later(int(rng.exponential(self.mean_gap_ns)), self._wake, cpu)


class RcuGp(HostWork):
    """RCU's grace-period kthread, kept busy by exiting threads (module
    docstring)."""

    NAME = "rcu_preempt"

    def __init__(self, machine, wakeups_per_exit: float, period_ms: float, run_us: float):
        for key, value in (("rcu_gp_wakeups_per_exit", wakeups_per_exit),
                           ("rcu_gp_run_us", run_us)):
            if value < 0:
                raise ValueError(f"calibration.{key} = {value}: must be >= 0")
        if period_ms <= 0:
            raise ValueError(f"calibration.rcu_gp_period_ms = {period_ms}: must be > 0")
        super().__init__(machine)
        self.engine = machine.engine
        self.period_ns = int(period_ms * 1e6)
        self.span_ns = int(wakeups_per_exit * period_ms * 1e6)
        self.run_ns = max(1, int(run_us * NSEC_PER_USEC))
        # its task is made at the first exit: a host whose threads never
        # exit runs (and numbers its tasks) as without it
        self.busy_until = 0           # the last exit's span ends then
        self.armed = False            # a wake-up is scheduled
        machine.on_exit = self.task_exit

    def task_exit(self, task) -> None:
        if task.host or not self.span_ns:
            return
        now = self.engine.now
        self.busy_until = max(self.busy_until, now + self.span_ns)
        # its callback waits on the exit CPU for the grace period (the
        # machine's rcu_idle_tick keeps that CPU's tick meanwhile)
        rq = self.machine.rqs[task.cpu]
        rq.rcu_cb_until = max(rq.rcu_cb_until, now + self.span_ns)
        if not self.armed:
            self.armed = True
            tick = self.machine.tick_ns
            self.engine.call_at((now // tick + 1) * tick, self._wake)

    def _wake(self) -> None:
        if self.task is None:
            self.make_task(self.NAME)
        self.give(self.run_ns, 0)
        nxt = self.engine.now + self.period_ns
        if nxt <= self.busy_until:
            self.engine.call_at(nxt, self._wake)
        else:
            self.armed = False
