"""RCU's grace-period kthread, woken by exiting threads -> rcu.parquet.

An exiting thread's task_struct is freed after an RCU grace period
(release_task() -> put_task_struct_rcu_user() -> call_rcu()), so a host
whose workload creates and ends threads keeps RCU's grace-period kthread
(``rcu_preempt`` on a preemptible kernel, ``rcu_sched`` otherwise) busy:
it wakes several times per grace period (start, force-quiescent-state
scans, end), each time on some CPU, switching out what runs there.  The
kernel-threads benchmark cannot see this: its hogs never exit.

This benchmark runs one native worker (backends/workers/funcworker.c) in
its own cgroup on the benchmark CPU and sends it requests of 1 ms with
one thread each at ``RATES`` exits per second, ``SECONDS`` s per point,
``REPEATS`` times (quick: fewer), and reads the grace-period kthread's
CPU time and times run (``/proc/<pid>/schedstat``) around each point.
Seen here (2026-11-26, Linux 6.18, HZ 250): about 3 wake-ups/s with no
exits; about 4 per exit while exits are rare; at most about 125/s (every
2 jiffies) from some 30 exits/s on, 11-20 us each.

The same points count the benchmark CPU's local timer interrupts
(``/proc/interrupts`` LOC): between requests that CPU is idle, and an idle
CPU keeps its tick while RCU callbacks queued on it wait for a grace
period (tick_nohz_next_event(): rcu_needs_cpu()), so each exit keeps it
ticking for a while.  ``idle_tick_rows`` sets the ticks gained over the
exit-free point against the simulator's rule (``scheduler.rcu_idle_tick``:
an exit keeps its CPU's tick for ``rcu_gp_wakeups_per_exit`` x
``rcu_gp_period_ms``).  Seen here (2026-11-28): the CPU ticked 18 % of
the time more at 5 exits/s, 31 % at 10, 64 % at 20 and all of it from 50
on, i.e. some 32-35 ms per exit (the rule: 29 ms).

Columns: rep, rate (asked, exits/s), exits (threads that exited in the
span), span_s, gp_cpu_ns, gp_runs, cpu_ticks (local timer interrupts of the
benchmark CPU over the span), other_frac (the host's CPU outside the
worker, the driver and the kthread, over all CPUs: other processes'
threads exit too) and host_disturbed (steal or other load above the real
backend's bounds, calibration/bench/common.py ``disturbance``: such points
are not fitted).  Meta: the
kthread's comm, config_hz.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from backends.real.disturbance import host_times
from backends.real.workers import WorkerProc, request_line
from calibration.bench import common
from calibration.bench.common import BenchUnavailable, Progress

NAME = "rcu"
ROOT = "rcu"
RATES = (0, 5, 10, 20, 50, 100, 200, 400)
RATES_QUICK = (0, 10, 200)
SECONDS, SECONDS_QUICK = 4.0, 2.0
REPEATS, REPEATS_QUICK = 3, 1
DEMAND_NS = 1_000_000
GP_COMMS = ("rcu_preempt", "rcu_sched")
# the fit's split: rates at most this are "rare exits" (wake-ups per exit),
# at least SATURATED the kthread's own cadence
RARE, SATURATED = 20, 100

SCHEMA = pa.schema([("rep", pa.int64()), ("rate", pa.float64()), ("exits", pa.int64()),
                    ("span_s", pa.float64()), ("gp_cpu_ns", pa.int64()),
                    ("gp_runs", pa.int64()), ("cpu_ticks", pa.int64()),
                    ("other_frac", pa.float64()),
                    ("host_disturbed", pa.bool_())])


def gp_kthread() -> tuple[int, str]:
    """The grace-period kthread's pid and comm; BenchUnavailable if none."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                comm = (d / "comm").read_text().strip()
            except OSError:
                continue
            if comm in GP_COMMS:
                return int(d.name), comm
    raise BenchUnavailable(f"{NAME}: no RCU grace-period kthread ({' or '.join(GP_COMMS)})")


def _schedstat(pid: int) -> tuple[int, int]:
    run, _wait, n = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(run), int(n)


def measure(worker: WorkerProc, usage, gp: int, rate: float, seconds: float,
            req_id: int, cpu: int) -> dict:
    """Requests of one thread each at ``rate`` per second for ``seconds``
    to the worker on ``cpu``."""
    worker.read_lines()
    cpu0, n0 = _schedstat(gp)
    loc0 = common.local_timer_interrupts(cpu)
    h0, u0 = host_times(), usage()
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        if rate:
            worker.send(request_line(req_id + sent, DEMAND_NS, 1))
            sent += 1
            time.sleep(max(0.0, t0 + sent / rate - time.monotonic()))
        else:
            time.sleep(0.05)
        worker.read_lines()
    span = time.monotonic() - t0
    cpu1, n1 = _schedstat(gp)
    loc1 = common.local_timer_interrupts(cpu)
    h1, u1 = host_times(), usage()
    # the worker and the kthread it wakes are the benchmark's own load
    dist = common.disturbance(h0, h1, (u1 - u0) + (cpu1 - cpu0))
    return {"rate": float(rate), "exits": sent, "span_s": span, "gp_cpu_ns": cpu1 - cpu0,
            "gp_runs": n1 - n0, "cpu_ticks": loc1 - loc0, "other_frac": dist["other_frac"],
            "host_disturbed": dist["host_disturbed"]}


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    gp, comm = gp_kthread()
    cpu = common.bench_cpu()
    rates = RATES_QUICK if quick else RATES
    seconds = SECONDS_QUICK if quick else SECONDS
    repeats = REPEATS_QUICK if quick else REPEATS
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.driver_pinned(), common.bench_cgroups(NAME) as cg, \
            common.worker_in_cgroup(cg, ROOT, cpu, NAME, 60 + len(rates) * repeats * seconds * 2) \
            as (worker, usage):
        req_id = 0
        for rep in range(repeats):
            for rate in rates:
                common.say(progress, f"{NAME} rep {rep + 1}/{repeats} exits={rate}/s "
                                     f"({time.monotonic() - t0:.0f} s)")
                row = measure(worker, usage, gp, rate, seconds, req_id, cpu)
                req_id += row["exits"]
                rows.append({"rep": rep, **row})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"rates": list(rates), "seconds": seconds, "repeats": repeats,
              "demand_ns": DEMAND_NS}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu,
                         gp_kthread=comm, config_hz=common.config_hz())


def rcu_params(table: pa.Table) -> dict | None:
    """The profile's ``rcu_gp_*`` keys: wake-ups per exit while exits are
    rare (the slope of wake-ups/s over exits/s at rates <= ``RARE``, above
    the rate with none), the saturated cadence (median wake-ups/s at rates
    >= ``SATURATED``: ``rcu_gp_period_ms`` is its inverse) and CPU per
    wake-up (median over the points with exits); with their 1-sigma under
    ``uncertainty``.  Undisturbed points only; None when a part of the
    sweep is missing."""
    df = table.to_pandas()
    df = df[(df.span_s > 0) & ~df.host_disturbed]
    per_s = df.gp_runs / df.span_s
    exits = df.exits / df.span_s
    rare = df.rate <= RARE
    busy = df.rate >= SATURATED
    if rare.sum() < 2 or busy.sum() < 1 or not (df.rate == 0).any() or not (rare & (df.rate > 0)).any():
        return None
    # least squares through (exits, wake-ups) of the rare points, free intercept
    x, y = exits[rare].to_numpy(float), per_s[rare].to_numpy(float)
    a = np.column_stack([x, np.ones_like(x)])
    coef, res, *_ = np.linalg.lstsq(a, y, rcond=None)
    dof = max(1, len(x) - 2)
    resid = y - a @ coef
    cov = np.linalg.pinv(a.T @ a) * float(resid @ resid) / dof
    sat = per_s[busy].to_numpy(float)
    with_exits = df[df.rate > 0]
    run_us = (with_exits.gp_cpu_ns / with_exits.gp_runs.clip(lower=1) / 1e3).to_numpy(float)
    period_ms = 1e3 / float(np.median(sat))
    return {"rcu_gp_wakeups_per_exit": round(float(coef[0]), 3),
            "rcu_gp_period_ms": round(period_ms, 3),
            "rcu_gp_run_us": round(float(np.median(run_us)), 2),
            "uncertainty": {
                "rcu_gp_wakeups_per_exit": float(f"{np.sqrt(cov[0, 0]):.3g}"),
                "rcu_gp_period_ms": float(f"{period_ms * np.std(sat) / np.mean(sat):.3g}"),
                "rcu_gp_run_us": float(f"{1.4826 * np.median(np.abs(run_us - np.median(run_us))):.3g}")}}


def idle_tick_rows(table: pa.Table, calibration: dict, hz: int) -> list[dict]:
    """Per exit rate: the benchmark CPU's ticks a second beyond the
    exit-free point's, as a share of ``hz`` (the host), against the share
    of time the simulator keeps an idle CPU's tick (``rcu_idle_tick``: each
    exit keeps it for ``rcu_gp_wakeups_per_exit`` x ``rcu_gp_period_ms``;
    exits ``1/rate`` apart cover min(1, rate x span) of the time).  Medians
    over the undisturbed repetitions; the 1 ms requests' own ticks (at most
    rate x 1 ms x hz) are left in the host's share."""
    df = table.to_pandas()
    df = df[(df.span_s > 0) & ~df.host_disturbed]
    per_s = (df.cpu_ticks / df.span_s).groupby(df.rate).median()
    if 0.0 not in per_s.index:
        return []
    span_s = calibration["rcu_gp_wakeups_per_exit"] * calibration["rcu_gp_period_ms"] / 1e3
    return [{"check": "rcu_idle_tick", "rate": float(rate),
             "kept_real": float((per_s[rate] - per_s[0.0]) / hz),
             "kept_sim": min(1.0, float(rate) * span_s),
             "repeats": int((df.rate == rate).sum())}
            for rate in per_s.index if rate > 0]


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
