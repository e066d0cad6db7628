"""sd->balance_interval's back-off (SchedConfig ``balance_backoff``): a
balance that finds no imbalance doubles its domain's interval up to twice
the span weight, one that finds every task pinned up to
MAX_PINNED_INTERVAL, one that finds an imbalance resets it; held to the
kernel's rules here and to this host's delay_dequeue probe in
tests/test_delay_dequeue.py."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.kernel.cfs import (CFS, LB_ALL_PINNED, LB_BALANCED, LB_UNBALANCED,
                                 MAX_PINNED_INTERVAL_MS, CfsConfig)
from policies.kernel.eevdf import EEVDF, EevdfConfig
from sim.costmodel import CostModel
from sim.engine import Engine
from sim.machine import Machine
from sim.sched_flags import CPU_IDLE
from sim.topology import Topology

X, Y = 1, 0


class _Spin:
    def burst_done(self, task):
        task.remaining = 10**12
        return 0


def machine(policy=EEVDF, cfg=None) -> Machine:
    cfg = cfg or EevdfConfig(name="eevdf")
    return Machine(Engine(0), Topology(1, 2), policy, cfg, CostModel())


def spin(m: Machine, name: str, cpus) -> object:
    t = m.new_task(name, m.root_tg, 0, 10**12, 0, _Spin())
    m.set_cpus_allowed(t, frozenset(cpus))
    m.engine.call_at(0, m.wake_up_new_task, t, min(cpus))
    return t


def test_an_idle_cpu_beside_pinned_tasks_backs_off_to_the_pinned_cap():
    """Two hogs pinned to X: every tick of X kicks Y's nohz balance, which
    finds every task pinned; Y's interval doubles from the span weight (2 ms)
    to 512 ms, and it then balances at the cap of max_load_balance_interval
    (200 ms on 2 CPUs), so it balances a few times a second, not 500."""
    m = machine()
    pol = m.policy
    spin(m, "a", (X,))
    spin(m, "b", (X,))
    m.engine.run(2_000_000_000)
    assert pol.sd_balance_interval[Y] == [MAX_PINNED_INTERVAL_MS]
    assert pol.balance_interval_ns(m.rqs[Y], CPU_IDLE) == 200_000_000


def test_a_waiting_task_it_may_take_resets_the_interval():
    """Once a waiting task is movable the idle CPU's balance finds an
    imbalance: it takes the task and its interval is the span weight again."""
    m = machine()
    pol = m.policy
    spin(m, "a", (X,))
    b = spin(m, "b", (X,))
    m.engine.run(1_000_000_000)
    assert pol.sd_balance_interval[Y] == [MAX_PINNED_INTERVAL_MS]
    m.set_cpus_allowed(b, frozenset((X, Y)))   # queued on X, movable now
    m.engine.run(2_000_000_000)
    assert b.cpu == Y
    assert pol.sd_balance_interval[Y][0] <= 2 * pol.domains[Y][0].interval_ms


def test_without_the_flag_the_interval_never_moves():
    m = machine(cfg=EevdfConfig(name="eevdf", balance_backoff=False))
    spin(m, "a", (X,))
    spin(m, "b", (X,))
    m.engine.run(1_000_000_000)
    assert m.policy.sd_balance_interval == [[2], [2]]
    assert m.policy.balance_interval_ns(m.rqs[Y], CPU_IDLE) == 2_000_000


def test_cfs_keeps_the_fixed_interval_by_default():
    assert not CfsConfig(name="cfs").balance_backoff
    assert EevdfConfig(name="eevdf").balance_backoff


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from((LB_UNBALANCED, LB_BALANCED, LB_ALL_PINNED)), max_size=40))
def test_the_interval_stays_a_power_of_two_multiple_within_its_bounds(results):
    """Whatever the balances found: min_interval x 2^k, at most
    max_interval (2 x min) unless every task was pinned, never over
    MAX_PINNED_INTERVAL; an imbalance resets it to min_interval."""
    pol = machine(CFS, CfsConfig(name="cfs", balance_backoff=True)).policy
    lo = pol.domains[Y][0].interval_ms
    for r in results:
        before = pol.sd_balance_interval[Y][0]
        pol.lb_result = r
        pol.tune_balance_interval(Y, 0, lo)
        ms = pol.sd_balance_interval[Y][0]
        assert ms % lo == 0 and (ms // lo) & (ms // lo - 1) == 0
        assert lo <= ms <= max(MAX_PINNED_INTERVAL_MS, 2 * lo)
        if r == LB_UNBALANCED:
            assert ms == lo
        elif r == LB_BALANCED:
            assert ms == (2 * before if before < 2 * lo else before)
        else:
            assert ms == (2 * before if before < MAX_PINNED_INTERVAL_MS else before)
