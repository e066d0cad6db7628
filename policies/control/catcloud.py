"""CATCloud (P. R. Sampat, UIUC MS thesis 2024, "CATCloud: Closing Semantic Gaps
of CPU Interfaces for Precise Autoscaling in the Cloud"; "§n" is a section of
it): tune cpu.max's quota AND period from run/yield tracing inside the CFS
bandwidth controller.

Per traced cgroup:

- **period-agnostic tracing** (Alg. 3.2, §3.2.2), per runqueue (cfs_rq,
  one per CPU), at every runtime-slice assignment
  (``__assign_cfs_rq_runtime``): the idle gap before the grant is the wall
  time since the previous grant minus the CPU time the cfs_rq consumed
  since (``corr_yieldtime``); a gap of at least ``cfs_bandwidth_slice``
  (5 ms) is a self-yield and closes a run cycle: yield = gap, runtime =
  cycle length - gap (the burst's span), and a new cycle starts;
- **period-bound tracing** (Alg. 3.1, §3.2.1), per bandwidth period: the
  group's CPU time in the period (runtime) and period - runtime (yield);
- **throttle correction** (Alg. 3.3, §3.2.3): time a cfs_rq spent
  throttled moves both its clocks forward, so it is neither yield nor run;
- **quota scaling** (Alg. 3.4, §3.2.3; auto mode only, it writes
  cpu.max): when throttled periods make up ``throttle_threshold`` of the
  period-bound history, for ``scale_periods`` periods the quota grows by
  1, 2, 4, ... CPUs' worth while the group is still throttled; the
  period-agnostic buffers are restarted so the next recommendation comes
  from runtimes traced while over-provisioned;
- **recommendation** (§3.3): once the buffers are full, quota = p99 of
  runtime and period = p99(runtime) + p99(yield) from each tracer (per
  runqueue, then aggregated over the active runqueues for the
  period-agnostic one, §3.4); the lower quota/period ratio wins.
  ``mode: recommend`` only records it (cpu.recommend.max); ``mode: auto``
  also writes cpu.max, at the next period boundary (the period timer,
  where the kernel would change it; writing cpu.max from inside the
  borrow would re-enter the bandwidth code).

Tracing needs the Host's optional ``trace_bandwidth`` capability
(backends/host.py BandwidthTracing), which the simulated host provides.
Without it (a real host on a stock kernel) ``tracer: auto`` falls back to
a **user-space approximation**: cgroup usage polled every ``interval_s``
(set it to a few ms) is fed to the same algorithm as if the whole cgroup
were one runqueue granted runtime at every poll that saw usage, throttled
time comes from cpu.stat, and period boundaries are counted from the
controller's start (user space cannot see the period timer's phase).
The summary column ``catcloud_tracer`` says which ran.

What the thesis leaves open, and the defaults chosen (the options below):

- ``multicore`` (§3.4: "computes cumulative runtime and period"): how
  per-runqueue models combine.  ``sum_max`` (default): quota = sum of the
  active runqueues' quotas, period = the longest of their periods; N
  parallel threads with one cycle need N times one thread's quota in that
  cycle.  ``sum_sum`` (quota and period both summed, the literal reading)
  gives the average runqueue's ratio, one CPU's worth for N parallel
  threads; ``sum_mean`` uses the mean period.  ``cgroup`` (not the
  thesis's design) traces the cgroup as one runqueue: a yield is a gap in
  which none of its cfs_rqs ran, and a cycle's runtime is the larger of
  its span and the CPU time the cgroup used in it.  Per-runqueue tracing
  splits a thread that migrates between CPUs into fragments on each
  runqueue (each sees the other's runs as yield); the cgroup view does
  not, at the price of seeing parallel threads' gaps only when they
  coincide.
- ``throttle_threshold`` (0.5): the text says "the majority (>= 50%) of
  the period-bound history" (§3.2.3); the listing's ``curr_throttle >=
  period_bound_history`` (§3.2.3) would be 1.0.
- ``scale_unit_us`` (null = one CPU, i.e. the current period's worth of
  quota): "an exponential scaling factor of CPUs" (§3.2.3).
- ``wait_for`` (both): recommend when the period-bound buffer and at least
  one runqueue's period-agnostic buffer are full ("Once the history buffer
  is filled with data from both per-runqueue and global cgroup views",
  §3.1; "When the user-tunable history buffers are full", §3.3).  A
  workload that never sleeps a slice long never fills the
  period-agnostic buffer; ``any`` then recommends from period-bound alone.
- ``buffer_policy`` (ring): the listing never wraps ``idx`` (§3.2.2);
  a ring of the last N entries keeps the recommendation current, which is
  what the history size is for ("stale past information may taint the
  buffer", §3.5.1).  ``clear`` empties every buffer after each
  recommendation.  Either way a cpu.max period change clears the
  period-bound buffer: "tracing for the following periods is based on
  this new quota and period" (§3.3).
- ``period_formula`` (sum_of_percentiles): "the 99th percentile of
  runtime and yield time duration are calculated ... the period is
  determined by the summation of runtime and yield time" (§3.3) read
  literally: p99(runtime) + p99(yield).  For the period-bound tracer the
  two percentiles come from different periods, so the period can exceed
  every observed runtime + yield and the ratio fall below the busiest
  period's (Exp 2 at 100 ms: 70 / (70 + 60) = 0.54 < 40/70);
  ``percentile_of_sums`` takes p99 of runtime + yield per entry instead
  (the cycle length; for period-bound, the period itself).
- ``percentile`` 99 with ``percentile_method`` linear (numpy's default):
  with the default 5 entries (§4.3) p99 is within 4% of the gap between
  the two largest entries of the maximum, the "worst-case run/yield
  times" (§3.1).
- clamps: the kernel's period range 1 ms .. 1 s and minimum quota 1 ms
  (the thesis names none; a cycle longer than 1 s gets a 1 s period and
  its whole burst as quota); ``granularity_us`` 1000: quota rounded up and
  period rounded to the millisecond, the thesis's "millisecond-scale
  accounting" (§3.1; its results are whole ms, 22/171, §4.2.1); ``margin``
  0 (the thesis adds none).
- ``quota_round`` (above) and ``hold_us`` (null: one granularity step):
  the thesis is silent on both; these are the stable choices (issue 25,
  "Controllers that flap").  The kernel throttles a cfs_rq whose
  ``runtime_remaining`` reaches 0 (``account_cfs_rq_runtime`` and
  ``check_cfs_rq_runtime`` need it > 0), so a quota exactly equal to the
  traced runtime throttles the group at the last instant of every burst
  that a period holds whole; the throttle is counted (``nr_throttled``, the
  period-bound history's throttled flag) and Alg. 3.3 removes the sleep
  that follows it from the next yield.  ``above`` takes the first step
  strictly above the runtime; ``up`` (rounded up, the former default) can
  equal it.  The period-bound tracer's runtime is the usage in a period,
  which a period out of phase with the cycle sees below the burst
  (13.3 ms bursts every 54.4 ms at a 54 ms period: 12.9-13.3 ms per
  period), and no period can show more than the quota in force; by the
  lower-ratio rule such a reading replaces a sufficient limit with one a
  step lower, which throttles, and the next reading raises it again.  A
  recommendation lower than the previous one by at most ``hold_us`` in
  quota and in period is within the tracer's resolution and keeps the
  previous one; any rise, and any larger fall, is taken at once.
- ``initial_quota_us`` / ``initial_period_us`` (100000/100000, one CPU at
  the default period): tracing needs a limit ("quota != max", every
  listing's Require), so a cgroup without one gets this at start
  (``initial_limit: unlimited``; ``always`` overwrites any limit; null
  writes nothing).  A cgroup that has a cpu.max keeps it, as a container
  keeps its limit when cpu.recommend.status is set.
- ``mode`` (auto): the thesis evaluates CATCloud applying its limits
  (§4.2.1, "achieves ideal latency" with them); recommend leaves cpu.max
  alone and only records cpu.recommend.max.

Not modelled: the "absence of throttling in previous periods" condition
on closing a cycle (§3.2.2; throttle correction already removes throttled
time); cpu.recommend.history as a runtime file (the sizes are options).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from policies.control import ControlConfig, Controller
from policies.control.static import PERIOD_RANGE_US
from sim.config import MAX_COUNT
from sim.sched_class import tunable

DEFAULT_SLICE_US = 5_000          # sched_cfs_bandwidth_slice_us
MIN_QUOTA_US = 1_000              # the kernel's minimum quota and period
MAX_PERIOD_US = 1_000_000
PERIOD_AGNOSTIC = "period-agnostic"
PERIOD_BOUND = "period-bound"


@dataclass
class CatcloudConfig(ControlConfig):
    """Section numbers are the CATCloud thesis's ("CATCloud: closing
    semantic gaps of CPU interfaces for precise autoscaling in the cloud");
    the module docstring and docs/autoscalers.md say why each default."""
    # kernel tracer: how often the recommendation is sampled for the summary;
    # user-space approximation: the usage poll interval (use a few ms)
    interval_s: float = tunable(1.0, range=(0.001, None))
    # auto: also writes cpu.max; recommend: cpu.recommend.max only
    mode: str = tunable("auto", choices=("recommend", "auto"))
    # auto; kernel (the simulator's hook in the bandwidth controller);
    # userspace (the usage-polling approximation, for a host without it)
    tracer: str = tunable("auto", choices=("auto", "kernel", "userspace"))
    # cpu.recommend.history: "default 5 entries" (section 3.5, chapter 4)
    history_period_bound: int = tunable(5, range=(1, MAX_COUNT))
    history_period_agnostic: int = tunable(5, range=(1, MAX_COUNT))
    percentile: float = tunable(99.0, range=(0, 100))   # p99 of runtime and yield (3.3)
    # numpy's; with 5 entries p99 is about the maximum ("worst-case", 3.1)
    percentile_method: str = tunable("linear", choices=("linear", "higher", "lower",
                                                        "nearest", "midpoint"))
    # both history buffers full before recommending (3.1, 3.3), or any
    wait_for: str = tunable("both", choices=("both", "any"))
    # multicore (3.4, ambiguous): per-run-queue models, quotas summed and
    # the longest period (sum_max), or the mean or sum of periods; or one
    # cgroup-wide model
    multicore: str = tunable("sum_max", choices=("sum_max", "sum_mean", "sum_sum", "cgroup"))
    # ring: keep the last N entries; clear: empty after each recommendation
    buffer_policy: str = tunable("ring", choices=("ring", "clear"))
    # heavy throttle: at least this share of the period-bound history
    # throttled (Alg. 3.4's text: "the majority (>= 50%)")
    throttle_threshold: float = tunable(0.5, range=(0, 1))
    # quota scaling episode length in periods, the quota doubling each
    # period (Alg. 3.4); 0: no quota scaling
    scale_periods: int = tunable(5, range=(0, None))
    # quota added per scaling step; null: one CPU (the period's worth)
    scale_unit_us: Optional[int] = tunable(None, range=(1, None))
    # period = p99(runtime) + p99(yield) (3.3, literally), or p99 of the
    # per-entry runtime + yield (the cycle; for period-bound: the period)
    period_formula: str = tunable("sum_of_percentiles",
                                  choices=("sum_of_percentiles", "percentile_of_sums"))
    margin: float = tunable(0.0, range=(0, None))      # no safety margin in the thesis
    # ms-scale accounting (3.1): quota rounded up, period to the nearest
    granularity_us: int = tunable(1000, range=(1, None))
    # above: the quota is the first granularity step strictly above the
    # traced runtime (a quota equal to it throttles the group at the burst's
    # last instant); up: rounded up, so it can equal the runtime
    quota_round: str = tunable("above", choices=("above", "up"))
    # a recommendation lower than the previous one by at most this much in
    # quota and in period keeps the previous one (the tracer's resolution);
    # null: granularity_us; 0: every change is taken (the literal reading)
    hold_us: Optional[int] = tunable(None, range=(0, None))
    # the kernel's minimum quota and its period range (1 ms .. 1 s)
    min_quota_us: int = tunable(MIN_QUOTA_US, range=(MIN_QUOTA_US, None))
    min_period_us: int = tunable(PERIOD_RANGE_US[0], range=PERIOD_RANGE_US)
    max_period_us: int = tunable(PERIOD_RANGE_US[1], range=PERIOD_RANGE_US)
    # null: the host's sched_cfs_bandwidth_slice_us
    slice_us: Optional[int] = tunable(None, range=(1, None))
    # tracing needs a limit (quota != max): the one cgroups without cpu.max get
    initial_quota_us: Optional[int] = tunable(100_000, range=(MIN_QUOTA_US, None))
    initial_period_us: int = tunable(100_000, range=PERIOD_RANGE_US)
    # unlimited: write the initial limit only on cgroups without a cpu.max
    # (a host that cannot read cpu.max gets it written); always: on every cgroup
    initial_limit: str = tunable("unlimited", choices=("unlimited", "always"))


def percentile(values, pct: float, method: str = "linear") -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), pct, method=method))


def lower_ratio(candidates):
    """The (source, quota, period) with the lowest quota/period; ties go to
    the earlier candidate (period-agnostic is listed first)."""
    best = None
    for c in candidates:
        if best is None or c[1] / c[2] < best[1] / best[2]:
            best = c
    return best


class RqTrace:
    """Period-agnostic state of one runqueue (Alg. 3.2's clocks, as
    timestamps) and its history buffers."""

    __slots__ = ("grant_t", "exec_at_grant", "cycle_start", "exec_at_cycle", "runtime",
                 "yields", "last_active")

    def __init__(self, size: int):
        self.grant_t: int | None = None       # yield clock: the last grant
        self.exec_at_grant = 0                # CPU time consumed at that grant
        self.cycle_start: int | None = None   # runtime clock (accumulated_runtime)
        self.exec_at_cycle = 0
        self.runtime: deque = deque(maxlen=size)
        self.yields: deque = deque(maxlen=size)
        self.last_active = -1

    def full(self) -> bool:
        return len(self.runtime) == self.runtime.maxlen


class CgroupTrace:
    """Everything CATCloud keeps for one cgroup (its cfs_bandwidth and its
    cfs_rqs).  ``runtime_assigned`` and ``period_elapsed`` are the two
    hooks; ``recommendation`` is cpu.recommend.max."""

    def __init__(self, ctl: "Catcloud", cgroup: str, slice_ns: int, current):
        self.ctl, self.cfg, self.cgroup = ctl, ctl.cfg, cgroup
        self.slice_ns = slice_ns
        self.rqs: dict[int, RqTrace] = {}
        self.pb: deque = deque(maxlen=int(self.cfg.history_period_bound))
        self.current = current                  # (quota_us, period_us) we set, or None
        self.recommendation: tuple[int, int, str] | None = None
        self.applied_rec = None
        self.last_boundary = None
        self.scaling_left = 0
        self.cpu_scale = 1
        self.scalings = 0
        self.entries_pa = 0
        self.entries_pb = 0

    # --- hooks ------------------------------------------------------------
    def runtime_assigned(self, cpu: int, now: int, exec_ns: int, throttled_ns: int,
                         group_exec_ns: int | None = None) -> None:
        cgroup_wide = self.cfg.multicore == "cgroup"
        if cgroup_wide:
            # the whole cgroup as one runqueue: idle only when no CPU runs it
            cpu, exec_ns = -1, exec_ns if group_exec_ns is None else group_exec_ns
        r = self.rqs.get(cpu)
        if r is None:
            r = self.rqs[cpu] = RqTrace(int(self.cfg.history_period_agnostic))
        r.last_active = now
        if throttled_ns and r.grant_t is not None and r.cycle_start is not None:
            # Alg. 3.3: throttled time is neither yield nor run
            r.grant_t += throttled_ns
            r.cycle_start += throttled_ns
        if r.grant_t is not None:
            gap = (now - r.grant_t) - (exec_ns - r.exec_at_grant)
            if r.cycle_start is not None and gap >= self.slice_ns:
                run = now - r.cycle_start - gap
                if cgroup_wide:   # parallel threads: the CPU time of the cycle if larger
                    run = max(run, exec_ns - r.exec_at_cycle)
                r.yields.append(gap)
                r.runtime.append(run)
                r.cycle_start = None
                self.entries_pa += 1
                self._recommend(now)
        r.grant_t, r.exec_at_grant = now, exec_ns
        if r.cycle_start is None:
            r.cycle_start, r.exec_at_cycle = now, exec_ns

    def period_elapsed(self, now: int, period_ns: int, runtime_ns: int, throttled: bool) -> None:
        prev_boundary, self.last_boundary = self.last_boundary, now
        cfg = self.cfg
        # only whole periods of the cpu.max in force count (§3.3)
        if self.current is None or abs(period_ns - self.current[1] * 1000) <= \
                0.01 * self.current[1] * 1000:
            self.pb.append((runtime_ns, period_ns - runtime_ns, bool(throttled)))
            self.entries_pb += 1
        if cfg.mode == "auto" and self._quota_scaling(throttled):
            return
        self._recommend(now, prev_boundary)
        if cfg.mode == "auto" and self.recommendation is not None \
                and self.recommendation is not self.applied_rec:
            self.applied_rec = self.recommendation
            q, t, _ = self.recommendation
            if self.current != (q, t):
                self._apply(q, t)

    # --- Alg. 3.4 ---------------------------------------------------------
    def _quota_scaling(self, throttled: bool) -> bool:
        """True while an over-provisioning episode runs (no recommendation
        is applied then)."""
        cfg = self.cfg
        periods = int(cfg.scale_periods)
        if periods == 0 or self.current is None:
            return False
        if self.scaling_left == 0:
            need = math.ceil(float(cfg.throttle_threshold) * self.pb.maxlen - 1e-9)
            if len(self.pb) < self.pb.maxlen or sum(e[2] for e in self.pb) < max(need, 1):
                return False
            # heavy throttle: start over-provisioning; what was traced
            # under it is not the workload's behaviour
            self.scaling_left, self.cpu_scale = periods, 1
            self.scalings += 1
            for r in self.rqs.values():
                r.runtime.clear()
                r.yields.clear()
            throttled = True
        self.scaling_left -= 1
        if throttled:
            q, t = self.current
            unit = cfg.scale_unit_us or t
            self._apply(q + self.cpu_scale * int(unit), t)
            self.cpu_scale *= 2
        if self.scaling_left == 0:
            self.pb.clear()           # its throttled periods would trigger again
            self.recommendation = self.applied_rec = None
        return True

    # --- recommendation (§3.3-3.4) ----------------------------------------
    def _model(self, runtimes, yields):
        pct, method = float(self.cfg.percentile), str(self.cfg.percentile_method)
        q = percentile(runtimes, pct, method)
        if self.cfg.period_formula == "percentile_of_sums":
            return q, percentile([r + y for r, y in zip(runtimes, yields)], pct, method)
        return q, q + percentile(yields, pct, method)

    def _candidates(self, now: int, window: int | None):
        cfg = self.cfg
        out = []
        # period-agnostic: runqueues active in the last period (§3.4)
        period_ns = (self.current[1] * 1000) if self.current else 100_000_000
        since = now - period_ns if window is None else window
        models = [self._model(r.runtime, r.yields) for r in self.rqs.values()
                  if r.full() and r.last_active >= since]
        if models:
            qs = [m[0] for m in models]
            ts = [m[1] for m in models]
            agg = cfg.multicore
            period = max(ts) if agg in ("sum_max", "cgroup") else (
                sum(ts) / len(ts) if agg == "sum_mean" else sum(ts))
            out.append((PERIOD_AGNOSTIC, sum(qs), period))
        if len(self.pb) == self.pb.maxlen:
            q, t = self._model([e[0] for e in self.pb], [e[1] for e in self.pb])
            out.append((PERIOD_BOUND, q, t))
        return out

    def _recommend(self, now: int, window: int | None = None) -> None:
        cfg = self.cfg
        if self.scaling_left:
            return
        cands = [c for c in self._candidates(now, window) if c[1] > 0 and c[2] > 0]
        if not cands or (cfg.wait_for == "both" and len(cands) < 2):
            return
        source, q_ns, t_ns = lower_ratio(cands)
        rec = self._clamp(q_ns * (1.0 + float(cfg.margin)), t_ns) + (source,)
        if self._held(rec):
            rec = self.recommendation
        if self.recommendation is None or rec[:2] != self.recommendation[:2]:
            self.ctl.record(now, self.cgroup, rec)
        self.recommendation = rec
        if cfg.buffer_policy == "clear":
            self.pb.clear()
            for r in self.rqs.values():
                r.runtime.clear()
                r.yields.clear()

    def _held(self, rec) -> bool:
        """A recommendation below the previous one by at most hold_us in
        quota and in period is within the tracer's resolution."""
        prev, hold = self.recommendation, self.cfg.hold_us
        if prev is None or hold == 0:
            return False
        hold = int(self.cfg.granularity_us) if hold is None else int(hold)
        return (rec[0] * prev[1] < prev[0] * rec[1] and abs(rec[0] - prev[0]) <= hold
                and abs(rec[1] - prev[1]) <= hold)

    def _clamp(self, q_ns: float, t_ns: float) -> tuple[int, int]:
        cfg = self.cfg
        g = int(cfg.granularity_us)
        if cfg.quota_round == "above":
            q = (int(math.floor(q_ns / 1000.0 / g)) + 1) * g
        else:
            q = int(math.ceil(q_ns / 1000.0 / g - 1e-9)) * g
        t = int(round(t_ns / 1000.0 / g)) * g
        t = min(max(t, int(cfg.min_period_us)), int(cfg.max_period_us))
        q = max(q, int(cfg.min_quota_us))
        return q, t

    def _apply(self, q: int, t: int) -> None:
        if self.current is None or t != self.current[1]:
            self.pb.clear()
        self.current = (q, t)
        self.ctl.apply(self.cgroup, q, t)


class UsagePoller:
    """The user-space approximation of the tracing hooks: one poll of
    cgroup usage and cpu.stat per step, fed to a CgroupTrace as if the
    cgroup were one runqueue granted runtime at every poll that saw usage;
    period boundaries are counted from the start with the current
    period."""

    def __init__(self, trace: CgroupTrace, host, cgroup: str):
        self.trace, self.cgroup = trace, cgroup
        now = host.now_ns()
        self.last_usage = host.cpu_usage_ns(cgroup)
        st = host.cpu_stat(cgroup)
        self.last_thr_us, self.last_nr_thr = st.throttled_usec, st.nr_throttled
        self.period_start, self.period_usage = now, 0
        self.period_throttled = False
        trace.last_boundary = now

    def poll(self, host) -> None:
        now = host.now_ns()
        usage = host.cpu_usage_ns(self.cgroup)
        st = host.cpu_stat(self.cgroup)
        du = usage - self.last_usage
        thr_ns = (st.throttled_usec - self.last_thr_us) * 1000
        throttled = st.nr_throttled > self.last_nr_thr or thr_ns > 0
        self.last_usage, self.last_thr_us, self.last_nr_thr = \
            usage, st.throttled_usec, st.nr_throttled
        if du > 0:
            self.trace.runtime_assigned(0, now, usage, thr_ns, usage)
        self.period_usage += du
        self.period_throttled |= throttled
        period_ns = (self.trace.current[1] if self.trace.current else 100_000) * 1000
        if now - self.period_start >= period_ns:
            self.trace.period_elapsed(now, now - self.period_start, self.period_usage,
                                      self.period_throttled)
            self.period_start, self.period_usage, self.period_throttled = now, 0, False


class Catcloud(Controller):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.traces: dict[str, CgroupTrace] = {}
        self.pollers: list[UsagePoller] = []
        self.tracer = None
        self.host = None
        # (t_s, cgroup, quota_us, period_us, source): every change of a
        # cgroup's recommendation (cpu.recommend.max)
        self.timeline: list[tuple[float, str, int, int, str]] = []
        self.samples: dict[str, list[tuple[int, int]]] = {}
        self.applied = 0

    def start(self, host) -> None:
        self.host = host
        cfg = self.cfg
        kernel = hasattr(host, "trace_bandwidth")
        if cfg.tracer == "kernel" and not kernel:
            raise ValueError("controller catcloud: tracer=kernel needs a host with in-kernel "
                             "bandwidth tracing (the simulator); this host has none: use "
                             "tracer=auto or userspace (a usage-polling approximation)")
        kernel = kernel and cfg.tracer != "userspace"
        self.tracer = "kernel" if kernel else "userspace-approximation"
        if cfg.slice_us is not None:
            slice_ns = int(cfg.slice_us) * 1000
        elif hasattr(host, "bandwidth_slice_ns"):
            slice_ns = int(host.bandwidth_slice_ns())
        else:
            slice_ns = DEFAULT_SLICE_US * 1000
        initial = None
        if cfg.initial_quota_us is not None:
            initial = (int(cfg.initial_quota_us), int(cfg.initial_period_us))
        for cgroup in host.functions():
            # a cgroup that has a cpu.max keeps it; one without gets the
            # initial limit (tracing needs quota != max)
            current = host.cpu_max(cgroup) if hasattr(host, "cpu_max") else (None, 0)
            write = current[0] is None or cfg.initial_limit == "always"
            if write:
                current = initial
            trace = CgroupTrace(self, cgroup, slice_ns, current)
            self.traces[cgroup] = trace
            self.samples[cgroup] = []
            if write and current is not None:
                self.apply(cgroup, *current)
            if kernel:
                host.trace_bandwidth(cgroup, trace)
            else:
                self.pollers.append(UsagePoller(trace, host, cgroup))

    def step(self, host) -> None:
        for p in self.pollers:
            p.poll(host)
        for cgroup, trace in self.traces.items():
            if trace.recommendation is not None:
                self.samples[cgroup].append(trace.recommendation[:2])

    # --- called by the traces ------------------------------------------------
    def record(self, now_ns: int, cgroup: str, rec) -> None:
        self.timeline.append((now_ns / 1e9, cgroup, rec[0], rec[1], rec[2]))

    def apply(self, cgroup: str, quota_us: int, period_us: int) -> None:
        self.applied += 1
        self.host.set_cpu_max(cgroup, int(quota_us), int(period_us))

    # --- results -------------------------------------------------------------
    def summary(self) -> dict:
        nan = float("nan")
        finals = [t.recommendation for t in self.traces.values() if t.recommendation]
        med = [(float(np.median([s[0] for s in v])), float(np.median([s[1] for s in v])))
               for v in self.samples.values() if v]

        def mean(xs):
            return float(np.mean(xs)) if xs else nan
        per_cgroup = ";".join(f"{c}={t.recommendation[0]}/{t.recommendation[1]}"
                              for c, t in self.traces.items() if t.recommendation)
        return {
            "catcloud_mode": str(self.cfg.mode),
            "catcloud_tracer": str(self.tracer),
            # cpu.recommend.max at the end (mean over cgroups when several)
            "catcloud_quota_us_final": mean([r[0] for r in finals]),
            "catcloud_period_us_final": mean([r[1] for r in finals]),
            "catcloud_limit_mcpu_final": mean([1000.0 * r[0] / r[1] for r in finals]),
            "catcloud_source_final": ",".join(sorted({r[2] for r in finals})),
            # median over the run of the recommendation sampled every interval_s
            # (the thesis reports "median CPU limits recommended", §4.2.1)
            "catcloud_quota_us_median": mean([m[0] for m in med]),
            "catcloud_period_us_median": mean([m[1] for m in med]),
            "catcloud_limit_mcpu_median": mean([1000.0 * m[0] / m[1] for m in med]),
            "catcloud_first_recommendation_s": (min(t[0] for t in self.timeline)
                                                if self.timeline else nan),
            "catcloud_recommendation_changes": len(self.timeline),
            "catcloud_cpu_max_writes": self.applied,
            "catcloud_scalings": sum(t.scalings for t in self.traces.values()),
            "catcloud_recommended": per_cgroup,
        }


CONTROLLER = Catcloud
CONFIG = CatcloudConfig
