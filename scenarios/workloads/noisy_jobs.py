"""``workload=noisy_jobs``: the job stream of the noisy-neighbor thesis's
evaluation (seed 004 §5.1, Table 5.1; notes/noisy-neighbor-004.md §10).

Common to its three load scenarios: inter-arrival times Normal(5 s, 2 s),
job lengths Normal(140 s, 30 s) with a minimum of 30 s, 1.5 cores per job on
average, 75% of jobs moderately and 25% highly sensitive to LLC/memory
bandwidth, a 1-hour horizon.  The scenarios differ only in the share of
priority jobs (``scenario``):

| scenario | priority share | RDT demand of priority jobs |
|---|---|---|
| ``low_demand`` | 10% | well below what the host has |
| ``high_utilization`` | 20% | about what the host has |
| ``exceeding_demand`` | 50% | well beyond it |

Choices the thesis leaves open (each a key of the config):
- a negative Normal inter-arrival draw is taken as 0 (simultaneous
  submissions; P = 0.6% at 5 s / 2 s);
- a job's length is ``max(length_min_s, Normal(length_mean_s, length_sd_s))``;
- cores per job are drawn uniformly from ``cores`` ([1, 2]: mean 1.5);
- jobs whose draw falls below ``priority_share`` are priority jobs, below
  ``high_sensitivity_frac`` highly sensitive; each quantity has its own
  random stream, so the three scenarios of one seed share every job and
  differ only in the priority flags (the 10% are among the 20%, which are
  among the 50%).

Jobs are submitted over [0, duration_s); the trace's format and its replay
are in sim/workloads/noisy_jobs.py.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from scenarios.workloads.azure2021 import rng
from sim.workloads.noisy_jobs import make_jobs

# scenario -> share of priority jobs (Table 5.1)
SCENARIOS = {"low_demand": 0.10, "high_utilization": 0.20, "exceeding_demand": 0.50}


def priority_share(wcfg) -> float:
    share = wcfg.get("priority_share")
    return SCENARIOS[wcfg["scenario"]] if share is None else float(share)


def generate(wcfg, seed: int, duration_s: float) -> pa.Table:
    mean, sd = float(wcfg["interarrival_mean_s"]), float(wcfg["interarrival_sd_s"])
    gaps_rng = rng(seed, "workload/jobs/arrivals")
    arrivals = np.empty(0)
    t = 0.0
    # draw in chunks until the horizon is passed; chunks continue one stream,
    # so the trace does not depend on the chunk size
    while t < duration_s:
        gaps = np.maximum(0.0, gaps_rng.normal(mean, sd, int(duration_s / mean) + 64))
        times = t + np.cumsum(gaps)
        arrivals = np.concatenate([arrivals, times])
        t = float(times[-1])
    arrivals = arrivals[arrivals < duration_s]
    n = len(arrivals)
    lengths = np.maximum(float(wcfg["length_min_s"]),
                         rng(seed, "workload/jobs/length").normal(
                             float(wcfg["length_mean_s"]), float(wcfg["length_sd_s"]), n))
    cores = rng(seed, "workload/jobs/cores").choice(np.asarray(list(wcfg["cores"]), int), n)
    high = rng(seed, "workload/jobs/sensitivity").uniform(size=n) < float(
        wcfg["high_sensitivity_frac"])
    priority = rng(seed, "workload/jobs/priority").uniform(size=n) < priority_share(wcfg)
    return make_jobs([f"job-{i:05d}" for i in range(n)], arrivals, lengths, cores,
                     np.where(high, "high", "moderate").tolist(), priority)
