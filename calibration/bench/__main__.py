"""Run every calibration microbenchmark: ctx_switch, density, wakeup and
throttle, each into <out>/<bench>.parquet (about 5 minutes; --quick under
one).  Needs root, the cpu, cpuacct and cpuset cgroup controllers and gcc;
perf is optional (density's perf columns are null without it)."""
from __future__ import annotations

from calibration.bench import run_all
from calibration.bench.common import cli

if __name__ == "__main__":
    raise SystemExit(cli(__doc__, run_all, prog="python -m calibration.bench"))
