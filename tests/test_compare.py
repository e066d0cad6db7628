"""Readers and `colosim compare`: bootstrap CIs checked against cases that
can be worked out by hand, and the command on a small real sweep."""
import io
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from results.compare import (NO_CI, bootstrap_delta_ci, bootstrap_mean_ci, choose_baseline,
                             compare)
from results.readers import ResultsError, dir_kind, open_results
from cli.main import main
from tests.sweeps import FUNCTIONS, SCHEDULERS, SEEDS, make_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return make_sweep(tmp_path_factory.mktemp("cmp") / "sweep")


@pytest.fixture(scope="module")
def summary(sweep):
    return pq.read_table(sweep / "summary.parquet").to_pandas()


# ---------------------------------------------------------------- bootstrap

def test_constant_differences_have_a_zero_width_interval():
    assert bootstrap_delta_ci([5, 6, 7], [4, 5, 6], paired=True) == (1.0, 1.0, 1.0)
    assert bootstrap_mean_ci([2.5] * 4) == (2.5, 2.5, 2.5)


def test_two_samples_interval_is_the_hand_computed_one():
    # Resampling [0, 2] gives a mean of 0, 1 or 2 with probability 1/4, 1/2,
    # 1/4. The 95% interval's quantiles (2.5%, 97.5%) fall in the outer
    # masses: [0, 2]. A 40% interval (30%, 70%) falls in the middle: [1, 1].
    assert bootstrap_delta_ci([0, 2], [0, 0], paired=True, ci=0.95) == (1.0, 0.0, 2.0)
    assert bootstrap_delta_ci([0, 2], [0, 0], paired=True, ci=0.40) == (1.0, 1.0, 1.0)


def test_one_sample_has_no_interval():
    mean, lo, hi = bootstrap_mean_ci([3.0])
    assert mean == 3.0 and math.isnan(lo) and math.isnan(hi)
    delta, lo, hi = bootstrap_delta_ci([3.0, 4.0], [1.0], paired=False)
    assert delta == 2.5 and math.isnan(lo) and math.isnan(hi)


def test_unpaired_delta_is_the_difference_of_means():
    delta, lo, hi = bootstrap_delta_ci([10, 10, 10], [1, 3], paired=False)
    # the baseline resamples to 1, 2 or 3 (1/4, 1/2, 1/4): delta in {9, 8, 7}
    assert delta == 8.0 and (lo, hi) == (7.0, 9.0)


def test_resampling_is_seeded():
    x = np.random.default_rng(1).normal(size=7)
    assert bootstrap_mean_ci(x) == bootstrap_mean_ci(x)


def test_interval_covers_the_true_delta_and_narrows_with_more_seeds():
    rng = np.random.default_rng(42)
    true_delta = 0.5

    def interval(n):
        base = rng.normal(10, 1, n)
        policy = base + true_delta + rng.normal(0, 1, n)   # paired by seed
        return bootstrap_delta_ci(policy, base, paired=True, resamples=1000,
                                  rng=np.random.default_rng(rng.integers(1 << 31)))

    trials = [interval(20) for _ in range(200)]
    coverage = np.mean([lo <= true_delta <= hi for _, lo, hi in trials])
    # percentile bootstrap slightly under-covers at n=20 (about 0.93); a
    # broken interval (e.g. the sample SD instead of the SE) is far off
    assert 0.86 <= coverage <= 0.99
    width = {n: np.mean([hi - lo for _, lo, hi in (interval(n) for _ in range(50))])
             for n in (5, 80)}
    # width scales as 1/sqrt(n): 16x the seeds, about a quarter of the width
    assert 2.8 < width[5] / width[80] < 5.5


def test_default_baseline_is_cfs_else_the_first_policy():
    assert choose_baseline(["eevdf", "cfs"], None) == "cfs"
    assert choose_baseline(["eevdf", "lags"], None) == "eevdf"
    assert choose_baseline(["cfs+none", "cfs+vpa", "lags+none"], "lags") == "lags+none"
    # runs of both backends: the real host's, so deltas read simulator minus real
    assert choose_baseline(["cfs@sim", "cfs@real", "lags@sim"], None) == "cfs@real"
    assert choose_baseline(["eevdf@sim", "eevdf@real"], None) == "eevdf@real"
    assert choose_baseline(["cfs+vpa@sim", "lags+none@sim"], "lags") == "lags+none@sim"


# ---------------------------------------------------------------- readers

def test_readers_open_a_sweep_as_one_dataset_per_table(sweep, summary):
    assert dir_kind(sweep) == "sweep"
    results = open_results(sweep)
    assert results.keys == ["workload.functions"]
    requests = results.dataset("requests")
    assert isinstance(requests, ds.Dataset)
    table = requests.to_table(columns=["run_id", "scheduler", "seed", "workload.functions",
                                       "latency_s"])
    assert table.num_rows == sum(pq.read_metadata(r / "requests.parquet").num_rows
                                 for r in results.runs)
    # every row carries its run's labels, as in the summary
    labels = (table.to_pandas().drop(columns="latency_s").drop_duplicates("run_id")
              .set_index("run_id").sort_index())
    expected = summary.set_index("run_id").sort_index()[labels.columns]
    pd.testing.assert_frame_equal(labels, expected, check_dtype=False)
    # and filters on them
    cfs4 = requests.to_table(filter=(ds.field("scheduler") == "cfs")
                             & (ds.field("workload.functions") == 4))
    assert set(cfs4.column("seed").to_pylist()) == set(SEEDS)
    intervals = results.intervals()
    assert {"usage_s", "run_id", "workload.functions"} <= set(intervals.columns)


def test_run_files_carry_their_labels_so_a_glob_reads_many_runs(sweep, summary):
    files = sorted(str(f) for f in sweep.glob("runs/*/requests.parquet"))
    table = ds.dataset(files).to_table(columns=["run_id", "scheduler", "controllers", "seed"])
    per_run = table.to_pandas().drop_duplicates().set_index("run_id").sort_index()
    expected = summary.set_index("run_id").sort_index()[per_run.columns]
    assert len(per_run) == len(files)    # one label set per file
    pd.testing.assert_frame_equal(per_run, expected, check_dtype=False)
    intervals = ds.dataset(sorted(str(f) for f in sweep.glob("runs/*/intervals.parquet")))
    assert {"run_id", "scheduler", "seed"} <= set(intervals.schema.names)


def test_readers_take_labels_from_the_files_once_and_label_older_files(sweep, tmp_path):
    import shutil
    runs = sorted((sweep / "runs").iterdir())[:2]
    old = shutil.copytree(runs[0], tmp_path / runs[0].name)
    for name in ("requests", "intervals"):   # as written before the files had labels
        table = pq.read_table(old / f"{name}.parquet")
        pq.write_table(table.drop_columns(["run_id", "scheduler", "controllers", "seed"]),
                       old / f"{name}.parquet")
    results = open_results(old, runs[1])
    names = results.dataset("requests").schema.names
    assert len(names) == len(set(names))
    table = results.table("requests", columns=["run_id", "scheduler", "seed"])
    counts = table.group_by("run_id").aggregate([("seed", "count")]).to_pylist()
    assert {r["run_id"]: r["seed_count"] for r in counts} == {
        r.name: pq.read_metadata(r / "requests.parquet").num_rows for r in (old, runs[1])}


def test_run_directories_read_like_a_sweep(sweep, summary):
    seed0 = summary[summary["seed"] == 0]["run_id"]
    results = open_results(*(sweep / "runs" / r for r in seed0))
    assert dir_kind(results.runs[0]) == "run"
    # no sweep summary here: the varying key comes from the runs' configs
    assert results.keys == ["workload.functions"]
    frame = results.summary_frame()
    assert sorted(frame["workload.functions"]) == sorted(summary[summary["seed"] == 0]
                                                        ["workload.functions"])


def test_a_run_given_twice_is_an_error(sweep):
    one = next((sweep / "runs").iterdir())
    with pytest.raises(ResultsError, match="more than once"):
        open_results(sweep, one)


# ---------------------------------------------------------------- compare

def test_values_and_deltas_match_the_summary(sweep, summary):
    comparison = compare(open_results(sweep), ["goodput_rps", "latency_p99_s"])
    assert comparison.params == ["workload.functions"] and comparison.baseline == "cfs"
    frame = comparison.frame.set_index(["metric", "workload.functions", "policy"])
    for metric in ("goodput_rps", "latency_p99_s"):
        for n in FUNCTIONS:
            cells = summary[summary["workload.functions"] == n].sort_values("seed")
            lags = cells[cells.scheduler == "lags"][metric].to_numpy()
            cfs = cells[cells.scheduler == "cfs"][metric].to_numpy()
            row = frame.loc[(metric, n, "lags")]
            assert row["n"] == len(SEEDS) and row["paired"]
            assert row["mean"] == pytest.approx(lags.mean())
            assert row["delta"] == pytest.approx((lags - cfs).mean())
            assert row["delta_pct"] == pytest.approx(100 * (lags - cfs).mean() / cfs.mean())
            # two paired seeds: the bootstrap interval spans the two differences
            diffs = sorted(lags - cfs)
            assert (row["delta_ci_low"], row["delta_ci_high"]) == pytest.approx(diffs)
            assert math.isnan(frame.loc[(metric, n, "cfs")]["delta"])


def test_baseline_choice_flips_the_deltas(sweep):
    results = open_results(sweep)
    vs_cfs = compare(results, ["throughput_rps"]).frame
    vs_lags = compare(results, ["throughput_rps"], baseline="lags").frame
    a = vs_cfs[vs_cfs.policy == "lags"].set_index("workload.functions")["delta"]
    b = vs_lags[vs_lags.policy == "cfs"].set_index("workload.functions")["delta"]
    pd.testing.assert_series_equal(a, -b, check_names=False)


def test_compare_prints_a_table_per_default_metric(sweep, capsys):
    assert main(["compare", str(sweep)]) == 0
    out = capsys.readouterr().out
    metrics = ("goodput_rps", "throughput_rps", "latency_p50_s", "latency_p99_s",
               "unfinished_frac", "sched_overhead_frac", "ctx_switch_cost_mean_us",
               "ctx_switch_rate_per_s", "cpu_util")
    for metric in metrics:
        assert f"\n{metric}" in "\n" + out
    header = next(line for line in out.splitlines() if line.startswith("workload.functions"))
    # no run overloaded: no overloaded column
    assert header.split() == ["workload.functions", "policy", "n", "mean", "95%", "CI",
                              "delta", "vs", "cfs", "delta", "%", "delta", "95%", "CI"]
    assert out.count("baseline") == len(metrics) * len(FUNCTIONS)
    assert NO_CI not in out      # two seeds everywhere


def test_compare_markdown_and_csv(sweep, capsys):
    assert main(["compare", str(sweep), "--metric", "goodput_rps,cpu_util",
                 "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.count("\n| workload.functions | policy | n | mean |") == 2
    assert md.startswith("### goodput_rps")
    assert main(["compare", str(sweep), "--metric", "goodput_rps", "--metric",
                 "latency_p99_s", "--format", "csv", "--ci", "0.9"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(frame["metric"]) == {"goodput_rps", "latency_p99_s"}
    assert len(frame) == 2 * len(FUNCTIONS) * len(SCHEDULERS)
    assert (frame["ci"] == 0.9).all() and (frame["baseline"] == "cfs").all()


def test_a_single_seed_says_so_instead_of_inventing_an_interval(sweep, summary, capsys):
    seed0 = summary[(summary["seed"] == 0)]["run_id"]
    assert main(["compare", *(str(sweep / "runs" / r) for r in seed0),
                 "--metric", "goodput_rps"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split()[:1] in (["2"], ["4"])]
    assert len(rows) == 4 and all(NO_CI in line for line in rows)


def test_bad_directory_metric_and_baseline_are_clear_errors(sweep, tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "is neither a run directory" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compare", str(sweep), "--metric", "goodput"]) == 2
    err = capsys.readouterr().err
    assert "unknown metric goodput; valid metrics:" in err and "goodput_rps" in err
    assert main(["compare", str(sweep), "--baseline", "eevdf"]) == 2
    assert "baseline 'eevdf' is not among the policies present: cfs, lags" in \
        capsys.readouterr().err


def test_compare_help(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "--baseline" in out and "--format" in out and "bootstrap" in out


def test_a_column_only_some_runs_wrote_is_not_a_sweep_key(tmp_path):
    from results.readers import _sweep_key_columns

    runs = [tmp_path / "a", tmp_path / "b"]
    for run, extra in zip(runs, ({}, {"vpa_target_mcpu_mean": [120.0]})):
        run.mkdir()
        pq.write_table(pa.table({"run_id": [run.name], "goodput_rps": [1.0], **extra}),
                       run / "summary.parquet")
    swept = pa.table({"run_id": ["a", "b"], "goodput_rps": [1.0, 1.0],
                      "vpa_target_mcpu_mean": [None, 120.0], "controller": ["none", "vpa"]})
    assert _sweep_key_columns(swept, runs) == ["controller"]


def test_a_simulated_and_a_real_run_of_a_scenario_compare_as_two_policies(sweep, summary,
                                                                          tmp_path, capsys):
    import shutil

    import yaml
    from omegaconf import OmegaConf

    from results.schema import with_run_labels
    from scenarios.config import compose
    from tests.sweeps import BASE

    cfs = summary[(summary.scheduler == "cfs") & (summary.seed == 0)
                  & (summary["workload.functions"] == FUNCTIONS[0])].iloc[0]
    sim = sweep / "runs" / cfs["run_id"]
    # the same scenario as backend=real writes it: backend "real" in its
    # summary and the backend group in its config (numbers made up)
    real = shutil.copytree(sim, tmp_path / "real")
    table = pq.read_table(real / "summary.parquet")
    table = table.set_column(table.schema.get_field_index("run_id"), "run_id", pa.array(["real"]))
    table = table.set_column(table.schema.get_field_index("backend"), "backend",
                             pa.array(["real"]))
    tp = table.schema.get_field_index("throughput_rps")
    table = table.set_column(tp, "throughput_rps", pa.array([cfs["throughput_rps"] * 0.8]))
    pq.write_table(table, real / "summary.parquet")
    for name in ("requests", "intervals"):
        pq.write_table(with_run_labels(pq.read_table(real / f"{name}.parquet"), table),
                       real / f"{name}.parquet")
    config = yaml.safe_load((real / "config.yaml").read_text())
    config["backend"] = OmegaConf.to_container(compose(
        BASE + ["backend=real", f"workload.functions={FUNCTIONS[0]}"]).backend)
    (real / "config.yaml").write_text(yaml.safe_dump(config))

    comparison = compare(open_results(sim, real), ["throughput_rps"])
    # the backend is the policy's, not a group key (which left each its own baseline)
    assert comparison.params == [] and comparison.baseline == "cfs@real"
    row = comparison.frame.set_index("policy").loc["cfs@sim"]
    assert row["delta"] == pytest.approx(cfs["throughput_rps"] * 0.2)
    assert main(["compare", str(sim), str(real), "--metric", "throughput_rps"]) == 0
    out = capsys.readouterr().out
    assert out.count("baseline") == 1 and "cfs@sim" in out and "delta vs cfs@real" in out


def test_compare_counts_overloaded_runs_and_says_what_latencies_are_over(tmp_path, capsys):
    from scenarios.config import compose
    from scenarios.runner import run_scenario

    runs = []
    for scheduler in ("cfs", "eevdf"):
        # 2 x 150 req/s x 10 ms on one core: overloaded
        cfg = compose(["host=generic", "host.cores=1", "workload.functions=2",
                       "workload.rate_rps=150", "duration_s=2", "warmup_s=0.2",
                       f"scheduler={scheduler}"])
        runs.append(tmp_path / scheduler)
        run_scenario(cfg, runs[-1])
    unfinished = sum(pq.read_table(r / "summary.parquet").column("n_unfinished")[0].as_py()
                     for r in runs)
    assert main(["compare", *map(str, runs), "--metric", "latency_p99_s,unfinished_frac"]) == 0
    out = capsys.readouterr().out
    assert (f"latency_p99_s (in ms), of the finished requests ({unfinished:,} unfinished "
            "left out):") in out
    assert "\nunfinished_frac (in %):" in out
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    assert header.split()[:3] == ["policy", "n", "overloaded"]
    rows = [line.split() for line in out.splitlines() if line.startswith(("cfs", "eevdf"))]
    assert {r[2] for r in rows} == {"1/1"}


def test_a_controller_key_is_a_group_key_only_where_it_varies_within_a_policy():
    from types import SimpleNamespace

    from results.compare import swept_params

    keys = ["controller.interval_s", "controller.margin"]
    # VPA against CATCloud: their keys differ with the controller, i.e. the policy
    between = pd.DataFrame({"scheduler": "cfs", "seed": [0, 1, 0, 1],
                            "controllers": ["vpa", "vpa", "catcloud", "catcloud"],
                            "controller.interval_s": [15.0, 15.0, 1.0, 1.0],
                            "controller.margin": [0.15, 0.15, 0.0, 0.0]})
    assert swept_params(SimpleNamespace(keys=keys), between) == []
    # one controller at two margins: two groups, not one cell of four "seeds"
    within = between.assign(controllers="holt_winters", **{"controller.interval_s": 15.0})
    assert swept_params(SimpleNamespace(keys=keys), within) == ["controller.margin"]
    # a key swept as null,60 varies too
    fetch = within.assign(**{"controller.margin": 0.0,
                             "controller.interval_s": [None, None, 60.0, 60.0]})
    assert swept_params(SimpleNamespace(keys=keys), fetch) == ["controller.interval_s"]
    # and so does any other key swept as null,X (workload.cpuset_spread=null,node)
    spread = pd.DataFrame({"scheduler": "cfs", "seed": [0, 0],
                           "workload.cpuset_spread": [None, "node"]})
    assert swept_params(SimpleNamespace(keys=["workload.cpuset_spread"]), spread) == \
        ["workload.cpuset_spread"]
