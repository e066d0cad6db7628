"""The memory model in a run: how fast a memory-profiled task progresses.

A cgroup may carry a :class:`MemoryProfile` (a workload's ``memory`` keys:
buffer, page size, access pattern, memory intensity, core CPI, MLP).  Its
tasks then run their CPU demand at a *speed* set by their LLC miss ratio and
the DRAM bandwidth they get; a cgroup without a profile runs at speed 1 and
the machine never consults this module for it (docs/memory.md).

**CPI model** (per thread, cycles per instruction; f the core clock)::

    stall/instr = r * ((1 - m) * L_llc + m * L_mem) / MLP        (cycles)
    CPI_u       = CPI_core + stall/instr                         (unthrottled)
    CPI         = CPI_u / theta                                  (bandwidth-limited)

with r = LLC references (L2 misses) per instruction, m the steady-state miss
ratio for the ways the cgroup effectively holds (sim.memory.cachemodel on the
profile's per-bucket demand, ways shared by fill rate as in
sim.memory.contention), L_llc / L_mem the LLC-hit and DRAM latencies in
cycles (host keys ``llc_latency_ns``, ``mem_latency_ns``, ``cpu_ghz``), and
theta <= 1 the fraction of its DRAM traffic demand the socket grants
(``share_bandwidth``: proportional, work-conserving, capped by MBA).  A
bandwidth-bound thread moves a fixed number of bytes per instruction, so its
instruction rate drops by theta.

**Demand and speed.**  A task's CPU demand is the time it needs *alone*: one
thread of its cgroup on an otherwise idle socket, in the root class (all ways,
full bandwidth), CPI_alone.  It progresses at ``speed = CPI_alone / CPI``.

**IPC and IPCE** (per cgroup, from cumulative counters like perf's):
``IPC = instructions / cycles``; ``IPCE = 1 - stall_cycles / cycles =
CPI_core / CPI`` (the thesis's Eq. 3.3-3.4 restricted to memory stalls, which
its §3.1.4 allows; bandwidth throttling counts as stall).  ``IPC relative to
alone`` = ``IPC / IPC_alone = speed``.

**Time.**  The co-runners of a socket and their activity change at every
context switch; the LLC integrates over them.  The model is re-solved every
``epoch_ns`` (default 50 ms) from each profiled cgroup's CPU time on each LLC
domain in the previous epoch (its CPU-equivalents, which scale its reference
rate), and whenever an RDT class or assignment changes.  Counters are
accumulated per epoch with the rates then in force.  Solutions are cached by
their (rounded) inputs.

**Refill.**  A cgroup whose ways on a domain shrink or move loses the lines
it held outside the ways it keeps; until it has fetched them again (one
extra miss each, at the rate its references find them) its miss ratio,
CPI and MBM traffic are above the steady state (``_lose_lines``,
docs/memory.md "Refill after a move").  Host key ``llc_refill: false``
leaves it out (an ablation): ways then change with no transient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from sim.memory.contention import _water_fill, segments, share_bandwidth
from sim.memory.llc import LLCGeometry, socket_bandwidth_bytes_per_s
from sim.memory.pages import Buffer, bucket_demand, parse_page_size
from sim.memory.resctrl import ROOT, Resctrl

EPOCH_NS = 50_000_000
# host keys of the CPI model and of the refill, and their defaults (docs/memory.md,
# "CPI model", "Refill after a move"); scenarios.schema.HostConfig takes them from here
HOST_DEFAULTS = {"cpu_ghz": 2.4, "mem_latency_ns": 90.0, "llc_latency_ns": 20.0,
                 "llc_refill": True}
PROFILE_KEYS = ("buffer_mb", "pages", "pattern", "stride_bytes", "refs_per_kinstr",
                "cpi_core", "mlp", "dirty_fraction", "layout_seed")
# fitted archetypes (written by ``python -m calibration.memory_profiles``; docs/memory.md,
# "Fitted profiles"), selected with ``memory: {archetype: <name>, ...overrides}``
ARCHETYPES_FILE = Path(__file__).with_name("archetypes.yaml")


@lru_cache(maxsize=1)
def archetypes() -> dict[str, dict]:
    """name -> entry (``memory``: the profile keys, ``threads``, ``fitted``, ``source``)."""
    import yaml
    with open(ARCHETYPES_FILE) as f:
        return dict(yaml.safe_load(f)["archetypes"])


def archetype_spec(name: str) -> dict:
    table = archetypes()
    if name not in table:
        raise ValueError(f"unknown memory archetype {name!r}: use one of {', '.join(sorted(table))}")
    return dict(table[name]["memory"])


@dataclass(frozen=True)
class MemoryProfile:
    """What a cgroup's threads do to memory (a workload's ``memory`` keys)."""
    buffer_mb: float
    pages: str = "4k"              # 4k | 2m | 1g (or none/thp/hugetlb-2m/hugetlb-1g)
    pattern: str = "random"        # random | sequential | stride
    stride_bytes: int = 4096
    refs_per_kinstr: float = 20.0  # LLC references (L2 misses) per 1000 instructions
    cpi_core: float = 0.5          # CPI with no LLC reference stalls
    mlp: float = 1.0               # memory-level parallelism (overlapped misses)
    dirty_fraction: float = 0.0    # evicted lines written back (1.0: read-modify-write)
    layout_seed: int = 0           # physical frame draw

    def __post_init__(self):
        parse_page_size(self.pages)
        if not self.buffer_mb > 0:
            raise ValueError(f"memory.buffer_mb must be > 0, not {self.buffer_mb}")
        if not self.refs_per_kinstr >= 0:
            raise ValueError(f"memory.refs_per_kinstr must be >= 0, not {self.refs_per_kinstr}")
        if not self.cpi_core > 0:
            raise ValueError(f"memory.cpi_core must be > 0, not {self.cpi_core}")
        if not self.mlp > 0:
            raise ValueError(f"memory.mlp must be > 0, not {self.mlp}")
        if not 0.0 <= self.dirty_fraction <= 1.0:
            raise ValueError(f"memory.dirty_fraction must be in [0, 1], not {self.dirty_fraction}")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> "MemoryProfile | None":
        if spec is None:
            return None
        spec = dict(spec)
        # the keys given next to an archetype override its fitted values
        name = spec.pop("archetype", None)
        if name is not None:
            spec = {**archetype_spec(str(name)), **{k: v for k, v in spec.items() if v is not None}}
        unknown = set(spec) - set(PROFILE_KEYS)
        if unknown:
            raise ValueError(f"unknown memory keys {sorted(unknown)}: use archetype, "
                             f"{', '.join(PROFILE_KEYS)}")
        return cls(**{k: v for k, v in spec.items() if v is not None})

    @property
    def buffer(self) -> Buffer:
        return Buffer.from_spec({"buffer_mb": self.buffer_mb, "pages": self.pages,
                                 "pattern": self.pattern, "stride_bytes": self.stride_bytes})


class MissCurve:
    """Miss ratio and occupancy as functions of (fractional) ways, from the
    histogram of a per-bucket demand (exact: the cachemodel formulas only
    depend on the multiset of D_b)."""

    def __init__(self, demand: np.ndarray, pattern: str):
        d = np.asarray(demand)
        k, c = np.unique(d[d > 0], return_counts=True)
        self.k = k.astype(np.float64)
        self.c = c.astype(np.float64)
        self.n = float((self.k * self.c).sum())
        self.max_d = float(self.k.max()) if len(self.k) else 0.0
        self.pattern = pattern

    def miss(self, w: float) -> float:
        if self.n == 0:
            return 0.0
        if self.pattern == "random":
            return float((self.c * np.maximum(self.k - w, 0.0)).sum() / self.n)
        return float((self.c * self.k)[self.k > w + 1e-9].sum() / self.n)

    def occupancy_lines(self, w: float) -> float:
        return float((self.c * np.minimum(self.k, w)).sum())


@dataclass
class HostParams:
    ghz: float
    mem_latency_ns: float
    llc_latency_ns: float
    bandwidth: float               # bytes/s per socket
    line: int = 64

    @classmethod
    def from_host(cls, host: Mapping[str, Any]) -> "HostParams":
        get = lambda k: float(host.get(k) if host.get(k) is not None else HOST_DEFAULTS[k])
        return cls(get("cpu_ghz"), get("mem_latency_ns"), get("llc_latency_ns"),
                   socket_bandwidth_bytes_per_s(host))


@dataclass
class TenantIn:
    key: Any
    profile: MemoryProfile
    curve: MissCurve
    cbm: int
    cpus: float                    # CPU-equivalents running on the socket
    mba_fraction: float = 1.0


@dataclass
class TenantOut:
    ways: float
    miss: float
    occupancy_bytes: float
    cpi: float                     # effective CPI (throttling included)
    cpi_u: float                   # unthrottled CPI
    throttle: float
    bw_granted: float              # bytes/s
    refs_per_s: float              # LLC references per second actually made


def cpi_unthrottled(p: MemoryProfile, m: float, hp: HostParams) -> float:
    r = p.refs_per_kinstr / 1000.0
    stall = r * ((1.0 - m) * hp.llc_latency_ns + m * hp.mem_latency_ns) * hp.ghz / p.mlp
    return p.cpi_core + stall


def solve(tenants: list[TenantIn], ways: int, hp: HostParams, iterations: int = 200,
          damping: float = 0.5, tol: float = 1e-6) -> list[TenantOut]:
    """Steady state of one LLC domain's co-runners (the fixed point of way
    shares by fill rate, miss ratio, CPI and bandwidth share)."""
    n = len(tenants)
    if n == 0:
        return []
    segs = segments([t.cbm for t in tenants], ways)
    need = np.array([t.curve.max_d for t in tenants])
    dirty = np.array([1.0 + t.profile.dirty_fraction for t in tenants])
    caps = np.array([t.mba_fraction for t in tenants]) * hp.bandwidth
    rpi = np.array([t.profile.refs_per_kinstr / 1000.0 for t in tenants])
    cpus = np.array([t.cpus for t in tenants])
    hz = hp.ghz * 1e9

    def evaluate(phi):
        w = np.zeros(n)
        for owners, size in segs:
            o = np.array(owners)
            w[o] += _water_fill(float(size), np.maximum(phi[o], 1e-12),
                                np.maximum(need[o] - w[o], 0.0))
        m = np.array([t.curve.miss(w[i]) for i, t in enumerate(tenants)])
        cpi_u = np.array([cpi_unthrottled(t.profile, m[i], hp) for i, t in enumerate(tenants)])
        rate = rpi * hz / cpi_u * cpus                       # references/s, unthrottled
        bw_demand = rate * m * hp.line * dirty
        granted = share_bandwidth(bw_demand, caps, hp.bandwidth)
        theta = np.where(bw_demand > 0, granted / np.where(bw_demand > 0, bw_demand, 1.0), 1.0)
        return w, m, cpi_u, rate, granted, theta

    phi = rpi * hz * cpus                                    # cold start: everything misses
    w_prev = None
    for _ in range(iterations):
        w, m, cpi_u, rate, granted, theta = evaluate(phi)
        phi = damping * phi + (1.0 - damping) * rate * m * theta
        if w_prev is not None and np.max(np.abs(w - w_prev)) < tol:
            break
        w_prev = w
    w, m, cpi_u, rate, granted, theta = evaluate(phi)
    theta = np.maximum(theta, 1e-9)
    return [TenantOut(float(w[i]), float(m[i]), t.curve.occupancy_lines(w[i]) * hp.line,
                      float(cpi_u[i] / theta[i]), float(cpi_u[i]), float(theta[i]),
                      float(granted[i]), float(rate[i] * theta[i]))
            for i, t in enumerate(tenants)]


@dataclass
class Counters:
    """Cumulative per-cgroup counters (what perf and the model report)."""
    instructions: float = 0.0
    cycles: float = 0.0
    stall_cycles: float = 0.0
    alone_cycles: float = 0.0      # cycles the same instructions take alone
    llc_refs: float = 0.0
    llc_misses: float = 0.0
    cpu_ns: int = 0
    above_target_ns: int = 0       # CPU time at speed >= target (IPC >= target x alone)
    mbm_bytes: float = 0.0         # DRAM traffic of its misses (fills + dirty write-backs)


@dataclass
class _Cg:
    tg: Any
    profile: MemoryProfile
    curve: MissCurve
    cpi_alone: float
    tag: str | None
    counters: Counters = field(default_factory=Counters)
    exec_seen: dict = field(default_factory=dict)        # domain -> exec ns seen
    rdt_class: str = ROOT
    usage_seen: int = 0


class MemorySystem:
    """Per-host memory state of a run: the resctrl filesystem (one L3 domain
    per LLC), the profiled cgroups, and the speeds of their tasks per domain.
    Created by ``Machine.memory_model()``; absent (None) in runs without
    memory profiles or RDT levers."""

    TARGET = 0.9                   # IPCE target relative to the best (alone) value

    def __init__(self, machine, host: Mapping[str, Any], epoch_ns: int = EPOCH_NS):
        self.machine = machine
        self.host = dict(host)
        self.geometry = LLCGeometry.from_host(host, hash_kind=str(host.get("llc_hash") or "auto"))
        self.hp = HostParams.from_host(host)
        self.resctrl = Resctrl.from_host(host)
        refill = host.get("llc_refill")
        self.refill = bool(HOST_DEFAULTS["llc_refill"] if refill is None else refill)
        self.epoch_ns = int(epoch_ns)
        topo = machine.topology
        self.domain_of_cpu = [c.llc for c in topo.cpus]
        self.domains = sorted(set(self.domain_of_cpu))
        self.cpus_of = {d: [c for c in range(topo.nr_cpus) if self.domain_of_cpu[c] == d]
                        for d in self.domains}
        self.cgroups: dict[Any, _Cg] = {}
        self.speed: dict[tuple, float] = {}              # (tg, domain) -> speed
        self.cpi: dict[tuple, float] = {}                # (tg, domain) -> effective CPI
        self.state: dict[tuple, TenantOut] = {}          # (tg, domain) -> last solution
        self._curves: dict[tuple, MissCurve] = {}
        self._cache: dict = {}
        self._alone: dict = {}
        self._last = 0
        self._armed = False
        self.warmup_ns: int | None = None     # set by scenarios.simulate.simulate
        self.occ_area = 0.0                                # sum occupancy_bytes x ns
        self.occ_time = 0                                  # sum ns of tenant-epochs
        self._at_warmup: dict | None = None
        self._ran: dict[tuple, int] = {}                   # (tg, domain) -> ns since the last solve
        self._sampled: dict = {}                           # tg -> (Counters, exec_seen) at the last sample
        self._cbm_seen: dict[tuple, int] = {}              # (tg, domain) -> CBM at its last solve
        self._refill: dict[tuple, tuple] = {}              # (tg, domain) -> (lines to refetch, rate)
        self._cold: set[tuple] = set()                      # (tg, domain) it moved to, not yet solved

    # ---- profiles -----------------------------------------------------------------------
    def curve(self, profile: MemoryProfile) -> MissCurve:
        key = (profile.buffer_mb, profile.pages, profile.pattern, profile.stride_bytes,
               profile.layout_seed)
        if key not in self._curves:
            demand = bucket_demand(self.geometry, profile.buffer, profile.layout_seed)
            self._curves[key] = MissCurve(demand, profile.pattern)
        return self._curves[key]

    def set_profile(self, tg, profile: MemoryProfile, tag: str | None = None) -> None:
        """Give cgroup ``tg`` a memory profile (``tag``: a label for the
        summary, e.g. ``priority`` / ``batch``)."""
        curve = self.curve(profile)
        alone = self._alone.get(profile)
        if alone is None:
            alone = self._alone[profile] = solve(
                [TenantIn(None, profile, curve, self.geometry_mask, 1.0)],
                self.geometry.ways, self.hp)[0].cpi
        self.cgroups[tg] = _Cg(tg, profile, curve, alone, tag)
        self._arm()

    @property
    def geometry_mask(self) -> int:
        return (1 << self.geometry.ways) - 1

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            eng = self.machine.engine
            self._last = eng.now
            eng.call_later(min(1_000_000, self.epoch_ns), self._epoch)

    # ---- the machine's hot-path read -----------------------------------------------------
    def task_speed(self, p, cpu: int) -> float:
        return self.speed.get((p.tg, self.domain_of_cpu[cpu]), 1.0)

    # ---- RDT ----------------------------------------------------------------------------
    def assign(self, tg, rdt_class: str) -> None:
        """Move a cgroup's tasks to an RDT class (``""``: the root group)."""
        self.resctrl.add_task(rdt_class, tg.name)
        cg = self.cgroups.get(tg)
        if cg is not None:
            cg.rdt_class = self.resctrl.group_of(tg.name)
        self.changed()

    def class_of(self, tg) -> str:
        return self.resctrl.group_of(tg.name)

    def domains_of(self, cpus) -> set[int]:
        """The LLC domains a CPU set (None: every CPU) spans."""
        if cpus is None:
            return set(self.domains)
        return {self.domain_of_cpu[c] for c in cpus}

    def moved(self, tg, old_domains: set[int]) -> None:
        """The cgroup's cpuset moved it (``old_domains``: where it could run
        before; the caller accounted its time there first, ``changed()``):
        on a domain it was not on, its first solve starts cold and it
        fetches its whole occupancy, as a class that moved refetches the
        lines it lost.  A cgroup that has not run yet warms up as usual."""
        if tg not in self.cgroups or not any(k[0] is tg for k in self._cbm_seen):
            return
        for d in self.domains_of(tg.cpus_allowed) - old_domains:
            self._cold.add((tg, d))

    def changed(self) -> None:
        """RDT state changed: account the epoch so far and re-solve now."""
        if self.cgroups:
            self._account_and_solve(reschedule=False)

    # ---- the epoch --------------------------------------------------------------------------
    def _epoch(self) -> None:
        self._account_and_solve(reschedule=True)

    def _account_and_solve(self, reschedule: bool) -> None:
        m = self.machine
        now = m.engine.now
        m.sync()
        dt = now - self._last
        self._last = now
        if self._at_warmup is None and self.warmup_ns is not None and now >= self.warmup_ns:
            self._at_warmup = {tg: Counters(**vars(cg.counters)) for tg, cg in self.cgroups.items()}
            self.occ_area, self.occ_time = 0.0, 0
        self._account()
        tenants: dict[int, list[TenantIn]] = {d: [] for d in self.domains}
        rc = self.resctrl
        ran_by = self._ran
        self._ran = {}
        # in cgroup order, as the solve cache's signatures expect
        for tg in self.cgroups:
            for d in self.domains:
                ran = ran_by.get((tg, d))
                if ran is None:
                    continue
                cls = rc.group_of(tg.name)
                cg = self.cgroups[tg]
                cpus = ran / dt if dt > 0 else 1.0
                cbm = rc.cbm(cls, d) if rc.info.has_cat else self.geometry_mask
                mba = rc.mba_fraction(cls, d) if rc.info.has_mba else 1.0
                tenants[d].append(TenantIn(tg, cg.profile, cg.curve, cbm, cpus, mba))
        if dt > 0 or not reschedule:
            self._solve(tenants, now)
        if reschedule:
            m.engine.call_later(self.epoch_ns, self._epoch)

    def _account(self) -> None:
        """Charge the CPU time every profiled cgroup ran since the last
        account to its counters, at the rates in force (the caller syncs the
        machine).  The time is also kept for the next solve, so accounting
        in between (an interval sample) does not change what is solved."""
        ghz = self.hp.ghz
        rc = self.resctrl
        for tg, cg in self.cgroups.items():
            if tg.usage_ns == cg.usage_seen:
                continue                  # did not run since the last account
            cg.usage_seen = tg.usage_ns
            ses = tg.se
            for d in self.domains:
                # every CPU of the domain, not only the cpuset's: a cgroup
                # moved within it keeps the time it ran on its former CPUs
                ex = 0
                for cpu in self.cpus_of[d]:
                    ex += ses[cpu].sum_exec_runtime
                ran = ex - cg.exec_seen.get(d, 0)
                if ran <= 0:
                    continue
                cg.exec_seen[d] = ex
                key = (tg, d)
                self._ran[key] = self._ran.get(key, 0) + ran
                cpi = self.cpi.get(key, cg.cpi_alone)
                st = self.state.get(key)
                miss = st.miss if st is not None else cg.curve.miss(self.geometry.ways)
                c = cg.counters
                cycles = ran * ghz
                instr = cycles / cpi
                c.instructions += instr
                c.cycles += cycles
                c.stall_cycles += cycles * (1.0 - cg.profile.cpi_core / cpi)
                c.alone_cycles += instr * cg.cpi_alone
                refs = instr * cg.profile.refs_per_kinstr / 1000.0
                misses = refs * miss
                if key in self._refill:
                    extra = self._refetched(key, cg, refs)
                    misses += extra
                    deficit, per_ref = self._refill[key]
                    self._refill[key] = (deficit - extra, per_ref)
                c.llc_refs += refs
                c.llc_misses += misses
                mbm = misses * self.hp.line * (1.0 + cg.profile.dirty_fraction)
                c.mbm_bytes += mbm
                c.cpu_ns += ran
                if cg.cpi_alone / cpi >= self.TARGET - 1e-12:
                    c.above_target_ns += ran
                if st is not None:
                    self.occ_area += self._occupancy(key) * ran
                    self.occ_time += ran
                rc.record(rc.group_of(tg.name), d, None, mbm)

    def _solve(self, tenants: dict[int, list[TenantIn]], now: int) -> None:
        m = self.machine
        rc = self.resctrl
        new_speed: dict[tuple, float] = {}
        occupancy: dict[tuple, float] = {}
        for d, ts in tenants.items():
            if not ts:
                continue
            sig = tuple((id(t.curve), id(t.profile), t.cbm, round(t.cpus, 2), t.mba_fraction)
                        for t in ts)
            outs = self._cache.get(sig)
            if outs is None:
                outs = solve(ts, self.geometry.ways, self.hp)
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[sig] = outs
            for t, o in zip(ts, outs):
                key = (t.key, d)
                cg = self.cgroups[t.key]
                self._lose_lines(key, cg, t.cbm, o)
                self.state[key] = o
                cpi = o.cpi if key not in self._refill else self._refill_cpi(key, cg, t, o)
                self.cpi[key] = cpi
                new_speed[key] = cg.cpi_alone / cpi
                cls = rc.group_of(t.key.name)
                occupancy[(cls, d)] = occupancy.get((cls, d), 0.0) + self._occupancy(key)
        for name in rc.groups:
            for d in self.domains:
                rc.record(name, d, occupancy.get((name, d), 0.0))
        changed = {k for k, v in new_speed.items() if self.speed.get(k) != v}
        self.speed.update(new_speed)
        if changed:
            for rq in m.rqs:
                p = rq.curr
                if p is not None and (p.tg, self.domain_of_cpu[rq.cpu]) in changed:
                    m.refresh_speed(rq)

    # ---- refill after a move ------------------------------------------------------------
    def _lose_lines(self, key, cg: _Cg, cbm: int, out: TenantOut) -> None:
        """A cgroup whose ways moved or shrank since its last solve keeps only
        its lines in the ways it still owns (spread evenly over the ways it
        had); the rest must be fetched again, up to its new steady occupancy.
        Lines left in the former ways count as lost at once (the thesis,
        §4.6.1, has them valid until the ways' new holder evicts them, which
        this does not track), so the cost is an upper bound.  Ways gained
        without a loss fill without a transient, like the first warm-up.  A
        cgroup moved to another domain (``moved``) starts there with none of
        its lines."""
        old = self._cbm_seen.get(key)
        self._cbm_seen[key] = cbm
        if not self.refill:
            self._cold.discard(key)
            return
        line = self.hp.line
        target = out.occupancy_bytes / line
        deficit, per_ref = self._refill.get(key, (0.0, 0.0))
        cold = key in self._cold
        if cold or (old is not None and old & ~cbm):
            if cold:
                self._cold.discard(key)
                kept = 0.0
            else:
                prev = self.state[key]
                kept = (prev.occupancy_bytes / line - deficit) * bin(old & cbm).count("1") \
                    / bin(old).count("1")
            deficit = max(0.0, target - kept)
            # random: a reference hits a resident line with R / N, so the
            # deficit relaxes as exp(-refs / N); a cyclic sweep refetches the
            # lost lines, spread over its N references, at the next pass
            per_ref = 1.0 / cg.curve.n if cg.profile.pattern == "random" \
                else deficit / cg.curve.n
        deficit = min(deficit, target)
        if deficit >= 1.0:
            self._refill[key] = (deficit, per_ref)
        else:
            self._refill.pop(key, None)

    def _refetched(self, key, cg: _Cg, refs: float) -> float:
        """Lost lines fetched again by ``refs`` LLC references (the extra misses)."""
        deficit, per_ref = self._refill[key]
        if cg.profile.pattern == "random":
            return deficit * -math.expm1(-refs * per_ref)
        return min(deficit, refs * per_ref)

    def _refill_cpi(self, key, cg: _Cg, t: TenantIn, o: TenantOut) -> float:
        """Mean CPI over the next epoch with the refill's extra misses: the
        instructions I that fit its cycles C (at this epoch's CPU share)
        solve ``C = I CPI + X(I) s``, X(I) the lines refetched by I's
        references, s the stall of a miss instead of a hit."""
        hp = self.hp
        budget = t.cpus * self.epoch_ns * hp.ghz
        r = cg.profile.refs_per_kinstr / 1000.0
        s = (hp.mem_latency_ns - hp.llc_latency_ns) * hp.ghz / (cg.profile.mlp * o.throttle)
        lo, hi = 0.0, budget / o.cpi
        for _ in range(60):           # cycles(I) is increasing: bisect
            mid = 0.5 * (lo + hi)
            if mid * o.cpi + self._refetched(key, cg, mid * r) * s > budget:
                hi = mid
            else:
                lo = mid
        return budget / lo if lo > 0 else o.cpi

    def _occupancy(self, key) -> float:
        """CMT bytes now: the steady occupancy less the lines still to refetch."""
        return self.state[key].occupancy_bytes - self._refill.get(key, (0.0, 0.0))[0] * self.hp.line

    # ---- reads --------------------------------------------------------------------------
    def counters(self, tg) -> Counters:
        cg = self.cgroups.get(tg)
        return Counters(**vars(cg.counters)) if cg is not None else Counters()

    def interval_columns(self) -> dict[str, tuple]:
        """Per profiled cgroup (by name), sim.metrics.MEMORY_INTERVAL_COLUMNS over the
        interval since the previous call (sim.metrics.IntervalSampler, after
        syncing the machine).  Rates are null when the cgroup did not run;
        the occupancy is CMT's reading at the end, of the domains it ran on;
        ``l3_ways`` / ``mb_percent`` are its class's on the domain it ran on
        most (or its cpuset's first), null where the host lacks CAT / MBA."""
        self._account()
        rc = self.resctrl
        out = {}
        for tg, cg in self.cgroups.items():
            c = cg.counters
            before, exec_before = self._sampled.get(tg, (Counters(), {}))
            self._sampled[tg] = (Counters(**vars(c)), dict(cg.exec_seen))
            ran = {d: cg.exec_seen.get(d, 0) - exec_before.get(d, 0) for d in self.domains}
            cycles = c.cycles - before.cycles
            refs = c.llc_refs - before.llc_refs
            if cycles > 0:
                home = max(self.domains, key=lambda d: ran[d])
                occ = sum(self._occupancy((tg, d)) for d in self.domains
                          if ran[d] > 0 and (tg, d) in self.state)
                rates = ((c.instructions - before.instructions) / cycles,
                         1.0 - (c.stall_cycles - before.stall_cycles) / cycles,
                         (c.alone_cycles - before.alone_cycles) / cycles,
                         (c.llc_misses - before.llc_misses) / refs if refs > 0 else None,
                         occ / (1 << 20))
            else:
                allowed = tg.cpus_allowed
                home = self.domain_of_cpu[min(allowed)] if allowed else self.domains[0]
                rates = (None,) * 5
            cls = rc.group_of(tg.name)
            out[tg.name] = (round(c.instructions - before.instructions), round(cycles), *rates,
                            round(c.mbm_bytes - before.mbm_bytes),
                            rc.ways(cls, home) if rc.info.has_cat else None,
                            rc.mb(cls, home) if rc.info.has_mba else None)
        return out

    def summary(self) -> dict:
        """Summary columns over the measured window (after warm-up)."""
        nan = float("nan")
        base = self._at_warmup or {}
        per: list[tuple[_Cg, Counters]] = []
        for tg, cg in self.cgroups.items():
            c, b = cg.counters, base.get(tg, Counters())
            per.append((cg, Counters(*(getattr(c, f) - getattr(b, f) for f in vars(c)))))

        def ipce(rows):
            cyc = sum(c.cycles for _, c in rows)
            return 1.0 - sum(c.stall_cycles for _, c in rows) / cyc if cyc > 0 else nan

        def job_mean(rows):
            # every cgroup that ran weighs the same, whatever its cycles
            jobs = [ipce([row]) for row in rows if row[1].cycles > 0]
            return sum(jobs) / len(jobs) if jobs else nan

        refs = sum(c.llc_refs for _, c in per)
        rates = [c.llc_misses / c.llc_refs for _, c in per if c.llc_refs > 0]
        prio = [(g, c) for g, c in per if g.tag == "priority"]
        batch = [(g, c) for g, c in per if g.tag == "batch"]
        cpu_p = sum(c.cpu_ns for _, c in prio)
        return {
            "llc_miss_rate": sum(c.llc_misses for _, c in per) / refs if refs > 0 else nan,
            "llc_miss_rate_min": min(rates) if rates else nan,
            "llc_miss_rate_max": max(rates) if rates else nan,
            "llc_occupancy_mb": self.occ_area / self.occ_time / (1 << 20) if self.occ_time else nan,
            "ipce_global": ipce(per),
            "ipce_priority": ipce(prio),
            "ipce_batch": ipce(batch),
            "ipce_priority_job_mean": job_mean(prio),
            "ipce_batch_job_mean": job_mean(batch),
            "time_above_target_frac": (sum(c.above_target_ns for _, c in prio) / cpu_p
                                       if cpu_p > 0 else nan),
        }


SUMMARY_COLUMNS = ("llc_miss_rate", "llc_miss_rate_min", "llc_miss_rate_max", "llc_occupancy_mb",
                   "ipce_global", "ipce_priority", "ipce_batch", "ipce_priority_job_mean",
                   "ipce_batch_job_mean", "time_above_target_frac")


def empty_summary() -> dict:
    return dict.fromkeys(SUMMARY_COLUMNS, float("nan"))
