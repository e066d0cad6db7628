"""`colosim compare` and `colosim validate` on schedule traces: per-cgroup KS
statistics of wake-up latency and run length and the involuntary share,
where both runs have sched.parquet, and nothing (no error) where one has not."""
import math

import pytest

from calibration.validate import schedule_validation_rows, scenario_rows
from cli.main import main
from results.rundir import read_run_dir
from results.validation import format_text, to_frame

ARGS = ["duration_s=1", "warmup_s=0.2", "workload.functions=30", "workload.rate_rps=20"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    out = {}
    for name, extra in (("cfs", ["trace=sched"]), ("eevdf", ["trace=sched", "scheduler=eevdf"]),
                        ("plain", ["scheduler=eevdf"])):
        out[name] = d / name
        assert main(["run", *ARGS, *extra, f"output_dir={out[name]}"]) == 0
    return out


def test_compare_of_two_traced_runs_shows_ks_per_cgroup(runs, capsys):
    capsys.readouterr()
    assert main(["compare", str(runs["cfs"]), str(runs["eevdf"])]) == 0
    text = capsys.readouterr().out
    block = text.split("schedule (sched.parquet)")[1]
    assert "KS wake-up" in block and "KS run" in block
    lines = [line for line in block.splitlines() if "/faas.slice/func-" in line]
    assert len(lines) == 30
    ks = [float(line.split()[3]) for line in lines]        # KS wake-up column
    assert all(0 <= k <= 1 for k in ks) and any(k > 0 for k in ks)


def test_compare_without_a_trace_has_no_schedule_table(runs, capsys):
    capsys.readouterr()
    assert main(["compare", str(runs["cfs"]), str(runs["plain"])]) == 0
    assert "schedule (sched.parquet)" not in capsys.readouterr().out


def test_validation_gets_per_cgroup_schedule_rows_where_both_traced(runs):
    real, sim = read_run_dir(runs["cfs"]), read_run_dir(runs["eevdf"])
    rows = schedule_validation_rows("s", real.path, sim.path)
    assert {r["metric"] for r in rows} == {"wakeup_latency_mean_s", "run_length_mean_s",
                                          "involuntary_frac"}
    assert len(rows) == 3 * 30
    lat = [r for r in rows if r["metric"] == "wakeup_latency_mean_s"]
    assert all(0 <= r["ks_stat"] <= 1 and r["n_real"] > 0 for r in lat)
    inv = [r for r in rows if r["metric"] == "involuntary_frac"]
    assert all(math.isnan(r["ks_stat"]) for r in inv)
    frame = to_frame(scenario_rows("s", [real.summary.to_pylist()[0]],
                                   sim.summary.to_pylist()[0], window_s=0.8) + rows)
    text = format_text(frame)
    assert "wake-up latency KS" in text and "involuntary share" in text
    # the per-cgroup rows stay out of the metric table
    assert text.split("\n\n")[0].count("/faas.slice") == 0
    assert schedule_validation_rows("s", real.path, runs["plain"]) == []
