"""Timer-driven wake-ups as the host does them -> timerwake.parquet.

A sleeper (native/wakeup.c, as the wakeup benchmark's) in cgroup
timerwake/sleeper sleeps with clock_nanosleep(CLOCK_MONOTONIC,
TIMER_ABSTIME) to deadlines 1 ms apart and records its lateness, for each
combination of

  sleeper: "other-1ns"    SCHED_OTHER, timer slack 1 ns (PR_SET_TIMERSLACK);
           "other-50us"   SCHED_OTHER, the kernel's default slack, 50 us;
           "fifo-50us"    SCHED_FIFO 50 asking for 50 us of slack, which the
                          kernel does not give an RT task (hrtimer_nanosleep);
  load:    "idle"         nothing else runs on its CPU;
           "same"         a CPU hog on its CPU, in cgroup timerwake/hog at the
                          lowest weight, so a woken sleeper preempts it;
           "other"        a CPU hog on another CPU only.

The lateness separates what an hrtimer expiry costs: the slack (other-50us
minus other-1ns), the interrupt and wake-up on a running CPU ("same": the
timer interrupts the hog, the sleeper preempts it), and the same on an idle
CPU ("idle": the vCPU's exit from halt first).

Then the work after a sleep ("work" rows): the sleeper, SCHED_OTHER at the
default slack, wakes every 2.5 ms and runs a fixed chain of multiply-adds
(about 0.5 ms, as the dense suite's latency thread) on an idle CPU and beside
the hog; its wall and CPU time per wake-up, then the same work back to back
without sleeping ("hot" rows), the reference.

Every configuration is run in ``REPEATS`` sweeps (column ``repeat``): the
first 50 wake-ups of each are discarded, then 2000 (quick 300) or as many as
come in 3 s (quick 0.6 s).

Each configuration's measurement also reads the host's CPU times
(/proc/stat) and the benchmark's cgroups' CPU time around it: steal and
the busy time of anything else on the guest, over the host's CPU time
(``steal_frac``, ``other_frac``); above the real backend's bounds
(``backend.disturbed_steal_frac``, ``disturbed_other_frac``) the sweep's
rows are ``host_disturbed`` and the fit leaves that sweep out
(calibration/fit.py ``timer_points``).

Columns: repeat, sleeper, load, kind ("wake", "work", "hot"; "ipi" in idle_exit.parquet), period_ns,
lateness_ns (null for hot rows), work_wall_ns, work_cpu_ns (null for wake
rows), steal_frac, other_frac, host_disturbed (per configuration of a
sweep); one row per wake-up or per hot run.
"""
from __future__ import annotations

import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import MIN_SHARES, NativeProc, Progress

NAME = "timerwake"
ROOT = "timerwake"
# sleeper -> (policy's wakeup.c arguments, timer slack asked for, ns)
SLEEPERS = {"other-1ns": ([], 1), "other-50us": ([], 50_000),
            "fifo-50us": (["--fifo", 50], 50_000)}
LOADS = ("idle", "same", "other")
WORK_LOADS = ("idle", "same")
WORK_SLEEPER = "other-50us"
PERIOD_NS = 1_000_000
WORK_PERIOD_NS = 2_500_000
# about 0.5 ms of the chain on this host's CPU (the ratio is what is used)
WORK_LOOPS = 300_000
COUNT, COUNT_QUICK = 2000, 300
DURATION_S, DURATION_S_QUICK = 3.0, 0.6
SKIP = 50
REPEATS, REPEATS_QUICK = 3, 1
# RT runtime (us per 1 s period) given to each level of the sleeper's
# cgroup chain where RT group scheduling is on: the sleeper needs a few us
# per wake-up, 1000 wake-ups a second (10 ms throttled it)
RT_RUNTIME_US = 100_000

SCHEMA = pa.schema([
    ("repeat", pa.int64()), ("sleeper", pa.string()), ("load", pa.string()),
    ("kind", pa.string()), ("period_ns", pa.int64()), ("lateness_ns", pa.int64()),
    ("work_wall_ns", pa.int64()), ("work_cpu_ns", pa.int64()),
    ("steal_frac", pa.float64()), ("other_frac", pa.float64()), ("host_disturbed", pa.bool_()),
])


def configs() -> list[tuple[str, str, str]]:
    """(kind, sleeper, load) of one sweep."""
    return ([("wake", s, ld) for s in SLEEPERS for ld in LOADS]
            + [("work", WORK_SLEEPER, ld) for ld in WORK_LOADS])


def _rt_runtime(cg, chain: list[str]) -> None:
    """RT group scheduling (v1 cpu.rt_runtime_us): an RT thread may only
    join a cgroup with RT runtime, and a child's cannot exceed its parent's."""
    for path in chain:
        f = cg.dir("cpu", path) / "cpu.rt_runtime_us"
        if f.exists() and int(f.read_text()) < RT_RUNTIME_US:
            cg._write(f, str(RT_RUNTIME_US))


def measure(cg, cpu: int, other_cpu: int, kind: str, sleeper: str, load: str, count: int,
            duration_s: float, repeat: int, period_ns: int | None = None,
            root: str = ROOT) -> list[dict]:
    """One configuration: its rows.  ``period_ns``: the sleeper's period
    (default: the kind's); ``root``: the benchmark's cgroup (another
    benchmark's sleeper, calibration/bench/idle_exit.py).  Kind "ipi" (no
    hog): the sleeper is woken by a thread on ``other_cpu`` writing a pipe
    at the deadlines, not by its own timer (wakeup.c --waker-cpu); its rows'
    kind is "ipi"."""
    path = f"{root}/sleeper"
    cg.create(path)
    args, slack = SLEEPERS[sleeper]
    if args:
        _rt_runtime(cg, ["", root, path])
    period = period_ns or (WORK_PERIOD_NS if kind == "work" else PERIOD_NS)
    hog_paths = [] if load == "idle" else [f"{root}/hog"]
    for p in hog_paths:
        cg.create(p)
        cg.set_shares(p, MIN_SHARES)
    hot_s = count * WORK_LOOPS * 5e-9 if kind == "work" else 0.0
    budget_s = SKIP * period / 1e9 * 10 + duration_s + hot_s + 30
    with common.hogs(cg, hog_paths, cpu if load == "same" else other_cpu,
                     max_seconds=budget_s + 10):
        work = (["--work-loops", WORK_LOOPS] if kind == "work"
                else ["--waker-cpu", other_cpu] if kind == "ipi" else [])
        p = NativeProc("wakeup", ["--cpu", cpu, "--period-ns", period, "--count", count,
                                  "--skip", SKIP, "--duration-ns", int(duration_s * 1e9),
                                  "--slack-ns", slack, *args, *work], max_seconds=budget_s)
        lines, disturbed = p.measured_run(cg, path, root, budget_s)
    rows = []
    base = {"repeat": repeat, "sleeper": sleeper, "load": load, "period_ns": period,
            **disturbed}
    for line in lines:
        parts = line.split()
        if kind in ("wake", "ipi") and len(parts) == 2 and parts[0] == "L":
            rows.append({**base, "kind": kind, "lateness_ns": int(parts[1])})
        elif kind == "work" and len(parts) == 4 and parts[0] == "L":
            rows.append({**base, "kind": "work", "lateness_ns": int(parts[1]),
                         "work_wall_ns": int(parts[2]), "work_cpu_ns": int(parts[3])})
        elif kind == "work" and len(parts) == 3 and parts[0] == "H":
            rows.append({**base, "kind": "hot", "work_wall_ns": int(parts[1]),
                         "work_cpu_ns": int(parts[2])})
        else:
            raise RuntimeError(f"timerwake: unexpected line {line!r}")
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """Every configuration, ``REPEATS`` sweeps; writes timerwake.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("wakeup")
    common.build_native("hog")
    cpu = common.bench_cpu()
    other_cpu = min(common.driver_cpus())
    count = COUNT_QUICK if quick else COUNT
    duration_s = DURATION_S_QUICK if quick else DURATION_S
    repeats = REPEATS_QUICK if quick else REPEATS
    todo = configs()
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(repeats):
            for i, (kind, sleeper, load) in enumerate(todo, 1):
                common.say(progress, f"{NAME} repeat {r + 1}/{repeats} [{i}/{len(todo)}] "
                                     f"{kind} {sleeper} load={load} "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += measure(cg, cpu, other_cpu, kind, sleeper, load, count, duration_s, r)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"configs": [list(c) for c in todo], "repeats": repeats, "count_cap": count,
              "duration_cap_s": duration_s, "skip": SKIP, "period_ns": PERIOD_NS,
              "work_period_ns": WORK_PERIOD_NS, "work_loops": WORK_LOOPS,
              "sleepers": {k: {"args": [str(a) for a in v[0]], "slack_ns": v[1]}
                           for k, v in SLEEPERS.items()},
              "low_shares_v1": MIN_SHARES, "other_cpu": other_cpu}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu, config_hz=common.config_hz())


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
