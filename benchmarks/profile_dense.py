"""Profile the dense benchmark scenario: where does the wall time go?

    .venv/bin/python benchmarks/profile_dense.py [--scenario dense|small|tiny]
        [--duration S] [--top N] [--sort tottime|cumtime] [--out FILE.prof]

Runs one ``scenarios.simulate.simulate`` under cProfile and prints the run's throughput
figures and the top functions (by tottime unless --sort says otherwise).
cProfile slows the run down (about 3x here); use the benchmarks, not this,
for throughput figures.  cProfile sees Python-level calls only: run it with
``COLOSIM_PURE_PYTHON=1`` to profile the sources of the compiled core, or
with ``--no-profile`` under ``perf record`` to profile the compiled run.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.configs import SCENARIOS  # noqa: E402
from scenarios.simulate import simulate  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="dense")
    ap.add_argument("--duration", type=float, default=None,
                    help="simulated seconds (default: the scenario's)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sort", choices=("tottime", "cumtime"), default="tottime")
    ap.add_argument("--out", help="also write the raw profile here (for snakeviz etc.)")
    ap.add_argument("--no-profile", action="store_true",
                    help="run without cProfile (for an outside profiler such as perf)")
    args = ap.parse_args(argv)

    cfg = SCENARIOS[args.scenario]()
    if args.duration is not None:
        cfg["duration_s"] = args.duration
    prof = None if args.no_profile else cProfile.Profile()
    result = simulate(cfg) if prof is None else prof.runcall(simulate, cfg)
    s = result.summary.to_pylist()[0]
    wall = s["wall_time_s"]
    print(f"scenario {args.scenario}: {cfg['duration_s']:g} simulated s in {wall:.2f} wall s"
          + ("" if prof is None else " (under cProfile)"))
    print(f"  ctx_switches {s['ctx_switches']}  sim_events {s['sim_events']}")
    print(f"  {cfg['duration_s'] / wall:.3f} simulated s/wall s  "
          f"{s['ctx_switches'] / wall:,.0f} switches/wall s  "
          f"{s['sim_events'] / wall:,.0f} events/wall s")
    if prof is None:
        return 0
    if args.out:
        prof.dump_stats(args.out)
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
