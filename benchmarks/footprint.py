"""Peak memory of one simulate() run, for sim/footprint.py's constants.

Run each point in a fresh process from the repository root and compare
peak RSS with the ``base`` point's:

    python benchmarks/footprint.py base 0 1      # the base
    python benchmarks/footprint.py func 2000 16  # 2,000 function cgroups on 16 CPUs
    python benchmarks/footprint.py req 200000 1  # 200,000 requests
    python benchmarks/footprint.py thr 20000 1   # 20,000 threads

Arguments: KIND N CPUS.  Prints one JSON line.
"""
import json
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from simcfg import make_cfg, poisson, periodic
from scenarios.simulate import simulate
kind, n, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if kind == "base":
    cfg = make_cfg(poisson(functions=1, rate_rps=0.001), cores=cores, duration_s=1.0, warmup_s=0)
elif kind == "func":
    cfg = make_cfg(poisson(functions=n, rate_rps=0.001), cores=cores, duration_s=1.0, warmup_s=0)
elif kind == "req":   # n requests over the run, 1 function, light load
    cfg = make_cfg(poisson(functions=1, rate_rps=n / 100.0, mean_service_s=1e-5), cores=cores, duration_s=100.0, warmup_s=0)
elif kind == "thr":   # n threads sleeping almost always
    cfg = make_cfg(periodic(threads=n, run_ms=0.001, sleep_ms=10_000.0), cores=cores, duration_s=1.0, warmup_s=0)
r = simulate(cfg)
print(json.dumps({"kind": kind, "n": n, "cores": cores, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "req": r.requests.num_rows}))
