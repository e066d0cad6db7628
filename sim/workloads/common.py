"""Pieces the workloads share: service-time sampling and cgroup settings."""
from __future__ import annotations

from sim.engine import NSEC_PER_SEC, RngStream
from sim.rq import MAX_SHARES, MIN_SHARES


def cgroup_shares(cfg) -> int:
    """cpu.shares (v1) wins when given; otherwise cpu.weight (v2) maps to
    shares as the kernel does: weight x 1024 / 100, rounded."""
    shares = cfg.get("cgroup_shares")
    if shares is not None:
        return max(MIN_SHARES, min(MAX_SHARES, int(shares)))
    weight = cfg.get("cgroup_weight")
    weight = 100 if weight is None else int(weight)
    return max(MIN_SHARES, (weight * 1024 + 50) // 100)


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
    """CPU demand per request: exp, det or lognormal with a given mean."""

    def __init__(self, kind: str, mean_s: float, sigma: float, rng: RngStream):
        if kind not in ("exp", "det", "lognormal"):
            raise ValueError(f"service = {kind!r}: choose from exp, det, lognormal")
        self.kind = kind
        self.mean_ns = mean_s * NSEC_PER_SEC
        self.sigma = sigma
        self.rng = rng

    def sample_ns(self) -> int:
        if self.kind == "exp":
            d = self.rng.exponential(self.mean_ns)
        elif self.kind == "det":
            d = self.mean_ns
        else:
            d = self.rng.lognormal(self.mean_ns, self.sigma)
        return max(1, int(d))
