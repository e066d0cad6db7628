"""``workload=azure2021``: the LAGS benchmark's trace-driven load (the LAGS
paper, §3).

The construction the paper publishes: cut each of the Azure
Functions Invocation Trace 2021's 119 functions into 5-minute segments,
keep each function's busiest segment, sort the functions by that load
into ten equal demand bands (Fig. 2), and build a host with ``functions``
functions by drawing equally from every band.  Each drawn function
replays its busiest segment, so its request rate over the run is its peak
rate.

Drawing.  Bands split the functions sorted by rate, ascending
(``np.array_split``: with 119 functions bands 0-8 hold 12 and the busiest
band 9 holds 11).  Draw ``i`` comes from band ``order[i % B]``, where
``order`` is a seeded permutation of the B bands, so every band gives
``n // B`` or ``n // B + 1`` functions and which bands give the extra one
is not biased towards light or heavy ones.  Within a band the functions
are taken in seeded random order, reshuffled when the band is used up, so
``n > 119`` reuses functions; every draw is a separate instance named
``func-<i>``.  Copies after the first replay from a seeded phase in
[0, 300 s): copies of a recorded segment would otherwise burst in lockstep.

Sources (``source``):

- ``synthetic`` (default): the real trace is not redistributed with the
  paper, so the population stands in for Fig. 2.  Function ``i`` of 119
  has peak rate ``PEAK_MEDIAN_RPS * exp(PEAK_SIGMA * z_i)``, ``z_i`` the
  standard normal quantile at ``(i + 0.5) / 119``: a lognormal with median
  60 req/s and shape 1.5, taken at fixed quantiles so the population does
  not depend on the seed.  That gives what the paper states: 81% of
  functions between 10 and 500 req/s ("tens or low hundreds"), band means
  from 5 to 1045 req/s, and the four busiest at 1000-3100 req/s
  ("thousands").  Arrivals are a stationary gamma renewal process at the
  function's rate whose inter-arrival coefficient of variation is
  ``burstiness`` (gamma shape 1/burstiness^2; 1 = Poisson, > 1 bursty:
  many short gaps and a few long ones).  The paper gives no burstiness;
  the default 2 is an assumption.
- ``azure2021``: the public trace ``AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt``
  (``source_path``: the file or its directory); CSV with header
  ``app,func,end_timestamp,duration`` (seconds; a function is an
  (app, func) pair).  An invocation starts at ``end_timestamp - duration``;
  segments are [300 k, 300 (k+1)) of start time; the 119 busiest
  functions (or all, if fewer) are kept and their busiest segment's start
  times are replayed exactly, looped every 300 s when the run is longer
  (``burstiness`` plays no part).
- ``azure2019``: the public Azure Functions Trace 2019
  (``source_path``: one ``invocations_per_function_md.anon.dNN.csv`` or the
  directory holding the days); columns ``HashOwner, HashApp, HashFunction,
  Trigger, 1 .. 1440`` (invocations in each minute of the day; a function
  is an (owner, app, function) triple).  Segments are minutes 1-5, 6-10, ...
  of each day; the 119 busiest functions (or all, if fewer) are kept and
  each replays its segment's five per-minute counts, looped, the ``c``
  arrivals of a minute spread over it by ``c + 1`` gamma(1/burstiness^2)
  spacings normalised to 60 s (burstiness 1: uniform, i.e. Poisson given
  the count).

With fewer than ten functions in a source, each function is its own band.

CPU demand per request (``demand_from``): the paper does not give it.
``service`` (default) samples ``service`` (det, exp,
lognormal) with mean ``mean_service_s``; det is the default because the
benchmark runs one fixed CPU-bound Fibonacci computation per request.
``trace`` (recorded sources only) uses the trace's durations
unscaled: 2021 the invocation's own duration, 2019 a draw from the
function's duration percentiles (``function_durations_percentiles.anon.dNN.csv``
of the segment's day, interpolated linearly between the 0/1/25/50/75/99/100th
percentiles, ms).  Those are wall-clock times that include waiting, so they
overstate CPU demand; durations under the traces' 1 ms resolution count
as 0.5 ms.

Calibrating ``mean_service_s``.  Fig. 3a: CFS throughput (requests within
1 s) on the e5-2430l peaks at density 9x, 108 functions, "the point at
which the total demand from multiplexed workloads exhausts the available
CPU capacity".  A CFS result may serve as a calibration point.
What a request costs the host on the lags experiments' rd-hashd path is its
Fibonacci work plus the dispatcher's work and the switches, so the size is
found by simulation (calibration/fit_azure_demand.py): CFS under
calibration=e5-2430l completes more requests within 1 s at 108 functions
than at 96 and at 120 for sizes 0.278-0.310 ms, and ``MEAN_SERVICE_S`` is
their geometric middle, 0.294 ms.  The Fibonacci work alone of 108
functions is then 5.8 of the host's 7.5 CPUs of work capacity (6 cores x
smt_throughput 1.25; the expected peak rate of one draw is the mean of the
ten band means, 183.47 req/s, so 108 functions offer 19,815 req/s).  The
first calibration, on the direct path, equated that offered work with the
capacity: 7.5 / 19,815 = 0.3785 ms.
"""
from __future__ import annotations

import csv
import math
import re
from collections import Counter
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from dataclasses import dataclass
from typing import Optional

from sim.config import MISSING, tunable
from sim.engine import RngStream
from sim.workloads.common import SERVICE_DISTRIBUTIONS
from sim.workloads.functions import GeneratedConfig
from sim.workloads.trace import TraceError, TraceWorkload, make_trace

SOURCES = ("synthetic", "azure2019", "azure2021")
DEMAND_FROM = ("service", "trace")

FUNCTIONS = 119            # functions in the Azure 2021 trace the paper segments
BANDS = 10
SEGMENT_S = 300.0
PEAK_MEDIAN_RPS = 60.0
PEAK_SIGMA = 1.5

MIN_DEMAND_S = 1e-9        # make_trace rejects 0 and the simulator counts whole ns
MIN_TRACE_DEMAND_S = 0.0005  # half the traces' 1 ms duration resolution

FILE_2021 = "AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt"
FORMAT_2021 = (f"the Azure Functions Invocation Trace 2021 ({FILE_2021}): CSV with header "
               "app,func,end_timestamp,duration (end_timestamp and duration in seconds)")
INVOCATIONS_2019 = re.compile(r"invocations_per_function_md\.anon\.d(\d+)\.csv")
FORMAT_2019 = ("the Azure Functions Trace 2019 invocation counts "
               "(invocations_per_function_md.anon.dNN.csv): CSV with header "
               "HashOwner,HashApp,HashFunction,Trigger,1,...,1440 (invocations per minute)")
PERCENTILES = (0, 1, 25, 50, 75, 99, 100)
FORMAT_2019_DURATIONS = ("the Azure Functions Trace 2019 durations "
                         "(function_durations_percentiles.anon.dNN.csv): CSV with header "
                         "HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum,"
                         + ",".join(f"percentile_Average_{p}" for p in PERCENTILES)
                         + " (milliseconds)")
MINUTES = [str(m) for m in range(1, 1441)]


def rng(seed: int, name: str) -> np.random.Generator:
    """The simulator's named streams, so a name draws the same numbers everywhere."""
    return RngStream(int(seed), name).gen


# --- the synthetic population and the band draw -------------------------------------

def population() -> np.ndarray:
    """Peak (busiest 5-minute segment) rates of the 119 synthetic functions,
    req/s, ascending."""
    nd = NormalDist()
    z = np.array([nd.inv_cdf((i + 0.5) / FUNCTIONS) for i in range(FUNCTIONS)])
    return PEAK_MEDIAN_RPS * np.exp(PEAK_SIGMA * z)


def bands(rates) -> list[np.ndarray]:
    """Indices of ``rates`` sorted ascending, split into min(10, n) equal bands."""
    order = np.argsort(np.asarray(rates), kind="stable")
    return np.array_split(order, min(BANDS, len(order)))


def draw(band_list: list[np.ndarray], n: int, gen: np.random.Generator) -> np.ndarray:
    """``n`` indices, round-robin over the bands in a seeded order; seeded
    order within a band, reshuffled each time the band is used up."""
    band_of = gen.permutation(len(band_list))[np.arange(n) % len(band_list)]
    picks = np.empty(n, dtype=np.int64)
    for b, band in enumerate(band_list):
        slots = np.flatnonzero(band_of == b)
        if len(slots):
            cycles = -(-len(slots) // len(band))
            picks[slots] = np.concatenate([gen.permutation(band)
                                           for _ in range(cycles)])[:len(slots)]
    return picks


def selection_rates(functions: int, seed: int) -> np.ndarray:
    """Peak rates of the synthetic functions a run with this seed draws."""
    rates = population()
    return rates[draw(bands(rates), functions, rng(seed, "workload/bands"))]


def offered_load_cpus(functions: int, mean_service_s: float) -> float:
    """Mean offered CPU load of ``functions`` synthetic functions, over the
    seeded draw: every band gives functions/B draws on average."""
    rates = population()
    band_means = [rates[b].mean() for b in bands(rates)]
    return functions / len(band_means) * sum(band_means) * mean_service_s


# The default demand per request (module docstring; azure2021.yaml)
MEAN_SERVICE_S = 0.000294


# --- arrival processes and service demand ---------------------------------------------

def burst_arrivals(rate: float, window_s: float, burstiness: float,
                   gen: np.random.Generator) -> np.ndarray:
    """Arrival times in [0, window_s) of a stationary gamma renewal process
    with mean rate ``rate`` and inter-arrival CV ``burstiness``."""
    if rate <= 0:
        return np.empty(0)
    shape, scale = 1.0 / burstiness ** 2, burstiness ** 2 / rate
    # Stationary start: the time to the first arrival is the residual of a
    # length-biased gap, U x gamma(shape + 1).
    first = gen.uniform() * gen.gamma(shape + 1.0, scale)
    expected = rate * window_s
    batch = int(expected + 6.0 * burstiness * math.sqrt(expected) + 16)
    times = first + np.concatenate(([0.0], np.cumsum(gen.gamma(shape, scale, batch))))
    while times[-1] < window_s:
        times = np.concatenate((times, times[-1] + np.cumsum(gen.gamma(shape, scale, batch))))
    return times[times < window_s]


def spread_counts(counts: np.ndarray, width_s: float, burstiness: float,
                  gen: np.random.Generator) -> np.ndarray:
    """Arrival times for ``counts[j]`` arrivals in [j w, (j + 1) w): c + 1
    gamma(1/burstiness^2) spacings per slot, normalised to the slot."""
    counts = np.asarray(counts, dtype=np.int64)
    sizes = counts + 1
    slot = np.repeat(np.arange(len(counts)), sizes)
    gaps = gen.gamma(1.0 / burstiness ** 2, 1.0, int(sizes.sum()))
    ends = np.cumsum(sizes) - 1
    cum = np.cumsum(gaps)
    before = np.concatenate(([0.0], cum[ends[:-1]]))
    pos = (cum - before[slot]) / (cum[ends] - before)[slot]
    last = np.zeros(len(slot), dtype=bool)
    last[ends] = True
    return ((slot + pos) * width_s)[~last]


def service_demands(count: int, kind: str, mean_s: float, sigma: float,
                    gen: np.random.Generator) -> np.ndarray:
    if kind == "det":
        demand = np.full(count, mean_s)
    elif kind == "exp":
        demand = gen.exponential(mean_s, count)
    elif kind == "lognormal":
        demand = mean_s * np.exp(sigma * gen.standard_normal(count) - 0.5 * sigma * sigma)
    else:
        raise ValueError(f"service = {kind!r}: choose from exp, det, lognormal")
    return np.maximum(demand, MIN_DEMAND_S)


class Synthetic:
    """A function with a constant mean rate and burst-process arrivals."""

    def __init__(self, rate_rps: float):
        self.rate_rps = float(rate_rps)

    def replay(self, window_s, burstiness, gen):
        return burst_arrivals(self.rate_rps, window_s, burstiness, gen), None


class RecordedInvocations:
    """A 2021-trace function: its busiest segment's start offsets and
    durations, looped every SEGMENT_S."""

    def __init__(self, key: str, offsets_s: np.ndarray, durations_s: np.ndarray):
        order = np.argsort(offsets_s, kind="stable")
        self.key = key
        self.offsets_s, self.durations_s = offsets_s[order], durations_s[order]
        self.rate_rps = len(offsets_s) / SEGMENT_S

    def replay(self, window_s, burstiness, gen):
        loops = max(1, math.ceil(window_s / SEGMENT_S))
        times = (self.offsets_s[None, :] + SEGMENT_S * np.arange(loops)[:, None]).ravel()
        keep = times < window_s
        return times[keep], np.tile(self.durations_s, loops)[keep]


class RecordedCounts:
    """A 2019-trace function: its busiest segment's five per-minute counts
    (looped) and optionally its duration percentiles (ms)."""

    def __init__(self, key: str, day: int, minute_counts: np.ndarray,
                 percentiles_ms: np.ndarray | None = None):
        self.key, self.day = key, day
        self.minute_counts = np.asarray(minute_counts, dtype=np.int64)
        self.percentiles_ms = percentiles_ms
        self.rate_rps = float(self.minute_counts.sum()) / SEGMENT_S

    def replay(self, window_s, burstiness, gen):
        minutes = math.ceil(window_s / 60.0)
        counts = np.resize(self.minute_counts, minutes)
        times = spread_counts(counts, 60.0, burstiness, gen)
        times = times[times < window_s]
        if self.percentiles_ms is None:
            return times, None
        ms = np.interp(gen.uniform(0.0, 100.0, len(times)), PERCENTILES,
                       np.sort(self.percentiles_ms))
        return times, np.maximum(ms / 1000.0, MIN_TRACE_DEMAND_S)


# --- building the trace ---------------------------------------------------------------

@dataclass
class Azure2021Config(GeneratedConfig):
    service: str = tunable("det", choices=SERVICE_DISTRIBUTIONS)
    mean_service_s: float = tunable(MEAN_SERVICE_S, above=0)
    source: str = tunable("synthetic", choices=SOURCES)
    # the public trace's file or directory (source azure2019 or azure2021)
    source_path: Optional[str] = None
    demand_from: str = tunable("service", choices=DEMAND_FROM)

    @classmethod
    def check(cls, c, key: str) -> None:
        super().check(c, key)
        source = c.get(f"{key}.source")
        if source == "synthetic":
            c.require(f"{key}.demand_from", c.get(f"{key}.demand_from") != "trace",
                      f"needs a recorded trace ({key}.source = azure2019 or azure2021)")
        elif source in SOURCES:
            c.require(f"{key}.source_path", bool(c.get(f"{key}.source_path")),
                      f"must name the trace file or directory when {key}.source = {source}")


def generate(wcfg: GeneratedConfig, seed: int, duration_s: float) -> pa.Table:
    """The invocation trace of an ``azure2021`` workload config over [0, duration_s)."""
    source = wcfg.source
    demand_from = wcfg.demand_from
    if source == "synthetic":
        if demand_from == "trace":
            raise ValueError("workload.demand_from = trace needs a recorded source "
                             "(workload.source = azure2019 or azure2021)")
        functions = [Synthetic(r) for r in population()]
    elif source == "azure2021":
        functions = load_azure2021(wcfg.source_path)
    elif source == "azure2019":
        functions = load_azure2019(wcfg.source_path, durations=demand_from == "trace")
    else:
        raise ValueError(f"workload.source = {source!r}: choose from {', '.join(SOURCES)}")
    picks = draw(bands([f.rate_rps for f in functions]), wcfg.functions,
                 rng(seed, "workload/bands"))
    return build_trace(functions, picks, wcfg, seed, duration_s,
                       float(wcfg.mean_service_s), demand_from)


def build_trace(functions, picks, wcfg: GeneratedConfig, seed: int, duration_s: float,
                mean_service_s: float, demand_from: str = "service") -> pa.Table:
    """Instance ``i`` (``func-<i>``) replays ``functions[picks[i]]``."""
    burstiness = float(wcfg.burstiness)
    names, times, demands = [], [], []
    copies: Counter = Counter()
    for i, p in enumerate(picks):
        name = f"func-{i}"
        gen = rng(seed, f"workload/{name}/arrivals")
        phase = gen.uniform(0.0, SEGMENT_S) if copies[p] else 0.0
        copies[p] += 1
        t, recorded = functions[p].replay(duration_s + phase, burstiness, gen)
        keep = t >= phase
        t = t[keep] - phase
        if demand_from == "trace":
            d = recorded[keep]
        else:
            d = service_demands(len(t), wcfg.service, mean_service_s,
                                float(wcfg.service_sigma),
                                rng(seed, f"workload/{name}/service"))
        names.append(np.full(len(t), name, dtype=object))
        times.append(t)
        demands.append(d)
    name, t, d = np.concatenate(names), np.concatenate(times), np.concatenate(demands)
    order = np.argsort(t, kind="stable")
    return make_trace(name[order], t[order], d[order],
                      np.full(len(t), wcfg.threads_per_request))


# --- loaders for the public traces ----------------------------------------------------

def load_azure2021(path) -> list[RecordedInvocations]:
    """The 119 busiest functions of the 2021 trace (or all, if fewer),
    ascending by busiest-segment load."""
    path = Path(path)
    if path.is_dir():
        path = path / FILE_2021
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist; expected {FORMAT_2021}")
    ids: dict[str, int] = {}
    fids, starts, durations = [], [], []
    kinds = {"app": "name", "func": "name", "end_timestamp": "number", "duration": "number"}
    for batch in csv_batches(path, FORMAT_2021, kinds):
        key = pc.binary_join_element_wise(batch.column("app"), batch.column("func"), "/")
        encoded = key.dictionary_encode()
        lookup = np.array([ids.setdefault(k, len(ids)) for k in encoded.dictionary.to_pylist()],
                          dtype=np.int64)
        fids.append(lookup[encoded.indices.to_numpy(zero_copy_only=False)])
        duration = batch.column("duration").to_numpy(zero_copy_only=False)
        starts.append(batch.column("end_timestamp").to_numpy(zero_copy_only=False) - duration)
        durations.append(duration)
    if not ids:
        raise TraceError(f"{path}: no invocations; expected {FORMAT_2021}")
    fid, start, duration = (np.concatenate(a) for a in (fids, starts, durations))
    segment = np.floor(start / SEGMENT_S).astype(np.int64)
    first_segment = segment.min()
    span = segment.max() - first_segment + 1
    # one sort groups the invocations by (function, segment)
    order = np.argsort(fid * span + (segment - first_segment), kind="stable")
    pairs, begin, counts = np.unique((fid * span + (segment - first_segment))[order],
                                     return_index=True, return_counts=True)
    owner = pairs // span
    # the busiest segment of each function; the earliest one on a tie
    best = np.lexsort((pairs, -counts, owner))
    best = best[np.concatenate(([True], np.diff(owner[best]) != 0))]
    keys = list(ids)
    kept = sorted(best, key=lambda j: (-counts[j], keys[owner[j]]))[:FUNCTIONS]
    functions = []
    for j in kept:
        rows = order[begin[j]:begin[j] + counts[j]]
        functions.append(RecordedInvocations(
            keys[owner[j]], start[rows] - segment[rows[0]] * SEGMENT_S,
            np.maximum(duration[rows], MIN_TRACE_DEMAND_S)))
    return sorted(functions, key=lambda fn: (fn.rate_rps, fn.key))


def load_azure2019(path, durations: bool = False) -> list[RecordedCounts]:
    """The 119 busiest functions of the 2019 trace (or all, if fewer),
    ascending by busiest-segment load; with ``durations``, each with the
    duration percentiles of its busiest segment's day."""
    files = days_2019(Path(path))
    best: dict[str, tuple[int, int, np.ndarray]] = {}   # key -> (load, day, minute counts)
    kinds = {"HashOwner": "name", "HashApp": "name", "HashFunction": "name"}
    kinds.update((m, "count") for m in MINUTES)
    for day, file in files:
        for batch in csv_batches(file, FORMAT_2019, kinds):
            minutes = [batch.column(m).to_numpy(zero_copy_only=False) for m in MINUTES]
            segments = np.column_stack([np.sum(minutes[i:i + 5], axis=0, dtype=np.int64)
                                        for i in range(0, len(minutes), 5)])
            top = segments.argmax(axis=1)
            load = segments[np.arange(len(segments)), top]
            keys = keys_2019(batch)
            for row in np.flatnonzero(load > 0):
                key = keys[row]
                if key not in best or load[row] > best[key][0]:
                    first = 5 * top[row]
                    best[key] = (load[row], day, [minutes[first + k][row] for k in range(5)])
    if not best:
        raise TraceError(f"{files[0][1]}: no invocations; expected {FORMAT_2019}")
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:FUNCTIONS]
    kept = [RecordedCounts(key, day, counts) for key, (_, day, counts) in ranked]
    if durations:
        _attach_percentiles(kept, dict(files))
    return sorted(kept, key=lambda fn: (fn.rate_rps, fn.key))


def days_2019(path: Path) -> list[tuple[int, Path]]:
    if path.is_dir():
        files = [(int(m.group(1)), p) for p in path.iterdir()
                 if (m := INVOCATIONS_2019.fullmatch(p.name))]
        if not files:
            raise TraceError(f"{path} holds no invocations_per_function_md.anon.dNN.csv; "
                             f"expected {FORMAT_2019}")
        return sorted(files)
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist; expected {FORMAT_2019}")
    m = INVOCATIONS_2019.fullmatch(path.name)
    return [(int(m.group(1)) if m else 0, path)]


def keys_2019(batch) -> list[str]:
    return pc.binary_join_element_wise(batch.column("HashOwner"), batch.column("HashApp"),
                                       batch.column("HashFunction"), "/").to_pylist()


def _attach_percentiles(functions: list[RecordedCounts], files: dict[int, Path]) -> None:
    columns = [f"percentile_Average_{p}" for p in PERCENTILES]
    kinds = {"HashOwner": "name", "HashApp": "name", "HashFunction": "name"}
    kinds.update((c, "number") for c in columns)
    for day in sorted({fn.day for fn in functions}):
        invocations = files[day]
        path = invocations.with_name(f"function_durations_percentiles.anon.d{day:02d}.csv")
        if not path.is_file():
            raise TraceError(f"durations file {path} for {invocations} does not exist; "
                             f"expected {FORMAT_2019_DURATIONS}")
        found = {}
        for batch in csv_batches(path, FORMAT_2019_DURATIONS, kinds):
            values = np.column_stack([batch.column(c).to_numpy(zero_copy_only=False)
                                      for c in columns])
            found.update(zip(keys_2019(batch), values))
        for fn in functions:
            if fn.day != day:
                continue
            if fn.key not in found:
                raise TraceError(f"{path}: no row for function {fn.key}, whose busiest "
                                 f"segment is on this day; expected {FORMAT_2019_DURATIONS}")
            fn.percentiles_ms = found[fn.key]


# --- checked CSV reading: pyarrow for speed, a line-by-line scan to name the bad row ----

_TYPES = {"name": pa.string(), "count": pa.int32(), "number": pa.float64()}
_RULES = {"name": "must not be empty", "count": "must be an integer >= 0",
          "number": "must be a finite number >= 0"}


def _valid(kind: str, values):
    """The rule for a column kind, on an array or on one parsed value."""
    if kind == "name":
        return values != ""
    return np.isfinite(values) & (values >= 0)


def csv_batches(path: Path, fmt: str, kinds: dict[str, str]):
    """Record batches of the ``kinds`` columns of a CSV, every value checked;
    a problem raises TraceError naming the file, line and value."""
    with path.open(newline="") as f:
        header = next(csv.reader(f), None) or []
    missing = [c for c in kinds if c not in header]
    if missing:
        raise TraceError(f"{path}, line 1: missing column(s) {', '.join(missing)}; "
                         f"expected {fmt}")
    convert = pacsv.ConvertOptions(column_types={c: _TYPES[k] for c, k in kinds.items()},
                                   include_columns=list(kinds), strings_can_be_null=False)
    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=1 << 24),
                                convert_options=convert)
        for batch in reader:
            for column, kind in kinds.items():
                array = batch.column(column)
                ok = not array.null_count and _valid(
                    kind, array.to_numpy(zero_copy_only=False)).all()
                if not ok:
                    _raise_first_bad_line(path, fmt, kinds, f"bad {column}")
            yield batch
    except pa.ArrowInvalid as err:
        _raise_first_bad_line(path, fmt, kinds, str(err))


def _raise_first_bad_line(path: Path, fmt: str, kinds: dict[str, str], why: str):
    parse = {"name": str, "count": int, "number": float}
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        index = {c: header.index(c) for c in kinds}
        for row in reader:
            if not row:
                continue
            where = f"{path}, line {reader.line_num}"
            if len(row) != len(header):
                raise TraceError(f"{where}: {len(row)} fields, expected {len(header)}")
            for column, kind in kinds.items():
                raw = row[index[column]]
                try:
                    value = parse[kind](raw)
                except ValueError:
                    raise TraceError(f"{where}: column {column} = {raw!r} is not "
                                     f"{'an integer' if kind == 'count' else 'a number'}") \
                        from None
                if not _valid(kind, value):
                    raise TraceError(f"{where}: column {column} = {raw!r} {_RULES[kind]}")
    raise TraceError(f"{path}: {why}; expected {fmt}")


class Azure2021Workload(TraceWorkload):
    CONFIG = Azure2021Config
    generate_trace = staticmethod(generate)


WORKLOAD = Azure2021Workload
