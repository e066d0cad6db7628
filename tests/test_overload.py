"""Honest summaries: unfinished requests and the overload flag
(results/schema.py request_columns), on small simulated hosts."""
import pyarrow as pa
import pytest

from results.schema import (OVERLOAD_BACKLOG_RATIO, OVERLOAD_MIN_UNFINISHED, OVERLOAD_UNFINISHED_FRAC,
                            request_columns)
from results.summary import format_summary
from scenarios.config import compose
from scenarios.simulate import simulate


def _run(*overrides):
    cfg = compose(["host=generic", "host.cores=1", "workload=poisson", "workload.functions=2",
                   "duration_s=5", "warmup_s=0.5", *overrides])
    return simulate(cfg).summary.to_pylist()[0]


def test_an_overloaded_host_is_flagged_and_its_unfinished_requests_counted():
    # 2 x 150 req/s x 10 ms = 3 CPUs of work on one core
    s = _run("workload.rate_rps=150")
    arrived = s["n_requests"] + s["n_unfinished"]
    assert s["unfinished_frac"] == pytest.approx(s["n_unfinished"] / arrived)
    assert s["unfinished_frac"] > 0.5 and s["overloaded"]
    assert s["backlog_ratio"] > OVERLOAD_BACKLOG_RATIO
    text = format_summary(pa.Table.from_pylist([s]))
    assert f"{arrived:,} arrived in the window" in text
    assert f"{s['n_unfinished']:,} unfinished ({100 * s['unfinished_frac']:.1f} %)" in text
    assert "overloaded      YES, the backlog grew" in text
    finished = s["n_requests"] - s["n_dropped"]
    assert f"of the {finished:,} finished; {s['n_unfinished']:,} unfinished excluded" in text


def test_a_host_at_half_load_is_not_flagged():
    s = _run("workload.rate_rps=25")
    assert s["unfinished_frac"] < OVERLOAD_UNFINISHED_FRAC and not s["overloaded"]
    assert "overloaded      no" in format_summary(pa.Table.from_pylist([s]))


def test_requests_long_against_the_window_are_not_taken_for_a_backlog():
    # 20 functions x 0.5 req/s x 1 s on 16 cores: stable, yet about one
    # second of arrivals (~10 %) is in flight at the end of a 10 s window
    cfg = compose(["host=generic", "host.cores=16", "workload=poisson", "workload.functions=20",
                   "workload.rate_rps=0.5", "workload.service=det", "workload.mean_service_s=1",
                   "duration_s=10", "warmup_s=0"])
    s = simulate(cfg).summary.to_pylist()[0]
    assert s["unfinished_frac"] > OVERLOAD_UNFINISHED_FRAC      # the share alone would flag it
    assert s["backlog_ratio"] < OVERLOAD_BACKLOG_RATIO and not s["overloaded"]


def test_request_columns_without_any_finished_request():
    empty = pa.table({"latency_s": pa.array([], pa.float64()),
                      "dropped": pa.array([], pa.bool_())})
    row = request_columns(empty, 1.0, 1.0, n_unfinished=OVERLOAD_MIN_UNFINISHED)
    assert row["unfinished_frac"] == 1.0 and row["backlog_ratio"] == float("inf")
    assert row["overloaded"]
    # fewer is chance, whatever its share
    row = request_columns(empty, 1.0, 1.0, n_unfinished=OVERLOAD_MIN_UNFINISHED - 1)
    assert row["unfinished_frac"] == 1.0 and not row["overloaded"]
    row = request_columns(empty, 1.0, 1.0, n_unfinished=0)
    assert not row["overloaded"]
