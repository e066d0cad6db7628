"""``colosim calibrate``: measure this host with the microbenchmarks of
calibration/bench, fit the cost model (calibration/fit.py), check the fit by
re-simulating every measured configuration (calibration/simbench.py), and
write the profile (calibration/profile.py) and a fit report.

Outputs: the profile (``--out NAME`` is scenarios/conf/calibration/NAME.yaml,
usable as ``calibration=NAME``); in the work directory the benchmark tables
(bench/*.parquet), fit-report.md and a copy of the profile; for a named
profile the report also goes to calibration/fits/NAME.md next to the other
fits.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from calibration import bench, checks
from calibration import fit as F
from calibration import simbench
from calibration.bench.common import read_bench
from calibration.bench.dispatch import dispatch_costs
from calibration.bench.driver import driver_costs
from calibration.bench.idle_exit import idle_exit_params
from calibration.bench.kthreads import kthread_params
from calibration.bench.rcu import rcu_params
from calibration.bench.rtapp_loop import rtapp_params
from calibration.bench.loadgen import loadgen_costs
from calibration.profile import PROFILE_DIR, build_profile, profile_path, write_profile

FITS_DIR = Path(__file__).resolve().parent / "fits"


def read_table(bench_dir: Path, name: str):
    """A benchmark table of ``bench_dir``, its fingerprint and metadata."""
    path = Path(bench_dir) / f"{name}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run the {name} benchmark first "
                                f"(colosim calibrate, or python -m calibration.bench.{name})")
    return read_bench(path)


def host_levels(bench: dict) -> list[F.CacheLevel]:
    caches = bench.get("caches") or {}
    if not caches:
        raise ValueError("the ctx_switch table records no cache sizes (meta 'caches'): "
                         "re-run the benchmark")
    return F.cache_levels(caches)


def resimulate(result: F.FitResult, table, host: str, scheduler: str, progress=None) -> dict:
    """Per point: the switch cost the simulator produces with the fitted
    profile running the benchmark itself (same configurations, hop times
    and batch sizes as measured)."""
    med = F.config_medians(table)
    hop = {ws: m / 2 for (exp, _, _, ws), (m, _, _) in med.items() if exp == "overhead"}
    rounds_col = table.column("rounds").to_numpy(zero_copy_only=False)
    ws_col = table.column("ws_bytes").to_numpy(zero_copy_only=False)
    rounds = {int(ws): int(np.median(rounds_col[ws_col == ws])) for ws in set(ws_col.tolist())}
    configs = [k for k in med if k[3] in hop]
    sim = simbench.simulate(result.cost_config(), configs, hop_ns=lambda ws: hop[ws],
                            rounds=lambda ws: rounds[ws], batches=5, host=host,
                            scheduler=scheduler, progress=progress)
    return {p.label: p.value_ns for p in F.points_from_bench(sim)}


def run_checks(result: F.FitResult, bench_dir: Path, work_dir: Path, host: str,
               scheduler: str, progress) -> str:
    """The fit report's section on the benchmarks the fit does not use
    (calibration/checks.py); their rows also go to checks.parquet."""
    found = {}
    for bench, (_, rows_of) in checks.CHECKS.items():
        if (bench_dir / f"{bench}.parquet").exists():
            table, _, meta = read_table(bench_dir, bench)
            missing = checks.missing_columns(bench, table)
            if missing:
                # a recording made before the benchmark gained them (density's
                # repetitions and drift, 2026-11-27): the check needs them
                progress(f"{bench}.parquet has no {', '.join(missing)} (recorded by an "
                         f"older benchmark): its check is left out; re-run "
                         f"python -m calibration.bench.{bench}")
                continue
            progress(f"checking {bench} on the simulator")
            found[bench] = rows_of(table, result.cost_config(), host, scheduler, meta)
    if not found:
        return ""
    rows = [r for v in found.values() for r in v]
    pq.write_table(pa.Table.from_pylist(rows), work_dir / "checks.parquet")
    return "\n" + checks.markdown(found)


def report_markdown(name: str, result: F.FitResult, fingerprint: dict, bench: dict,
                    simulated: dict | None, command: str) -> str:
    lines = [f"# Calibration fit: `{name}`", "",
             f"Command: `{command}`  ",
             f"Fitted {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"chi2 = {result.chi2:.1f} for {result.dof} degrees of freedom "
             f"(errors: standard error of the median, floored at {F.REL_FLOOR:.0%} "
             f"of the value).", "", "## Host", "", "| key | value |", "|---|---|"]
    for k in ("model_name", "cpu_model", "cpus", "cores", "threads_per_core", "kernel",
              "scheduler", "cgroup_version", "perf_hardware_events"):
        if k in fingerprint:
            lines.append(f"| {k} | {fingerprint[k]} |")
    lines += ["", "## Parameters", "", "| parameter | value | 1-sigma |", "|---|---:|---:|"]
    for k in result.params:
        s = "fixed" if k in result.fixed else f"{result.sigma[k]:.3g}"
        lines.append(f"| {k} | {result.params[k]:.4g} | {s} |")
    lines += ["", "Cache levels (sysfs): " + ", ".join(
        f"{lv.name} {lv.bytes >> 10} KiB{' shared' if lv.shared else ''}" for lv in result.levels)]
    if result.notes:
        lines += [""] + [f"- {n}" for n in result.notes]
    lines += ["", "## Points", "",
              "Measured: per-switch cost from the benchmark (ns). Model: the fit's formula "
              "(calibration/fit.py). Simulated: the simulator running the same benchmark "
              "with the fitted profile. Scaled: (model - measured) / error.", "",
              "| point | n | measured | error | model | scaled | simulated |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result.residual_rows():
        sim = "" if simulated is None or row["point"] not in simulated \
            else f"{simulated[row['point']]:.0f}"
        lines.append(f"| {row['point']} | {row['n']} | {row['measured_ns']:.0f} | "
                     f"{row['error_ns']:.0f} | {row['model_ns']:.0f} | {row['scaled']:+.2f} | "
                     f"{sim} |")
    if bench:
        lines += ["", "## Benchmark", "", "```", json.dumps(bench, indent=1, default=str), "```"]
    return "\n".join(lines) + "\n"


IDLE_EXIT_KEYS = ("idle_exit_ns", "idle_exit_cold_ns", "idle_exit_decay_ns")
# the idle_exit sleeper's cgroup: colosim-bench-idle_exit-*/idle_exit/sleeper
IDLE_EXIT_DEPTH = 3


def fit_with_ladder(points: list[F.Point], levels: list[F.CacheLevel], ladder: dict,
                    fixed: dict) -> F.FitResult:
    """The fit with the idle exit held at the idle_exit benchmark's ladder
    (what the user fixes wins).  The ladder's wake-ups include the switch
    to its sleeper, which the cost model charges apart: a first fit gives
    that switch, the second holds idle_exit_ns at the ladder's intercept
    less it."""
    held = {k: ladder[k] for k in IDLE_EXIT_KEYS}
    first = F.fit(points, levels, fixed={**held, **fixed})
    no_exit = {**first.params, "idle_exit_ns": 0.0, "idle_exit_cold_ns": 0.0}
    switch_ns = F.predict(no_exit, F.Point("timer_idle", IDLE_EXIT_DEPTH, 0, 0, 0.0, 0.0, 0),
                          levels)
    held["idle_exit_ns"] = max(0.0, held["idle_exit_ns"] - switch_ns)
    result = F.fit(points, levels, fixed={**held, **fixed})
    for k in set(held) - set(fixed):
        # measured, not given: their 1-sigma is the ladder's
        del result.fixed[k]
        result.sigma[k] = ladder["uncertainty"][k]
    result.notes[:] = [n for n in result.notes if not n.startswith(tuple(held))] + [
        "idle exit from the idle_exit benchmark's ladder (both wake paths, the sleeper's own "
        f"timer and a write from the other CPU): {held['idle_exit_ns'] / 1e3:.1f} us + "
        f"{held['idle_exit_cold_ns'] / 1e3:.1f} us x (1 - exp(-idle / "
        f"{held['idle_exit_decay_ns'] / 1e6:.2f} ms)) beyond the switch "
        f"({switch_ns / 1e3:.2f} us); the wakeup and timerwake idle points check it"]
    return result


def calibrate(out: str, work_dir: Path | None = None, from_bench: Path | None = None,
              quick: bool = False, fixed: dict | None = None, host: str = "this-vm",
              scheduler: str = "eevdf", resim: bool = True, progress=print,
              command: str = "colosim calibrate") -> dict:
    """Run (or reuse) the benchmarks, fit, check and write the profile.
    Returns {"profile": path, "report": path, "result": FitResult}."""
    target = profile_path(out)
    name = target.stem
    if work_dir is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        work_dir = Path("runs") / f"calibrate-{name}-{stamp}"
    work_dir = Path(work_dir)
    if from_bench is None:
        bench_dir = work_dir / "bench"
        bench_dir.mkdir(parents=True, exist_ok=True)
        bench.run_all(bench_dir, quick=quick, progress=progress)
    else:
        bench_dir = Path(from_bench)
        work_dir.mkdir(parents=True, exist_ok=True)
    table, fingerprint, bench_meta = read_table(bench_dir, "ctx_switch")
    points = F.points_from_bench(table)
    # the idle exit's growth with the idle time, where its ladder was measured
    ladder = None
    if (Path(bench_dir) / "idle_exit.parquet").exists():
        ladder = idle_exit_params(read_table(bench_dir, "idle_exit")[0])
        if ladder is None:
            progress("idle_exit: fewer than 4 undisturbed periods; the idle exit stays constant")
    work, idle_checks, timers = None, [], None
    if (Path(bench_dir) / "wakeup.parquet").exists():
        wake, _, wake_meta = read_table(bench_dir, "wakeup")
        # the sleeper's cgroup: colosim-bench-wakeup-*/wakeup/sleeper
        pt = F.wakeup_point(wake, int(wake_meta.get("sleeper_depth", 3)))
        if pt is not None:
            # with the ladder, one more idle wake-up checks it
            (idle_checks if ladder else points).append(pt)
    if (Path(bench_dir) / "timerwake.parquet").exists():
        timers = read_table(bench_dir, "timerwake")[0]
        # the hog's and the sleeper's cgroups: colosim-bench-timerwake-*/timerwake/*
        for pt in F.timer_points(timers, 3):
            # the idle wake-up is the wakeup benchmark's, measured with the
            # switch costs: timerwake's, often days later, checks it
            (idle_checks if pt.kind == "timer_idle" else points).append(pt)
        work = F.work_after_sleep(timers)
    progress(f"fitting {len(points)} points")
    levels = host_levels(bench_meta)
    if ladder is None:
        result = F.fit(points, levels, fixed=fixed)
    else:
        result = fit_with_ladder(points, levels, ladder, fixed or {})
    for pt in idle_checks:
        result.notes.append(
            f"{pt.label} (a check, not fitted): {pt.value_ns / 1e3:.1f} +- {pt.se_ns / 1e3:.1f} "
            f"us measured, {F.predict(result.params, pt, result.levels) / 1e3:.1f} us modelled")
    if work:
        # measured, and not a parameter: the simulator charges no slowdown
        # to the work after a sleep
        result.notes.append("work after a sleep (timerwake): " + ", ".join(
            f"{v:+.2%} wall time against the same work hot ({load} CPU)"
            for load, v in work.items()))
    simulated = resimulate(result, table, host, scheduler, progress) if resim else None
    bench_meta = {**bench_meta, "dir": str(bench_dir)}
    profile = build_profile(name, result, fingerprint, bench_meta,
                            more_benches=("idle_exit",) if ladder else ())
    fit_block = profile.pop("fit")          # put back last: the fit block stays last
    if ladder is not None:
        profile["idle_exit_spread"] = ladder["idle_exit_spread"]
        fit_block["idle_exit"] = ladder["measured"]
    timer_pt = next((pt for pt in points if pt.kind == "timer"), None)
    if timer_pt is not None:
        # the interrupt's scatter, less the switch to the sleeper the point holds
        switch_ns = F.predict({**result.params, "timer_irq_ns": 0.0}, timer_pt, levels)
        irq_spread = F.timer_irq_spread(timers, switch_ns)
        if irq_spread is not None:
            profile["timer_irq_spread"] = irq_spread
    if (Path(bench_dir) / "dispatch.parquet").exists():
        keys = dispatch_costs(read_table(bench_dir, "dispatch")[0])
        fit_block["uncertainty"].update(keys.pop("uncertainty", {}))
        profile.update(keys)
    for bench_name, costs in (("loadgen", lambda t, _meta: loadgen_costs(t)),
                              ("driver", lambda t, _meta: driver_costs(t)),
                              ("kthreads", kthread_params),
                              ("rcu", lambda t, _meta: rcu_params(t)),
                              ("rtapp_loop", lambda t, _meta: rtapp_params(t))):
        # what else runs on the host (sim/loadgen.py, sim/kthreads.py), and
        # what rt-app's busy loop costs there (sim/workloads/rtapp.py), where measured
        if (Path(bench_dir) / f"{bench_name}.parquet").exists():
            table_, _, meta_ = read_table(bench_dir, bench_name)
            keys = costs(table_, meta_)
            if keys is None:
                fit_block["notes"].append(f"{bench_name}: too few undisturbed runs to fit; "
                                          f"not modelled")
                continue
            fit_block["uncertainty"].update(keys.pop("uncertainty"))
            if "measured" in keys:
                fit_block[bench_name] = keys.pop("measured")
            profile.update(keys)
    fit_block["command"] = command
    profile["fit"] = fit_block
    if simulated is not None:
        for row in profile["fit"]["residuals"]:
            v = simulated.get(row["point"])
            row["simulated_ns"] = None if v is None else round(float(v), 1)
    write_profile(target, profile)
    report = report_markdown(name, result, fingerprint, bench_meta, simulated, command)
    if "worker_dispatch_us" in profile:
        report += ("\n## Native worker dispatch\n\nfuncworker's main thread: "
                   f"{profile['worker_dispatch_us']} us per request read, "
                   f"{profile['worker_thread_us']} us per thread created "
                   "(calibration/bench/dispatch.py; `workload.request_path=worker`).\n")
        if "worker_cold_decay_ms" in profile:
            report += (f"Each thread: {profile['worker_thread_start_us']} us before its share, "
                       f"{profile['worker_thread_exit_us']} us after it; cold (away >> "
                       f"{profile['worker_cold_decay_ms']} ms): x "
                       f"{1 + profile['worker_cold_factor']:.2f} (main thread), x "
                       f"{1 + profile['worker_cold_thread_factor']:.2f} (threads).\n")
    if resim:
        report += run_checks(result, Path(bench_dir), work_dir, host, scheduler, progress)
    (work_dir / "fit-report.md").write_text(report)
    shutil.copy(target, work_dir / target.name)
    paths = {"profile": target, "report": work_dir / "fit-report.md", "result": result,
             "work_dir": work_dir}
    if target.parent == PROFILE_DIR:
        FITS_DIR.mkdir(exist_ok=True)
        (FITS_DIR / f"{name}.md").write_text(report)
        paths["report"] = FITS_DIR / f"{name}.md"
    return paths
