"""Read run and sweep directories back as pyarrow Tables and pandas DataFrames.

Two layouts are recognised (README.md, "Run directory"; scenarios/sweep.py):

- a **run directory**: ``summary.parquet``, ``requests.parquet``,
  ``intervals.parquet``, ``config.yaml``;
- a **sweep directory**: ``summary.parquet`` (every run's summary row plus one
  column per swept key) and ``runs/<run id>/`` run directories.

``open_results(*dirs)`` takes any mix of both and reads them as one set of
runs. Its summary has one row per run; every other table opens as ONE
pyarrow dataset over all the runs' files, in which each row also carries its
run's ``run_id``, policy (``scheduler``, ``controllers``), ``seed`` and the
keys that tell the runs apart, so it can be filtered and grouped without a
join.

The keys that tell runs apart are the sweep's own key columns plus every
config key (from ``config.yaml``) whose value differs between the runs read:
a handful of run directories made by hand reads like a sweep, and two sweeps
that fixed ``workload.functions`` at different values compare by it.  Keys
that only follow a group option (every ``workload.*`` key changes with
``workload=``) are dropped, so runs are told apart by what was chosen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml

from results.schema import RUN_LABELS

if TYPE_CHECKING:  # pandas loads on first use, not on `colosim --help`
    import pandas as pd

SUMMARY = "summary.parquet"
CONFIG = "config.yaml"
RUNS = "runs"
TABLES = ("summary", "requests", "intervals")

# Summary columns that identify a run's policy, seed and identity; they are
# put on every dataset row alongside the keys that vary (the run's own
# files carry them too: results/schema.py RUN_LABELS).
IDENTITY = tuple(RUN_LABELS.names)

# Config keys never treated as distinguishing keys: where a run was written,
# its seed (a summary column already), free text.
_IGNORED_KEYS = {"output_dir", "seed"}
_IGNORED_SUFFIXES = (".description",)
# Group choices whose option name already has a summary column.
_GROUP_COLUMNS = {"workload": "scenario", "host": "host", "scheduler": "scheduler",
                  "backend": "backend"}

try:  # the C loader is ~10x faster on big sweeps; PyYAML may lack it
    _YamlLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _YamlLoader = yaml.SafeLoader


class ResultsError(ValueError):
    """A path is not a run or sweep directory, or holds no complete run."""


def dir_kind(path: str | Path) -> str:
    """'run' or 'sweep'; ResultsError (saying what was expected) otherwise."""
    path = Path(path)
    if not path.exists():
        raise ResultsError(f"{path} does not exist")
    if not path.is_dir():
        raise ResultsError(f"{path} is a file, not a run or sweep directory")
    if (path / RUNS).is_dir():
        return "sweep"
    if (path / SUMMARY).is_file() and (path / CONFIG).is_file():
        return "run"
    raise ResultsError(
        f"{path} is neither a run directory (summary.parquet, requests.parquet, "
        f"intervals.parquet, config.yaml) nor a sweep directory (summary.parquet and "
        f"runs/<run id>/ directories)")


def run_dirs(path: str | Path) -> list[Path]:
    """The complete run directories of a run or sweep directory."""
    path = Path(path)
    if dir_kind(path) == "run":
        return [path]
    # A run directory is renamed into place complete, so its summary marks it done.
    return sorted(p.parent for p in (path / RUNS).glob(f"*/{SUMMARY}"))


def open_results(*paths: str | Path) -> "Results":
    """Read any mix of run and sweep directories as one set of runs."""
    if not paths:
        raise ResultsError("no directory given")
    runs: list[Path] = []
    summaries: list[pa.Table] = []
    sweep_keys: list[str] = []
    for path in map(Path, paths):
        found = run_dirs(path)
        if not found:
            raise ResultsError(f"{path} is a sweep directory without any complete run")
        table = _read_summaries(path, found)
        sweep_keys += [c for c in _sweep_key_columns(table, found) if c not in sweep_keys]
        runs += found
        summaries.append(table)
    summary = pa.concat_tables(summaries, promote_options="default")
    ids = summary.column("run_id").to_pylist()
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        # a sweep's run id is its config hash: the same id twice is the same
        # simulation, and counting it twice would fake a second sample
        raise ResultsError(f"the same run appears more than once: {', '.join(duplicated)} "
                           "(was a directory given twice, or a run and its sweep, or two "
                           "sweeps with the same point?)")
    return Results(paths=tuple(map(Path, paths)), runs=tuple(runs), _summary=summary,
                   _sweep_keys=tuple(sweep_keys))


def _read_summaries(path: Path, runs: list[Path]) -> pa.Table:
    sweep_summary = path / SUMMARY
    if dir_kind(path) == "sweep" and sweep_summary.is_file():
        table = pq.read_table(sweep_summary)
        listed = set(table.column("run_id").to_pylist())
        if listed == {r.name for r in runs}:
            return table
        # runs finished after the summary was collected (or it is stale):
        # the run directories are the truth, the sweep's key columns are
        # recovered from the configs below.
    return pa.concat_tables([pq.read_table(r / SUMMARY) for r in runs],
                            promote_options="default")


def _sweep_key_columns(table: pa.Table, runs: list[Path]) -> list[str]:
    """Columns a sweep added to its runs' own summary columns: its swept keys.
    Runs of different controllers have different extra columns, so a column
    any run wrote itself is not a key."""
    own = set().union(*(pq.read_schema(run / SUMMARY).names for run in runs))
    return [c for c in table.column_names if c not in own]


@dataclass(frozen=True)
class Results:
    """Runs read from one or more run/sweep directories."""

    paths: tuple[Path, ...]
    runs: tuple[Path, ...]
    _summary: pa.Table
    _sweep_keys: tuple[str, ...]

    @cached_property
    def configs(self) -> dict[str, dict]:
        """Each run's resolved config (config.yaml), by run id."""
        return {run.name: yaml.load((run / CONFIG).read_text(), Loader=_YamlLoader) or {}
                for run in self.runs}

    @cached_property
    def keys(self) -> list[str]:
        """Columns (besides the summary's own) that tell runs apart: the
        sweeps' key columns and the config keys whose values differ."""
        return list(self._sweep_keys) + [k for k in self._config_keys if k not in self._sweep_keys]

    @cached_property
    def _config_keys(self) -> dict[str, list]:
        """Config keys that vary across the runs, with one value per summary row."""
        ids = self._summary.column("run_id").to_pylist()
        by_run = {rid: _flatten(cfg) for rid, cfg in self.configs.items()}
        flat = [by_run.get(rid, {}) for rid in ids]
        names = sorted({k for f in flat for k in f})
        varying = {}
        for name in names:
            if name in _IGNORED_KEYS or name.endswith(_IGNORED_SUFFIXES):
                continue
            values = [f.get(name) for f in flat]
            if any(isinstance(v, (list, dict)) for v in values):
                continue  # as the sweep does: only scalar keys become columns
            if len({_hashable(v) for v in values}) > 1:
                varying[name] = values
        # A group option's keys change with the option (workload=a,b changes
        # every workload.* key); only keys that also vary within one option
        # were chosen separately.
        for group in {k.split(".")[0] for k in varying if k.endswith(".name")}:
            options = varying.get(f"{group}.name")
            for name in [k for k in varying if k.startswith(group + ".") and k != f"{group}.name"]:
                within: dict = {}
                for option, value in zip(options, varying[name]):
                    within.setdefault(option, set()).add(_hashable(value))
                if all(len(v) == 1 for v in within.values()):
                    del varying[name]
            if group in _GROUP_COLUMNS:
                del varying[f"{group}.name"]  # it has its own summary column
        return varying

    def summary(self) -> pa.Table:
        """One row per run: the summary columns plus one column per key."""
        table = self._summary
        for name, values in self._config_keys.items():
            if name not in table.column_names:
                table = table.append_column(name, _array(values))
        return table

    def summary_frame(self) -> pd.DataFrame:
        return self.summary().to_pandas()

    def labels(self) -> pa.Table:
        """Per run: identity, policy, seed and key columns (what datasets carry)."""
        summary = self.summary()
        columns = [c for c in (*IDENTITY, "scenario", "host", *self.keys)
                   if c in summary.column_names]
        return summary.select(list(dict.fromkeys(columns)))

    def dataset(self, table: str) -> ds.Dataset:
        """ONE dataset over every run's ``<table>.parquet``, each row tagged
        with its run's labels (as partition columns: stored once per file)."""
        if table not in TABLES:
            raise ResultsError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        labels = self.labels()
        files = {run.name: run / f"{table}.parquet" for run in self.runs}
        rows = [r for r in labels.to_pylist() if r["run_id"] in files]
        paths = [str(files[r["run_id"]].absolute()) for r in rows]
        # runs may differ in optional columns (a model added later): unify
        file_schemas = [pq.read_schema(p) for p in paths]
        schema = pa.unify_schemas(file_schemas, promote_options="permissive")
        for field in labels.schema:
            if field.name not in schema.names:
                schema = schema.append(field)
        # a label a file carries itself (RUN_LABELS, in runs written since
        # they were added) is read from it, once; older files get it here
        partitions = [_equals(labels.schema, row, exclude=f.names)
                      for row, f in zip(rows, file_schemas)]
        return ds.FileSystemDataset.from_paths(
            paths, schema=schema, format=ds.ParquetFileFormat(),
            filesystem=pafs.LocalFileSystem(), partitions=partitions)

    def table(self, table: str, columns: list[str] | None = None,
              filter: ds.Expression | None = None) -> pa.Table:
        if table == "summary" and columns is None and filter is None:
            return self.summary()
        return self.dataset(table).to_table(columns=columns, filter=filter)

    def frame(self, table: str, columns: list[str] | None = None,
              filter: ds.Expression | None = None) -> pd.DataFrame:
        if table == "summary" and columns is None and filter is None:
            return self.summary_frame()
        return self.table(table, columns, filter).to_pandas()

    def requests(self, **kw) -> pd.DataFrame:
        return self.frame("requests", **kw)

    def intervals(self, **kw) -> pd.DataFrame:
        return self.frame("intervals", **kw)


def read_summary(*paths: str | Path) -> pd.DataFrame:
    return open_results(*paths).summary_frame()


def _equals(schema: pa.Schema, row: dict, exclude: Iterable[str]) -> ds.Expression:
    skip = set(exclude)
    expr = ds.scalar(True)
    for field in schema:
        if field.name in skip:
            continue
        value = row[field.name]
        ref = ds.field(field.name)
        term = ref.is_null() if value is None else ref == pa.scalar(value, field.type)
        expr = expr & term
    return expr


def _flatten(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _hashable(value):
    # 12 and 12.0 are the same key value; NaN equals NaN here
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def _array(values: list) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # a key whose type differs between options (int here, str there)
        return pa.array([None if v is None else str(v) for v in values], pa.string())
