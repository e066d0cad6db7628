"""Benchmark scenarios, composed from the shipped config tree so they track
the host presets and cost profiles."""
from __future__ import annotations

from omegaconf import OmegaConf

from scenarios.config import compose
from sim.workloads import generated, trace_for

MEAN_SERVICE_S = 0.010


def work_capacity(host) -> float:
    """CPU work the host can do per second, in lone-thread CPUs: cores x
    sockets x smt_throughput (SMT siblings share their core)."""
    return host.sockets * host.cores * host.smt_throughput


def poisson_cfg(host: str, functions: int, load: float, duration_s: float,
                seed: int = 1, scheduler: str = "cfs") -> dict:
    """``functions`` Poisson functions offering ``load`` x the host's work
    capacity in total (exp service, mean 10 ms, 256 KiB working set,
    ``scheduler`` with its default options, default cost model, no warmup)."""
    base = compose([f"host={host}"])
    rate_rps = load * work_capacity(base.host) / MEAN_SERVICE_S / functions
    cfg = compose([f"host={host}", "workload=poisson", f"scheduler={scheduler}",
                   "calibration=default", f"workload.functions={functions}",
                   f"workload.rate_rps={rate_rps!r}", f"workload.mean_service_s={MEAN_SERVICE_S}",
                   "workload.service=exp", "workload.working_set_kb=256",
                   f"duration_s={duration_s}", "warmup_s=0", f"seed={seed}"])
    return OmegaConf.to_container(cfg, resolve=True)


def dense() -> dict:
    """The core-simulator issue's dense benchmark: e5-2430l (12 hardware
    threads, 7.5 lone-thread CPUs of work), 228 functions at 1.2 x
    capacity, 30 simulated seconds."""
    return poisson_cfg("e5-2430l", 228, 1.2, 30.0)


def small() -> dict:
    """e5-2430l, 36 functions at 60 % load, 10 simulated seconds."""
    return poisson_cfg("e5-2430l", 36, 0.6, 10.0)


def small_lags() -> dict:
    """``small`` under CFS-LAGS (compiled as a subclass of CFS, with its own
    per-event work: Load Credit upkeep, credit ordering, placement, pulls)."""
    return poisson_cfg("e5-2430l", 36, 0.6, 10.0, scheduler="lags")


def azure_lags() -> dict:
    """The LAGS paper's dense host under CFS-LAGS: e5-2430l with its fitted
    cost profile, azure2021 at 168 functions (14x density), 10 simulated
    seconds after 1 s of warm-up.  Requests are short (~0.4 ms) and arrive
    at ~18,000/s, so thousands of threads queue: where the balancer's credit
    pull once scanned every queued task of its span.  A thread per request
    (``request_path=direct``), as when the baseline was recorded; the
    experiment itself now runs rd-hashd's path (BASELINE.md has both)."""
    cfg = compose(["experiment=lags_fig3", "workload=azure2021", "workload.functions=168",
                   "scheduler=lags", "duration_s=10", "warmup_s=1", "seed=0",
                   "workload.request_path=direct"])
    return OmegaConf.to_container(cfg, resolve=True)


def small_traced() -> dict:
    """``small`` recording its schedule (trace=sched, docs/tracing.md)."""
    return {**small(), "trace": {"name": "sched", "max_events": 10**8}}


def dense_traced() -> dict:
    """``dense`` recording its schedule."""
    return {**dense(), "trace": {"name": "sched", "max_events": 10**8}}


def overload(scheduler: str = "cfs") -> dict:
    """The speed issue's dense scenario: e5-2430l, 228 Poisson functions
    at 6.3 req/s of 10 ms (14.4 CPUs of work offered to 7.5: the backlog
    grows), seed 3, 20 simulated s after 2 s of warm-up, under
    ``scheduler`` with the default cost model."""
    cfg = compose(["host=e5-2430l", "calibration=default", "workload=poisson",
                   "workload.functions=228", "workload.rate_rps=6.3",
                   "workload.mean_service_s=0.01", "seed=3", "duration_s=20", "warmup_s=2",
                   f"scheduler={scheduler}"])
    return OmegaConf.to_container(cfg, resolve=True)


def fig3_point(scheduler: str = "cfs") -> dict:
    """The largest point of the LAGS Fig. 3 grid (``experiment=lags_fig3``,
    which the speed issue times whole): azure2021 at 228 functions through
    rd-hashd's request path, seed 0, under ``scheduler``, the experiment's
    30 s after 5 s."""
    cfg = compose(["experiment=lags_fig3", "workload=azure2021", "workload.functions=228",
                   f"scheduler={scheduler}", "seed=0"])
    return OmegaConf.to_container(cfg, resolve=True)


def drawn_trace(cfg: dict):
    """The trace a generated workload replays, drawn once before any timed
    or counted run, as a sweep draws it before running; None for the
    others (they read a file or have none)."""
    return trace_for(cfg) if cfg["workload"]["name"] in generated() else None


def tiny() -> dict:
    """this-vm (2 CPUs), 4 functions at 60 % load, 5 simulated seconds."""
    return poisson_cfg("this-vm", 4, 0.6, 5.0)


SCENARIOS = {"dense": dense, "azure_lags": azure_lags, "small": small, "small_lags": small_lags,
             "tiny": tiny, "small_traced": small_traced, "dense_traced": dense_traced}
