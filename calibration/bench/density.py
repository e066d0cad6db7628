"""Switch rate and useful work vs density -> density.parquet.

N CPU hogs (native/hog.c), each in its own cgroup density/hog<i> at the
default (equal) weight, all pinned to the highest-numbered CPU, for N in 1, 2,
4, 8, 16, 32, 64 (quick 1, 4, 16) and hog working sets of 0, 1 MiB and 4 MiB
(quick 0), the whole ladder three times (quick once). A hog iteration is a
fixed chain of 256 dependent multiply-adds plus 16 read-modify-writes
continuing cyclically through its working set; each hog publishes its
iteration count in a shared memory slot the driver reads without disturbing
it.

Useful work = iterations * ns_per_iteration_alone, the CPU time an iteration
takes when one hog (same working set) runs alone on the CPU: its cpuacct usage
/ iterations over 0.5 s after a short warm-up. This vCPU's speed moves by
several percent within minutes (rt-app's loop: 18.4-22.2 ns an iteration
within one hour), as much as the effect measured, so the lone hog runs before
the first N and after every N of a working set, and each sample's reference is
the mean of the two runs bracketing it; alone_drift = after / before - 1 says
how far the speed moved meanwhile (DRIFT_LIMIT: beyond it the sample's useful
work is not trusted). For each N: warm-up (0.5 s, 1 s full), then `perf stat
-I 100 -e context-switches,cpu-migrations -G <each hog cgroup>`
(backends/real/perf.PerfStat) and one sample of T seconds (full 2 s, quick 1.5
s): iterations, cpuacct.usage of every hog cgroup and CLOCK_MONOTONIC at both
ends. The perf counts are the sum of the 100 ms intervals whose midpoint lies
in the sample (perf_window_ns says how long that is); they are null when perf
is unavailable (meta perf_status says why), never 0 for missing.

Columns (one row per hog, N and repetition): repeat, n_hogs, hog_ws_bytes,
cgroup, iterations, elapsed_ns, cpu_usage_ns, context_switches,
cpu_migrations, perf_window_ns, ns_per_iteration_alone, alone_drift. Meta:
config_hz (CONFIG_HZ, null when the kernel config is not readable), the CPU,
durations.
"""
from __future__ import annotations

import mmap
import os
import struct
import time

import pyarrow as pa

from backends.real.perf import PerfStat, PerfUnavailable, perf_binary
from calibration.bench import common
from calibration.bench.common import Progress

NAME = "density"
ROOT = "density"
N_HOGS = (1, 2, 4, 8, 16, 32, 64)
N_HOGS_QUICK = (1, 4, 16)
WS = (0, 1 << 20, 4 << 20)
WS_QUICK = (0,)
REPEATS, REPEATS_QUICK = 3, 1
# A sample whose bracketing lone-hog runs differ by more than this is not
# compared: the useful-work loss it is there to show is 0-2 % here
# (docs/microbenchmarks.md, density).
DRIFT_LIMIT = 0.02
SAMPLE_S, SAMPLE_S_QUICK = 2.0, 1.5
WARMUP_S, WARMUP_S_QUICK = 1.0, 0.5
ALONE_S, ALONE_S_QUICK = 0.5, 0.5
PERF_INTERVAL_MS = 100
SLOT = 64   # one cache line per hog counter (hog.c)

SCHEMA = pa.schema([
    ("repeat", pa.int64()), ("n_hogs", pa.int64()), ("hog_ws_bytes", pa.int64()), ("cgroup", pa.string()),
    ("iterations", pa.int64()), ("elapsed_ns", pa.int64()), ("cpu_usage_ns", pa.int64()),
    ("context_switches", pa.int64()), ("cpu_migrations", pa.int64()),
    ("perf_window_ns", pa.int64()), ("ns_per_iteration_alone", pa.float64()),
    ("alone_drift", pa.float64()),
])


class Counters:
    """The hogs' iteration counters: a memfd the hogs map shared."""

    def __init__(self, slots: int):
        self.fd = os.memfd_create("colosim-bench-counters")
        os.ftruncate(self.fd, slots * SLOT)
        self.map = mmap.mmap(self.fd, slots * SLOT)

    def read(self, n: int) -> list[int]:
        return [struct.unpack_from("=Q", self.map, i * SLOT)[0] for i in range(n)]

    def zero(self) -> None:
        self.map[:] = bytes(len(self.map))

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


def _snapshot(cg, counters: Counters, paths: list[str]) -> tuple[int, list[int], list[int]]:
    t = time.monotonic_ns()
    its = counters.read(len(paths))
    usage = [cg.usage_ns(p) for p in paths]
    return t, its, usage


def alone(cg, counters: Counters, cpu: int, ws: int, warmup_s: float, sample_s: float) -> float:
    """ns of CPU per iteration of one hog alone on ``cpu``."""
    path = f"{ROOT}/alone"
    counters.zero()
    with common.hogs(cg, [path], cpu, ws_bytes=ws, counter_fd=counters.fd):
        time.sleep(warmup_s)
        _, i0, u0 = _snapshot(cg, counters, [path])
        time.sleep(sample_s)
        _, i1, u1 = _snapshot(cg, counters, [path])
    if i1[0] <= i0[0]:
        raise RuntimeError("the lone hog made no progress")
    return (u1[0] - u0[0]) / (i1[0] - i0[0])


def perf_status() -> str:
    try:
        perf_binary()
    except PerfUnavailable as e:
        return f"unavailable: {e}"
    return "ok"


def measure(cg, counters: Counters, cpu: int, n: int, ws: int, warmup_s: float,
            sample_s: float, use_perf: bool) -> tuple[list[dict], str]:
    paths = [f"{ROOT}/hog{i}" for i in range(n)]
    counters.zero()
    status = "ok" if use_perf else "off"
    with common.hogs(cg, paths, cpu, ws_bytes=ws, counter_fd=counters.fd):
        time.sleep(warmup_s)
        perf, perf_t0 = None, 0
        if use_perf:
            perf = PerfStat({cg.perf_name(p): p for p in paths},
                            events=("context-switches", "cpu-migrations"),
                            interval_ms=PERF_INTERVAL_MS)
            perf_t0 = time.monotonic_ns()
            perf.start()
            time.sleep(0.2)
        t0, i0, u0 = _snapshot(cg, counters, paths)
        time.sleep(sample_s)
        t1, i1, u1 = _snapshot(cg, counters, paths)
        samples = []
        if perf is not None:
            time.sleep(PERF_INTERVAL_MS / 1000 * 1.5)
            try:
                samples = perf.stop()
            except PerfUnavailable as e:
                status = f"unavailable: {e}"
    half = PERF_INTERVAL_MS * 500_000
    counts: dict[tuple[str, str], int] = {}
    intervals: set[float] = set()
    for s in samples:
        mid = perf_t0 + int(s.time_s * 1e9) - half
        if t0 <= mid <= t1:
            intervals.add(s.time_s)
            if s.value is not None:
                counts[(s.cgroup, s.event)] = counts.get((s.cgroup, s.event), 0) + int(s.value)
    have_perf = status == "ok" and intervals
    rows = []
    for k, p in enumerate(paths):
        rows.append({
            "n_hogs": n, "hog_ws_bytes": ws, "cgroup": p, "iterations": i1[k] - i0[k],
            "elapsed_ns": t1 - t0, "cpu_usage_ns": u1[k] - u0[k],
            # a cgroup whose events never counted in the window has no value
            "context_switches": counts.get((p, "context-switches")) if have_perf else None,
            "cpu_migrations": counts.get((p, "cpu-migrations")) if have_perf else None,
            "perf_window_ns": len(intervals) * PERF_INTERVAL_MS * 1_000_000
            if have_perf else None,
        })
    return rows, status


def run(out_dir, quick: bool = False, progress: Progress = None, *,
        n_hogs: tuple[int, ...] | None = None, ws_list: tuple[int, ...] | None = None,
        sample_s: float | None = None, repeats: int | None = None) -> pa.Table:
    """Run the sweep (keywords narrow it, for tests) and write density.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("hog")
    cpu = common.bench_cpu()
    ns = n_hogs or (N_HOGS_QUICK if quick else N_HOGS)
    wss = ws_list if ws_list is not None else (WS_QUICK if quick else WS)
    sample_s = sample_s or (SAMPLE_S_QUICK if quick else SAMPLE_S)
    warmup_s = WARMUP_S_QUICK if quick else WARMUP_S
    alone_s = ALONE_S_QUICK if quick else ALONE_S
    repeats = repeats or (REPEATS_QUICK if quick else REPEATS)
    pstatus = perf_status()
    use_perf = pstatus == "ok"
    rows: list[dict] = []
    t_start = time.monotonic()
    counters = Counters(max(ns))
    try:
        with common.bench_session(NAME, ROOT) as cg:
            for rep in range(repeats):
                for ws in wss:
                    before = alone(cg, counters, cpu, ws, warmup_s / 2, alone_s)
                    for n in ns:
                        common.say(progress, f"{NAME} repeat {rep + 1}/{repeats} n_hogs={n} "
                                             f"ws={ws} ({time.monotonic() - t_start:.0f} s)")
                        r, status = measure(cg, counters, cpu, n, ws, warmup_s, sample_s,
                                            use_perf)
                        if status != "ok" and pstatus == "ok":
                            pstatus = status
                        after = alone(cg, counters, cpu, ws, warmup_s / 2, alone_s)
                        for row in r:
                            row.update(repeat=rep, ns_per_iteration_alone=(before + after) / 2,
                                       alone_drift=after / before - 1)
                        rows += r
                        before = after
    finally:
        counters.close()
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"n_hogs": list(ns), "hog_ws_bytes": list(wss), "sample_s": sample_s,
              "warmup_s": warmup_s, "alone_s": alone_s, "repeats": repeats,
              "drift_limit": DRIFT_LIMIT, "perf_interval_ms": PERF_INTERVAL_MS,
              "hog_iteration": "256 dependent multiply-adds + 16 line read-modify-writes"}
    return common.finish(table, out_dir, NAME, params, quick, started, t_start, cpu=cpu,
                         config_hz=common.config_hz(), perf_status=pstatus,
                         caches=common.cache_sizes(cpu))


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
