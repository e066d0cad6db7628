"""Write and read run directories.

A run directory appears complete or not at all: everything is written into a
hidden temp directory next to the target and renamed into place, so a run
that fails or is interrupted half-way never leaves a partial directory that
a later `compare` or `report` would mistake for a result.
"""

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from omegaconf import DictConfig, OmegaConf

from results.schema import TABLES, TRACE_TABLES, WORKLOAD_TABLES, check_table, with_run_labels

CONFIG_FILE = "config.yaml"
TRACE_FILE = "trace.parquet"


class RunDirError(OSError):
    """A run directory that cannot be written where it was asked for."""


class RunDirExistsError(RunDirError, FileExistsError):
    """The target run directory already exists and is not empty."""


@dataclass(frozen=True)
class RunDir:
    path: Path
    summary: pa.Table
    requests: pa.Table
    intervals: pa.Table
    config: dict


def write_run_dir(result: Any, out_dir: str | Path, config: Mapping | DictConfig) -> Path:
    """Write result.summary/.requests/.intervals (the latter two labelled
    with the summary's run id, scheduler, controllers and seed:
    results/schema.py RUN_LABELS) and the config into out_dir,
    result.trace (if any and not None) as trace.parquet, and each table of
    result.extra (a dict, if any) as <name>.parquet.

    Refuses to replace a non-empty directory. Returns the run directory path.
    """
    target = Path(out_dir).absolute()
    ensure_writable(target)
    tables = {name: getattr(result, name) for name in TABLES}
    summary = tables["summary"]
    check_table("summary", summary)
    if summary.num_rows != 1:
        raise ValueError(f"summary table must have one row, got {summary.num_rows}")
    for name in ("requests", "intervals"):
        tables[name] = with_run_labels(tables[name], summary)
        check_table(name, tables[name])

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-{os.getpid()}-", dir=target.parent))
    try:
        # mkdtemp's directory is private (0700); the run directory it becomes
        # follows the umask like any directory, so shared filesystems work
        os.chmod(tmp, 0o777 & ~umask())
        for name, table in tables.items():
            pq.write_table(table, tmp / f"{name}.parquet")
        # the generated input of a trace-driven run, replayable by either backend
        trace = getattr(result, "trace", None)
        if trace is not None:
            pq.write_table(trace, tmp / TRACE_FILE)
        for name, table in (getattr(result, "extra", None) or {}).items():
            if name in TABLES or name == TRACE_FILE.split(".")[0]:
                raise ValueError(f"extra table {name!r} would replace {name}.parquet")
            # a reader relies on their columns as on the others'
            if name in TRACE_TABLES or name in WORKLOAD_TABLES:
                check_table(name, table)
            pq.write_table(table, tmp / f"{name}.parquet")
        (tmp / CONFIG_FILE).write_text(_to_yaml(config))
        _fsync_dir_tree(tmp)
        # rename(2) replaces an empty directory atomically; a non-empty one
        # that appeared since the check above makes it fail, never merge.
        os.rename(tmp, target)
        _fsync(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def umask() -> int:
    """The process's umask (os.umask can only read it by setting it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ensure_writable(target: str | Path) -> None:
    """Raise RunDirError unless a run directory can be created at target,
    so that a run refuses before its work, not after it."""
    target = Path(target)
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise RunDirExistsError(f"{target} already exists and is not an empty directory")
    ensure_creatable(target)


def ensure_creatable(target: Path) -> None:
    """Raise RunDirError unless directories can be made at ``target``: its
    nearest existing ancestor must be a directory that takes a new entry
    (tried with an empty directory, removed at once: permissions, read-only
    and pseudo file systems such as /proc all answer the same way)."""
    base = target
    while not base.exists() and not base.is_symlink():
        base = base.parent
    if base != target and not base.is_dir():
        raise RunDirError(f"{target} cannot be created: {base} is a file, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".colosim-probe-", dir=base))
    except OSError as err:
        raise RunDirError(f"{target} cannot be written: {base} does not take a new "
                          f"directory ({err.strerror})") from None


def read_run_dir(path: str | Path) -> RunDir:
    path = Path(path)
    tables = {name: pq.read_table(path / f"{name}.parquet") for name in TABLES}
    config = yaml.safe_load((path / CONFIG_FILE).read_text())
    return RunDir(path=path, config=config, **tables)


def _to_yaml(config: Mapping | DictConfig) -> str:
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    return yaml.safe_dump(dict(config), sort_keys=False)


def _fsync_dir_tree(directory: Path) -> None:
    # Without this a crash soon after the rename could expose the directory
    # with empty files, which is the partial state the rename is meant to avoid.
    for entry in directory.iterdir():
        _fsync(entry)
    _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
