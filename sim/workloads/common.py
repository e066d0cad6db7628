"""Pieces the workloads share: service-time sampling, cgroup settings and
the allowed values of their keys."""
from __future__ import annotations

import re

import cython

from sim.bandwidth import (DEFAULT_CFS_PERIOD, MAX_CFS_QUOTA_PERIOD, MAX_CFS_RUNTIME,
                           MIN_CFS_QUOTA_PERIOD, NSEC_PER_USEC, parse_cpu_max)
from sim.engine import NSEC_PER_SEC, RngStream
from sim.rq import MAX_SHARES, MIN_SHARES
from sim.task import BURST_EXIT, Request

SERVICE_DISTRIBUTIONS = ("exp", "det", "lognormal")
NICE_RANGE = (-20, 19)
CPU_WEIGHT_RANGE = (1, 10000)  # cgroup v2 cpu.weight
CPU_SHARES_RANGE = (MIN_SHARES, MAX_SHARES)  # cgroup v1 cpu.shares
# tg_set_cfs_bandwidth()'s bounds, in us
CFS_PERIOD_US_RANGE = (MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC, MAX_CFS_QUOTA_PERIOD // NSEC_PER_USEC)
CFS_QUOTA_US_RANGE = (MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC, MAX_CFS_RUNTIME // NSEC_PER_USEC)
CGROUP_PATH = (r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*",
               "must be a relative cgroup path of letters, digits, '_', '.', '-' and '/'")
_CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


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


def check_bandwidth(c, prefix: str) -> None:
    """A cgroup's cpu.max in one of its two spellings: v1 quota_us (null or
    -1: no limit), period_us, burst_us, or v2 cpu_max and cpu_max_burst;
    the kernel's ranges (tg_set_cfs_bandwidth).  ``c`` as in sim/config.py."""
    quota_key, period_key, burst_key = (f"{prefix}.{k}" for k in
                                        ("quota_us", "period_us", "burst_us"))
    max_key, max_burst_key = f"{prefix}.cpu_max", f"{prefix}.cpu_max_burst"
    period = c.get(period_key)
    if period is not None:
        c.within(period_key, CFS_PERIOD_US_RANGE)
    if c.get(max_key) is not None:
        for key in (quota_key, burst_key):
            c.require(key, not c.get(key), f"conflicts with {max_key}: set the limit in one "
                      "spelling (v1 quota_us/period_us/burst_us or v2 cpu_max/cpu_max_burst)")
        try:
            quota, period = parse_cpu_max(c.get(max_key), period or 100_000)
        except ValueError as err:
            c.require(max_key, False, str(err))
            return
        c.require(max_key, CFS_PERIOD_US_RANGE[0] <= period <= CFS_PERIOD_US_RANGE[1],
                  f"$PERIOD must be in [{CFS_PERIOD_US_RANGE[0]}, {CFS_PERIOD_US_RANGE[1]}] us")
        quota_key, burst_key = max_key, max_burst_key
    else:
        c.require(max_burst_key, c.get(max_burst_key) is None,
                  f"needs {max_key} (or use burst_us with quota_us)")
        quota = c.get(quota_key)
        if quota == -1:
            quota = None
        # cgroup_bandwidth would fall back to 100000 us, whatever period the
        # user meant (a group's own null period_us is not the workload's)
        if quota is not None and period is None:
            c.require(period_key, False, f"must be set ({CFS_PERIOD_US_RANGE[0]}.."
                      f"{CFS_PERIOD_US_RANGE[1]} us) when {quota_key} is", "null")
    if quota is not None:
        low, high = CFS_QUOTA_US_RANGE
        c.require(quota_key, low <= quota <= high,
                  f"the quota must be in [{low}, {high}] us, or -1/null/max for no limit",
                  quota if quota_key.endswith("quota_us") else None)
    burst = c.get(burst_key)
    if burst is not None:
        high = quota if quota is not None else CFS_QUOTA_US_RANGE[1]
        c.within(burst_key, (0, high))


def check_nice(c, key: str, threads: int) -> None:
    """nice is one int, or a list with one int per thread."""
    value = c.get(key)
    if isinstance(value, list):
        values = value
        c.require(key, len(values) == threads,
                  f"must have one value per thread ({threads} threads)", values)
        for i, v in enumerate(values):
            if c.require(f"{key}[{i}]", _is_int(v), "must be an integer", v):
                c.within(f"{key}[{i}]", NICE_RANGE, v)
    elif c.require(key, _is_int(value), "must be an integer or a list of integers"):
        c.within(key, NICE_RANGE)


def check_cpuset(c, key: str, ncpus: int) -> None:
    """A CPU list such as "0-3,6" of CPUs the host has."""
    value = c.get(key)
    if not c.require(key, bool(_CPU_LIST.fullmatch(value)), 'must be a CPU list such as "0-3,6"'):
        return
    for part in value.split(","):
        low, _, high = part.partition("-")
        low, high = int(low), int(high or low)
        c.require(key, low <= high, "ranges must be ascending (low-high)")
        c.require(key, high < ncpus, f"CPUs must be in 0..{ncpus - 1} (the host has {ncpus})")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def apply_cgroup_bandwidth(machine, tg, cfg) -> None:
    """Write the cgroup's cpu.max if its config sets one."""
    bandwidth = cgroup_bandwidth(cfg)
    if bandwidth is not None:
        machine.set_cfs_bandwidth(tg, *bandwidth)


def function_cgroup(machine, cfg, name: str, i: int):
    """The i-th function's cgroup ``parent_cgroup/name`` with the cpu.shares,
    cpu.max and cpuset its config gives, and the CPU its first request forks
    from (i mod the CPUs it may use).  ``cpuset_spread`` deals function i
    the (i mod n)-th of the host's n NUMA nodes or LLCs, so each holds an
    equal number of functions (as the LAGS paper pins them on its EPYC)."""
    parent = cfg.parent_cgroup.strip("/")
    cpus = range(machine.topology.nr_cpus)
    allowed = None
    if cfg.get("cpuset_spread") is not None:
        sets = machine.topology.cpu_sets(cfg.cpuset_spread)
        allowed = sets[i % len(sets)]
        cpus, i = sorted(allowed), i // len(sets)
    tg = machine.create_group(f"{parent}/{name}" if parent else name, cgroup_shares(cfg), allowed)
    apply_cgroup_bandwidth(machine, tg, cfg)
    return tg, cpus[i % len(cpus)]


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
            # the first demand whose cumulative probability exceeds u (a
            # loop: a compiled method has no generator expressions)
            u = self.rng.uniform()
            d = self.mix_ns[-1]
            for i in range(len(self.mix_cdf)):
                if u < self.mix_cdf[i]:
                    d = self.mix_ns[i]
                    break
        else:
            d = self.rng.lognormal(self.mean_ns, self.sigma)
        return max(1, int(d))


def fork_threads(machine, req, tg, nice: int, ws_bytes: int, owner, hint: int,
                 start_ns: int = 0) -> int:
    """Fork ``req.pending`` threads of ``req`` in ``tg``, the demand split
    evenly (divmod: the first takes the remainder), each placed by fork
    balancing from where the previous one went and running ``start_ns`` of
    its own start-up first; returns the last one's CPU."""
    share, extra = divmod(req.demand, req.pending)
    for j in range(req.pending):
        t = machine.new_task(req.function, tg, nice,
                             max(1, share + (extra if j == 0 else 0) + start_ns),
                             ws_bytes, owner, req)
        machine.wake_up_new_task(t, hint)
        hint = t.cpu
    return hint


class ForkJoin:
    """Requests served by ``k`` threads forked at arrival (the demand split
    evenly); the request ends when its last thread exits.  Users set
    ``machine``, ``engine``, ``recorder``, ``nice`` and ``ws_bytes``, and
    ``path`` for a request path other than direct (sim/workloads/request_path.py;
    request_path.build(cfg, self), None for the direct path).  Compiled
    (sim/workloads/common.pxd): a request's fork and end run in C; a
    subclass, compiled or not, overrides any method."""

    def fork_request(self, name: str, tg, demand: int, k: int, hint: int,
                     arrival: int | None = None) -> int:
        """Fork the request's threads, each placed by fork balancing from
        where the previous one went; returns the last thread's CPU.
        ``arrival`` (default now) is when the request arrived, if it waited
        before being started."""
        return self.start_request(self.new_request(name, tg, demand, k, arrival), tg, hint)

    def new_request(self, name: str, tg, demand: int, k: int,
                    arrival: int | None = None) -> Request:
        """A request of ``k`` threads, recorded as arrived (not started yet:
        a caller that waits for its end keeps it before starting it)."""
        req = Request(name, tg.name, self.engine._now if arrival is None else arrival, demand)
        self.recorder.request_arrived(req)
        req.pending = k
        return req

    def start_request(self, req, tg, hint: int) -> int:
        """Start ``req`` on its path (direct: fork its threads in ``tg``);
        returns the last thread's CPU."""
        if self.path is not None:
            return self.path.start(req, tg, hint)
        return fork_threads(self.machine, req, tg, self.nice, self.ws_bytes, self, hint)

    def burst_done(self, task):
        req = task.request
        req.pending -= 1
        if req.pending == 0:
            req.end = self.engine._now
            self.request_done(req)
        return BURST_EXIT

    def request_done(self, req) -> None:
        self.recorder.request_done(req)


class Replay:
    """An invocation trace's requests still to come, in arrival order:
    typed columns (``arrivals`` and ``demands`` in ns, ``function_of`` an
    index into ``names``, ``threads``: array.arrays, 24 bytes an
    invocation), ``next`` the first not yet forked, and per function name
    its cgroup (``groups``) and the CPU its dispatcher last forked from
    (``hints``; the workload's own dicts).  Compiled, ``fork_due`` forks
    each due request without the interpreter's attribute reads, which were
    a twentieth of a replayed run (sim/workloads/trace.py)."""

    __slots__ = ("names", "groups", "hints", "arrivals", "demands", "function_of", "threads",
                 "next", "workload", "engine")

    def __init__(self, names, groups, hints, arrivals, demands, function_of, threads):
        self.names = names
        self.groups = groups
        self.hints = hints
        self.arrivals = arrivals
        self.demands = demands
        self.function_of = function_of
        self.threads = threads
        self.next = 0
        self.workload = None
        self.engine = None

    def start(self, workload) -> None:
        """Fork ``workload``'s requests as they come (``fork_due`` at each
        arrival instant)."""
        self.workload = workload
        self.engine = workload.engine
        if len(self.arrivals):
            self.engine.push(self.arrivals[0], self.arrive, ())

    def arrive(self) -> None:
        at = self.fork_due(self.workload, self.engine._now)
        if at >= 0:
            self.engine.push(at, self.arrive, ())

    def fork_due(self, workload, now: int) -> int:
        """Fork, by ``workload.fork_request`` (which a workload may
        override), every request that has arrived by ``now``; the arrival
        of the next one (-1: none left)."""
        arrivals = self.arrivals
        n = len(arrivals)
        while self.next < n and arrivals[self.next] <= now:
            i = self.next
            self.next += 1
            name = self.names[self.function_of[i]]
            self.hints[name] = workload.fork_request(name, self.groups[name], self.demands[i],
                                                     self.threads[i], self.hints[name])
        return arrivals[self.next] if self.next < n else -1


class PoissonSource:
    """One function's open-loop Poisson arrivals (workload=poisson):
    exponential gaps of mean ``mean_gap_ns`` from ``arrivals``, each request
    of ``k`` threads forked by ``workload.fork_request`` (which a workload
    may override) from the CPU the previous one's last thread went to
    (``hint``).  Compiled, an arrival runs without the interpreter: a
    tenth of a dense poisson run was this loop's attribute reads."""

    __slots__ = ("workload", "name", "tg", "arrivals", "service", "k", "mean_gap_ns", "hint")

    def __init__(self, workload, name: str, tg, arrivals, service, k: int, mean_gap_ns: float,
                 hint: int):
        self.workload = workload
        self.name = name
        self.tg = tg
        self.arrivals = arrivals
        self.service = service
        self.k = k
        self.mean_gap_ns = mean_gap_ns
        self.hint = hint

    def start(self) -> None:
        engine = self.workload.engine
        engine.push(engine._now + cython.cast(cython.longlong,
                                              self.arrivals.exponential(self.mean_gap_ns)),
                    self.arrive, ())

    def arrive(self) -> None:
        self.hint = self.workload.fork_request(self.name, self.tg, self.service.sample_ns(),
                                               self.k, self.hint)
        engine = self.workload.engine
        # a cast truncates as int() does, without a Python int between
        engine.push(engine._now + cython.cast(cython.longlong,
                                              self.arrivals.exponential(self.mean_gap_ns)),
                    self.arrive, ())
