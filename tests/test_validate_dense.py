"""The dense suite and `colosim validate --repeat` (calibration/validate.py,
results/validation.py): the spread and the judgement against max(target,
spread) on synthetic values, disturbed repetitions left out and counted,
points with too few repetitions not compared, rt-app per-task rows; the
suite file composing and running in the simulator; (``slow``,
``hardware``) two points x 3 repetitions on this host."""
import math
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
from omegaconf import OmegaConf

from calibration import validate as v
from cli.main import main
from results import validation as vt
from results.schema import RTAPP
from tests.test_validate import simulator_as_host


# --- the judgement -------------------------------------------------------------
def test_judge_takes_the_median_and_the_spread_of_the_repetitions():
    j = v.judge([100.0, 90.0, 120.0], 108.0, 0.05, repeat=3)
    assert j["real"] == 100.0 and (j["real_lo"], j["real_hi"]) == (90.0, 120.0)
    assert j["spread"] == pytest.approx(0.20)          # 120 is 20 % from the median
    assert j["rel_error"] == pytest.approx(0.08)
    assert j["tolerance"] == pytest.approx(0.20)       # max(5 %, 20 %)
    assert j["ok"] is True                             # 8 % off, but within the host's noise
    assert v.judge([100.0, 90.0, 120.0], 125.0, 0.05, 3)["ok"] is False   # 25 % > 20 %


def test_a_quiet_host_keeps_the_target():
    j = v.judge([100.0, 101.0, 99.0], 108.0, 0.05, repeat=3)
    assert j["spread"] == pytest.approx(0.01) and j["tolerance"] == 0.05
    assert j["ok"] is False                            # 8 % off a host that repeats to 1 %


def test_one_repetition_is_the_old_rule():
    j = v.judge([100.0], 104.0, 0.05)
    assert j["spread"] == 0.0 and j["tolerance"] == 0.05 and j["ok"] is True
    assert v.judge([100.0], 106.0, 0.05)["ok"] is False


def test_too_few_repetitions_or_values_are_not_judged():
    assert v.judge([100.0], 100.0, 0.05, repeat=3)["ok"] is None     # 1 of 3
    assert v.judge([100.0, math.nan, None], 100.0, 0.05, 3)["ok"] is None
    j = v.judge([], 100.0, 0.05, 3)
    assert math.isnan(j["real"]) and j["ok"] is None
    assert v.judge([1.0, 1.0], 5.0, None, 2)["ok"] is None            # no target


def test_ks_over_repetitions_reports_the_median_and_the_hosts_own_spread():
    rng = np.random.default_rng(1)
    reps = [rng.exponential(1.0, 400) for _ in range(3)]
    same = v.ks_repeated(reps, rng.exponential(1.0, 400))
    far = v.ks_repeated(reps, rng.exponential(1.0, 400) + 2.0)
    assert same["ks_stat"] < 0.15 and far["ks_stat"] > 0.6
    assert 0 < same["ks_spread"] < 0.15 and far["ks_spread"] == same["ks_spread"]
    stats = sorted(v.ks(r, reps[0])[0] for r in reps)
    assert v.ks_repeated(reps, reps[0])["ks_stat"] == stats[1]      # the middle one
    assert math.isnan(v.ks_repeated(reps[:1], reps[0])["ks_spread"])


def _summary(disturbed=False, **kw):
    base = {"throughput_rps": 50.0, "goodput_rps": 50.0, "latency_p50_s": 0.008,
            "latency_p95_s": 0.03, "latency_p99_s": 0.05, "switch_out_rate_per_s": 100.0,
            "ctx_switch_rate_per_s": 150.0, "migrations": 40, "cpu_util": 0.25,
            "throttled_time_s": 0.0, "colosim_cpu_frac": 0.02, "host_disturbed": disturbed,
            "host_disturbed_reason": "other load 9%" if disturbed else ""}
    base.update(kw)
    return base


def _rows(reals, sim, repeat=None):
    lat = [np.full(10, r["latency_p50_s"]) for r in reals]
    runs = ([f"p-real-{i}" for i in range(1, len(reals) + 1)], "p-sim")
    return {r["metric"]: r for r in v.scenario_rows("p", reals, sim, lat,
                                                   np.full(10, sim["latency_p50_s"]), runs,
                                                   window_s=5.0, repeat=repeat)}


def test_disturbed_repetitions_are_left_out_and_counted():
    reals = [_summary(switch_out_rate_per_s=100.0), _summary(True, switch_out_rate_per_s=500.0),
             _summary(switch_out_rate_per_s=110.0)]
    rows = _rows(reals, _summary(switch_out_rate_per_s=104.0))
    r = rows["switch_out_rate_per_s"]
    assert r["repeat"] == 3 and r["n_reps"] == 2 and r["n_disturbed"] == 1
    assert r["real"] == 105.0 and r["real_hi"] == 110.0      # the disturbed 500 is out
    assert r["ok"] is True and r["real_disturbed"] is False
    assert r["real_run"] in ("p-real-1", "p-real-3")         # never the disturbed one
    assert vt.row_result(r) == vt.PASS


def test_a_point_with_one_undisturbed_repetition_is_not_compared():
    reals = [_summary(), _summary(True), _summary(True)]
    rows = _rows(reals, _summary(latency_p50_s=0.1))
    p50 = rows["latency_p50_s"]
    assert p50["ok"] is None and p50["n_reps"] == 1 and vt.not_compared(p50)
    assert vt.row_result(p50) == vt.NOT_COMPARED
    frame = v.to_frame(list(rows.values()))
    line = vt.verdict(frame)
    assert line.startswith("verdict: 0/0 targets met")
    assert "not compared, fewer than 2 undisturbed repetitions: p" in line
    # every repetition flagged: disturbed, as with one run
    rows = _rows([_summary(True), _summary(True)], _summary())
    assert vt.row_result(rows["cpu_util"]) == vt.DISTURBED and rows["cpu_util"]["ok"] is None


def test_the_table_shows_the_spread_and_the_verdict_names_it():
    reals = [_summary(latency_p50_s=x) for x in (0.010, 0.009, 0.012)]
    frame = v.to_frame(list(_rows(reals, _summary(latency_p50_s=0.013)).values()))
    assert vt.table_head(frame) == vt.HEAD_REPEATED
    text = vt.format_text(frame)
    p50 = next(line for line in text.splitlines() if "latency_p50_s" in line)
    # median 10 ms, range 9-12, sim 13: +30 % against max(10 %, 20 %)
    assert p50.split()[3:] == ["10", "9–12", "13", "+30.0%", "±10%", "±20.0%", "MISS"]
    assert "p latency_p50_s (+30%, spread ±20%)" in vt.verdict(frame)
    assert "median of 3 undisturbed of 3 real repetitions" in text
    md = vt.format_markdown(frame)
    assert md.splitlines()[0] == "| " + " | ".join(vt.HEAD_REPEATED) + " |"
    # one repetition: the table is the single-run one
    single = v.to_frame(list(_rows(reals[:1], _summary()).values()))
    assert vt.table_head(single) == vt.HEAD
    assert "spread" not in vt.verdict(single)


def _rtapp_table(task_lat: dict[str, list[int]], c_period=10000):
    rows = []
    for task, lats in task_lat.items():
        for i, lat in enumerate(lats):
            rows.append({"task": task, "cgroup": "/", "idx": 0, "thread_loop": i, "phase": 0,
                         "phase_loop": i, "perf": None, "run_us": 1000, "period_us": 10000,
                         "start_us": i * 10000, "end_us": i * 10000 + 1000,
                         "rel_st_us": i * 10000, "slack_us": 9000 - lat,
                         "c_duration_us": 1000, "c_period_us": c_period if task != "hog-1"
                         else 0, "wu_lat_us": lat})
    return pa.Table.from_pylist(rows, schema=RTAPP)


def test_rtapp_rows_judge_the_wakeup_distribution_per_task():
    rng = np.random.default_rng(2)

    def lat(shift):
        return list((rng.exponential(30, 300) + shift).astype(int))
    reals = [_rtapp_table({"rr-0": lat(30), "hog-1": [0] * 300}) for _ in range(3)]
    near = _rtapp_table({"rr-0": lat(30), "hog-1": [0] * 300})
    far = _rtapp_table({"rr-0": lat(0), "hog-1": [0] * 300})
    summaries = [{"host_disturbed": False}] * 3
    runs = (["r-real-1", "r-real-2", "r-real-3"], "r-sim")
    ok = {(r["task"], r["metric"]): r for r in v.rtapp_rows("r", summaries, reals, near, 0.0,
                                                            runs, 3)}
    miss = {(r["task"], r["metric"]): r for r in v.rtapp_rows("r", summaries, reals, far, 0.0,
                                                              runs, 3)}
    # the hog has no timer: only its loop period
    assert ("hog-1", "rtapp_wakeup_latency_p50_s") not in ok
    assert ("hog-1", "rtapp_period_p50_s") in ok
    w = ok["rr-0", "rtapp_wakeup_latency_p50_s"]
    assert w["ks_target"] == 0.1 and w["ok"] is True and math.isnan(w["target"])
    assert w["n_reps"] == 3 and w["real"] == pytest.approx(50e-6, rel=0.3)
    m = miss["rr-0", "rtapp_wakeup_latency_p50_s"]
    assert m["ok"] is False and m["ks_stat"] > 0.3
    assert m["rel_error"] < -0.3                              # the sim wakes 30 us sooner
    assert miss["rr-0", "rtapp_slack_p50_s"]["ok"] is None    # shown, no target
    frame = v.to_frame(list(miss.values()))
    assert vt.row_result(m).startswith("MISS (KS")
    assert "r [rr-0] rtapp_wakeup_latency_p50_s KS" in vt.verdict(frame)
    assert "an idle CPU's wake-up and the busy CPU's timer interrupt" in vt.miss_lines(frame)[0]
    # an rt-app point's CPU miss points at rt-app's own loop, not at the host's losses
    cpu = {"scenario": "r", "metric": "cpu_util", "real": 0.2, "sim": 0.24}
    assert vt.candidate_mechanism(cpu, frame).startswith("rt-app's busy loop")
    assert "useful CPU the host loses" in vt.candidate_mechanism({**cpu, "scenario": "f"}, frame)
    # a percentile the host's own runs spread far (lat-hogs64's p99) says so
    p99 = {"scenario": "f", "metric": "latency_p99_s", "real": 0.84e-3, "sim": 1.26e-3,
           "real_lo": 0.66e-3, "real_hi": 0.96e-3}
    assert "the host's own runs range 0.66-0.96ms" in vt.candidate_mechanism(p99, frame)
    assert "runs range" not in vt.candidate_mechanism({**p99, "real_hi": 0.7e-3}, frame)


# --- the dense suite -------------------------------------------------------------
def test_the_dense_suite_walks_the_ladder_and_repeats():
    from scenarios.config import compose
    suite = v.load_suite("dense")
    assert suite.path == v.SUITES_DIR / "dense.yaml" and suite.repeat >= 3
    ladder, rtapp, hogs = {}, set(), set()
    for name in suite.scenarios:
        cfg = OmegaConf.to_container(compose([*suite.overrides(name, False, "real"),
                                              "calibration=this-vm"]))
        w = cfg["workload"]
        assert cfg["host"]["name"] == "this-vm" and cfg["scheduler"]["name"] == "eevdf"
        if w["name"] == "poisson":
            assert w["request_path"] == "worker"
            rho = w["functions"] * w["rate_rps"] * w["mean_service_s"] / 2
            ladder.setdefault(w["functions"], set()).add(round(rho, 6))
        elif w["name"] == "rtapp":
            rtapp.add(os.path.basename(w["file"]))
        else:
            shares = {g.get("cgroup_shares") for g in w["groups"]} - {None}
            hogs |= shares
    assert len(ladder) >= 4 and min(ladder) <= 8 and max(ladder) >= 256
    for loads in ladder.values():
        assert {0.6, 0.85, 0.95} <= loads and max(loads) > 1
    assert {"periodic.json", "mixed_nice.json", "cgroup_weighted.json", "rr_fair.json",
            "overloaded.json"} <= rtapp
    assert len(hogs) >= 3
    # the documented budget: 3 repetitions of every point in about 20 minutes
    full = compose([*suite.overrides(next(iter(suite.scenarios)), False)])
    assert len(suite.scenarios) * suite.repeat * (full.duration_s + 4) <= 20 * 60


def test_every_dense_point_runs_quick_in_the_simulator(tmp_path):
    from scenarios.config import compose
    from scenarios.runner import run_scenario
    suite = v.load_suite("dense")
    for name in suite.scenarios:
        cfg = compose([*suite.overrides(name, True, "sim"), "calibration=this-vm"])
        assert cfg.duration_s == 3
        run_scenario(cfg, tmp_path / name)
        assert (tmp_path / name / "summary.parquet").is_file(), name


def test_validate_repeats_with_the_simulator_standing_in_for_the_host(tmp_path, monkeypatch):
    """The pipeline with repetitions, without hardware: every "real" run is a
    simulator run, so every error is 0 and every spread 0."""
    suite = v.load_suite("dense")
    lines = []
    monkeypatch.setattr(v, "_run", simulator_as_host)
    out = tmp_path / "out"
    frame = v.validate("this-vm", suite, ["f8-rho85", "rtapp-rr-fair"], out, quick=True,
                       progress=lines.append, preflight=lambda: None, repeat=3)
    assert lines[0] == "[1/8] f8-rho85 real 1/3: 3 s ..." and len(lines) == 16
    # in rounds: every point's first run, then every point's second, ...
    started = [ln.split(":")[0] for ln in lines if ln.endswith("...")]
    assert started == ["[1/8] f8-rho85 real 1/3", "[2/8] rtapp-rr-fair real 1/3",
                       "[3/8] f8-rho85 real 2/3", "[4/8] rtapp-rr-fair real 2/3",
                       "[5/8] f8-rho85 real 3/3", "[6/8] rtapp-rr-fair real 3/3",
                       "[7/8] f8-rho85 sim", "[8/8] rtapp-rr-fair sim"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "f8-rho85-real-1", "f8-rho85-real-2", "f8-rho85-real-3", "f8-rho85-sim",
        "rtapp-rr-fair-real-1", "rtapp-rr-fair-real-2", "rtapp-rr-fair-real-3",
        "rtapp-rr-fair-sim"]
    assert (frame["repeat"] == 3).all() and (frame["n_reps"] == 3).all()
    rt = frame[frame["scenario"] == "rtapp-rr-fair"]
    # rt-app serves no requests: no request metrics (0 = 0 would pass)
    assert not set(v.REQUEST_METRICS) & set(rt["metric"])
    assert set(rt["task"].dropna()) == {"rr-0", "fair-1", "fair-2"}
    judged = frame[frame["ok"].notna()]
    assert len(judged) and judged["ok"].all()
    assert (frame.loc[frame["spread"].notna(), "spread"] == 0).all()
    assert vt.verdict(frame).startswith(f"verdict: {len(judged)}/{len(judged)} targets met")
    assert "KS≤0.1" in vt.format_text(frame)


# --- on this host ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.hardware
def test_two_dense_points_three_repetitions_on_this_host(tmp_path, capsys):
    """The table's structure from real repetitions (not the verdict: that is
    the published data file's)."""
    from tests.hardware import cgroups_unavailable
    reason = cgroups_unavailable() or (None if shutil.which("gcc") else "needs gcc") or (
        None if shutil.which("rt-app") else "needs rt-app")
    if reason:
        pytest.skip(reason)
    out = tmp_path / f"dense-{os.getpid()}"
    assert main(["validate", "this-vm", "f32-rho85", "rtapp-rr-fair", "--suite", "dense",
                 "--quick", "--repeat", "3", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/8] f32-rho85 real 1/3: 3 s ..." in captured.err
    frame = vt.read_validation(out)
    assert list(frame.columns) == v.VALIDATION_SCHEMA.names
    assert (frame["repeat"] == 3).all()
    assert ((frame["n_reps"] + frame["n_disturbed"]) == 3).all()
    assert vt.table_head(frame) == vt.HEAD_REPEATED and "verdict: " in captured.out
    if (frame["n_reps"] < 2).any():
        # a point needs two undisturbed repetitions to be compared: a VM whose
        # speed moved away from the profile's (host_loop_ns) or a busy host
        # leaves none
        pytest.skip("too few undisturbed repetitions on this host now: "
                    f"{sorted(set(zip(frame.scenario, frame.n_disturbed)))}")
    fn = frame[(frame["scenario"] == "f32-rho85") & frame["task"].isna()].set_index("metric")
    assert list(fn.index) == list(v.METRICS)
    for m in ("throughput_rps", "latency_p50_s", "cpu_util", "switch_out_rate_per_s"):
        r = fn.loc[m]
        assert r["real_lo"] <= r["real"] <= r["real_hi"] and r["sim"] > 0, m
        assert r["spread"] >= 0 and r["tolerance"] >= v.TARGETS[m], m
    assert 0 < fn.loc["colosim_cpu_frac", "real"] < 0.5       # measured, not modelled
    rt = frame[frame["task"].notna()]
    assert {"rr-0"} <= set(rt["task"]) and (rt["scenario"] == "rtapp-rr-fair").all()
    wake = rt[(rt["task"] == "rr-0") & (rt["metric"] == "rtapp_wakeup_latency_p50_s")].iloc[0]
    assert wake["ks_target"] == 0.1 and 0 <= wake["ks_stat"] <= 1 and wake["n_real"] > 0
