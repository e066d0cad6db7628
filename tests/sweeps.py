"""A small real sweep directory for the results tests (compare, report)."""
from __future__ import annotations

import copy

BASE = ["host=this-vm", "duration_s=0.5", "warmup_s=0.1", "interval_s=0.1",
        "workload.rate_rps=40"]
SCHEDULERS, SEEDS, FUNCTIONS = ("cfs", "lags"), (0, 1), (2, 4)


def make_sweep(sweep_dir, schedulers=SCHEDULERS, seeds=SEEDS, functions=FUNCTIONS,
               overrides=()):
    """A sweep directory laid out exactly as `colosim sweep` writes it (same
    run-directory naming, runner and collect), without the Hydra launcher:
    its process start-up would dominate these sub-second runs. The launcher
    itself is tested in test_sweep.py. ``overrides`` are added to every run's."""
    from scenarios.config import compose
    from scenarios.runner import run_scenario
    from scenarios.sweep import collect, run_dir_of

    for scheduler in schedulers:
        base = compose(BASE + list(overrides) + [f"scheduler={scheduler}"])
        for seed in seeds:
            for n in functions:
                cfg = copy.deepcopy(base)
                cfg.seed, cfg.workload.functions = seed, n
                run_scenario(cfg, run_dir_of(sweep_dir, cfg))
    collect(sweep_dir, ["scheduler", "seed", "workload.functions"])
    return sweep_dir
