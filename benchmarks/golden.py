"""Bit-identity of the shipped experiments across a refactoring.

    python -m benchmarks.golden record DIR [--points N] [--only NAME,...]
    python -m benchmarks.golden check DIR  [--only NAME,...]

``record`` runs a sample of every experiment in scenarios/conf/experiment
(the first, last and middle points of its sweep grid, at the experiment's
own duration) and writes one SHA-256 per table (summary without its
wall-clock columns, requests, intervals and any extra table) to
DIR/golden.json; ``check`` runs the same points on the code as it is now
and lists every table whose bytes differ.  A change that must not alter
results (a refactoring, a speed-up) is checked this way before it lands.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from scenarios.config import CONF_DIR, compose, expand_sweep
from scenarios.runner import run_scenario

# measured, not simulated: they differ between any two runs
WALL_COLUMNS = ("wall_time_s", "sim_s_per_wall_s", "run_id")


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def sample(points: list[list[str]], n: int) -> list[list[str]]:
    """n points spread over the grid, first and last included (n = 1: the first)."""
    if len(points) <= n:
        return points
    if n == 1:
        return points[:1]
    picks = sorted({round(i * (len(points) - 1) / (n - 1)) for i in range(n)})
    return [points[i] for i in picks]


def table_hash(table: pa.Table) -> str:
    keep = [c for c in table.column_names if c not in WALL_COLUMNS]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.select(keep).schema) as writer:
        writer.write_table(table.select(keep))
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def run_point(overrides: list[str], scratch: Path) -> dict[str, str]:
    cfg = compose(overrides)
    out = scratch / f"run-{len(list(scratch.iterdir()))}"
    run_scenario(cfg, out)
    return {p.stem: table_hash(pq.read_table(p)) for p in sorted(out.glob("*.parquet"))}


def run_all(names: list[str], n: int) -> dict[str, dict[str, str]]:
    hashes: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for name in names:
            points, _, _ = expand_sweep([f"experiment={name}"])
            for point in sample(points, n):
                key = " ".join(point)
                t0 = time.perf_counter()
                hashes[key] = run_point(point, scratch)
                print(f"{time.perf_counter() - t0:7.1f} s  {key}", flush=True)
    return hashes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--points", type=int, default=3, help="points per experiment (record)")
    parser.add_argument("--only", default="", help="comma-separated experiment names")
    args = parser.parse_args(argv)
    if args.points < 1:
        parser.error(f"--points {args.points}: must be at least 1")
    names = [n for n in args.only.split(",") if n] or experiments()
    path = args.dir / "golden.json"
    if args.action == "record":
        hashes = run_all(names, args.points)
        args.dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"points": args.points, "hashes": hashes}, indent=1))
        print(f"{len(hashes)} runs recorded in {path}")
        return 0
    golden = json.loads(path.read_text())
    now = run_all(names, golden["points"])
    bad = [f"{key}: {table}" for key, tables in now.items()
           for table, digest in tables.items()
           if golden["hashes"].get(key, {}).get(table) != digest]
    missing = [k for k in now if k not in golden["hashes"]]
    for line in bad:
        print(f"DIFFERS {line}")
    print(f"{len(now)} runs checked: {len(bad)} tables differ, {len(missing)} runs not recorded")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
