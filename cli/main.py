"""The `colosim` command line."""

import argparse
import contextlib
import errno
import math
import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TextIO

from omegaconf import DictConfig, OmegaConf

from results.rundir import RunDirError, ensure_writable
from results import validation
from results.summary import format_summary, format_sweep
from scenarios.config import CONF_DIR, compose, default_options, expand_sweep, list_options
from scenarios.validate import ConfigError

EXIT_USAGE = 2  # bad command line or config, as argparse uses
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
_TOP_LEVEL_KEY = re.compile(r"^(\w+):\s*([^#]*?)\s*(?:#\s*(.*))?$")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse would blame the top-level parser: show the command's usage
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unknown)}")
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
        description="Simulate one scenario (or run it on this host: backend=real), write a\n"
        "run directory and print its summary: the requests that arrived, finished and\n"
        "were left unfinished, whether the run was overloaded (its backlog grew), and\n"
        "latencies, which are of the finished requests.",
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
    sweep = commands.add_parser(
        "sweep",
        help="run a Hydra multirun: one run directory per point, one summary",
        description="Run every combination of the swept overrides (Hydra multirun) and write\n"
        "one directory with each run's directory and a concatenated summary.parquet;\n"
        "then print one line per run, labelled by the keys that vary between the runs\n"
        "and sorted by them, with its unfinished share and whether it was overloaded.",
        epilog=_sweep_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.add_argument(
        "overrides", nargs="*", metavar="OVERRIDE",
        help="Hydra override; comma lists (scheduler=cfs,eevdf), range(12,37,12) and "
        "choice() sweep",
    )
    sweep.add_argument("--dir", type=Path, default=None,
                       help="sweep directory (default: sweeps/<timestamp> under cwd): a new "
                       "or empty directory, or a sweep's; re-running into the same directory "
                       "skips completed runs (output_dir= is refused: runs go under --dir)")
    sweep.add_argument("--quiet", action="store_true",
                       help="no progress lines (also: COLOSIM_QUIET=1)")
    sweep.set_defaults(handler=_sweep)
    _add_results_commands(commands)
    _add_cleanup_command(commands)
    _add_calibrate_command(commands)
    _add_validate_command(commands)
    for command_parser in commands.choices.values():
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def _add_validate_command(commands) -> None:
    """`colosim validate` (calibration/validate.py): simulator vs this host."""
    validate = commands.add_parser(
        "validate",
        help="run held-out scenarios on this host and in the simulator and report the errors",
        description="Run each scenario of a held-out suite on backend=real (this machine; "
        "needs root) and then on backend=sim with the same overrides, seed, invocation trace "
        "and calibration=PROFILE, and report per scenario: throughput, goodput, p50/p95/p99 "
        "latency, context-switch rate, migration rate, CPU utilisation and throttled time "
        "(real, sim, relative error (sim - real) / real) and the two-sample KS statistic of "
        "the latency distributions.  Targets: throughput and CPU utilisation within 5%, p50 "
        "within 10%, p99 and context-switch rate within 20%; the other metrics have none.",
        epilog="""examples:
  colosim validate default                     the default suite (about 2 minutes)
  colosim validate this-vm poisson-8 --quick   one scenario, 5 s per run (--quick: all, ~40 s)
  colosim validate default --suite calibration/suites/heldout-12cpu.yaml
  colosim validate default --format markdown > validation.md
  colosim validate this-vm --suite dense --repeat 3   the dense suite, 3 real runs per point

Writes DIR/validation.parquet (one row per scenario x metric), DIR/runs/<scenario>-real
and -sim (run directories: `colosim compare DIR` reads them), DIR/suite.yaml and
DIR/report.html (`colosim report DIR` renders the Validation section again).
A result is pass or MISS against its target, or missing when a backend has no
value (e.g. no perf counts): never a pass.  The exit code is 0 when the suite
ran, whether or not the targets were met (it is a report: read the verdict
line; a scenario whose run failed shows as missing, with the reason); 2 for an
unknown profile or scenario, a bad suite, or a host where backend=real cannot
run.  See docs/host-validation.md.
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("profile", metavar="PROFILE",
                          help="calibration profile: an option of scenarios/conf/calibration/ "
                          "(e.g. default, or a fitted profile such as this-vm)")
    validate.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                          help="scenario names of the suite (default: all of them)")
    validate.add_argument("--suite", type=Path, default=None,
                          help="suite file: scenario name -> list of `colosim run` overrides "
                          "(default: calibration/suites/heldout.yaml, sized for 2 CPUs)")
    validate.add_argument("--out", type=Path, default=None,
                          help="output directory (default: runs/validate-PROFILE-<timestamp>)")
    validate.add_argument("--quick", action="store_true",
                          help="append the suite's `quick` overrides (duration_s=5): for CI")
    validate.add_argument("--repeat", type=int, default=None, metavar="N",
                          help="real runs per scenario (default: the suite's `repeat`, else 1), "
                          "taken in rounds over the suite (every scenario's first, then "
                          "every scenario's second, ...); with N >= 2 each error is judged against max(target, the real "
                          "runs' spread) and a scenario with fewer than 2 undisturbed runs is "
                          "not compared")
    validate.add_argument("--format", choices=["text", "markdown", "csv"], default="text",
                          help="table printed to stdout: text (default), markdown, or csv "
                          "(long form, full precision)")
    validate.add_argument("--write", type=Path, default=None, metavar="FILE",
                          help="also write the --format table, with a header saying how it was "
                          "made, to FILE (e.g. docs/data/validation-dense-this-vm.md)")
    validate.set_defaults(handler=_validate)


def _validate(args: argparse.Namespace) -> int:
    from calibration import validate as v

    try:
        suite = v.load_suite(args.suite or v.DEFAULT_SUITE)
        names = v.select(suite, args.scenarios)
        v.check_profile(args.profile)
        if args.repeat is not None and args.repeat < 1:
            raise v.ValidateError(f"--repeat must be at least 1, got {args.repeat}")
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = (args.out or Path("runs") / f"validate-{args.profile}-{stamp}").absolute()
        ensure_writable(out)
        frame = v.validate(args.profile, suite, names, out, quick=args.quick,
                           repeat=args.repeat)
    except (v.ValidateError, RunDirError) as err:
        return _fail(err)
    except KeyboardInterrupt:
        print("\ncolosim: interrupted; the completed runs are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    table = validation.FORMATTERS[args.format](frame)
    print(table, end="")
    if args.format != "text":   # the text table ends with it already
        print(validation.verdict(frame), file=sys.stderr)
    if args.write is not None:
        command = " ".join(["colosim validate", args.profile, *args.scenarios,
                            *(["--suite", str(args.suite)] if args.suite else []),
                            *(["--repeat", str(args.repeat)] if args.repeat else []),
                            *(["--quick"] if args.quick else []),
                            "--format", args.format, "--write", str(args.write)])
        args.write.write_text(validation.data_file(frame, table, command, suite.path))
        print(f"table written to {args.write}", file=sys.stderr)
    print(f"results in {out}", file=sys.stderr)
    return 0


def _add_calibrate_command(commands) -> None:
    """`colosim calibrate` (calibration/): fit the cost model on this host."""
    cal = commands.add_parser(
        "calibrate",
        help="measure this host with microbenchmarks and fit the simulator's cost model",
        description="Run the microbenchmarks of calibration/bench on this host (context-switch "
        "ping-pong across cgroup levels, run-queue lengths, working sets and CPUs; hog "
        "density; wake-up latency; bandwidth throttling), fit the context-switch cost model "
        "(direct, per-level, run-queue, migration and cache-refill costs) by least squares, "
        "re-simulate every measured configuration with the fitted values, and write the "
        "profile with each parameter's 1-sigma, every point's residual and the host "
        "fingerprint. Needs root, cgroups (cpu, cpuacct, cpuset) and gcc; rt-app's loop "
        "is measured where rt-app is installed, skipped saying so otherwise.",
        epilog="""examples:
  colosim calibrate --out this-vm                 measure (~16 min), fit, write
                                                  scenarios/conf/calibration/this-vm.yaml
  colosim run calibration=this-vm host=this-vm    simulate with it
  colosim calibrate --out this-vm --from-bench calibration/data/this-vm
                                                  refit recorded measurements (no root)
  colosim calibrate --out /tmp/p.yaml --quick     a short measurement (~1 min)

The fit report (every point: measured, fitted, re-simulated) is written to the
work directory and, for a named profile, to calibration/fits/NAME.md.
See docs/calibration-host.md.
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cal.add_argument("--out", required=True, metavar="PROFILE",
                     help="profile name (written to scenarios/conf/calibration/PROFILE.yaml) or "
                     "a .yaml path")
    cal.add_argument("--from-bench", type=Path, default=None, metavar="DIR",
                     help="fit the benchmark tables in DIR instead of measuring")
    cal.add_argument("--dir", type=Path, default=None,
                     help="work directory (default: runs/calibrate-PROFILE-<timestamp>)")
    cal.add_argument("--quick", action="store_true",
                     help="fewer configurations and shorter samples (CI)")
    cal.add_argument("--fix", action="append", default=[], metavar="PARAM=VALUE",
                     help="hold a cost parameter at a value instead of fitting it (repeatable)")
    cal.add_argument("--host", default="this-vm",
                     help="host option the re-simulation uses (default: this-vm)")
    cal.add_argument("--scheduler", default=None,
                     help="scheduler option of the re-simulation (default: the kernel's: "
                     "eevdf on Linux 6.6+, else cfs)")
    cal.add_argument("--no-resimulate", action="store_true",
                     help="skip re-simulating the measured configurations")
    cal.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from calibration.calibrate import calibrate

    fixed = {}
    for item in args.fix:
        key, sep, value = item.partition("=")
        if not sep:
            return _fail(f"--fix {item}: expected PARAM=VALUE")
        try:
            fixed[key] = float(value)
        except ValueError:
            return _fail(f"--fix {item}: {value!r} is not a number")
    scheduler = args.scheduler
    if scheduler is None:
        from backends.real.detect import fair_scheduler
        scheduler = fair_scheduler()
    if args.from_bench is None and os.geteuid() != 0:
        return _fail("calibrate measures with cgroups and needs root; refit recorded "
                     "measurements with --from-bench DIR")
    try:
        out = calibrate(args.out, work_dir=args.dir, from_bench=args.from_bench,
                        quick=args.quick, fixed=fixed, host=args.host, scheduler=scheduler,
                        resim=not args.no_resimulate, progress=_progress_line,
                        command="colosim calibrate " + " ".join(sys.argv[2:]))
    except (FileNotFoundError, ValueError, RuntimeError, ConfigError) as e:
        return _fail(e)
    result = out["result"]
    for key, value in result.params.items():
        sigma = "fixed" if key in result.fixed else f"+/- {result.sigma[key]:.3g}"
        print(f"{key:20} {value:12.4g}  {sigma}")
    print(f"chi2 {result.chi2:.1f} / {result.dof} dof")
    print(f"profile: {out['profile']}")
    print(f"report:  {out['report']}")
    return 0


def _progress_line(msg: str) -> None:
    if not os.environ.get("COLOSIM_QUIET"):
        print(f"[calibrate] {msg}", file=sys.stderr, flush=True)


def _add_cleanup_command(commands) -> None:
    """`colosim cleanup` (backends/real/): leftovers of a crashed real-host run."""
    cleanup = commands.add_parser(
        "cleanup",
        help="remove colosim-* cgroups (killing their processes) and resctrl groups left by "
        "a crashed real-host run",
        description="Kill the processes in every colosim-* cgroup, in every cgroup hierarchy, "
        "remove those cgroups and every colosim-* resctrl group (through the RDT sidecar; "
        "their tasks go back to the root group), give the root resctrl group back the "
        "schemata a crashed run had shrunk (controller=dynamic_priority takes ways from it; "
        "the run saved the original in /run/colosim-rdt), and list what was done. Needs "
        "root. Touches nothing else outside the colosim- prefix.",
    )
    cleanup.add_argument("--run", default=None,
                         help="only the run named RUN: the name you gave it (output_dir's "
                         "name) or its cgroup's name (colosim-RUN; a real run prints it at "
                         "start); default: every run whose process is gone")
    cleanup.add_argument("--dry-run", action="store_true",
                         help="list the colosim-* cgroups and resctrl groups and their "
                         "processes, change nothing")
    cleanup.set_defaults(handler=_cleanup)


def _cleanup(args: argparse.Namespace) -> int:
    from backends.real import cgroupfs

    try:
        layout = cgroupfs.detect_layout()
        found = cgroupfs.leftovers(layout, given=args.run)
        gone = [f for f in found if not f.live]
        for f in found:
            if f.live:      # another run, maybe another user's: never touched
                print(f"kept {f.tree}: its run is live (pid {f.owner['pid']}, run "
                      f"{f.owner['given']!r}); stop that run and it removes its cgroups")
        name = None if args.run is None else (
            args.run if args.run.startswith(cgroupfs.PREFIX) else cgroupfs.PREFIX + args.run)
        if not found:
            print(f"no {name or cgroupfs.PREFIX + '*'} cgroups")
        elif args.dry_run:
            for f in gone:
                for t in f.dirs:
                    print(f"would remove {t} (processes: {cgroupfs.tree_pids(t) or 'none'})")
        elif gone and os.geteuid() != 0:
            return _fail(f"cleanup needs root (running as uid {os.geteuid()}); found: "
                         + ", ".join(str(t) for f in gone for t in f.dirs))
        else:
            for f in gone:
                for t in f.dirs:
                    removed, killed = cgroupfs.remove_tree(t, layout)
                    for pid in killed:
                        print(f"killed pid {pid} (in {t})")
                    for d in removed:
                        print(f"removed {d}")
                cgroupfs.forget_owner(f.tree)
    except cgroupfs.CgroupError as e:
        return _fail(e)
    if args.run is None and not any(f.live for f in found):
        return _cleanup_resctrl(cgroupfs.PREFIX, args.dry_run)
    # a run's resctrl groups are named after its cgroup tree: only the gone
    # runs' (a live run's are its own); a run whose cgroups are gone already
    # may still have some
    trees = [f.tree for f in gone] or ([] if found or name is None else [name])
    for tree in trees:
        if (rc := _cleanup_resctrl(f"{tree}-", args.dry_run)) != 0:
            return rc
    return 0


def _cleanup_resctrl(prefix: str, dry_run: bool) -> int:
    """The resctrl groups under ``prefix``, through the RDT sidecar (as
    backends/real/rdt.py's docstring says); nothing to remove without resctrl."""
    from backends.host import RdtError
    from backends.real import detect
    from backends.real.rdt import RdtSidecar

    try:
        sc = RdtSidecar(prefix=prefix)
    except RdtError as e:
        # no sidecar (e.g. no go to build it) only matters where resctrl could hold groups
        if detect.resctrl_mounted():
            return _fail(f"resctrl groups not checked: {e.strerror}")
        print(f"no {prefix}* resctrl groups: resctrl is not mounted")
        return 0
    try:
        if dry_run:
            found = sc.classes()
            for cls, c in found.items():
                print(f"would remove resctrl group {sc.prefix}{cls} "
                      f"(tasks: {c.get('pids') or 'none'})")
        else:
            found = sc.cleanup()
            for cls in found:
                print(f"removed resctrl group {sc.prefix}{cls}")
            if sc.root_restored:
                print("restored the root resctrl group's schemata saved by a crashed run")
        if not found:
            print(f"no {sc.prefix}* resctrl groups")
    except RdtError as e:
        if e.errno != errno.ENODEV:
            return _fail(f"resctrl: {e.strerror}")
        print(f"no {sc.prefix}* resctrl groups: {e.strerror}")
    finally:
        sc.close()
    return 0


def _add_results_commands(commands) -> None:
    """`colosim compare` and `colosim report` (results/)."""
    from results.compare import DEFAULT_METRICS, FORMATTERS

    compare = commands.add_parser(
        "compare",
        help="compare policies across run/sweep directories, with bootstrap CIs over seeds",
        description="One table per metric: runs grouped by the parameters that vary between "
        "them, each policy's mean over seeds and its delta against a baseline policy, with "
        "percentile bootstrap confidence intervals over seeds (paired by seed when both "
        "policies ran the same seeds).",
        epilog="""examples:
  colosim compare sweeps/density
  colosim compare runs/a runs/b --metric latency_p99_s --baseline eevdf
  colosim compare sweeps/x --format csv > x.csv    long form, full precision
  colosim compare runs/demo --reading              the results in one paragraph

A policy is the scheduler, plus the controllers when they vary, plus the
backend when runs of both are given (cfs@sim against cfs@real, the real host
the default baseline).  Latencies are shown in ms and fractions in % (the CSV
keeps the columns' own units); latency statistics are of the finished
requests, and a title says how many unfinished ones they leave out.  Where
runs were overloaded (their backlog grew), an "overloaded" column counts
them per cell.  With a single seed a cell says "n=1, no CI": sweep
seed=0,1,2,... for intervals.  --reading prints, instead of the tables, a
paragraph read from them along the density key (results/reading.py): where
each policy's mean p99 passes 100 ms (the knee, or "no knee within the
sweep"), from where runs are overloaded, how the scheduling overhead changes,
and each policy against the baseline before the knee and at the densest point
(p99, and the median there).
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("dirs", nargs="+", metavar="DIR", type=Path,
                         help="a run directory or a sweep directory (any mix)")
    compare.add_argument("--metric", action="append", metavar="NAME", default=None,
                         help="summary column to compare; repeat or comma-separate "
                         f"(default: {', '.join(DEFAULT_METRICS)})")
    compare.add_argument("--baseline", default=None, metavar="POLICY",
                         help="policy the deltas are taken against (default: cfs, on the "
                         "real host when runs of both backends are given, or the first "
                         "policy present when there is no cfs run)")
    compare.add_argument("--ci", type=float, default=0.95,
                         help="confidence level of the intervals (default 0.95)")
    compare.add_argument("--resamples", type=int, default=2000,
                         help="bootstrap resamples (default 2000; seeded, so reproducible)")
    compare.add_argument("--format", choices=list(FORMATTERS), default="text",
                         help="text (default), markdown, or csv (long form)")
    compare.add_argument("--reading", action="store_true",
                         help="print a one-paragraph reading of the comparison instead of "
                         "its tables")
    compare.set_defaults(handler=_compare)

    trace = commands.add_parser(
        "trace",
        help="per-cgroup scheduling metrics of a run recorded with trace=sched; "
        "--perfetto writes a trace for ui.perfetto.dev",
        description="Read a run's sched.parquet (recorded with trace=sched) and print each "
        "cgroup's scheduling metrics as perf sched latency / timehist define them: runtime, "
        "runs, wake-ups, wake-up latency (wake-up to switch-in; mean, p50, p99, max), run "
        "length (switch-in to switch-out; mean, p99), voluntary and involuntary switch-outs "
        "and migrations.  The run directory's sched_metrics.parquet holds the same per task "
        "and per cgroup.",
        epilog="""examples:
  colosim run trace=sched output_dir=runs/t       record the schedule
  colosim trace runs/t                            per-cgroup metrics
  colosim trace runs/t --tasks                    and per task
  colosim trace runs/t --perfetto /tmp/t.pftrace  open it in ui.perfetto.dev
  colosim trace runs/t --thread accept            one thread's wake-up latencies

Times are in ms.  See docs/tracing.md.
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    trace.add_argument("dir", metavar="RUN_DIR", type=Path,
                       help="a run directory with sched.parquet")
    trace.add_argument("--tasks", action="store_true", help="also print one row per task")
    trace.add_argument("--perfetto", type=Path, default=None, metavar="OUT",
                       help="write the schedule as a Perfetto trace (protobuf) to OUT")
    trace.add_argument("--thread", default=None, metavar="COMM",
                       help="also print the wake-up latency distribution and migrations of "
                       "the tasks named COMM after the run's warmup (the summary's thread_* "
                       "columns under trace.thread=COMM)")
    trace.set_defaults(handler=_trace)

    report = commands.add_parser(
        "report",
        help="write a self-contained HTML report (plots and comparison tables)",
        description="Write one self-contained HTML file (plots embedded as PNG) for a run "
        "or sweep directory: a reading of the results (as compare --reading), every compared "
        "metric per policy with bootstrap CIs (against the swept density, with CI bands), "
        "latency tails (CCDF, log-log) and p99 latency over time per policy, CPU "
        "entitlement over time of autoscaled cgroups, a per-CPU timeline of runs traced with trace=sched, their "
        "per-cgroup scheduling metrics, and the `colosim compare` tables.",
        epilog="""examples:
  colosim report runs/demo                      writes runs/demo/report.html
  colosim report sweeps/density --out /tmp/density.html

The density axis is the swept numeric key (workload.functions when swept);
without one, the metrics are bars per policy.  A plot without data is left
out, with a sentence saying why.
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("dir", metavar="DIR", type=Path, help="a run or sweep directory")
    report.add_argument("--out", type=Path, default=None,
                        help="HTML file to write (default: DIR/report.html)")
    report.add_argument("--baseline", default=None, metavar="POLICY",
                        help="baseline policy of the comparison tables (default: cfs)")
    report.add_argument("--ci", type=float, default=0.95,
                        help="confidence level of the intervals (default 0.95)")
    report.add_argument("--resamples", type=int, default=2000,
                        help="bootstrap resamples (default 2000)")
    report.add_argument("--timeline-window", default=None, metavar="START:END",
                        help="seconds of run time the per-CPU timeline shows (default: each "
                        "traced run's busiest 0.2 s)")
    report.set_defaults(handler=_report)


def _compare(args: argparse.Namespace) -> int:
    from results.compare import FORMATTERS, compare
    from results.reading import reading
    from results.readers import ResultsError, open_results

    metrics = None
    if args.metric:
        metrics = [m.strip() for arg in args.metric for m in arg.split(",") if m.strip()]
    try:
        comparison = compare(open_results(*args.dirs), metrics, args.baseline, args.ci,
                             args.resamples)
    except ResultsError as err:
        return _fail(err)
    if args.reading:
        print(reading(comparison))
        return 0
    print(FORMATTERS[args.format](comparison), end="")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from results.perfetto import write_perfetto
    from results.readers import ResultsError
    import yaml
    from results.rundir import CONFIG_FILE
    from results.sched import analyse, format_metrics, format_thread, read_sched

    try:
        sched = read_sched(args.dir)
        if args.perfetto is not None:
            write_perfetto(sched, args.perfetto)
    except ResultsError as err:
        return _fail(err)
    analysis = analyse(sched)
    metrics = analysis.metrics()
    print(f"{args.dir}: {sched.num_rows:,} events; wake-up latency and run length in ms\n")
    print("cgroups", format_metrics(metrics), sep="\n")
    if args.tasks:
        print("tasks", format_metrics(metrics, "task"), sep="\n")
    if args.thread is not None:
        # the summary's window: from warmup_s to duration_s of the run's config
        config = yaml.safe_load((args.dir / CONFIG_FILE).read_text())
        lo, hi = float(config.get("warmup_s", 0.0)), float(config["duration_s"])
        window = f"{lo:g} s to {hi:g} s"
        print(format_thread(analysis.thread(args.thread, round(lo * 1e9), round(hi * 1e9)),
                            window))
    if args.perfetto is not None:
        print(f"perfetto trace: {args.perfetto} (open it in ui.perfetto.dev)")
    return 0


def _report(args: argparse.Namespace) -> int:
    window = None
    if args.timeline_window is not None:
        try:
            window = _timeline_window(args.timeline_window)
        except ValueError as err:
            return _fail(err)   # before reading any run
    from results.readers import ResultsError
    from results.report import write_report

    try:
        path = write_report(args.dir, args.out, baseline=args.baseline, ci=args.ci,
                            resamples=args.resamples, timeline_window=window)
    except ResultsError as err:
        return _fail(err)
    print(f"report: {path}")
    return 0


def _timeline_window(text: str) -> tuple[float, float]:
    """``--timeline-window START:END``; ValueError naming the option and what it allows."""
    try:
        start, end = (float(part) for part in text.split(":"))
    except ValueError:
        start = end = math.nan
    if not 0 <= start < end < math.inf:   # NaN fails every comparison
        raise ValueError(f"--timeline-window {text!r}: expected START:END in seconds of run "
                         "time with 0 <= START < END (e.g. 1.2:1.5)")
    return start, end


def _sweep_epilog() -> str:
    return """examples:
  colosim sweep scheduler=cfs,eevdf workload.functions=12,36 seed=0,1
  colosim sweep experiment=lags_fig3            the sweep defined in the file
  colosim sweep scheduler=cfs,rr hydra.launcher.n_jobs=1
                                                one run at a time
  colosim sweep --dir sweeps/x seed=0,1,2       resume or extend a sweep

Config groups and keys are those of `colosim run --help`.  The default launcher
is joblib on all cores; hydra/launcher=<name> picks another installed Hydra
launcher plugin:
  hydra/launcher=ray                            a local Ray instance ('.[ray]')
  hydra/launcher=colosim_ray_cluster            the Ray cluster of this node
  hydra/launcher=colosim_slurm hydra.launcher.partition=cpu
                                                a SLURM job array ('.[slurm]')
"""


def _sweep(args: argparse.Namespace) -> int:
    from scenarios import sweep as sweeps

    # --quiet reaches the jobs through the environment; restore it so a
    # later sweep in the same process is not silenced too
    previous = os.environ.get(sweeps.ENV_QUIET)
    if args.quiet:
        os.environ[sweeps.ENV_QUIET] = "1"
    try:
        return _sweep_quietly_or_not(args, sweeps)
    finally:
        if previous is None:
            os.environ.pop(sweeps.ENV_QUIET, None)
        else:
            os.environ[sweeps.ENV_QUIET] = previous


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM stops a sweep the way SIGINT does.  A terminal's ^C reaches
    the launcher's workers too, but SIGTERM (kill, a batch system's stop)
    reaches only this process, whose default death would orphan joblib's
    workers to run on for minutes; raised as KeyboardInterrupt, it makes
    joblib terminate them and the sweep keep its completed runs.  Yields the
    list the signal's number is put in."""
    received: list[int] = []

    def on_term(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sweep_quietly_or_not(args: argparse.Namespace, sweeps) -> int:
    from sim.workloads.tablefile import TraceError

    sweep_dir = (args.dir or Path("sweeps") / datetime.now().strftime("%Y%m%d-%H%M%S"))
    sweep_dir = sweep_dir.absolute()
    try:
        sweeps.check_launcher(args.overrides)
        points, swept, configs = expand_sweep(args.overrides)
        sweeps.check_dir(sweep_dir)
        sweeps.check_inputs(configs)
    except (ConfigError, TraceError) as err:
        return _fail(err)
    except RunDirError as err:
        return _fail(f"--dir: {err}")
    overrides = list(args.overrides)
    if not any(o.startswith("hydra/launcher=") for o in overrides):
        overrides.insert(0, "hydra/launcher=joblib")
    if not sweeps.quiet():
        print(f"colosim: sweeping {len(points)} run(s) into {sweep_dir}", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        with _terminate_as_interrupt() as received:
            sweeps.launch(overrides, sweep_dir, configs, swept)
    except KeyboardInterrupt:
        print("\ncolosim: interrupted; completed runs are kept, run the same sweep again "
              "to finish it", file=sys.stderr)
        sweeps.collect(sweep_dir, swept)
        return 128 + received[0] if received else EXIT_INTERRUPTED
    except SystemExit as exc:     # Hydra reports a failed job and exits
        kept = sweeps.collect(sweep_dir, swept)
        where = (f"the {kept.num_rows} completed run(s) are in {sweep_dir}" if kept is not None
                 else "no run completed")
        return _fail(f"the sweep failed (exit {exc.code}); {where}")
    table = sweeps.collect(sweep_dir, swept)
    if table is None:   # every job returned, yet no run directory: say so, claim no summary
        return _fail(f"the sweep ran but wrote no run into {sweep_dir}")
    from results.readers import open_results

    # the keys that tell the runs apart, from their configs: also those
    # swept by an earlier invocation into the same --dir
    results = open_results(sweep_dir)
    print(format_sweep(results.summary(), results.keys), end="\n\n")
    print(f"{table.num_rows} run(s) in {sweep_dir} ({time.perf_counter() - t0:.1f} s wall); "
          f"summary: {sweep_dir / sweeps.SUMMARY}")
    return 0


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
    except RunDirError as err:
        return _fail(f"output_dir: {err}")

    from scenarios.runner import RunError, run_scenario
    from sim.workloads.trace import TraceError

    progress = _ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        summary = run_scenario(cfg, out_dir, progress)
    except KeyboardInterrupt:
        print("\ncolosim: interrupted; no run directory was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (TraceError, RunError) as err:   # nothing was written
        return _fail(err)
    finally:
        if progress:
            progress.close()
    print(format_summary(summary))
    print(f"\nresults in {out_dir}")
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
