"""What the calibration microbenchmarks share: building the native programs,
the host checks, the run's cgroups, the native processes, pinning, and the
Parquet files with the host fingerprint.

Every benchmark writes ``<out>/<bench>.parquet`` with one row per raw sample
and two schema metadata keys: ``colosim.fingerprint`` (JSON of
``backends.real.detect.fingerprint()``) and ``colosim.bench`` (JSON: bench,
params, quick, started_utc, git_commit and what the bench adds, e.g. the
cache sizes).  :func:`read_bench` returns the three.

Cgroups live in one ``colosim-bench-<bench>-<6 hex>`` tree made through
``CgroupFS``, so they are removed on exit, SIGINT and SIGTERM like a real
run's, and ``colosim cleanup`` finds leftovers of a killed run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from backends.real import cgroupfs
from backends.real.build import compile_c
from backends.real.cgroupfs import CgroupError, CgroupFS
from backends.real.config import RealBackend
from backends.real.detect import fingerprint
from backends.real.disturbance import host_times
from backends.real.disturbance import measure as measure_disturbance
from backends.real.perf import die_with_parent
from backends.real.workers import WorkerProc, build_worker

NATIVE_DIR = Path(__file__).resolve().parent / "native"
BUILD_DIR = NATIVE_DIR / "build"
PROGRAMS = ("ctxsw", "dqdelay", "hog", "newidle", "wakeup")
CFLAGS = ["-O2", "-Wall", "-Wextra", "-pthread"]
REPO = Path(__file__).resolve().parents[2]
META_FINGERPRINT = b"colosim.fingerprint"
META_BENCH = b"colosim.bench"
# v1 cpu.shares minimum (v2 weight 1): the lowest weight the kernel allows
MIN_SHARES = 2

Progress = Callable[[str], None] | None


class BenchUnavailable(RuntimeError):
    """This host cannot run the benchmarks; the message names what is missing."""


# --- native programs ------------------------------------------------------------
def build_native(name: str, force: bool = False) -> Path:
    """Compile native/<name>.c into native/build/<name> (what `make
    microbench` does) unless the binary is newer than the source; atomic."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown native program {name!r}: {', '.join(PROGRAMS)}")
    return compile_c(NATIVE_DIR / f"{name}.c", BUILD_DIR / name, CFLAGS, BenchUnavailable,
                     "the benchmark program", deps=(NATIVE_DIR / "handshake.h",), force=force)


def check_host() -> None:
    """Raise BenchUnavailable naming everything missing (root, cgroup
    controllers, gcc) before anything is created."""
    missing = []
    try:
        cgroupfs.preflight(cgroupfs.detect_layout())
    except (CgroupError, OSError) as e:
        missing.append(str(e).removeprefix("the real backend cannot run here; missing: "))
    if shutil.which(os.environ.get("CC", "gcc")) is None and not all(
            (BUILD_DIR / p).exists() for p in PROGRAMS):
        missing.append("gcc (to build calibration/bench/native; apt-get install gcc)")
    if missing:
        raise BenchUnavailable("the calibration benchmarks cannot run here; missing: "
                               + "; ".join(missing))


def disturbance(h0: dict, h1: dict, own_ns: int) -> dict:
    """Steal and other load over the host's CPU time between two
    host_times() readings (the real backend's measure), ``own_ns`` being the
    benchmark's own cgroups' CPU time in between; flagged against the real
    backend's bounds (and where nothing was measured)."""
    fracs = measure_disturbance({"host": h0, "bench": {"usage_ns": 0}},
                                {"host": h1, "bench": {"usage_ns": own_ns}}, "bench")
    steal, other = fracs["host_steal_frac"], fracs["host_other_frac"]
    bounds = RealBackend()
    return {"steal_frac": steal, "other_frac": other,
            "host_disturbed": not (steal <= bounds.disturbed_steal_frac
                                   and other <= bounds.disturbed_other_frac)}


class NativeProc:
    """One native benchmark process: started, it prints ``K <pid>...`` and
    waits; :meth:`go` lets it run (after the driver attached it)."""

    def __init__(self, program: str, args: list[str], pass_fds=(), max_seconds: float = 600,
                 affinity: set[int] | None = None):
        """``affinity``: CPUs it starts on (default: the driver's, which since
        Linux 6.2 also survives the v1 cpuset attach)."""
        binary = build_native(program)
        cmd = [str(binary), *map(str, args), "--max-seconds", str(max(1, math.ceil(max_seconds)))]
        self.program = program

        def pre():
            die_with_parent(signal.SIGKILL)
            if affinity:
                os.sched_setaffinity(0, affinity)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, pass_fds=tuple(pass_fds),
                                     preexec_fn=pre)
        line = self._read_line(timeout_s=30)
        parts = line.split()
        if not parts or parts[0] != "K":
            self.kill()
            raise RuntimeError(f"{program}: bad handshake {line!r}: {self._stderr()}")
        self.pids = [int(p) for p in parts[1:] if int(p) > 0]

    def _read_line(self, timeout_s: float) -> str:
        # byte by byte: nothing past the line may be buffered away from communicate()
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout_s
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.kill()
                raise RuntimeError(f"{self.program}: no handshake within {timeout_s} s")
            b = os.read(fd, 1)
            if not b:
                break
            buf += b
        return buf.decode()

    def _stderr(self) -> str:
        try:
            return self.proc.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def go(self) -> None:
        self.proc.stdin.write(b"G\n")
        self.proc.stdin.flush()

    def output(self, timeout_s: float) -> list[str]:
        """Everything it prints until it exits (after :meth:`go`)."""
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.program} did not finish within {timeout_s:.0f} s")
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.program} exited with {self.proc.returncode}: "
                               f"{err.decode(errors='replace').strip()}")
        return out.decode().splitlines()

    def measured_run(self, cg, cgroup: str, root: str, timeout_s: float) -> tuple[list[str], dict]:
        """Attach it to ``cgroup``, let it run to its end and kill it in
        any case; its output and the host's disturbance meanwhile
        (:func:`disturbance`, the benchmark's own CPU being ``root``'s)."""
        try:
            cg.attach(cgroup, self.pids[0])
            h0, u0 = host_times(), cg.usage_ns(root)
            self.go()
            lines = self.output(timeout_s=timeout_s)
            h1, u1 = host_times(), cg.usage_ns(root)
        finally:
            self.kill()
        return lines, disturbance(h0, h1, u1 - u0)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


@contextmanager
def hogs(cg: CgroupFS, cgroups: list[str], cpu: int | None, *, threads: int = 1,
         ws_bytes: int = 0, counter_fd: int | None = None,
         max_seconds: float = 600) -> Iterator[list[NativeProc]]:
    """One hog process per cgroup (created if needed), attached, then let go;
    killed on leaving.  Pinned to ``cpu``, or free on every online CPU when
    None.  With ``counter_fd`` hog i counts iterations in slot i."""
    procs: list[NativeProc] = []
    try:
        for i, path in enumerate(cgroups):
            cg.create(path)
            args = ["--threads", threads, "--ws", ws_bytes]
            if cpu is not None:
                args += ["--cpu", cpu]
            fds = ()
            if counter_fd is not None:
                args += ["--counter-fd", counter_fd, "--slot", i]
                fds = (counter_fd,)
            p = NativeProc("hog", args, pass_fds=fds, max_seconds=max_seconds,
                           affinity=None if cpu is not None else all_cpus())
            procs.append(p)
            cg.attach(path, p.pids[0])
        for p in procs:
            p.go()
        yield procs
    finally:
        for p in procs:
            p.kill()


@contextmanager
def worker_in_cgroup(cg: CgroupFS, cgroup: str, cpu: int, name: str,
                     max_seconds: float) -> Iterator[tuple[WorkerProc, Callable[[], int]]]:
    """The real backend's native worker (backends/workers/funcworker.c) in
    ``cgroup`` (created), pinned to ``cpu``, and a reader of that cgroup's
    CPU time (cpuacct.usage, ns); it quits on leaving."""
    cg.create(cgroup)
    cg.set_cpuset(cgroup, str(cpu))
    worker = WorkerProc(build_worker(), name, max_seconds=max_seconds, cpus={cpu})
    cg.attach(cgroup, worker.pid)
    acct = cg.dir("cpuacct", cgroup) / "cpuacct.usage"
    try:
        yield worker, lambda: int(acct.read_text())
    finally:
        worker.quit()


# --- cgroups and pinning ----------------------------------------------------------
@contextmanager
def bench_cgroups(bench: str) -> Iterator[CgroupFS]:
    """The benchmark's ``colosim-bench-<bench>-<6 hex>`` tree, removed on
    exit, SIGINT and SIGTERM (CgroupFS's handlers) and by `colosim cleanup`."""
    check_host()
    cg = CgroupFS(f"bench-{bench.replace('_', '-')}-{secrets.token_hex(3)}")
    try:
        cg.create()
        yield cg
    finally:
        cg.remove()


@contextmanager
def bench_session(bench: str, root: str) -> Iterator[CgroupFS]:
    """What a benchmark measures inside: this thread off the benchmark CPU
    (driver_pinned) and the benchmark's cgroup tree with ``root`` created."""
    with driver_pinned(), bench_cgroups(bench) as cg:
        cg.create(root)
        yield cg


def other_cpu(bench: str) -> int:
    """The lowest CPU besides the benchmark's, for a benchmark that needs two."""
    other = min(driver_cpus())
    if other == bench_cpu():
        raise BenchUnavailable(f"{bench} needs two CPUs")
    return other


def _online() -> set[int]:
    try:
        return cgroupfs.parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    except OSError:
        return set()


def all_cpus() -> set[int]:
    return _online() or set(os.sched_getaffinity(0))


def bench_cpu() -> int:
    """The highest-numbered CPU: the benchmarks' CPU."""
    return max(all_cpus())


def driver_cpus() -> set[int]:
    """Every CPU but the benchmarks' one (all of them on a 1-CPU host)."""
    cpus = all_cpus()
    return (cpus - {bench_cpu()}) or cpus


@contextmanager
def driver_pinned() -> Iterator[None]:
    """Keep this thread, and the processes it starts before they pin
    themselves (perf included), off the benchmark CPU."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, driver_cpus())
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# --- host facts for the metadata ------------------------------------------------------
def cache_sizes(cpu: int = 0) -> dict[str, int]:
    """{"L1d": bytes, "L1i": ..., "L2": ..., "L3": ...} from sysfs (per instance)."""
    out: dict[str, int] = {}
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    for d in sorted(base.glob("index*")):
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[name] = int(size.rstrip("KMG")) * mult
    return out


def config_hz() -> int | None:
    """CONFIG_HZ (the tick rate) from /boot/config-$(uname -r) or
    /proc/config.gz; None when neither exists."""
    texts = []
    try:
        texts.append(Path(f"/boot/config-{os.uname().release}").read_text())
    except OSError:
        pass
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            texts.append(f.read())
    except OSError:
        pass
    for text in texts:
        for line in text.splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
    return None


def local_timer_interrupts(cpu: int) -> int:
    """The LOC line of /proc/interrupts for ``cpu``: every local timer
    interrupt it took (its ticks and its high-resolution timers)."""
    for line in Path("/proc/interrupts").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "LOC:":
            return int(fields[1 + cpu])
    raise BenchUnavailable("/proc/interrupts has no LOC (local timer) line")


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


_FINGERPRINT: dict | None = None


def host_fingerprint() -> dict:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = fingerprint()
    return dict(_FINGERPRINT)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- Parquet -------------------------------------------------------------------------
def bench_meta(bench: str, params: dict, quick: bool, started_utc: str, **extra) -> dict:
    return {"bench": bench, "params": params, "quick": bool(quick),
            "started_utc": started_utc, "git_commit": git_commit(), **extra}


def with_meta(table: pa.Table, fingerprint: dict, meta: dict) -> pa.Table:
    md = dict(table.schema.metadata or {})
    md[META_FINGERPRINT] = json.dumps(fingerprint, sort_keys=True).encode()
    md[META_BENCH] = json.dumps(meta, sort_keys=True).encode()
    return table.replace_schema_metadata(md)


def finish(table: pa.Table, out_dir: str | os.PathLike, bench: str, params: dict, quick: bool,
           started_utc: str, t0: float, **extra) -> pa.Table:
    """The end of a benchmark's run(): ``table`` written to
    ``<out_dir>/<bench>.parquet`` with its meta (``params``, ``extra``, and
    how long it took since ``t0``, a time.monotonic() reading)."""
    meta = bench_meta(bench, params, quick, started_utc, **extra,
                      duration_s=round(time.monotonic() - t0, 1))
    write_bench(table, out_dir, meta)
    return table


def write_bench(table: pa.Table, out_dir: str | os.PathLike, meta: dict,
                fingerprint: dict | None = None) -> Path:
    """``<out_dir>/<meta['bench']>.parquet`` with the fingerprint and meta."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{meta['bench']}.parquet"
    table = with_meta(table, host_fingerprint() if fingerprint is None else fingerprint, meta)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_bench(path: str | os.PathLike) -> tuple[pa.Table, dict, dict]:
    """(table, fingerprint, meta) of a benchmark's Parquet file."""
    table = pq.read_table(path)
    md = table.schema.metadata or {}
    if META_BENCH not in md:
        raise ValueError(f"{path}: not a colosim benchmark file (no {META_BENCH.decode()} "
                         f"metadata)")
    return table, json.loads(md.get(META_FINGERPRINT, b"{}")), json.loads(md[META_BENCH])


def say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


# --- command line ----------------------------------------------------------------------
def main_of(doc: str, run: Callable, bench: str) -> Callable[[list[str] | None], int]:
    """A benchmark module's ``main(argv=None)``: :func:`cli` for it."""
    return partial(cli, doc, run, prog=f"python -m calibration.bench.{bench}")


def cli(doc: str, run: Callable, argv: list[str] | None = None, prog: str | None = None) -> int:
    """``python -m calibration.bench[.<name>] --out DIR [--quick]``; ``run``
    returns a table or {name: table}."""
    parser = argparse.ArgumentParser(prog=prog, description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for <bench>.parquet")
    parser.add_argument("--quick", action="store_true",
                        help="the reduced configuration CI runs")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        result = run(args.out, quick=args.quick,
                     progress=lambda m: print(m, file=sys.stderr, flush=True))
    except BenchUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tables = result if isinstance(result, dict) else {"": result}
    rows = sum(t.num_rows for t in tables.values())
    print(f"{rows} rows in {time.monotonic() - t0:.1f} s -> {args.out}", file=sys.stderr)
    return 0
