"""The `colosim` command line."""

import argparse
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TextIO

import pyarrow as pa
from omegaconf import DictConfig, OmegaConf

from results.rundir import RunDirExistsError, ensure_writable, write_run_dir
from results.summary import format_summary
from scenarios.config import CONF_DIR, compose, default_options, list_options
from scenarios.validate import ConfigError

EXIT_USAGE = 2  # bad command line or config, as argparse uses
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
_TOP_LEVEL_KEY = re.compile(r"^(\w+):\s*([^#]*?)\s*(?:#\s*(.*))?$")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return args.handler(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colosim",
        description="Discrete-event simulator of dense container hosts.",
        epilog="Run `colosim run --help` for the configuration groups and override syntax.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    run = commands.add_parser(
        "run",
        help="simulate one scenario and write a run directory",
        description="Simulate one scenario and write a run directory.",
        epilog=_run_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "overrides", nargs="*", metavar="OVERRIDE", help="Hydra override: group=option or key=value"
    )
    run.add_argument(
        "--show-config",
        action="store_true",
        help="print the composed config (every key, with its value) and exit without running",
    )
    run.set_defaults(handler=_run)
    return parser


def _run_epilog() -> str:
    defaults = default_options()
    options = list_options()
    order = [g for g in defaults if g in options] + [g for g in options if g not in defaults]
    groups = "\n".join(
        f"  {group:<12} "
        + ", ".join(f"{o}*" if o == defaults.get(group) else o for o in options[group])
        for group in order
    )
    # Read from config.yaml's own lines so the help repeats its comments.
    top_level = [
        m.groups()
        for m in map(_TOP_LEVEL_KEY.match, (CONF_DIR / "config.yaml").read_text().splitlines())
        if m and m.group(1) != "defaults"
    ]
    width = max(len(f"{key}={value}") for key, value, _ in top_level)
    keys = "\n".join(
        f"  {f'{key}={value}':<{width}}  {comment or ''}".rstrip()
        for key, value, comment in top_level
    )
    return f"""\
config groups (pick one option with group=option; * marks the default):
{groups}

top-level keys and their defaults:
{keys}

overrides:
  colosim run host=this-vm                        pick a group option
  colosim run workload.functions=8 seed=3         set keys (group.key=value)
  colosim run workload=periodic 'workload.nice=[0,5]'
                                                  a list value
  colosim run output_dir=/tmp/x                   choose the run directory
  colosim run --show-config workload=worker_pool  list an option's keys
"""


def _run(args: argparse.Namespace) -> int:
    try:
        cfg = compose(args.overrides)
    except ConfigError as err:
        return _fail(err)
    if args.show_config:
        print(OmegaConf.to_yaml(cfg), end="")
        return 0
    out_dir = _run_dir(cfg)
    try:
        ensure_writable(out_dir)
    except RunDirExistsError as err:
        return _fail(f"{err}; choose another output_dir")

    # Imported here so `--help` and config errors work without loading the
    # simulator, and tests can substitute sim.simulate.
    from sim import simulate

    progress = _ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        result = simulate(cfg, **({"progress": progress} if progress else {}))
    except KeyboardInterrupt:
        print("\ncolosim: interrupted; no run directory was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if progress:
            progress.close()

    summary = _with_run_id(result.summary, out_dir.name)
    tables = SimpleNamespace(summary=summary, requests=result.requests, intervals=result.intervals)
    path = write_run_dir(tables, out_dir, cfg)
    print(format_summary(summary))
    print(f"\nresults in {path}")
    return 0


def _fail(message: object) -> int:
    lines = str(message).splitlines()
    if len(lines) == 1:
        print(f"colosim: error: {lines[0]}", file=sys.stderr)
    else:
        print("colosim: errors:", *(f"  {line}" for line in lines), sep="\n", file=sys.stderr)
    return EXIT_USAGE


def _run_dir(cfg: DictConfig) -> Path:
    if cfg.output_dir is not None:
        return Path(cfg.output_dir).absolute()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path.cwd() / "runs" / f"{stamp}-{cfg.workload.name}-{cfg.scheduler.name}-s{cfg.seed}"
    # Two runs started within the same second must not collide.
    candidate, n = base, 1
    while candidate.exists():
        candidate, n = base.with_name(f"{base.name}-{n}"), n + 1
    return candidate


def _with_run_id(summary: pa.Table, run_id: str) -> pa.Table:
    """The run directory's name is the run id, whatever the simulator put there."""
    column = pa.array([run_id] * summary.num_rows, pa.string())
    index = summary.schema.get_field_index("run_id")
    if index < 0:
        return summary.append_column("run_id", column)
    return summary.set_column(index, "run_id", column)


class _ProgressBar:
    """A one-line progress bar on a terminal, redrawn at most ten times a second."""

    WIDTH = 30
    INTERVAL_S = 0.1

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.last_draw = float("-inf")
        self.drawn = False

    def __call__(self, sim_time_s: float, duration_s: float) -> None:
        now = time.monotonic()
        if now - self.last_draw < self.INTERVAL_S:
            return
        self.last_draw = now
        frac = min(max(sim_time_s / duration_s, 0.0), 1.0) if duration_s > 0 else 1.0
        filled = round(frac * self.WIDTH)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {frac:4.0%}  "
            f"{sim_time_s:,.1f} / {duration_s:,.1f} s simulated"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")  # erase the bar so the summary starts clean
            self.stream.flush()
