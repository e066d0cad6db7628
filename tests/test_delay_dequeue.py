"""Where a task that went to sleep while not eligible is woken, against this
host's measurement (calibration/bench/delay_dequeue.py,
calibration/data/this-vm/delay_dequeue.parquet): EEVDF's DELAY_DEQUEUE
keeps it queued, so a wake-up before its delay ends finds it where it slept
(EevdfConfig ``delay_dequeue``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibration.bench import delay_dequeue as bench
from calibration.bench.common import read_bench
from policies.kernel.eevdf import EEVDF, EevdfConfig
from sim.costmodel import CostModel
from sim.engine import Engine
from sim.machine import Machine
from sim.topology import Topology

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "calibration" / "data" / "this-vm"
PROFILE = REPO / "scenarios" / "conf" / "calibration" / "this-vm.yaml"
X, Y = 1, 0            # the benchmark CPU and the other, as on the host
HOST_BASE_SLICE_NS = 1_400_000
SHORT = (200_000, 1_000_000, 3_000_000)    # sleeps shorter than any delay
LONG = 20_000_000                           # longer than every delay
S_WORK_NS = 10_000     # S's own work around a sleep: the print and the pin


class _Hog:
    def burst_done(self, task):
        task.remaining = 10**12
        return 0


class _S:
    """dqdelay.c's main thread, also its tracer: pinned to X it spins until
    it is picked again after a preemption, runs the cycle's ``run_ns`` more,
    widens its affinity to X and Y (a system call, which may reschedule it:
    SchedConfig affinity_requeue) and sleeps; after the sleep it notes where
    and when it runs and pins itself to X again."""

    def __init__(self, m: Machine, cycles: int):
        self.m, self.cycles = m, cycles
        self.state, self.gap, self.cycle, self.rows = "spin", False, 0, []

    def _pin_x(self):
        if self.task.cpu != X:
            self.gap = True          # pushed to X, it waits there for its pick
        self.m.set_cpus_allowed(self.task, frozenset((X,)))

    def burst_done(self, task):
        m = self.m
        if self.state == "run":
            m.set_cpus_allowed(task, frozenset((X, Y)))
            # nanosleep() follows once the affinity call has returned
            self.state, task.remaining = "widened", 1_000
            return 0
        if self.state == "widened":
            self.sleep_ns = bench.SLEEPS_NS[self.cycle % len(bench.SLEEPS_NS)]
            self.run_ns = bench.RUNS_NS[self.cycle % len(bench.RUNS_NS)]
            self.t0, self.state = m.engine.now, "sleep"
            task.remaining = S_WORK_NS
            return self.sleep_ns
        self.cycle += 1
        if self.cycle == self.cycles:
            return None
        # sched_setaffinity() on itself: after this burst's end, as a call
        m.engine.call_at(m.engine.now, self._pin_x)
        self.state, task.remaining = "spin", 10**12
        return 0

    def sched_switch(self, now, cpu, prev, nxt, cost, idle_exit=0):
        task = self.task
        if prev is task and not task.sleeping:
            self.gap = True
        if nxt is task:
            if self.state == "sleep":
                lat = now + cost - self.t0 - self.sleep_ns
                self.rows.append((self.sleep_ns, self.run_ns, cpu, lat))
                self.state = "after"
            elif self.state == "spin" and self.gap:
                self.m.replace_burst(task, bench.RUNS_NS[self.cycle % len(bench.RUNS_NS)])
                self.state, self.gap = "run", False

    def sched_wakeup(self, *args):
        pass

    def sched_migrate_task(self, *args):
        pass


def simulate_bench(cycles: int, seed: int = 0, **sched) -> pd.DataFrame:
    """The benchmark in the simulator with the this-vm profile: one row per
    cycle, the host's columns."""
    engine = Engine(seed)
    cfg = EevdfConfig(name="eevdf", base_slice_ns=HOST_BASE_SLICE_NS, **sched)
    cost = CostModel.from_config(yaml.safe_load(PROFILE.read_text()))
    m = Machine(engine, Topology(1, 2), EEVDF, cfg, cost)
    hog = m.new_task("hog", m.root_tg, bench.HOG_NICE, 10**12, 0, _Hog())
    m.set_cpus_allowed(hog, frozenset((X,)))
    engine.call_at(0, m.wake_up_new_task, hog, X)
    s = _S(m, cycles)
    s.task = m.new_task("S", m.root_tg, 0, 10**12, 0, s)
    m.set_cpus_allowed(s.task, frozenset((X,)))
    m.tracer = s
    engine.call_at(20_000_000, m.wake_up_new_task, s.task, X)
    engine.run(20_000_000 + cycles * 400_000_000)
    assert len(s.rows) == cycles
    df = pd.DataFrame(s.rows, columns=["sleep_ns", "run_ns", "cpu", "latency_ns"])
    df["in_place"] = [bench.in_place(c, lat, X) for c, lat in zip(df.cpu, df.latency_ns)]
    return df


@pytest.fixture(scope="module")
def host() -> pd.DataFrame:
    table, _, params = read_bench(DATA / "delay_dequeue.parquet")
    df = table.to_pandas()
    assert not df.host_disturbed.any()
    assert (params["params"]["cpu"], params["params"]["other"]) == (X, Y)
    return df


@pytest.fixture(scope="module")
def sim() -> pd.DataFrame:
    return simulate_bench(len(bench.SLEEPS_NS) * 20)


def _share(df: pd.DataFrame, sleeps, below_slice: bool = True) -> pd.Series:
    """Woken in place, by sleep, over the runs below the base slice (or at it)."""
    runs = df.run_ns < HOST_BASE_SLICE_NS if below_slice else df.run_ns >= HOST_BASE_SLICE_NS
    return df[df.sleep_ns.isin(sleeps) & runs].groupby("sleep_ns").in_place.mean()


def test_the_host_wakes_a_short_sleeper_where_it_slept(host):
    """The recording itself: after a short sleep that followed a run below
    the slice S was woken in place in most cycles of every repetition
    (without DELAY_DEQUEUE: in none, the other CPU being idle), after a long
    one on the idle CPU."""
    for _, g in host.groupby("repeat"):
        assert (_share(g, SHORT) >= 0.5).all()
        assert _share(g, [LONG]).iloc[0] <= 0.05


def test_the_simulator_wakes_it_in_place_as_the_host_does(host, sim):
    """The simulator with DELAY_DEQUEUE wakes S in place after the short
    sleeps at least as often as the host did in its least repetition
    (-0.15 for 16 simulated cycles a sleep), and on the idle CPU after the
    long one as the host did; without it, never in place.  It delays S in
    every such cycle, where the host did in 60-90 % (not explained)."""
    runs = host.run_ns < HOST_BASE_SLICE_NS
    by_rep = host[runs].groupby(["sleep_ns", "repeat"]).in_place.mean().unstack()
    lo, hi = by_rep.min(axis=1), by_rep.max(axis=1)
    share = _share(sim, [*SHORT, LONG])
    for sleep_ns in SHORT:
        assert share[sleep_ns] >= lo[sleep_ns] - 0.15, sleep_ns
    assert share[LONG] <= hi[LONG] + 0.15
    off = simulate_bench(len(bench.SLEEPS_NS) * 5, delay_dequeue=False)
    assert not off.in_place.any()


def test_a_sleeper_that_used_up_its_slice_is_not_delayed(host, sim):
    """S widens its affinity just before it sleeps.  The affinity change
    dequeues and requeues the running task (DEQUEUE_SAVE), and that
    update_curr() reschedules a task past its deadline: after a run of a
    whole slice S is preempted there, sleeps only once it is eligible
    again, and is not delayed.  The host woke it in place in at most 1 of
    10 such cycles of a repetition (after shorter runs in 60-90 %); the
    simulator with affinity_requeue in none, without it in all."""
    for _, g in host.groupby("repeat"):
        assert (_share(g, SHORT, below_slice=False) <= 0.1).all()
    assert (_share(sim, SHORT, below_slice=False) <= 0.1).all()
    off = simulate_bench(len(bench.SLEEPS_NS) * 5, affinity_requeue=False)
    assert (_share(off, SHORT, below_slice=False) >= 0.9).all()


def test_a_sleeper_woken_in_place_waits_ticks_not_an_idle_exit(host, sim):
    """Woken in place after a 0.2 ms sleep, S waits on X behind the heavier
    hog until it is eligible and a tick picks it: on the host about 10.6 ms
    after the sleep's end (the median), in the simulator 6.9 ms; a wake-up
    placed on the idle CPU would run within ~0.2 ms."""
    for df in (host, sim):
        moved = df[(df.sleep_ns == SHORT[0]) & df.in_place]
        assert len(moved) and np.median(moved.latency_ns) > 2_000_000


def test_the_idle_cpu_leaves_the_woken_sleeper_waiting_as_on_the_host(host, sim):
    """The host's idle CPU took S from X after its in-place wake-up in at
    most 8 % of the short sleeps of any repetition: its balances, which
    find every task on X pinned for most of a cycle, back off
    (sd->balance_interval, SchedConfig balance_backoff).  The simulator
    with the back-off leaves S waiting as often; without it the idle CPU
    takes S at the first balance X's tick kicks, far more often."""
    def moved_share(df):
        short = df[df.sleep_ns.isin(SHORT) & (df.run_ns < HOST_BASE_SLICE_NS)]
        return ((short.cpu == Y) & short.in_place).mean()
    worst = max(moved_share(g) for _, g in host.groupby("repeat"))
    assert worst <= 0.15
    assert moved_share(sim) <= worst + 0.05
    assert moved_share(simulate_bench(len(bench.SLEEPS_NS) * 5,
                                      balance_backoff=False)) > worst + 0.15


@pytest.mark.xfail(strict=True, reason=(
    "how long the delay lasts after a given run: per (sleep, run) the host and the simulator "
    "differ by up to a whole share of the cycles (after a 0.6 ms run and a 6 ms sleep the "
    "host woke S in place in none, the simulator in all; after a 1.2 ms run and a 12 ms sleep "
    "63 % against none), the delay ending a tick sooner or later: S's lag at its sleep is "
    "not the host's; not explained yet"))
def test_the_delay_lasts_as_long_as_on_the_host(host, sim):
    h = host.groupby(["sleep_ns", "run_ns"]).in_place.mean()
    s = sim.groupby(["sleep_ns", "run_ns"]).in_place.mean()
    assert (h - s).abs().max() <= 0.3
