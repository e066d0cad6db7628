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
import json
import os
import sys
import time
from pathlib import Path

import hydra
import pyarrow as pa
import pyarrow.parquet as pq
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from scenarios import schema
from scenarios.config import CONF_DIR
from scenarios.validate import validate

RUNS = "runs"
SUMMARY = "summary.parquet"
ENV_TOTAL = "COLOSIM_SWEEP_TOTAL"
ENV_QUIET = "COLOSIM_QUIET"
ENV_KEYS = "COLOSIM_SWEEP_KEYS"


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
    """One point of the sweep (runs in a launcher worker)."""
    from scenarios.runner import run_scenario

    OmegaConf.resolve(cfg)
    validate(cfg)
    sweep_dir = Path(HydraConfig.get().sweep.dir)
    out = run_dir_of(sweep_dir, cfg)
    if (out / SUMMARY).is_file():
        _report(sweep_dir, f"skipped {out.name} (already complete)")
        return "skipped"
    t0 = time.perf_counter()
    run_scenario(cfg, out)
    _report(sweep_dir, f"done {out.name} in {time.perf_counter() - t0:.1f} s")
    return "done"


def _report(sweep_dir: Path, what: str) -> None:
    if quiet():
        return
    done = sum(1 for _ in (sweep_dir / RUNS).glob(f"*/{SUMMARY}"))
    total = os.environ.get(ENV_TOTAL, "?")
    print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)


def launch(overrides: list[str], sweep_dir: Path, total: int, swept: list[str]) -> None:
    """Run the multirun through Hydra's own entry point (its argv parsing,
    sweeper and launcher), as `python app.py --multirun ...` would."""
    schema.register()
    os.environ[ENV_TOTAL] = str(total)
    os.environ[ENV_KEYS] = ",".join(swept)
    argv = sys.argv
    sys.argv = ["colosim-sweep", "--multirun",
                f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${hydra.job.num}",
                "hydra.job.chdir=false", "hydra/job_logging=none", "hydra/hydra_logging=none",
                *overrides]
    try:
        sweep_job()
    finally:
        sys.argv = argv


def collect(sweep_dir: Path, swept: list[str]) -> pa.Table | None:
    """Concatenate the runs' summaries, one column per swept key, and write
    the sweep's summary.parquet (atomically)."""
    rows = []
    for run in sorted((sweep_dir / RUNS).glob(f"*/{SUMMARY}")):
        summary = pq.read_table(run)
        cfg = OmegaConf.load(run.parent / "config.yaml")
        for key in swept:
            value = OmegaConf.select(cfg, key)
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
