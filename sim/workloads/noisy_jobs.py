"""``workload=noisy_jobs``: the noisy-neighbor thesis's job stream (seed 004
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
scenarios/workloads/noisy_jobs.py generates traces from a seed.

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

import numpy as np
import pyarrow as pa

from sim.workloads.tablefile import TableFormat, TraceError
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
# the workload reads its trace itself (sim.workloads.build)
READS_TRACE = True


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
    return (job, float(arrival), float(length), int(cores), sensitivity,
            priority.lower() == "true")


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


class NoisyJobsWorkload(TraceWorkload):
    def __init__(self, cfg, machine, recorder, trace: pa.Table | None = None):
        if cfg.get("trace_file"):
            trace = read_jobs(cfg["trace_file"])
        if trace is None:
            raise ValueError("workload noisy_jobs replays a job trace: set workload.trace_file, "
                             "or pass trace=scenarios.workloads.trace_for(cfg) to simulate()")
        if trace.schema.names != JOB_SCHEMA.names:
            raise TraceError(f"workload noisy_jobs needs {JOB_FORMAT}; "
                             f"got columns {', '.join(trace.schema.names)}")
        self.jobs = trace
        super().__init__(cfg, machine, recorder, to_invocations(trace))
        parent = str(cfg.get("parent_cgroup") or "").strip("/")
        # what the memory model and the isolation controllers will read, by cgroup
        self.job_class = {
            f"/{parent}/{job}" if parent else f"/{job}": (sensitivity, priority)
            for job, sensitivity, priority in zip(*(trace.column(n).to_pylist() for n in
                                                    ("job", "sensitivity", "priority")))}
        # memory profiles by sensitivity class (sim/memory/progress.py)
        memory = cfg.get("memory")
        if memory:
            from sim.memory.progress import MemoryProfile
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
