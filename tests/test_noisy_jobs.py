"""workload=noisy_jobs: the noisy-neighbor thesis's job stream ("Mitigating
the Noisy Neighbor Problem: Improving Isolation of Containers on Multi-Tenant
Intel Cloud Servers", §5.1): the generated job trace's statistics, its file
format, and its replay."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from scipy.stats import norm

from results.rundir import TRACE_FILE
from scenarios.config import compose
from scenarios.runner import run_scenario
from scenarios.validate import ConfigError
from sim.config import from_mapping
from sim.workloads import noisy_jobs, trace_for
from scenarios.simulate import simulate
from sim.workloads.noisy_jobs import JOB_SCHEMA, make_jobs, read_jobs, write_jobs
from sim.workloads.trace import TraceError
from simcfg import make_cfg, run_for


def _wcfg(**keys):
    overrides = ["workload=noisy_jobs"] + [f"workload.{k}={'null' if v is None else v}"
                                           for k, v in keys.items()]
    return OmegaConf.to_container(compose(overrides), resolve=True)["workload"]


def _generate(wcfg: dict, seed: int, duration_s: float):
    return noisy_jobs.generate(from_mapping(noisy_jobs.NoisyJobsConfig, wcfg, "workload"),
                               seed, duration_s)


@pytest.fixture(scope="module")
def long_draws():
    """~20,000 jobs per scenario, seed 0."""
    return {s: _generate(_wcfg(scenario=s), 0, 100_000.0) for s in noisy_jobs.SCENARIOS}


def test_long_draw_matches_the_published_parameters(long_draws):
    jobs = long_draws["high_utilization"]
    n = jobs.num_rows
    arrivals = jobs.column("arrival_s").to_numpy()
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    length = jobs.column("length_s").to_numpy()
    cores = jobs.column("cores").to_numpy()
    high = np.array(jobs.column("sensitivity").to_pylist()) == "high"
    assert 19_000 < n < 21_000 and np.all(np.diff(arrivals) >= 0) and arrivals[-1] < 100_000
    # Normal(5, 2) with negative draws taken as 0: E = mu Phi(mu/sd) + sd phi(mu/sd)
    mean_gap = 5 * norm.cdf(2.5) + 2 * norm.pdf(2.5)
    assert gaps.min() >= 0
    assert gaps.mean() == pytest.approx(mean_gap, abs=4 * 2 / np.sqrt(n))
    assert gaps.std() == pytest.approx(2.0, rel=0.05)
    # Normal(140, 30) floored at 30 s: E = 30 Phi(z) + 140 (1 - Phi(z)) + 30 phi(z)
    z = (30 - 140) / 30
    mean_len = 30 * norm.cdf(z) + 140 * (1 - norm.cdf(z)) + 30 * norm.pdf(z)
    assert length.min() >= 30.0
    assert length.mean() == pytest.approx(mean_len, abs=4 * 30 / np.sqrt(n))
    assert set(cores) == {1, 2}
    assert cores.mean() == pytest.approx(1.5, abs=4 * 0.5 / np.sqrt(n))
    assert high.mean() == pytest.approx(0.25, abs=4 * np.sqrt(0.25 * 0.75 / n))


def test_scenarios_differ_only_in_priority_share(long_draws):
    base = long_draws["low_demand"].drop(["priority"])
    prio = {}
    for scenario, share in noisy_jobs.SCENARIOS.items():
        jobs = long_draws[scenario]
        assert jobs.drop(["priority"]).equals(base)
        prio[scenario] = np.asarray(jobs.column("priority").to_pylist())
        n = jobs.num_rows
        assert prio[scenario].mean() == pytest.approx(share,
                                                      abs=4 * np.sqrt(share * (1 - share) / n))
    assert noisy_jobs.SCENARIOS == {"low_demand": 0.1, "high_utilization": 0.2,
                                    "exceeding_demand": 0.5}
    # the 10% are among the 20%, which are among the 50%
    assert np.all(prio["low_demand"] <= prio["high_utilization"])
    assert np.all(prio["high_utilization"] <= prio["exceeding_demand"])
    # an explicit share overrides the scenario's
    jobs = _generate(_wcfg(priority_share=1.0), 0, 600.0)
    assert all(jobs.column("priority").to_pylist())


def test_priority_pool_high_makes_the_priority_jobs_the_highly_sensitive_ones():
    any_pool = _generate(_wcfg(scenario="exceeding_demand"), 3, 3600.0)
    assert noisy_jobs.NoisyJobsConfig.__dataclass_fields__["priority_pool"].default == "any"
    assert any_pool.equals(_generate(_wcfg(scenario="exceeding_demand", priority_pool="any"),
                                     3, 3600.0))
    high = _generate(_wcfg(scenario="exceeding_demand", priority_pool="high"), 3, 3600.0)
    # only the sensitivity column changes: high exactly where priority
    assert high.drop(["sensitivity"]).equals(any_pool.drop(["sensitivity"]))
    prio = np.asarray(high.column("priority").to_pylist())
    sens = np.asarray(high.column("sensitivity").to_pylist())
    assert np.array_equal(sens == "high", prio) and 0.4 < prio.mean() < 0.6
    # with the default, priority jobs come from both classes
    sens_any = np.asarray(any_pool.column("sensitivity").to_pylist())
    assert (sens_any[prio] == "moderate").any() and (sens_any[~prio] == "high").any()


def test_same_seed_same_file_and_seeds_differ(tmp_path):
    wcfg = _wcfg()
    a = write_jobs(_generate(wcfg, 7, 3600.0), tmp_path / "a.parquet")
    b = write_jobs(_generate(wcfg, 7, 3600.0), tmp_path / "b.parquet")
    c = write_jobs(_generate(wcfg, 8, 3600.0), tmp_path / "c.parquet")
    assert a.read_bytes() == b.read_bytes()
    assert not read_jobs(a).equals(read_jobs(c))
    cfg = {"seed": 7, "duration_s": 3600.0, "workload": wcfg}
    assert trace_for(cfg).equals(read_jobs(a))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_job_trace_round_trips(tmp_path, suffix):
    jobs = _generate(_wcfg(), 1, 600.0)
    assert jobs.schema.equals(JOB_SCHEMA)
    assert read_jobs(write_jobs(jobs, tmp_path / f"jobs{suffix}")).equals(jobs)


_GOOD = "job-0,0.0,10.0,1,moderate,false\n"


@pytest.mark.parametrize("row, message", [
    ("job-1,1.0,-2.0,1,high,true", "line 3: length_s must be finite and > 0 (got -2.0)"),
    ("job-1,1.0,2.0,0,high,true", "line 3: cores must be >= 1 (got 0)"),
    ("job-1,1.0,2.0,1,extreme,true", "line 3: sensitivity must be one of moderate, high"),
    ("job-1,1.0,2.0,1,high,maybe", "line 3: priority must be true or false"),
    ("job-1,soon,2.0,1,high,true", "line 3: arrival_s = 'soon' is not a number"),
    ("job-1,1.0,2.0,1,high", "line 3: 5 fields, expected 6"),
    ("job-0,1.0,2.0,1,high,true", "line 3: job 'job-0' appears twice"),
])
def test_malformed_csv_names_file_line_and_problem(tmp_path, row, message):
    path = tmp_path / "jobs.csv"
    path.write_text(",".join(JOB_SCHEMA.names) + "\n" + _GOOD + row + "\n")
    with pytest.raises(TraceError, match=f"{path}, " + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        read_jobs(path)


def test_bad_files_name_the_path_and_the_format(tmp_path):
    with pytest.raises(TraceError, match=f"job trace {tmp_path / 'no.parquet'} does not exist; "
                                         "expected a job trace: Parquet or CSV"):
        read_jobs(tmp_path / "no.parquet")
    pq.write_table(pa.table({"job": ["a"], "arrival_s": [0.0]}), tmp_path / "short.parquet")
    with pytest.raises(TraceError, match="missing column.*length_s, cores, sensitivity, priority"):
        read_jobs(tmp_path / "short.parquet")
    bad = pa.table({"job": ["a", "b"], "arrival_s": [0.0, float("nan")], "length_s": [1.0, 1.0],
                    "cores": pa.array([1, 1], pa.int32()), "sensitivity": ["high", "high"],
                    "priority": [True, False]})
    pq.write_table(bad, tmp_path / "nan.parquet")
    with pytest.raises(TraceError, match="nan.parquet, row 1: arrival_s must be finite"):
        read_jobs(tmp_path / "nan.parquet")
    (tmp_path / "h.csv").write_text("job,arrival_s,length_s,cores\n")
    with pytest.raises(TraceError, match="h.csv, line 1: header"):
        read_jobs(tmp_path / "h.csv")


def test_config_checks():
    with pytest.raises(ConfigError, match="workload.scenario = busy is invalid: must be one of "
                                          "low_demand, high_utilization, exceeding_demand"):
        compose(["workload=noisy_jobs", "workload.scenario=busy"])
    with pytest.raises(ConfigError, match=r"workload.priority_share = 1.5 is invalid: must be "
                                          r"in \[0, 1\]"):
        compose(["workload=noisy_jobs", "workload.priority_share=1.5"])
    with pytest.raises(ConfigError, match=r"workload.cores\[1\] = 0 is invalid: must be >= 1"):
        compose(["workload=noisy_jobs", "workload.cores=[1,0]"])


def _replay_cfg(jobs, tmp_path, cores):
    path = write_jobs(jobs, tmp_path / "jobs.parquet")
    return make_cfg(dict(_wcfg(), trace_file=str(path)), cores=cores, duration_s=10.0,
                    warmup_s=0.0)


def test_jobs_alone_take_their_length_in_their_own_cgroups(tmp_path):
    """3 threads on 4 CPUs: each job completes exactly its length after arrival."""
    jobs = make_jobs(["a", "b"], [0.0, 1.0], [2.0, 3.0], [1, 2], ["moderate", "high"],
                     [False, True])
    machine, wl, rec = run_for(_replay_cfg(jobs, tmp_path, cores=4), 10.0)
    rows = {r[0]: r for r in rec.rows}
    assert rows["a"][1] == "/jobs.slice/a" and rows["b"][1] == "/jobs.slice/b"
    assert (rows["a"][4] - rows["a"][2]) / 1e9 == pytest.approx(2.0, abs=1e-9)
    assert (rows["b"][4] - rows["b"][2]) / 1e9 == pytest.approx(3.0, abs=1e-9)
    assert rows["b"][5] / 1e9 == pytest.approx(6.0)        # 2 cores x 3 s of CPU
    assert wl.job_class == {"/jobs.slice/a": ("moderate", False),
                            "/jobs.slice/b": ("high", True)}


def test_contending_jobs_are_slowed_down(tmp_path):
    """Two 1-core jobs of 1 s on one CPU share it: both complete at 2 s
    (slowdown 2, the latency reported)."""
    jobs = make_jobs(["a", "b"], [0.0, 0.0], [1.0, 1.0], [1, 1], ["moderate"] * 2, [False] * 2)
    lat = simulate(_replay_cfg(jobs, tmp_path, cores=1)).requests.column("latency_s")
    assert lat.to_pylist() == pytest.approx([2.0, 2.0], abs=0.01)


def test_a_run_generates_and_keeps_its_job_trace(tmp_path):
    cfg = compose(["workload=noisy_jobs", "host=generic", "duration_s=40", "warmup_s=0",
                   "workload.length_mean_s=4", "workload.length_sd_s=1", "workload.length_min_s=1",
                   "calibration=ideal", "seed=5"])
    summary = run_scenario(cfg, tmp_path / "run")
    kept = read_jobs(tmp_path / "run" / TRACE_FILE)
    assert kept.equals(trace_for(OmegaConf.to_container(cfg, resolve=True)))
    n_done = summary.column("n_requests")[0].as_py()
    assert 0 < n_done <= kept.num_rows
    with pytest.raises(ValueError, match="workload noisy_jobs replays a job trace"):
        simulate(cfg)
