"""How soon an idle CPU takes a task waiting on the other CPU ->
newidle.parquet.

native/newidle.c: two CPU hogs queued on the other CPU (Y) while a thread
S pinned to the benchmark CPU (X) spins, then S sleeps and X goes idle
with a hog waiting on Y; each cycle records when a hog first runs on X
(``pull_ns`` after S's sleep; -1: not within the 30 ms sleep).  The kernel
can move it at two moments:

- at once, in S's own schedule(), by the newly idle balance
  (sched_balance_newidle()): ``pull_ns`` under 100 us (``FAST_NS``);
- later, from idle, when Y's tick kicks X's nohz balance: Y's tick also
  ends the running hog's slice, and X balances after it has taken the
  kick's IPI, so the hog just preempted is cache hot
  (sysctl_sched_migration_cost, 0.5 ms) and stays put until the balance
  has failed more than cache_nice_tries (1) times in a row.

Two phases, each in a fresh process:

- ``clean``: ``CYCLES`` cycles;
- ``after_failures``: first ``FAILS`` sleeps of 0.2 ms with the hogs
  pinned to Y, so that X goes idle that often with nothing it may pull
  (failed newidle balances), then the same cycles.

What it shows on this VM (Linux 6.18.44, 2026-11-27): in ``clean``, X
pulls at once in only 30-65 % of the cycles (the share drifts up from one
sitting to the next), otherwise mostly 10-15 ms later (14 % of those at
the first kick, within 2 ms); right after the failures,
in 1 of the next 49 cycles, recovering over about 100.  That is 6.18's
proportional newidle balance (NI_RANDOM, 33cf66d88306): newidle balancing
runs with a probability that follows its recent success rate, which the
failures drove to nearly 0 (policies/kernel/eevdf.py ``newidle_balance``);
a constant gate on avg_idle would have recovered within ten cycles.  The
late pulls are the nohz balance after the kick's IPI (sim/machine.py, the
SchedConfig key ``nohz_kick_ipi``), traced with ftrace: the first kicks
find the waiting hog hot, unless it was not the one that tick preempted.  tests/test_newidle.py holds the simulator to
both.  Neither mechanism has a parameter: nothing here is fitted.

Columns: phase, repeat, cycle, pull_ns, steal_frac, other_frac,
host_disturbed.
"""
from __future__ import annotations

import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import NativeProc, Progress

NAME = "newidle"
ROOT = "newidle"
PHASES = ("clean", "after_failures")
CYCLES, CYCLES_QUICK = 150, 40
FAILS, FAILS_QUICK = 5000, 2000
FAIL_NS = 200_000
GAP_NS = 2_000_000
TRIAL_NS = 30_000_000
REPEATS, REPEATS_QUICK = 3, 1
# a pull this soon after S's sleep was the newly idle balance in S's schedule()
FAST_NS = 100_000
SCHEMA = pa.schema([("phase", pa.string()), ("repeat", pa.int64()), ("cycle", pa.int64()),
                    ("pull_ns", pa.int64()), ("steal_frac", pa.float64()),
                    ("other_frac", pa.float64()), ("host_disturbed", pa.bool_())])


def measure(cg, cpu: int, other: int, phase: str, repeat: int, cycles: int,
            fails: int) -> list[dict]:
    """One process of native/newidle.c: its rows."""
    path = f"{ROOT}/{phase}"
    cg.create(path)
    budget_s = 30 + fails * (FAIL_NS + 100_000) / 1e9 + cycles * (GAP_NS + TRIAL_NS + 5e6) / 1e9
    p = NativeProc("newidle", ["--cpu", cpu, "--other", other, "--cycles", cycles,
                               "--fails", fails if phase == "after_failures" else 0,
                               "--fail-ns", FAIL_NS, "--gap-ns", GAP_NS, "--trial-ns", TRIAL_NS],
                   max_seconds=budget_s)
    lines, disturbed = p.measured_run(cg, path, ROOT, budget_s)
    base = {"phase": phase, "repeat": repeat, **disturbed}
    rows = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[0] != "P":
            raise RuntimeError(f"{NAME}: unexpected line {line!r}")
        rows.append({**base, "cycle": int(parts[1]), "pull_ns": int(parts[2])})
    if len(rows) != cycles:
        raise RuntimeError(f"{NAME}: {len(rows)} cycles reported, {cycles} run")
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """Both phases, ``REPEATS`` times; writes newidle.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native(NAME)
    cpu = common.bench_cpu()
    other = common.other_cpu(NAME)
    cycles = CYCLES_QUICK if quick else CYCLES
    fails = FAILS_QUICK if quick else FAILS
    repeats = REPEATS_QUICK if quick else REPEATS
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(repeats):
            for phase in PHASES:
                common.say(progress, f"{NAME} repeat {r + 1}/{repeats} {phase} "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += measure(cg, cpu, other, phase, r, cycles, fails)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"cycles": cycles, "fails": fails, "fail_ns": FAIL_NS, "gap_ns": GAP_NS,
              "trial_ns": TRIAL_NS, "repeats": repeats, "fast_ns": FAST_NS}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
