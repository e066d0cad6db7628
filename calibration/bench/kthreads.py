"""What else runs on a busy CPU: the host's kernel threads -> kthreads.parquet.

A real host always runs per-CPU kernel threads (kworkers, rcu, ksoftirqd,
the per-CPU migration/stopper, timers' deferred work), and each one that
wakes on a busy CPU switches the running workload task out.  This
benchmark measures them as the workload sees them: one CPU hog per CPU
(each pinned, in its own cgroup) for ``SECONDS`` s, ``REPEATS`` times, while
``perf record -e sched:sched_switch -a`` records every switch on the host.
An *interruption* is the interval from a hog's switch-out to its next
switch-in on its CPU; it is attributed to the first task switched in (the
one that preempted the hog) and lasts until the hog runs again (every task
that ran in between is counted in ``n_tasks``).

Columns (one row per interruption): rep, cpu, t_s (from the recording's
start), duration_ns, run_ns (the first intruder's own run: until the
next switch on the CPU), comm, pid, prio (the kernel prio of the first
intruder: < 100 RT, 100 + 20 + nice for a fair task), kthread (PF_KTHREAD,
read from /proc/PID/stat after the recording; for a task gone by then,
whether its comm is one of the kernel's per-CPU thread names), n_tasks,
preempted (the hog left runnable, prev_state R, rather than blocked), and
per repetition its length (``window_s``, one row per rep in the metadata).
The fit (``kthread_params``) keeps the kernel threads only: perf's own
writer, the benchmark driver and other user-space processes are this
host's disturbances, not its kernel's.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa

from backends.real.perf import perf_binary
from calibration.bench import common
from calibration.bench.common import BenchUnavailable, Progress
from sim.kthreads import RUN_QUANTILES

NAME = "kthreads"
SECONDS, SECONDS_QUICK = 30, 5
REPEATS, REPEATS_QUICK = 3, 1
PF_KTHREAD = 0x00200000
# per-CPU kernel threads' comm prefixes (for an intruder gone before its
# flags could be read)
KTHREAD_COMMS = ("kworker/", "ksoftirqd/", "rcu", "migration/", "cpuhp/", "watchdog",
                 "kcompactd", "khugepaged", "kswapd", "idle_inject/", "irq/", "jbd2/",
                 "kthreadd", "oom_reaper", "kauditd", "ext4-")
SCHEMA = pa.schema([("rep", pa.int64()), ("cpu", pa.int64()), ("t_s", pa.float64()),
                    ("duration_ns", pa.int64()), ("run_ns", pa.int64()), ("comm", pa.string()), ("pid", pa.int64()),
                    ("prio", pa.int64()), ("kthread", pa.bool_()), ("n_tasks", pa.int64()),
                    ("preempted", pa.bool_())])
SWITCH = re.compile(r"^\s*\[(\d+)\]\s+([\d.]+):\s+\S+:\s+prev_comm=(.*?) prev_pid=(\d+) "
                    r"prev_prio=(\d+) prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+) "
                    r"next_prio=(\d+)")


def parse_switches(lines) -> list[tuple]:
    """(cpu, t_s, prev_pid, prev_state, next_comm, next_pid, next_prio) of
    each ``perf script -F cpu,time,event,trace`` sched_switch line."""
    out = []
    for line in lines:
        m = SWITCH.match(line)
        if m:
            out.append((int(m[1]), float(m[2]), int(m[4]), m[6], m[7], int(m[8]), int(m[9])))
    return out


def interruptions(switches: list[tuple], hog_of_cpu: dict[int, int]) -> list[dict]:
    """The hogs' interruptions (module docstring) in per-CPU time order."""
    rows = []
    t_first = min((s[1] for s in switches), default=0.0)
    open_: dict[int, dict] = {}
    for cpu, t, prev_pid, prev_state, comm, pid, prio in sorted(switches, key=lambda s: s[:2]):
        hog = hog_of_cpu.get(cpu)
        if hog is None:
            continue
        cur = open_.get(cpu)
        if prev_pid == hog and cur is None:
            open_[cpu] = {"cpu": cpu, "t0": t, "comm": comm, "pid": pid, "prio": prio,
                          "n_tasks": 1, "preempted": prev_state.startswith("R"), "run": None}
        elif cur is not None and pid == hog:
            if cur["run"] is None:
                cur["run"] = t - cur["t0"]
            rows.append({"cpu": cpu, "t_s": cur["t0"] - t_first,
                         "duration_ns": int(round((t - cur["t0"]) * 1e9)),
                         "run_ns": int(round(cur["run"] * 1e9)), "comm": cur["comm"],
                         "pid": cur["pid"], "prio": cur["prio"], "n_tasks": cur["n_tasks"],
                         "preempted": cur["preempted"]})
            del open_[cpu]
        elif cur is not None:
            if cur["run"] is None:            # the first intruder leaves
                cur["run"] = t - cur["t0"]
            if pid != 0:
                cur["n_tasks"] += 1
    return rows


def is_kthread(pid: int, comm: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        flags = int(stat.rsplit(")", 1)[1].split()[6])
        return bool(flags & PF_KTHREAD)
    except (OSError, ValueError, IndexError):
        return comm.startswith(KTHREAD_COMMS)


def record(seconds: float, cpus: list[int]) -> tuple[list[tuple], float]:
    """sched_switch on every CPU for ``seconds``; (switches, wall seconds)."""
    perf = perf_binary()
    with tempfile.TemporaryDirectory(prefix="colosim-kthreads-") as tmp:
        data = Path(tmp) / "perf.data"
        t0 = time.monotonic()
        # a large ring (-m) so perf's writer wakes rarely: it is an intruder too
        subprocess.run([str(perf), "record", "-q", "-a", "-m", "1024",
                        "-C", ",".join(map(str, cpus)), "-e", "sched:sched_switch",
                        "-o", str(data), "--", "sleep", str(seconds)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.monotonic() - t0
        script = subprocess.run([str(perf), "script", "-i", str(data), "-F",
                                 "cpu,time,event,trace"], check=True, capture_output=True,
                                text=True)
    return parse_switches(script.stdout.splitlines()), wall


def run(out_dir, quick: bool = False, progress: Progress = None) -> pa.Table:
    started = common.utc_now()
    common.check_host()
    try:
        perf_binary()
    except Exception as e:  # noqa: BLE001 - any reason perf cannot run
        raise BenchUnavailable(f"kthreads needs perf: {e}") from None
    seconds = SECONDS_QUICK if quick else SECONDS
    repeats = REPEATS_QUICK if quick else REPEATS
    cpus = sorted(common.all_cpus())
    rows: list[dict] = []
    windows = []
    t0 = time.monotonic()
    for rep in range(repeats):
        common.say(progress, f"{NAME} rep {rep + 1}/{repeats}: one hog per CPU for {seconds} s "
                             f"({time.monotonic() - t0:.0f} s)")
        with common.bench_cgroups(NAME) as cg, ExitStack() as stack:
            hog_of_cpu = {}
            for cpu in cpus:
                procs = stack.enter_context(common.hogs(cg, [f"hog{cpu}"], cpu,
                                                        max_seconds=seconds + 30))
                hog_of_cpu[cpu] = procs[0].pids[0]
            time.sleep(0.5)             # the hogs pin themselves after "G"
            switches, wall = record(seconds, cpus)
        found = interruptions(switches, hog_of_cpu)
        kth = {}
        for r in found:
            if r["pid"] not in kth:
                kth[r["pid"]] = is_kthread(r["pid"], r["comm"])
            rows.append({"rep": rep, **r, "kthread": kth[r["pid"]]})
        windows.append(round(wall, 3))
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    params = {"seconds": seconds, "repeats": repeats, "cpus": cpus, "window_s": windows}
    return common.finish(table, out_dir, NAME, params, quick, started, t0)


def kthread_params(table: pa.Table, meta: dict) -> dict:
    """The profile's kernel-thread keys (sim/kthreads.py) from the kernel
    threads' interruptions: ``kthread_rate_per_s`` (their mean number per
    second per CPU over the repetitions and CPUs), ``kthread_run_us`` (the
    first intruder's run at sim.kthreads.RUN_QUANTILES, all of them
    pooled), ``kthread_nice`` (the most common nice among them; RT ones, if
    any, counted at nice 0), the rate's 1-sigma (``uncertainty``: over the
    (repetition, CPU) cells) and, in ``measured``, the cells' range, the
    spread of the per-repetition median run and the counts."""
    params = meta["params"]
    windows = params["window_s"]
    rows = [r for r in table.to_pylist() if r["kthread"]]
    cells = {(rep, cpu): 0 for rep in range(len(windows)) for cpu in params["cpus"]}
    for r in rows:
        cells[r["rep"], r["cpu"]] += 1
    rates = np.array([n / windows[rep] for (rep, _), n in cells.items()])
    run_us = np.array([r["run_ns"] / 1000 for r in rows])
    nices = [r["prio"] - 120 if r["prio"] >= 100 else 0 for r in rows]
    medians = [float(np.median([r["run_ns"] / 1000 for r in rows if r["rep"] == rep]))
               for rep in range(len(windows)) if any(r["rep"] == rep for r in rows)]
    return {"kthread_rate_per_s": round(float(rates.mean()), 2),
            "kthread_run_us": [round(float(q), 2) for q in np.quantile(run_us, RUN_QUANTILES)],
            "kthread_nice": int(max(set(nices), key=nices.count)),
            "uncertainty": {"kthread_rate_per_s": float(f"{rates.std(ddof=1):.3g}")
                            if len(rates) > 1 else float("inf")},
            "measured": {"rate_range_per_s": [round(float(rates.min()), 2),
                                              round(float(rates.max()), 2)],
                         "run_us_median_sigma": float(f"{np.std(medians, ddof=1):.3g}")
                         if len(medians) > 1 else float("inf"),
                         "interruptions": len(rows), "all_interruptions": table.num_rows}}


main = common.main_of(__doc__, run, NAME)


if __name__ == "__main__":
    raise SystemExit(main())
