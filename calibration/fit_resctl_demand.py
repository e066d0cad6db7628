"""Calibrate the resctl workload's CPU demand per request on a CFS point.

    .venv/bin/python -m calibration.fit_resctl_demand [--quick]

The LAGS paper replaced rd-hashd's hashing with "a simple CPU-bound
Fibonacci computation" (§3.1) and never gives its size.  With
rd-hashd's request path (the lags experiments' ``request_path: rdhashd``)
the switch rate of the resctl closed loop is set by how many requests the
host completes, so the size decides the overhead.  This finds the
``mean_service_s`` at which CFS at 108 functions spends the middle of the
paper's 5-7% band in the scheduler (point ``resctl_108_overhead`` of
calibration/points/lags_fig3_cfs.yaml, a CFS result: a calibration point),
under the current ``e5-2430l`` cost profile, by bisection on log(size)
with full simulations (overhead falls monotonically as requests grow).

The cost profile and the demand depend on each other: run this, write the
value into scenarios/conf/workload/resctl.yaml, refit the profile
(calibration.fit_lags_fig3), and run this again to check the point still
holds (docs/calibration.md, "The rd-hashd path").
"""
from __future__ import annotations

import sys

import yaml

from calibration.fit_lags_fig3 import (EXPERIMENT, PROFILE_FILE, QUICK, bisection_parser,
                                       load_points, log_bisect, simulate_point)

POINT = "resctl_108_overhead"


def overhead_at(service_s: float, params: dict, duration: dict, seed: int = 0) -> dict:
    return simulate_point("resctl", 108, params, seed, duration["duration_s"],
                          duration["warmup_s"], record=False,
                          workload_overrides={"mean_service_s": service_s})


def bisect(target: float, params: dict, duration: dict, lo: float, hi: float,
           steps: int, log=print) -> tuple[float, list]:
    """log-space bisection of the service time giving ``target`` overhead."""
    tried = []

    def too_much_overhead(mid):
        out = overhead_at(mid, params, duration)
        tried.append((mid, out["sched_overhead_frac"], out["ctx_switch_rate_per_s"],
                      out["ctx_switch_cost_mean_us"]))
        log(f"  mean_service_s {mid * 1e3:7.4f} ms: overhead {out['sched_overhead_frac']:.4f}, "
            f"{out['ctx_switch_rate_per_s']:,.0f} switches/s, "
            f"{out['ctx_switch_cost_mean_us']:.2f} us/switch")
        return out["sched_overhead_frac"] > target   # requests must be longer

    return log_bisect(too_much_overhead, lo, hi, steps), tried


def main(argv=None) -> int:
    ap = bisection_parser("python -m calibration.fit_resctl_demand", __doc__, 1e-4, 1e-2, 8)
    args = ap.parse_args(argv)
    point = next(p for p in load_points()["points"] if p["id"] == POINT)
    low, high = point["band"]
    target = (low + high) / 2
    params = yaml.safe_load(PROFILE_FILE.read_text())
    duration = QUICK if args.quick else EXPERIMENT
    print(f"target: {POINT} = {target:.3f} (band {low}-{high}), profile {PROFILE_FILE.name}")
    size, _ = bisect(target, params, duration, args.lo, args.hi, args.steps)
    print(f"mean_service_s: {size:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
