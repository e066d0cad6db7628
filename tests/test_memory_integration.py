"""The memory model wired into runs (sim/memory/progress.py, docs/memory.md):
memory-less runs unchanged, memlookup slow-down by hand, RDT Host levers,
least_loaded and dynamic_priority."""
from __future__ import annotations

import random

import numpy as np
import pytest

from backends.host import PendingJob, RdtError
from backends.simhost import SimHost
from policies.control.dynamic_priority import (DynamicPriority, DynamicPriorityConfig,
                                               SocketRdt, _Job, find_best_fit_bitmask,
                                               longest_free_run)
from policies.control.least_loaded import (CoreAccountant, LeastLoaded, LeastLoadedConfig,
                                           least_committed)
from results.schema import check_table, with_run_labels
from scenarios.config import compose
from scenarios.simulate import attach_controller, build, simulate
from sim.memory.cachemodel import miss_ratio
from sim.memory.llc import LLCGeometry
from sim.memory.pages import Buffer, bucket_demand
from sim.metrics import MEMORY_INTERVAL_COLUMNS


def _cfg(overrides):
    return compose(overrides)


# ---- memory-less runs ---------------------------------------------------------------

def _run(overrides, with_memory_system: bool):
    from backends.host import plain_config
    from sim.engine import s_to_ns
    cfg = plain_config(_cfg(overrides))
    engine, machine, recorder, workload = build(cfg)
    if with_memory_system:
        machine.memory_model()          # present, but no cgroup has a profile
    workload.start()
    engine.run(s_to_ns(float(cfg["duration_s"])))
    return recorder.table(), machine


@pytest.mark.parametrize("overrides", [
    ["duration_s=1", "warmup_s=0"],
    ["workload=periodic", "host=silver-4314-2s", "duration_s=1", "warmup_s=0"],   # SMT siblings
])
def test_memoryless_cgroups_unchanged(overrides):
    plain, m0 = _run(overrides, False)
    hooked, m1 = _run(overrides, True)
    assert m0.memory is None and m1.memory is not None
    assert plain.equals(hooked)
    assert m0.nr_migrations == m1.nr_migrations
    assert [rq.nr_switches for rq in m0.rqs] == [rq.nr_switches for rq in m1.rqs]


def test_memoryless_summary_has_nan_memory_columns():
    r = simulate(_cfg(["duration_s=1", "warmup_s=0"]))
    s = r.summary.to_pylist()[0]
    assert np.isnan(s["llc_miss_rate"]) and np.isnan(s["ipce_global"])
    # no memory profile: the intervals table gets no memory columns at all
    assert not set(MEMORY_INTERVAL_COLUMNS) & set(r.intervals.schema.names)


# ---- memlookup: slow-down from the miss ratio, by hand ------------------------------------

def _neighbor() -> dict:
    """The CPI keys workload=memlookup takes from its archetype."""
    from sim.memory.progress import archetype_spec
    return archetype_spec("neighbor_6mb_1g")


def test_memlookup_slowdown_follows_miss_ratio():
    ways = 3
    cfg = _cfg(["workload=memlookup", "host=silver-4314-2s", "duration_s=3", "warmup_s=0.5",
                f"workload.partitions=[0-{ways - 1}]"])
    r = simulate(cfg)
    geo = LLCGeometry(24 << 20, 12, 16)
    m = miss_ratio(bucket_demand(geo, Buffer(6 << 20, 4096, "random"), 0), ways)
    # CPI = cpi_core + r ((1-m) L_llc + m L_mem) f / MLP; alone: m = 0 (6 MB in 12 ways);
    # the workload's keys are the fitted neighbor archetype's
    k = _neighbor()
    r_ = k["refs_per_kinstr"] / 1000
    cpi = k["cpi_core"] + r_ * ((1 - m) * 20 + m * 90) * 2.4 / k["mlp"]
    cpi_alone = k["cpi_core"] + r_ * 20 * 2.4 / k["mlp"]
    s = r.summary.to_pylist()[0]
    assert s["llc_miss_rate"] == pytest.approx(m, rel=1e-6)
    lat = r.requests.column("latency_s").to_numpy()
    assert np.median(lat) == pytest.approx(0.010 * cpi / cpi_alone, rel=1e-3)
    assert s["ipce_global"] == pytest.approx(k["cpi_core"] / cpi, rel=2e-3)
    assert 0.15 < m < 0.3         # conflict misses with 4 KB pages in 3 ways


def test_memlookup_interval_columns():
    r = simulate(_cfg(["workload=memlookup", "host=silver-4314-2s", "duration_s=2", "warmup_s=0",
                       "interval_s=0.5", "workload.partitions=[0-2]", "workload.mb=[40]"]))
    # as written into the run directory (the run labels are added there)
    check_table("intervals", with_run_labels(r.intervals, r.summary))
    rows = r.intervals.to_pylist()
    mine = [x for x in rows if x["cgroup"] == "/memlookup/c0"]
    others = [x for x in rows if x["cgroup"] != "/memlookup/c0"]
    assert len(mine) == 4 and others
    assert all(x[c] is None for x in others for c in MEMORY_INTERVAL_COLUMNS)
    geo = LLCGeometry(24 << 20, 12, 16)
    demand = bucket_demand(geo, Buffer(6 << 20, 4096, "random"), 0)
    m = miss_ratio(demand, 3)
    k = _neighbor()
    cpi = k["cpi_core"] + k["refs_per_kinstr"] / 1000 * ((1 - m) * 20 + m * 90) * 2.4 / k["mlp"]
    # (bandwidth is no limit)
    for x in mine[1:]:       # the first also holds the 1 ms before the first solve
        assert x["llc_miss_rate"] == pytest.approx(m, rel=1e-9)
        assert x["ipce"] == pytest.approx(k["cpi_core"] / cpi, rel=1e-9)
        assert x["ipc"] == pytest.approx(1 / cpi, rel=1e-9)
        assert x["ipc"] == pytest.approx(x["instructions"] / x["cycles"], rel=1e-6)
        assert x["cycles"] == pytest.approx(0.5 * 2.4e9, rel=1e-6)      # one thread, busy
        assert x["llc_occupancy_mb"] == pytest.approx(np.minimum(demand, 3).sum() * 64 / 2**20)
        # every miss fills a line and writes a dirty one back (dirty_fraction 1)
        misses = x["instructions"] * k["refs_per_kinstr"] / 1000 * x["llc_miss_rate"]
        assert x["mbm_bytes"] == pytest.approx(misses * 64 * 2, rel=1e-6)
        assert (x["l3_ways"], x["mb_percent"]) == (3, 40)


def _moved(move: bool, extra=()):
    """memlookup in ways 0-5 (low intensity: a refill spans epochs), moved to
    ways 6-11 at 1 s; the class's rows of 50 ms intervals."""
    from backends.host import plain_config
    from sim.engine import s_to_ns
    from sim.metrics import IntervalSampler
    cfg = plain_config(_cfg(["workload=memlookup", "host=silver-4314-2s", "duration_s=2",
                       "warmup_s=0", "workload.partitions=[0-5]", "workload.exclusive=false",
                       "workload.memory.refs_per_kinstr=0.5", *extra]))
    engine, machine, recorder, workload = build(cfg)
    host = SimHost(machine)
    sampler = IntervalSampler(machine, s_to_ns(0.05))
    if move:
        engine.call_at(s_to_ns(1.0), lambda: host.rdt_update_class("c0", l3_cbm=0xfc0))
    workload.start()
    sampler.start()
    engine.run(s_to_ns(1.6))
    rows = [x for x in sampler.table().to_pylist() if x["cgroup"] == "/memlookup/c0"]
    return rows, machine.memory


@pytest.mark.parametrize("pattern", ["random", "sequential"])
def test_moved_class_refetches_its_lines_then_settles(pattern):
    extra_keys = [f"workload.memory.pattern={pattern}"]
    still, mem = _moved(False, extra_keys)
    assert not mem._refill
    steady = still[1]
    for x in still[1:]:
        assert x["llc_miss_rate"] == pytest.approx(steady["llc_miss_rate"], rel=1e-9)
        assert x["ipce"] == pytest.approx(steady["ipce"], rel=1e-9)
    rows, mem = _moved(True, extra_keys)
    assert rows[:19] == still[:19]                     # the same until the move (at 1 s)
    after = rows[20:]
    excess = [x["llc_miss_rate"] - steady["llc_miss_rate"] for x in after]
    assert excess[0] > 0.3 and not mem._refill and excess[-1] == pytest.approx(0, abs=1e-6)
    if pattern == "random":            # exp(-refs / N): about a third per 50 ms here
        assert all(a > b > 0 for a, b in zip(excess, excess[1:4]))
    assert after[0]["ipce"] < steady["ipce"] - 0.03
    assert after[-1]["ipce"] == pytest.approx(steady["ipce"], rel=1e-6)
    assert rows[19]["llc_occupancy_mb"] == 0          # read just after the move: all lost
    # each line it held is fetched once more: the extra fills (each with a
    # dirty write-back) are its steady occupancy, in lines
    extra = sum(x["mbm_bytes"] - steady["mbm_bytes"] * x["instructions"] / steady["instructions"]
                for x in after) / (64 * 2)
    assert extra == pytest.approx(steady["llc_occupancy_mb"] * 2**20 / 64, rel=1e-4)


def test_without_refill_a_moved_class_runs_at_its_new_steady_state_at_once():
    """host.llc_refill=false (an ablation): the same move, no transient; the
    rows before the move are the default's."""
    still, _ = _moved(False)
    steady = still[1]
    with_refill, _ = _moved(True)
    rows, mem = _moved(True, ["host.llc_refill=false"])
    assert rows[:19] == with_refill[:19] and not mem._refill
    # the default refetches after the move; without refill the miss rate
    # is the steady one from the first interval after it
    assert with_refill[20]["llc_miss_rate"] > steady["llc_miss_rate"] + 0.3
    for x in rows[20:]:
        assert x["llc_miss_rate"] == pytest.approx(steady["llc_miss_rate"], rel=1e-9)
        assert x["ipce"] == pytest.approx(steady["ipce"], rel=1e-9)


def test_job_mean_ipce_weighs_every_job_the_same():
    """Two batch jobs of different profiles (one fits, one streams) and
    lengths: ipce_batch is their cycle-weighted IPCE, ipce_batch_job_mean
    the plain mean of their own IPCEs (from their interval rows)."""
    from sim.workloads.noisy_jobs import make_jobs
    cfg = _cfg(["experiment=noisy_scenarios", "controller=none", "duration_s=20",
                "warmup_s=0"])
    jobs = make_jobs(["a", "b"], [0.0, 0.0], [4.0, 12.0], [1, 1], ["high", "moderate"],
                     [False, False])
    r = simulate(cfg, trace=jobs)
    s = r.summary.to_pylist()[0]
    cycles, stalls = {}, {}
    for x in r.intervals.to_pylist():
        if x["cycles"]:
            cycles[x["cgroup"]] = cycles.get(x["cgroup"], 0) + x["cycles"]
            stalls[x["cgroup"]] = stalls.get(x["cgroup"], 0) + x["cycles"] * (1 - x["ipce"])
    own = [1 - stalls[cg] / cycles[cg] for cg in sorted(cycles)]
    weights = [cycles[cg] for cg in sorted(cycles)]
    assert len(own) == 2 and abs(own[0] - own[1]) > 0.2 and weights[1] > 1.5 * weights[0]
    assert s["ipce_batch_job_mean"] == pytest.approx(sum(own) / 2, rel=1e-6)
    assert s["ipce_batch"] == pytest.approx(np.average(own, weights=weights), rel=1e-6)
    assert s["ipce_batch"] != pytest.approx(s["ipce_batch_job_mean"], rel=1e-2)
    assert np.isnan(s["ipce_priority_job_mean"])                 # no priority job


def test_memlookup_fits_with_1g_pages():
    s = simulate(_cfg(["workload=memlookup", "host=silver-4314-2s", "duration_s=1", "warmup_s=0",
                       "workload.partitions=[0-2]", "workload.memory.pages=1g"])
                 ).summary.to_pylist()[0]
    assert s["llc_miss_rate"] == 0.0
    assert s["llc_occupancy_mb"] == pytest.approx(6.0)


# ---- RDT levers ------------------------------------------------------------------------

@pytest.fixture
def host():
    from backends.host import plain_config
    cfg = plain_config(_cfg(["workload=noisy_jobs", "host=silver-4314-2s", "duration_s=10"]))
    from sim.workloads import trace_for
    engine, machine, recorder, workload = build(cfg, trace_for(cfg))
    return SimHost(machine, None, "jobs.slice", workload=workload)


def _status(excinfo) -> str:
    return str(excinfo.value)


def test_rdt_levers_validate_with_resctrl_wording(host):
    info = host.rdt_info()
    assert info.ways == 12 and info.domains == (0, 1) and info.num_closids == 16
    with pytest.raises(RdtError) as e:
        host.rdt_create_class("a", 0x5)
    assert "The mask 5 has non-consecutive 1-bits" in _status(e)
    with pytest.raises(RdtError) as e:
        host.rdt_create_class("a", 0x1000)
    assert "Mask out of range" in _status(e)
    with pytest.raises(RdtError) as e:
        host.rdt_create_class("a", 0x3, mb_percent=5)
    assert "MB value 5 out of range [10,100]" in _status(e)
    assert "a" not in host.machine.memory.resctrl.groups       # all or nothing
    host.rdt_update_class("", l3_cbm=0xff0)
    host.rdt_create_class("a", 0x3, mb_percent=45, exclusive=True)
    assert host.machine.memory.resctrl.mb("a", 0) == 50        # rounded up to the granularity
    with pytest.raises(RdtError) as e:
        host.rdt_create_class("b", 0x6)
    assert "Overlaps with exclusive group" in _status(e)
    for i in range(14):
        host.rdt_create_class(f"c{i}", 0x8)
    with pytest.raises(RdtError) as e:
        host.rdt_create_class("x", 0x8)
    assert "Out of CLOSIDs" in _status(e)
    cg = host.functions()[0]
    host.rdt_assign(cg, "a")
    assert host.rdt_class_of(cg) == "a"
    mon = host.rdt_mon("a")
    assert set(mon) == {0, 1} and "llc_occupancy" in mon[0] and "mbm_total_bytes" in mon[0]
    host.rdt_remove_class("a")
    assert host.rdt_class_of(cg) == ""


# ---- least_loaded ------------------------------------------------------------------------

class FakeHost:
    def __init__(self, sockets=2, cores=4):
        self._cores = {s: [(s * cores + c,) for c in range(cores)] for s in range(sockets)}
        self.pending: list[PendingJob] = []
        self.admitted: list[tuple[str, set]] = []
        self.done: list[str] = []

    def cores_by_socket(self):
        return self._cores

    def hold_jobs(self):
        pass

    def now_ns(self):
        return 0

    def pending_jobs(self):
        return list(self.pending)

    def admit_job(self, cgroup, cpus=None):
        self.pending = [p for p in self.pending if p.cgroup != cgroup]
        self.admitted.append((cgroup, set(cpus)))

    def completed(self):
        class C:
            pass
        c = C()
        c.cgroup, self.done = np.array(self.done, dtype=object), []
        return c


def test_least_loaded_picks_fewest_committed_socket():
    h = FakeHost()
    acct = CoreAccountant(h)
    acct.take("a", 0, 1)
    assert least_committed(acct, 1) == 1
    acct.take("b", 1, 2)
    assert least_committed(acct, 1) == 0          # 1 committed vs 2
    assert least_committed(acct, 3) == 0          # only socket 0 has 3 free
    assert least_committed(acct, 4) is None


def test_least_loaded_fifo_without_backfill():
    h = FakeHost(sockets=2, cores=2)
    ll = LeastLoaded(LeastLoadedConfig(interval_s=1.0, cpuset="cores"))
    ll.start(h)
    h.pending = [PendingJob("/j0", 0.0, 2), PendingJob("/j1", 0.0, 2),
                 PendingJob("/j2", 0.0, 2), PendingJob("/j3", 0.0, 1)]
    ll.step(h)
    # j0 -> socket 0, j1 -> socket 1 (fewest committed); j2 does not fit and
    # blocks j3, which would fit nowhere anyway -- and nothing jumps the queue
    assert [a[0] for a in h.admitted] == ["/j0", "/j1"]
    assert h.admitted[0][1] == {0, 1} and h.admitted[1][1] == {2, 3}
    h.pending = [PendingJob("/j2", 0.0, 2), PendingJob("/j3", 0.0, 1)]
    h.done = ["/j1"]
    ll.step(h)
    assert [a[0] for a in h.admitted] == ["/j0", "/j1", "/j2"]   # j3 waits (socket 1 full)


def test_least_loaded_blocks_head_even_if_later_job_fits():
    h = FakeHost(sockets=1, cores=2)
    ll = LeastLoaded(LeastLoadedConfig(interval_s=1.0, cpuset="cores"))
    ll.start(h)
    h.pending = [PendingJob("/a", 0.0, 1), PendingJob("/big", 0.0, 2), PendingJob("/s", 0.0, 1)]
    ll.step(h)
    assert [a[0] for a in h.admitted] == ["/a"]                   # /s is not backfilled


# ---- dynamic_priority: best fit ------------------------------------------------------------

@pytest.mark.parametrize("target, allocated, expected", [
    (3, 0x000, 0xe00),        # scans inside runs: the top end of the run
    (3, 0x800, 0x700),        # way 11 reserved
    (2, 0x80f, 0x600),
    (3, 0x8c0, 0x038),        # runs 0-5 and 8-10 (length 3): the first length-3 start wins
    (4, 0x8c0, 0x03c),
    (1, 0xffe, 0x001),
    (12, 0x000, 0xfff),
])
def test_best_fit_hand_worked(target, allocated, expected):
    assert find_best_fit_bitmask(target, allocated, 12) == expected


def test_best_fit_errors():
    with pytest.raises(ValueError, match=r"invalid target ways: 0 \(must be > 0\)"):
        find_best_fit_bitmask(0, 0, 12)
    with pytest.raises(ValueError, match="requested 13 ways but only 12 available"):
        find_best_fit_bitmask(13, 0, 12)
    with pytest.raises(ValueError, match="no contiguous 1 cache ways available"):
        find_best_fit_bitmask(1, 0xfff, 12)


def test_best_fit_property_never_overlaps():
    rng = random.Random(4)
    for _ in range(300):
        allocated, held = 0x800, []
        for _ in range(20):
            if held and rng.random() < 0.4:
                allocated &= ~held.pop(rng.randrange(len(held)))
                continue
            w = rng.randint(1, 5)
            try:
                mask = find_best_fit_bitmask(w, allocated, 12)
            except ValueError:
                assert longest_free_run(allocated, 12)[1] < w
                continue
            assert mask & allocated == 0 and mask < (1 << 12) and bin(mask).count("1") == w
            low = mask & -mask
            assert (mask + low) & mask == 0                      # contiguous
            allocated |= mask
            held.append(mask)


def _probed(order="ascending", greedy=False, mb_used=0):
    ctl = DynamicPriority(DynamicPriorityConfig(interval_s=0.1, target=0.9, probe_order=order,
                                                greedy_allocation=greedy))
    ctl.sock = {0: SocketRdt(12, 1)}
    ctl.sock[0].mb_used = mb_used
    return ctl


def _sweep(ctl, points, rels):
    """Feed the measured relative IPCs point by point: (result, points measured)."""
    job = _Job("/j", 0, 1, True, 0, probe_points=points, probe_rel=[])
    for i, (point, rel) in enumerate(zip(points, rels)):
        job.probe_rel.append((point, rel))
        result = ctl._probe_result(job, last=i + 1 == len(points))
        if result is not None:
            return result, i + 1
    raise AssertionError("the sweep returned nothing")


ASC = [(1, 10), (1, 20), (2, 10), (2, 20)]


def test_ascending_probe_stops_at_the_first_point_at_target():
    assert _sweep(_probed(), ASC, [0.5, 0.8, 0.95, 0.99]) == ((2, 10), 3)
    assert _sweep(_probed(), ASC, [0.5, 0.6, 0.7, 0.8]) == ((2, 20), 4)      # never: the max


def test_descending_probe_returns_the_last_good_point():
    desc = ASC[::-1]
    assert _sweep(_probed("descending"), desc, [0.99, 0.95, 0.7, 0.99]) == ((2, 10), 3)
    assert _sweep(_probed("descending"), desc, [0.5, 0.99, 0.99, 0.99]) == ((2, 20), 1)
    assert _sweep(_probed("descending"), desc, [0.99] * 4) == ((1, 10), 4)   # min suffices


def test_greedy_probe_sweeps_everything_and_spares_the_scarce_resource():
    points = [(w, b) for w in range(1, 5) for b in (10, 20, 30)]
    passing = {(2, 30), (3, 20), (4, 10), (4, 20), (4, 30)}
    rels = [0.95 if p in passing else 0.5 for p in points]
    # 70% MB booked: (3 ways, 20%) uses 3/4 of the ways and 2/3 of the MB left;
    # (2, 30) would take all the MB, (4, 10) all the ways
    assert _sweep(_probed(greedy=True, mb_used=70), points, rels) == ((3, 20), 12)
    # no MB booked: the fewest ways at full MB share is no longer scarce
    assert _sweep(_probed(greedy=True), points, rels)[0] == (2, 30)
    assert _sweep(_probed(greedy=True), points, [0.5] * 12) == ((4, 30), 12)


@pytest.mark.parametrize("probe", [[], ["controller.probe_order=descending"],
                                   ["controller.greedy_allocation=true"]])
def test_dynamic_priority_masks_disjoint_in_a_run(probe):
    # 120 s: results wait for a running probe, so descending and greedy
    # (whose probes hold more ways) reach two live classes later
    ctl, seen = _checked_run(["duration_s=120", "controller.probe_s=2",
                              "controller.interval_s=0.2", *probe], 120.0)
    assert seen["checks"] > 500 and seen["classes"] >= 2
    assert ctl.summary()["dynamic_priority_allocations"] >= 2


@pytest.mark.slow
def test_dynamic_priority_masks_disjoint_over_the_hour():
    # the full exceeding-demand hour once handed a probe result the ways a
    # running probe was about to grow into (found at t = 2717 s)
    ctl, seen = _checked_run([], 3600.0)
    assert seen["checks"] > 1000 and ctl.summary()["dynamic_priority_allocations"] >= 10


def _checked_run(overrides: list, duration_s: float):
    """Run exceeding_demand under dynamic_priority, checking after every
    controller step that no two priority classes share a way of a socket."""
    from backends.host import plain_config
    from sim.engine import s_to_ns
    from sim.workloads import trace_for
    cfg = plain_config(_cfg(["experiment=noisy_scenarios", "controller=dynamic_priority",
                       "workload.scenario=exceeding_demand", *overrides]))
    engine, machine, recorder, workload = build(cfg, trace_for(cfg))
    ctl = attach_controller(cfg, engine, machine, recorder, workload)
    seen = {"checks": 0, "classes": 0}
    step = ctl.step

    def checked(host):
        step(host)
        res = host.machine.memory.resctrl
        for d in res.info.domains:
            socket = d
            masks = [(name, res.cbm(name, d)) for name in res.groups if name.startswith("prio")
                     and ctl_job_socket(name) == socket]
            seen["classes"] = max(seen["classes"], len(masks))
            union = 0
            for _, m in masks:
                assert m & union == 0, "overlapping exclusive masks"
                assert m < (1 << 12)
                union |= m
            assert union & res.cbm("", d) == 0                  # batch pool apart
            assert bin(union).count("1") <= 11
        seen["checks"] += 1

    def ctl_job_socket(name):
        for j in ctl.jobs.values():
            if j.cls == name:
                return j.socket
        return -1

    ctl.step = checked
    workload.start()
    engine.run(s_to_ns(duration_s))
    return ctl, seen


# ---- dynamic_priority: balancing and swap --------------------------------------------------

class _MovingHost(FakeHost):
    def __init__(self, sockets=2, cores=4):
        super().__init__(sockets, cores)
        self.cpusets: list[tuple[str, set]] = []

    def set_cpuset(self, cgroup, cpus):
        self.cpusets.append((cgroup, set(cpus)))


def _balancer(host, jobs, rebalance=True):
    """A dynamic_priority controller with ``jobs`` running: (cgroup, socket,
    threads, priority, stall cycles over the last tick)."""
    ctl = DynamicPriority(DynamicPriorityConfig(interval_s=1.0, warmup_s=3.0, cpuset="cores",
                                                rebalance=rebalance))
    ctl.acct = CoreAccountant(host)
    ctl.sock = {s: SocketRdt(12, 1) for s in ctl.acct.cores}
    ctl.jobs, ctl.job_load = {}, {}
    ctl.load = dict.fromkeys(ctl.sock, 0.0)
    ctl.rebalance_due_ns, ctl.rebalance_moves, ctl.swaps = None, 0, 0
    for cg, socket, threads, prio, load in jobs:
        ctl.acct.take(cg, socket, threads)
        ctl.jobs[cg] = _Job(cg, socket, threads, prio, 0)
        ctl.job_load[cg] = load
        ctl.load[socket] += load
    return ctl


def test_rebalance_moves_the_batch_job_that_best_evens_the_stall_load():
    h = _MovingHost()
    # socket 0 carries 9 (the priority job's 4 cannot move), socket 1 carries 1:
    # moving /b (3) leaves 6 vs 4, the best split; /c (1) would leave 8 vs 2
    ctl = _balancer(h, [("/p", 0, 1, True, 4.0), ("/b", 0, 1, False, 3.0),
                        ("/c", 0, 1, False, 1.0), ("/d", 1, 1, False, 1.0)])
    ctl._rebalance(h, now=10**9)
    assert h.cpusets == [("/b", {5})]                  # the first free core of socket 1
    assert ctl.jobs["/b"].socket == 1 and ctl.acct.jobs["/b"][0] == 1
    assert ctl.rebalance_moves == 1 and ctl.rebalance_due_ns == 4 * 10**9
    # a job as loaded as the gap would only move the imbalance: no move
    h2 = _MovingHost()
    ctl2 = _balancer(h2, [("/big", 0, 1, False, 9.0), ("/x", 1, 1, False, 0.0)])
    ctl2._rebalance(h2, now=0)
    assert h2.cpusets == [] and ctl2.rebalance_due_ns is None


@pytest.mark.parametrize("placement, socket", [("stall_load", 1), ("committed_cores", 0)])
def test_batch_placement_by_stall_load_or_committed_cores(placement, socket):
    """Socket 0 has one job with little stall load, socket 1 two with none:
    a batch job goes to socket 1 by the thesis's stall-load heuristic (the
    default), to socket 0 by least_loaded's committed-cores metric."""
    h = _MovingHost()
    ctl = _balancer(h, [("/a", 0, 1, False, 5.0), ("/b", 1, 1, False, 0.0),
                        ("/c", 1, 1, False, 0.0)], rebalance=False)
    ctl.cfg.batch_placement = placement
    assert DynamicPriorityConfig().batch_placement == "stall_load"
    h.pending = [PendingJob("/j", 0.0, 1)]
    ctl._admit(h, now=0)
    assert ctl.jobs["/j"].socket == socket


def test_a_batch_admission_schedules_a_rebalance_after_the_warmup():
    h = _MovingHost()
    ctl = _balancer(h, [])
    h.pending = [PendingJob("/j", 0.0, 1)]
    ctl._admit(h, now=2 * 10**9)
    assert ctl.rebalance_due_ns == 5 * 10**9
    ctl_off = _balancer(_MovingHost(), [], rebalance=False)
    h.pending = [PendingJob("/k", 0.0, 1)]
    ctl_off._admit(h, now=0)
    assert ctl_off.rebalance_due_ns is None


@pytest.mark.parametrize("rebalance", [True, False])
def test_swap_moves_a_batch_job_to_make_room_for_the_head(rebalance):
    """Each 2-core socket has one core free: the 2-thread head fits nowhere
    until a 1-thread batch job moves over (never the priority job)."""
    h = _MovingHost(sockets=2, cores=2)
    ctl = _balancer(h, [("/p", 0, 1, True, 0.0), ("/x", 1, 1, False, 0.0)],
                    rebalance=rebalance)
    h.pending = [PendingJob("/head", 0.0, 2)]
    ctl._admit(h, now=0)
    if not rebalance:
        assert h.admitted == [] and h.cpusets == []
        return
    # socket 0 holds only the priority job: socket 1 is freed by moving /x
    assert h.cpusets == [("/x", {1})]
    assert h.admitted == [("/head", {2, 3})]
    assert ctl.swaps == 1 and ctl.jobs["/head"].socket == 1


def test_a_cgroup_moved_to_the_other_socket_refetches_its_lines_there():
    """memlookup (root group, low intensity so the refill spans epochs) is
    re-pinned from socket 0 to socket 1 at 1 s (SimHost.set_cpuset, as the
    balancing of dynamic_priority does): on socket 1 it starts with none of
    its lines, misses more until it has fetched its steady occupancy once,
    then runs as it did on socket 0; no CPU time is lost in the move."""
    from backends.host import plain_config
    from sim.engine import s_to_ns
    from sim.metrics import IntervalSampler
    cfg = plain_config(_cfg(["workload=memlookup", "host=silver-4314-2s", "duration_s=2",
                       "warmup_s=0", "workload.memory.refs_per_kinstr=0.5"]))
    engine, machine, recorder, workload = build(cfg)
    host = SimHost(machine)
    sampler = IntervalSampler(machine, s_to_ns(0.05))
    socket1 = {c.cpu for c in machine.topology.cpus if c.socket == 1 and c.thread == 0}
    engine.call_at(s_to_ns(1.0), host.set_cpuset, "/memlookup/c0", {min(socket1)})
    workload.start()
    sampler.start()
    engine.run(s_to_ns(1.6))
    rows = [x for x in sampler.table().to_pylist() if x["cgroup"] == "/memlookup/c0"]
    steady, after = rows[18], rows[20:]
    assert {p.cpu for p in machine.groups["/memlookup/c0"].tasks} == {min(socket1)}
    excess = [x["llc_miss_rate"] - steady["llc_miss_rate"] for x in after]
    assert excess[0] > 0.3 and excess[-1] == pytest.approx(0, abs=1e-6)
    assert all(a > b > 0 for a, b in zip(excess, excess[1:4]))     # exp(-refs / N)
    assert after[-1]["ipce"] == pytest.approx(steady["ipce"], rel=1e-6)
    for x in rows[1:]:
        assert x["cycles"] == pytest.approx(0.05 * 2.4e9, rel=1e-6)   # busy throughout
    extra = sum(x["mbm_bytes"] - steady["mbm_bytes"] * x["instructions"] / steady["instructions"]
                for x in after) / (64 * 2)
    assert extra == pytest.approx(steady["llc_occupancy_mb"] * 2**20 / 64, rel=1e-3)
