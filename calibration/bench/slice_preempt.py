"""Wake-up latency of a short-slice sleeper among hogs -> slice_preempt.parquet.

The EEVDF probe for slice protection and PREEMPT_SHORT (Linux 6.12 on): a
thread (native/wakeup.c) sleeps to deadlines 10 ms apart (clock_nanosleep
TIMER_ABSTIME, timer slack 1 ns) on the benchmarks' CPU beside ``hogs`` CPU
hogs, all three in one cgroup at the default weight, and records its
lateness.  The sleeper either keeps the base slice (``slice_ns`` 0) or asks
for a 0.1 ms one with sched_setattr(SCHED_NORMAL, sched_runtime), 857b158dc5e8
"sched/eevdf: Use sched_attr::sched_runtime to set request/slice suggestion".

What it shows: a waking task with the base slice finds the running hog's
slice protected (RUN_TO_PARITY) and waits for the tick that ends it, while a
shorter slice cancels the protection (PREEMPT_SHORT) and runs at once.  The
10 ms period is not a multiple of the 4 ms tick, so the wake-ups sample every
phase of the hog's slice.  Each configuration runs ``REPEAT`` times so the
tests can bound the simulator by the measured spread.

Columns: hogs, slice_ns, repeat, lateness_ns (one row per wake-up).
"""
from __future__ import annotations

import ctypes
import os
import struct
import time

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import Progress
from calibration.bench.wakeup import sleeper_lateness

NAME = "slice_preempt"
ROOT = "slice"
PERIOD_NS = 10_000_000
SHORT_SLICE_NS = 100_000          # the smallest request __setparam_fair() accepts
CONFIGS = [(1, 0), (1, SHORT_SLICE_NS), (2, 0), (2, SHORT_SLICE_NS)]
REPEAT = 3
COUNT, COUNT_QUICK = 300, 100
SKIP = 20
SYS_SCHED_SETATTR = 314           # x86_64
SCHED_NORMAL = 0

SCHEMA = pa.schema([("hogs", pa.int64()), ("slice_ns", pa.int64()), ("repeat", pa.int64()),
                    ("lateness_ns", pa.int64())])


def set_slice(pid: int, slice_ns: int) -> None:
    """sched_setattr(pid, {SCHED_NORMAL, nice 0, sched_runtime=slice_ns}):
    the 6.12 per-task slice request (0 drops it)."""
    # struct sched_attr, SCHED_ATTR_SIZE_VER0 (48 bytes)
    attr = struct.pack("=IIQiIQQQ", 48, SCHED_NORMAL, 0, 0, 0, slice_ns, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_SCHED_SETATTR, pid, buf, 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_setattr({pid}, sched_runtime={slice_ns})")


def measure(cg, cpu: int, hogs: int, slice_ns: int, repeat: int, count: int) -> list[dict]:
    group = f"{ROOT}/g"
    cg.create(group)
    budget_s = (SKIP + count) * PERIOD_NS / 1e9 * 3 + 30
    with common.hogs(cg, [group] * hogs, cpu, max_seconds=budget_s + 10):
        lateness = sleeper_lateness(cg, group, cpu, PERIOD_NS, count, SKIP, budget_s,
                                    before_go=lambda pid: set_slice(pid, slice_ns))
    return [{"hogs": hogs, "slice_ns": slice_ns, "repeat": repeat, "lateness_ns": late}
            for late in lateness]


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    """Every configuration ``REPEAT`` times, interleaved (a drift of the
    host shows as spread between repeats, not as a difference between
    configurations); writes slice_preempt.parquet."""
    started = common.utc_now()
    common.check_host()
    common.build_native("wakeup")
    common.build_native("hog")
    cpu = common.bench_cpu()
    count = COUNT_QUICK if quick else COUNT
    rows: list[dict] = []
    t0 = time.monotonic()
    steal0 = steal_ticks()
    with common.bench_session(NAME, ROOT) as cg:
        for r in range(REPEAT):
            for i, (hogs, slice_ns) in enumerate(CONFIGS, 1):
                common.say(progress, f"{NAME} [{r + 1}.{i}] hogs={hogs} slice_ns={slice_ns} "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += measure(cg, cpu, hogs, slice_ns, r, count)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"configs": [list(c) for c in CONFIGS], "repeat": REPEAT, "count": count,
              "skip": SKIP, "period_ns": PERIOD_NS, "timer_slack_ns": 1}
    return common.finish(table, out_dir, NAME, params, quick, started, t0, cpu=cpu,
                         config_hz=common.config_hz(), steal_ticks=steal_ticks() - steal0)


def steal_ticks() -> int:
    """The host's steal time so far (/proc/stat, USER_HZ ticks): a run that
    saw steal was disturbed by the hypervisor."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8])


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
