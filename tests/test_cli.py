import io
import re
import sys
from types import SimpleNamespace

import pyarrow as pa
import pytest
from omegaconf import DictConfig

from results.rundir import read_run_dir
from results.schema import INTERVALS, REQUESTS, SUMMARY, check_table
from cli import main as cli
from cli.main import main
from scenarios import runner


def fake_tables(cfg):
    row = {f.name: None for f in SUMMARY}
    row.update(
        run_id="set-by-sim", experiment=cfg.experiment, scenario=cfg.workload.name,
        scheduler=cfg.scheduler.name, controllers="", backend="sim", host=cfg.host.name,
        seed=cfg.seed, duration_s=cfg.duration_s, n_requests=0, wall_time_s=0.5, sim_events=10,
    )  # fmt: skip
    return SimpleNamespace(
        summary=pa.Table.from_pylist([row], schema=SUMMARY),
        requests=REQUESTS.empty_table(),
        intervals=INTERVALS.empty_table(),
    )


@pytest.fixture
def fake_sim(monkeypatch, tmp_path):
    """Replace the simulator (scenarios.runner.simulate) with a recorder; run from an empty working directory."""
    calls = []

    def simulate(cfg, **kwargs):
        calls.append(SimpleNamespace(cfg=cfg, kwargs=kwargs))
        return fake_tables(cfg)

    monkeypatch.setattr(runner, "simulate", simulate)
    monkeypatch.chdir(tmp_path)
    return calls


def test_run_passes_the_composed_config_and_writes_the_run_dir(fake_sim, tmp_path, capsys):
    out = tmp_path / "x"
    argv = ["run", "host=this-vm", "workload.functions=8", "seed=3", f"output_dir={out}"]
    assert main(argv) == 0

    (call,) = fake_sim
    assert isinstance(call.cfg, DictConfig)
    assert (call.cfg.host.name, call.cfg.workload.functions, call.cfg.seed) == ("this-vm", 8, 3)
    run = read_run_dir(out)
    assert run.summary["run_id"].to_pylist() == ["x"]
    assert run.config["workload"]["functions"] == 8 and run.config["output_dir"] == str(out)
    stdout = capsys.readouterr().out
    assert "poisson on this-vm, scheduler cfs, seed 3" in stdout
    assert str(out) in stdout


def test_default_run_dir_is_named_after_the_run(fake_sim, tmp_path):
    assert main(["run", "workload=worker_pool", "seed=7"]) == 0
    assert main(["run", "workload=worker_pool", "seed=7"]) == 0
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(names) == 2
    assert all(re.fullmatch(r"\d{8}-\d{6}-worker_pool-cfs-s7(-\d+)?", n) for n in names)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("workload.rate_rps=-1", "workload.rate_rps = -1.0 is invalid: must be > 0"),
        ("scheduler=foo", "scheduler=foo is not a known option; choose from: cfs, cfs_tuned"),
        ("controller=nope", "controller=nope is not a known option; choose from: catcloud"),
        ("workload.bogus=1", "workload.bogus is not a valid key"),
        ("seed=abc", "seed = abc is invalid: must be an integer"),
        # before: an OverflowError mid-run; a 50 s build to 2.7 GB with no output
        ("duration_s=1e12", "duration_s = 1000000000000.0 is invalid: must be <= 4.61e+09 s"),
        ("workload.functions=100000000", "workload.functions = 100000000 is invalid: must be in"),
    ],
)
def test_invalid_config_exits_2_and_creates_nothing(fake_sim, tmp_path, capsys, override, expected):
    out = tmp_path / "x"
    assert main(["run", override, f"output_dir={out}"]) == 2
    assert expected in capsys.readouterr().err
    assert not fake_sim, "nothing may run with an invalid config"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_several_problems_are_listed_one_per_line(fake_sim, capsys):
    assert main(["run", "workload.rate_rps=0", "slo_s=0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("colosim: errors:\n")
    assert "  workload.rate_rps = 0.0" in err and "  slo_s = 0.0" in err


def test_existing_run_dir_is_refused_before_simulating(fake_sim, tmp_path, capsys):
    out = tmp_path / "x"
    out.mkdir()
    (out / "summary.parquet").write_text("old")
    assert main(["run", f"output_dir={out}"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert not fake_sim
    assert (out / "summary.parquet").read_text() == "old"


@pytest.mark.parametrize("where, expected", [
    ("/proc/colosim-x", "/proc does not take a new directory"),
    ("FILE/x", "FILE is a file, not a directory"),
])
def test_unwritable_output_dir_is_refused_before_simulating(fake_sim, tmp_path, capsys, where,
                                                            expected):
    """Before: a traceback after the whole simulation."""
    (tmp_path / "FILE").write_text("")
    out = where.replace("FILE", str(tmp_path / "FILE"))
    assert main(["run", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"colosim: error: output_dir: {out} cannot be") and err.count("\n") == 1
    assert expected.replace("FILE", str(tmp_path / "FILE")) in err
    assert not fake_sim


def test_an_unknown_option_shows_the_commands_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--bogus"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: colosim run ") and err.endswith(
        "colosim run: error: unrecognized arguments: --bogus\n")


def test_simulator_failure_leaves_no_run_dir(monkeypatch, tmp_path):
    def broken(cfg, **kwargs):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(runner, "simulate", broken)
    with pytest.raises(RuntimeError, match="engine exploded"):
        main(["run", f"output_dir={tmp_path / 'x'}"])
    assert list(tmp_path.iterdir()) == []


def test_interrupted_run_exits_130_and_leaves_no_run_dir(monkeypatch, tmp_path, capsys):
    def interrupted(cfg, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "simulate", interrupted)
    assert main(["run", f"output_dir={tmp_path / 'x'}"]) == 130
    assert "no run directory was written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_is_passed_only_to_a_terminal(fake_sim, tmp_path, monkeypatch):
    assert main(["run", f"output_dir={tmp_path / 'plain'}"]) == 0
    assert "progress" not in fake_sim[-1].kwargs

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["run", f"output_dir={tmp_path / 'tty'}"]) == 0
    progress = fake_sim[-1].kwargs["progress"]
    progress(2.5, 10.0)
    assert "25%" in terminal.getvalue() and "2.5 / 10.0 s simulated" in terminal.getvalue()


def test_progress_bar_draws_a_bounded_bar_and_erases_it():
    stream = io.StringIO()
    bar = cli._ProgressBar(stream)
    bar(15.0, 10.0)  # clamped: a simulator may overshoot its end time
    assert f"[{'#' * bar.WIDTH}] 100%" in stream.getvalue()
    bar(5.0, 10.0)  # within the redraw interval: skipped
    assert stream.getvalue().count("\r[") == 1
    bar.close()
    assert stream.getvalue().endswith("\r\033[K")


def test_show_config_prints_keys_without_running(fake_sim, capsys):
    assert main(["run", "--show-config", "workload=worker_pool"]) == 0
    out = capsys.readouterr().out
    assert "workers: 5" in out and "capacity: 1000" in out
    assert not fake_sim


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_run_help_lists_groups_options_keys_and_examples(flag, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", flag])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"host\s+e5-2430l\*, epyc-7453, generic, silver-4314-2s, this-vm", out)
    assert re.search(r"workload\s+apache, azure2019, azure2021, clients, ebizzy, memlookup, "
                     r"noisy_jobs, periodic, poisson\*, random, "
                     r"resctl, resctl_mix, resctl_parallel, rtapp, webserver, worker_pool", out)
    assert re.search(r"scheduler\s+cfs\*, cfs_tuned, eevdf, eevdf66, eevdf_tuned, lags, rr", out)
    assert re.search(r"calibration\s+default\*, e5-2430l, ideal", out)
    assert re.search(r"controller\s+catcloud, dynamic_priority, holt_winters, lags_static, "
                     r"least_loaded, none\*, static, vpa", out)
    assert re.search(r"backend\s+real, sim\*", out)
    assert re.search(r"trace\s+none\*, optional, sched", out)
    assert "duration_s=10.0" in out and "warmup_s=1.0" in out and "output_dir=null" in out
    assert "colosim run host=this-vm" in out


def test_top_level_help_lists_the_run_command(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert re.search(r"run\s+simulate one scenario", capsys.readouterr().out)


def test_no_command_prints_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: colosim" in capsys.readouterr().err


def test_real_tiny_simulation(tmp_path, capsys):
    out = tmp_path / "tiny"
    argv = ["run", "host=this-vm", "duration_s=1", "warmup_s=0.1", "workload.functions=2"]
    assert main([*argv, f"output_dir={out}"]) == 0
    run = read_run_dir(out)
    for name in ("summary", "requests", "intervals"):
        check_table(name, getattr(run, name))
    summary = run.summary.to_pylist()[0]
    assert summary["run_id"] == "tiny" and summary["host"] == "this-vm"
    assert summary["n_requests"] > 0 and summary["sim_events"] > 0
    assert str(out) in capsys.readouterr().out
