"""How long an idle CPU takes to wake, against how long it was idle ->
idle_exit.parquet.

The timerwake benchmark's SCHED_FIFO sleeper (native/wakeup.c; an RT
task's timer has no slack) sleeps alone on the idle benchmark CPU with
clock_nanosleep(TIMER_ABSTIME) to deadlines ``PERIODS_NS`` apart, one
period per configuration, and records its lateness: the timer interrupt,
the CPU's exit from idle and the switch to the sleeper.  Between two
wake-ups the CPU is idle for the period less the sleeper's few us.

The same ladder woken from the other CPU ("ipi" rows): a thread there
sleeps to the deadlines and writes a pipe the sleeper blocks on, as a load
generator wakes a worker (wakeup.c --waker-cpu); the lateness counts from
the write (the reschedule IPI, the idle exit, the switch).

What it shows on this VM (Linux 6.18, Firecracker guest, cpuidle haltpoll
with guest polling off): the wake-up grows with the idle time, on both
paths alike, from 21-30 us after 0.25 ms idle to 72-92 us after 20 ms
(2026-11-27; the day before the own timer's ladder ran 40 -> 121 us: the
VM's speed moves between days).  The own timer's long end is 10-15 us above
the write's.  A constant ``idle_exit_ns`` cannot hold both the suites'
short idle gaps and rt-app's 10 ms periods.  :func:`idle_exit_params`
fits ``a + b (1 - exp(-idle / tau))`` to the medians of both paths (the
simulator charges one idle exit whatever woke the CPU): the cost model's
``idle_exit_ns`` (``a`` less the switch), ``idle_exit_cold_ns``,
``idle_exit_decay_ns``; ``colosim calibrate`` takes them from here
(calibration/calibrate.py ``fit_with_ladder``).

Columns: timerwake's (repeat, sleeper, load, kind "wake" (own timer) or
"ipi", period_ns, lateness_ns, ..., steal_frac, other_frac,
host_disturbed), one row per wake-up.
"""
from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
from scipy.optimize import curve_fit

from calibration import fit
from calibration.bench import common, timerwake
from calibration.bench.common import Progress

NAME = "idle_exit"
ROOT = "idle_exit"
SLEEPER = "fifo-50us"
PERIODS_NS = (250_000, 500_000, 1_000_000, 2_000_000, 4_000_000, 7_000_000, 10_000_000,
              20_000_000)
# quick: the four periods the fit needs at least
PERIODS_NS_QUICK = (250_000, 1_000_000, 4_000_000, 10_000_000)
# "wake": the sleeper's own timer; "ipi": a write from the other CPU
KINDS = ("wake", "ipi")
COUNT, COUNT_QUICK = 1000, 200
DURATION_S, DURATION_S_QUICK = 2.0, 0.6
REPEATS, REPEATS_QUICK = 3, 1


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """Every period, ``REPEATS`` sweeps; writes idle_exit.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("wakeup")
    cpu = common.bench_cpu()
    other_cpu = min(common.driver_cpus())
    periods = PERIODS_NS_QUICK if quick else PERIODS_NS
    count = COUNT_QUICK if quick else COUNT
    duration_s = DURATION_S_QUICK if quick else DURATION_S
    repeats = REPEATS_QUICK if quick else REPEATS
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(repeats):
            todo = [(k, p) for p in periods for k in KINDS]
            for i, (kind, period) in enumerate(todo, 1):
                common.say(progress, f"{NAME} repeat {r + 1}/{repeats} [{i}/{len(todo)}] "
                                     f"{kind} period {period / 1e6:g} ms "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += timerwake.measure(cg, cpu, other_cpu, kind, SLEEPER, "idle", count,
                                          duration_s, r, period_ns=period, root=ROOT)
    table = pa.Table.from_pylist(rows, schema=timerwake.SCHEMA)
    params = {"periods_ns": list(periods), "kinds": list(KINDS), "repeats": repeats,
              "count_cap": count, "duration_cap_s": duration_s, "skip": timerwake.SKIP,
              "sleeper": SLEEPER}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu,
                         config_hz=common.config_hz())


def wake_ns(idle_ns, a: float, b: float, tau: float):
    """The wake-up of a CPU idle ``idle_ns``: ``a`` at once, growing by up
    to ``b`` with time constant ``tau``."""
    return a - b * np.expm1(-np.asarray(idle_ns, float) / tau)


def idle_exit_params(table: pa.Table, switch_ns: float = 0.0) -> dict | None:
    """``a``, ``b``, ``tau`` of :func:`wake_ns` by least squares on the
    undisturbed sweeps' medians per period and kind (both paths together:
    the simulator charges one idle exit whatever woke the CPU; idle time =
    the period, the sleeper runs a few us), ``a`` less
    ``switch_ns`` (the switch to the sleeper, which the cost model charges
    apart), with 1-sigma (``tau`` at most the longest period), and
    ``idle_exit_spread``: the wake-ups' scatter
    around their sweep's median (calibration/fit.py ``spread``; the switch,
    ~1 us, is in the ratios); None with fewer than 4 periods."""
    df = table.to_pandas()
    df = df[~df.host_disturbed & df.lateness_ns.notna()]
    med = df.groupby(["repeat", "kind", "period_ns"]).lateness_ns.median().reset_index()
    if med.period_ns.nunique() < 4:
        return None
    x, y = med.period_ns.to_numpy(float), med.lateness_ns.to_numpy(float)
    p0 = (y.min(), y.max() - y.min(), min(2e6, x.max() / 2))
    (a, b, tau), cov = curve_fit(wake_ns, x, y, p0=p0, bounds=([0, 0, 1e4], [1e6, 1e6, 1e9]))
    if tau > x.max():
        # a time constant beyond the longest idle measured is not measured (a
        # short ladder's near-linear growth fits one of seconds and a cold
        # term of a second): held within the ladder
        (a, b, tau), cov = curve_fit(wake_ns, x, y, p0=p0,
                                     bounds=([0, 0, 1e4], [1e6, 1e6, x.max()]))
    sd = np.sqrt(np.diag(cov))
    # the scatter: each wake-up over its sweep's median at that period and path
    ratios = df.lateness_ns / df.groupby(["repeat", "kind", "period_ns"]).lateness_ns \
        .transform("median")
    return {"idle_exit_spread": fit.spread(ratios),
            "idle_exit_ns": round(max(0.0, float(a) - switch_ns), 1),
            "idle_exit_cold_ns": round(float(b), 1), "idle_exit_decay_ns": round(float(tau), 1),
            "uncertainty": {"idle_exit_ns": float(f"{sd[0]:.3g}"),
                            "idle_exit_cold_ns": float(f"{sd[1]:.3g}"),
                            "idle_exit_decay_ns": float(f"{sd[2]:.3g}")},
            "measured": {"median_ns_by_period": {
                str(k): {int(p): float(v) for p, v in g.groupby("period_ns").lateness_ns
                         .median().items()} for k, g in med.groupby("kind")}}}


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
