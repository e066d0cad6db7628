"""``workload=ebizzy``: sleeping ebizzy, the CATCloud thesis's web-search
microbenchmark (the CATCloud thesis, §2.3.1; github pratiksampat/sleeping-ebizzy).

Each thread runs ``run_ms`` of CPU, then sleeps ``sleep_ms``, for ever: the
periodic model (sim/workloads/periodic.py) in a cgroup named ``ebizzy``, each
run burst a request from its release to its completion, so the latency
statistics are the per-burst completion times the thesis reports as
response time.  ``preset`` names the thesis's two experiments:

- ``exp1``: 20 ms run, 150 ms sleep (Fig. 2.3, and the evaluation's Fig. 4.1);
- ``exp2``: 40 ms run, 30 ms sleep (Fig. 2.5).

A ``run_ms`` or ``sleep_ms`` that is not null wins over the preset's value;
with ``preset`` null both must be given.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.config import from_mapping, tunable
from sim.workloads.periodic import PeriodicConfig, PeriodicWorkload

# preset -> (run_ms, sleep_ms)
PRESETS = {"exp1": (20.0, 150.0), "exp2": (40.0, 30.0)}


@dataclass
class EbizzyConfig(PeriodicConfig):
    # exp1 (20/150) | exp2 (40/30) | null: run_ms/sleep_ms as given
    preset: Optional[str] = tunable(None, choices=tuple(PRESETS))
    run_ms: Optional[float] = tunable(None, above=0)  # null: the preset's
    sleep_ms: Optional[float] = tunable(None, range=(0, None))

    @classmethod
    def check(cls, c, key: str) -> None:
        if c.get(f"{key}.preset") is None:
            for k in (f"{key}.run_ms", f"{key}.sleep_ms"):
                c.require(k, c.get(k) is not None, f"must be set when {key}.preset is null")
        super().check(c, key)


def resolve(cfg) -> dict:
    """The config (a mapping) with run_ms and sleep_ms taken from the preset
    where null."""
    cfg = dict(cfg)
    preset = cfg.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"workload.preset = {preset!r}: choose from {', '.join(PRESETS)}")
    for i, key in enumerate(("run_ms", "sleep_ms")):
        if cfg.get(key) is None:
            if preset is None:
                raise ValueError(f"workload.{key} must be set when workload.preset is null")
            cfg[key] = PRESETS[preset][i]
    return cfg


class EbizzyWorkload(PeriodicWorkload):
    CONFIG = EbizzyConfig

    @classmethod
    def thread_groups(cls, cfg: EbizzyConfig):
        """The periodic model's groups, run_ms and sleep_ms from the preset
        where null."""
        return super().thread_groups(from_mapping(EbizzyConfig, resolve(cfg), "workload"))


WORKLOAD = EbizzyWorkload
