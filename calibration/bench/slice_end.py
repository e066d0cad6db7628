"""When a running fair task's slice ends -> slice_end.parquet.

Two CPU spinners share the benchmarks' CPU in one cgroup at the default
weight; each records the lengths of its runs (the spans between two gaps
in its own clock readings longer than ``GAP_NS``: the times it was switched
out).  They spin in one of two ways:

- ``cputime``: reading their own CPU clock, clock_gettime
  (CLOCK_THREAD_CPUTIME_ID), as the real backend's native workers burn a
  request's demand (backends/workers/funcworker.c ``spin_cpu``).  That is a
  system call: task_sched_runtime() runs update_curr_fair(), and under
  EEVDF update_curr() reschedules the task once its slice is used up;
- ``vdso``: reading CLOCK_MONOTONIC, which the vDSO answers without
  entering the kernel, so nothing updates curr's accounting between ticks
  and the slice ends at the tick that finds it used up.

What it shows on this host (HZ 250, EEVDF, base slice 0.7 ms x (1 +
log2 2 CPUs) = 1.4 ms): ``cputime`` runs last the base slice, ``vdso``
runs a tick (4 ms).  The simulator's ``workload.cputime_poll``
(sim/machine.py ``_arm_hrtick``) models the first; tests/test_slice_end.py
holds it to this measurement.

Columns: mode, repeat, run_ns (one row per completed run of either spinner).
"""
from __future__ import annotations

import subprocess
import sys
import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import Progress

NAME = "slice_end"
ROOT = "slice_end"
MODES = ("cputime", "vdso")
GAP_NS = 50_000          # a gap this long in a spinner's readings: it was switched out
DURATION_S, DURATION_S_QUICK = 2.0, 0.5
REPEAT = 3
SCHEMA = pa.schema([("mode", pa.string()), ("repeat", pa.int64()), ("run_ns", pa.int64())])

# One spinner: waits for a line on stdin, spins for the duration reading
# the wall clock (to find its gaps) and, in mode cputime, its CPU clock
# between, then prints the lengths of its complete runs.
SPINNER = r"""
import sys, time
mode, duration_ns, gap_ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mono = time.monotonic_ns
poll = time.thread_time_ns if mode == "cputime" else mono
sys.stdin.readline()
runs, start = [], None
end = mono() + duration_ns
last = mono()
while last < end:
    poll()
    now = mono()
    if now - last > gap_ns:
        if start is not None:
            runs.append(last - start)
        start = now
    last = now
print(" ".join(map(str, runs)))
"""


def measure(cg, cpu: int, mode: str, repeat: int, duration_s: float) -> list[dict]:
    group = f"{ROOT}/g"
    cg.create(group)
    cg.set_cpuset(group, str(cpu))
    procs = []
    try:
        for _ in range(2):
            p = subprocess.Popen([sys.executable, "-c", SPINNER, mode,
                                  str(int(duration_s * 1e9)), str(GAP_NS)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            cg.attach(group, p.pid)
            procs.append(p)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=duration_s + 30)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return [{"mode": mode, "repeat": repeat, "run_ns": int(x)}
            for out in outs for x in out.split()]


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """Both modes ``REPEAT`` times, interleaved; writes slice_end.parquet."""
    started = common.utc_now()
    common.check_host()
    cpu = common.bench_cpu()
    duration = DURATION_S_QUICK if quick else DURATION_S
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(REPEAT):
            for mode in MODES:
                common.say(progress, f"{NAME} [{r + 1}/{REPEAT}] {mode} "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += measure(cg, cpu, mode, r, duration)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"modes": list(MODES), "repeat": REPEAT, "duration_s": duration, "gap_ns": GAP_NS}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu, config_hz=common.config_hz())


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
