"""Two opt-in pieces of the fair class's load balancing (SchedConfig
``pelt_propagate`` and ``migrate_task_half``), held to the kernel's rules:

- PELT propagation (add_tg_cfs_propagate / update_tg_cfs_load): a task
  attached to a group's cfs_rq raises its group entity's runnable average,
  up to always runnable, and every ancestor's load with it, at once; one
  removed lowers it to the group's remaining average, never raising it;
- an idle CPU's balance takes half the difference of the run queues'
  lengths (calculate_imbalance()'s migrate_task), a newly idle one one task.

Why they are off by default: docs/host-validation.md, "Where the host's
migrations come from"."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.kernel.eevdf import EEVDF, EevdfConfig
from sim.costmodel import CostModel
from sim.engine import Engine
from sim.machine import Machine
from sim.sched_flags import CPU_IDLE, CPU_NEWLY_IDLE
from sim.task import BURST_EXIT
from sim.topology import Topology

MS = 1_000_000


class _Spin:
    def burst_done(self, task):
        task.remaining = 10**12
        return 0


def machine(**flags) -> Machine:
    return Machine(Engine(0), Topology(1, 2), EEVDF, EevdfConfig(name="eevdf", **flags),
                   CostModel())


def spin(m: Machine, name: str, tg, cpus) -> object:
    t = m.new_task(name, tg, 0, 10**12, 0, _Spin())
    m.set_cpus_allowed(t, frozenset(cpus))
    m.engine.call_at(m.engine.now, m.wake_up_new_task, t, min(cpus))
    return t


def _root_load(m: Machine, cpu: int) -> float:
    cfs = m.rqs[cpu].cfs
    cfs.update_load_avg(m.engine.now)
    return cfs.load_avg


@pytest.mark.parametrize("propagate", [True, False])
def test_a_new_task_in_an_idle_group_reaches_the_root_load_at_once(propagate):
    """CPU 0 runs a hog in group a for 200 ms; then a new task starts in
    group b, idle until then: with propagation the root's load grows by b's
    entity weight at once (its runnable average goes to 1); without, b's
    entity starts at 0 and only its own average, 32 ms half-life, brings it."""
    m = machine(pelt_propagate=propagate)
    a, b = m.create_group("a"), m.create_group("b")
    spin(m, "hog", a, (0,))
    m.engine.run(200 * MS)
    before = _root_load(m, 0)
    new = spin(m, "new", b, (0,))
    m.engine.run(m.engine.now + 1)
    gse = b.se[0]
    assert new.se.cfs_rq is b.cfs_rq[0] and gse.on_rq
    grown = _root_load(m, 0) - before
    if propagate:
        assert gse.runnable_avg == pytest.approx(1.0, abs=1e-6)
        assert grown == pytest.approx(gse.weight, rel=0.01)
    else:
        assert gse.runnable_avg < 0.01 and grown < 0.01 * gse.weight


class _Once:
    """One burst, then exit."""
    def burst_done(self, task):
        return BURST_EXIT


def test_a_removed_task_lowers_its_group_to_the_remaining_average():
    """Two tasks of group g on CPU 0, one of 40 ms and one of 80 ms: when
    the first exits, g's entity is taken to be as runnable as g's remaining
    queued weight on average (never more than it was), and when the second
    exits, not runnable at all."""
    m = machine(pelt_propagate=True)
    g = m.create_group("g")
    gse, grq, root = g.se[0], g.cfs_rq[0], m.rqs[0].cfs
    seen = []

    def on_exit(p):
        root.update_load_avg(m.engine.now)
        seen.append((p.name, gse.runnable_avg, grq.load_weight,
                     grq.load_avg / grq.load_weight if grq.load_weight else 0.0))
    m.on_exit = on_exit
    for name, ms in (("short", 40), ("long", 80)):
        t = m.new_task(name, g, 0, ms * MS, 0, _Once())
        m.set_cpus_allowed(t, frozenset((0,)))
        m.engine.call_at(0, m.wake_up_new_task, t, 0)
    m.engine.run(500 * MS)
    (n1, r1, w1, avg1), (n2, r2, w2, _) = seen
    assert (n1, n2) == ("short", "long") and w1 > 0 and w2 == 0
    # g's entity was always runnable (1.0) until then: the remaining average
    assert r1 == pytest.approx(avg1, rel=1e-9) and r1 <= 1.0
    assert r2 == 0.0


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(-1.0, 1.0))
def test_propagation_keeps_every_level_between_zero_and_always(r0, dr):
    """Whatever a group entity's runnable average and whatever is attached
    or removed, the averages stay in [0, 1], an attach never lowers one and
    a removal never raises one, and the parent's load moves by the entity's
    weight times the change."""
    m = machine(pelt_propagate=True)
    g = m.create_group("g")
    gse, grq = g.se[0], g.cfs_rq[0]
    root = m.rqs[0].cfs
    gse.runnable_avg = r0
    load0 = root.load_avg = 5000.0
    m.policy.propagate_entity_load_avg(grq, dr)
    r1 = gse.runnable_avg
    assert 0.0 <= r1 <= 1.0
    assert (r1 >= r0) if dr >= 0 else (r1 <= r0)
    assert root.load_avg == pytest.approx(max(0.0, load0 + gse.weight * (r1 - r0)))


def _queue(m: Machine, n: int):
    """n hogs, all on CPU 0; CPU 1 idle and allowed to every one."""
    tg = m.root_tg
    ts = [m.new_task(f"h{i}", tg, 0, 10**12, 0, _Spin()) for i in range(n)]
    for t in ts:
        m.set_cpus_allowed(t, frozenset((0,)))
        m.engine.call_at(0, m.wake_up_new_task, t, 0)
    m.engine.run(50 * MS)
    for t in ts:
        m.set_cpus_allowed(t, frozenset((0, 1)))
    return ts


@pytest.mark.parametrize("half, idle, moved", [
    (True, CPU_IDLE, 3),          # (7 - 0) >> 1
    (True, CPU_NEWLY_IDLE, 1),    # CONFIG_PREEMPTION: one
    (False, CPU_IDLE, 1),
])
def test_an_idle_cpu_takes_half_the_queue_difference(half, idle, moved):
    m = machine(migrate_task_half=half, nohz_kick_ipi=False)
    _queue(m, 7)
    src, dst = m.rqs[0], m.rqs[1]
    assert (src.nr_running, dst.nr_running) == (7, 0)
    pol = m.policy
    for t in list(src.cfs_tasks):       # cache-cold: every one may move
        t.se.exec_start = -10**12
    got = pol._detach_tasks(src, dst, idle)
    assert got == moved and dst.nr_running == moved and src.nr_running == 7 - moved
