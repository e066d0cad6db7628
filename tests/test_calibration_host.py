"""Host calibration (calibration/fit.py, profile.py, calibrate.py, simbench.py
and the simulator's twin of the benchmark, sim/workloads/pingpong.py).

The fit's formulas must be what the simulator does: the simulator runs the
ping-pong benchmark with known costs and the formulas must reproduce every
configuration's per-switch cost.  Then the fit must recover those known
costs from the simulator's measurements with noise added, within the
uncertainty it reports."""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from calibration import checks
from calibration import fit as F
from calibration import simbench
from calibration.bench import density
from calibration.bench.common import write_bench
from calibration.profile import build_profile, cost_params, read_profile, write_profile
from results import validation as vt

TRUTH = {"direct_ns": 3000.0, "per_level_ns": 800.0, "migration_ns": 8000.0,
         "queue_ns_per_log2": 500.0, "idle_exit_ns": 40_000.0,
         "L1d_ns_per_line": 3.0, "L2_ns_per_line": 8.0, "L3_ns_per_line": 20.0,
         "L1d_bytes": 40 << 10, "L2_bytes": 1600 << 10, "L3_bytes": 100 << 20,
         # the ping-pong and wakeup benchmarks do not measure timers (timerwake does)
         "timer_irq_ns": 0.0, "timer_slack_ns": 0.0,
         # nor the idle exit's growth (the idle_exit benchmark's ladder does)
         "idle_exit_cold_ns": 0.0, "idle_exit_decay_ns": 1.0}
TIMERS = {"timer_irq_ns", "timer_slack_ns"}
GROWTH = {"idle_exit_cold_ns", "idle_exit_decay_ns"}
LEVELS = F.cache_levels({"L1d": 48 << 10, "L1i": 32 << 10, "L2": 2 << 20, "L3": 256 << 20})


def truth_config():
    return F.FitResult(dict(TRUTH), {}, {}, LEVELS, [], [], [], 0.0, 1).cost_config()


WS = [0, 16 << 10, 24 << 10, 32 << 10, 512 << 10, 1 << 20, 1536 << 10, 4 << 20,
      56 << 20, 64 << 20, 80 << 20]
CONFIGS = ([("overhead", 2, 0, ws) for ws in WS]
           + [("pingpong", lv, 0, 0) for lv in (0, 2, 4, 6, 8)]
           + [("pingpong", 2, b, 0) for b in (1, 2, 4, 8, 16, 32)]
           + [("pingpong", 2, 0, ws) for ws in WS[1:]]
           + [(e, 2, 0, ws) for ws in (0, 1 << 20) for e in ("migrate", "migrate_ref")])


def hop(ws):          # a warm pass over the working set plus the pipe calls
    return 1500 + ws / 64 * 0.6


def rounds(ws):       # batches of about 2 ms, as the real benchmark sizes them
    return max(2, int(2e6 // (2 * hop(ws) + 20_000)))


@pytest.fixture(scope="module")
def sim_table():
    return simbench.simulate(truth_config(), CONFIGS, hop, rounds, batches=12)


@pytest.fixture(scope="module")
def sim_points(sim_table):
    wake = simbench.simulate_wakeup(truth_config(), depth=3)
    return F.points_from_bench(sim_table) + [F.wakeup_point(wake, 3)]


def _noisy(table: pa.Table, sigma: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    el = table.column("elapsed_ns").to_numpy() * rng.lognormal(0.0, sigma, table.num_rows)
    i = table.schema.get_field_index("elapsed_ns")
    return table.set_column(i, "elapsed_ns", pa.array(el.astype(np.int64)))


def test_cache_levels_from_sysfs_sizes():
    assert [(lv.name, lv.bytes, lv.shared) for lv in LEVELS] == [
        ("L1d", 48 << 10, False), ("L2", 2 << 20, False), ("L3", 256 << 20, True)]


def test_simulated_benchmark_matches_the_fit_formulas(sim_points):
    """Every configuration's per-switch cost in the simulator, and the idle
    wake-up's latency, equal the fit's closed form at the true parameters:
    to rounding of whole ns, and to 1e-4 at 56-80 MiB, where a switch takes
    milliseconds of refill and some batches come out 500 ns (one run-queue
    term at nr_running 2) longer; not traced further."""
    assert len(sim_points) == len(CONFIGS) - len(WS) - 2 + 1   # baselines out, wakeup in
    for pt in sim_points:
        assert F.predict(TRUTH, pt, LEVELS) == pytest.approx(pt.value_ns, abs=3.0, rel=1e-4), \
            pt.label


def _noisy_points(sim_table, sigma, seed):
    wake = simbench.simulate_wakeup(truth_config(), depth=3)
    lat = wake.column("lateness_ns").to_numpy() * np.random.default_rng(seed).lognormal(
        0.0, sigma, wake.num_rows)
    wake = wake.set_column(3, "lateness_ns", pa.array(lat.astype(np.int64)))
    return F.points_from_bench(_noisy(sim_table, sigma, seed)) + [F.wakeup_point(wake, 3)]


def test_fit_recovers_known_parameters_within_their_uncertainty(sim_table):
    result = F.fit(_noisy_points(sim_table, 0.01, seed=3), LEVELS)
    assert set(result.fixed) == TIMERS | GROWTH and all(result.params[k] == 0 for k in TIMERS)
    assert result.params["idle_exit_cold_ns"] == 0
    for key, true in TRUTH.items():
        if key in TIMERS | GROWTH:
            continue
        got, sigma = result.params[key], result.sigma[key]
        assert math.isfinite(sigma) and sigma < 0.25 * true, (key, got, sigma)
        assert abs(got - true) <= 3 * sigma, (key, got, true, sigma)
    assert result.chi2 / result.dof < 2


def test_fit_fixes_what_the_points_cannot_move(sim_table):
    """Without migrate rows, busy cgroups or the wake-up, those parameters
    are fixed and named in the notes, not invented."""
    keep = [e != "migrate" and b == 0 for e, b in zip(
        sim_table.column("experiment").to_pylist(), sim_table.column("busy_cgroups").to_pylist())]
    result = F.fit(F.points_from_bench(sim_table.filter(pa.array(keep))), LEVELS)
    assert {"migration_ns", "queue_ns_per_log2", "idle_exit_ns"} <= set(result.fixed)
    assert any(n.startswith("migration_ns fixed at 5000") for n in result.notes)
    assert result.params["direct_ns"] == pytest.approx(TRUTH["direct_ns"], rel=0.03)


def test_fit_rejects_unknown_fixed_parameter(sim_table):
    with pytest.raises(ValueError, match="cannot fix"):
        F.fit(F.points_from_bench(sim_table), LEVELS, fixed={"bogus_ns": 1})


def test_points_need_overhead_pairs():
    t = pa.table({"experiment": ["pingpong"], "levels": [2], "busy_cgroups": [0],
                  "ws_bytes": [0], "rounds": [10], "elapsed_ns": [100_000]})
    with pytest.raises(ValueError, match="no pingpong/overhead pairs"):
        F.points_from_bench(t)


def test_pingpong_workload_rejects_odd_levels():
    from sim.workloads.pingpong import partner_paths
    assert partner_paths(0) == ("pingpong", "pingpong")
    assert partner_paths(4) == ("pingpong/a1/a2", "pingpong/b1/b2")
    with pytest.raises(ValueError, match="even"):
        partner_paths(3)


def test_profile_round_trips_and_composes(tmp_path, sim_table):
    from omegaconf import OmegaConf

    from scenarios.schema import CalibrationConfig
    result = F.fit(_noisy_points(sim_table, 0.01, seed=5), LEVELS)
    fp = {"cpu_model": "Test CPU", "kernel": "6.18", "scheduler": "eevdf", "cpus": 2}
    prof = build_profile("synthetic", result, fp, {"quick": True})
    path = write_profile(tmp_path / "synthetic.yaml", prof)
    back = read_profile(str(path))
    assert back == prof
    assert back["fit"]["fingerprint"] == fp
    assert len(back["fit"]["residuals"]) == len(result.points)
    assert set(back["fit"]["uncertainty"]) == set(F.param_names(LEVELS))
    assert [lv["name"] for lv in back["cache_levels"]] == ["L1d", "L2", "L3"]
    # the simulator's config schema accepts it as a calibration option
    merged = OmegaConf.merge(OmegaConf.structured(CalibrationConfig), yaml.safe_load(
        path.read_text()))
    from sim.costmodel import CostModel
    model = CostModel.from_config(merged)
    assert model.direct_ns == int(cost_params(back)["direct_ns"])
    # the effective capacities, fitted below the sysfs sizes
    assert [c for c, _, _ in model.cache_levels] == pytest.approx(
        [TRUTH["L1d_bytes"], TRUTH["L2_bytes"], TRUTH["L3_bytes"]], rel=0.1)


def _bench_dir(tmp_path, sim_table):
    """A benchmark directory of the simulator's ctx_switch and wakeup runs at
    the truth."""
    bench = tmp_path / "bench"
    bench.mkdir()
    table = _noisy(sim_table, 0.01, seed=9)
    caches = {lv.name: lv.bytes for lv in LEVELS}
    meta = {b"colosim.fingerprint": json.dumps({"cpu_model": "Synthetic", "kernel": "x"}),
            b"colosim.bench": json.dumps({"bench": "ctx_switch", "quick": True,
                                          "caches": caches})}
    pq.write_table(table.replace_schema_metadata(meta), bench / "ctx_switch.parquet")
    wake = simbench.simulate_wakeup(truth_config())
    pq.write_table(wake.replace_schema_metadata({b"colosim.bench": json.dumps({"bench": "wakeup"})}),
                   bench / "wakeup.parquet")
    return bench


def test_calibrate_cli_fits_recorded_tables(tmp_path, sim_table, capsys):
    """`colosim calibrate --from-bench` on a benchmark directory: profile,
    report with the re-simulated column, values near the truth."""
    from cli.main import main

    bench = _bench_dir(tmp_path, sim_table)
    out = tmp_path / "prof.yaml"
    rc = main(["calibrate", "--out", str(out), "--from-bench", str(bench),
               "--dir", str(tmp_path / "work"), "--host", "this-vm", "--scheduler", "eevdf"])
    assert rc == 0
    prof = read_profile(str(out))
    assert prof["direct_ns"] == pytest.approx(TRUTH["direct_ns"], rel=0.05)
    assert prof["fit"]["fingerprint"]["cpu_model"] == "Synthetic"
    assert prof["idle_exit_ns"] == pytest.approx(TRUTH["idle_exit_ns"], rel=0.05)
    resim = {r["point"]: r["simulated_ns"] for r in prof["fit"]["residuals"]}
    for r in prof["fit"]["residuals"]:
        if r["kind"] != "wakeup":     # the re-simulation runs the ping-pong configurations
            # the simulator with the fitted values reproduces each measurement
            assert resim[r["point"]] == pytest.approx(r["measured_ns"], rel=0.05), r["point"]
    report = (tmp_path / "work" / "fit-report.md").read_text()
    assert "| switch levels=8 busy=0 ws=0 |" in report
    assert "profile:" in capsys.readouterr().out


def test_calibrate_cli_errors(tmp_path, capsys):
    from cli.main import main
    assert main(["calibrate", "--out", str(tmp_path / "p.yaml"), "--from-bench",
                 str(tmp_path), "--fix", "direct_ns"]) == 2
    assert "expected PARAM=VALUE" in capsys.readouterr().err
    assert main(["calibrate", "--out", str(tmp_path / "p.yaml"), "--from-bench",
                 str(tmp_path)]) == 2
    assert "ctx_switch.parquet not found" in capsys.readouterr().err


# --- on this host (make test-slow; needs root, cgroups, gcc) ------------------
# CI guards the two held-out scenarios whose errors sit well inside the
# targets; the full suite's table, misses and borderline cases included
# (worker-pool and fork-join p50 at -7..-10%), is in docs/calibration-host.md
# ("Validation").  What the committed profile is known to miss there, and
# why: the test fails if one of these starts passing, so the list and the
# docs stay true.
CI_SCENARIOS = ("poisson-32", "periodic-quota")
KNOWN_MISSES: set[tuple[str, str]] = {
    # none since the load generator and the kernel threads are modelled
    # (sim/loadgen.py, sim/kthreads.py): poisson-32's switch-outs, ~35 %
    # short before, are -15 % (2026-11-26)
}


def _validate(main, scenarios, out):
    """Run `colosim validate this-vm` on ``scenarios``: the targeted rows,
    the unexpected misses, and the known misses that now pass."""
    assert main(["validate", "this-vm", *scenarios, "--out", str(out)]) == 0
    frame = vt.read_validation(out)
    print(vt.format_text(frame))
    assert set(frame.scenario) == set(scenarios), "a real run was rejected (see notes)"
    disturbed = frame[frame.real_disturbed.eq(True)]
    if len(disturbed):
        print("not compared, the real host was disturbed:", *disturbed.note.unique(), sep="\n")
    targeted = frame[frame.target.notna() & ~frame.real_disturbed.eq(True)]
    known = np.array([(s, m) in KNOWN_MISSES for s, m in zip(targeted.scenario,
                                                              targeted.metric)], dtype=bool)
    missed = (targeted.ok != True).to_numpy()                       # noqa: E712
    return targeted, targeted[missed & ~known], targeted[~missed & known]


@pytest.mark.slow
@pytest.mark.hardware
def test_reduced_calibrate_and_validate_on_this_host(tmp_path, capsys):
    """CI's reduced calibration loop on this machine: a quick measurement
    and fit must reproduce the committed this-vm profile's main costs (to
    the run-to-run spread seen here), and
    the committed profile must meet issue 8's targets on part of the
    held-out suite, except the known misses above."""
    import shutil

    from cli.main import main
    from tests.hardware import cgroups_unavailable
    reason = cgroups_unavailable() or (None if shutil.which("gcc") else "needs gcc")
    if reason:
        pytest.skip(reason)
    out = tmp_path / "quick.yaml"
    rc = main(["calibrate", "--out", str(out), "--quick", "--dir", str(tmp_path / "cal"),
               "--no-resimulate"])
    if rc != 0 and "measured on a disturbed host" in capsys.readouterr().err:
        # calibrate refuses to fit a benchmark whose every sweep the host
        # disturbed: nothing to compare, as with a disturbed real run
        pytest.skip("calibrate refused: the host was disturbed during a benchmark")
    assert rc == 0
    quick, committed = read_profile(str(out)), read_profile("this-vm")

    # within a factor of 3 of the committed value at the speed the vCPUs ran
    # at: between calibrate runs on this VM direct_ns has ranged 1.06-2.28 us
    # (2.2x the committed value for an hour on 2026-11-26), far more than one
    # run's 1-sigma, and with the VM at 0.6 of its speed (rt-app's loop at 32 ns
    # against the profile's 20.5, 2026-11-28) a quick run measured 3.28 us.
    # The quick run's own rtapp_loop benchmark measures that speed, so the
    # committed cost is scaled by it (docs/calibration-host.md, "Reproducibility")
    speed = quick["rtapp_loop_ns"] / committed["rtapp_loop_ns"] \
        if quick.get("rtapp_loop_ns") and committed.get("rtapp_loop_ns") else 1.0
    expect = committed["direct_ns"] * speed
    assert expect / 3 <= quick["direct_ns"] <= expect * 3, (quick["direct_ns"], speed)
    # the idle wake-up latency moved between 22 and 120 us from run to run
    # and within the hour: only that it is a VM's (tens of us, not ns or
    # ms) is reproducible; the idle_exit ladder gives it (its medians, both
    # paths), and its fitted growth stays within what was measured
    # (no ladder when the host disturbed its periods: calibrate then keeps
    # the idle exit constant and says so)
    if "idle_exit" in quick["fit"]:
        ladder = [v for by_period in quick["fit"]["idle_exit"]["median_ns_by_period"].values()
                  for v in by_period.values()]
        assert ladder and all(5_000 <= v <= 1_000_000 for v in ladder), ladder
    assert 5_000 <= quick["idle_exit_ns"] + quick["idle_exit_cold_ns"] <= 1_000_000, quick
    capsys.readouterr()
    # full-length runs (15 s): quick ones (5 s) leave p50 too noisy for a 10% target
    targeted, unexpected, now_pass = _validate(main, CI_SCENARIOS, tmp_path / "val")
    if not unexpected.empty:
        # this VM's real p50 moves ~10% between runs minutes apart (8.0 and
        # 8.8 ms for poisson-32, the simulator's 7.79 both times): a miss
        # counts only if it happens again on a second run of its scenario
        print("missed once, re-running:", unexpected[["scenario", "metric", "rel_error"]])
        again = tuple(sorted(set(unexpected.scenario)))
        _, repeated, _ = _validate(main, again, tmp_path / "val-again")
        unexpected = unexpected.merge(repeated[["scenario", "metric"]])
    assert unexpected.empty, unexpected[["scenario", "metric", "real", "sim", "rel_error"]]
    if targeted.empty:
        pytest.skip("every real run was measured on a disturbed host: nothing compared "
                    "(backends/real/disturbance.py)")
    assert now_pass.empty, f"known misses now pass, update KNOWN_MISSES and the docs:\n{now_pass}"


def test_calibrate_takes_the_idle_exit_from_its_ladder(tmp_path, sim_table):
    """With idle_exit.parquet the idle exit's three terms come from its
    ladder (less the switch to its sleeper), the wakeup point becomes a
    check, and the profile says so."""
    from calibration.bench import timerwake
    from calibration.bench.idle_exit import wake_ns
    from calibration.calibrate import calibrate

    bench = _bench_dir(tmp_path, sim_table)
    a, b, tau = 30_000.0, 60_000.0, 3e6
    rows = [{"repeat": r, "sleeper": "fifo-50us", "load": "idle", "kind": kind,
             "period_ns": p, "lateness_ns": int(wake_ns(p, a, b, tau) + d),
             "steal_frac": 0.0, "other_frac": 0.0, "host_disturbed": False}
            for r in range(3) for kind in ("wake", "ipi")
            for p in (250_000, 1_000_000, 4_000_000, 10_000_000, 20_000_000)
            for d in (-500, 0, 500)]
    pq.write_table(pa.Table.from_pylist(rows, schema=timerwake.SCHEMA).replace_schema_metadata(
        {b"colosim.bench": json.dumps({"bench": "idle_exit"})}), bench / "idle_exit.parquet")
    out = calibrate(str(tmp_path / "prof.yaml"), work_dir=tmp_path / "work", from_bench=bench,
                    resim=False, progress=lambda *_: None)
    prof = read_profile(str(out["profile"]))
    switch = TRUTH["direct_ns"] + 3 * TRUTH["per_level_ns"]
    assert prof["idle_exit_ns"] == pytest.approx(a - switch, rel=0.03)
    assert prof["idle_exit_cold_ns"] == pytest.approx(b, rel=0.01)
    assert prof["idle_exit_decay_ns"] == pytest.approx(tau, rel=0.02)
    assert prof["fit"]["uncertainty"]["idle_exit_cold_ns"] != "fixed"
    assert set(prof["fit"]["idle_exit"]["median_ns_by_period"]) == {"wake", "ipi"}
    # the scatter around the curve: the wake-ups were +-500 ns about it
    assert prof["idle_exit_spread"][3] == 1.0 and len(prof["idle_exit_spread"]) == 7
    assert 0.9 < prof["idle_exit_spread"][0] < 1 < prof["idle_exit_spread"][-1] < 1.1
    assert "wakeup" not in {r["kind"] for r in prof["fit"]["residuals"]}
    notes = "\n".join(prof["fit"]["notes"])
    assert "idle_exit benchmark's ladder" in notes and "(a check, not fitted)" in notes


def _density_table(drifts: list[float], useful: list[float]) -> pa.Table:
    """Two hogs of N = 2 per repetition, each given half of ``useful`` of a 1 s
    sample at 100 ns an iteration alone, with 250 switch-outs a second."""
    rows = []
    for rep, (drift, u) in enumerate(zip(drifts, useful)):
        for i in range(2):
            rows.append({"repeat": rep, "n_hogs": 2, "hog_ws_bytes": 0,
                         "cgroup": f"density/hog{i}", "iterations": int(u / 2 * 1e7),
                         "elapsed_ns": 1_000_000_000, "cpu_usage_ns": 500_000_000,
                         "context_switches": 125 + rep, "cpu_migrations": 0,
                         "perf_window_ns": 1_000_000_000, "ns_per_iteration_alone": 100.0,
                         "alone_drift": drift})
    return pa.Table.from_pylist(rows, schema=density.SCHEMA)


def test_density_check_leaves_out_repetitions_whose_reference_drifted():
    over = density.DRIFT_LIMIT * 1.5
    t = _density_table([0.0, -over, 0.01, -0.005], [0.99, 0.90, 0.97, 0.98])
    [row] = checks.density_rows(t, truth_config(), "generic", "cfs", {"cpu": 0})
    assert (row["repeats_kept"], row["repeats"]) == (3, 4)
    assert row["useful_cpu_real"] == pytest.approx(0.98)
    assert (row["useful_cpu_real_min"], row["useful_cpu_real_max"]) == \
        pytest.approx((0.97, 0.99))
    # switch rate: the median over every repetition (perf is not drift-prone)
    assert row["switch_outs_per_s_real"] == pytest.approx(np.median([250, 252, 254, 256]))
    # two hogs on one simulated CPU: busy but for the switches' cost
    assert 0.95 < row["useful_cpu_sim"] < 1.0
    md = checks.markdown({"density": [row]})
    assert "| 2 | 0 KiB | 253 |" in md and "0.970–0.990 | 3/4 |" in md


def test_density_check_without_a_steady_repetition_has_no_useful_cpu():
    t = _density_table([0.5, -0.5], [0.99, 0.98])
    [row] = checks.density_rows(t, truth_config(), "generic", "cfs", {"cpu": 0})
    assert row["repeats_kept"] == 0 and math.isnan(row["useful_cpu_real"])


def test_an_older_density_recording_is_named_and_its_check_left_out(tmp_path):
    """A density.parquet recorded before the benchmark had repetitions and
    drift columns: the fit report's checks skip it, saying what to re-run,
    instead of failing the calibration."""
    old = _density_table([0.0], [0.99]).drop(["repeat", "alone_drift"])
    assert checks.missing_columns("density", old) == ["repeat", "alone_drift"]
    assert checks.missing_columns("density", _density_table([0.0], [0.99])) == []
    write_bench(old, tmp_path, {"bench": "density", "cpu": 0})
    said = []
    from calibration.calibrate import run_checks
    md = run_checks(F.FitResult(dict(TRUTH), {}, {}, LEVELS, [], [], [], 0.0, 1), tmp_path,
                    tmp_path, "generic", "cfs", said.append)
    assert md == "" and any("no repeat, alone_drift" in s and "calibration.bench.density" in s
                            for s in said)
