import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from results import rundir
from results.rundir import RunDirExistsError, read_run_dir, write_run_dir
from results.schema import INTERVALS, REQUESTS, RUN_LABELS, SUMMARY, SchemaError, check_table
from results.summary import format_summary
from scenarios.config import compose

SUMMARY_ROW = dict(
    run_id="r1", experiment="default", scenario="poisson", scheduler="cfs", controllers="",
    backend="sim", host="this-vm", seed=0, duration_s=10.0, n_requests=2, throughput_rps=0.2,
    goodput_rps=0.1, slo_s=1.0, latency_mean_s=0.75, latency_p50_s=0.75, latency_p95_s=1.2,
    latency_p99_s=1.24, cpu_util=0.5, sched_overhead_frac=0.015, ctx_switches=1200,
    ctx_switch_rate_per_s=120.0, ctx_switch_cost_mean_us=12.5, migrations=7,
    runqueue_wait_mean_s=0.002, nr_periods=0, nr_throttled=0, throttled_time_s=0.0,
    wall_time_s=0.25, sim_events=98765, n_dropped=1, n_unfinished=0, unfinished_frac=0.0,
    backlog_ratio=0.0, overloaded=False,
)  # fmt: skip


def make_result(**tables):
    requests = [
        dict(function="f0", cgroup="faas.slice/f0", arrival_s=1.0, start_s=1.0, end_s=1.25,
             latency_s=0.25, cpu_demand_s=0.2, dropped=False),
        dict(function="f1", cgroup="faas.slice/f1", arrival_s=2.0, start_s=2.5, end_s=3.75,
             latency_s=1.25, cpu_demand_s=1.0, dropped=False),
    ]  # fmt: skip
    intervals = [
        dict(interval_start_s=0.0, interval_end_s=1.0, cgroup="faas.slice/f0", usage_s=0.4),
        dict(interval_start_s=0.0, interval_end_s=1.0, cgroup="faas.slice/f1", usage_s=0.6),
    ]
    defaults = dict(
        summary=pa.Table.from_pylist([SUMMARY_ROW], schema=SUMMARY),
        requests=pa.Table.from_pylist(requests, schema=REQUESTS),
        intervals=pa.Table.from_pylist(intervals, schema=INTERVALS),
    )
    return SimpleNamespace(**{**defaults, **tables})


def leftovers(parent):
    return sorted(p.name for p in parent.iterdir())


def test_round_trip(tmp_path):
    result = make_result()
    config = {"seed": 0, "host": {"name": "this-vm", "cores": 2}, "output_dir": None}
    path = write_run_dir(result, tmp_path / "run", config)
    assert path == tmp_path / "run"
    assert leftovers(tmp_path) == ["run"]
    assert leftovers(path) == [
        "config.yaml", "intervals.parquet", "requests.parquet", "summary.parquet"
    ]  # fmt: skip
    back = read_run_dir(path)
    assert back.summary.equals(result.summary)
    labels = RUN_LABELS.names
    for name in ("requests", "intervals"):
        table = getattr(back, name)
        # the run's identity in front of every row, from the summary
        assert table.column_names[:len(labels)] == labels
        assert table.select(labels).to_pylist() == [
            dict(run_id="r1", scheduler="cfs", controllers="", seed=0)] * table.num_rows
        assert table.drop_columns(labels).equals(getattr(result, name).drop_columns(labels))
    assert back.config == config


def test_composed_config_is_written_as_plain_yaml(tmp_path):
    cfg = compose(["host=this-vm", "seed=3"])
    back = read_run_dir(write_run_dir(make_result(), tmp_path / "run", cfg))
    assert back.config["seed"] == 3 and back.config["host"]["cores"] == 2
    assert back.config["workload"]["name"] == "poisson"


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_the_run_directory_and_its_files_follow_the_umask(tmp_path, mask):
    """Not mkdtemp's private 0700: a run written on a shared filesystem is
    readable as the user's umask allows."""
    old = os.umask(mask)
    try:
        path = write_run_dir(make_result(), tmp_path / "run", {})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o777 & ~mask
    assert {f.stat().st_mode & 0o777 for f in path.iterdir()} == {0o666 & ~mask}


def test_parent_directories_are_created(tmp_path):
    assert write_run_dir(make_result(), tmp_path / "a" / "b" / "run", {}).is_dir()


def test_failure_mid_write_leaves_no_directory(tmp_path, monkeypatch):
    real_write, written = pq.write_table, []

    def fail_on_second_file(table, where, **kwargs):
        if written:
            raise OSError("disk full")
        real_write(table, where, **kwargs)
        written.append(where)

    monkeypatch.setattr(pq, "write_table", fail_on_second_file)
    with pytest.raises(OSError, match="disk full"):
        write_run_dir(make_result(), tmp_path / "run", {})
    assert len(written) == 1 and not written[0].exists(), "the written file must be removed"
    assert leftovers(tmp_path) == []


def test_interrupt_mid_write_leaves_no_directory(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "_to_yaml", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_run_dir(make_result(), tmp_path / "run", {})
    assert leftovers(tmp_path) == []


def test_refuses_to_overwrite_a_non_empty_directory(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "keep.txt").write_text("precious")
    with pytest.raises(RunDirExistsError, match="not an empty directory"):
        write_run_dir(make_result(), target, {})
    assert leftovers(target) == ["keep.txt"]
    assert leftovers(tmp_path) == ["run"]


def test_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "run").write_text("x")
    with pytest.raises(RunDirExistsError):
        write_run_dir(make_result(), tmp_path / "run", {})


def test_an_empty_directory_is_replaced(tmp_path):
    (tmp_path / "run").mkdir()
    path = write_run_dir(make_result(), tmp_path / "run", {})
    assert "summary.parquet" in leftovers(path)


def test_bad_table_is_rejected_before_anything_is_written(tmp_path):
    result = make_result(requests=make_result().requests.drop_columns(["latency_s"]))
    with pytest.raises(SchemaError, match="requests table is missing required columns: latency_s"):
        write_run_dir(result, tmp_path / "run", {})
    assert leftovers(tmp_path) == []


def test_summary_must_have_exactly_one_row(tmp_path):
    two = pa.concat_tables([make_result().summary] * 2)
    with pytest.raises(ValueError, match="one row, got 2"):
        write_run_dir(make_result(summary=two), tmp_path / "run", {})


def test_check_table_reports_wrong_types():
    summary = make_result().summary
    bad = summary.set_column(
        summary.schema.get_field_index("seed"), "seed", pa.array([0.0], pa.float64())
    )
    with pytest.raises(SchemaError, match="seed is double, expected int64"):
        check_table("summary", bad)


def test_intervals_accept_extra_columns_but_type_known_optional_ones():
    intervals = make_result().intervals
    check_table("intervals", intervals.append_column("ipc", pa.array([1.0, 2.0])))
    check_table("intervals", intervals.append_column("nr_throttled", pa.array([0, 1], pa.int64())))
    with pytest.raises(SchemaError, match="nr_throttled is double, expected int64"):
        check_table("intervals", intervals.append_column("nr_throttled", pa.array([0.0, 1.0])))


def test_check_table_rejects_unknown_table_names():
    with pytest.raises(SchemaError, match="unknown results table 'latency'"):
        check_table("latency", make_result().summary)


def test_format_summary_shows_the_headline_numbers():
    text = format_summary(make_result().summary)
    for expected in [
        "poisson on this-vm, scheduler cfs, seed 0",
        "750.00 / 750.00 / 1,200.00 / 1,240.00",  # latency in ms
        "50.0 %",  # cpu util
        "1.50 % of CPU time",  # scheduler overhead
        "1,200 (120/s), mean cost 12.50 µs",
        "40.0 simulated s per wall s",
        "98,765",
    ]:
        assert expected in text
    assert len(text.splitlines()) <= 20


def test_format_summary_shows_throttling_and_the_controller_only_when_present():
    plain = format_summary(make_result().summary)
    assert "throttling" not in plain and "controller" not in plain
    row = dict(SUMMARY_ROW, controllers="static", nr_periods=100, nr_throttled=51,
               throttled_time_s=1.7371)
    text = format_summary(pa.Table.from_pylist([row], schema=SUMMARY))
    assert "scheduler cfs, controller static, seed 0" in text
    assert "51 of 100 periods throttled, 1.737 s throttled in all" in text


def test_format_summary_of_a_real_run_has_no_simulation_lines():
    row = dict(SUMMARY_ROW, backend="real", sched_overhead_frac=float("nan"))
    text = format_summary(pa.Table.from_pylist([row], schema=SUMMARY))
    assert "10.0 s on the real host" in text and "- % of CPU time" in text
    assert "simulated" not in text and "events" not in text


def test_format_summary_tolerates_missing_values():
    row = dict(SUMMARY_ROW, n_requests=0, latency_mean_s=None, latency_p99_s=float("nan"))
    text = format_summary(pa.Table.from_pylist([row], schema=SUMMARY))
    assert "- / 750.00 / 1,200.00 / -" in text
