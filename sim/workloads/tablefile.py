"""Workload input tables on disk (invocation traces, job traces): Parquet or
CSV with a fixed header, every row checked on the way in, and errors that
name the file, the line (CSV) or row (Parquet) and the expected format."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names file and row."""


def parse_field(column: str, text: str, kind: type):
    """A CSV field as ``kind`` (float or int); ValueError naming the column
    (float()'s own message names neither column nor file)."""
    try:
        return kind(text)
    except ValueError:
        what = "a number" if kind is float else "an integer"
        raise ValueError(f"{column} = {text!r} is not {what}") from None


@dataclass(frozen=True)
class TableFormat:
    noun: str                 # "trace file", "job trace": what a missing file is called
    schema: pa.Schema
    description: str          # the expected format, appended to every error
    # CSV fields -> typed values (raise ValueError with what is wrong)
    parse: Callable[[list[str]], tuple]
    # typed row -> CSV fields (floats as repr, so a round trip is exact)
    format: Callable[[tuple], list]
    # check_rows(table, where, first_row, what) raises TraceError on the first bad row
    check_rows: Callable[..., None]

    def write(self, table: pa.Table, path: str | Path) -> Path:
        path = Path(path)
        table = table.select(self.schema.names).cast(self.schema)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".csv":
            with path.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(self.schema.names)
                for row in zip(*(table.column(n).to_pylist() for n in self.schema.names)):
                    w.writerow(self.format(row))
        else:
            pq.write_table(table, path)
        return path

    def read(self, path: str | Path) -> pa.Table:
        path = Path(path)
        expected = f"expected {self.description}"
        if not path.is_file():
            raise TraceError(f"{self.noun} {path} does not exist; {expected}")
        if path.suffix == ".csv":
            return self._read_csv(path)
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise TraceError(f"{path}: not a Parquet file ({err}); {expected}") from None
        missing = [n for n in self.schema.names if n not in table.column_names]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}; {expected}")
        try:
            table = table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise TraceError(f"{path}: wrong column type ({err}); {expected}") from None
        self.check_rows(table, str(path), first_row=0, what="row")
        return table

    def _read_csv(self, path: Path) -> pa.Table:
        names = self.schema.names
        cols: dict[str, list] = {n: [] for n in names}
        with path.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header != names:
                raise TraceError(f"{path}, line 1: header {header} is not {','.join(names)}; "
                                 f"expected {self.description}")
            for line, row in enumerate(reader, start=2):
                if len(row) != len(names):
                    raise TraceError(f"{path}, line {line}: {len(row)} fields, "
                                     f"expected {len(names)}")
                try:
                    values = self.parse(row)
                except ValueError as err:
                    raise TraceError(f"{path}, line {line}: {err}") from None
                for name, value in zip(names, values):
                    cols[name].append(value)
        table = pa.table(cols, schema=self.schema)
        self.check_rows(table, str(path), first_row=2, what="line")
        return table
