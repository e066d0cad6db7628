"""`colosim sweep`: Hydra multirun with the joblib launcher, one run
directory per point, a concatenated summary, resumable."""
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from cli.main import main
from scenarios.config import CONF_DIR, compose, expand_sweep
from scenarios.validate import ConfigError

BASE = ["host=this-vm", "duration_s=1", "warmup_s=0.2", "workload.functions=2",
        "workload.rate_rps=20"]


def test_expand_sweep_counts_points_and_names_swept_keys():
    points, swept, _ = expand_sweep(BASE + ["scheduler=cfs,rr", "seed=range(0,3)"])
    assert len(points) == 6
    assert swept == ["scheduler", "seed"]
    assert ["scheduler=rr", "seed=2"] == [p for p in points[-1] if p.split("=")[0] in swept]


def test_a_bad_point_fails_before_anything_runs(tmp_path, capsys):
    code = main(["sweep", "--dir", str(tmp_path / "sw"), *BASE, "workload.rate_rps=1,-1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "sweep point" in err and "workload.rate_rps = -1.0 is invalid: must be > 0" in err
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("overrides, expected", [
    # before: an OverflowError in every job
    (["duration_s=1e12", "seed=0,1"], "workload.rate_rps=20 seed=0: "
     "duration_s = 1000000000000.0 is invalid: must be <= 4.61e+09 s"),
    # before: silently ignored
    (["output_dir=/tmp/x", "seed=0,1"], "output_dir = /tmp/x is invalid in a "
     "sweep: each run is written under the sweep's --dir"),
    # before: "sweeping 0 run(s)" and a summary that was never written
    (["seed=range(0,0)"], "seed=range(0,0) sweeps no value"),
    # before: joblib's traceback once the sweep had started
    (["seed=0,1", "hydra.launcher.n_jobs=0"], "hydra.launcher.n_jobs = 0 is "
     "invalid: must be a non-zero integer"),
])
def test_a_sweep_that_cannot_run_fails_in_one_line_before_anything_runs(tmp_path, capsys,
                                                                       overrides, expected):
    assert main(["sweep", "--dir", str(tmp_path / "sw"), *BASE, *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("colosim: error: ") and err.count("\n") == 1 and expected in err
    assert not (tmp_path / "sw").exists()


def test_sweep_dir_must_be_a_sweep_or_writable(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("")
    for where, expected in ((other, f"--dir: {other} already exists and is not an empty "
                                    "directory"),
                            (tmp_path / "file" / "sw", "is a file, not a directory"),
                            (tmp_path / "file", "already exists")):
        assert main(["sweep", "--dir", str(where), *BASE, "seed=0,1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("colosim: error: --dir: ") and expected in err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_every_points_trace_file_is_checked_before_any_run(tmp_path, capsys):
    good, late, bad = tmp_path / "good.csv", tmp_path / "late.csv", tmp_path / "bad.csv"
    header = "function,arrival_s,demand_s,threads\n"
    good.write_text(header + "f,0.1,0.01,1\n")
    late.write_text(header + "f,5.0,0.01,1\n")
    bad.write_text(header + "f,0.1,abc,1\n")
    for trace, expected in ((late, f"workload.trace_file {late}: every arrival is at or after "
                                    "duration_s = 1.0 s (the first at 5.0 s)"),
                            (bad, f"{bad}, line 2: demand_s = 'abc' is not a number")):
        assert main(["sweep", "--dir", str(tmp_path / "sw"), *BASE[:-1], "workload=azure2021",
                     f"workload.trace_file={good},{trace}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"colosim: error: {expected}") and err.count("\n") == 1
        assert not (tmp_path / "sw").exists()


def test_sweep_writes_each_run_and_one_summary_then_skips_completed_runs(tmp_path, capfd):
    # progress lines come from the launcher's worker processes: capture fds
    sweep_dir = tmp_path / "sw"
    args = ["sweep", "--dir", str(sweep_dir), *BASE[:-1], "scheduler=cfs,rr", "seed=0,1",
            "workload.rate_rps=20,40", "hydra.launcher.n_jobs=2"]
    assert main(args) == 0
    out = capfd.readouterr()
    summary = pq.read_table(sweep_dir / "summary.parquet").to_pylist()
    assert len(summary) == 8
    # swept keys without a summary column of their own get one
    assert sorted((r["scheduler"], r["seed"], r["workload.rate_rps"]) for r in summary) == [
        (s, seed, rate) for s in ("cfs", "rr") for seed in (0, 1) for rate in (20.0, 40.0)]
    runs = sorted(p.name for p in (sweep_dir / "runs").iterdir())
    assert len(runs) == 8 and {r["run_id"] for r in summary} == set(runs)
    assert "[8/8]" in out.err
    # same sweep again: everything is skipped, nothing is rewritten
    stamps = {p: p.stat().st_mtime_ns for p in (sweep_dir / "runs").glob("*/summary.parquet")}
    assert main(args) == 0
    again = capfd.readouterr().err
    assert again.count("already complete") == 8
    assert [f"[{k}/8] skipped" for k in range(1, 9)] == re.findall(r"\[\d+/\d+\] skipped", again)
    # a sweep of one of those points counts its own run, not the directory's eight
    assert main(["sweep", "--dir", str(sweep_dir), *BASE[:-1], "scheduler=cfs", "seed=0",
                 "workload.rate_rps=20"]) == 0
    assert re.findall(r"\[\d+/\d+\]", capfd.readouterr().err) == ["[1/1]"]
    assert stamps == {p: p.stat().st_mtime_ns
                      for p in (sweep_dir / "runs").glob("*/summary.parquet")}


def test_sweep_help_explains_the_syntax(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "experiment=lags_fig3" in out and "hydra.launcher.n_jobs=1" in out


def test_unknown_sweep_option_is_a_config_error():
    with pytest.raises(ConfigError, match="scheduler=nope is not a known option"):
        expand_sweep(["scheduler=cfs,nope"])


@pytest.mark.parametrize("experiment, n", [("lags_fig3", 2 * 19 * 4), ("lags_fig8", 3 * 3 * 4 * 3),
                                           ("lags_fig11", 3 * 2 * 6)])
def test_experiment_files_define_their_sweep(experiment, n):
    points, swept, _ = expand_sweep([f"experiment={experiment}"])
    assert len(points) == n
    assert {"workload", "workload.functions", "scheduler"} <= set(swept)


def test_lags_fig6_sweeps_the_load_credit_window_on_one_knative_node():
    """Fig. 6: CFS-LAGS's window over the decades around the paper's 1,000
    ticks, three seeds, on one 100-function node; the CFS reference its
    header documents composes as a single run."""
    points, swept, cfgs = expand_sweep(["experiment=lags_fig6"])
    assert len(points) == 4 * 3 and set(swept) == {"scheduler.window_ticks", "seed"}
    assert sorted({c.scheduler.window_ticks for c in cfgs}) == [10, 100, 1000, 10000]
    for cfg in cfgs:
        assert (cfg.scheduler.name, cfg.cluster.name, cfg.cluster.nodes) == ("lags", "kubernetes", 1)
        assert (cfg.workload.functions, cfg.workload.request_path) == (100, "bentoml")
    header = (CONF_DIR / "experiment" / "lags_fig6.yaml").read_text()
    reference = re.search(r"^#\s+colosim run (experiment=lags_fig6 scheduler=cfs .*)$", header, re.M)
    cfg = compose(reference.group(1).split())
    assert cfg.scheduler.name == "cfs" and cfg.workload.functions == 100


def test_the_noisy_ablations_and_their_documented_sweeps_compose():
    """experiment=noisy_ablations is noisy_scenarios (same host, stream,
    profiles, hour) swept over both job-stream readings and three seeds;
    every sweep its header documents composes (one scenario, and one seed
    for the documented ones: composing is what costs here)."""
    params = OmegaConf.load(CONF_DIR / "experiment" / "noisy_scenarios.yaml").hydra.sweeper.params
    assert params["workload.scenario"].split(",") == ["low_demand", "high_utilization",
                                                      "exceeding_demand"]
    points, swept, cfgs = expand_sweep(["experiment=noisy_ablations",
                                        "workload.scenario=high_utilization"])
    assert len(points) == 2 * 2 * 3
    assert set(swept) == {"controller", "workload.priority_pool", "seed"}
    base = OmegaConf.to_container(expand_sweep(["experiment=noisy_scenarios"])[2][0])
    for cfg in cfgs:
        cfg = OmegaConf.to_container(cfg)
        assert cfg["duration_s"] == base["duration_s"] == 3600.0
        assert cfg["host"] == base["host"]
        assert cfg["workload"]["memory"] == base["workload"]["memory"]
    header = (CONF_DIR / "experiment" / "noisy_ablations.yaml").read_text()
    sweeps = re.findall(r"^#\s+colosim sweep --dir \S+ (.*)$", header, re.M)
    assert len(sweeps) == 5
    labels = set()
    for line in sweeps[1:]:
        one = [] if "workload.scenario=" in line else ["workload.scenario=low_demand"]
        _, _, cfgs = expand_sweep([*line.split(), "seed=0", *one])
        assert {c.workload.priority_pool for c in cfgs} == {"any"}
        labels |= {c.controller.name for c in cfgs}
        if "host.llc_refill=false" in line:
            # its own least_loaded baseline: compare groups runs by host.llc_refill
            assert {c.controller.name for c in cfgs} == {"least_loaded", "dynamic_priority"}
            assert not any(c.host.llc_refill for c in cfgs)
    assert labels == {"least_loaded", "dynamic_priority", "dp_no_rebalance", "dp_tick_1s",
                      "dp_batch_by_cores"}


# here, not in test_sweep_ray.py / test_sweep_submitit.py: those skip where
# their extra is missing, which is when this message is shown
@pytest.mark.parametrize("launcher, extra", [("ray", "ray"), ("colosim_ray_cluster", "ray"),
                                             ("colosim_slurm", "slurm")])
def test_a_missing_launcher_plugin_names_the_extra(tmp_path, monkeypatch, capsys,
                                                   launcher, extra):
    import scenarios.sweep as sweeps

    monkeypatch.setattr(sweeps.importlib.util, "find_spec", lambda name: None)
    assert main(["sweep", "--dir", str(tmp_path / "sw"), f"hydra/launcher={launcher}",
                 *BASE]) == 2
    err = capsys.readouterr().err
    assert f"hydra/launcher={launcher} needs Hydra's launcher plugin" in err
    assert f"pip install -e '.[{extra}]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "sw").exists()


def test_the_demo_sweeps_density_on_the_lags_host_under_three_schedulers():
    params = OmegaConf.load(CONF_DIR / "experiment" / "demo_density.yaml").hydra.sweeper.params
    assert set(params.scheduler.split(",")) == {"cfs", "eevdf", "lags"}
    assert len(str(params.seed).split(",")) >= 2
    # one scheduler and seed: composing every point is what costs here
    _, swept, points = expand_sweep(["experiment=demo_density", "scheduler=cfs", "seed=0"])
    assert "workload.functions" in swept
    assert {(p.host.name, p.workload.name) for p in points} == {("e5-2430l", "azure2021")}
    # light load to past saturation: from 2 to over 12 functions per hardware thread
    functions = sorted(p.workload.functions for p in points)
    threads = points[0].host.sockets * points[0].host.cores * points[0].host.threads_per_core
    assert len(functions) >= 5 and functions[0] <= 2 * threads < 12 * threads < functions[-1]


def test_the_demo_runs_and_reads_at_a_tiny_scale(tmp_path, capsys):
    sweep_dir = tmp_path / "demo"
    assert main(["sweep", "--quiet", "--dir", str(sweep_dir), "experiment=demo_density",
                 "workload.functions=6,12", "seed=0", "duration_s=0.3", "warmup_s=0.1",
                 "interval_s=0.1"]) == 0
    rows = pq.read_table(sweep_dir / "summary.parquet").to_pylist()
    assert {(r["scheduler"], r["workload.functions"]) for r in rows} == {
        (s, n) for s in ("cfs", "eevdf", "lags") for n in (6, 12)}
    assert {r["experiment"] for r in rows} == {"demo_density"}
    capsys.readouterr()
    assert main(["compare", str(sweep_dir), "--reading"]) == 0
    text = capsys.readouterr().out
    # two functions per thread at most: far from a knee
    assert "No knee within the sweep" in text and "workload.functions=12" in text


def test_an_experiment_runs_end_to_end_with_overrides(tmp_path):
    sweep_dir = tmp_path / "fig3"
    assert main(["sweep", "--quiet", "--dir", str(sweep_dir), "experiment=lags_fig3",
                 "workload.functions=12", "scheduler=cfs", "duration_s=1", "warmup_s=0.2",
                 "host=this-vm"]) == 0
    rows = pq.read_table(sweep_dir / "summary.parquet").to_pylist()
    assert sorted(r["scenario"] for r in rows) == ["azure2021", "resctl"]
    assert {r["experiment"] for r in rows} == {"lags_fig3"}
    # the generated trace is stored with the run that replayed it
    assert len(list((sweep_dir / "runs").glob("*/trace.parquet"))) == 1


def test_sweep_prints_one_line_per_run(tmp_path, capsys):
    assert main(["sweep", "--quiet", "--dir", str(tmp_path / "sw"), *BASE,
                 "scheduler=cfs,eevdf"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["scheduler", "workload", "seed"]
    assert [line.split()[0] for line in out[1:3]] == ["cfs", "eevdf"]


def test_sweep_table_has_the_swept_keys_in_numeric_order_and_flags_overload(tmp_path, capsys):
    # one core, 10 ms requests at 20 req/s per function: 2 functions load it
    # to 40 %, 10 functions to 200 % (overloaded)
    base = ["--quiet", "--dir", str(tmp_path / "sw"), "host=generic", "host.cores=1",
            "duration_s=2", "warmup_s=0.2", "workload.rate_rps=20", "hydra.launcher.n_jobs=1"]
    assert main(["sweep", *base, "workload.functions=10,2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:4] == ["scheduler", "workload", "seed", "workload.functions"]
    assert {"unfinished", "%", "overloaded"} <= set(head)
    rows = [dict(zip(["scheduler", "workload", "seed", "functions"], line.split()))
            for line in lines[1:3]]
    assert [r["functions"] for r in rows] == ["2", "10"]
    assert lines[1].split()[-3] == "no" and lines[2].split()[-3] == "yes"
    assert any(line.startswith("p50 and p99 are of the finished requests") for line in lines)
    assert any(line.startswith("1 of 2 runs overloaded") for line in lines)
    # a later sweep into the same directory varies another key: the table
    # tells every run apart by both, read from the runs' configs
    assert main(["sweep", *base[:-2], "workload.functions=2", "workload.rate_rps=5,20",
                 "hydra.launcher.n_jobs=1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # this sweep's key first, then the one that varies in the configs
    assert lines[0].split()[3:5] == ["workload.rate_rps", "workload.functions"]
    keys = [tuple(line.split()[3:5]) for line in lines[1:4]]
    assert keys == [("5.0", "2"), ("20.0", "2"), ("20.0", "10")]


def test_sigterm_stops_the_workers_and_keeps_completed_runs(tmp_path):
    """SIGTERM reaches only colosim (kill, a batch system's stop), not the
    launcher's workers: colosim must stop them, as ^C does, keep the runs
    that completed and exit 128 + SIGTERM."""
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))",
         "sweep", "--dir", str(out),
         "duration_s=2,600", "seed=0,1", "workload.functions=64", "hydra.launcher.n_jobs=2"],
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in proc.stderr:          # the short run has completed
            if re.match(r"\[1/4\] done", line):
                break
        proc.send_signal(signal.SIGTERM)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM, err
        assert "interrupted; completed runs are kept" in err
        # nothing of the sweep is left running: its process group empties
        deadline = time.monotonic() + 20
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid)
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    summary = pq.read_table(out / "summary.parquet")
    assert summary.num_rows >= 1 and set(summary.column("duration_s").to_pylist()) == {2.0}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
