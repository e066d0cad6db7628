"""Pieces the workloads share: service-time sampling and cgroup settings."""
from __future__ import annotations

from sim.bandwidth import DEFAULT_CFS_PERIOD, NSEC_PER_USEC, parse_cpu_max
from sim.engine import NSEC_PER_SEC, RngStream
from sim.rq import MAX_SHARES, MIN_SHARES
from sim.task import BURST_EXIT, Request


def cgroup_shares(cfg) -> int:
    """cpu.shares (v1) wins when given; otherwise cpu.weight (v2) maps to
    shares as the kernel does: weight x 1024 / 100, rounded."""
    shares = cfg.get("cgroup_shares")
    if shares is not None:
        return max(MIN_SHARES, min(MAX_SHARES, int(shares)))
    weight = cfg.get("cgroup_weight")
    weight = 100 if weight is None else int(weight)
    return max(MIN_SHARES, (weight * 1024 + 50) // 100)


# the keys that set a cgroup's cpu.max (v1 spelling, then v2)
BANDWIDTH_KEYS = ("quota_us", "period_us", "burst_us", "cpu_max", "cpu_max_burst")


def cgroup_bandwidth(cfg) -> tuple[int | None, int, int] | None:
    """cpu.max of a cgroup config as (quota_us, period_us, burst_us), quota
    None for no limit; None if the config sets no limit at all.  cgroup v2
    ``cpu_max`` ("max 100000", "15000 100000") and ``cpu_max_burst``, or
    v1 ``quota_us`` (cpu.cfs_quota_us; -1 is no limit), ``period_us``
    (default 100000) and ``burst_us`` (default 0)."""
    period = cfg.get("period_us")
    period = DEFAULT_CFS_PERIOD // NSEC_PER_USEC if period is None else int(period)
    if cfg.get("cpu_max") is not None:
        quota, period = parse_cpu_max(cfg["cpu_max"], period)
        burst = cfg.get("cpu_max_burst")
    elif cfg.get("quota_us") is not None:
        quota = int(cfg["quota_us"])
        burst = cfg.get("burst_us")
    else:
        return None
    return (None if quota == -1 else quota), period, int(burst or 0)


def apply_cgroup_bandwidth(machine, tg, cfg) -> None:
    """Write the cgroup's cpu.max if its config sets one."""
    bandwidth = cgroup_bandwidth(cfg)
    if bandwidth is not None:
        machine.set_cfs_bandwidth(tg, *bandwidth)


def parse_cpuset(spec) -> frozenset[int] | None:
    """cpuset.cpus: "0-3,6" or a list of CPU numbers."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, int):
        return frozenset([spec])
    if not isinstance(spec, str):
        return frozenset(int(c) for c in spec)
    cpus = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


class ServiceTime:
    """CPU demand per request: exp, det or lognormal with a given mean, or
    a discrete ``mix`` of demands (``mix_s``) with probabilities ``mix_p``."""

    def __init__(self, kind: str, mean_s: float, sigma: float, rng: RngStream,
                 mix_s=None, mix_p=None):
        if kind not in ("exp", "det", "lognormal", "mix"):
            raise ValueError(f"service = {kind!r}: choose from exp, det, lognormal, mix")
        self.kind = kind
        self.mean_ns = mean_s * NSEC_PER_SEC
        self.sigma = sigma
        self.rng = rng
        if kind == "mix":
            if not mix_s or len(mix_s) != len(mix_p or ()) or abs(sum(mix_p) - 1) > 1e-9:
                raise ValueError("service = mix needs mix_s and mix_p of equal length, "
                                 "mix_p summing to 1")
            self.mix_ns = [s * NSEC_PER_SEC for s in mix_s]
            self.mix_cdf = [sum(mix_p[:i + 1]) for i in range(len(mix_p))]
            self.mean_ns = sum(s * p for s, p in zip(self.mix_ns, mix_p))

    def sample_ns(self) -> int:
        if self.kind == "exp":
            d = self.rng.exponential(self.mean_ns)
        elif self.kind == "det":
            d = self.mean_ns
        elif self.kind == "mix":
            u = self.rng.uniform()
            d = next((s for s, c in zip(self.mix_ns, self.mix_cdf) if u < c), self.mix_ns[-1])
        else:
            d = self.rng.lognormal(self.mean_ns, self.sigma)
        return max(1, int(d))


def fork_threads(machine, req, tg, nice: int, ws_bytes: int, owner, hint: int) -> int:
    """Fork ``req.pending`` threads of ``req`` in ``tg``, the demand split
    evenly (divmod: the first takes the remainder), each placed by fork
    balancing from where the previous one went; returns the last one's CPU."""
    share, extra = divmod(req.demand, req.pending)
    for j in range(req.pending):
        t = machine.new_task(req.function, tg, nice, max(1, share + (extra if j == 0 else 0)),
                             ws_bytes, owner, req)
        machine.wake_up_new_task(t, hint)
        hint = t.cpu
    return hint


class ForkJoin:
    """Requests served by ``k`` threads forked at arrival (the demand split
    evenly); the request ends when its last thread exits.  Users set
    ``machine``, ``engine``, ``recorder``, ``nice`` and ``ws_bytes``, and
    ``path`` for a request path other than direct (sim/workloads/request_path.py)."""

    path = None   # request_path.build(cfg, self): None is the direct path

    def fork_request(self, name: str, tg, demand: int, k: int, hint: int,
                     arrival: int | None = None) -> int:
        """Fork the request's threads, each placed by fork balancing from
        where the previous one went; returns the last thread's CPU.
        ``arrival`` (default now) is when the request arrived, if it waited
        before being started."""
        req = Request(name, tg.name, self.engine.now if arrival is None else arrival, demand)
        self.recorder.request_arrived(req)
        req.pending = k
        if self.path is not None:
            return self.path.start(req, tg, hint)
        return fork_threads(self.machine, req, tg, self.nice, self.ws_bytes, self, hint)

    def burst_done(self, task):
        req = task.request
        req.pending -= 1
        if req.pending == 0:
            req.end = self.engine.now
            self.request_done(req)
        return BURST_EXIT

    def request_done(self, req) -> None:
        self.recorder.request_done(req)
