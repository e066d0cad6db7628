"""The speed issue's scenarios counted in instructions, not seconds.

    python -m benchmarks.instructions [--schedulers cfs,eevdf,lags] [--duration 3]
                                      [--scenario overload|fig3]

Wall time on this VM moves by 5-10 % between back-to-back runs, so a
change worth a few percent cannot be seen in it; valgrind's callgrind
counts the instructions a run executes, the same to a few parts in 10^5
from run to run.  For each scheduler the scenario (benchmarks/configs.py:
``overload``, the issue's dense scenario, or ``fig3``, the largest point
of the LAGS Fig. 3 grid: rd-hashd's request path replaying azure2021) is
shortened to ``--duration`` simulated seconds after 1 s of warm-up and
run in a child process under callgrind, instrumented only from the run's
start (the child waits until ``callgrind_control`` turns instrumentation
on) and counting only inside the event loop (``Calendar._run_until``, the
warm-up included): instructions per context switch of the counted
seconds.  The bare SimPy loop of benchmarks/bare_simpy.py is counted the
same way at two sizes, the difference over the difference in timeouts
(its set-up cancels): instructions per timeout.  Their ratio is this
count's version of the speed issue's "x bare SimPy" (instructions do not
weigh cache misses, so it is a guide, not the target's measure).

Needs valgrind (``apt-get install valgrind``); refused, with that
command, without it.  About 20 s per scheduler for ``overload`` at 3 s,
two minutes for ``fig3`` at 1 s."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bare_simpy import bare_simpy_loop
from benchmarks.configs import drawn_trace, fig3_point, overload
from scenarios.simulate import simulate
from scenarios.validate import ConfigError

LOOP_SYMBOL = "__pyx_f_3sim_6engine_8Calendar__run_until"
BARE_TIMEOUTS = (20_000, 60_000)
SCENARIOS = {"overload": overload, "fig3": fig3_point}


def _wait_for_instrumentation(ready: Path) -> None:
    """Tell the parent we are ready, then wait until it has switched
    callgrind's instrumentation on (it removes the file)."""
    ready.write_text(str(os.getpid()))
    while ready.exists():
        time.sleep(0.05)


def _child_sim(scenario: str, scheduler: str, duration_s: float, ready: Path) -> None:
    cfg = SCENARIOS[scenario](scheduler) | {"duration_s": duration_s + 1.0, "warmup_s": 1.0}
    trace = drawn_trace(cfg)
    # imports and first-use costs before counting starts
    simulate(cfg | {"duration_s": 1.0, "warmup_s": 0.1}, trace=trace)
    _wait_for_instrumentation(ready)
    print(simulate(cfg, trace=trace).summary.to_pylist()[0]["ctx_switches"])


def _child_bare(timeouts: int, ready: Path) -> None:
    env, count = bare_simpy_loop(timeouts=timeouts)
    _wait_for_instrumentation(ready)
    env.run()
    print(count)


def _count(child_args: list[str], toggle: str | None) -> tuple[int, int]:
    """(instructions counted, the number the child printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        ready, out = Path(tmp) / "ready", Path(tmp) / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        if toggle:
            cmd += ["--collect-atstart=no", f"--toggle-collect={toggle}"]
        cmd += [sys.executable, "-m", "benchmarks.instructions", "--child", *child_args, str(ready)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the counted run failed:\n{proc.stderr.read()[-2000:]}")
            time.sleep(0.2)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       capture_output=True)
        ready.unlink()
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"the counted run failed:\n{stderr[-2000:]}")
        summary = re.search(r"^summary: (\d+)", out.read_text(), re.M)
        return int(summary.group(1)), int(stdout.split()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedulers", default="cfs,eevdf,lags")
    parser.add_argument("--duration", type=float, default=3.0,
                        help="simulated seconds counted, after 1 s of warm-up")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="overload")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "bare":
            _child_bare(int(rest[0]), Path(rest[1]))
        else:
            _child_sim(kind, rest[0], float(rest[1]), Path(rest[2]))
        return
    if args.duration <= 0:
        parser.error(f"--duration {args.duration}: must be > 0")
    schedulers = args.schedulers.split(",")
    make = SCENARIOS[args.scenario]
    for scheduler in schedulers:
        try:
            make(scheduler)          # an unknown scheduler is refused before any run
        except ConfigError as err:
            parser.error(str(err))
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"{' and '.join(missing)} not found: install valgrind "
                 f"(apt-get install valgrind) to count instructions")
    counts = [_count(["bare", str(n)], None) for n in BARE_TIMEOUTS]
    per_timeout = (counts[1][0] - counts[0][0]) / (counts[1][1] - counts[0][1])
    print(f"bare SimPy: {per_timeout:,.0f} instructions per timeout", flush=True)
    print("| scheduler | switches | instructions in the event loop | per switch | x bare SimPy |")
    print("|---|---:|---:|---:|---:|")
    for scheduler in schedulers:
        instructions, switches = _count([args.scenario, scheduler, str(args.duration)],
                                        LOOP_SYMBOL)
        per_switch = instructions / switches
        print(f"| {scheduler} | {switches:,} | {instructions:,} | {per_switch:,.0f} | "
              f"{per_timeout / per_switch:.3f} |", flush=True)


if __name__ == "__main__":
    main()
