"""Invocation traces (sim/workloads/trace.py): the file format's checks and
the simulator's open-loop replay."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from scenarios.config import compose
from scenarios.runner import run_scenario
from scenarios.simulate import simulate
from sim.workloads import workload_class
from sim.workloads.noisy_jobs import make_jobs, write_jobs
from sim.workloads.trace import TraceError, make_trace, read_trace, write_trace
from tests.simcfg import make_cfg
from tests.stats import assert_matches_theory


def _trace_workload(trace_file=None, **kw):
    return {"name": "trace", "working_set_kb": 256, "cgroup_weight": 100, "nice": 0,
            "parent_cgroup": "faas.slice", "trace_file": trace_file, **kw}


def _latencies(result, function=None):
    rows = result.requests.to_pylist()
    return [r["latency_s"] for r in rows if function is None or r["function"] == function]


def test_requests_alone_on_a_cpu_take_exactly_their_demand():
    n = 50
    trace = make_trace(["f"] * n, [0.1 * i for i in range(n)], [0.01] * n, [1] * n)
    res = simulate(make_cfg(_trace_workload(), duration_s=5.5, warmup_s=0.0), trace=trace)
    lat = _latencies(res)
    assert len(lat) == n
    assert lat == pytest.approx([0.01] * n, abs=1e-9)


def test_fork_join_request_ends_when_its_last_thread_does():
    """Two threads of 10 ms each on two idle cores finish together; on one
    core they share it and the request takes the full 20 ms."""
    trace = make_trace(["f"], [0.5], [0.02], [2])
    two = simulate(make_cfg(_trace_workload(), cores=2, duration_s=1.0, warmup_s=0.0),
                   trace=trace)
    one = simulate(make_cfg(_trace_workload(), cores=1, duration_s=1.0, warmup_s=0.0),
                   trace=trace)
    assert _latencies(two) == pytest.approx([0.01], abs=1e-9)
    assert _latencies(one) == pytest.approx([0.02], abs=1e-9)


def test_functions_get_their_own_cgroups_under_the_parent():
    trace = make_trace(["a", "b", "a"], [0.0, 0.0, 0.5], [0.01] * 3, [1] * 3)
    res = simulate(make_cfg(_trace_workload(), duration_s=1.0, warmup_s=0.0), trace=trace)
    cgroups = sorted({r["cgroup"] for r in res.requests.to_pylist()})
    assert cgroups == ["/faas.slice/a", "/faas.slice/b"]


def test_replayed_poisson_trace_matches_processor_sharing():
    """A trace of Poisson arrivals with exponential demands, ρ = 0.5 on one
    core with ideal costs, replays as an M/M/1-PS queue: mean latency
    E[S]/(1-ρ) = 20 ms, checked with a batch-means 99% interval."""
    rng = np.random.default_rng(7)
    duration, mean_s, rate = 400.0, 0.01, 50.0
    arrivals = np.cumsum(rng.exponential(1 / rate, int(rate * duration * 1.1)))
    arrivals = arrivals[arrivals < duration]
    trace = make_trace(["f"] * len(arrivals), arrivals, rng.exponential(mean_s, len(arrivals)),
                       [1] * len(arrivals))
    res = simulate(make_cfg(_trace_workload(), duration_s=duration, warmup_s=10.0),
                   trace=trace)
    assert_matches_theory("trace replay, M/M/1-PS", np.array(_latencies(res)),
                          mean_s / (1 - 0.5), 0.03, long_run=False)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_trace_files_round_trip(tmp_path, suffix):
    trace = make_trace(["f", "g"], [0.25, 0.125], [0.001, 1e-7], [1, 3])
    path = write_trace(trace, tmp_path / f"t{suffix}")
    assert read_trace(path).equals(trace)


def test_a_run_replays_its_trace_file(tmp_path):
    trace = make_trace(["f"] * 3, [0.1, 0.2, 0.3], [0.01] * 3, [1] * 3)
    path = write_trace(trace, tmp_path / "t.parquet")
    res = simulate(make_cfg(_trace_workload(trace_file=str(path)), duration_s=1.0,
                            warmup_s=0.0))
    assert _latencies(res) == pytest.approx([0.01] * 3, abs=1e-9)


def test_a_trace_workload_without_a_trace_says_how_to_get_one():
    with pytest.raises(ValueError, match="set workload.trace_file, or pass trace="):
        simulate(make_cfg(_trace_workload(), duration_s=1.0, warmup_s=0.0))


def test_missing_trace_file_names_path_and_format(tmp_path):
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "nope.csv")
    assert str(tmp_path / "nope.csv") in str(err.value)
    assert "columns function (string), arrival_s" in str(err.value)


@pytest.mark.parametrize("row, problem", [
    ("f,0.5,0.01", "3 fields, expected 4"),
    # the column, not float()'s "could not convert string to float"
    ("f,abc,0.01,1", "arrival_s = 'abc' is not a number"),
    ("f,0.5,0.01,two", "threads = 'two' is not an integer"),
    ("f,0.5,0,1", "demand_s must be finite and > 0 (got 0.0)"),
    # the value as written, not numpy's np.float64(-1.0)
    ("f,-1,0.01,1", "arrival_s must be finite and >= 0 (got -1.0)"),
    ("f,0.5,0.01,0", "threads must be >= 1"),
    (",0.5,0.01,1", "empty function name"),
])
def test_malformed_csv_row_names_file_line_and_problem(tmp_path, row, problem):
    path = tmp_path / "t.csv"
    path.write_text("function,arrival_s,demand_s,threads\nf,0.1,0.01,1\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert f"{path}, line 3: " in str(err.value)
    assert problem in str(err.value)


@pytest.mark.parametrize("rows, problem", [
    ("", "no rows, nothing to replay"),
    ("f,12.0,0.01,1\nf,30.0,0.01,1\n", "every arrival is at or after duration_s = 10.0 s (the "
     "first at 12.0 s): nothing would arrive in the run"),
])
def test_a_trace_file_with_nothing_to_replay_is_refused_before_the_run(tmp_path, capsys, rows,
                                                                       problem):
    """Before: a run of 0 requests, reported as a result."""
    path = tmp_path / "t.csv"
    path.write_text("function,arrival_s,demand_s,threads\n" + rows)
    out = tmp_path / "run"
    assert main(["run", "workload=azure2021", f"workload.trace_file={path}",
                 f"output_dir={out}"]) == 2
    assert capsys.readouterr().err == f"colosim: error: workload.trace_file {path}: {problem}\n"
    assert not out.exists()


def test_parquet_with_wrong_columns_is_rejected(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"function": ["f"], "arrival": [0.0]}), path)
    with pytest.raises(TraceError, match="missing column"):
        read_trace(path)


@pytest.mark.parametrize("workload, write, table", [
    ("random", write_trace, lambda: make_trace(["f", "g"], [0.2, 0.1], [0.01, 0.02], [1, 2])),
    ("noisy_jobs", write_jobs, lambda: make_jobs(["a", "b"], [0.0, 0.3], [0.2, 0.1], [1, 2],
                                                 ["moderate", "high"], [False, True])),
])
def test_a_trace_file_replay_keeps_the_file_as_the_runs_trace(tmp_path, workload, write, table):
    path = write(table(), tmp_path / "input.csv")
    cfg = compose([f"workload={workload}", f"workload.trace_file={path}", "host=generic",
                   "host.cores=2", "duration_s=1", "warmup_s=0"])
    run_scenario(cfg, tmp_path / "run")
    kept = pq.read_table(tmp_path / "run" / "trace.parquet")
    assert kept.equals(workload_class(workload).read_trace_file(path))
    # and the run replayed exactly it
    assert pq.read_table(tmp_path / "run" / "requests.parquet").num_rows == 2
