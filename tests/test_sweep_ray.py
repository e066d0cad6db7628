"""`colosim sweep hydra/launcher=ray`: Hydra's Ray launcher plugin
(hydra-ray-launcher, the `ray` extra) on a local Ray instance that the
launcher starts from its init config, and `hydra/launcher=colosim_ray_cluster`
on a one-node cluster started with `ray start --head`; every point gives the
result the default joblib launcher gives."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from cli.main import main
from tests.extras import LAUNCHER_BASE, require_extra

ray, _ = require_extra("ray", "ray", "hydra_plugins.hydra_ray_launcher.ray_launcher")
BASE = LAUNCHER_BASE
SWEEP = ["scheduler=cfs,rr", "seed=0,1"]
# what the launcher may change: where and how fast the run happened
UNCOMPARED = {"run_id", "wall_time_s", "sim_s_per_wall_s"}
# a small local Ray, as a user would start one: `address=local` always starts
# a new instance (never joins one that happens to run on this machine)
RAY_LOCAL = ["hydra/launcher=ray", "hydra.launcher.ray.init.address=local",
             "+hydra.launcher.ray.init.num_cpus=2",
             "+hydra.launcher.ray.init.include_dashboard=false"]


@pytest.fixture
def ray_shutdown(monkeypatch):
    monkeypatch.delenv("COLOSIM_QUIET", raising=False)   # progress lines on
    yield
    ray.shutdown()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path, monkeypatch):
    """The address of a one-node Ray cluster started as a user starts one
    (`ray start --head`), in its own process group, killed at the end."""
    monkeypatch.delenv("COLOSIM_QUIET", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = _free_port()
    log_path = tmp_path / "ray-head.log"
    with log_path.open("w") as log:
        head = subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
             f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
             f"--ray-client-server-port={_free_port()}",
             f"--dashboard-agent-listen-port={_free_port()}",
             "--include-dashboard=false", "--disable-usage-stats"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "will now block" not in log_path.read_text():
            assert head.poll() is None, f"ray start failed:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"ray start hangs:\n{log_path.read_text()}"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        os.killpg(head.pid, signal.SIGKILL)   # SIGTERM makes it drain for 30 s
        head.wait()


def _joblib_rows(sweep_dir, sweep):
    """The default launcher, one job at a time in this process (no worker start-up)."""
    assert main(["sweep", "--dir", str(sweep_dir), *BASE, *sweep,
                 "hydra.launcher.n_jobs=1"]) == 0
    return _rows(sweep_dir)


def _rows(sweep_dir):
    rows = pq.read_table(sweep_dir / "summary.parquet").to_pylist()
    # NaN != NaN, so columns of models a run did not use compare as None
    return {(r["scheduler"], r["seed"]): {k: None if v != v else v for k, v in r.items()
                                          if k not in UNCOMPARED}
            for r in rows}


def test_ray_launcher_runs_every_point_like_joblib_and_resumes(tmp_path, capfd, ray_shutdown):
    ray_dir, joblib_dir = tmp_path / "ray", tmp_path / "joblib"
    args = ["sweep", "--dir", str(ray_dir), *RAY_LOCAL, *BASE, *SWEEP]
    assert main(args) == 0
    assert ray.is_initialized()
    # the jobs ran through the Ray launcher, and the launching process
    # counted them as their run directories appeared
    hydra_cfg = OmegaConf.load(ray_dir / "0" / ".hydra" / "hydra.yaml")
    assert hydra_cfg.hydra.runtime.choices["hydra/launcher"] == "ray"
    assert "[4/4] done" in capfd.readouterr().err

    ray_rows, joblib_rows = _rows(ray_dir), _joblib_rows(joblib_dir, SWEEP)
    assert sorted(ray_rows) == [(s, seed) for s in ("cfs", "rr") for seed in (0, 1)]
    assert ray_rows == joblib_rows
    # same config, same run directory name, whichever launcher ran it
    names = sorted(p.name for p in (ray_dir / "runs").iterdir())
    assert names == sorted(p.name for p in (joblib_dir / "runs").iterdir())

    # again on the running Ray instance: every run is skipped, nothing rewritten
    stamps = {p: p.stat().st_mtime_ns for p in (ray_dir / "runs").glob("*/summary.parquet")}
    assert main(args) == 0
    assert stamps == {p: p.stat().st_mtime_ns
                      for p in (ray_dir / "runs").glob("*/summary.parquet")}
    assert _rows(ray_dir) == joblib_rows


def test_the_cluster_preset_joins_a_running_ray_cluster(tmp_path, capfd, ray_cluster):
    sweep_dir = tmp_path / "ray"
    # one override beyond the preset: this cluster is not the default `auto`
    assert main(["sweep", "--dir", str(sweep_dir), "hydra/launcher=colosim_ray_cluster",
                 f"hydra.launcher.ray.init.address={ray_cluster}", *BASE,
                 "scheduler=cfs,rr"]) == 0
    # joined that cluster (ray names it by the node's address, same port)
    port = ray_cluster.rsplit(":", 1)[1]
    assert ray.get_runtime_context().gcs_address.endswith(f":{port}")
    assert "[2/2] done" in capfd.readouterr().err
    assert _rows(sweep_dir) == _joblib_rows(tmp_path / "joblib", ["scheduler=cfs,rr"])

