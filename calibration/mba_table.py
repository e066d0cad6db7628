"""Measure what each MBA step does on this host (needs resctrl with MB):
the requested -> applied table the simulator's resctrl model reads
(``sim/memory/mba/<host>.json``, ``sim.memory.resctrl.measured_mba``), and what MBA costs a
latency-bound thread (docs/memory.md, "What remains": the thesis's MBA
targets the model cannot meet).

    python -m calibration.mba_table --cpus 0-15 --host silver-4314-2s
                                    [--buffer-mb 1024] [--seconds 1] [--out DIR]
                                    [--table-dir DIR]

For every MB percent from ``info/MB/min_bandwidth`` to 100 in steps of
``bandwidth_gran``, one RDT class with that MB on every domain (all ways)
holds, in turn:

- *bandwidth*: the memory worker sweeping a buffer far larger than the LLC
  (sequential, 4 chains per thread) with one thread per CPU of ``--cpus``
  (the CPUs of one socket, so the socket's controller is the bottleneck at
  100%); bytes/s = lines read x 64 / wall time.  ``applied_percent`` = its
  bandwidth / the bandwidth at 100% x 100: the socket-share fraction the
  model caps a class at;
- *latency*: one thread of dependent random loads over the same buffer
  (``ns_per_access``), the latency-bound case.

Each process is put in the class before it starts its accesses
(``--start-at-stdin``), through the RDT sidecar (backends/real/rdt.py), and
the class is removed at the end (also on errors).  Without resctrl the tool
says what is missing and exits 2.  Output: ``mba_<host>.md`` (the table)
under ``--out`` (default calibration/fits) and ``<host>.json``
(``{"applied": {MB: percent}, "rows": ...}``) under ``--table-dir``
(default sim/memory/mba), which simulations of that host preset then use.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from backends.host import RdtError
from backends.real.cgroupfs import format_cpulist, parse_cpulist
from backends.real.jobs import spawn_in_cgroup, stop_session
from backends.real.memworker import MemResult, build_memworker
from backends.real.rdt import RdtSidecar
from sim.memory.resctrl import MBA_DIR

FITS = Path(__file__).resolve().parent / "fits"
CLASS = "mba-probe"
LINE = 64


def _run_in_class(sc, binary, args: list[str], cpus: set[int], seconds: float) -> MemResult:
    """One memory worker in the class: faulted in, assigned, then started."""
    cmd = [str(binary), *args, "--duration", repr(seconds), "--max-seconds",
           repr(seconds + 60), "--start-at-stdin", "yes"]
    proc = spawn_in_cgroup(cmd, [], cpus, stdin=subprocess.PIPE)
    try:
        sc.assign_pids(CLASS, [proc.pid])
        proc.stdin.write(b"%d\n" % time.monotonic_ns())
        proc.stdin.flush()
        out, err = proc.communicate(timeout=seconds + 90)
        if proc.returncode != 0:
            raise RuntimeError(f"memworker exited with {proc.returncode}: {err.decode().strip()}")
        return MemResult(**json.loads(out))
    finally:
        stop_session(proc)


def measure(sc, cpus: set[int], buffer_mb: float = 1024, seconds: float = 1.0,
            binary=None) -> list[dict]:
    """One row per MB step: bandwidth (GB/s), applied percent, latency (ns)."""
    info = sc.rdt_info()
    if not info.mba_gran:
        raise RdtError(errno.ENODEV, "this host's resctrl has no MB resource (no MBA)")
    binary = binary or build_memworker()
    size = str(int(buffer_mb * (1 << 20)))
    bw_args = ["--bytes", size, "--pattern", "sequential", "--mlp", "4",
               "--threads", str(len(cpus))]
    lat_args = ["--bytes", size, "--pattern", "random"]
    rows = []
    sc.rdt_create_class(CLASS, (1 << info.ways) - 1, 100)
    try:
        for mb in range(info.mba_min, 101, info.mba_gran):
            sc.rdt_update_class(CLASS, mb_percent=mb)
            bw = _run_in_class(sc, binary, bw_args, cpus, seconds)
            lat = _run_in_class(sc, binary, lat_args, {min(cpus)}, seconds)
            rows.append({"mb": mb, "gbps": bw.accesses * LINE / bw.elapsed_s / 1e9,
                         "ns_per_access": lat.ns_per_access})
    finally:
        sc.rdt_remove_class(CLASS)
    full = rows[-1]["gbps"]
    lat_full = rows[-1]["ns_per_access"]
    for r in rows:
        r["applied_percent"] = 100.0 * r["gbps"] / full if full > 0 else math.nan
        r["latency_ratio"] = r["ns_per_access"] / lat_full if lat_full > 0 else math.nan
    return rows


def write(rows: list[dict], host: str, cpus: set[int], out: Path,
          table_dir: Path = MBA_DIR) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    table_dir.mkdir(parents=True, exist_ok=True)
    md = out / f"mba_{host}.md"
    lines = [f"# MBA steps measured on {host} (CPUs {format_cpulist(cpus)})", "",
             "Written by `python -m calibration.mba_table`. Bandwidth: sequential sweep, "
             "one thread per CPU; latency: one thread of dependent random loads.", "",
             "| MB % | GB/s | applied % | ns per access | latency vs 100% |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['mb']} | {r['gbps']:.2f} | {r['applied_percent']:.1f} | "
              f"{r['ns_per_access']:.1f} | {r['latency_ratio']:.3f} |" for r in rows]
    md.write_text("\n".join(lines) + "\n")
    js = table_dir / f"{host}.json"
    js.write_text(json.dumps({"host": host, "cpus": format_cpulist(cpus),
                              "applied": {r["mb"]: round(r["applied_percent"], 2) for r in rows},
                              "rows": rows}, indent=1) + "\n")
    return md, js


def main(argv=None, sidecar=RdtSidecar) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpus", required=True, help="CPUs of one socket, e.g. 0-15")
    ap.add_argument("--host", required=True,
                    help="the host preset this machine is (scenarios/conf/host/), e.g. "
                    "silver-4314-2s: simulations of it then use the table")
    ap.add_argument("--buffer-mb", type=float, default=1024.0,
                    help="buffer size, far above the LLC (default 1024)")
    ap.add_argument("--seconds", type=float, default=1.0, help="per measurement (default 1)")
    ap.add_argument("--out", type=Path, default=FITS, help="where the markdown table goes")
    ap.add_argument("--table-dir", type=Path, default=MBA_DIR,
                    help="where <host>.json goes (default: sim/memory/mba, read by the model)")
    a = ap.parse_args(argv)
    cpus = set(parse_cpulist(a.cpus))
    sc = sidecar(prefix="colosim-mba-")
    try:
        rows = measure(sc, cpus, a.buffer_mb, a.seconds)
    except RdtError as e:
        print(f"mba_table: {e.strerror}", file=sys.stderr)
        return 2
    finally:
        sc.close(cleanup=True)
    md, js = write(rows, a.host, cpus, a.out, a.table_dir)
    print(md.read_text(), end="")
    print(f"written: {md}, {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
