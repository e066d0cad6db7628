"""Context-switch cost (lmbench lat_ctx; Li, Ding & Shen 2007) -> ctx_switch.parquet.

Two processes A and B pass a 1-byte token over two pipes.  On receiving it
each walks its own working set once (ws_bytes, one byte per 64-byte line,
read-modify-write, sequentially), writes the token to its partner and
blocks on its own pipe; so on one CPU every hop is one context switch.
Native program: native/ctxsw.c.

experiments
  overhead     ONE process passes the token through its own pipe and walks its
               working set once per hop (2 hops a round trip): the same
               syscalls and walks with no switch, the baseline to subtract.
               It sits in A's cgroup of the levels=2 layout (same depth, so the
               same hierarchical accounting); its row has levels 0.
  pingpong     A and B pinned to one CPU.
  migrate      pingpong, but every round trip A moves B and then
               itself to the other CPU with sched_setaffinity before passing
               the token.
  migrate_ref  the same sched_setaffinity calls to the CPU they are on (no
               move): migrate - migrate_ref is the migration cost.

Sweeps (not the cross product):
  levels 0, 2, 4, 6, 8 at ws 0, busy 0 -- cgroup levels a switch walks by
      sim.machine.levels_walked's rule: 0 one cgroup, 2 siblings, 2d cousins d
      levels below their common ancestor (layout of sim/workloads/pingpong:
      pingpong/a1/.../ad and pingpong/b1/.../bd under colosim-bench-...);
  busy_cgroups 0,1,2,4,8,16,32 (quick 0,4,16) at levels 2, ws 0 -- other
      cgroups busy{i}, each with one CPU hog pinned to the pair's CPU at the
      lowest weight (v1 cpu.shares 2, v2 cpu.weight 1): the pair still runs at
      once on each wake-up, but the CPU's run queue holds these entities;
  ws_bytes 0,4K,16K,32K,64K,256K,512K,768K,1M,1.5M,2M,4M,16M,32M,64M,128M,256M
      (quick 0,64K,1M,16M) at
      levels 2, busy 0, and overhead at every ws; 256M (the pair's 512M is
      beyond this VM's 260 MiB L3) only when MemAvailable allows it (meta
      ws_bytes_skipped says what was left out);
  migrate and migrate_ref at levels 2, ws 0 and 1M (needs 2 CPUs).

Pinning: the pair (and the busy hogs) on the highest-numbered CPU; the
driver on the others.  migrate alternates between that CPU (cpu_a) and
CPU cpu_b, the lowest other CPU.

Samples: each sample is a batch of `rounds` round trips timed with
CLOCK_MONOTONIC; rounds is doubled from 1 until a batch takes >= 10 ms
(target 20 ms), then two more warm-up batches are discarded; 30 samples per
configuration (quick 10).  vcsw/ivcsw are getrusage(RUSAGE_SELF) deltas of A
and B together over the same rounds.  On EEVDF the token's wake-up often
preempts the writer before it blocks, so part of the 2 switches per round
trip show up as involuntary (vcsw + ivcsw ~ 2 * rounds).

Repeats: the whole sweep runs REPEATS times in turn (quick 2); column
repeat says which.  A configuration's median moves by about 20% between
runs minutes apart on this VM, far more than its batches scatter, so the fit
takes its error from the spread of the repeats' medians.

Columns: experiment, levels, depth, busy_cgroups, ws_bytes, cpu_a, cpu_b,
rounds, elapsed_ns, vcsw, ivcsw, repeat (one row per sample).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa

from calibration.bench import common
from calibration.bench.common import MIN_SHARES, NativeProc, Progress
# the simulator's twin lays the partners out the same way (below the run's top)
from sim.workloads.pingpong import partner_paths

NAME = "ctx_switch"
LEVELS = (0, 2, 4, 6, 8)
BUSY = (0, 1, 2, 4, 8, 16, 32)
BUSY_QUICK = (0, 4, 16)
K, M = 1 << 10, 1 << 20
# around each cache level's size (and half of it, where the pair's two working
# sets just fill it) so the fit sees where each level stops holding them
WS = (0, 4 * K, 16 * K, 32 * K, 64 * K, 256 * K, 512 * K, 768 * K, M, 3 * M // 2, 2 * M,
      4 * M, 16 * M, 32 * M, 64 * M, 128 * M, 256 * M)
WS_QUICK = (0, 64 * K, M, 16 * M)
MIGRATE_WS = (0, M)
SAMPLES, SAMPLES_QUICK = 30, 10
# the whole sweep runs this many times in turn: a configuration's median
# moves by ~20% between runs minutes apart on this VM (far more than its
# batches scatter), and only repeats show the fit that spread
REPEATS, REPEATS_QUICK = 3, 2
TARGET_NS = 20_000_000

SCHEMA = pa.schema([
    ("experiment", pa.string()), ("levels", pa.int64()), ("depth", pa.int64()),
    ("busy_cgroups", pa.int64()), ("ws_bytes", pa.int64()), ("cpu_a", pa.int64()),
    ("cpu_b", pa.int64()), ("rounds", pa.int64()), ("elapsed_ns", pa.int64()),
    ("vcsw", pa.int64()), ("ivcsw", pa.int64()), ("repeat", pa.int64()),
])


def levels_between(a: str, b: str) -> int:
    """sim.machine.levels_walked's count for tasks in cgroups ``a`` and ``b``:
    the steps from each up to their common ancestor."""
    pa_, pb = [p for p in a.split("/") if p], [p for p in b.split("/") if p]
    common_len = 0
    for x, y in zip(pa_, pb):
        if x != y:
            break
        common_len += 1
    return (len(pa_) - common_len) + (len(pb) - common_len)


def depth(path: str) -> int:
    """Depth below the cgroup root: the run's top colosim-* is depth 1."""
    return 1 + len([p for p in path.split("/") if p])


@dataclass(frozen=True)
class Config:
    experiment: str
    levels: int          # the row's levels (0 for overhead: no partner)
    layout_levels: int   # which partner_paths layout the processes sit in
    busy: int
    ws: int


def ws_sweep(quick: bool) -> tuple[list[int], list[int]]:
    """(ws values to run, values skipped for lack of memory)."""
    if quick:
        return list(WS_QUICK), []
    # two partners' working sets plus the overhead run's, with 1 GiB to spare
    room = common.mem_available() - (1 << 30)
    run = [w for w in WS if 2 * w <= room]
    return run, [w for w in WS if w not in run]


def configs(quick: bool, ncpus: int = 2) -> list[Config]:
    ws_list, _ = ws_sweep(quick)
    out: list[Config] = []

    def add(c: Config) -> None:
        if c not in out:
            out.append(c)
    for lv in LEVELS:
        add(Config("pingpong", lv, lv, 0, 0))
    for b in BUSY_QUICK if quick else BUSY:
        add(Config("pingpong", 2, 2, b, 0))
    for ws in ws_list:
        add(Config("overhead", 0, 2, 0, ws))
        add(Config("pingpong", 2, 2, 0, ws))
    if ncpus >= 2:
        for ws in MIGRATE_WS:
            add(Config("migrate_ref", 2, 2, 0, ws))
            add(Config("migrate", 2, 2, 0, ws))
    return out


def measure(cg, c: Config, cpu_a: int, cpu_b: int, samples: int) -> list[dict]:
    a, b = partner_paths(c.layout_levels)
    cg.create(a)
    cg.create(b)
    busy = [f"busy{i}" for i in range(c.busy)]
    for p in busy:
        cg.create(p)
        cg.set_shares(p, MIN_SHARES)
    args = ["--mode", c.experiment, "--ws", c.ws, "--cpu-a", cpu_a, "--target-ns", TARGET_NS,
            "--samples", samples]
    migrating = c.experiment in ("migrate", "migrate_ref")
    if migrating:
        args += ["--cpu-b", cpu_b]
    with common.hogs(cg, busy, cpu_a, max_seconds=300):
        p = NativeProc("ctxsw", args, max_seconds=240)
        try:
            cg.attach(a, p.pids[0])
            if len(p.pids) > 1:
                cg.attach(b, p.pids[1])
            p.go()
            lines = p.output(timeout_s=240)
        finally:
            p.kill()
    rows = []
    for line in lines:
        parts = line.split()
        if not parts or parts[0] != "S":
            raise RuntimeError(f"ctxsw: unexpected line {line!r}")
        rounds, elapsed, vcsw, ivcsw = map(int, parts[1:])
        rows.append({"experiment": c.experiment, "levels": c.levels, "depth": depth(a),
                     "busy_cgroups": c.busy, "ws_bytes": c.ws, "cpu_a": cpu_a,
                     "cpu_b": cpu_b if migrating else cpu_a, "rounds": rounds,
                     "elapsed_ns": elapsed, "vcsw": vcsw, "ivcsw": ivcsw})
    if len(rows) != samples:
        raise RuntimeError(f"ctxsw {c}: {len(rows)} samples, expected {samples}")
    return rows


def run(out_dir, quick: bool = False, progress: Progress = None, *,
        only: list[Config] | None = None, samples: int | None = None,
        repeats: int | None = None) -> pa.Table:
    """Run the sweeps (``only``: these configurations instead, for tests)
    and write ``<out_dir>/ctx_switch.parquet``."""
    started = common.utc_now()
    common.check_host()
    common.build_native("ctxsw")
    common.build_native("hog")
    cpu_a = common.bench_cpu()
    cpu_b = min(common.driver_cpus())
    ncpus = 1 if cpu_b == cpu_a else 2
    todo = list(only) if only is not None else configs(quick, ncpus)
    n = samples or (SAMPLES_QUICK if quick else SAMPLES)
    _, skipped = ws_sweep(quick)
    rows: list[dict] = []
    t0 = time.monotonic()
    reps = repeats or (REPEATS_QUICK if quick else REPEATS)
    with common.driver_pinned(), common.bench_cgroups(NAME) as cg:
        for r in range(reps):
            for i, c in enumerate(todo, 1):
                common.say(progress, f"{NAME} [{r + 1}/{reps}: {i}/{len(todo)}] {c.experiment} "
                                     f"levels={c.levels} busy={c.busy} ws={c.ws} "
                                     f"({time.monotonic() - t0:.0f} s)")
                rows += [dict(row, repeat=r) for row in measure(cg, c, cpu_a, cpu_b, n)]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"configs": [c.__dict__ for c in todo], "samples": n, "repeats": reps,
              "target_batch_ns": TARGET_NS, "line_bytes": 64,
              "busy_shares_v1": MIN_SHARES}
    return common.finish(table, out_dir, NAME, params, quick, started, t0,
                         caches=common.cache_sizes(cpu_a), ws_bytes_skipped=skipped,
                         migrate_skipped=None if ncpus > 1 else "one CPU")


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
