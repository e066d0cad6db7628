"""`colosim sweep`: a Hydra multirun over scenarios/conf.

Hydra expands the sweep (comma lists, ``range()``, ``choice()``, and the
``hydra.sweeper.params`` of an ``experiment=`` file) and hands the jobs to
its launcher: joblib (all cores) by default, or any installed launcher
plugin picked with ``hydra/launcher=<name>``.  Each job writes
its run directory under ``<sweep dir>/runs/<config hash>``; a job whose run
directory is already complete is skipped, so re-running a sweep (after an
interruption, or with more seeds) only runs what is missing.  At the end
the sweep's ``summary.parquet`` concatenates every run's summary with one
column per swept key.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import hydra
import pyarrow as pa
import pyarrow.parquet as pq
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from results.rundir import ensure_creatable, ensure_writable
from scenarios import schema
from scenarios.config import CONF_DIR
from scenarios.runner import run_scenario, trace_file
from scenarios.validate import ConfigError, validate

RUNS = "runs"
SUMMARY = "summary.parquet"
ENV_QUIET = "COLOSIM_QUIET"
ENV_KEYS = "COLOSIM_SWEEP_KEYS"


# launchers whose Hydra plugin comes with one of colosim's extras
LAUNCHER_EXTRAS = {
    "ray": ("hydra_plugins.hydra_ray_launcher", "ray"),
    "colosim_ray_cluster": ("hydra_plugins.hydra_ray_launcher", "ray"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "colosim_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
}


def check_launcher(overrides: list[str]) -> None:
    """A launcher whose plugin is not installed fails here, with the extra
    that installs it, rather than in Hydra with a list of what is; so does
    a joblib n_jobs that joblib would refuse with a traceback once the
    sweep started."""
    launcher = "joblib"
    for override in overrides:
        if not override.startswith("hydra/launcher="):
            continue
        launcher = name = override.split("=", 1)[1]
        module, extra = LAUNCHER_EXTRAS.get(name, (None, None))
        if module and importlib.util.find_spec(module) is None:
            raise ConfigError(f"hydra/launcher={name} needs Hydra's launcher plugin, "
                              f"which is not installed: pip install -e '.[{extra}]'")
    for override in overrides:
        key, _, value = override.partition("=")
        if launcher == "joblib" and key.lstrip("+") == "hydra.launcher.n_jobs":
            try:
                ok = int(value) != 0
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"hydra.launcher.n_jobs = {value} is invalid: must be a "
                                  "non-zero integer (-1: all cores, -2: all but one)")


def is_sweep_dir(path: Path) -> bool:
    """A directory `colosim sweep` wrote (Hydra's multirun.yaml, or runs/)."""
    return (path / "multirun.yaml").is_file() or (path / RUNS).is_dir()


def check_dir(sweep_dir: Path) -> None:
    """RunDirError unless the sweep can write into ``sweep_dir``: a sweep
    directory (resumed or extended), or where a new one can be made (not a
    non-empty directory of something else, which the sweep would mix into)."""
    if sweep_dir.is_dir() and is_sweep_dir(sweep_dir):
        ensure_creatable(sweep_dir / RUNS)
    else:
        ensure_writable(sweep_dir)


def check_inputs(configs: list[DictConfig]) -> None:
    """Every point's trace file, read and checked (TraceError) before any
    run starts: a bad file would otherwise fail its runs one by one."""
    checked = set()
    for cfg in configs:
        key = (cfg.workload.get("trace_file"), cfg.duration_s)
        if key[0] and key not in checked:
            checked.add(key)
            trace_file(cfg)


def config_hash(cfg: DictConfig) -> str:
    """Identifies a run by what it simulates (output_dir excluded)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("output_dir", None)
    blob = json.dumps(plain, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def quiet() -> bool:
    return os.environ.get(ENV_QUIET, "") not in ("", "0")


def run_dir_of(sweep_dir: Path, cfg: DictConfig) -> Path:
    return sweep_dir / RUNS / config_hash(cfg)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def sweep_job(cfg: DictConfig) -> str:
    """One point of the sweep (runs in a launcher worker); the launching
    process reports it (_Progress), skipped or done."""
    OmegaConf.resolve(cfg)
    validate(cfg)
    out = run_dir_of(Path(HydraConfig.get().sweep.dir), cfg)
    if (out / SUMMARY).is_file():
        return "skipped"
    run_scenario(cfg, out)
    return "done"


def completed_runs(sweep_dir: Path) -> list[Path]:
    """The sweep's complete run directories (not the hidden temporary
    directories a run is written into before it is renamed into place)."""
    return sorted(p.parent for p in (sweep_dir / RUNS).glob(f"*/{SUMMARY}")
                  if not p.parent.name.startswith("."))


class _Progress:
    """Prints ``[k/N] skipped <run>`` for the sweep's runs already complete,
    then ``[k/N] done <run>`` as the others' run directories appear, k
    counting this sweep's runs only (not other runs of the same --dir).
    Launchers run the jobs elsewhere: joblib and Ray workers (Ray forwards
    their output late and prefixed), submitit jobs (output goes to log
    files under .submitit/), so the count comes from watching the (shared)
    sweep directory."""

    INTERVAL_S = 0.5

    def __init__(self, sweep_dir: Path, runs: set[Path]):
        self.sweep_dir, self.runs, self.total = sweep_dir, runs, len(runs)
        self.seen = set(completed_runs(sweep_dir)) & runs
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "_Progress":
        if not quiet():
            for k, run in enumerate(sorted(self.seen), start=1):
                print(f"[{k}/{self.total}] skipped {run.name} (already complete)",
                      file=sys.stderr, flush=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.stop.set()
            self.thread.join()
            self.poll()

    def _watch(self) -> None:
        while not self.stop.wait(self.INTERVAL_S):
            self.poll()

    def poll(self) -> None:
        for run in completed_runs(self.sweep_dir):
            if run in self.seen or run not in self.runs:
                continue
            self.seen.add(run)
            try:
                wall = pq.read_table(run / SUMMARY, columns=["wall_time_s"])[0][0].as_py()
                took = f" in {wall:.1f} s"
            except Exception:   # only decoration: never fail a sweep over it
                took = ""
            print(f"[{len(self.seen)}/{self.total}] done {run.name}{took}",
                  file=sys.stderr, flush=True)


def launch(overrides: list[str], sweep_dir: Path, configs: list[DictConfig],
           swept: list[str]) -> None:
    """Run the multirun of the points ``configs`` (scenarios.config.expand_sweep)
    through Hydra's own entry point (its argv parsing, sweeper and
    launcher), as `python app.py --multirun ...` would."""
    schema.register()
    os.environ[ENV_KEYS] = ",".join(swept)
    argv = sys.argv
    sys.argv = ["colosim-sweep", "--multirun",
                f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${hydra.job.num}",
                "hydra.job.chdir=false", "hydra/job_logging=none", "hydra/hydra_logging=none",
                # the jobs' environment, also where the launcher's workers do not
                # inherit ours (a Ray cluster, SLURM nodes, reused Ray workers)
                f"++hydra.job.env_set.{ENV_QUIET}={int(quiet())}",
                *schema.searchpath_overrides(), *overrides]
    try:
        with _Progress(sweep_dir, {run_dir_of(sweep_dir, cfg) for cfg in configs}):
            sweep_job()
    finally:
        sys.argv = argv


def collect(sweep_dir: Path, swept: list[str]) -> pa.Table | None:
    """Concatenate the runs' summaries, one column per swept key, and write
    the sweep's summary.parquet (atomically)."""
    rows = []
    for run in completed_runs(sweep_dir):
        summary = pq.read_table(run / SUMMARY)
        cfg = OmegaConf.load(run / "config.yaml")
        for key in swept:
            value = OmegaConf.select(cfg, key)
            if OmegaConf.is_list(value):
                # a swept list (memlookup's partitions): its text, e.g. "[0-5, 4-9]"
                value = "[" + ", ".join("null" if v is None else str(v) for v in value) + "]"
            # group choices (scheduler, host, ...) and top-level keys such as
            # seed already have their summary column
            if key in summary.column_names or not isinstance(value, (int, float, str, bool)):
                continue
            summary = summary.append_column(key, pa.array([value]))
        rows.append(summary)
    if not rows:
        return None
    table = pa.concat_tables(rows, promote_options="default")
    tmp = sweep_dir / f".{SUMMARY}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, sweep_dir / SUMMARY)
    return table
