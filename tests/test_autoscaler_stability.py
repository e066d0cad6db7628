"""Autoscaler stability (issue 25, "Controllers that flap"): VPA and CATCloud
over three workloads, three starting limits and two hosts.  After a
settling time, the number of cpu.max writes is bounded and the settled limit
is within a stated factor of the group's need.

The need is the workload's offered CPU demand, in millicores: ebizzy 20 ms
every 170 ms (117.6), a thread that never sleeps (1000), and one Poisson
function at 12.5 requests/s of 10 ms mean (125).  A limit below it cannot
keep up, so the lower bound is the need itself.

- CATCloud (defaults, auto mode; 120 s, settled after 60 s: its first
  recommendation comes after five cycles, under 3 s here, and a scaling
  episode takes ten periods): **no write after settling** (a periodic or
  steady workload's traced runtime and cycle do not change, so neither may
  cpu.max), and the limit at most 1.2 x the need (one ms step above the
  burst and the hold's one step: 21/170 = 1.05x, 110/100 = 1.1x).  A thread
  that never sleeps a slice never fills the period-agnostic buffers, so
  CATCloud never recommends (``wait_for: both``) and keeps the limit it
  started with, 1.5x the need from the generous start.
- VPA with its cadence scaled down 15x (a usage sample every 1 s, a
  recommendation every 4 s, an update every 20 s; 480 s, settled after
  360 s: from a tenth of the need the target climbs by at most p90 x 1.15
  per update, 17 updates): **one write per update** (the updater rewrites
  the target on a fixed cadence) **and all of the same value**, and the
  limit at most 2x the need (p90 x 1.15 of 1-s samples, then the
  histogram bucket's end: 1.08x for ebizzy, 1.17x for the hog, 1.8x for
  the Poisson function, whose 1-s usage varies most).
- CATCloud on the Poisson function does not settle: the period-agnostic
  tracer pairs the largest of five runtimes with the largest of five
  yields, a ratio below the mean demand for random arrivals (25/232 =
  108 mc), so the group is throttled, quota scaling over-provisions it
  for five periods, and the next recommendation is low again (27-46 writes
  in the last 120 s of 180 s, docs/autoscalers.md).  The thesis evaluates
  no such workload (serverless is its future work, §6.2.1); those cases
  are expected failures, strict, so a fix shows up here.
"""
from __future__ import annotations

import itertools

import pytest

import scenarios.simulate as api
from scenarios.config import compose
from scenarios.simulate import simulate

WORKLOADS = {
    "ebizzy": (["workload=ebizzy", "workload.run_ms=20", "workload.sleep_ms=150"],
               1000 * 20 / 170),
    "hog": (["workload=ebizzy", "workload.run_ms=20", "workload.sleep_ms=0"], 1000.0),
    "poisson": (["workload=poisson", "workload.functions=1", "workload.rate_rps=12.5",
                 "workload.mean_service_s=0.01"], 125.0),
}
# starting cpu.max (quota/period us); None: no limit
STARTS = {"none": None, "tight": (10_000, 100_000), "generous": (150_000, 100_000)}
CORES = (2, 8)
CONTROLLERS = {
    # (overrides, duration_s, settle_s, factor)
    "catcloud": ([], 120.0, 60.0, 1.2),
    "vpa": (["controller.interval_s=1", "controller.recommender_interval_s=4",
             "controller.update_interval_s=20"], 480.0, 360.0, 2.0),
}
VPA_UPDATE_S = 20.0


def run(controller, workload, start, cores, monkeypatch):
    """The run's summary and every cpu.max write as (t_s, quota_us, period_us)."""
    overrides, duration, settle, _ = CONTROLLERS[controller]
    limit = STARTS[start]
    cfg = compose([*WORKLOADS[workload][0], "host=generic", f"host.cores={cores}",
                   "calibration=ideal", f"controller={controller}", *overrides,
                   f"duration_s={duration}", f"warmup_s={settle}",
                   *([f"workload.quota_us={limit[0]}", f"workload.period_us={limit[1]}"]
                     if limit else [])])
    machines = []
    attach = api.attach_controller

    def capture(cfg, engine, machine, *rest):
        machines.append(machine)
        return attach(cfg, engine, machine, *rest)
    monkeypatch.setattr(api, "attach_controller", capture)
    summary = simulate(cfg).summary.to_pylist()[0]
    return summary, [(t / 1e9, q, p) for t, _, q, p in machines[0].cpu_max_log]


def case(controller, workload, start, cores):
    marks = []
    if controller == "catcloud" and workload == "poisson":
        marks = [pytest.mark.xfail(strict=True, reason=(
            "CATCloud's p99 run / (p99 run + p99 yield) is below a Poisson "
            "stream's mean demand: throttle, quota scaling, again"))]
    return pytest.param(controller, workload, start, cores, marks=marks,
                        id=f"{controller}-{workload}-{start}-{cores}cpu")


@pytest.mark.parametrize("controller,workload,start,cores", [
    case(*c) for c in itertools.product(CONTROLLERS, WORKLOADS, STARTS, CORES)])
def test_writes_after_settling_are_bounded_and_the_limit_fits_the_need(
        controller, workload, start, cores, monkeypatch):
    _, duration, settle, factor = CONTROLLERS[controller]
    need = WORKLOADS[workload][1]
    summary, writes = run(controller, workload, start, cores, monkeypatch)
    after = [w for w in writes if w[0] >= settle]
    quota, period = writes[-1][1:] if writes else (None, None)
    limit_mc = 1000.0 * quota / period if quota is not None else float("inf")
    if controller == "catcloud":
        assert after == []
        if summary["catcloud_recommendation_changes"] == 0:
            # never recommended: the limit it started with (or its initial
            # one), raised by quota scaling if that throttled it
            q0, t0 = STARTS[start] or (100_000, 100_000)
            factor = max(factor, 1000.0 * q0 / t0 / need)
    else:
        # the updater's fixed cadence, every write the settled value
        assert len(after) == int((duration - settle) / VPA_UPDATE_S)
        assert {w[1:] for w in after} == {(quota, period)}
    assert need <= limit_mc <= factor * need
