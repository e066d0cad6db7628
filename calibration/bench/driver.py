"""The real backend's driving loop under self-timed workloads -> driver.parquet.

On backend=real a workload that times itself (``workload=periodic``,
``ebizzy``, ``rtapp``) dispatches nothing, but the colosim process still
runs its loop (backends/real/loadgen.py ``replay`` with no rows): a
SCHED_FIFO thread that wakes at least every 20 ms, reads the periodic
workers' pipes (one line per burst a thread ran), and samples the cgroups
and perf counters every ``interval_s``.  It preempts whatever runs on its
CPU, which a latency-sensitive thread beside hogs sees in its tail
(docs/host-validation.md).  loadgen.py measures the loop on the worker
path, where dispatches dominate; this benchmark measures it without them.

It runs the real backend itself (``run_real``) on light self-timed
workloads, ``REPEATS`` times: ``workload=periodic`` with ``g`` groups of
one thread each running 0.2 ms every ``sleep_ms`` (``PERIODIC``: workers
and burst rates apart), and rt-app's ``scenarios/rtapp/periodic.json``
where rt-app is installed (its threads log to files: nothing to read).
Each run gives the colosim process's CPU over the window after warm-up
(the summary's ``colosim_cpu_frac``, as validate compares it) and the
bursts the workers reported in it; the sampler's reads are timed by the
run itself (``sampler_read_us``, one read per ``interval_s``).

Columns (one row per run): rep, kind (periodic | rtapp), workers (periodic
worker processes the loop reads; 0 for rt-app), sleep_ms, bursts_per_s,
colosim_us_per_s, sampler_read_us, sampler_reads_per_s, host_disturbed.
"""
from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pyarrow as pa

from backends.real.rtapp import BINARY as RTAPP_BINARY
from backends.real.run import run_real
from calibration.bench import common
from calibration.bench.common import Progress
from scenarios.config import compose

NAME = "driver"
# (groups, sleep_ms): 1 and 8 workers at ~50 and ~400 bursts/s, 32 at ~50/s
PERIODIC = ((1, 20.0), (1, 2.0), (8, 160.0), (8, 20.0), (32, 640.0))
PERIODIC_QUICK = ((1, 20.0), (8, 20.0), (32, 640.0))
RUN_MS = 0.2
RTAPP_FILE = "scenarios/rtapp/periodic.json"
REPEATS, REPEATS_QUICK = 3, 1
DURATION_S, DURATION_S_QUICK = 6.0, 3.0
WARMUP_S = 1.0
SCHEMA = pa.schema([("rep", pa.int64()), ("kind", pa.string()), ("workers", pa.int64()),
                    ("sleep_ms", pa.float64()), ("bursts_per_s", pa.float64()),
                    ("colosim_us_per_s", pa.float64()), ("sampler_read_us", pa.float64()),
                    ("sampler_reads_per_s", pa.float64()), ("host_disturbed", pa.bool_())])


def _groups(n: int, sleep_ms: float) -> str:
    return "workload.groups=[" + ",".join(
        f"{{name:g{i},threads:1,run_ms:{RUN_MS},sleep_ms:{sleep_ms}}}" for i in range(n)) + "]"


def one_run(kind: str, groups: int, sleep_ms: float, duration_s: float, seed: int) -> dict:
    workload = (["workload=rtapp", f"workload.file={RTAPP_FILE}"] if kind == "rtapp"
                else ["workload=periodic", "workload.working_set_kb=0", _groups(groups, sleep_ms)])
    cfg = compose(["host=this-vm", "scheduler=eevdf", "backend=real", *workload,
                   f"duration_s={duration_s}", f"warmup_s={WARMUP_S}", f"seed={seed}",
                   "backend.lateness_action=flag"])
    s = run_real(cfg, run_name=f"bench-driver-{kind}").summary.to_pylist()[0]
    window_s = duration_s - WARMUP_S
    return {"kind": kind, "workers": groups, "sleep_ms": sleep_ms,
            "bursts_per_s": (float(s.get("n_requests") or 0) / window_s
                             if kind == "periodic" else 0.0),
            # over the host's CPU time, all its CPUs' (backends/real/disturbance.py)
            "colosim_us_per_s": float(s["colosim_cpu_frac"]) * (os.cpu_count() or 1) * 1e6,
            "sampler_read_us": float(s["sampler_read_us"]),
            "sampler_reads_per_s": 1.0 / float(cfg.interval_s),
            "host_disturbed": bool(s.get("host_disturbed", False))}


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    cases = [("periodic", g, s) for g, s in (PERIODIC_QUICK if quick else PERIODIC)]
    rtapp = shutil.which(RTAPP_BINARY) is not None
    if rtapp:
        cases.append(("rtapp", 0, 0.0))
    else:
        common.say(progress, f"{NAME}: rt-app is not installed; its loop is not measured")
    repeats = REPEATS_QUICK if quick else REPEATS
    duration = DURATION_S_QUICK if quick else DURATION_S
    rows = []
    t0 = time.monotonic()
    for rep in range(repeats):
        for kind, g, sleep_ms in cases:
            common.say(progress, f"{NAME} rep {rep + 1}/{repeats} {kind} workers={g} "
                                 f"sleep={sleep_ms:g} ms ({time.monotonic() - t0:.0f} s)")
            rows.append({"rep": rep, **one_run(kind, g, sleep_ms, duration, seed=rep)})
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"periodic": [list(c) for c in (PERIODIC_QUICK if quick else PERIODIC)],
              "run_ms": RUN_MS, "rtapp_file": RTAPP_FILE if rtapp else None,
              "repeats": repeats, "duration_s": duration, "warmup_s": WARMUP_S}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


def driver_costs(table: pa.Table) -> dict | None:
    """The loop's CPU without dispatches, less its sampler's reads: per
    second for the periodic runner (``loadgen_periodic_us_per_s``) and per
    worker it reads (``loadgen_periodic_worker_us_per_s``), per burst line
    (``loadgen_burst_us``), by least squares over the undisturbed periodic
    points, each the median of its repetitions (about one run in ten here
    costs twice the others, whatever the point: a median of three keeps it
    out); and per second for rt-app's (``loadgen_rtapp_us_per_s``, the
    median of its runs, where measured).  Also the 1-sigma of each and, in
    ``measured``, the residual scatter of the points and the runs used.
    None when fewer than 4 periodic points, or points of one worker count
    only, are left."""
    rows = [r for r in table.to_pylist() if not r["host_disturbed"]]

    def net(r):
        return r["colosim_us_per_s"] - r["sampler_read_us"] * r["sampler_reads_per_s"]
    points: dict = {}
    for r in rows:
        if r["kind"] == "periodic":
            points.setdefault((r["workers"], r["sleep_ms"]), []).append(
                (net(r), r["bursts_per_s"]))
    if len(points) < 4 or len({w for w, _ in points}) < 2:
        return None
    keys = sorted(points)
    y = np.array([np.median([v for v, _ in points[k]]) for k in keys])
    x = np.column_stack([np.ones(len(keys)), [float(w) for w, _ in keys],
                         [np.median([b for _, b in points[k]]) for k in keys]])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ coef
    dof = max(1, len(y) - x.shape[1])
    sigma = np.sqrt(np.diag(np.linalg.pinv(x.T @ x) * float(resid @ resid) / dof))
    out = {"loadgen_periodic_us_per_s": round(max(0.0, float(coef[0])), 1),
           "loadgen_periodic_worker_us_per_s": round(max(0.0, float(coef[1])), 3),
           "loadgen_burst_us": round(max(0.0, float(coef[2])), 2),
           "uncertainty": {"loadgen_periodic_us_per_s": float(f"{sigma[0]:.3g}"),
                           "loadgen_periodic_worker_us_per_s": float(f"{sigma[1]:.3g}"),
                           "loadgen_burst_us": float(f"{sigma[2]:.3g}")},
           "measured": {"residual_us_per_s": round(float(np.sqrt(resid @ resid / dof)), 1),
                        "runs": len(rows), "runs_disturbed": table.num_rows - len(rows)}}
    rt = [net(r) for r in rows if r["kind"] == "rtapp"]
    if rt:
        out["loadgen_rtapp_us_per_s"] = round(float(np.median(rt)), 1)
        # the spread of its runs (1.4826 x their median absolute deviation)
        out["uncertainty"]["loadgen_rtapp_us_per_s"] = float(
            f"{1.4826 * np.median(np.abs(np.array(rt) - np.median(rt))):.3g}")
    return out


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
