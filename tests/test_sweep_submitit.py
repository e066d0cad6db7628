"""`colosim sweep` with Hydra's submitit launcher (the `slurm` extra):
`submitit_local` runs a sweep for real; the `colosim_slurm` preset
(scenarios/conf/hydra/launcher/colosim_slurm.yaml) goes as far as sbatch,
which is a stand-in here that keeps the job script and refuses the job."""
import os
import stat

import pyarrow.parquet as pq
import pytest

from cli.main import main
from tests.extras import LAUNCHER_BASE, require_extra

require_extra("slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher")
BASE = LAUNCHER_BASE


def test_submitit_local_runs_a_sweep(tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("COLOSIM_QUIET", raising=False)   # progress lines on
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", "--dir", str(sweep_dir), "hydra/launcher=submitit_local",
                 "hydra.launcher.timeout_min=5", *BASE, "scheduler=cfs,rr"]) == 0
    rows = pq.read_table(sweep_dir / "summary.parquet").to_pylist()
    assert sorted(r["scheduler"] for r in rows) == ["cfs", "rr"]
    # the jobs' own output goes to .submitit/ log files: the count comes
    # from the launching process
    assert "[2/2] done" in capfd.readouterr().err


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """`srun` and `sbatch` on PATH; sbatch copies its job script to
    tmp_path/job.sh and fails as a cluster that rejects the job would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = tmp_path / "job.sh"
    for name, body in [("srun", "exit 1"),
                       ("sbatch", f'cp "$1" {script}\necho "sbatch: error: not submitted (test)" >&2'
                                  "\nexit 1")]:
        exe = bin_dir / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return script


def test_colosim_slurm_preset_submits_one_job_array(tmp_path, fake_slurm, capsys):
    sweep_dir = tmp_path / "sw"
    code = main(["sweep", "--dir", str(sweep_dir), "hydra/launcher=colosim_slurm",
                 "hydra.launcher.partition=cpu", *BASE, "scheduler=cfs,rr", "seed=0,1"])
    assert code == 2 and "the sweep failed" in capsys.readouterr().err
    sbatch = fake_slurm.read_text().splitlines()
    # the preset's keys, and the override, reached the job script: one array
    # task per point (at most array_parallelism=64 of them at once)
    for line in ["#SBATCH --partition=cpu", "#SBATCH --time=60", "#SBATCH --cpus-per-task=1",
                 "#SBATCH --mem=4GB", "#SBATCH --array=0-3%4", "#SBATCH --ntasks-per-node=1"]:
        assert line in sbatch
    assert any(line.startswith("#SBATCH --output=" + str(sweep_dir / ".submitit"))
               for line in sbatch)
    assert any("-m submitit.core._submit" in line for line in sbatch)
    assert not (sweep_dir / "summary.parquet").exists()
