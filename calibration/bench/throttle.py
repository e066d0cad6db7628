"""CFS bandwidth control over a grid of quota/period -> throttle.parquet.

One cgroup throttle/t<threads> holds one hog process (native/hog.c) with 1
or 2 spinning threads; its cpuset is the highest-numbered CPU for 1 thread
and every CPU for 2.  Its weight is the highest (v1 cpu.shares 102400, v2
cpu.weight 10000) so that on a shared host the quota, not the competition,
limits it.  quota/period (ms): 10/100, 20/100, 50/100, 5/10, 50/500, 150/100
(quick: 20/100, 5/10, 150/100).  After a warm-up of one period + 0.1 s,
the run (full 2 s, quick 1 s) is cut into samples of max(0.5 s, one period);
each row is the deltas over one sample of CLOCK_MONOTONIC, cpuacct usage and
the cgroup's cpu.stat (v1 throttled_time in ns, v2 throttled_usec * 1000).

Columns: threads, quota_us, period_us, elapsed_ns, usage_ns, nr_periods,
nr_throttled, throttled_time_ns (one row per sample).
"""
from __future__ import annotations

import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import Progress

NAME = "throttle"
ROOT = "throttle"
GRID = ((10_000, 100_000), (20_000, 100_000), (50_000, 100_000), (5_000, 10_000),
        (50_000, 500_000), (150_000, 100_000))
GRID_QUICK = ((20_000, 100_000), (5_000, 10_000), (150_000, 100_000))
THREADS = (1, 2)
DURATION_S, DURATION_S_QUICK = 2.0, 1.0
MIN_SAMPLE_S = 0.5
MAX_WEIGHT = 10000

SCHEMA = pa.schema([
    ("threads", pa.int64()), ("quota_us", pa.int64()), ("period_us", pa.int64()),
    ("elapsed_ns", pa.int64()), ("usage_ns", pa.int64()), ("nr_periods", pa.int64()),
    ("nr_throttled", pa.int64()), ("throttled_time_ns", pa.int64()),
])


def throttled_time_ns(kv: dict[str, int]) -> int:
    """cpu.stat's throttled time in ns (v1 throttled_time ns, v2 throttled_usec)."""
    if "throttled_usec" in kv:
        return kv["throttled_usec"] * 1000
    return kv.get("throttled_time", 0)


def _read(cg, path: str) -> tuple[int, int, dict[str, int]]:
    return time.monotonic_ns(), cg.usage_ns(path), cg.cpu_stat_raw(path)


def measure(cg, threads: int, quota_us: int, period_us: int, duration_s: float,
            cpus: str) -> list[dict]:
    path = f"{ROOT}/t{threads}"
    cg.create(path)
    cg.set_weight(path, MAX_WEIGHT)
    cg.set_cpuset(path, cpus)
    cg.set_cpu_max(path, quota_us, period_us)
    sample_s = max(MIN_SAMPLE_S, period_us / 1e6)
    n = max(1, round(duration_s / sample_s))
    rows = []
    with common.hogs(cg, [path], None, threads=threads, max_seconds=duration_s + 30):
        time.sleep(period_us / 1e6 + 0.1)
        prev = _read(cg, path)
        for _ in range(n):
            time.sleep(sample_s)
            cur = _read(cg, path)
            stat, before = cur[2], prev[2]
            rows.append({"threads": threads, "quota_us": quota_us, "period_us": period_us,
                         "elapsed_ns": cur[0] - prev[0], "usage_ns": cur[1] - prev[1],
                         "nr_periods": stat.get("nr_periods", 0) - before.get("nr_periods", 0),
                         "nr_throttled": (stat.get("nr_throttled", 0)
                                          - before.get("nr_throttled", 0)),
                         "throttled_time_ns": throttled_time_ns(stat) - throttled_time_ns(before)})
            prev = cur
    cg.set_cpu_max(path, None, period_us)
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None, *,
        only: list[tuple[int, int, int]] | None = None,
        duration_s: float | None = None) -> pa.Table:
    """Run the grid (``only``: (threads, quota_us, period_us) triples instead,
    for tests) and write throttle.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("hog")
    cpu = common.bench_cpu()
    all_cpus = ",".join(str(c) for c in sorted(common.all_cpus()))
    todo = list(only) if only is not None else [
        (t, q, p) for q, p in (GRID_QUICK if quick else GRID) for t in THREADS]
    duration_s = duration_s or (DURATION_S_QUICK if quick else DURATION_S)
    rows: list[dict] = []
    t0 = time.monotonic()
    with common.bench_session(NAME, ROOT) as cg:
        for i, (threads, q, p) in enumerate(todo, 1):
            common.say(progress, f"{NAME} [{i}/{len(todo)}] threads={threads} quota={q} "
                                 f"period={p} ({time.monotonic() - t0:.0f} s)")
            rows += measure(cg, threads, q, p, duration_s,
                            str(cpu) if threads == 1 else all_cpus)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"configs": [list(c) for c in todo], "duration_s": duration_s,
              "min_sample_s": MIN_SAMPLE_S, "weight": MAX_WEIGHT}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu,
                         all_cpus=all_cpus, config_hz=common.config_hz())


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
