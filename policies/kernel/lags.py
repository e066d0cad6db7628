"""CFS-LAGS, Latency-Aware Group Scheduling: the LAGS paper's patch to
kernel/sched/fair.c of Linux 5.18 ("Mitigating context switching in densely
packed Linux clusters with Latency-Aware Group Scheduling", section 4 and
Appendix A; [§n] are its sections), built on the CFS model in
policies/kernel/cfs.py.

What the paper specifies, and how it is modelled here:

* Function cgroups carry ``cpu.latency_awareness`` = 1 [Appendix A.2]; every
  other cgroup stays under CFS [§4.2, Appendix A.3].  Here the flag is the
  scheduler option ``latency_aware`` (which cgroups; see LagsConfig).
* Load Credit (``tg->load_avg_ema``): an exponential moving average of the
  task group's PELT load ``tg->load_avg`` over a window of
  ``tg_load_avg_ema_window`` scheduler ticks, best at 1000 ticks (about 4 s
  at HZ=250) [§4.2, Appendix A.2].  Lower credit = less loaded function.
* Per-CPU ordering (``entity_before``) and wakeup preemption
  (``check_preempt_wakeup``) compare the Load Credit of latency-aware group
  entities instead of their vruntime [Appendix A.3]: the least loaded function
  runs first and keeps the CPU "as long [as] no other cgroup has a lower
  Load Credit" [§4.2]; threads inside a function stay under CFS.
* Placement (``select_task_rq_fair``): a waking task of a function with a
  lower Load Credit goes to a CPU running a task of a function with a higher
  one; the running task's credit is cached per CPU and tested by the
  callback ``cpu_has_higher_load_task`` while the candidate CPUs are
  scanned [§4.3, Appendix A.3].
* Load balancing uses Load Credit "as a greedy heuristic to identify a
  suitable, preferably idle, target CPU core" [§4.3].

What the paper leaves open is an option with a default (LagsConfig says
why each default was chosen).

Load Credit in continuous time.  The kernel updates the EMA when
``update_tg_load_avg`` runs, so its time constant in the kernel would
follow event rates (how many CPUs are busy, how often loads move by 1/64).
Here the EMA is the one the window in ticks describes, kept in continuous
time so that it does not depend on which CPUs tick: a per-tick smoothing
factor a (``ema_form``) becomes the decay rate beta = -ln(1 - a) / TICK_NSEC
per ns, and

    dLC/dt = beta * (S(t) - LC)

is integrated exactly and lazily.  The load signal S is kept as
W + D * exp(-lambda * (t - T)), lambda being PELT's decay rate (32 ms half
life): for ``load_signal=runnable`` it is the sum over CPUs of the group's
cfs_rq ``load_avg`` brought to the present (tg->load_avg as it would be with
blocked load always decayed -- the simulator's own tg->load_avg is only
republished when a cfs_rq is touched, so it keeps the load of tasks that
have exited); for ``running`` it is a PELT average of 1024 x the number of
the function's tasks on a CPU (util_avg summed over CPUs).  Between
changes the signal is exactly that exponential, so the EMA has a closed
form; the policy folds it forward before, and re-reads the changed cfs_rqs
after, every call that can change them (enqueue, dequeue, tick, migrate,
exit; context switches for ``running``).  Cost: O(depth) per such call.
Nothing here writes CFS state, so with every mechanism switched off LAGS
runs exactly as CFS.

Throttled functions (cpu.max).  A throttled cfs_rq's PELT stands still
(sim/rq.py), so its load is read on that cfs_rq's clock and, as in the
patched kernel (whose EMA is fed from tg->load_avg in update_tg_load_avg),
a throttled function's contribution stops moving.  The closed form above
assumes each contribution keeps converging to its cfs_rq's queued weight
until the next re-read; nothing re-reads at a throttle or an unthrottle
(they move group entities, not tasks), so during a throttle the credit
drifts toward the throttled cfs_rq's queued weight, a throttled function
looks more loaded than the kernel's would, and the next enqueue, dequeue
or tick of one of its tasks on that CPU brings it back.  The paper does
not discuss bandwidth control beyond noting that dense deployments
disable it [§2.1], and none of its experiments set cpu.max.

Ordering data structure.  Credits drift continuously, so a heap keyed by
credit would go stale while entities wait.  Each cfs_rq keeps CFS's vruntime
heap for entities that are not latency-aware, and a set of its queued
latency-aware group entities (CreditQueue) that is scanned when the
leftmost entity is needed: O(k) credit evaluations for k queued function
entities on that cfs_rq, once per instant and queue (the answer is
memoised until the queue changes).

LAGS overrides CFS's timeline hooks (``_enqueue_timeline``,
``_dequeue_timeline``, ``_pick_first_entity``: the kernel's
``__enqueue_entity``, ``__dequeue_entity``, ``__pick_first_entity``).
``stats`` counts how often each mechanism acted (the
ablation tests read it); ``load_credit``/``set_load_credit`` read and write
tg->load_avg_ema.

Not modelled: the kernel's rbtree keeps entities at the positions their
credits had when they were inserted (its order goes stale as credits
drift; here the order is always current); the lost ``cpu.shares`` support
[Appendix A.1] (workloads must keep weight 100 / shares 1024 for LAGS to mean
what the paper means: nothing enforces it); Load Credit in NUMA balancing
[§5, §7]; whatever the CFS model leaves out (cfs.py's docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

import cython

if cython.compiled:            # the C library's exp: no Python call, no boxing
    from cython.cimports.libc.math import exp
else:
    from math import exp

from policies.kernel.cfs import CFS, CfsConfig, find_matching_se, set_next_buddy
from sim.rq import NICE_0_LOAD, PELT_HALFLIFE_NS, CfsRq, SchedEntity
from sim.sched_class import tunable
from sim.sched_flags import CPU_NOT_IDLE, WF_FORK

INF = math.inf

# which cgroups are latency-aware: every leaf cgroup, or path globs
LEAVES = "leaves"
EMA_FORMS = ("simple", "span", "halflife")
LOAD_SIGNALS = ("runnable", "running")
TIE_BREAKS = ("vruntime", "fifo")
MIXED_ORDERS = ("vruntime", "aware_first")


@dataclass
class LagsConfig(CfsConfig):
    """CFS's keys plus the LAGS ones.  Section numbers are those of the LAGS
    paper ("Mitigating context switching in densely packed Linux clusters
    with Latency-Aware Group Scheduling"); each default the paper leaves
    open says why it was chosen."""
    # cpu.latency_awareness (Appendix A.2): which cgroups are functions.
    # "leaves": every cgroup without child cgroups, which in the shipped
    # workloads is exactly the function cgroups (poisson: faas.slice/func-N;
    # periodic: each group; worker_pool: server) and never their parent
    # slices.  Otherwise comma-separated path globs, "*" matching within one
    # path component, e.g. "/faas.slice/*" as the authors' standalone setup
    # (section 5), or "/kubepods.slice/kubepods-burstable.slice/*" for
    # Knative pods (Appendix A.2; flagged pods may have child cgroups, their
    # threads then count for the pod).  "" flags nothing: LAGS is then CFS.
    latency_aware: str = LEAVES
    # tg_load_avg_ema_window (Appendix A.2): the Load Credit window in
    # scheduler ticks; 1000 ticks (4 s at HZ=250) was best in Fig. 6
    # (section 4.2).
    window_ticks: int = tunable(1000, range=(1, None))
    # EMA form (not given by the paper): simple = LC += (load - LC) / window
    # per tick, the kernel idiom for integer moving averages (cf.
    # update_avg()); its time constant is the window, matching "roughly
    # equivalent to 4 seconds" (section 4.2); span = alpha 2 / (window + 1)
    # (time constant ~window/2); halflife = weights halve every window.  Kept
    # in continuous time (ema_rate), so it does not depend on how many CPUs
    # are busy.
    ema_form: str = tunable("simple", choices=EMA_FORMS)
    # Load signal: runnable = tg->load_avg, PELT load, which in 5.18 counts
    # runnable (queued + running) time (section 4.2, Appendix A.2); running
    # = a util_avg-like PELT of running time only (LAS's "attained service").
    load_signal: str = tunable("runnable", choices=LOAD_SIGNALS)
    # Tick preemption between function entities: true = at each tick,
    # preempt the running function when a queued one has a lower Load Credit
    # (a function runs "as long [as] no other cgroup has a lower Load
    # Credit"; once its credit rises "other tasks are then prioritised",
    # section 4.2); tied credits share by CFS's slices.  false = no tick
    # preemption between functions at all (the authors' scripts'
    # sched_disable_vruntime_preemption=1, not in the paper): a function
    # keeps the CPU until it blocks or a lower-credit one wakes, so equally
    # loaded CPU hogs never alternate.
    tick_preemption: bool = tunable(True)
    # calc_group_shares for function entities: true keeps CFS's spreading of
    # tg->shares over CPUs by load; the paper keeps every CFS feature except
    # cpu.shares (Appendix A.1).  false = each CPU's function entity keeps
    # the full shares (the authors' scripts'
    # sched_disable_calc_group_shares=1, not in the paper).
    group_shares_recalc: bool = tunable(True)
    # Ties.  Credits closer than tie_margin (load units; 1024 = one runnable
    # nice-0 thread) are equal: 1 is the resolution of the kernel's integer
    # tg->load_avg_ema.  Equal credits are then ordered by vruntime (LAS
    # serves equal attained service as processor sharing, section 4.2) or
    # fifo (queueing order, as the rbtree inserts equal keys).
    tie_break: str = tunable("vruntime", choices=TIE_BREAKS)
    tie_margin: float = tunable(1.0, range=(0, None))
    # A function entity next to a non-function one in the same cfs_rq (the
    # paper never mixes them, section 4.2): vruntime = compare them as CFS
    # does (fair.c's entity_before outside function pairs; non-function
    # cgroups keep their fair share); aware_first = functions always first,
    # as the SCHED_RR of CFS-LAGS-static (section 4.1; can starve other
    # cgroups).
    mixed_order: str = tunable("vruntime", choices=MIXED_ORDERS)
    # Ablations: each mechanism of the patch on its own switch (Appendix
    # A.3).  All false gives CFS's results exactly.
    lags_ordering: bool = tunable(True)           # entity_before by Load Credit
    lags_wakeup_preemption: bool = tunable(True)  # check_preempt_wakeup by Load Credit
    lags_placement: bool = tunable(True)          # cpu_has_higher_load_task in select_task_rq
    # Load Credit pull in load balancing (section 4.3)
    lags_balancing: bool = tunable(True)


def _one_of(key: str, value: str, choices: tuple) -> str:
    """``value`` of scheduler key ``key`` if it is one of ``choices`` (a
    plain-dict config reaches the policy without scenarios.validate)."""
    if value not in choices:
        raise ValueError(f"scheduler.{key} = {value!r}: choose from {', '.join(choices)}")
    return value


def ema_rate(form: str, window_ticks: int, tick_ns: int) -> float:
    """Decay rate per ns of the Load Credit EMA (math.inf: no smoothing).

    simple:   LC += (S - LC) / W each tick (time constant ~W ticks)
    span:     LC += (S - LC) * 2 / (W + 1) each tick (W-period EMA)
    halflife: an old sample's weight halves every W ticks
    """
    w = int(window_ticks)
    if w < 1:
        raise ValueError(f"scheduler.window_ticks = {w}: must be >= 1")
    if form == "simple":
        alpha = 1.0 / w
    elif form == "span":
        alpha = 2.0 / (w + 1)
    elif form == "halflife":
        return math.log(2) / (w * tick_ns)
    else:
        raise ValueError(f"scheduler.ema_form = {form!r}: choose from {', '.join(EMA_FORMS)}")
    if alpha >= 1.0:
        return math.inf
    return -math.log1p(-alpha) / tick_ns


def _cgroup_globs(spec: str) -> list[list[str]]:
    return [p.strip().strip("/").split("/") for p in spec.split(",") if p.strip()]


def _matches(path: str, globs: list[list[str]]) -> bool:
    parts = path.strip("/").split("/")
    return any(len(g) == len(parts) and all(fnmatchcase(a, b) for a, b in zip(parts, g))
               for g in globs)


def waits_on(tg, src):
    """Whether group ``tg`` has a task waiting (queued, not running) on rq ``src``."""
    h = cython.cast(CfsRq, tg.cfs_rq[src.cpu]).h_nr_running
    curr = src.curr
    return h > 1 or (h == 1 and (curr is None or curr.tg is not tg))


def waits_in(tg, sources):
    """Whether group ``tg`` has a task waiting on one of the rqs ``sources``
    (module functions, not methods: the pull asks it of every function
    until one is found, and a compiled call needs no method dispatch)."""
    for src in sources:
        if waits_on(tg, src):
            return True
    return False


class LoadCredit:
    """tg->load_avg_ema of task group ``tg``, with its load signal kept as
    S(t) = W + D * exp(-lambda * (t - T)) since the last fold at T."""

    __slots__ = ("tg", "ema", "W", "D", "T", "key", "aware", "chain")

    def __init__(self, tg, now: int):
        self.tg = tg
        self.ema = 0.0
        self.W = 0.0
        self.D = 0.0
        self.T = now
        # its value as an ordering last read it (the credit order, a
        # queue's first), at that instant: read back by the same ordering
        # only, at the same instant, when smoothing fixes the value
        self.key = 0.0
        # cpu.latency_awareness of the group
        self.aware = False
        # LAGS._chain(tg), once walked (None: not since the last new group)
        self.chain = None


class CreditQueue:
    """A cfs_rq's queued latency-aware group entities (``ses``, in queueing
    order) and their functions' LoadCredits (``lcs``, the same order: two
    lists a compiled scan reads by index, where a dict cost a hash-table
    walk per entity), with the first of them by credit memoised
    for the instant it was found (``first``, ``first_at``).  With smoothing
    a credit's value at an instant is fixed once read (folding is one-way,
    and re-reading the load signal changes only where the EMA goes next),
    and a queued entity's vruntime and rb_seq change only through its own
    dequeue and enqueue, which clear the memo; so within one instant the
    answer is the same until the queue changes.  update_curr() asks it at
    every level on every accounting (update_min_vruntime), many times per
    instant.

    It is the cfs_rq's sched_priv, and also holds what the cfs_rq of a
    latency-aware group last contributed to that group's load signal
    (``contrib_w``, ``contrib_a`` at ``contrib_t``; ``contrib_read``: ever
    read), which LAGS._resync replaces."""

    __slots__ = ("ses", "lcs", "first", "first_at", "contrib_w", "contrib_a", "contrib_t",
                 "contrib_read")

    def __init__(self):
        self.ses = []
        self.lcs = []
        self.first = None
        self.first_at = -1
        self.contrib_w = 0
        self.contrib_a = 0.0
        self.contrib_t = 0
        self.contrib_read = False

    def index(self, se) -> int:
        """Where ``se`` is queued (-1: not queued)."""
        ses = self.ses
        for i in range(len(ses)):
            if ses[i] is se:
                return i
        return -1

    def put(self, se, lc) -> None:
        """Queue ``se`` last, or give it ``lc`` where it is queued."""
        i = self.index(se)
        if i < 0:
            self.ses.append(se)
            self.lcs.append(lc)
        else:
            self.lcs[i] = lc

    def remove(self, se) -> bool:
        """Unqueue ``se``; whether it was queued."""
        i = self.index(se)
        if i < 0:
            return False
        del self.ses[i]
        del self.lcs[i]
        return True


class LAGS(CFS):
    name = "lags"
    stats_prefix = "lags"         # the summary's lags_<counter> columns

    def __init__(self, cfg, machine):
        super().__init__(cfg, machine)
        spec = str(cfg.latency_aware).strip()
        self.leaves = spec == LEAVES
        self.globs = [] if self.leaves else _cgroup_globs(spec)
        self.window_ticks = int(cfg.window_ticks)
        self.ema_form = _one_of("ema_form", cfg.ema_form, EMA_FORMS)
        self.load_signal = _one_of("load_signal", cfg.load_signal, LOAD_SIGNALS)
        self.tick_preemption = bool(cfg.tick_preemption)
        self.group_shares_recalc = bool(cfg.group_shares_recalc)
        self.tie_break = _one_of("tie_break", cfg.tie_break, TIE_BREAKS)
        self._fifo = self.tie_break == "fifo"
        self.tie_margin = float(cfg.tie_margin)
        if self.tie_margin < 0:
            raise ValueError(f"scheduler.tie_margin = {self.tie_margin}: must be >= 0")
        self.mixed_order = _one_of("mixed_order", cfg.mixed_order, MIXED_ORDERS)
        self._aware_first = self.mixed_order == "aware_first"
        self.lags_ordering = bool(cfg.lags_ordering)
        self.lags_wakeup_preemption = bool(cfg.lags_wakeup_preemption)
        self.lags_placement = bool(cfg.lags_placement)
        self.lags_balancing = bool(cfg.lags_balancing)
        if self.lags_balancing and self.leaves:
            # the pull scans one function's queued tasks on a CPU, in
            # rq->cfs_tasks order: each leaf cfs_rq keeps that list
            for rq in machine.rqs:
                rq.cfs_tasks.per_cfs_rq = True

        self._lambda = math.log(2) / PELT_HALFLIFE_NS
        self._beta = ema_rate(self.ema_form, self.window_ticks, machine.tick_ns)
        # the decay factors of the last fold's interval: the credits a scan
        # folds were mostly last folded together, so they share it
        self._fold_dt = 0
        self._fold_y = 1.0
        self._fold_z = 1.0
        self._runnable = self.load_signal == "runnable"
        ncpus = machine.topology.nr_cpus
        # every group's LoadCredit, in creation order (also its tg.sched_priv)
        self._credit_of: dict = {}            # TaskGroup -> LoadCredit
        self._order: list = []                # the aware ones: _credit_order() at _order_at
        self._order_at = -1
        self._queues: list = []               # every cfs_rq's CreditQueue (its sched_priv)
        self._curr_credit = [None] * ncpus    # (task, its function's credit) per CPU
        self._running = [None] * ncpus        # the fair task counted running per CPU
        # how often each mechanism acted: entities queued by credit, credit
        # preemptions at wakeup and tick, placements that differ from CFS's,
        # and credit pulls by the balancer
        self.stats = {"credit_queued": 0, "wakeup_preemptions": 0, "tick_preemptions": 0,
                      "placements": 0, "pulls": 0}

    # ------------------------------------------------------------------
    # cpu.latency_awareness
    def init_task_group(self, tg):
        lc = tg.sched_priv = self._credit_of[tg] = LoadCredit(tg, self.clock._now)
        if self.leaves:
            lc.aware = True
            parent = tg.parent.sched_priv
            if parent is not None:
                # a cgroup with children is no leaf
                cython.cast(LoadCredit, parent).aware = False
        elif _matches(tg.name, self.globs):
            lc.aware = True
        # a new group (maybe a function): chains walked again, the order
        # re-sorted at its next read
        order = []
        for lc in self._credit_of.values():
            lc.chain = None
            if lc.aware:
                order.append(lc)
        self._order = order
        self._order_at = -1

    def aware_groups(self) -> list:
        """The latency-aware task groups, in creation order."""
        return [tg for tg, lc in self._credit_of.items() if lc.aware]

    def _chain(self, tg) -> tuple:
        """The Load Credits of the latency-aware groups among ``tg`` and its
        ancestors, nearest first: the first is the task's function's.  (The
        credits themselves, so that hot paths need no lookup by group.)
        The root group has no credit and is never latency-aware."""
        own = tg.sched_priv
        if own is None:
            return ()
        chain = cython.cast(LoadCredit, own).chain
        if chain is None:
            found = []
            g = tg
            while g is not None:
                lc = g.sched_priv
                if lc is not None and cython.cast(LoadCredit, lc).aware:
                    found.append(lc)
                g = g.parent
            chain = cython.cast(LoadCredit, own).chain = tuple(found)
        return chain

    def _aware_se(self, se) -> bool:
        q = se.my_q
        if q is None:
            return False
        lc = q.tg.sched_priv
        return lc is not None and cython.cast(LoadCredit, lc).aware

    def _queue_of(self, cfs_rq) -> CreditQueue:
        """The cfs_rq's CreditQueue, made at its first use."""
        cq = cfs_rq.sched_priv
        if cq is None:
            cq = cfs_rq.sched_priv = CreditQueue()
            self._queues.append(cq)
        return cq

    # ------------------------------------------------------------------
    # Load Credit
    def _fold(self, lc: LoadCredit, now: int) -> None:
        """Advance the EMA from lc.T to now under the signal W + D e^-lambda(t-T)."""
        dt = now - lc.T
        if dt <= 0:
            return
        lam, beta = self._lambda, self._beta
        if dt != self._fold_dt:
            self._fold_dt = dt
            self._fold_y = exp(-lam * dt)
            self._fold_z = exp(-beta * dt) if beta != INF else 0.0
        y = self._fold_y
        W, D = lc.W, lc.D
        if beta == INF:
            lc.ema = W + D * y
        else:
            z = self._fold_z
            if abs(beta - lam) > 1e-9 * lam:
                c = beta * D / (beta - lam)
                lc.ema = W + c * y + (lc.ema - W - c) * z
            else:
                lc.ema = W + (lc.ema - W + beta * D * dt) * z
        lc.D = D * y
        lc.T = now

    def load_credit(self, tg) -> float:
        """tg->load_avg_ema now."""
        return self._credit(self._credit_of[tg], self.clock._now)

    def _credit(self, lc: LoadCredit, now: int) -> float:
        """The value of ``lc`` at ``now``, which is the present: folding is
        one-way, and memoised per instant."""
        if lc.T != now:
            self._fold(lc, now)
        if self._beta == INF:
            return lc.W + lc.D
        return lc.ema

    def set_load_credit(self, tg, value: float) -> None:
        """Write tg->load_avg_ema (for experiments and tests); it then
        evolves from ``value`` toward the group's load as usual."""
        lc = self._credit_of[tg]
        self._fold(lc, self.clock._now)
        lc.ema = float(value)
        for cq in self._queues:
            cq.first = None           # the order at this instant may change

    def _fold_chain(self, chain, now):
        for lc in chain:
            if lc.T != now:
                self._fold(lc, now)

    def _resync(self, lc, cpu, now):
        """Replace the part of ``lc``'s load signal that its group's cfs_rq
        on ``cpu`` contributes by what that holds now (call after anything
        that may have changed it)."""
        cfs_rq = lc.tg.cfs_rq[cpu]
        if lc.T != now:
            self._fold(lc, now)
        lam = self._lambda
        w = cfs_rq.load_weight
        dt = cfs_rq.cfs_rq_clock_pelt(now) - cfs_rq.avg_last_update
        a = cfs_rq.load_avg if dt <= 0 else w + (cfs_rq.load_avg - w) * exp(-lam * dt)
        cq = self._queue_of(cfs_rq)
        if not cq.contrib_read:
            w0, a0 = 0, 0.0
        else:
            w0, a0, t0 = cq.contrib_w, cq.contrib_a, cq.contrib_t
            if now != t0:
                a0 = w0 + (a0 - w0) * exp(-lam * (now - t0))
        if w != w0 or a != a0:
            lc.W += w - w0
            lc.D += (a - w) - (a0 - w0)
        cq.contrib_w, cq.contrib_a, cq.contrib_t = w, a, now
        cq.contrib_read = True

    def _resync_chain(self, chain, cpu, now):
        for lc in chain:
            self._resync(lc, cpu, now)

    def _set_running(self, cpu, p):
        """``load_signal=running``: the function of the task on ``cpu`` changed."""
        old = self._running[cpu]
        if old is p:
            return
        now = self.clock._now
        if old is not None:
            for lc in self._chain(old.tg):
                self._fold(lc, now)
                lc.W -= NICE_0_LOAD
                lc.D += NICE_0_LOAD
        if p is not None:
            for lc in self._chain(p.tg):
                self._fold(lc, now)
                lc.W += NICE_0_LOAD
                lc.D -= NICE_0_LOAD
        self._running[cpu] = p

    def credit_cmp(self, a, b) -> int:
        """-1 / 0 / 1: the credit of group entity ``a`` is lower than, ties
        with (within tie_margin), or is higher than that of ``b``."""
        now = self.clock._now
        la = self._credit(a.my_q.tg.sched_priv, now)
        lb = self._credit(b.my_q.tg.sched_priv, now)
        if abs(la - lb) <= self.tie_margin:
            return 0
        return -1 if la < lb else 1

    # ------------------------------------------------------------------
    # task-level hooks: keep the load signal in step
    def enqueue_task(self, rq, p, flags):
        chain = self._chain(p.tg)
        if not chain or not self._runnable:
            return CFS.enqueue_task(self, rq, p, flags)
        now = self.clock._now
        self._fold_chain(chain, now)
        CFS.enqueue_task(self, rq, p, flags)
        self._resync_chain(chain, rq.cpu, now)

    def dequeue_task(self, rq, p, flags):
        chain = self._chain(p.tg)
        if not chain or not self._runnable:
            return CFS.dequeue_task(self, rq, p, flags)
        now = self.clock._now
        self._fold_chain(chain, now)
        CFS.dequeue_task(self, rq, p, flags)
        self._resync_chain(chain, rq.cpu, now)

    def migrate_task_rq(self, p, new_cpu):
        chain = self._chain(p.tg)
        if not chain or not self._runnable:
            return CFS.migrate_task_rq(self, p, new_cpu)
        now = self.clock._now
        old_cpu = p.se.cfs_rq.cpu
        self._fold_chain(chain, now)
        CFS.migrate_task_rq(self, p, new_cpu)
        self._resync_chain(chain, old_cpu, now)

    def task_dead(self, p):
        chain = self._load_change_begins(p)
        CFS.task_dead(self, p)
        self._load_change_ends(chain, p)

    def switched_from_fair(self, p):
        chain = self._load_change_begins(p)
        CFS.switched_from_fair(self, p)
        self._load_change_ends(chain, p)

    def switched_to_fair(self, p):
        chain = self._load_change_begins(p)
        CFS.switched_to_fair(self, p)
        self._load_change_ends(chain, p)

    def _load_change_begins(self, p):
        """The task's load is added or removed without an enqueue or
        dequeue: the credit chain first folds the load it had up to now
        (returned; None when there is nothing to fold)."""
        chain = self._chain(p.tg)
        if not chain or not self._runnable:
            return None
        self._fold_chain(chain, self.clock._now)
        return chain

    def _load_change_ends(self, chain, p):
        if chain is not None:
            self._resync_chain(chain, p.se.cfs_rq.cpu, self.clock._now)

    def task_tick(self, rq, curr):
        chain = self._chain(curr.tg)
        if not chain:
            return CFS.task_tick(self, rq, curr)
        now = self.clock._now
        if self._runnable:
            # group entities are reweighted on the tick (update_cfs_group)
            self._fold_chain(chain, now)
            CFS.task_tick(self, rq, curr)
            self._resync_chain(chain, rq.cpu, now)
        else:
            CFS.task_tick(self, rq, curr)
        self._curr_credit[rq.cpu] = (curr, self._credit(chain[0], now))

    def pick_next_task(self, rq, prev):
        p = CFS.pick_next_task(self, rq, prev)
        self._switched(rq, p)
        return p

    def set_next_task(self, rq, p):
        CFS.set_next_task(self, rq, p)
        self._switched(rq, p)

    def put_prev_task(self, rq, prev):
        CFS.put_prev_task(self, rq, prev)
        if self._running[rq.cpu] is prev:
            self._switched(rq, None)

    def _switched(self, rq, p):
        """``p`` (None: nothing fair) now runs on rq: refresh the per-CPU
        cache of the running task's Load Credit."""
        cpu = rq.cpu
        if not self._runnable:
            self._set_running(cpu, p)
        chain = self._chain(p.tg) if p is not None else ()
        self._curr_credit[cpu] = (p, self._credit(chain[0], self.clock._now)) if chain else None

    def update_cfs_group(self, se):
        # group_shares_recalc=false: a function's entities keep tg->shares
        # on every CPU (no calc_group_shares)
        if not self.group_shares_recalc and self._aware_se(se):
            return
        CFS.update_cfs_group(self, se)

    # ------------------------------------------------------------------
    # ordering: entity_before and the timeline
    def entity_before(self, a, b) -> bool:
        if self.lags_ordering:
            aa, ab = self._aware_se(a), self._aware_se(b)
            if aa and ab:
                c = self.credit_cmp(a, b)
                if c:
                    return c < 0
                if self._fifo:
                    # a (curr, not queued) goes behind b, queued before it
                    return False
            elif (aa or ab) and self._aware_first:
                return aa
        return a.vruntime < b.vruntime

    def _enqueue_timeline(self, cfs_rq, se):
        if self.lags_ordering and self._aware_se(se):
            # the queueing order lives in se.rb_seq, as on CFS's timeline
            se.rb_seq = self._next_seq()
            cq = self._queue_of(cfs_rq)
            cq.put(se, se.my_q.tg.sched_priv)
            cq.first = None
            self.stats["credit_queued"] += 1
            return
        CFS._enqueue_timeline(self, cfs_rq, se)

    def _dequeue_timeline(self, cfs_rq, se):
        se.rb_seq = 0
        cq = cfs_rq.sched_priv
        if cq is not None and cq.remove(se):
            cq.first = None

    def _pick_first_entity(self, cfs_rq):
        left = CFS._pick_first_entity(self, cfs_rq)
        cq = cfs_rq.sched_priv
        if cq is None or not cq.ses:
            return left
        first = self._credit_first(cq)
        if left is None or self._aware_first or first.vruntime < left.vruntime:
            return first
        return left

    def _credit_first(self, cq):
        """The queued function entity with the lowest Load Credit; ties
        (within tie_margin of the lowest) by vruntime or queueing order."""
        ses, lcs = cq.ses, cq.lcs
        n = len(ses)
        if n == 1:
            return ses[0]
        now = self.clock._now
        if cq.first is not None and cq.first_at == now and self._beta != INF:
            return cq.first
        low = INF
        for i in range(n):
            lc = cython.cast(LoadCredit, lcs[i])
            lc.key = self._credit(lc, now)
            low = min(low, lc.key)
        low += self.tie_margin
        # loops, not min(key=lambda): a compiled method has no closures.
        # Among the tied, the least (vruntime, rb_seq), or the least rb_seq
        # under fifo.
        best = None
        for i in range(n):
            if cython.cast(LoadCredit, lcs[i]).key > low:
                continue
            se = cython.cast(SchedEntity, ses[i])
            if best is not None:
                if self._fifo or se.vruntime == best.vruntime:
                    if se.rb_seq > best.rb_seq:
                        continue
                elif se.vruntime > best.vruntime:
                    continue
            best = se
        cq.first, cq.first_at = best, now
        return best

    def wakeup_preempt_buddy(self, buddy, left):
        """1 if ``buddy`` should not run instead of the leftmost entity: by
        credit between functions (tie: by vruntime, or -1 under fifo);
        CFS's vruntime test otherwise."""
        if self.lags_ordering and self._aware_se(buddy) and self._aware_se(left):
            c = self.credit_cmp(buddy, left)
            if c:
                return c
            if self._fifo:
                return -1
        return self.wakeup_preempt_entity(buddy, left)

    # ------------------------------------------------------------------
    # preemption
    def check_preempt_tick(self, cfs_rq, curr):
        if not self.lags_ordering:
            return CFS.check_preempt_tick(self, cfs_rq, curr)
        left = self._pick_first_entity(cfs_rq)
        if left is None:
            return CFS.check_preempt_tick(self, cfs_rq, curr)
        aware_curr, aware_left = self._aware_se(curr), self._aware_se(left)
        if not (aware_curr and aware_left):
            if aware_curr != aware_left and self._aware_first:
                if aware_left:
                    # a function waits behind another cgroup's entity
                    cfs_rq.rq.need_resched = True
                    self.clear_buddies(cfs_rq, curr)
                return
            return CFS.check_preempt_tick(self, cfs_rq, curr)
        if not self.tick_preemption:
            return
        c = self.credit_cmp(left, curr)
        if c < 0:
            # a function with a lower Load Credit is waiting
            cfs_rq.rq.need_resched = True
            self.clear_buddies(cfs_rq, curr)
            self.stats["tick_preemptions"] += 1
        elif c == 0:
            # tied credits share the CPU by CFS's slices (LAS: PS among equals)
            CFS.check_preempt_tick(self, cfs_rq, curr)

    def hrtick_delay(self, rq):
        """HRTICK ends CFS slices; a function that has used its slice but is
        still first by Load Credit is re-picked at once, so the timer would
        refire every 10 us: leave such a task to the tick."""
        delay = CFS.hrtick_delay(self, rq)
        if delay is not None and delay <= 0 and self.lags_ordering \
                and self._chain(rq.curr.tg):
            return None
        return delay

    def check_preempt_wakeup(self, rq, p):
        if not self.lags_wakeup_preemption:
            return CFS.check_preempt_wakeup(self, rq, p)
        curr = rq.curr
        if curr is None or curr is p or rq.need_resched or not self.wakeup_preemption:
            return CFS.check_preempt_wakeup(self, rq, p)
        se, pse = find_matching_se(curr.se, p.se)
        aware_se, aware_pse = self._aware_se(se), self._aware_se(pse)
        if not (aware_se and aware_pse):
            if aware_se == aware_pse or not self._aware_first:
                return CFS.check_preempt_wakeup(self, rq, p)
            # mixed_order=aware_first: a function preempts any other cgroup
            c = -1 if aware_pse else 1
        else:
            self._update_curr(se.cfs_rq)
            c = self.credit_cmp(pse, se)
        if c == 0 and not self._fifo:
            return CFS.check_preempt_wakeup(self, rq, p)
        if c < 0:
            set_next_buddy(pse)
            rq.need_resched = True
            self.stats["wakeup_preemptions"] += 1

    # ------------------------------------------------------------------
    # placement: select_task_rq_fair with cpu_has_higher_load_task
    def _cached_credit(self, cpu):
        entry = self._curr_credit[cpu]
        if entry is None:
            return None
        m = self.machine
        rq = m.rqs[cpu]
        return entry[1] if rq.curr is entry[0] else None

    def _higher_load(self, cpu, credit) -> bool:
        cached = self._cached_credit(cpu)
        return cached is not None and cached - credit > self.tie_margin

    def cpu_has_higher_load_task(self, cpu, p) -> bool:
        """The task running on ``cpu`` belongs to a function whose cached
        Load Credit is higher than that of ``p``'s function."""
        chain = self._chain(p.tg)
        return bool(chain) and self._higher_load(cpu, self._credit(chain[0], self.clock._now))

    def select_task_rq(self, p, prev_cpu, wake_flags):
        """select_task_rq_fair() with cpu_has_higher_load_task() next to the
        idle tests, as the SCHED_IDLE patch the paper follows [§4.3] put
        sched_idle_cpu(): the first candidate, in CFS's order, that is idle
        or runs a task of a higher-credit function [§4.3, Appendix A.3]; a
        fully idle core still comes first in the LLC scan."""
        cpu = CFS.select_task_rq(self, p, prev_cpu, wake_flags)
        if not self.lags_placement:
            return cpu
        chain = self._chain(p.tg)
        if not chain:
            return cpu
        credit = self._credit(chain[0], self.clock._now)
        m = self.machine
        allowed = p.cpus_allowed
        if allowed is not None and prev_cpu not in allowed:
            prev_cpu = min(allowed)
        if wake_flags & WF_FORK:
            # find_idlest_cpu(): candidates nearest first; none: least loaded
            pick = self._first_fit(p, m.cpus_by_distance[prev_cpu], credit)
        elif m.idle_cpu(prev_cpu) or self._higher_load(prev_cpu, credit):
            pick = prev_cpu         # select_idle_sibling(): the target itself
        else:
            pick = self._first_fit(p, m.llc_wrap[prev_cpu], credit)
        if pick is None:
            return cpu
        if pick != cpu:
            self.stats["placements"] += 1
        return pick

    def _first_fit(self, p, cpus, credit):
        """The first allowed CPU of ``cpus`` on a fully idle core, else the
        first that is idle or runs a higher-credit function, else None."""
        m = self.machine
        allowed = p.cpus_allowed
        first = None
        for c in cpus:
            if allowed is not None and c not in allowed:
                continue
            if m.idle_cpu(c):
                if m.idle_core(c):
                    return c
                if first is None:
                    first = c
            elif first is None and self._higher_load(c, credit):
                first = c
        return first

    # ------------------------------------------------------------------
    # load balancing: the greedy Load Credit pull
    def load_balance(self, dst_rq, span, idle):
        if self.lags_balancing:
            moved = self._lc_pull(dst_rq, span, idle)
            if moved:
                return moved
        return CFS.load_balance(self, dst_rq, span, idle)

    def _lc_pull(self, dst_rq, span, idle):
        """Move the waiting task of the lowest-credit function in ``span``
        to ``dst_rq`` if dst is (becoming) idle or runs a task of a function
        with a higher credit, where it will run at once.  Among equal
        credits the first task in scan order (CPUs of ``span`` in order,
        each queue least recently run first) goes.

        Functions are tried in credit order and a CPU's queue is scanned
        only where that function has a waiting task, so a pull costs about
        one queue scan rather than a scan of every queued task in the
        domain (thousands on an overloaded dense host)."""
        dst_idle = idle != CPU_NOT_IDLE
        ceiling = INF           # the credit of dst's running function, if busy
        if not dst_idle:
            cached = self._cached_credit(dst_rq.cpu)
            if cached is None:
                return 0
            ceiling = cached
        rqs = self.machine.rqs
        # the CPUs something could be pulled from, in span order: nothing
        # moves until the pull, so they are found once per call
        sources = []
        for cpu in span:
            src = rqs[cpu]
            if src is not dst_rq and src.nr_running >= 2:
                sources.append(src)
        if not sources:
            return 0            # nothing waits anywhere: no need to rank the functions
        now = self.clock._now
        order = self._credit_order(now)
        n = len(order)
        i = 0
        while i < n:
            lc = cython.cast(LoadCredit, order[i])
            credit = lc.key
            if not ceiling - credit > self.tie_margin:
                return 0        # credits only rise from here
            j = i + 1
            while j < n and cython.cast(LoadCredit, order[j]).key == credit:
                j += 1
            if j == i + 1:
                # a function alone at its credit (the usual case): most
                # have no task waiting in the span, which one pass tells
                if waits_in(lc.tg, sources) and self._pull_first(dst_rq, sources, {lc}, now):
                    return 1
            elif self._pull_first(dst_rq, sources, {order[k] for k in range(i, j)}, now):
                return 1
            i = j
        return 0

    def _credit_order(self, now):
        """The LoadCredits of every latency-aware group, lowest credit
        (``key``, set here) first; equal credits in no particular order
        (the pull takes them as a set).  With smoothing a credit's value at
        an instant is fixed once read (folding is one-way), so all CPUs
        balancing at one tick share one sort; unsmoothed credits follow load
        changes within the instant.

        Credits drift slowly against each other, so the last order is
        nearly sorted now: an insertion sort of it costs one pass plus one
        step per pair that changed places since (a fresh sort of hundreds
        of functions per balance was a fifth of a CFS-LAGS run)."""
        order = self._order
        if self._order_at == now and self._beta != INF:
            return order
        n = len(order)
        for i in range(n):
            lc = cython.cast(LoadCredit, order[i])
            lc.key = self._credit(lc, now)
        for i in range(1, n):
            lc = cython.cast(LoadCredit, order[i])
            key = lc.key
            j = i
            while j > 0 and cython.cast(LoadCredit, order[j - 1]).key > key:
                order[j] = order[j - 1]
                j -= 1
            if j != i:
                order[j] = lc
        self._order_at = now
        return order

    def _pull_first(self, dst_rq, sources, run, now):
        """Pull the first movable waiting task, in scan order (the rqs
        ``sources`` in order), of a function whose credit is in ``run``."""
        m = self.machine
        dst_cpu = dst_rq.cpu
        tgs = None              # leaves: the run's groups, once a queue is scanned
        one = None              # leaves, one function: its group
        if self.leaves and len(run) == 1:
            for lc in run:
                one = lc.tg
        for src in sources:
            curr = src.curr
            waiting = False
            for lc in run:
                if waits_on(lc.tg, src):
                    waiting = True
                    break
            if not waiting:
                continue
            if one is not None:
                # the function's own cfs_rq lists its tasks in cfs_tasks order
                se = cython.cast(CfsRq, one.cfs_rq[src.cpu]).tasks_head
                while se is not None:
                    p = se.task
                    se = se.leaf_next
                    if p is curr or not self.can_migrate_task(p, dst_cpu, src, now):
                        continue
                    m.move_queued_task(p, src, dst_rq)
                    self.stats["pulls"] += 1
                    return True
                continue
            if tgs is None and self.leaves:
                tgs = {lc.tg for lc in run}
            # rq->cfs_tasks, least recently run first: walked by entity, as
            # the kernel walks se->group_node
            se = src.cfs_tasks.head
            while se is not None:
                p = se.task
                se = se.group_next
                if p is curr:
                    continue
                if self.leaves:
                    # a leaf has no child cgroups: chain[0] is the task's own group
                    if p.tg not in tgs:
                        continue
                else:
                    chain = self._chain(p.tg)
                    if not chain or chain[0] not in run:
                        continue
                if not self.can_migrate_task(p, dst_cpu, src, now):
                    continue
                m.move_queued_task(p, src, dst_rq)
                self.stats["pulls"] += 1
                return True
        return False

POLICY = LAGS
CONFIG = LagsConfig
