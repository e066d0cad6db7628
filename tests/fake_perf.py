"""A stand-in for ``perf stat -x, -I MS -e EVENTS -o FILE -- CMD...`` on a
host whose PMU has no hardware events (tests/test_real_jobs.py): it runs CMD
and writes perf's CSV interval lines, deriving cycles from the CPU time
/proc says CMD used (2.5 GHz), instructions at IPC 1.5, and the stall event
as ``FAKE_PERF_STALL_FRAC`` (environment, default 0.05) of the cycles.  It
exits with CMD's status, as perf does."""
import os
import subprocess
import sys
import time

GHZ = 2.5


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def main(argv: list[str]) -> int:
    assert argv[0] == "stat", argv
    i = argv.index("--")
    opts, cmd = argv[1:i], argv[i + 1:]
    interval_s = int(opts[opts.index("-I") + 1]) / 1000
    events = opts[opts.index("-e") + 1].split(",")
    out = open(opts[opts.index("-o") + 1], "a")
    stall_frac = float(os.environ.get("FAKE_PERF_STALL_FRAC", "0.05"))
    child = subprocess.Popen(cmd)
    t0 = time.monotonic()
    seen = 0.0
    while True:
        done = child.poll() is not None
        if not done:
            time.sleep(interval_s)
        used = cpu_s(child.pid) if not done else seen
        d, seen = max(0.0, used - seen), max(seen, used)
        cycles = d * GHZ * 1e9
        values = {"cycles": cycles, "instructions": 1.5 * cycles,
                  "cache-references": cycles / 100, "cache-misses": cycles / 400,
                  "task-clock": d * 1e3}
        t = time.monotonic() - t0
        for e in events:
            v = values.get(e, stall_frac * cycles)   # the stall event, whatever its name
            out.write(f"{t:14.9f},{v:.0f},,{e},{int(d * 1e9)},100.00,,\n")
        out.flush()
        if done:
            return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
