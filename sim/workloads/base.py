"""What a workload plug-in is: a ``Workload`` subclass and its config.

A workload is one module in sim/workloads (or ``<dir>/workload/`` of
COLOSIM_PLUGIN_PATH, sim/plugins.py) exposing ``WORKLOAD``, a ``Workload``
subclass that declares:

- ``CONFIG``: its typed config dataclass (a ``WorkloadConfig``), fields
  declared with sim.config.tunable so scenarios.validate checks their
  ranges, cross-key rules in ``CONFIG.check(c, key)``; the workload is
  built with an instance of it, so its defaults live there and nowhere else;
- ``generate_trace(cfg, seed, duration_s)`` (optional): the trace a
  generated workload replays, from its config and the run's seed and
  length (scenarios/runner.py keeps it as the run's trace.parquet);
- ``arrivals(cfg, seed, duration_s)`` (optional): the requests it makes,
  as an invocation trace (sim/workloads/trace.py) drawn from the very random
  streams the simulator draws, so that backends/real replays the requests
  the simulator's run of the same config sees (common random numbers);
  None for a config whose requests depend on the run (a closed loop).  A
  generated workload's default is its ``generate_trace``;
- ``READS_TRACE``: whether it takes the trace (generated, or read from
  its ``trace_file``) as the ``trace`` argument of its constructor; a
  trace handed in is what it replays, else it reads its ``trace_file``
  with ``read_trace_file(path)`` (scenarios/runner.py reads the file the
  same way, to keep it as the run's trace.parquet, and hands it in);
- ``REAL_BACKEND``: how backends/real runs it, one of ``REAL_BACKENDS``, or
  None where it is simulated only.

plus an option file ``scenarios/conf/workload/<option>.yaml`` whose defaults
list pulls in ``base_<module>``.  Several options may share one module
(``model: resctl`` in resctl_parallel and resctl_mix).

The machine calls ``burst_done(task)`` on a task's owner when the task has
run its burst; scenarios run ``start()`` once at t = 0.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.config import MISSING, MappingReads, tunable

# how the real backend (backends/real) runs a workload:
# - functions: replays an invocation trace, a native worker per function cgroup
# - worker_pool: one pool-mode worker behind a bounded queue
# - webserver: that worker with a listen backlog and an accept thread in front
# - periodic: threads that run and sleep, in their cgroups
# - jobs: a job trace, each job in its own cgroup
# - memlookup: the memory worker's random lookups in RDT partitions
# - rtapp: the rt-app binary runs the task description, its threads in their cgroups
REAL_BACKENDS = ("functions", "worker_pool", "webserver", "periodic", "jobs", "memlookup",
                 "rtapp")


@dataclass
class WorkloadConfig(MappingReads):
    """Keys every workload has."""
    name: str = MISSING           # the option's label in results (workload.name)
    # its tasks read their own CPU clock as they run, as the real backend's
    # native workers do to burn a request's demand (funcworker.c spin_cpu):
    # each read is a system call that runs update_curr(), so under EEVDF a
    # used-up slice ends at once, not at the next tick (sim/machine.py
    # _arm_hrtick).  On for a simulation compared with the real backend
    # (the validation suites); off for an application that does not
    cputime_poll: bool = tunable(False)

    @classmethod
    def check(cls, c, key: str) -> None:
        """Rules across keys (sim/config.py describes ``c``); none here."""

    @classmethod
    def footprint(cls, w, duration_s: float) -> list:
        """The objects a run of config ``w`` (a mapping of this class's
        keys) keeps, as sim.footprint.Term: what its memory estimate is
        made of.  None here beyond the simulator's own base; a workload
        whose size a key sets says so."""
        return []


class Workload:
    CONFIG: type = WorkloadConfig
    READS_TRACE = False
    REAL_BACKEND: str | None = None
    # generated workloads: staticmethod (cfg, seed, duration_s) -> trace table
    generate_trace = None
    # workloads with a trace_file: staticmethod (path) -> the trace it holds
    read_trace_file = None
    # workloads whose requests can be drawn ahead: staticmethod (cfg, seed,
    # duration_s) -> invocation trace or None (the module docstring)
    arrivals = None
    # the invocation trace offline-knowledge controllers may read (None: none)
    trace = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a generated trace is the requests the workload makes, unless the
        # class says otherwise (noisy_jobs: its trace is of jobs)
        if "generate_trace" in vars(cls) and "arrivals" not in vars(cls):
            cls.arrivals = vars(cls)["generate_trace"]

    def __init__(self, cfg, machine, recorder):
        self.cfg = cfg
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        machine.cputime_poll = bool(cfg.cputime_poll)

    def start(self) -> None:
        """Called once at t = 0: fork the first threads, schedule arrivals."""
        raise NotImplementedError

    def tables(self) -> dict:
        """More tables for the run directory, name -> table, each written as
        <name>.parquet (their schemas: results/schema.py WORKLOAD_TABLES)."""
        return {}

    def burst_done(self, task) -> int:
        """``task`` (owned by this workload) ran its burst: set its next one
        and return 0 to run on, a sleep in ns, BURST_BLOCK or BURST_EXIT
        (sim/task.py)."""
        raise NotImplementedError
