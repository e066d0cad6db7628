"""Where a task that went to sleep while not eligible is woken ->
delay_dequeue.parquet.

native/dqdelay.c: a hog pinned to the benchmark CPU (X) at nice -10 and a
thread S of nice 0 beside it.  Each cycle S, pinned to X, waits until it is
picked again after a preemption, runs ``run_ns`` more (more than its share
beside the heavier hog: a negative lag), widens its affinity to X and the
idle other CPU (Y) and sleeps ``sleep_ns``; it records the CPU it runs on
after the sleep and how long after the sleep's end it got there
(``latency_ns``).  ``run_ns`` goes round ``RUNS_NS`` and ``sleep_ns``
round ``SLEEPS_NS`` (coprime lengths, so every pair comes up).

Linux 6.12's DELAY_DEQUEUE (152e11f6df29) keeps a task that sleeps while
not eligible queued (se.sched_delayed) until the pick would run it; a
wake-up before then finds it still queued and requeues it where it is
(ttwu_runnable(): no CPU selection), so S is woken on X and waits behind
the hog (``in_place``: on X, or on Y only after an idle balance took it
there, ``latency_ns`` ≥ ``PLACED_NS``).  A task dequeued at its sleep is
woken on the idle Y at once.  The sleep ladder finds when the delay ends:
a sleep that outlasts it wakes on Y.

What it shows on this VM (Linux 6.18.44, 2026-11-27): after sleeps of 0.2
to 3 ms S is woken in place in about 9 of 10 cycles, after 20 ms on Y in
all: DELAY_DEQUEUE is on.  tests/test_delay_dequeue.py holds the
simulator to it.  Nothing here is fitted.

Columns: repeat, cycle, sleep_ns, run_ns, cpu, latency_ns, in_place,
steal_frac, other_frac, host_disturbed.
"""
from __future__ import annotations

import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import NativeProc, Progress

NAME = "delay_dequeue"
PROGRAM = "dqdelay"
ROOT = "delay_dequeue"
SLEEPS_NS = (200_000, 1_000_000, 3_000_000, 6_000_000, 9_000_000, 12_000_000, 20_000_000)
# S's run after its pick: the base slice (1.4 ms here) and below
RUNS_NS = (600_000, 800_000, 1_000_000, 1_200_000, 1_400_000)
HOG_NICE = -10
CYCLES, CYCLES_QUICK = 350, 70
REPEATS, REPEATS_QUICK = 3, 1
# a wake-up on Y this soon after the sleep's end was a wake-up placed there
# (the idle CPU's exit takes 0.1-0.3 ms here); later, an idle balance moved it
PLACED_NS = 500_000
SCHEMA = pa.schema([("repeat", pa.int64()), ("cycle", pa.int64()), ("sleep_ns", pa.int64()),
                    ("run_ns", pa.int64()), ("cpu", pa.int64()), ("latency_ns", pa.int64()),
                    ("in_place", pa.bool_()), ("steal_frac", pa.float64()), ("other_frac", pa.float64()),
                    ("host_disturbed", pa.bool_())])


def in_place(cpu: int, latency_ns: int, x: int) -> bool:
    """Woken where it slept: on X, or on Y later than a placed wake-up."""
    return cpu == x or latency_ns >= PLACED_NS


def measure(cg, cpu: int, other: int, repeat: int, cycles: int) -> list[dict]:
    """One process of native/dqdelay.c: its rows."""
    path = f"{ROOT}/r{repeat}"
    cg.create(path)
    # a cycle: S's wait for its pick beside a hog 9x its weight, the run, the sleep
    budget_s = 30 + cycles * (0.06 + max(SLEEPS_NS) / 1e9)
    p = NativeProc(PROGRAM, ["--cpu", cpu, "--other", other, "--cycles", cycles,
                             "--runs", ",".join(map(str, RUNS_NS)), "--hog-nice", HOG_NICE,
                             "--sleeps", ",".join(map(str, SLEEPS_NS))],
                   max_seconds=budget_s)
    lines, disturbed = p.measured_run(cg, path, ROOT, budget_s)
    rows = []
    for line in lines:
        parts = line.split()
        if len(parts) != 6 or parts[0] != "W":
            raise RuntimeError(f"{NAME}: unexpected line {line!r}")
        c, sleep_ns, run_ns, on, lat = map(int, parts[1:])
        rows.append({"repeat": repeat, "cycle": c, "sleep_ns": sleep_ns, "run_ns": run_ns,
                     "cpu": on,
                     "latency_ns": lat, "in_place": in_place(on, lat, cpu), **disturbed})
    if len(rows) != cycles:
        raise RuntimeError(f"{NAME}: {len(rows)} cycles reported, {cycles} run")
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """``REPEATS`` processes; writes delay_dequeue.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native(PROGRAM)
    cpu = common.bench_cpu()
    other = common.other_cpu(NAME)
    cycles = CYCLES_QUICK if quick else CYCLES
    repeats = REPEATS_QUICK if quick else REPEATS
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(repeats):
            common.say(progress, f"{NAME} repeat {r + 1}/{repeats} "
                                 f"({time.monotonic() - t0:.0f} s)")
            rows += measure(cg, cpu, other, r, cycles)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"cycles": cycles, "repeats": repeats, "runs_ns": list(RUNS_NS), "hog_nice": HOG_NICE,
              "sleeps_ns": list(SLEEPS_NS), "placed_ns": PLACED_NS, "cpu": cpu, "other": other}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
