"""`colosim validate`: how far the simulator is from this host, on scenarios
the calibration never saw.

For each scenario of a suite (calibration/suites/*.yaml: named lists of
`colosim run` overrides) it runs ``backend=real`` and then ``backend=sim``
with the same overrides, seed and ``calibration=PROFILE`` through
scenarios.runner.run_scenario, and compares the two summaries metric by
metric: relative error (sim - real) / real, and a target where issue 8 sets
one.  Both backends see the same requests: the real run writes the trace it
replayed (trace.parquet), and the simulator draws the same trace from the
same seeded streams (poisson, worker_pool: backends/real/trace.py) or reads
the same trace_file; :func:`replay_mismatch` checks every simulated request
against the real run's trace, so a difference is reported, never silent.
Closed loops (periodic) have no trace: their config is their input.

Results go to one directory: ``runs/<scenario>-real`` and
``runs/<scenario>-sim`` (so `colosim compare` and `colosim report` read it
as a sweep), ``validation.parquet`` (one row per scenario x metric), the
suite file used, and report.html with a Validation section.
"""
from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from backends.real import cgroupfs
from results.compare import ks, schedule_cell, schedule_rows
from results.readers import RUNS
from results.report import write_report
from results.rundir import TRACE_FILE, RunDir, ensure_writable, read_run_dir
from results.validation import SCHEDULE_METRICS, VALIDATION_FILE, VALIDATION_SCHEMA, to_frame
from scenarios.config import compose, list_options
from scenarios.runner import RunError, run_scenario
from scenarios.validate import ConfigError
from sim.workloads.trace import TraceError

SUITES_DIR = Path(__file__).resolve().parent / "suites"
DEFAULT_SUITE = SUITES_DIR / "heldout.yaml"
SUITE_COPY = "suite.yaml"

# issue 8's targets for this machine's held-out suite: |relative error| at most.
# The context-switch target is on switch_out_rate_per_s, the count both
# backends take the same way (switches away from the workload's tasks, what
# perf -G counts); ctx_switch_rate_per_s is the simulator's every switch on
# every CPU against perf's count, shown without a target.
TARGETS = {"throughput_rps": 0.05, "cpu_util": 0.05, "latency_p50_s": 0.10,
           "latency_p99_s": 0.20, "switch_out_rate_per_s": 0.20}
METRICS = ("throughput_rps", "goodput_rps", "latency_p50_s", "latency_p95_s", "latency_p99_s",
           "switch_out_rate_per_s", "ctx_switch_rate_per_s", "migration_rate_per_s", "cpu_util",
           "throttled_time_s")
BACKENDS = ("real", "sim")


class ValidateError(ValueError):
    """An unknown profile or scenario, or a suite file that cannot be used;
    the message lists what is valid."""


@dataclass(frozen=True)
class Suite:
    path: Path
    description: str
    common: list[str]
    quick: list[str]
    scenarios: dict[str, list[str]]
    real: list[str]          # backend.* keys: only the backend=real runs have them

    def overrides(self, name: str, quick: bool, backend: str = "sim") -> list[str]:
        return [*self.common, *self.scenarios[name], *(self.quick if quick else []),
                f"backend={backend}", *(self.real if backend == "real" else [])]


def load_suite(path: str | Path = DEFAULT_SUITE) -> Suite:
    path = Path(path)
    if not path.is_file():
        found = ", ".join(str(p) for p in sorted(SUITES_DIR.glob("*.yaml")))
        raise ValidateError(f"suite file {path} does not exist; suites here: {found}")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ValidateError(f"{path}: not YAML ({err})") from None

    def overrides(value, where: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValidateError(f"{path}: {where} must be a list of overrides "
                                f"(strings such as workload.functions=8), got {value!r}")
        return list(value)

    scenarios = doc.get("scenarios")
    if not isinstance(scenarios, dict) or not scenarios:
        raise ValidateError(f"{path}: needs `scenarios:`, a mapping of scenario name to a list "
                            "of `colosim run` overrides")
    return Suite(path=path, description=str(doc.get("description", "")),
                 common=overrides(doc.get("common"), "common"),
                 quick=overrides(doc.get("quick"), "quick"),
                 real=overrides(doc.get("real"), "real"),
                 scenarios={str(k): overrides(v, f"scenario {k}") for k, v in scenarios.items()})


def select(suite: Suite, names: list[str] | None) -> list[str]:
    """The scenarios to run, in suite order when none are named."""
    if not names:
        return list(suite.scenarios)
    unknown = [n for n in names if n not in suite.scenarios]
    if unknown:
        raise ValidateError(f"unknown scenario{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)} in {suite.path}; valid scenarios: "
                            f"{', '.join(suite.scenarios)}")
    return list(dict.fromkeys(names))


def check_profile(profile: str) -> None:
    profiles = list_options().get("calibration", [])
    if profile not in profiles:
        raise ValidateError(f"unknown calibration profile {profile!r}; valid profiles "
                            f"(scenarios/conf/calibration/): {', '.join(profiles)}")


# ---------------------------------------------------------------- comparison

def _number(value) -> float:
    """A summary value as float; None and NaN are missing (NaN)."""
    return math.nan if value is None else float(value)


def rel_error(real: float, sim: float) -> float:
    """(sim - real) / real; NaN when either is missing; 0 when both are 0,
    signed infinity when only the real value is 0."""
    real, sim = _number(real), _number(sim)
    if math.isnan(real) or math.isnan(sim):
        return math.nan
    if real == 0:
        return 0.0 if sim == 0 else math.copysign(math.inf, sim)
    return (sim - real) / real


def within(error: float, target: float | None) -> bool | None:
    """Pass (True) / miss (False) against ``target``; None when there is no
    target or the error is missing, so a missing value never passes."""
    if target is None or math.isnan(error):
        return None
    return bool(abs(error) <= target)


def completed_latencies(requests: pa.Table) -> np.ndarray:
    frame = requests.select(["latency_s", "dropped"]).to_pandas()
    return frame.loc[~frame["dropped"].astype(bool), "latency_s"].dropna().to_numpy()


def metric_values(summary: dict, window_s: float) -> dict[str, float]:
    """The compared metrics from one summary row (migrations as a rate over
    the same window as the context switches)."""
    values = {m: _number(summary.get(m)) for m in METRICS if m != "migration_rate_per_s"}
    migrations = _number(summary.get("migrations"))
    values["migration_rate_per_s"] = migrations / window_s if window_s > 0 else math.nan
    return values


def scenario_rows(scenario: str, real: dict | None, sim: dict | None, real_latency=(),
                  sim_latency=(), runs: tuple[str, str] = ("", ""), note: str = "",
                  window_s: float = math.nan) -> list[dict]:
    """One row per metric; a backend that did not run (None) gives missing values."""
    rv = metric_values(real, window_s) if real is not None else {}
    sv = metric_values(sim, window_s) if sim is not None else {}
    # a real run measured on a disturbed host is flagged, not compared
    disturbed = bool(real.get("host_disturbed")) if real is not None else None
    stat, p = ks(real_latency, sim_latency)
    rows = []
    for m in METRICS:
        r, s = rv.get(m, math.nan), sv.get(m, math.nan)
        err = rel_error(r, s)
        target = TARGETS.get(m)
        rows.append({"scenario": scenario, "metric": m, "real": r, "sim": s, "rel_error": err,
                     "target": math.nan if target is None else target,
                     "ok": None if disturbed else within(err, target),
                     "real_disturbed": disturbed, "ks_stat": stat, "ks_pvalue": p,
                     "n_real": int(np.size(real_latency)), "n_sim": int(np.size(sim_latency)),
                     "real_run": runs[0], "sim_run": runs[1], "note": note})
    return rows


def _mean(samples) -> float:
    return float(np.mean(samples)) if len(samples) else math.nan


def replay_mismatch(trace: pa.Table, requests: pa.Table, n_unfinished: int,
                    warmup_s: float) -> str | None:
    """Why the simulator's requests are not exactly the trace's rows after
    warm-up (None: every request is a row with its demand, and every row is a
    request or still unfinished at the end)."""
    t = trace.select(["function", "arrival_s", "demand_s"]).to_pandas()
    t = t[t["arrival_s"] >= warmup_s]
    r = requests.select(["function", "arrival_s", "cpu_demand_s"]).to_pandas()
    m = r.merge(t, on=["function", "arrival_s"], how="left")
    strangers = int(m["demand_s"].isna().sum())
    if strangers:
        return f"{strangers} simulated request(s) are not in the real run's trace"
    off = ~np.isclose(m["cpu_demand_s"], m["demand_s"], rtol=0, atol=1e-9)
    if off.any():
        return f"{int(off.sum())} simulated request(s) have another demand than in the trace"
    if len(r) + n_unfinished != len(t):
        return (f"the simulator saw {len(r) + n_unfinished} requests after warm-up, the trace "
                f"has {len(t)}")
    return None


# ---------------------------------------------------------------- running

def _preflight_real() -> None:
    """The real backend's own refusal (root, cgroup controllers), before
    anything runs: without it no scenario can be validated."""
    try:
        cgroupfs.preflight(cgroupfs.detect_layout())
    except (cgroupfs.CgroupError, OSError) as err:
        raise ValidateError(f"validate runs every scenario on backend=real: {err}") from None


def validate(profile: str, suite: Suite, names: list[str], out: Path, quick: bool = False,
             progress=None, preflight=_preflight_real) -> pd.DataFrame:
    """Run ``names`` of ``suite`` on both backends into ``out`` and return the
    validation frame (also written as validation.parquet and report.html)."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    check_profile(profile)
    configs = {}
    for name in names:   # every config is checked before anything runs
        for backend in BACKENDS:
            overrides = [*suite.overrides(name, quick, backend), f"calibration={profile}"]
            try:
                configs[name, backend] = compose(overrides)
            except ConfigError as err:
                raise ValidateError(f"scenario {name} ({suite.path}), backend={backend}: "
                                    f"{err}") from None
    preflight()
    ensure_writable(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(suite.path, out / SUITE_COPY)
    rows: list[dict] = []
    total, k = 2 * len(names), 0
    for name in names:
        dirs = {b: out / RUNS / f"{name}-{b}" for b in BACKENDS}
        done: dict[str, RunDir] = {}
        notes: list[str] = []
        for backend in BACKENDS:
            k += 1
            if backend == "sim" and "real" not in done:
                say(f"[{k}/{total}] {name} sim: skipped (the real run failed)")
                continue
            cfg = configs[name, backend]
            t0 = time.perf_counter()
            say(f"[{k}/{total}] {name} {backend}: {cfg.duration_s:g} s ...")
            error = _run(cfg, dirs[backend])
            if error:
                notes.append(f"{backend} run failed: {error}")
                say(f"[{k}/{total}] {name} {backend}: FAILED ({error})")
                continue
            done[backend] = read_run_dir(dirs[backend])
            say(f"[{k}/{total}] {name} {backend}: done in {time.perf_counter() - t0:.1f} s")
        rows += _compare(name, done.get("real"), done.get("sim"), configs[name, "real"], notes)
    frame = to_frame(rows)
    tmp = out / f".{VALIDATION_FILE}.tmp"
    pq.write_table(pa.Table.from_pandas(frame, schema=VALIDATION_SCHEMA, preserve_index=False),
                   tmp)
    tmp.replace(out / VALIDATION_FILE)
    if (frame["real_run"] != "").any():
        write_report(out)
    return frame


def _compare(name: str, real: RunDir | None, sim: RunDir | None, cfg,
             notes: list[str]) -> list[dict]:
    """The scenario's rows, noting a trace the simulator did not replay and
    a real run without perf counts."""
    warmup = float(cfg.warmup_s)
    summaries = [r.summary.to_pylist()[0] if r else None for r in (real, sim)]
    if real is not None and sim is not None:
        trace_path = real.path / TRACE_FILE
        trace = pq.read_table(trace_path) if trace_path.is_file() else None
        if trace is not None and trace.num_rows:
            why = replay_mismatch(trace, sim.requests,
                                  int(summaries[1].get("n_unfinished") or 0), warmup)
            if why:
                notes.append(f"the simulator did not replay the real trace: {why}")
        if summaries[0].get("perf_status") not in (None, "ok"):
            notes.append(f"perf {summaries[0]['perf_status']}")
        if summaries[0].get("host_disturbed"):
            notes.append(f"real host disturbed, not compared: "
                         f"{summaries[0]['host_disturbed_reason']}")
    runs = tuple(r.path.name if r else "" for r in (real, sim))
    rows = scenario_rows(
        name, *summaries,
        *(completed_latencies(r.requests) if r else () for r in (real, sim)),
        runs, "; ".join(notes), float(cfg.duration_s) - warmup)
    if real is not None and sim is not None:
        rows += schedule_validation_rows(name, real.path, sim.path, runs)
    return rows


def schedule_validation_rows(scenario: str, real: Path, sim: Path,
                             runs: tuple[str, str] = ("", "")) -> list[dict]:
    """Per cgroup, where both runs have sched.parquet (none otherwise): the
    mean wake-up latency and run length with their samples' KS test, and the
    involuntary switch-out share, sim against real."""
    real_cell, sim_cell = schedule_cell([real]), schedule_cell([sim])
    if real_cell is None or sim_cell is None:
        return []
    rows = []
    for r in schedule_rows(sim_cell, real_cell):
        cg = r["cgroup"]
        values = {"wakeup_latency_mean_s": [_mean(c["wakeup_latency"].get(cg, ()))
                                            for c in (real_cell, sim_cell)],
                  "run_length_mean_s": [_mean(c["run_length"].get(cg, ()))
                                        for c in (real_cell, sim_cell)],
                  "involuntary_frac": [r["involuntary_frac_baseline"], r["involuntary_frac"]]}
        for metric in SCHEDULE_METRICS:
            kind = metric.rsplit("_", 2)[0]       # wakeup_latency, run_length
            sampled = metric != "involuntary_frac"
            rv, sv = values[metric]
            rows.append({"scenario": scenario, "metric": metric, "cgroup": cg,
                         "real": rv, "sim": sv, "rel_error": rel_error(rv, sv),
                         "target": math.nan, "ok": None,
                         "ks_stat": r[f"ks_{kind}"] if sampled else math.nan,
                         "ks_pvalue": r[f"ks_{kind}_pvalue"] if sampled else math.nan,
                         "n_real": r[f"n_{kind}_baseline"] if sampled else 0,
                         "n_sim": r[f"n_{kind}"] if sampled else 0,
                         "real_run": runs[0], "sim_run": runs[1], "note": ""})
    return rows


def _run(cfg, out_dir: Path) -> str | None:
    """Run one scenario through the runner; the error message if it could not run."""
    try:
        run_scenario(cfg, out_dir)
    except (RunError, TraceError) as err:
        return str(err)
    return None
