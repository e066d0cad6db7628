"""Mechanism checks of a fitted profile against the microbenchmarks the fit
does not use: the simulator runs the density and throttle benchmarks'
configurations with the profile, and the fit report sets them side by side
with the host's measurements.

- density (N CPU hogs in N cgroups on one CPU): switches away from a hog
  per second (what perf counts per cgroup; the simulator's
  ``switch_out_rate_per_s``) and the CPU's useful work (host: iterations x
  the lone hog's ns per iteration; simulator: busy time);
- throttle (a cgroup's hogs under cpu.max): CPU used, the fraction of
  periods throttled, throttled time per second;
- rcu (threads exiting on an otherwise idle CPU): the share of time that
  CPU keeps its tick, from its local timer interrupts beyond the exit-free
  point's, against ``scheduler.rcu_idle_tick``'s rule with the fitted
  ``rcu_gp_*`` keys (no simulation: the rule is the model).

None of these numbers is fitted: they test the scheduler and bandwidth
models with the fitted costs, and where they differ the report says so.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from calibration.bench import density, rcu, throttle
from calibration.simbench import _cfg
from scenarios.simulate import simulate
from sim.topology import Topology

SIM_SECONDS = 3.0
WARMUP_S = 0.5


def _simulate(base: dict, workload: dict) -> dict:
    """The summary of ``base`` (a composed config) running ``workload``,
    with ``nr_cpus`` added: the host's CPUs, to turn utilisation into CPUs."""
    cfg = dict(base, workload=workload, duration_s=SIM_SECONDS + WARMUP_S, warmup_s=WARMUP_S)
    summary = simulate(cfg).summary.to_pylist()[0]
    return dict(summary, nr_cpus=Topology.from_config(cfg["host"]).nr_cpus)


def _hogs(groups: list[dict], ws_bytes: int, **bandwidth) -> dict:
    return {"name": "periodic", "threads": 1, "run_ms": 10_000.0, "sleep_ms": 0.0, "nice": 0,
            "working_set_kb": ws_bytes // 1024, "cgroup_weight": 100, "groups": groups,
            **bandwidth}


def missing_columns(bench: str, table: pa.Table) -> list[str]:
    """The columns of ``bench``'s current schema that ``table`` lacks."""
    schema = CHECKS[bench][0]
    return [name for name in schema.names if name not in table.column_names]


def density_rows(table: pa.Table, calibration: dict, host: str, scheduler: str,
                 meta: dict) -> list[dict]:
    """One row per (n_hogs, hog_ws_bytes): host vs simulator.  The host's
    switch rate and useful CPU are medians over the benchmark's repetitions;
    a repetition whose lone-hog references drifted apart by more than
    density.DRIFT_LIMIT gives no useful CPU (the vCPU's speed moved by more
    than the loss to be seen), and the range is over the ones kept."""
    df = table.to_pandas()
    base = _cfg(calibration, host, scheduler, 0)
    rows = []
    for (n, ws), g in df.groupby(["n_hogs", "hog_ws_bytes"]):
        rates, useful = [], []
        for _, r in g.groupby("repeat"):
            window = r.perf_window_ns.max()
            if r.context_switches.notna().all() and window and window > 0:
                rates.append(r.context_switches.sum() / (window / 1e9))
            if (r.alone_drift.abs() <= density.DRIFT_LIMIT).all():
                useful.append(float((r.iterations * r.ns_per_iteration_alone).sum()
                                    / r.elapsed_ns.max()))
        groups = [{"name": f"density/hog{i}", "threads": 1, "cpuset": str(meta.get("cpu", 0))}
                  for i in range(int(n))]
        s = _simulate(base, _hogs(groups, int(ws)))
        rows.append({"check": "density", "n_hogs": int(n), "hog_ws_bytes": int(ws),
                     "switch_outs_per_s_real": float(np.median(rates)) if rates else np.nan,
                     "switch_outs_per_s_sim": s["switch_out_rate_per_s"],
                     "useful_cpu_real": float(np.median(useful)) if useful else np.nan,
                     "useful_cpu_real_min": min(useful, default=np.nan),
                     "useful_cpu_real_max": max(useful, default=np.nan),
                     "repeats_kept": len(useful), "repeats": int(g["repeat"].nunique()),
                     "useful_cpu_sim": (s["cpu_util"] - s["sched_overhead_frac"]) * s["nr_cpus"]})
    return rows


def throttle_rows(table: pa.Table, calibration: dict, host: str, scheduler: str,
                  meta: dict) -> list[dict]:
    """One row per (threads, quota_us, period_us): host vs simulator."""
    base = _cfg(calibration, host, scheduler, 0)
    rows = []
    for r in table.to_pylist():
        secs = r["elapsed_ns"] / 1e9
        cpuset = None if r["threads"] > 1 else str(meta.get("cpu", 0))
        group = {"name": "throttle", "threads": int(r["threads"]), "cpuset": cpuset}
        s = _simulate(base, _hogs([group], 0, quota_us=int(r["quota_us"]),
                                  period_us=int(r["period_us"])))
        rows.append({"check": "throttle", "threads": r["threads"], "quota_us": r["quota_us"],
                     "period_us": r["period_us"],
                     "cpu_real": r["usage_ns"] / r["elapsed_ns"],
                     # cpuacct: the tasks' work and the switches charged to them
                     "cpu_sim": s["cpu_util"] * s["nr_cpus"],
                     "throttled_frac_real": r["nr_throttled"] / max(r["nr_periods"], 1),
                     "throttled_frac_sim": s["nr_throttled"] / max(s["nr_periods"], 1),
                     "throttled_s_per_s_real": r["throttled_time_ns"] / 1e9 / secs,
                     "throttled_s_per_s_sim": s["throttled_time_s"] / SIM_SECONDS})
    return rows


def rcu_rows(table: pa.Table, calibration: dict, host: str, scheduler: str,
             meta: dict) -> list[dict]:
    """One row per exit rate: the idle CPU's tick kept by RCU callbacks,
    host vs the simulator's rule (rcu.idle_tick_rows) with the rcu_gp_* keys
    the profile fits from this table (the cost model's ``calibration`` has
    none of them); none when the table fits none."""
    keys = rcu.rcu_params(table)
    if keys is None:
        return []
    return rcu.idle_tick_rows(table, keys, int(meta.get("config_hz") or 250))


# the benchmarks checked: the schema their tables need, their rows (each
# called with the table, the fitted profile, host and scheduler options and
# the table's metadata)
CHECKS = {"density": (density.SCHEMA, density_rows), "throttle": (throttle.SCHEMA, throttle_rows),
          "rcu": (rcu.SCHEMA, rcu_rows)}


def markdown(found: dict[str, list[dict]]) -> str:
    """The fit report's section: ``found`` maps a CHECKS name to its rows."""
    density, throttle, rcu = (found.get(name, []) for name in CHECKS)
    out = ["## Checks (not fitted)", "",
           "The simulator with the fitted profile runs the density and throttle benchmarks' "
           "configurations, and the RCU benchmark's idle ticks are set beside the rule "
           "the simulator follows (calibration/checks.py); the host's numbers are the "
           "benchmarks'.", ""]
    if density:
        out += ["### Density: N hogs in N cgroups on one CPU", "",
                "| hogs | hog ws | switch-outs/s host | sim | useful CPU host | range "
                "| repetitions kept | sim |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in density:
            out.append(f"| {r['n_hogs']} | {r['hog_ws_bytes'] >> 10} KiB | "
                       f"{r['switch_outs_per_s_real']:.0f} | {r['switch_outs_per_s_sim']:.0f} | "
                       f"{r['useful_cpu_real']:.3f} | {r['useful_cpu_real_min']:.3f}–"
                       f"{r['useful_cpu_real_max']:.3f} | {r['repeats_kept']}/{r['repeats']} | "
                       f"{r['useful_cpu_sim']:.3f} |")
        out.append("")
    if throttle:
        out += ["### Throttle: hogs under cpu.max", "",
                "| threads | quota/period ms | CPU host | sim | throttled periods host | sim "
                "| throttled s/s host | sim |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in throttle:
            out.append(f"| {r['threads']} | {r['quota_us'] / 1000:g}/{r['period_us'] / 1000:g} | "
                       f"{r['cpu_real']:.3f} | {r['cpu_sim']:.3f} | "
                       f"{r['throttled_frac_real']:.2f} | {r['throttled_frac_sim']:.2f} | "
                       f"{r['throttled_s_per_s_real']:.3f} | {r['throttled_s_per_s_sim']:.3f} |")
        out.append("")
    if rcu:
        out += ["### RCU: an idle CPU's tick kept by exiting threads' callbacks", "",
                "| exits/s | tick kept host | sim | repetitions |", "|---:|---:|---:|---:|"]
        for r in rcu:
            out.append(f"| {r['rate']:g} | {r['kept_real']:.2f} | {r['kept_sim']:.2f} | "
                       f"{r['repeats']} |")
        out.append("")
    return "\n".join(out) + "\n"
