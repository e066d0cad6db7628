"""rt-app's busy loop on this host -> rtapp_loop.parquet.

rt-app's ``run`` event burns CPU in a loop it calibrated: loadwait(us) runs
us x 1000 / pLoad iterations of a fixed busy loop, pLoad being the ns per
iteration rt-app measured at start-up on the file's ``calibration`` CPU
(the real backend runs that calibration just before the run:
backends/real/rtapp.py ``calibrate``), or the file's own number.  A ``run``
of X us therefore costs X us of CPU only if pLoad is what one iteration
really costs.  rt-app 1.0 keeps pLoad in whole ns and takes the fastest of
its calibration trials; on this VM (18.5-22.2 ns an iteration) it came
out 15-20 ns from one invocation to the next, so a ``run`` of 10 ms took
10.5-14.8 ms of CPU (2026-11-26).

Per repetition (``REPEATS``; the calibration's CPU and the loop's each go
round the online CPUs, the loop's every other repetition, so that every
pair is measured: on this VM one vCPU can run the loop 10 % slower than
the other for minutes) the benchmark (1) runs rt-app's calibration as the
real backend does; (2) runs one rt-app thread alone on the loop's CPU,
the other CPUs idle, with that pLoad, ``run`` RUN_US then ``sleep``
SLEEP_US, for ``SECONDS``, in its own cgroup, and reads its log: per loop
the iterations (``perf``) and the wall time of the run event, which alone
on a CPU is its CPU time; and the host's steal and other load meanwhile
(calibration/bench/common.py ``disturbance``).

Columns: rep, cal_cpu, cpu (the loop's), pload_ns, loops, run_us,
c_duration_us (one row per logged loop), steal_frac, other_frac,
host_disturbed (per repetition).
:func:`rtapp_params` turns it into the profile's ``rtapp_loop_ns`` and
``rtapp_calibration_ns`` (sim/workloads/rtapp.py).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from backends.real.disturbance import host_times
from backends.real.jobs import spawn_in_cgroup, stop_session
from backends.real.rtapp import calibrate, parse_log, rtapp_binary
from backends.real.runner import RealRunError
from calibration.bench import common
from calibration.bench.common import BenchUnavailable, Progress, disturbance

NAME = "rtapp_loop"
ROOT = "rtapp_loop"
RUN_US, SLEEP_US = 10_000, 10_000
SECONDS, SECONDS_QUICK = 3, 2
REPEATS, REPEATS_QUICK = 8, 2
# a loop shorter than this share of its asked run (rt-app's shutdown cuts
# the last one) is not a whole loop
WHOLE = 0.5

SCHEMA = pa.schema([("rep", pa.int64()), ("cal_cpu", pa.int64()), ("cpu", pa.int64()),
                    ("pload_ns", pa.int64()),
                    ("loops", pa.int64()), ("run_us", pa.int64()),
                    ("c_duration_us", pa.int64()), ("steal_frac", pa.float64()),
                    ("other_frac", pa.float64()), ("host_disturbed", pa.bool_())])


def loop_doc(cpu: int, pload_ns: int, seconds: int, logdir: str) -> dict:
    """One thread alone on ``cpu``: run, sleep, with rt-app told ``pload_ns``."""
    return {"tasks": {"loop": {"cpus": [cpu], "run": RUN_US, "sleep": SLEEP_US}},
            "global": {"duration": seconds, "calibration": pload_ns,
                       "default_policy": "SCHED_OTHER", "logdir": logdir,
                       "log_basename": NAME}}


def measure(cg, binary: str, cpu: int, pload_ns: int, seconds: int) -> tuple[list, dict]:
    """The loops of one run of the thread, and the host's disturbance meanwhile."""
    with tempfile.TemporaryDirectory(prefix="colosim-rtapp-loop-") as d:
        f = Path(d) / "loop.json"
        f.write_text(json.dumps(loop_doc(cpu, pload_ns, seconds, d)))
        h0, u0 = host_times(), cg.usage_ns(ROOT)
        proc = spawn_in_cgroup([binary, str(f)], cg.procs_files(ROOT), {cpu})
        try:
            _, err = proc.communicate(timeout=seconds + 60)
        finally:
            stop_session(proc)
        h1, u1 = host_times(), cg.usage_ns(ROOT)
        log = Path(d) / f"{NAME}-loop-0.log"
        if proc.returncode != 0 or not log.exists():
            raise BenchUnavailable(f"{NAME}: rt-app failed (exit {proc.returncode}): "
                                   f"{err.decode(errors='replace').strip()[-300:]}")
        # parse_log's columns: idx perf run period start end rel_st slack c_duration ...
        loops = [(r[1], r[2], r[8]) for r in parse_log(log.read_text(), str(log))]
    return loops, disturbance(h0, h1, u1 - u0)


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    try:
        binary = rtapp_binary()
    except RealRunError as e:
        raise BenchUnavailable(f"{NAME}: {e}") from None
    cpus = sorted(os.sched_getaffinity(0))
    seconds = SECONDS_QUICK if quick else SECONDS
    repeats = REPEATS_QUICK if quick else REPEATS
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_cgroups(NAME) as cg:
        cg.create(ROOT)
        for rep in range(repeats):
            cal_cpu = cpus[rep % len(cpus)]
            cpu = cpus[rep // len(cpus) % len(cpus)]
            cg.set_cpuset(ROOT, str(cpu))
            common.say(progress, f"{NAME} rep {rep + 1}/{repeats}: rt-app's calibration on "
                                 f"CPU{cal_cpu}, the loop on CPU{cpu} "
                                 f"({time.monotonic() - t0:.0f} s)")
            try:
                pload = calibrate(binary, cal_cpu)
            except RealRunError as e:
                raise BenchUnavailable(f"{NAME}: {e}") from None
            loops, dist = measure(cg, binary, cpu, pload, seconds)
            rows += [{"rep": rep, "cal_cpu": cal_cpu, "cpu": cpu, "pload_ns": pload, "loops": n,
                      "run_us": r, "c_duration_us": c, **dist} for n, r, c in loops]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"run_us": RUN_US, "sleep_us": SLEEP_US, "seconds": seconds, "repeats": repeats}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


def rtapp_params(table: pa.Table) -> dict | None:
    """The profile's ``rtapp_*`` keys from the undisturbed repetitions:
    ``rtapp_loop_ns``, the CPU time of one iteration (per repetition its
    whole loops' run time over their iterations: the mean, as CPU is spent;
    one iteration's speed moves by 10-20 % within a run on this VM; then
    the median over repetitions), and ``rtapp_calibration_ns``, the median pLoad rt-app's own
    calibration gave; their spread under ``uncertainty`` and the pLoad
    range under ``measured``.  None without two undisturbed repetitions."""
    df = table.to_pandas()
    df = df[~df.host_disturbed & (df.loops > 0) & (df.run_us >= WHOLE * df.c_duration_us)]
    if df.rep.nunique() < 2:
        return None
    per_rep = df.groupby("rep").agg(run_us=("run_us", "sum"), loops=("loops", "sum"),
                                    pload_ns=("pload_ns", "first"))
    loop_ns = (per_rep.run_us * 1e3 / per_rep.loops).to_numpy(float)
    pload = per_rep.pload_ns.to_numpy(float)

    def mad(x):
        return float(f"{1.4826 * np.median(np.abs(x - np.median(x))):.3g}")
    return {"rtapp_loop_ns": round(float(np.median(loop_ns)), 3),
            "rtapp_calibration_ns": int(np.quantile(pload, 0.5, method="lower")),
            "uncertainty": {"rtapp_loop_ns": mad(loop_ns), "rtapp_calibration_ns": mad(pload)},
            "measured": {"pload_ns": sorted(int(p) for p in pload),
                         "loop_ns_range": [round(float(loop_ns.min()), 3),
                                           round(float(loop_ns.max()), 3)],
                         "repeats": int(len(per_rep)),
                         "repeats_disturbed": int(table.to_pandas().query(
                             "host_disturbed").rep.nunique())}}


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
