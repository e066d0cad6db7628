"""`colosim validate` (calibration/validate.py): errors, KS, pass/miss with
missing values, suites, tables, the simulator replaying a real run's trace,
and (``hardware``) one tiny scenario on this host."""
import io
import math
import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from calibration import validate as v
from results import validation as vt
from cli.main import main
from scenarios.config import compose
from scenarios.runner import run_scenario


def simulator_as_host(cfg, out_dir):
    """validate's real run, done by the simulator: tests of the pipeline
    without hardware (every error 0, every spread 0)."""
    cfg = cfg.copy()
    cfg.backend = compose(["backend=sim"]).backend
    run_scenario(cfg, out_dir)


# --- errors, KS, pass / miss --------------------------------------------------
def test_relative_error():
    assert v.rel_error(100, 95) == pytest.approx(-0.05)
    assert v.rel_error(0.010, 0.012) == pytest.approx(0.2)
    assert v.rel_error(0, 0) == 0.0
    assert v.rel_error(0, 3) == math.inf and v.rel_error(0, -1) == -math.inf
    for real, sim in ((None, 1.0), (1.0, None), (math.nan, 1.0), (1.0, math.nan)):
        assert math.isnan(v.rel_error(real, sim))


def test_pass_miss_and_missing_never_passes():
    assert v.within(0.05, 0.05) is True and v.within(-0.049, 0.05) is True
    assert v.within(0.051, 0.05) is False and v.within(math.inf, 0.2) is False
    assert v.within(math.nan, 0.05) is None        # missing: neither pass nor miss
    assert v.within(0.3, None) is None             # no target
    assert vt.result_text(None, 0.05) == vt.MISSING and vt.result_text(None, math.nan) == ""
    assert vt.result_text(True, 0.1) == vt.PASS and vt.result_text(False, 0.1) == vt.MISS


def test_ks_statistic():
    rng = np.random.default_rng(0)
    a = rng.exponential(0.01, 500)
    assert v.ks(a, a) == (0.0, 1.0)
    stat, p = v.ks(a, a + 1.0)                      # disjoint
    assert stat == 1.0 and p < 1e-6
    assert all(math.isnan(x) for x in v.ks([], a))
    assert v.ks([np.nan, 0.1], [0.1])[0] == 0.0     # NaN latencies are not samples


def _summary(**kw):
    base = {"throughput_rps": 50.0, "goodput_rps": 50.0, "latency_p50_s": 0.008,
            "latency_p95_s": 0.03, "latency_p99_s": 0.05, "switch_out_rate_per_s": 100.0,
            "ctx_switch_rate_per_s": 150.0,
            "migrations": 40, "cpu_util": 0.25, "throttled_time_s": 0.0}
    base.update(kw)
    return base


def test_scenario_rows_targets_and_missing_values():
    real = _summary(switch_out_rate_per_s=math.nan, ctx_switch_rate_per_s=None,
                    migrations=None)                                 # perf unavailable
    sim = _summary(throughput_rps=52.0, latency_p50_s=0.0095, latency_p99_s=0.055)
    rows = {r["metric"]: r for r in v.scenario_rows("s", [real], sim, [[0.01, 0.02]], [0.01],
                                                   (["s-real"], "s-sim"), window_s=4.0)}
    assert list(rows) == list(v.METRICS)
    assert rows["throughput_rps"]["ok"] is True and rows["throughput_rps"]["target"] == 0.05
    assert rows["latency_p50_s"]["ok"] is False                      # +18.75% > 10%
    assert rows["latency_p99_s"]["ok"] is True                       # +10% <= 20%
    assert rows["switch_out_rate_per_s"]["ok"] is None               # missing, not 0, no pass
    assert vt.result_text(None, rows["switch_out_rate_per_s"]["target"]) == vt.MISSING
    assert math.isnan(rows["ctx_switch_rate_per_s"]["real"])
    assert math.isnan(rows["ctx_switch_rate_per_s"]["target"])       # reported, no target
    assert math.isnan(rows["migration_rate_per_s"]["real"])
    assert rows["migration_rate_per_s"]["sim"] == 10.0               # 40 over 4 s
    assert rows["goodput_rps"]["ok"] is None and math.isnan(rows["goodput_rps"]["target"])
    assert rows["throttled_time_s"]["rel_error"] == 0.0              # 0 vs 0
    assert rows["cpu_util"]["n_real"] == 2 and rows["cpu_util"]["n_sim"] == 1
    # a backend that did not run: every value missing, nothing passes
    failed = v.scenario_rows("f", [], None, note="real run failed: busy")
    assert all(math.isnan(r["real"]) and r["ok"] is None for r in failed)


def _frame():
    rows = v.scenario_rows("a", [_summary()], _summary(latency_p50_s=0.02), [[0.01]], [0.02],
                           (["a-real"], "a-sim"), window_s=4.0)
    rows += v.scenario_rows("b", [_summary(switch_out_rate_per_s=None)], _summary(), [[0.01]],
                            [0.01], (["b-real"], "b-sim"), "perf unavailable: no perf", 4.0)
    return v.to_frame(rows)


def test_tables_and_verdict():
    frame = _frame()
    text = vt.format_text(frame)
    lines = text.splitlines()
    assert lines[0].split() == list(vt.HEAD)
    p50 = next(line for line in lines if line.startswith("a") and "latency_p50_s (ms)" in line)
    assert p50.split()[-4:] == ["20", "+150.0%", "±10%", "MISS"]
    ctx_b = next(line for line in lines if line.startswith("b") and "switch_out" in line)
    assert ctx_b.split()[2] == "-" and ctx_b.split()[-1] == "missing"
    assert "b: latency KS statistic 0.000" in text and "note: perf unavailable" in text
    assert lines[-1] == vt.verdict(frame)
    assert vt.verdict(frame).startswith("verdict: 8/10 targets met in 2 scenario(s); missed: "
                                       "a latency_p50_s (+150%); missing: 1")
    md = vt.format_markdown(frame)
    assert md.startswith("| scenario | metric |") and "| ---: |" in md and "**verdict" in md
    back = pd.read_csv(io.StringIO(vt.format_csv(frame)))
    assert list(back.columns) == v.VALIDATION_SCHEMA.names and len(back) == 2 * len(v.METRICS)


# --- suites -------------------------------------------------------------------
def test_default_suite_has_the_required_scenarios_and_every_config_composes():
    suite = v.load_suite()
    kinds = {}
    for name in suite.scenarios:
        cfg = OmegaConf.to_container(compose([*suite.overrides(name, True, "real"),
                                              "calibration=default"]))
        w = cfg["workload"]
        assert cfg["host"]["name"] == "this-vm" and cfg["scheduler"]["name"] == "eevdf"
        assert cfg["duration_s"] == 5
        if w["name"] == "poisson" and w["threads_per_request"] == 1:
            kinds.setdefault("poisson", []).append(w["functions"])
            # comparable total utilisation across the densities
            assert w["functions"] * w["rate_rps"] * w["mean_service_s"] == pytest.approx(0.8)
        elif w["name"] == "poisson":
            kinds["fork-join"] = w["threads_per_request"]
        elif w["name"] == "periodic":
            kinds["periodic"] = w["quota_us"]
        else:
            kinds[w["name"]] = w["workers"]
    assert len(kinds["poisson"]) >= 3 and kinds["fork-join"] > 1 and kinds["periodic"]
    assert kinds["worker_pool"] >= 1
    full = compose([*suite.overrides("poisson-2", quick=False)])
    assert 10 <= full.duration_s <= 20
    assert v.load_suite(v.SUITES_DIR / "heldout-12cpu.yaml").scenarios


def test_unknown_names_list_the_valid_ones(tmp_path, capsys):
    suite = v.load_suite()
    assert v.select(suite, None) == list(suite.scenarios)
    assert v.select(suite, ["fork-join", "poisson-2", "fork-join"]) == ["fork-join", "poisson-2"]
    with pytest.raises(v.ValidateError, match="unknown scenario nope .*valid scenarios: "
                                              "poisson-2, poisson-8"):
        v.select(suite, ["nope"])
    with pytest.raises(v.ValidateError, match="unknown calibration profile 'nope'.*default"):
        v.check_profile("nope")
    assert main(["validate", "default", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "valid scenarios: poisson-2" in capsys.readouterr().err
    assert main(["validate", "no-such-profile"]) == 2
    assert "valid profiles" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bad_suite_files(tmp_path):
    with pytest.raises(v.ValidateError, match="does not exist; suites here: .*heldout.yaml"):
        v.load_suite(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("scenarios: {a: workload=poisson}\n")
    with pytest.raises(v.ValidateError, match="scenario a must be a list of overrides"):
        v.load_suite(bad)
    bad.write_text("scenarios: {a: []}\nreal: backend.perf=false\n")
    with pytest.raises(v.ValidateError, match="real must be a list of overrides"):
        v.load_suite(bad)
    bad.write_text("common: [host=this-vm]\n")
    with pytest.raises(v.ValidateError, match="needs `scenarios:`"):
        v.load_suite(bad)
    bad.write_text("scenarios: {a: [workload.nope=1]}\n")
    with pytest.raises(v.ValidateError, match="scenario a .*workload.nope is not a valid key"):
        v.validate("default", v.load_suite(bad), ["a"], tmp_path / "out",
                   preflight=lambda: None)
    assert not (tmp_path / "out").exists()      # configs are checked before anything runs


# --- the simulator replays the real run's trace ---------------------------------
QUICK = ["duration_s=2", "warmup_s=0.5"]


@pytest.mark.parametrize("scenario", ["poisson-32", "fork-join", "worker-pool"])
def test_the_simulator_replays_a_recorded_trace_exactly(scenario, tmp_path):
    from backends.real.trace import trace_for_real
    from results.rundir import read_run_dir
    suite = v.load_suite()
    real, sim = ([*suite.overrides(scenario, True, b), *QUICK, "calibration=default"]
                 for b in ("real", "sim"))
    # the table a real run records as trace.parquet, read back from disk
    pq.write_table(trace_for_real(OmegaConf.to_container(compose(real))),
                   tmp_path / "trace.parquet")
    recorded = pq.read_table(tmp_path / "trace.parquet")
    run_scenario(compose(sim), tmp_path / "sim")
    sim = read_run_dir(tmp_path / "sim")
    unfinished = sim.summary.column("n_unfinished")[0].as_py()
    assert sim.requests.num_rows > 10
    assert v.replay_mismatch(recorded, sim.requests, unfinished, 0.5) is None
    # and a different trace is noticed
    df = recorded.to_pandas()
    late = df.index[df.arrival_s >= 0.5]
    changed = df.copy()
    changed.loc[late[0], "demand_s"] *= 2
    assert "another demand" in v.replay_mismatch(pa.Table.from_pandas(changed), sim.requests,
                                                  unfinished, 0.5)
    extra = pd.concat([df, df.loc[[late[-1]]].assign(arrival_s=1.99, function="x")])
    assert "the trace has" in v.replay_mismatch(pa.Table.from_pandas(extra), sim.requests,
                                                unfinished, 0.5)
    fewer = df.drop(index=late[0])
    assert "not in the real run's trace" in v.replay_mismatch(
        pa.Table.from_pandas(fewer), sim.requests, unfinished, 0.5)


def test_validate_end_to_end_with_the_simulator_standing_in_for_the_host(tmp_path, monkeypatch):
    """The whole pipeline without hardware: the "real" run is a simulator run
    of the real config's scenario (so no trace.parquet and every error 0)."""
    suite_file = tmp_path / "s.yaml"
    suite_file.write_text("common: [host=this-vm, scheduler=eevdf, duration_s=2, warmup_s=0.5]\n"
                          "quick: [duration_s=1.5]\n"
                          "scenarios:\n  tiny: [workload.functions=2, workload.rate_rps=20]\n"
                          "  tiny4: [workload.functions=4, workload.rate_rps=10]\n"
                          "  hog: [workload=periodic, workload.threads=1, workload.quota_us=20000]\n")

    lines = []
    monkeypatch.setattr(v, "_run", simulator_as_host)
    # only the scenarios named, in that order; the report copes with a CPU
    # limit in runs that lack the density key (workload.functions)
    frame = v.validate("default", v.load_suite(suite_file), ["tiny", "hog", "tiny4"],
                       tmp_path / "out", quick=True, progress=lines.append,
                       preflight=lambda: None)
    assert len(lines) == 12 and lines[0] == "[1/6] tiny real: 1.5 s ..."
    back = vt.read_validation(tmp_path / "out")
    assert list(back.columns) == v.VALIDATION_SCHEMA.names and len(back) == 3 * len(v.METRICS)
    assert (back.loc[back.target.notna(), "ok"] == True).all()    # noqa: E712 - identical runs
    hog = back[(back.scenario == "hog") & (back.metric == "throttled_time_s")].iloc[0]
    assert hog.real > 0 and hog.rel_error == 0
    assert frame.equals(back)
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "hog-real", "hog-sim", "tiny-real", "tiny-sim", "tiny4-real", "tiny4-sim"]
    assert (out / "suite.yaml").read_text() == suite_file.read_text()
    page = (out / "report.html").read_text()
    assert 'id="validation--simulator-vs-this-host"' in page and "verdict: 15/15 targets met" in page
    assert page.count("<img") >= 2      # the validation CDFs and the report's own


def test_report_of_a_directory_without_validation_is_unchanged(tmp_path):
    from results.report import write_report
    assert main(["run", "host=this-vm", "duration_s=1", "warmup_s=0.2",
                 "workload.functions=2", f"output_dir={tmp_path / 'r'}"]) == 0
    page = write_report(tmp_path / "r").read_text()
    assert "Validation" not in page and 'id="latency-tails-per-policy--ccdf"' in page


# --- on this host ---------------------------------------------------------------
def _hardware_reason():
    from tests.hardware import cgroups_unavailable
    return cgroups_unavailable() or (None if shutil.which("gcc") else "needs gcc")


@pytest.mark.hardware
def test_validate_quick_on_one_tiny_scenario(tmp_path, capsys):
    reason = _hardware_reason()
    if reason:
        pytest.skip(reason)
    suite = tmp_path / "tiny.yaml"
    # flag, not reject: a busy shared host must not fail the test
    suite.write_text("common: [host=this-vm, scheduler=eevdf, warmup_s=0.5, duration_s=10]\n"
                     "real: [backend.lateness_action=flag]\n"
                     "quick: [duration_s=3]\n"
                     "scenarios:\n  tiny: [workload.functions=2, workload.rate_rps=20]\n")
    out = tmp_path / f"val-{os.getpid()}"
    assert main(["validate", "default", "tiny", "--suite", str(suite), "--quick",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/2] tiny real: 3 s ..." in captured.err and "verdict: " in captured.out
    frame = vt.read_validation(out)
    assert list(frame.columns) == v.VALIDATION_SCHEMA.names
    assert list(frame.metric) == list(v.METRICS) and set(frame.scenario) == {"tiny"}
    measured = frame.set_index("metric")
    # a real run on a disturbed host is shown but not judged (ok null)
    disturbed = bool(measured.loc["throughput_rps", "real_disturbed"])
    for m in ("throughput_rps", "latency_p50_s", "latency_p99_s", "cpu_util",
              "switch_out_rate_per_s", "ctx_switch_rate_per_s"):
        assert measured.loc[m, "real"] > 0 and measured.loc[m, "sim"] > 0, m
        judged = m in v.TARGETS and not disturbed
        assert measured.loc[m, "ok"] in ((True, False) if judged else (None,)), m
    assert 0 <= measured.loc["throughput_rps", "ks_stat"] <= 1
    # sim replayed the real trace (the note says only why a run was not judged)
    assert "did not replay" not in measured.loc["throughput_rps", "note"]
    assert disturbed == ("disturbed" in measured.loc["throughput_rps", "note"])
    assert (out / "runs" / "tiny-real" / "trace.parquet").is_file()
    assert (out / "report.html").is_file()


def test_rtapp_points_simulate_the_real_runs_calibration():
    """A "CPU<n>" file runs the iterations rt-app's calibration before each
    real run told it; the simulator takes the real runs' value (lower
    median), the profile's otherwise, and says so; a file's own number and
    other workloads are left alone."""
    from results.rundir import RunDir

    def real(pload, how="CPU0, measured by rt-app before the run"):
        return RunDir(None, pa.Table.from_pylist([{"rtapp_ns_per_loop": float(pload),
                                                   "rtapp_calibration": how}]), None, None, {})
    cfg = compose(["workload=rtapp", "workload.file=scenarios/rtapp/periodic.json",
                   "host=this-vm", "calibration=this-vm"])
    notes = []
    v.same_rtapp_calibration(cfg, [real(16), real(15), real(18)], notes)
    assert cfg.calibration.rtapp_calibration_ns == 16
    assert notes == ["rt-app's calibration in the real runs: 15, 16, 18 ns per loop; "
                     "the simulator ran with 16"]
    cfg = compose(["workload=rtapp", "workload.file=scenarios/rtapp/periodic.json",
                   "host=this-vm", "calibration=this-vm"])
    profile = cfg.calibration.rtapp_calibration_ns
    v.same_rtapp_calibration(cfg, [real(25, "the file's ns per loop")], notes := [])
    assert cfg.calibration.rtapp_calibration_ns == profile and notes == []
    poisson = compose(["workload=poisson", "calibration=this-vm"])
    v.same_rtapp_calibration(poisson, [real(16)], notes)
    assert poisson.calibration.rtapp_calibration_ns == profile and notes == []
