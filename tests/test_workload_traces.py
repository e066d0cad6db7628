"""Trace-driven workloads: the azure2021 construction (synthetic and loaded
from the public Azure Functions traces), random, and the canonical trace
file (issue: azure2021 and random workloads)."""
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from scenarios.config import compose
from scenarios.validate import ConfigError
from sim.workloads import azure2021, generated, trace_for
from sim.workloads import random as random_workload
from sim.workloads.trace import TraceError, make_trace, read_trace, write_trace

DATA = Path(__file__).resolve().parent / "data"
TRACE_2021 = DATA / "azure2021" / azure2021.FILE_2021
DAY1_2019 = DATA / "azure2019" / "invocations_per_function_md.anon.d01.csv"


def _cfg(workload="azure2021", seed=0, duration_s=10.0, **keys):
    overrides = [f"workload={workload}", f"seed={seed}", f"duration_s={duration_s}",
                 "warmup_s=0", "interval_s=0.1"]
    overrides += [f"workload.{k}={'null' if v is None else v}" for k, v in keys.items()]
    return OmegaConf.to_container(compose(overrides), resolve=True)


def _by_function(table):
    names = np.array(table.column("function").to_pylist())
    t = table.column("arrival_s").to_numpy()
    d = table.column("demand_s").to_numpy()
    return {n: (t[names == n], d[names == n]) for n in np.unique(names)}


def _cpus(table, duration_s):
    return table.column("demand_s").to_numpy().sum() / duration_s


def test_generated_names_and_unknown_workload():
    assert generated() == ["azure2019", "azure2021", "noisy_jobs", "random", "webserver"]
    with pytest.raises(ValueError, match="no trace generator"):
        trace_for({"seed": 0, "duration_s": 1.0, "workload": {"name": "poisson"}})


# --- the synthetic azure2021 population -----------------------------------------------

def test_population_has_the_published_skew():
    rates = azure2021.population()
    bands = azure2021.bands(rates)
    assert len(rates) == 119 and [len(b) for b in bands] == [12] * 9 + [11]
    means = [rates[b].mean() for b in bands]
    assert all(a < b for a, b in zip(means, means[1:]))
    assert means[-1] >= 1000                                   # the busiest: thousands
    assert (rates >= 1000).sum() >= 3
    assert ((rates >= 10) & (rates <= 500)).mean() >= 0.8      # most: tens to low hundreds
    assert 10 <= np.median(rates) < 100


@pytest.mark.parametrize("n", [5, 12, 36, 108, 120, 228])
def test_draws_are_equal_per_band(n):
    rates = azure2021.population()
    bands = azure2021.bands(rates)
    band_of = np.empty(len(rates), dtype=int)
    for b, members in enumerate(bands):
        band_of[members] = b
    picks = azure2021.draw(bands, n, np.random.default_rng(n))
    per_band = np.bincount(band_of[picks], minlength=10)
    assert per_band.sum() == n and per_band.max() - per_band.min() <= 1
    uses = np.bincount(picks, minlength=len(rates))
    assert uses.max() == 1 if n <= 119 else uses.min() >= 1   # reuse only beyond 119


def test_same_seed_same_trace_and_seeds_differ():
    first = trace_for(_cfg(seed=3, functions=24))
    assert first.equals(trace_for(_cfg(seed=3, functions=24)))
    assert not first.equals(trace_for(_cfg(seed=4, functions=24)))
    assert set(first.column("function").to_pylist()) == {f"func-{i}" for i in range(24)}
    t = first.column("arrival_s").to_numpy()
    assert t.min() >= 0 and t.max() < 10.0 and np.all(np.diff(t) >= 0)


def test_interarrivals_are_bursty():
    trace = trace_for(_cfg(functions=36))
    cvs = [np.diff(t).std() / np.diff(t).mean()
           for t, _ in _by_function(trace).values() if len(t) > 500]
    assert cvs and min(cvs) > 1.5
    gaps = np.diff(azure2021.burst_arrivals(100.0, 2000.0, 2.0, np.random.default_rng(1)))
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)
    assert 1 / gaps.mean() == pytest.approx(100.0, rel=0.02)


def test_default_demand_and_the_work_108_functions_offer():
    """The calibrated size (fit_azure_demand) leaves the e5-2430l's work
    capacity to the rd-hashd path's own work and switching: 108 functions'
    Fibonacci work alone is 5.8 of its 7.5 CPUs."""
    cfg = _cfg(functions=108)
    host = cfg["host"]
    capacity = host["sockets"] * host["cores"] * host["smt_throughput"]
    assert capacity == 7.5
    mean = cfg["workload"]["mean_service_s"]
    assert mean == azure2021.MEAN_SERVICE_S
    assert azure2021.offered_load_cpus(108, mean) == pytest.approx(5.826, rel=0.01)
    # the expectation is over the seeded draw; the draw is unbiased
    loads = [azure2021.selection_rates(108, s).sum() * mean for s in range(300)]
    assert np.mean(loads) == pytest.approx(azure2021.offered_load_cpus(108, mean), rel=0.01)
    # and a trace carries its draw's load
    trace = trace_for(cfg)
    assert _cpus(trace, 10.0) == pytest.approx(loads[0], rel=0.03)


@pytest.mark.parametrize("n", [36, 108])
def test_random_matches_azure2021_cpu_demand(n):
    # random's few arrivals need a long run for its realised load to settle
    azure = trace_for(_cfg(functions=n, duration_s=20.0))
    rand = trace_for(_cfg("random", functions=n, duration_s=600.0))
    assert _cpus(rand, 600.0) == pytest.approx(_cpus(azure, 20.0), rel=0.02)
    rates = np.array([len(t) / 600.0 for t, _ in _by_function(rand).values()])
    assert rates.max() < 5.5 and len(rates) <= n


def test_random_demand_is_matched_exactly_or_fixed():
    rates = azure2021.rng(7, "workload/rates").uniform(0.0, 5.0, 108)
    demand = random_workload.matched_service_s(rates, 7)
    target = azure2021.selection_rates(108, 7).sum() * azure2021.MEAN_SERVICE_S
    assert rates.sum() * demand == pytest.approx(target, rel=1e-12)
    assert 0.01 < demand < 0.05
    fixed = trace_for(_cfg("random", functions=4, mean_service_s=0.02))
    assert np.all(fixed.column("demand_s").to_numpy() == 0.02)


# --- loaders --------------------------------------------------------------------------

EXPECTED_2021 = {  # busiest-segment start offsets of the fixture's four functions
    1: [100.0],
    4: [1.0, 2.0, 3.0, 4.0],
    6: [10.0, 15.5, 20.0, 100.25, 200.0, 299.0],
    10: [0.5, 10.0, 20.0, 30.0, 100.0, 150.0, 200.0, 250.0, 298.0, 299.0],
}


def test_2021_loader_keeps_each_functions_busiest_segment():
    functions = azure2021.load_azure2021(TRACE_2021.parent)
    assert [round(f.rate_rps * 300) for f in functions] == [1, 4, 6, 10]
    for f in functions:
        np.testing.assert_allclose(f.offsets_s, EXPECTED_2021[round(f.rate_rps * 300)])
    # same func id in another app is another function; a start is end - duration
    assert functions[1].key.split("/")[1] == functions[2].key.split("/")[1]
    assert functions[3].durations_s[-1] == 2.0


def test_2021_replay_loops_the_segment_and_draws_every_band():
    cfg = _cfg(functions=4, duration_s=700.0, source="azure2021", source_path=TRACE_2021)
    got = {len(t): t for t, _ in _by_function(trace_for(cfg)).values()}
    loops = {n: np.concatenate([np.add(o, k * 300.0) for k in range(3)])
             for n, o in EXPECTED_2021.items()}
    for n, looped in loops.items():
        looped = looped[looped < 700.0]
        np.testing.assert_allclose(got[len(looped)], looped)
    assert len(got) == 4


def test_2021_trace_demands_and_reused_functions():
    cfg = _cfg(functions=8, duration_s=300.0, source="azure2021", source_path=TRACE_2021,
               demand_from="trace")
    per_function = _by_function(trace_for(cfg))
    assert sorted(len(t) for t, _ in per_function.values()) == [1, 1, 4, 4, 6, 6, 10, 10]
    demands = np.concatenate([d for _, d in per_function.values()])
    assert demands.min() == azure2021.MIN_TRACE_DEMAND_S and demands.max() == 42.356
    first, copy = [t for t, _ in per_function.values() if len(t) == 10]
    assert not np.array_equal(np.sort(first), np.sort(copy))  # copies do not burst in lockstep


def test_2019_loader_reads_all_days_and_replays_minute_counts():
    functions = azure2021.load_azure2019(DAY1_2019.parent)
    assert [f.rate_rps * 300 for f in functions] == [5, 150, 900, 1200]
    assert [list(f.minute_counts) for f in functions] == [
        [1] * 5, [30] * 5, [100, 200, 300, 200, 100], [0, 600, 0, 600, 0]]
    assert [f.day for f in functions] == [1, 2, 1, 2]
    assert [f.rate_rps for f in azure2021.load_azure2019(DAY1_2019)] == [5 / 300, 3.0]
    cfg = _cfg(functions=4, duration_s=300.0, source="azure2019",
               source_path=DAY1_2019.parent)
    got = {len(t): t for t, _ in _by_function(trace_for(cfg)).values()}
    assert sorted(got) == [5, 150, 900, 1200]
    per_minute = np.bincount((got[1200] // 60).astype(int), minlength=5)
    assert list(per_minute) == [0, 600, 0, 600, 0]
    assert list(np.bincount((got[900] // 60).astype(int))) == [100, 200, 300, 200, 100]


def test_2019_trace_demands_come_from_the_percentiles_of_the_segments_day():
    cfg = _cfg(functions=4, duration_s=60.0, source="azure2019",
               source_path=DAY1_2019.parent, demand_from="trace")
    per_function = _by_function(trace_for(cfg))
    by_count = {len(t): d for t, d in per_function.values()}
    assert by_count[1].min() >= 0.9 and by_count[1].max() <= 1.1     # timer fn, day 1
    assert 0.005 <= by_count[100].min() and by_count[100].max() <= 0.07
    assert by_count[30].min() >= 0.1 and by_count[30].max() <= 0.2    # day 2's percentiles


# --- bad input ------------------------------------------------------------------------

def test_missing_files_name_the_path_and_the_format(tmp_path):
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2021(tmp_path)
    assert str(tmp_path / azure2021.FILE_2021) in str(err.value)
    assert "app,func,end_timestamp,duration" in str(err.value)
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2019(tmp_path)
    assert str(tmp_path) in str(err.value) and "HashOwner,HashApp,HashFunction" in str(err.value)
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2019(tmp_path / "invocations_per_function_md.anon.d03.csv")
    assert "d03.csv does not exist" in str(err.value)
    shutil.copy(DAY1_2019, tmp_path)
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2019(tmp_path, durations=True)
    assert str(tmp_path / "function_durations_percentiles.anon.d01.csv") in str(err.value)
    assert "percentile_Average_50" in str(err.value)
    with pytest.raises(TraceError, match="does not exist"):
        trace_for(_cfg(source="azure2021", source_path=tmp_path / "nope.txt"))


def _corrupt(source: Path, tmp_path: Path, line: int, edit) -> Path:
    lines = source.read_text().splitlines()
    lines[line - 1] = edit(lines[line - 1])
    target = tmp_path / source.name
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.mark.parametrize("line, edit, message", [
    (5, lambda s: s.rsplit(",", 1)[0] + ",abc", "line 5: column duration = 'abc' is not a number"),
    (3, lambda s: s.rsplit(",", 1)[0] + ",-1", "line 3: column duration = '-1' must be a finite"),
    (7, lambda s: s.rsplit(",", 1)[0], "line 7: 3 fields, expected 4"),
    (4, lambda s: "," + s.split(",", 1)[1], "line 4: column app = '' must not be empty"),
    (1, lambda s: "app,func,end_timestamp,dur", "line 1: missing column(s) duration"),
])
def test_malformed_2021_rows_name_file_and_line(tmp_path, line, edit, message):
    path = _corrupt(TRACE_2021, tmp_path, line, edit)
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2021(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def _field(index, value):
    return lambda s: ",".join(value if i == index else f for i, f in enumerate(s.split(",")))


@pytest.mark.parametrize("name, line, edit, message", [
    (DAY1_2019.name, 3, _field(13, "x"), "line 3: column 10 = 'x' is not an integer"),
    (DAY1_2019.name, 2, _field(5, "-4"), "line 2: column 2 = '-4' must be an integer >= 0"),
    (DAY1_2019.name, 2, _field(0, ""), "line 2: column HashOwner = '' must not be empty"),
    ("function_durations_percentiles.anon.d01.csv", 3, _field(10, "nan"),
     "line 3: column percentile_Average_50 = 'nan' must be a finite number >= 0"),
])
def test_malformed_2019_rows_name_file_and_line(tmp_path, name, line, edit, message):
    for day in DAY1_2019.parent.glob("*d01.csv"):
        shutil.copy(day, tmp_path)
    path = _corrupt(DAY1_2019.parent / name, tmp_path, line, edit)
    with pytest.raises(TraceError) as err:
        azure2021.load_azure2019(tmp_path, durations=True)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_malformed_canonical_trace_names_file_and_line(tmp_path):
    path = write_trace(make_trace(["a", "b", "a"], [0.0, 0.5, 1.0], [0.01] * 3, [1] * 3),
                       tmp_path / "trace.csv")
    bad = _corrupt(path, tmp_path, 3, lambda s: s.replace("0.01", "-0.01"))
    with pytest.raises(TraceError, match=r"trace\.csv, line 3: demand_s must be finite and > 0"):
        read_trace(bad)
    bad = _corrupt(path, tmp_path, 4, lambda s: s.replace("0.01", "soon"))
    with pytest.raises(TraceError, match=r"trace\.csv, line 4: "):
        read_trace(bad)
    with pytest.raises(TraceError, match=r"nope\.csv does not exist; expected an invocation"):
        read_trace(tmp_path / "nope.csv")


def test_config_checks_of_the_generated_workloads():
    with pytest.raises(ConfigError, match="workload.source_path = None is invalid: must name"):
        compose(["workload=azure2021", "workload.source=azure2021"])
    with pytest.raises(ConfigError, match="workload.demand_from = trace is invalid: needs"):
        compose(["workload=azure2021", "workload.demand_from=trace"])
    with pytest.raises(ConfigError, match="workload.burstiness = 0.0 is invalid: must be > 0"):
        compose(["workload=random", "workload.burstiness=0"])
    with pytest.raises(ConfigError, match="workload.mean_service_s = -1.0 is invalid"):
        compose(["workload=random", "workload.mean_service_s=-1"])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_generated_trace_round_trips_through_files(tmp_path, suffix):
    trace = trace_for(_cfg(functions=12, duration_s=2.0, service="lognormal",
                           threads_per_request=2))
    assert read_trace(write_trace(trace, tmp_path / f"t{suffix}")).equals(trace)
