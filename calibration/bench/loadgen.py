"""The real backend's load generator on the host's CPUs -> loadgen.parquet.

backend=real replays a function workload's trace from one thread
(backends/real/loadgen.py ``replay``), SCHED_FIFO (``backend.
loadgen_rt_priority``) and unpinned when the workers need every CPU: per
dispatch it wakes ``spin_us`` early, drains every worker's completion pipe
(one non-blocking read per worker), busy-waits to the arrival and writes
the request line.  The simulator models it as a task of the host
(sim/loadgen.py) that runs ``loadgen_dispatch_us + loadgen_worker_us x
workers`` per dispatch and ``loadgen_sample_us + loadgen_sample_cgroup_us x
cgroups`` per read of its interval sampler (every ``interval_s``, on the
same thread); this benchmark measures all four.

It runs the real backend itself (``run_real``) on trivial requests
(``workload=poisson workload.request_path=worker``, 200 us exponential
demand, so the workers hardly load the CPUs) at ``FUNCTIONS`` densities x
``RATES`` total dispatch rates, ``REPEATS`` times, and reads the generator
thread's CPU time and switch-ins (``/proc/thread-self/schedstat``: run ns
and pcount) from its progress callback, which runs on that thread: at the
first call after warm-up and at the last one.  The dispatches between the
two are the trace's arrivals in that span.

The sampler times its own reads (the run's ``sampler_read_us``, the mean
thread CPU of one read, the perf counters' included) over the cgroups it
reads (``cgroups``: the functions', their parent's and the root's).

Columns (one row per run): rep, functions, rate_rps (all functions
together), span_s, dispatches, gen_cpu_ns, gen_switch_ins, lateness_p99_s,
host_disturbed, cgroups, sampler_read_us, sampler_reads (in the span).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from scipy.stats import theilslopes

from backends.real.run import run_real
from calibration.bench import common
from calibration.bench.common import Progress
from scenarios.config import compose
from sim.loadgen import SAMPLED_BESIDE_FUNCTIONS

NAME = "loadgen"
FUNCTIONS, FUNCTIONS_QUICK = (8, 64, 256), (8, 64)
RATES, RATES_QUICK = (50.0, 150.0, 300.0), (50.0, 300.0)
REPEATS, REPEATS_QUICK = 3, 1
DURATION_S, DURATION_S_QUICK = 4.0, 2.0
WARMUP_S = 1.0
DEMAND_S = 0.0002
SCHEMA = pa.schema([("rep", pa.int64()), ("functions", pa.int64()), ("rate_rps", pa.float64()),
                    ("span_s", pa.float64()), ("dispatches", pa.int64()),
                    ("gen_cpu_ns", pa.int64()), ("gen_switch_ins", pa.int64()),
                    ("lateness_p99_s", pa.float64()), ("host_disturbed", pa.bool_()),
                    ("cgroups", pa.int64()), ("sampler_read_us", pa.float64()),
                    ("sampler_reads", pa.int64())])


def _schedstat() -> tuple[int, int]:
    """This thread's (run ns, times switched in)."""
    f = Path("/proc/thread-self/schedstat").read_text().split()
    return int(f[0]), int(f[2])


def one_run(functions: int, rate_rps: float, duration_s: float, seed: int) -> dict:
    cfg = compose(["host=this-vm", "scheduler=eevdf", "backend=real", "workload=poisson",
                   "workload.request_path=worker", "workload.working_set_kb=0",
                   f"workload.functions={functions}",
                   f"workload.rate_rps={rate_rps / functions}",
                   f"workload.mean_service_s={DEMAND_S}", f"duration_s={duration_s}",
                   f"warmup_s={WARMUP_S}", f"seed={seed}", "backend.lateness_action=flag"])
    marks: list[tuple[float, int, int]] = []

    def progress(now_s, _duration_s):
        if now_s >= WARMUP_S:
            marks.append((now_s, *_schedstat()))
    res = run_real(cfg, progress=progress, run_name=f"bench-loadgen-{functions}")
    # the progress callback, on the generator's own thread, times the span:
    # if its calls after warm-up span less than half the measured time, the
    # generator was stalled and the run measured little or nothing (seen in
    # CI: sampler reads of 250-270 ms, no arrival in the span); such a run
    # counts as disturbed
    stalled = len(marks) < 2 or marks[-1][0] - marks[0][0] < 0.5 * (duration_s - WARMUP_S)
    (t0, cpu0, n0), (t1, cpu1, n1) = ((0.0, 0, 0),) * 2 if stalled else (marks[0], marks[-1])
    arr = np.asarray(res.trace.column("arrival_s").to_numpy(zero_copy_only=False))
    s = res.summary.to_pylist()[0]
    interval_s = float(cfg.interval_s)
    # the sampler's instants (every interval_s, the warm-up): those in the span
    instants = {k * interval_s for k in range(int(t1 / interval_s) + 1)} | {WARMUP_S}
    return {"functions": functions, "rate_rps": rate_rps, "span_s": t1 - t0,
            "dispatches": int(((arr >= t0) & (arr < t1)).sum()),
            "gen_cpu_ns": cpu1 - cpu0, "gen_switch_ins": n1 - n0,
            "lateness_p99_s": float(s["loadgen_lateness_p99_s"]),
            "host_disturbed": bool(s.get("host_disturbed", False)) or stalled,
            "cgroups": functions + SAMPLED_BESIDE_FUNCTIONS,
            "sampler_read_us": float(s["sampler_read_us"]),
            "sampler_reads": sum(t0 <= t < t1 for t in instants)}


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    functions = FUNCTIONS_QUICK if quick else FUNCTIONS
    rates = RATES_QUICK if quick else RATES
    repeats = REPEATS_QUICK if quick else REPEATS
    duration = DURATION_S_QUICK if quick else DURATION_S
    rows = []
    t0 = time.monotonic()
    for rep in range(repeats):
        for n in functions:
            for rate in rates:
                common.say(progress, f"{NAME} rep {rep + 1}/{repeats} functions={n} "
                                     f"rate={rate:g}/s ({time.monotonic() - t0:.0f} s)")
                rows.append({"rep": rep, **one_run(n, rate, duration, seed=rep)})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"functions": list(functions), "rates_rps": list(rates), "repeats": repeats,
              "duration_s": duration, "warmup_s": WARMUP_S, "demand_s": DEMAND_S}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


# the dispatch fit's terms: a run per term at least, of two densities
FIT_TERMS = 4


def loadgen_costs(table: pa.Table) -> dict | None:
    """The generator's CPU per dispatch, ``loadgen_dispatch_us +
    loadgen_worker_us x workers`` (us), by least squares of its CPU per
    second, less its sampler's reads, on dispatches per second and
    dispatches x workers per second, with a rate-independent term per run
    and per worker (``loadgen_background_us_per_s`` and
    ``loadgen_background_worker_us_per_s``); and its CPU per sampler read, ``loadgen_sample_us +
    loadgen_sample_cgroup_us x cgroups``, by Theil-Sen of the runs'
    ``sampler_read_us`` on the cgroups read; undisturbed runs only.  Also
    the 1-sigma of each (``uncertainty``) and, in ``measured``, the
    residual scatter, its switch-ins per
    dispatch and the runs used.  None when fewer than ``FIT_TERMS``
    undisturbed runs, or runs of one density only, are left (a busy host
    flags them): nothing is fitted then."""
    rows = [r for r in table.to_pylist() if not r["host_disturbed"] and r["span_s"] > 0]
    if len(rows) < FIT_TERMS or len({r["functions"] for r in rows}) < 2:
        return None
    d = np.array([r["dispatches"] / r["span_s"] for r in rows])
    w = np.array([float(r["functions"]) for r in rows])
    reads_us = np.array([r["sampler_reads"] * r["sampler_read_us"] / r["span_s"] for r in rows])
    y = np.array([r["gen_cpu_ns"] / r["span_s"] / 1000 for r in rows]) - reads_us  # us per s
    coef, sigma, resid = _lstsq(np.column_stack([d, d * w, np.ones_like(d), w]), y)
    # a run's mean read is of a handful; one read slowed tenfold (a page
    # fault storm, the GC) doubles it: Theil-Sen's median slopes ignore those
    c = np.array([float(r["cgroups"]) for r in rows])
    read = np.array([r["sampler_read_us"] for r in rows])
    slope, intercept, slope_lo, slope_hi = theilslopes(read, c)
    s_resid = read - (intercept + slope * c)
    mad = 1.4826 * float(np.median(np.abs(s_resid)))
    s_coef = (intercept, slope)
    s_sigma = (mad / np.sqrt(len(read)), (slope_hi - slope_lo) / (2 * 1.96))
    sw = np.array([r["gen_switch_ins"] / r["span_s"] for r in rows])
    per_dispatch_sw, _ = np.polyfit(d, sw, 1)
    return {"loadgen_dispatch_us": round(float(coef[0]), 2),
            "loadgen_worker_us": round(float(coef[1]), 4),
            "loadgen_sample_us": round(float(s_coef[0]), 1),
            "loadgen_sample_cgroup_us": round(float(s_coef[1]), 3),
            # the rate-independent terms: charged as measured (sim/loadgen.py),
            # none below 0
            "loadgen_background_us_per_s": round(max(0.0, float(coef[2])), 1),
            "loadgen_background_worker_us_per_s": round(max(0.0, float(coef[3])), 3),
            "uncertainty": {"loadgen_dispatch_us": float(f"{sigma[0]:.3g}"),
                            "loadgen_worker_us": float(f"{sigma[1]:.3g}"),
                            "loadgen_sample_us": float(f"{s_sigma[0]:.3g}"),
                            "loadgen_sample_cgroup_us": float(f"{s_sigma[1]:.3g}"),
                            "loadgen_background_us_per_s": float(f"{sigma[2]:.3g}"),
                            "loadgen_background_worker_us_per_s": float(f"{sigma[3]:.3g}")},
            "measured": {"residual_us_per_s": round(float(np.sqrt(resid @ resid / max(
                             1, len(y) - len(coef)))), 1),
                         "sample_residual_mad_us": round(mad, 1),
                         "switch_ins_per_dispatch": round(float(per_dispatch_sw), 3),
                         "runs": len(rows), "runs_disturbed": table.num_rows - len(rows)}}


def _lstsq(x: np.ndarray, y: np.ndarray):
    """Least-squares coefficients of y on the columns of x, their 1-sigma
    (from the residual scatter) and the residuals."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ coef
    dof = max(1, len(y) - x.shape[1])
    cov = np.linalg.pinv(x.T @ x) * float(resid @ resid) / dof
    return coef, np.sqrt(np.diag(cov)), resid


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
