"""``workload=azure2019``: the cluster trace of the LAGS case study (the
LAGS paper, §5.3): "a downscaled Azure Functions Trace 2019 ... proportionally
scaled to fit within this cluster size, preserving the original temporal
distribution", about 800 containers.

Each of ``functions`` functions (``fn-<i>``) is a Knative service whose
pods the cluster's control plane places and scales (backends/cluster).  The
trace gives each function a count of invocations per trace minute; the run
replays ``duration_s`` seconds of it, one trace minute per ``minute_s``
simulated seconds (60: real time; smaller compresses the day, keeping its
shape), starting at ``start_minute`` (null: the window of the day with the
largest total count, the peak the paper sized the cluster for; for the
synthetic source, the largest expected count).  The
arrivals of a minute are spread over it by ``c + 1`` gamma(1/burstiness^2)
spacings (azure2021.spread_counts; burstiness 1 is Poisson given the count).

Sources (``source``):

- ``synthetic`` (default): the 2019 trace's published shape (Shahrad et al.,
  ATC 2020): per-function mean rates spanning orders of magnitude
  (lognormal, median ``RATE_MEDIAN_RPS``, shape ``RATE_SIGMA``: most
  functions are invoked a few times a minute or less, a few hundreds of
  times a second) and a diurnal cycle (aggregate rate ``1 + DIURNAL_AMPLITUDE
  x sin`` over the day, peaking at ``DIURNAL_PEAK_MINUTE``, each function's
  phase jittered by up to ``PHASE_JITTER_MIN`` minutes); per-minute counts
  are Poisson.  These shape constants are assumptions, not fitted: the
  public trace is not redistributed with the paper.
- ``azure2019``: the public trace (``source_path``: one
  ``invocations_per_function_md.anon.dNN.csv`` or the directory holding the
  days; the first day is used); ``functions`` functions with at least one
  invocation that day are sampled uniformly (seeded) and replay their own
  per-minute counts.

Downscaling (both sources): the counts are scaled by one factor so that the
busiest minute of the replayed window offers ``peak_cores`` CPUs of demand
(count x ``mean_service_s`` / ``minute_s`` summed over functions); scaled
counts are ``floor(k c)`` plus a Bernoulli(``k c - floor(k c)``) draw.  The
paper states the trace's actual peak use, "about 60 cores", so that
is the default: a description of the workload, which the cluster results
(node counts, perceived utilisation) are then predicted from, never fitted
to.  CPU demand per request: ``service`` with mean ``mean_service_s``
(the paper's function classifies an image with PyTorch; it gives no
demand, the default 100 ms is an assumption).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from dataclasses import dataclass
from typing import Optional

from sim.config import MISSING, tunable
from sim.workloads.azure2021 import (FORMAT_2019, MINUTES, csv_batches, days_2019, keys_2019,
                                     rng, service_demands, spread_counts)
from sim.workloads.common import SERVICE_DISTRIBUTIONS
from sim.workloads.functions import GeneratedConfig
from sim.workloads.trace import TraceError, TraceWorkload, make_trace

SOURCES = ("synthetic", "azure2019")
DAY_MINUTES = 1440
RATE_MEDIAN_RPS = 0.05
RATE_SIGMA = 2.0
DIURNAL_AMPLITUDE = 0.5
DIURNAL_PEAK_MINUTE = 840      # 14:00
PHASE_JITTER_MIN = 120


@dataclass
class Azure2019Config(GeneratedConfig):
    service: str = tunable("lognormal", choices=SERVICE_DISTRIBUTIONS)
    source: str = tunable("synthetic", choices=SOURCES)
    # invocations_per_function_md.anon.dNN.csv or its directory
    source_path: Optional[str] = None
    # simulated seconds per trace minute (60: real time)
    minute_s: float = tunable(60.0, above=0)
    # first trace minute replayed; null: the busiest window
    start_minute: Optional[int] = tunable(None, range=(0, DAY_MINUTES - 1))
    # the replayed window's busiest minute offers this many CPUs
    peak_cores: float = tunable(MISSING, above=0)

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        if c.get(f"{key}.source") == "azure2019":
            c.require(f"{key}.source_path", bool(c.get(f"{key}.source_path")),
                      f"must name the trace file or directory when {key}.source = azure2019")


def minute_counts(wcfg: Azure2019Config, seed: int, minutes: int) -> np.ndarray:
    """Invocations per trace minute of the replayed window, ``functions`` x
    ``minutes``, before scaling, and the window's first minute."""
    n = wcfg.functions
    source = wcfg.source
    if source == "synthetic":
        gen = rng(seed, "workload/cluster/rates")
        rates = RATE_MEDIAN_RPS * np.exp(RATE_SIGMA * gen.standard_normal(n))
        phase = 2 * math.pi * gen.uniform(-PHASE_JITTER_MIN, PHASE_JITTER_MIN, n) / DAY_MINUTES
        day = 2 * math.pi * (np.arange(DAY_MINUTES) - DIURNAL_PEAK_MINUTE) / DAY_MINUTES
        # the expected total per minute, sum_i r_i (1 + A cos(day - phase_i)), by
        # cos(a - b) = cos a cos b + sin a sin b: O(n + minutes of a day), so
        # the busiest window is found without an n x 1440 matrix
        total = rates.sum() + DIURNAL_AMPLITUDE * (np.cos(day) * (rates * np.cos(phase)).sum()
                                                   + np.sin(day) * (rates * np.sin(phase)).sum())
        start = window(total, minutes, wcfg.start_minute)
        shape = 1.0 + DIURNAL_AMPLITUDE * np.cos(day[None, start:start + minutes]
                                                 - phase[:, None])
        return gen.poisson(rates[:, None] * 60.0 * shape), start
    if source == "azure2019":
        counts = _recorded_counts(wcfg.source_path, n, seed)
        start = window(counts.sum(axis=0), minutes, wcfg.start_minute)
        return counts[:, start:start + minutes], start
    raise ValueError(f"workload.source = {source!r}: choose from {', '.join(SOURCES)}")


def _recorded_counts(path, n: int, seed: int) -> np.ndarray:
    _, file = days_2019(_path(path))[0]
    kinds = {"HashOwner": "name", "HashApp": "name", "HashFunction": "name"}
    kinds.update((m, "count") for m in MINUTES)
    keys, rows = [], []
    for batch in csv_batches(file, FORMAT_2019, kinds):
        counts = np.column_stack([batch.column(m).to_numpy(zero_copy_only=False)
                                  for m in MINUTES]).astype(np.int64)
        used = counts.sum(axis=1) > 0
        keys += [k for k, u in zip(keys_2019(batch), used) if u]
        rows.append(counts[used])
    counts = np.concatenate(rows) if rows else np.empty((0, DAY_MINUTES), np.int64)
    if len(counts) < n:
        raise TraceError(f"{file}: {len(counts)} functions with invocations, fewer than "
                         f"workload.functions = {n}")
    # sample by key order, not file order, so a re-sorted file gives the same pick
    order = np.argsort(np.array(keys, dtype=object), kind="stable")
    pick = rng(seed, "workload/cluster/sample").choice(len(counts), n, replace=False)
    return counts[order[np.sort(pick)]]


def _path(path) -> Path:
    if path is None:
        raise ValueError("workload.source = azure2019 needs workload.source_path: an "
                         "invocations_per_function_md.anon.dNN.csv or its directory")
    return Path(path)


def window(per_minute: np.ndarray, minutes: int, start_minute) -> int:
    """First trace minute of the replayed window: ``start_minute``, or the
    window with the largest total of ``per_minute`` (1440 values)."""
    if start_minute is not None:
        start = int(start_minute)
        if not 0 <= start <= DAY_MINUTES - minutes:
            raise ValueError(f"workload.start_minute = {start}: must be in "
                             f"[0, {DAY_MINUTES - minutes}] for {minutes} replayed minutes")
        return start
    total = np.concatenate(([0], np.cumsum(per_minute)))
    sums = total[minutes:] - total[:-minutes]
    return int(np.argmax(sums))


def scale(counts: np.ndarray, k: float, gen: np.random.Generator) -> np.ndarray:
    whole = np.floor(k * counts)
    return (whole + (gen.uniform(size=counts.shape) < k * counts - whole)).astype(np.int64)


def generate(wcfg: Azure2019Config, seed: int, duration_s: float) -> pa.Table:
    """The invocation trace of an ``azure2019`` workload over [0, duration_s)."""
    minute_s = float(wcfg.minute_s)
    minutes = math.ceil(duration_s / minute_s)
    if minutes > DAY_MINUTES:
        raise ValueError(f"duration_s = {duration_s} replays {minutes} trace minutes at "
                         f"workload.minute_s = {minute_s}; a day has {DAY_MINUTES}")
    counts, start = minute_counts(wcfg, seed, minutes)
    mean_s = float(wcfg.mean_service_s)
    peak = counts.sum(axis=0).max() * mean_s / minute_s
    if peak <= 0:
        raise TraceError(f"the replayed trace minutes {start}..{start + minutes - 1} hold "
                         "no invocations")
    counts = scale(counts, float(wcfg.peak_cores) / peak, rng(seed, "workload/cluster/scale"))
    burstiness = float(wcfg.burstiness)
    names, times = [], []
    for i, row in enumerate(counts):
        t = spread_counts(row, minute_s, burstiness, rng(seed, f"workload/fn-{i}/arrivals"))
        t = t[t < duration_s]
        names.append(np.full(len(t), f"fn-{i}", dtype=object))
        times.append(t)
    name, t = np.concatenate(names), np.concatenate(times)
    order = np.argsort(t, kind="stable")
    demand = service_demands(len(t), wcfg.service, mean_s,
                             float(wcfg.service_sigma),
                             rng(seed, "workload/cluster/service"))
    return make_trace(name[order], t[order], demand,
                      np.full(len(t), wcfg.threads_per_request))


class Azure2019Workload(TraceWorkload):
    CONFIG = Azure2019Config
    generate_trace = staticmethod(generate)
    # the cluster case study's 800 Knative services: replayed by
    # cluster=kubernetes, not on one real host
    REAL_BACKEND = None


WORKLOAD = Azure2019Workload
