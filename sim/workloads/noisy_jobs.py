"""``workload=noisy_jobs``: the noisy-neighbor thesis's job stream (its
§5.1, Table 5.1), replayed from a job trace.

A job trace is a table with one row per job:

| column | type | meaning |
|---|---|---|
| ``job`` | string | job name, unique; the job's cgroup is ``parent_cgroup/<job>`` |
| ``arrival_s`` | float64 | submission time, seconds from the start of the run (>= 0) |
| ``length_s`` | float64 | run time with a core per thread, seconds (> 0) |
| ``cores`` | int32 | threads, each a CPU hog for ``length_s`` (>= 1) |
| ``sensitivity`` | string | LLC/memory sensitivity class: ``moderate`` or ``high`` |
| ``priority`` | bool | a priority job (exclusive RDT resources under dynamic priority) |

Files are Parquet (``.parquet``) or CSV with that header (``.csv``; booleans
``true``/``false``).  Reading checks every row and names the file, the line
(CSV) or row (Parquet) and what is wrong, before anything runs.

Generation (``generate``): the thesis's three load scenarios share
inter-arrival times Normal(5 s, 2 s), job lengths Normal(140 s, 30 s) with a
minimum of 30 s, 1.5 cores per job on average, 75% of jobs moderately and 25%
highly sensitive to LLC/memory bandwidth, a 1-hour horizon; they differ only
in the share of priority jobs (``scenario``):

| scenario | priority share | RDT demand of priority jobs |
|---|---|---|
| ``low_demand`` | 10% | well below what the host has |
| ``high_utilization`` | 20% | about what the host has |
| ``exceeding_demand`` | 50% | well beyond it |

Choices the thesis leaves open (each a key of the config):
- a negative Normal inter-arrival draw is taken as 0 (simultaneous
  submissions; P = 0.6% at 5 s / 2 s);
- a job's length is ``max(length_min_s, Normal(length_mean_s, length_sd_s))``;
- cores per job are drawn uniformly from ``cores`` ([1, 2]: mean 1.5);
- jobs whose draw falls below ``priority_share`` are priority jobs, below
  ``high_sensitivity_frac`` highly sensitive; each quantity has its own
  random stream, so the three scenarios of one seed share every job and
  differ only in the priority flags (the 10% are among the 20%, which are
  among the 50%);
- how the priority flag relates to the sensitivity class
  (``priority_pool``).  ``any`` (the default): independently, so both
  pools have the 75/25 mix of §5.1.  ``high``: priority jobs are the highly
  sensitive ones and batch jobs the moderately sensitive ones, the reading
  of §5.1.1 ("selected from the pool of priority jobs") with §3.4's flag
  ("this workload can run significantly better with a certain amount of
  exclusive resources") and the abstract's "remaining workloads ... only
  penalized linearly"; the share of highly sensitive jobs is then the
  priority share, and ``high_sensitivity_frac`` is not used.  The two
  readings cannot both keep the 75/25 mix and a 50% priority share
  (docs/memory.md, "Noisy-scenario ablations").

Jobs are submitted over [0, duration_s).

Replay: each job starts at its arrival (admission control, as the thesis's
FIFO scheduler does it, is a controller's job) as ``cores`` threads in its
own cgroup, each running ``length_s`` of CPU; the job is one request, done
when its last thread exits, so ``latency_s`` is the job's completion time
and ``latency_s / length_s`` its slowdown (join ``requests.parquet`` with
the run's ``trace.parquet`` on ``function`` = ``job``).  ``sensitivity`` and
``priority`` are kept per cgroup (``job_class``) for the memory model and
the isolation controllers.  With ``memory`` profiles per sensitivity class
(sim/memory/progress.py) a job's threads run at the speed the LLC/memory
model gives them; without, the sensitivity changes nothing.  A controller
may hold arrivals (``Host.hold_jobs``) and admit them itself
(``Host.admit_job`` with a cpuset); a job's latency then includes its wait.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Optional

import numpy as np
import pyarrow as pa

from sim.config import MISSING, tunable
from sim.memory.progress import MemoryProfile
from sim.workloads.azure2021 import rng
from sim.workloads.common import CGROUP_PATH, CPU_SHARES_RANGE, CPU_WEIGHT_RANGE, NICE_RANGE
from sim.workloads.base import WorkloadConfig
from sim.workloads.memlookup import check_memory_profile
from sim.workloads.tablefile import TableFormat, TraceError, parse_field
from sim.workloads.trace import TraceWorkload, make_trace

JOB_SCHEMA = pa.schema([
    ("job", pa.string()),
    ("arrival_s", pa.float64()),
    ("length_s", pa.float64()),
    ("cores", pa.int32()),
    ("sensitivity", pa.string()),
    ("priority", pa.bool_()),
])
SENSITIVITIES = ("moderate", "high")
JOB_FORMAT = ("a job trace: Parquet or CSV with columns job (string), arrival_s (float, >= 0), "
              "length_s (float, > 0), cores (int, >= 1), sensitivity (moderate | high), "
              "priority (bool)")
# scenario -> share of priority jobs (Table 5.1)
SCENARIOS = {"low_demand": 0.10, "high_utilization": 0.20, "exceeding_demand": 0.50}


def make_jobs(job, arrival_s, length_s, cores, sensitivity, priority) -> pa.Table:
    """Build a job trace from columns, checking every row."""
    table = pa.table({
        "job": pa.array(job, pa.string()),
        "arrival_s": pa.array(arrival_s, pa.float64()),
        "length_s": pa.array(length_s, pa.float64()),
        "cores": pa.array(cores, pa.int32()),
        "sensitivity": pa.array(sensitivity, pa.string()),
        "priority": pa.array(priority, pa.bool_()),
    }, schema=JOB_SCHEMA)
    check_jobs(table, "job trace", first_row=0, what="row")
    return table


def check_jobs(table: pa.Table, where: str, first_row: int, what: str) -> None:
    """Every row of a job trace is replayable; the first bad one is named."""
    def values(name):
        column = table.column(name)
        if column.null_count:
            bad = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise TraceError(f"{where}, {what} {bad + first_row}: {name} is missing")
        return column.to_numpy(zero_copy_only=False)

    jobs = values("job")
    checks = (
        ("job", np.array([bool(s) for s in jobs], dtype=bool), "empty job name"),
        ("arrival_s", (lambda a: np.isfinite(a) & (a >= 0))(values("arrival_s")),
         "arrival_s must be finite and >= 0"),
        ("length_s", (lambda a: np.isfinite(a) & (a > 0))(values("length_s")),
         "length_s must be finite and > 0"),
        ("cores", values("cores") >= 1, "cores must be >= 1"),
        ("sensitivity", np.isin(values("sensitivity"), SENSITIVITIES),
         f"sensitivity must be one of {', '.join(SENSITIVITIES)}"),
    )
    values("priority")
    for name, good, rule in checks:
        if not good.all():
            bad = int(np.flatnonzero(~good)[0])
            got = table.column(name)[bad].as_py()
            raise TraceError(f"{where}, {what} {bad + first_row}: {rule} (got {got!r})")
    _, first = np.unique(jobs, return_index=True)
    if len(first) < len(jobs):
        dup = int(np.setdiff1d(np.arange(len(jobs)), first)[0])
        raise TraceError(f"{where}, {what} {dup + first_row}: job {jobs[dup]!r} "
                         "appears twice (job names must be unique)")


def _parse_csv_row(row: list[str]) -> tuple:
    job, arrival, length, cores, sensitivity, priority = row
    if priority.lower() not in ("true", "false"):
        raise ValueError(f"priority must be true or false (got {priority!r})")
    return (job, parse_field("arrival_s", arrival, float), parse_field("length_s", length, float),
            parse_field("cores", cores, int), sensitivity, priority.lower() == "true")


JOB_FILE = TableFormat(
    noun="job trace", schema=JOB_SCHEMA, description=JOB_FORMAT, parse=_parse_csv_row,
    format=lambda r: [r[0], repr(r[1]), repr(r[2]), r[3], r[4], "true" if r[5] else "false"],
    check_rows=check_jobs)
write_jobs = JOB_FILE.write
read_jobs = JOB_FILE.read


def to_invocations(jobs: pa.Table) -> pa.Table:
    """The invocation trace that replays the jobs: one request per job,
    ``cores`` threads sharing ``length_s x cores`` of CPU evenly."""
    cores = jobs.column("cores").to_numpy()
    return make_trace(jobs.column("job"), jobs.column("arrival_s"),
                      jobs.column("length_s").to_numpy() * cores, cores)


@dataclass
class NoisyJobsConfig(WorkloadConfig):
    """The job stream and the settings of each job's cgroup."""
    scenario: str = tunable(MISSING, choices=tuple(SCENARIOS))
    # null: the scenario's (0.1 / 0.2 / 0.5)
    priority_share: Optional[float] = tunable(None, range=(0, 1))
    interarrival_mean_s: float = tunable(MISSING, above=0)
    interarrival_sd_s: float = tunable(MISSING, range=(0, None))
    length_mean_s: float = tunable(MISSING, above=0)
    length_sd_s: float = tunable(MISSING, range=(0, None))
    length_min_s: float = tunable(MISSING, above=0)
    cores: List[int] = MISSING  # threads per job, drawn uniformly from this list
    high_sensitivity_frac: float = tunable(MISSING, range=(0, 1))
    # any: the priority flag is drawn independently of the sensitivity class;
    # high: priority jobs are the highly sensitive ones, batch jobs the
    # moderately sensitive ones (module docstring)
    priority_pool: str = tunable("any", choices=("any", "high"))
    working_set_kb: int = tunable(0, range=(0, None))
    cgroup_weight: int = tunable(100, range=CPU_WEIGHT_RANGE)
    cgroup_shares: Optional[int] = tunable(None, range=CPU_SHARES_RANGE)
    nice: int = tunable(0, range=NICE_RANGE)
    parent_cgroup: str = tunable(MISSING, pattern=CGROUP_PATH)
    trace_file: Optional[str] = None  # set: replay this job trace instead of generating one
    # memory profiles by sensitivity class ({moderate: {...}, high: {...}}; keys of
    # sim.memory.progress.MemoryProfile); null: the jobs have no memory model
    memory: Optional[Any] = None

    @classmethod
    def check(cls, c, key: str) -> None:
        cores = c.get(f"{key}.cores")
        if c.require(f"{key}.cores", len(cores) > 0, "must list at least one core count",
                     list(cores)):
            for i in range(len(cores)):
                c.at_least(f"{key}.cores[{i}]", 1)
        if c.get(f"{key}.trace_file") is not None:
            c.require(f"{key}.trace_file", bool(c.get(f"{key}.trace_file")),
                      "must be a path (or null to generate the job trace)")
        for cls_name in c.get(f"{key}.memory") or ():
            check_memory_profile(c, f"{key}.memory.{cls_name}")


def priority_share(wcfg: NoisyJobsConfig) -> float:
    share = wcfg.priority_share
    return SCENARIOS[wcfg.scenario] if share is None else float(share)


def generate(wcfg: NoisyJobsConfig, seed: int, duration_s: float) -> pa.Table:
    """The job trace of ``wcfg`` over [0, duration_s) (module docstring)."""
    mean, sd = float(wcfg.interarrival_mean_s), float(wcfg.interarrival_sd_s)
    gaps_rng = rng(seed, "workload/jobs/arrivals")
    arrivals = np.empty(0)
    t = 0.0
    # draw in chunks until the horizon is passed; chunks continue one stream,
    # so the trace does not depend on the chunk size
    while t < duration_s:
        gaps = np.maximum(0.0, gaps_rng.normal(mean, sd, int(duration_s / mean) + 64))
        times = t + np.cumsum(gaps)
        arrivals = np.concatenate([arrivals, times])
        t = float(times[-1])
    arrivals = arrivals[arrivals < duration_s]
    n = len(arrivals)
    lengths = np.maximum(float(wcfg.length_min_s),
                         rng(seed, "workload/jobs/length").normal(
                             float(wcfg.length_mean_s), float(wcfg.length_sd_s), n))
    cores = rng(seed, "workload/jobs/cores").choice(np.asarray(list(wcfg.cores), int), n)
    high = rng(seed, "workload/jobs/sensitivity").uniform(size=n) < float(
        wcfg.high_sensitivity_frac)
    priority = rng(seed, "workload/jobs/priority").uniform(size=n) < priority_share(wcfg)
    if wcfg.priority_pool == "high":
        high = priority
    return make_jobs([f"job-{i:05d}" for i in range(n)], arrivals, lengths, cores,
                     np.where(high, "high", "moderate").tolist(), priority)


class NoisyJobsWorkload(TraceWorkload):
    CONFIG = NoisyJobsConfig
    REAL_BACKEND = "jobs"
    generate_trace = staticmethod(generate)
    arrivals = None   # its trace is of jobs, not requests (backends/real/trace.py jobs_for_real)
    read_trace_file = staticmethod(read_jobs)

    def __init__(self, cfg: NoisyJobsConfig, machine, recorder, trace: pa.Table | None = None):
        if trace is None and cfg.trace_file:
            trace = self.read_trace_file(cfg.trace_file)
        if trace is None:
            raise ValueError("workload noisy_jobs replays a job trace: set workload.trace_file, "
                             "or pass trace=sim.workloads.trace_for(cfg) to simulate()")
        if trace.schema.names != JOB_SCHEMA.names:
            raise TraceError(f"workload noisy_jobs needs {JOB_FORMAT}; "
                             f"got columns {', '.join(trace.schema.names)}")
        self.jobs = trace
        # the invocation trace, not the job trace's file
        super().__init__(dataclasses.replace(cfg, trace_file=None), machine, recorder,
                         to_invocations(trace))
        parent = cfg.parent_cgroup.strip("/")
        # what the memory model and the isolation controllers will read, by cgroup
        self.job_class = {
            f"/{parent}/{job}" if parent else f"/{job}": (sensitivity, priority)
            for job, sensitivity, priority in zip(*(trace.column(n).to_pylist() for n in
                                                    ("job", "sensitivity", "priority")))}
        # memory profiles by sensitivity class (sim/memory/progress.py)
        memory = cfg.memory
        if memory:
            profiles = {cls: MemoryProfile.from_spec(dict(spec)) for cls, spec in memory.items()}
            missing = set(SENSITIVITIES) - set(profiles)
            if missing:
                raise ValueError(f"workload.memory needs a profile for {sorted(missing)}")
            mem = machine.memory_model()
            for name, tg in self.groups.items():
                sensitivity, priority = self.job_class[tg.name]
                mem.set_profile(tg, profiles[sensitivity], "priority" if priority else "batch")
        # admission control (Host.hold_jobs): arrivals wait until admitted
        self.held = False
        self.pending: list = []

    def hold_jobs(self) -> None:
        self.held = True

    def pending_jobs(self) -> list:
        """(cgroup, arrival_ns, threads, priority) of waiting jobs, FIFO."""
        return [(tg.name, arrival, k, self.job_class[tg.name][1])
                for _, tg, _, k, arrival in self.pending]

    def admit_job(self, cgroup: str) -> None:
        for i, (name, tg, demand, k, arrival) in enumerate(self.pending):
            if tg.name == cgroup:
                break
        else:
            raise ValueError(f"job {cgroup} is not waiting for admission")
        del self.pending[i]
        hint = min(tg.cpus_allowed) if tg.cpus_allowed else self.hints[name]
        # with the job's arrival: its latency includes the wait for admission
        self.hints[name] = super().fork_request(name, tg, demand, k, hint, arrival)

    def fork_request(self, name, tg, demand, k, hint):
        if self.held:
            self.pending.append((name, tg, demand, k, self.engine.now))
            return hint
        return super().fork_request(name, tg, demand, k, hint)


WORKLOAD = NoisyJobsWorkload
