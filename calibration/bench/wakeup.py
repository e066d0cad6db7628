"""Wake-up latency under load -> wakeup.parquet.

A thread (native/wakeup.c) in cgroup wakeup/sleeper sleeps with
clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to deadlines 1 ms apart and
records its lateness = CLOCK_MONOTONIC on waking - deadline.  Its timer slack
is set to 1 ns (prctl PR_SET_TIMERSLACK), so the kernel's default 50 us
slack is not in the numbers.  A wake-up later than the next deadline skips
the deadlines already past (cyclictest's rule): one row per wake-up.

It shares the highest-numbered CPU with:
  hog_weight "low":   0, 1, 4, 16 (quick 0, 4) cgroups wakeup/low<i>, each
                      with one CPU hog at the lowest weight (v1 cpu.shares 2,
                      v2 cpu.weight 1) while the sleeper's cgroup has the
                      default weight;
  hog_weight "equal": one hog in wakeup/equal0, at the sleeper's (default)
                      weight.
The first 50 wake-ups are discarded; then 5000 wake-ups per configuration
(quick 1000), or as many as come in 10 s (quick 2 s) when late wake-ups skip
periods (meta count_cap, duration_cap_s).

Columns: busy_cgroups, hog_weight, period_ns, lateness_ns (one row per
wake-up).
"""
from __future__ import annotations

import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import MIN_SHARES, NativeProc, Progress

NAME = "wakeup"
ROOT = "wakeup"
BUSY = (0, 1, 4, 16)
BUSY_QUICK = (0, 4)
PERIOD_NS = 1_000_000
COUNT, COUNT_QUICK = 5000, 1000
DURATION_S, DURATION_S_QUICK = 10.0, 2.0
SKIP = 50

SCHEMA = pa.schema([
    ("busy_cgroups", pa.int64()), ("hog_weight", pa.string()), ("period_ns", pa.int64()),
    ("lateness_ns", pa.int64()),
])


def configs(quick: bool) -> list[tuple[int, str]]:
    return [(b, "low") for b in (BUSY_QUICK if quick else BUSY)] + [(1, "equal")]


def measure(cg, cpu: int, busy: int, weight: str, count: int, period_ns: int,
            duration_s: float) -> list[dict]:
    sleeper = f"{ROOT}/sleeper"
    cg.create(sleeper)
    paths = [f"{ROOT}/{weight}{i}" for i in range(busy)]
    for p in paths:
        cg.create(p)
        if weight == "low":
            cg.set_shares(p, MIN_SHARES)
    budget_s = SKIP * period_ns / 1e9 * 10 + duration_s + 30
    with common.hogs(cg, paths, cpu, max_seconds=budget_s + 10):
        lateness = sleeper_lateness(cg, sleeper, cpu, period_ns, count, SKIP, budget_s,
                                    ["--duration-ns", int(duration_s * 1e9)])
    return [{"busy_cgroups": busy, "hog_weight": weight, "period_ns": period_ns,
             "lateness_ns": late} for late in lateness]


def sleeper_lateness(cg, cgroup: str, cpu: int, period_ns: int, count: int, skip: int,
                     budget_s: float, extra_args=(), before_go=None) -> list[int]:
    """Run native/wakeup.c in ``cgroup`` on ``cpu`` (``before_go(pid)``
    once it is attached, before it starts) and return its lateness, ns,
    one per wake-up after the first ``skip``."""
    p = NativeProc("wakeup", ["--cpu", cpu, "--period-ns", period_ns, "--count", count,
                              "--skip", skip, *extra_args], max_seconds=budget_s)
    try:
        cg.attach(cgroup, p.pids[0])
        if before_go is not None:
            before_go(p.pids[0])
        p.go()
        lines = p.output(timeout_s=budget_s)
    finally:
        p.kill()
    lateness = []
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or parts[0] != "L":
            raise RuntimeError(f"wakeup: unexpected line {line!r}")
        lateness.append(int(parts[1]))
    return lateness


def run(out_dir, quick: bool = False, progress: Progress = None, *,
        only: list[tuple[int, str]] | None = None, count: int | None = None) -> pa.Table:
    """Run the configurations (``only``: (busy_cgroups, hog_weight) pairs
    instead, for tests) and write wakeup.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("wakeup")
    common.build_native("hog")
    cpu = common.bench_cpu()
    todo = list(only) if only is not None else configs(quick)
    count = count or (COUNT_QUICK if quick else COUNT)
    duration_s = DURATION_S_QUICK if quick else DURATION_S
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for i, (busy, weight) in enumerate(todo, 1):
            common.say(progress, f"{NAME} [{i}/{len(todo)}] busy={busy} weight={weight} "
                                 f"({time.monotonic() - t0:.0f} s)")
            rows += measure(cg, cpu, busy, weight, count, PERIOD_NS, duration_s)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"configs": [list(c) for c in todo], "count_cap": count,
              "duration_cap_s": duration_s, "skip": SKIP,
              "period_ns": PERIOD_NS, "timer_slack_ns": 1, "low_shares_v1": MIN_SHARES}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu, config_hz=common.config_hz())


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
