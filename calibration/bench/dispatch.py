"""The real backend's worker dispatch cost -> dispatch.parquet.

backend=real runs each function as one native worker process
(backends/workers/funcworker.c): its main thread blocks reading requests
from a pipe and, for each, creates the request's threads.  The simulator
models that thread with ``workload.request_path=worker`` and the profile's
``worker_dispatch_us`` and ``worker_thread_us``: the CPU it spends per
request it reads and per thread it creates.  This
benchmark measures it: one worker in its own cgroup on the benchmark CPU is
sent ``requests`` requests of 20 us CPU each (1, then 4 threads per
request), 0.5 ms apart, so each finds the worker idle; the main thread's
CPU time (``/proc/<pid>/task/<pid>/schedstat``, ns) and voluntary switches
are read before and after.

Columns: threads_per_request, requests, main_cpu_ns, main_vcsw (one row
per sample of ``requests`` requests; 5 samples, quick 2).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from backends.real.workers import WorkerProc, build_worker, request_line
from calibration.bench import common
from calibration.bench.common import Progress

NAME = "dispatch"
ROOT = "dispatch"
THREADS = (1, 4)
REQUESTS = 500
GAP_S = 0.0005
DEMAND_NS = 20_000
SAMPLES, SAMPLES_QUICK = 5, 2

SCHEMA = pa.schema([("threads_per_request", pa.int64()), ("requests", pa.int64()),
                    ("main_cpu_ns", pa.int64()), ("main_vcsw", pa.int64())])


def _main_thread(pid: int) -> tuple[int, int]:
    cpu = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    vcsw = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return cpu, vcsw


def measure(worker: WorkerProc, threads: int, samples: int, req_id: int) -> list[dict]:
    rows = []
    for _ in range(samples):
        cpu0, vcsw0 = _main_thread(worker.pid)
        for _ in range(REQUESTS):
            worker.send(request_line(req_id, DEMAND_NS, threads))
            req_id += 1
            time.sleep(GAP_S)
        time.sleep(0.05)
        worker.read_lines()
        cpu1, vcsw1 = _main_thread(worker.pid)
        rows.append({"threads_per_request": threads, "requests": REQUESTS,
                     "main_cpu_ns": cpu1 - cpu0, "main_vcsw": vcsw1 - vcsw0})
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    binary = build_worker()
    cpu = common.bench_cpu()
    samples = SAMPLES_QUICK if quick else SAMPLES
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.driver_pinned(), common.bench_cgroups(NAME) as cg:
        cg.create(ROOT)
        cg.set_cpuset(ROOT, str(cpu))
        worker = WorkerProc(binary, "dispatch", max_seconds=120, cpus={cpu})
        cg.attach(ROOT, worker.pid)
        try:
            req_id = 0
            for threads in THREADS:
                common.say(progress, f"{NAME} threads={threads} ({time.monotonic() - t0:.0f} s)")
                rows += measure(worker, threads, samples, req_id)
                req_id += samples * REQUESTS
        finally:
            worker.quit()
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"requests": REQUESTS, "gap_s": GAP_S, "demand_ns": DEMAND_NS,
              "samples": samples, "threads": list(THREADS)}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu)


def dispatch_costs(table: pa.Table) -> dict[str, float]:
    """The dispatcher's CPU per request (us) and per thread it creates, the
    line through the median CPU per request at each thread count."""
    per_req: dict[int, list[float]] = {}
    for r in table.to_pylist():
        per_req.setdefault(r["threads_per_request"], []).append(
            r["main_cpu_ns"] / r["requests"] / 1000)
    ks = sorted(per_req)
    meds = [float(np.median(per_req[k])) for k in ks]
    if len(ks) < 2:
        return {"worker_dispatch_us": 0.0, "worker_thread_us": meds[0] / ks[0]}
    slope, intercept = np.polyfit(ks, meds, 1)
    thread = max(0.0, float(slope))
    return {"worker_dispatch_us": round(max(0.0, meds[0] - thread * ks[0]), 2),
            "worker_thread_us": round(thread, 2)}


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
