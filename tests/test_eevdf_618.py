"""EEVDF as Linux 6.18 runs it (policies/kernel/eevdf.py, kernel "6.18"):
slice protection limited to the shortest queued slice, PREEMPT_SHORT, the
reschedule at the end of a protected slice, and the host measurement they
are held to (calibration/bench/slice_preempt.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibration.bench.common import read_bench
from policies.kernel.eevdf import CUSTOM_SLICE_RANGE_NS, EEVDF, EevdfConfig
from sim.costmodel import CostModel
from sim.engine import Engine, s_to_ns
from sim.machine import Machine
from sim.topology import Topology
from simcfg import make_cfg, periodic
from test_eevdf import GROUP_FIELDS, build_with, hosts

DATA = Path(__file__).resolve().parents[1] / "calibration" / "data" / "this-vm"
# the host's base slice: /proc/PID/sched reads se.slice 1400000 on this
# 2-CPU 6.18 VM (0.7 ms x (1 + ilog2(2)))
HOST_BASE_SLICE_NS = 1_400_000
# a wake-up later than this waited for something (a tick, a slice): the
# host's undisturbed lateness is 14-90 us at the 1st-99th percentiles
ON_TIME_NS = 200_000
OLD = {"kernel": "6.6", "preempt_short": False, "place_rel_deadline": False}


class _Hog:
    def burst_done(self, task):
        task.remaining = 10**12
        return 0


class _Periodic:
    """native/wakeup.c: sleeps to absolute deadlines ``period`` apart and
    runs ``run`` ns each time; lateness = start of the run - deadline."""

    def __init__(self, engine, period, run, first):
        self.engine, self.period, self.run = engine, period, run
        self.release = first
        self.late = []

    def burst_done(self, task):
        now = self.engine.now
        self.late.append(now - self.release - self.run)
        task.remaining = self.run
        nxt = self.release + self.period
        while nxt <= now:
            nxt += self.period
        self.release = nxt
        return nxt - now


def slice_preempt_sim(hogs, slice_ns, offset_ns, seconds=1.0, **sched):
    """The slice_preempt benchmark in the simulator: one CPU, ``hogs`` hogs
    and the 10 ms sleeper in one cgroup, the host's base slice; the
    sleeper's first deadline ``offset_ns`` past a tick (the host's phase
    between timer and tick is arbitrary: the test sweeps it)."""
    engine = Engine(1)
    cfg = EevdfConfig(name="eevdf", base_slice_ns=HOST_BASE_SLICE_NS, **sched)
    m = Machine(engine, Topology(1, 1), EEVDF, cfg, CostModel())
    tg = m.create_group("slice/g")
    run = 2_000
    first = 10_000_000 + offset_ns
    owner = _Periodic(engine, 10_000_000, run, first)
    sleeper = m.new_task("wakeup", tg, 0, run, 0, owner)
    sleeper.custom_slice = slice_ns or None
    for i in range(hogs):
        engine.call_at(0, m.wake_up_new_task, m.new_task(f"hog{i}", tg, 0, 10**12, 0, _Hog()), 0)
    engine.call_at(first - run, m.wake_up_new_task, sleeper, 0)
    engine.run(s_to_ns(seconds))
    return np.asarray(owner.late[5:])


@pytest.fixture(scope="module")
def host():
    table, _, meta = read_bench(DATA / "slice_preempt.parquet")
    return table.to_pandas(), meta


def test_host_recording_is_what_the_bench_writes(host):
    frame, meta = host
    assert meta["params"]["repeat"] >= 3
    runs = frame.groupby(["hogs", "slice_ns", "repeat"]).size()
    assert len(runs) == 4 * meta["params"]["repeat"] and runs.min() >= 100


@pytest.mark.parametrize("hogs,slice_ns", [(1, 0), (1, 100_000), (2, 0), (2, 100_000)])
def test_wakeup_beside_hogs_is_on_time_as_on_the_host(host, hogs, slice_ns):
    """A sleeper waking every 10 ms beside hogs on its CPU runs at once in
    98.7-100 % of its wake-ups on this 6.18 host, with the base slice as
    with a 0.1 ms one: the running hog's protected slice (at most the
    shortest slice queued) has almost always ended, and 6.18 reschedules at
    the first update_curr() after that.  The simulator, phases between
    timer and tick swept, must put at least as large a share on time, down
    to the least of the repetitions less three binomial standard errors;
    a model that kept the hog protected until its deadline was renewed at
    the tick would leave up to a third of the wake-ups a tick late."""
    frame, _ = host
    runs = frame[(frame.hogs == hogs) & (frame.slice_ns == slice_ns)].groupby("repeat")
    on_time = runs.lateness_ns.apply(lambda s: (s <= ON_TIME_NS).mean())
    n = runs.size().min()
    low = on_time.min() - 3 * np.sqrt(on_time.min() * (1 - on_time.min()) / n + 1 / n ** 2)
    late = np.concatenate([slice_preempt_sim(hogs, slice_ns, off)
                           for off in range(0, 4_000_000, 250_000)])
    sim_on_time = (late <= ON_TIME_NS).mean()
    print(f"hogs={hogs} slice={slice_ns}: host on time {on_time.round(3).tolist()}, "
          f"sim {sim_on_time:.3f} (bound {low:.3f})")
    assert sim_on_time >= low


def test_host_short_slice_removes_tick_waits(host):
    """What PREEMPT_SHORT shows on the host: with the base slice a few
    wake-ups per run wait for a tick (ms), with a 0.1 ms slice none does in
    most runs: the worst wake-up of the median run is a tick-sized wait
    (about 2 ms) with the base slice and well under 1 ms with the short one.  (The recording, not the model: it fails if a re-recording on
    another kernel loses the effect.)"""
    frame, _ = host
    worst = frame.groupby(["slice_ns", "repeat"]).lateness_ns.max().groupby("slice_ns").median()
    assert worst[0] > 1_000_000 > 2 * worst[100_000]


def _pick_order(hogs, slice_ns, protect_windows, **sched):
    """Run a short- or base-slice sleeper beside hogs and record, for every
    wake-up that found an eligible hog running inside its protected slice,
    whether
    the sleeper got the CPU at once and whether it is what the pick would
    run were the hog not protected."""
    seen = []

    class Watched(EEVDF):
        def check_preempt_wakeup(self, rq, p):
            curr = rq.curr
            if curr is not None and curr is not p:
                # charge curr first, as the check itself does: protection
                # that ran out by now does not count
                self._update_curr(curr.se.cfs_rq)
            # (protection holds only while curr is eligible: the wakee's
            # placement may have moved V left of it)
            protected = curr is not None and curr is not p and self.protect_slice(curr.se) \
                and not rq.need_resched and self.entity_eligible(curr.se.cfs_rq, curr.se)
            super().check_preempt_wakeup(rq, p)
            if protected and isinstance(p.owner, _Periodic):
                seen.append((rq.need_resched, self._pick_eevdf(p.se.cfs_rq, False) is p.se))

    engine = Engine(3)
    cfg = EevdfConfig(name="eevdf", base_slice_ns=HOST_BASE_SLICE_NS, **sched)
    m = Machine(engine, Topology(1, 1), Watched, cfg, CostModel())
    tg = m.create_group("g")
    owner = _Periodic(engine, 3_300_000, 2_000, 3_300_000)
    sleeper = m.new_task("s", tg, 0, 2_000, 0, owner)
    sleeper.custom_slice = slice_ns or None
    for i in range(hogs):
        engine.call_at(0, m.wake_up_new_task, m.new_task(f"hog{i}", tg, 0, 10**12, 0, _Hog()), 0)
    engine.call_at(3_300_000 - 2_000, m.wake_up_new_task, sleeper, 0)
    engine.run(s_to_ns(10.0))
    protect_windows.extend(seen)
    return seen


def test_preempt_short_overrides_protection_and_base_slice_does_not():
    """Wake-ups that find the hog inside its protected slice: a 0.1 ms
    wakee preempts it exactly when the unprotected pick would run it
    (PREEMPT_SHORT, which happens for most), a base-slice wakee never does;
    6.6 semantics (no PREEMPT_SHORT) protect the hog against both."""
    short, base, old = [], [], []
    _pick_order(2, 100_000, short)
    _pick_order(2, 0, base)
    _pick_order(2, 100_000, old, **OLD)
    # (a base-slice wakee mostly leaves the hog ineligible, hence unprotected)
    assert len(short) > 100 and len(base) >= 5 and len(old) >= 5
    assert all(preempted == wins for preempted, wins in short)
    assert sum(preempted for preempted, _ in short) > len(short) / 2
    assert not any(preempted for preempted, _ in base + old)


# --- invariants -------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([None, 100_000, 300_000, 3_000_000]), min_size=2, max_size=6),
       st.sampled_from([0.05, 0.5, 3.0]), st.booleans(), st.integers(0, 2**16))
def test_protected_slice_is_bounded_by_the_shortest_queued_slice(slices, run_ms, parity, seed):
    """6.18 slice protection: whenever curr is picked its vprot lies at
    most at its deadline and, under RUN_TO_PARITY, at most the shortest
    slice queued (curr included) ahead of its vruntime in its own virtual
    time (without it, the normalized base slice); and a curr past its
    protection with others queued is always asked to reschedule by the
    kernel-side update_curr()."""
    checks = {"set": 0, "expired": 0}

    class Watched(EEVDF):
        def set_protect_slice(self, cfs_rq, se):
            super().set_protect_slice(cfs_rq, se)
            limit = self.cfs_rq_min_slice(cfs_rq) if self.run_to_parity \
                else self.normalized_base_slice
            # (something is queued: curr itself)
            assert limit <= max(CUSTOM_SLICE_RANGE_NS[1], self.sysctl_sched_base_slice)
            assert se.vlag <= se.deadline
            assert se.vlag - se.vruntime <= self.calc_delta_fair(min(limit, se.slice), se)
            checks["set"] += 1

        def _update_curr(self, cfs_rq):
            super()._update_curr(cfs_rq)
            curr = cfs_rq.curr
            if curr is not None and cfs_rq.nr_running > 1 and not self.protect_slice(curr):
                assert cfs_rq.rq.need_resched
                checks["expired"] += 1

    class Sleepy:
        def __init__(self, rng):
            self.rng = rng

        def burst_done(self, task):
            task.remaining = int(self.rng.exponential(run_ms * 1e6)) + 1
            return int(self.rng.exponential(2e6)) + 1

    engine = Engine(seed)
    cfg = EevdfConfig(name="eevdf", run_to_parity=parity)
    m = Machine(engine, Topology(1, 1), Watched, cfg, CostModel())
    tg = m.create_group("g")
    rng = engine.rng("sleepy")
    for i, s in enumerate(slices):
        t = m.new_task(f"t{i}", tg, 0, 1_000_000, 0, Sleepy(rng) if i else _Hog())
        t.custom_slice = s
        engine.call_at(i * 37_000, m.wake_up_new_task, t, 0)
    engine.run(s_to_ns(0.3))
    assert checks["set"] > 10


# --- DELAY_DEQUEUE ------------------------------------------------------------
# test_eevdf's random cgroups, with their own burst lengths and some cpu.max
delay_groups = st.lists(st.fixed_dictionaries({
    **GROUP_FIELDS,
    "run_ms": st.sampled_from([0.2, 1.0, 4.0]),
    "quota_us": st.sampled_from([None, None, 20_000]),
}), min_size=1, max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts, delay_groups, st.booleans(), st.integers(0, 2**16))
def test_delayed_entities_are_never_run_and_leave_only_when_eligible(host, gs, nested, seed):
    """DELAY_DEQUEUE on random hosts and sleepy cgroups (nested or not,
    some with cpu.max): an entity set_next_entity() runs is never delayed;
    the pick ends a delay only for an eligible entity; a delayed task is
    asleep (no CPU runs it) and a delayed group owns an empty cfs_rq; the
    per-CPU count of delayed entities is right at every sampled instant."""

    class Watched(EEVDF):
        def set_next_entity(self, cfs_rq, se):
            assert not se.sched_delayed
            super().set_next_entity(cfs_rq, se)

        def pick_eevdf(self, cfs_rq):
            se = super().pick_eevdf(cfs_rq)
            if se is not None and se.sched_delayed:
                assert self.entity_eligible(cfs_rq, se)
            return se

    groups = [{"name": (f"outer/g{i}" if nested else f"g{i}"), **{k: v for k, v in g.items()
                                                                    if v is not None}}
              for i, g in enumerate(gs)]
    cfg = make_cfg(periodic(run_ms=1.0, groups=groups), cores=host["cores"],
                   threads_per_core=host["threads_per_core"], duration_s=0.4, warmup_s=0.0,
                   seed=seed, scheduler={"name": "eevdf"})
    engine, m, _, wl = build_with(Watched, cfg)

    def check():
        counts = [0] * len(m.rqs)
        for t in wl.threads:
            se = t.se
            if se.sched_delayed:
                assert t.sleeping and se.on_rq and m.rqs[t.cpu].curr is not t
                counts[se.cfs_rq.cpu] += 1
        for tg in m.groups.values():
            for se in tg.se:
                if se is not None and se.sched_delayed:
                    assert se.on_rq and se.my_q.nr_running == 0
                    counts[se.cfs_rq.cpu] += 1
        assert counts == m.policy.nr_delayed

    wl.start()
    t = 0
    while t < s_to_ns(0.4):
        t += 130_000
        engine.run(t)
        check()


def test_delay_dequeue_keeps_an_ineligible_sleeper_queued_until_its_lag_is_repaid():
    """Two hogs and a thread that runs 3 ms then sleeps 1 ms, on one CPU:
    it blocks behind V (it ran more than its share since its last pick),
    so it stays queued, delayed, and its sleeps end mostly while it still
    is (woken where it is, ENQUEUE_DELAYED); without DELAY_DEQUEUE nothing
    is ever delayed.  Either way the thread, which asks for 3/4 of the CPU,
    gets no more than its fair third, within a few slices (lag is bounded)."""
    def run(**sched):
        engine = Engine(5)
        m = Machine(engine, Topology(1, 1), EEVDF,
                    EevdfConfig(name="eevdf", base_slice_ns=HOST_BASE_SLICE_NS, **sched),
                    CostModel())
        tg = m.create_group("g")
        woken_delayed = []

        class Bursty:
            def burst_done(self, task):
                task.remaining = 3_000_000
                engine.call_later(1_000_000, lambda: woken_delayed.append(task.se.sched_delayed))
                return 1_000_001
        b = m.new_task("b", tg, 0, 3_000_000, 0, Bursty())
        for i in range(2):
            engine.call_at(0, m.wake_up_new_task, m.new_task(f"hog{i}", tg, 0, 10**12, 0, _Hog()), 0)
        engine.call_at(0, m.wake_up_new_task, b, 0)
        engine.run(s_to_ns(2.0))
        return np.mean(woken_delayed), b.se.sum_exec_runtime
    delayed, service = run()
    never, service66 = run(delay_dequeue=False)
    print(f"woken while delayed {delayed:.2f}; service {service / 1e9:.3f} vs "
          f"{service66 / 1e9:.3f} s")
    assert delayed > 0.5 and never == 0
    fair = 2.0e9 / 3
    assert max(service, service66) <= fair + 4 * HOST_BASE_SLICE_NS
