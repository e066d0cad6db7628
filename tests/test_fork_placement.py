"""Fork placement when no CPU is idle (SchedConfig.find_idlest_group,
policies/kernel/cfs.py find_dst_group_cpu): the parent's CPU keeps the
child unless another CPU is of a lower class (fully busy against
overloaded) or of the same class and clearly lighter, as the kernel's
sched_balance_find_dst_group() decides; the least-loaded rule it replaces
moves the child whenever another CPU is lighter at all."""
from __future__ import annotations

from scenarios.simulate import build
from tests.simcfg import make_cfg, periodic


def _hogs(threads: int, find_idlest_group: bool = True):
    """``threads`` CPU hogs on 2 CPUs under EEVDF, 200 ms in: the machine."""
    cfg = make_cfg(periodic(threads=threads, run_ms=10_000.0), cores=2, duration_s=10.0,
                   warmup_s=0.0, scheduler={"name": "eevdf",
                                            "find_idlest_group": find_idlest_group})
    engine, machine, _, workload = build(cfg)
    workload.start()
    engine.run(200_000_000)
    return machine


def test_the_parents_cpu_keeps_the_child_among_equals():
    m = _hogs(4)
    assert [rq.nr_running for rq in m.rqs] == [2, 2]
    p = m.rqs[0].curr
    assert m.policy.find_dst_group_cpu(p, 0) == 0
    assert m.policy.find_dst_group_cpu(p, 1) == 1


def test_a_cpu_of_a_lower_class_takes_the_child():
    m = _hogs(3)
    busy, single = sorted(range(2), key=lambda c: -m.rqs[c].nr_running)
    assert (m.rqs[busy].nr_running, m.rqs[single].nr_running) == (2, 1)
    p = m.rqs[busy].curr
    # overloaded parent's CPU, fully busy other: the child goes there; the
    # other way round it stays
    assert m.policy.find_dst_group_cpu(p, busy) == single
    assert m.policy.find_dst_group_cpu(p, single) == single


def test_a_lighter_cpu_of_the_same_class_takes_the_child_only_beyond_the_margin():
    m = _hogs(4)
    policy, p = m.policy, m.rqs[0].curr
    for rq in m.rqs:
        rq.cfs.update_load_avg(m.engine.now)
    # the load_avg of each CPU's queue as PELT has it: equal hogs, equal loads
    # within the margin (NICE_0_LOAD x 17 %): stay
    assert abs(m.rqs[0].cfs.load_avg - m.rqs[1].cfs.load_avg) < 1024 * 0.17
    assert policy.find_dst_group_cpu(p, 0) == 0
    # lighten CPU 1 beyond both margins: the child goes there
    m.rqs[1].cfs.load_avg = m.rqs[0].cfs.load_avg / 2 - 200
    m.rqs[1].cfs.avg_last_update = m.engine.now
    assert policy.find_dst_group_cpu(p, 0) == 1
