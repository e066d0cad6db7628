"""The real backend's worker's own CPU per request -> dispatch.parquet.

backend=real runs each function as one native worker process
(backends/workers/funcworker.c): its main thread blocks reading requests
from a pipe and, for each, creates the request's threads, which spin the
request's CPU demand (timed by their own CPU clock) and exit.  Everything
else the worker's cgroup is charged for is the worker's own cost, which the
simulator models with ``workload.request_path=worker`` and the profile's
``worker_*`` keys: the main thread's CPU per request read
(``worker_dispatch_us``) and per thread it creates (``worker_thread_us``),
and each thread's CPU before its share began (``worker_thread_start_us``)
and after it ended (``worker_thread_exit_us``), all with warm caches; and
how much more they cost when the worker has been away from the CPU
(``worker_cold_factor`` for the main thread, ``worker_cold_thread_factor``
for the threads: the cost is warm x (1 + factor x (1 - exp(-away /
worker_cold_decay_ms)))).

On this VM that last part is most of the cost: the same request path
costs about 40 us of CPU when the worker ran 0.5 ms before, about 150 us
when it has been away 10 ms or more, whether the CPU was idle or ran a hog
meanwhile (measured 2026-11-26; what evicts it is the VM's, not the
guest's).  So the benchmark sends one worker, pinned to the benchmark CPU
in its own cgroup, requests of 20 us CPU with 1 and then 4 threads each,
``GAPS_S`` apart (the worker's time away), with the CPU otherwise idle and
then beside a hog with a 1 MiB working set in another cgroup, and reads
around each sample of ``REQUESTS`` requests: the main thread's CPU time
(``/proc/<pid>/task/<pid>/schedstat``) and voluntary switches, the
worker's cgroup CPU (``cpuacct.usage``), and from the worker's "D" lines
the threads' measured spin CPU and their start-up CPU.

Columns: hog, gap_s, threads_per_request, requests, main_cpu_ns, main_vcsw,
cgroup_cpu_ns, spin_cpu_ns, start_cpu_ns, late_requests (requests whose
first thread began a gap or more after the request was sent: the worker's
CPU was held up that long, by a stall /proc/stat's 10 ms steal ticks may
not show), steal_frac, other_frac, host_disturbed (the host's steal and
other load over the sample, against the real backend's bounds;
common.disturbance) (one row per sample; 3
samples per point, quick: 1 sample of fewer requests at three gaps, no
hog).
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from scipy.optimize import least_squares

from backends.real.disturbance import host_times
from backends.real.workers import Done, WorkerProc, parse_line, request_line
from calibration.bench import common
from calibration.bench.common import Progress

NAME = "dispatch"
ROOT = "dispatch"
THREADS = (1, 4)
GAPS_S = (0.0005, 0.001, 0.002, 0.005, 0.02)
GAPS_S_QUICK = (0.0005, 0.002, 0.02)
REQUESTS, REQUESTS_QUICK = 200, 60
DEMAND_NS = 20_000
SAMPLES, SAMPLES_QUICK = 3, 1
HOG_WS = 1 << 20
DRAIN_S = 0.05

SCHEMA = pa.schema([("hog", pa.bool_()), ("gap_s", pa.float64()),
                    ("threads_per_request", pa.int64()), ("requests", pa.int64()),
                    ("main_cpu_ns", pa.int64()), ("main_vcsw", pa.int64()),
                    ("cgroup_cpu_ns", pa.int64()), ("spin_cpu_ns", pa.int64()),
                    ("start_cpu_ns", pa.int64()), ("late_requests", pa.int64()),
                    ("steal_frac", pa.float64()),
                    ("other_frac", pa.float64()), ("host_disturbed", pa.bool_())])


def _main_thread(pid: int) -> tuple[int, int]:
    cpu = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    vcsw = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return cpu, vcsw


def _done(worker: WorkerProc) -> list[Done]:
    return [d for d in map(parse_line, worker.read_lines()) if isinstance(d, Done)]


def measure(worker: WorkerProc, usage, hog: bool, gap_s: float, threads: int,
            requests: int, req_id: int, bench_usage=None) -> dict:
    """One sample: ``requests`` requests ``gap_s`` apart; every one is
    answered before the counters are read again.  ``bench_usage``: the CPU
    time of the benchmark's cgroups, worker and hog (default: ``usage``),
    which is not a disturbance."""
    bench_usage = bench_usage or usage
    _done(worker)
    cpu0, vcsw0 = _main_thread(worker.pid)
    h0, u0, b0 = host_times(), usage(), bench_usage()
    done: list[Done] = []
    sent_ns: dict[int, int] = {}
    for i in range(requests):
        sent_ns[req_id + i] = time.monotonic_ns()
        worker.send(request_line(req_id + i, DEMAND_NS, threads))
        time.sleep(gap_s)
        done += _done(worker)
    deadline = time.monotonic() + 2.0
    while len(done) < requests and time.monotonic() < deadline:
        time.sleep(DRAIN_S)
        done += _done(worker)
    if len(done) < requests:
        raise common.BenchUnavailable(f"{NAME}: the worker answered {len(done)} of "
                                      f"{requests} requests within 2 s")
    cpu1, vcsw1 = _main_thread(worker.pid)
    h1, u1 = host_times(), usage()
    return {"hog": hog, "gap_s": gap_s, "threads_per_request": threads, "requests": requests,
            "main_cpu_ns": cpu1 - cpu0, "main_vcsw": vcsw1 - vcsw0,
            "cgroup_cpu_ns": u1 - u0, "spin_cpu_ns": sum(d.cpu_ns for d in done),
            "start_cpu_ns": sum(d.start_cpu_ns for d in done),
            "late_requests": sum(d.start_ns - sent_ns[d.id] >= gap_s * 1e9 for d in done),
            **common.disturbance(h0, h1, bench_usage() - b0)}


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    cpu = common.bench_cpu()
    samples = SAMPLES_QUICK if quick else SAMPLES
    gaps = GAPS_S_QUICK if quick else GAPS_S
    requests = REQUESTS_QUICK if quick else REQUESTS
    hogs = (False,) if quick else (False, True)
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.driver_pinned(), common.bench_cgroups(NAME) as cg, \
            common.worker_in_cgroup(cg, ROOT, cpu, NAME, 600) as (worker, usage):
        req_id = 0
        for hog in hogs:
            with contextlib.ExitStack() as stack:
                if hog:
                    stack.enter_context(common.hogs(cg, [f"{ROOT}-hog"], cpu, ws_bytes=HOG_WS))
                for _ in range(samples):
                    for gap in gaps:
                        for threads in THREADS:
                            common.say(progress, f"{NAME} hog={hog} gap={gap * 1e3:g} ms "
                                                 f"threads={threads} "
                                                 f"({time.monotonic() - t0:.0f} s)")
                            rows.append(measure(worker, usage, hog, gap, threads, requests,
                                                req_id, lambda: cg.usage_ns("")))
                            req_id += requests
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"requests": requests, "gaps_s": list(gaps), "demand_ns": DEMAND_NS,
              "samples": samples, "threads": list(THREADS), "hog_ws_bytes": HOG_WS}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu)


def _per_request(df):
    """Per row, in us: the main thread's CPU per request, and each thread's
    start-up and exit CPU (the cgroup's CPU less the main thread's and the
    spins', less the start-up)."""
    n = df.requests.to_numpy(float)
    k = df.threads_per_request.to_numpy(float)
    main = df.main_cpu_ns.to_numpy(float) / n / 1e3
    start = df.start_cpu_ns.to_numpy(float) / n / k / 1e3
    own = (df.cgroup_cpu_ns - df.main_cpu_ns - df.spin_cpu_ns).to_numpy(float) / n / k / 1e3
    return k, main, start, own - start


def dispatch_costs(table: pa.Table) -> dict:
    """The profile's ``worker_*`` keys from the benchmark's rows, by least
    squares on every undisturbed row (module docstring: warm costs, cold
    factors, one decay time), with their 1-sigma under ``uncertainty``.  A
    table of the first version (the main thread at one gap only) gives the
    two main thread costs; tables before the disturbance columns count as
    undisturbed."""
    df = table.to_pandas()
    if "host_disturbed" in df:
        df = df[~df.host_disturbed]
    if "gap_s" not in df:
        per_req: dict[int, list[float]] = {}
        for r in df.itertuples():
            per_req.setdefault(r.threads_per_request, []).append(r.main_cpu_ns / r.requests / 1e3)
        ks = sorted(per_req)
        meds = [float(np.median(per_req[k])) for k in ks]
        slope, intercept = np.polyfit(ks, meds, 1)
        thread = max(0.0, float(slope))
        return {"worker_dispatch_us": round(max(0.0, meds[0] - thread * ks[0]), 2),
                "worker_thread_us": round(thread, 2)}
    k, main, start, exit_ = _per_request(df)
    gap_ms = df.gap_s.to_numpy(float) * 1e3

    def model(p):
        a, b, s, e, fm, ft, tau = p
        cold = -np.expm1(-gap_ms / tau)
        return ((a + b * k) * (1 + fm * cold), s * (1 + ft * cold), e * (1 + ft * cold))

    def resid(p):
        m, st, ex = model(p)
        return np.concatenate([m - main, st - start, ex - exit_])

    fit = least_squares(resid, [20.0, 5.0, 5.0, 10.0, 2.0, 2.0, 3.0],
                        bounds=([0, 0, 0, 0, 0, 0, 0.05], [np.inf] * 6 + [1e3]))
    dof = max(1, fit.fun.size - fit.x.size)
    cov = np.linalg.pinv(fit.jac.T @ fit.jac) * (fit.fun @ fit.fun) / dof
    names = ("worker_dispatch_us", "worker_thread_us", "worker_thread_start_us",
             "worker_thread_exit_us", "worker_cold_factor", "worker_cold_thread_factor",
             "worker_cold_decay_ms")
    sigma = np.sqrt(np.clip(np.diag(cov), 0, None))
    out = {n: round(float(v), 3) for n, v in zip(names, fit.x)}
    out["uncertainty"] = {n: round(float(s), 3) for n, s in zip(names, sigma)}
    return out


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
