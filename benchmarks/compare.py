"""Compare two pytest-benchmark JSON files on their extra_info figures.

    .venv/bin/python benchmarks/compare.py OLD.json NEW.json

Prints, per benchmark present in both, each throughput figure and the ratio
NEW / OLD (> 1 means faster), and warns when the two runs did not simulate
the same work (different context-switch or event counts: the model changed,
so the ratios mix speed with behaviour).
"""
from __future__ import annotations

import json
import sys

FIGURES = ("events_per_wall_s", "sim_s_per_wall_s", "ctx_switches_per_wall_s")


def load(path: str) -> dict[str, dict]:
    with open(path) as fh:
        return {b["name"]: b["extra_info"] for b in json.load(fh)["benchmarks"]}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    old, new = load(argv[0]), load(argv[1])
    print(f"{'benchmark':<12} {'figure':<24} {'old':>12} {'new':>12} {'new/old':>8}")
    for name in sorted(old.keys() & new.keys()):
        for fig in FIGURES:
            a, b = old[name].get(fig), new[name].get(fig)
            if a is None or b is None:
                continue
            print(f"{name:<12} {fig:<24} {a:>12,.1f} {b:>12,.1f} {b / a:>8.2f}")
        for work in ("ctx_switches", "sim_events"):
            a, b = old[name].get(work), new[name].get(work)
            if a != b:
                print(f"{name:<12} note: {work} differ ({a} -> {b}): not the same simulated work")
    for name in sorted(old.keys() ^ new.keys()):
        print(f"{name:<12} only in {'OLD' if name in old else 'NEW'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
