"""The table `colosim validate` writes (validation.parquet: one row per
scenario x metric, simulator vs this host) and its text, markdown, CSV and
report forms.  calibration/validate.py runs the scenarios and fills it;
results/report.py renders it; both read its contract here."""
from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from results.compare import display_unit, fmt

VALIDATION_FILE = "validation.parquet"
PASS, MISS, MISSING = "pass", "MISS", "missing"

VALIDATION_SCHEMA = pa.schema([
    ("scenario", pa.string()), ("metric", pa.string()), ("real", pa.float64()),
    ("sim", pa.float64()), ("rel_error", pa.float64()), ("target", pa.float64()),
    ("ok", pa.bool_()), ("ks_stat", pa.float64()), ("ks_pvalue", pa.float64()),
    ("n_real", pa.int64()), ("n_sim", pa.int64()), ("real_run", pa.string()),
    ("sim_run", pa.string()), ("note", pa.string()),
    # where both runs recorded sched.parquet: one row per cgroup and
    # SCHEDULE_METRICS (real, sim: the mean over the cgroup's samples, or the
    # share; ks_*: the samples' KS test; n_*: their counts); null on the
    # scenario's summary rows.  A file without it has only those.
    ("cgroup", pa.string()),
    # the real run flagged its host disturbed (backends/real/disturbance.py):
    # its rows are not compared (ok null); null without a real run
    ("real_disturbed", pa.bool_())])
DISTURBED = "disturbed"
SCHEDULE_METRICS = ("wakeup_latency_mean_s", "run_length_mean_s", "involuntary_frac")


def to_frame(rows: list[dict]) -> pd.DataFrame:
    return pa.Table.from_pylist(rows, schema=VALIDATION_SCHEMA).to_pandas()


def read_validation(directory: str | Path) -> pd.DataFrame:
    return pq.read_table(Path(directory) / VALIDATION_FILE).to_pandas()


HEAD = ("scenario", "metric", "real", "sim", "error", "target", "result")


def result_text(ok, target: float) -> str:
    if ok is None or (isinstance(ok, float) and math.isnan(ok)) or ok is pd.NA:
        return "" if math.isnan(target) else MISSING
    return PASS if ok else MISS


def _per_cgroup(frame: pd.DataFrame) -> pd.Series:
    return frame["cgroup"].notna() if "cgroup" in frame else pd.Series(False, frame.index)


def table_cells(frame: pd.DataFrame) -> list[list[str]]:
    """Rows as the text, markdown and HTML tables show them (display units:
    latencies in ms, fractions in %; missing values as "-"); the per-cgroup
    schedule rows are ks_lines'."""
    body = []
    for r in frame[~_per_cgroup(frame)].to_dict("records"):
        scale, unit = display_unit(r["metric"])
        name = f"{r['metric']} ({unit})" if unit else r["metric"]
        err = r["rel_error"]
        body.append([r["scenario"], name, fmt(r["real"] * scale), fmt(r["sim"] * scale),
                     "-" if math.isnan(err) else f"{100 * err:+.1f}%",
                     "" if math.isnan(r["target"]) else f"±{100 * r['target']:.0f}%",
                     DISTURBED if _disturbed(r) else result_text(r["ok"], r["target"])])
    return body


def _disturbed(row: dict) -> bool:
    return row.get("real_disturbed") is True


def ks_lines(frame: pd.DataFrame) -> list[str]:
    out = []
    cgroup_rows = frame[_per_cgroup(frame)]
    for name, g in frame[~_per_cgroup(frame)].groupby("scenario", sort=False):
        r = g.iloc[0]
        stat = "-" if math.isnan(r["ks_stat"]) else f"{r['ks_stat']:.3f} (p = {r['ks_pvalue']:.2g})"
        line = f"{name}: latency KS statistic {stat}, {r['n_real']} real vs {r['n_sim']} " \
               "sim requests"
        if r["note"]:
            line += f"; note: {r['note']}"
        out.append(line)
        out += _schedule_lines(cgroup_rows[cgroup_rows["scenario"] == name])
    return out


def _schedule_lines(rows: pd.DataFrame) -> list[str]:
    """Per cgroup: the KS statistics of wake-up latency and run length, and
    the involuntary switch-out shares, sim against real."""
    out = []
    for cgroup, g in rows.groupby("cgroup", sort=True):
        m = {r["metric"]: r for r in g.to_dict("records")}
        parts = [f"{label} KS {m[k]['ks_stat']:.3f} ({m[k]['n_real']} real vs {m[k]['n_sim']} sim)"
                 for k, label in (("wakeup_latency_mean_s", "wake-up latency"),
                                  ("run_length_mean_s", "run length")) if k in m]
        if "involuntary_frac" in m:
            r = m["involuntary_frac"]
            parts.append(f"involuntary share {fmt(100 * r['real'])}% real, {fmt(100 * r['sim'])}% "
                         f"sim ({fmt(100 * (r['sim'] - r['real']), True)} pp)")
        out.append(f"  {cgroup}: " + "; ".join(parts))
    return out


def verdict(frame: pd.DataFrame) -> str:
    """One line: how many targets were met, which were missed or missing."""
    disturbed = frame["real_disturbed"].eq(True) if "real_disturbed" in frame else \
        pd.Series(False, frame.index)
    targeted = frame[frame["target"].notna() & ~disturbed]
    ok = targeted["ok"]
    met = int((ok == True).sum())   # noqa: E712 - nullable booleans
    missed = targeted[ok == False]   # noqa: E712
    missing = targeted[ok.isna()]
    parts = [f"verdict: {met}/{len(targeted)} targets met in "
             f"{frame['scenario'].nunique()} scenario(s)"]
    if len(missed):
        parts.append("missed: " + ", ".join(
            f"{r.scenario} {r.metric} ({100 * r.rel_error:+.0f}%)" for r in missed.itertuples()))
    if len(missing):
        parts.append(f"missing: {len(missing)}")
    if disturbed.any():
        parts.append("not compared, the real host was disturbed: "
                     + ", ".join(frame.loc[disturbed, "scenario"].unique()))
    return "; ".join(parts)


def format_text(frame: pd.DataFrame) -> str:
    rows = [list(HEAD), *table_cells(frame)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
    lines = ["  ".join(v.rjust(w) if 2 <= i <= 5 else v.ljust(w)
                       for i, (v, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *ks_lines(frame), "", verdict(frame)]) + "\n"


def format_markdown(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(HEAD) + " |",
             "| " + " | ".join(["---", "---", "---:", "---:", "---:", "---:", "---"]) + " |"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
              for row in table_cells(frame)]
    return "\n".join([*lines, "", *(f"- {k}" for k in ks_lines(frame)), "",
                      f"**{verdict(frame)}**"]) + "\n"


def format_csv(frame: pd.DataFrame) -> str:
    """Long form, full precision, the columns' own units (as validation.parquet)."""
    out = io.StringIO()
    frame.to_csv(out, index=False, lineterminator="\n")
    return out.getvalue()


FORMATTERS = {"text": format_text, "markdown": format_markdown, "csv": format_csv}
