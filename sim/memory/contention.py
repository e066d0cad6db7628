"""Co-runners on one socket: shared ways split by fill rate, DRAM bandwidth
shared and capped by MBA.

**Ways.**  The ways of the LLC are grouped into *segments*: maximal sets of
ways owned by the same tenants (a tenant owns way i when bit i of its CBM is
set).  A segment owned by one tenant is exclusive to it.  A segment of
``s`` ways owned by tenants O is split in proportion to their fill rates
(lines inserted per second, ``phi_t = rate_t * miss_t``): in steady state a
tenant's share of a shared region is the fraction of the insertions into it
that are its own::

    w_t = sum_{g owned by t} s_g * phi_t / sum_{u in O_g} phi_u

capped at what the tenant can use (``max_b D_b``; the rest is redistributed
to the other owners).  ``phi`` depends on ``w`` through the miss model
(:mod:`sim.memory.cachemodel`), so ``w`` is the damped fixed point of the two.

**Bandwidth.**  A tenant's DRAM traffic demand is
``d_t = phi_t * line * (1 + dirty_t)`` bytes/s (each fill reads a line and,
for a dirty working set, evicts one).  MBA caps it at ``c_t = mba_t * B``
(``mba_t`` the applied MBA fraction, B the socket's peak bandwidth); the
socket's controller shares B in proportion to demand, work-conserving::

    a_t = min(c_t, theta * d_t),   theta = max{ theta <= 1 : sum_t a_t <= B }

and a throttled tenant makes ``a_t / d_t`` of its unthrottled progress, so its
fill rate (and its weight in the shared ways) drops by the same factor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from sim.memory.cachemodel import miss_ratio, occupancy_lines
from sim.memory.llc import LLCGeometry


@dataclass
class Tenant:
    """One cache user on the socket: a workload (or a class's aggregate)."""
    name: str
    cbm: int                      # ways it may fill (resctrl L3 CBM of its class)
    demand: np.ndarray            # per-bucket touched lines (sim.memory.pages.bucket_demand)
    access_rate: float            # line references per second when unthrottled
    pattern: str = "random"
    dirty_fraction: float = 0.0   # fraction of evicted lines written back
    mba_fraction: float = 1.0     # applied MBA cap as a fraction of the socket's bandwidth


@dataclass(frozen=True)
class TenantResult:
    name: str
    ways: float                   # effective ways per bucket
    miss_ratio: float
    occupancy_bytes: float
    fill_rate: float              # lines/s actually inserted (after bandwidth throttling)
    bw_demand: float              # bytes/s it would move unthrottled
    bw_granted: float             # bytes/s it gets
    throttle: float               # bw_granted / bw_demand (1.0: not bandwidth-limited)
    segments: dict = field(default_factory=dict)


def share_bandwidth(demands: Sequence[float], caps: Sequence[float], total: float) -> np.ndarray:
    """``a_t = min(cap_t, theta * d_t)`` with the largest theta <= 1 such that sum a_t <= total."""
    d = np.asarray(demands, dtype=np.float64)
    c = np.minimum(np.asarray(caps, dtype=np.float64), d)
    if np.any(d < 0) or np.any(c < 0) or total < 0:
        raise ValueError("demands, caps and total must be >= 0")
    if c.sum() <= total:
        return c
    # theta in (0, 1): sum_t min(c_t, theta d_t) = total; piecewise linear in theta
    with np.errstate(divide="ignore", invalid="ignore"):
        brk = np.where(d > 0, c / d, np.inf)
    order = np.argsort(brk)
    capped = 0.0                          # sum of caps of tenants already at their cap
    slope = d.sum()                       # sum of d of tenants still proportional
    for t in order:
        theta = (total - capped) / slope if slope > 0 else 1.0
        if theta <= brk[t]:
            break
        capped += c[t]
        slope -= d[t]
    else:
        theta = 1.0
    return np.minimum(c, theta * d)


def _water_fill(size: float, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Split ``size`` in proportion to ``weights``, nobody above its cap."""
    alloc = np.zeros_like(weights)
    free = np.ones(len(weights), dtype=bool)
    left = size
    for _ in range(len(weights) + 1):
        w = np.where(free, weights, 0.0)
        if left <= 1e-12 or not free.any():
            break
        if w.sum() <= 0:
            w = free.astype(np.float64)
        give = left * w / w.sum()
        over = free & (alloc + give > caps)
        if not over.any():
            alloc += give
            break
        left -= (caps[over] - alloc[over]).sum()
        alloc[over] = caps[over]
        free &= ~over
    return alloc


def segments(cbms: Sequence[int], ways: int) -> list[tuple[tuple[int, ...], int]]:
    """[(owner tenant indices, number of ways)] for every owned way segment."""
    counts: dict[tuple[int, ...], int] = {}
    for i in range(ways):
        owners = tuple(t for t, m in enumerate(cbms) if (m >> i) & 1)
        if owners:
            counts[owners] = counts.get(owners, 0) + 1
    return sorted(counts.items(), key=lambda kv: (len(kv[0]), kv[0]))


def solve_socket(geometry: LLCGeometry, tenants: Sequence[Tenant], bandwidth: float,
                 iterations: int = 300, damping: float = 0.5, tol: float = 1e-6) -> list[TenantResult]:
    """Steady state of ``tenants`` sharing one socket's LLC and DRAM bandwidth."""
    if not tenants:
        return []
    for t in tenants:
        if t.cbm <= 0 or t.cbm >> geometry.ways:
            raise ValueError(f"tenant {t.name}: CBM {t.cbm:#x} outside the {geometry.ways} ways")
        if not 0.0 <= t.mba_fraction <= 1.0:
            raise ValueError(f"tenant {t.name}: mba_fraction must be in [0, 1]")
    n = len(tenants)
    segs = segments([t.cbm for t in tenants], geometry.ways)
    rate = np.array([float(t.access_rate) for t in tenants])
    need = np.array([float(np.max(t.demand)) if np.size(t.demand) else 0.0 for t in tenants])
    line = geometry.line_bytes
    dirty = np.array([1.0 + t.dirty_fraction for t in tenants])
    caps = np.array([t.mba_fraction for t in tenants]) * bandwidth

    def evaluate(phi):
        w = np.zeros(n)
        for owners, size in segs:
            o = np.array(owners)
            w[o] += _water_fill(float(size), np.maximum(phi[o], 1e-12 * (rate[o] + 1.0)),
                                np.maximum(need[o] - w[o], 0.0))
        mr = np.array([miss_ratio(t.demand, w[i], t.pattern) for i, t in enumerate(tenants)])
        bw_demand = rate * mr * line * dirty
        granted = share_bandwidth(bw_demand, caps, bandwidth)
        throttle = np.where(bw_demand > 0, granted / np.where(bw_demand > 0, bw_demand, 1.0), 1.0)
        return w, mr, bw_demand, granted, throttle

    phi = rate.copy()                     # start cold: everything misses
    w_prev = None
    for _ in range(iterations):
        w, mr, bw_demand, granted, throttle = evaluate(phi)
        phi = damping * phi + (1.0 - damping) * rate * mr * throttle
        if w_prev is not None and np.max(np.abs(w - w_prev)) < tol:
            break
        w_prev = w
    w, mr, bw_demand, granted, throttle = evaluate(phi)
    return [TenantResult(name=t.name, ways=float(w[i]), miss_ratio=float(mr[i]),
                         occupancy_bytes=occupancy_lines(t.demand, w[i]) * line,
                         fill_rate=float(rate[i] * mr[i] * throttle[i]),
                         bw_demand=float(bw_demand[i]), bw_granted=float(granted[i]),
                         throttle=float(throttle[i]),
                         segments={owners: size for owners, size in segs if i in owners})
            for i, t in enumerate(tenants)]
