"""workload=memlookup on the real backend (backends/real/memlookup.py): the
container plan, the partition plan shared with the simulator, a refusal
where partitions need resctrl, and (hardware: root, cgroups, gcc) runs on
this machine, unpartitioned against the simulator and partitioned against
the emulated resctrl."""
import json
import math
import shutil

import pytest

from backends.real import detect
from backends.real import memlookup as ML
from sim.workloads.memlookup import partition_plan
from tests.test_rdt_sidecar import emu_bins, emulated, logging_sidecars  # noqa: F401

CORES = {0: [(0, 4), (1, 5), (2, 6), (3, 7)], 1: [(8,), (9,)]}
W = {"containers": 2, "threads": 2, "burst_ms": 5.0, "socket": 0,
     "memory": {"buffer_mb": 6, "pages": "4k", "pattern": "random"},
     "partitions": None, "mb": None}


def test_containers_take_distinct_cores_of_their_socket():
    plan = ML.plan(W, CORES)
    assert [c["name"] for c in plan] == ["c0", "c1"]
    # one hardware thread of each physical core, cores in order
    assert [c["cpus"] for c in plan] == [{0, 1}, {2, 3}]
    assert all(c["run_us"] == 5000 and c["threads"] == 2 for c in plan)
    assert plan[0]["args"][plan[0]["args"].index("--bytes") + 1] == str(6 << 20)
    with pytest.raises(ML.MemLookupError, match="do not fit the 2 cores of socket 1"):
        ML.plan({**W, "socket": 1}, CORES)
    with pytest.raises(ML.MemLookupError, match="sockets \\[0, 1\\]"):
        ML.plan({**W, "socket": 2}, CORES)
    with pytest.raises(ML.MemLookupError, match="one entry per container"):
        ML.plan({**W, "partitions": ["0-5"]}, CORES)
    with pytest.raises(ML.MemLookupError, match="needs workload.memory"):
        ML.plan({**W, "memory": None}, CORES)


def test_the_partition_plan_is_the_simulators():
    assert partition_plan([None, None], 11, True) is None
    rest, classes = partition_plan(["0-5", "6-9"], 11, True)
    assert rest == 0x400 and classes == [(0x3f, True), (0x3c0, True)]
    # overlapping containers stay shareable; the root keeps what nobody has
    rest, classes = partition_plan(["0-5", "4-7", None], 11, True)
    assert rest == 0x700 and classes == [(0x3f, False), (0xf0, False), (None, False)]
    assert partition_plan(["0-5", "6-9"], 11, False)[1] == [(0x3f, False), (0x3c0, False)]


class _Host:
    """The RDT levers apply_partitions pulls, recorded."""
    def __init__(self):
        self.calls = []

    def rdt_info(self):
        from backends.host import RdtLimits
        return RdtLimits(ways=11, domains=(0, 1), num_closids=16, min_cbm_bits=1, mba_min=10,
                         mba_gran=10)

    def rdt_update_class(self, name, l3_cbm=None, mb_percent=None):
        self.calls.append(("update", name, l3_cbm))

    def rdt_create_class(self, name, l3_cbm, mb_percent=100, exclusive=False):
        self.calls.append(("create", name, l3_cbm, mb_percent, exclusive))

    def rdt_assign(self, cgroup, name):
        self.calls.append(("assign", cgroup, name))


def test_partitions_root_first_then_classes_then_assignment():
    host = _Host()
    w = {**W, "partitions": ["0-5", None], "mb": [30, 100]}
    made = ML.apply_partitions(host, w, ML.plan(w, CORES), ["/m/c0", "/m/c1"])
    assert made == ["c0", ""]
    assert host.calls == [("update", "", 0x7c0), ("create", "c0", 0x3f, 30, True),
                          ("assign", "/m/c0", "c0")]
    assert ML.apply_partitions(_Host(), W, ML.plan(W, CORES), ["/m/c0", "/m/c1"]) == ["", ""]


def test_partitions_are_refused_up_front_without_resctrl(monkeypatch, capsys):
    from cli.main import main
    monkeypatch.setattr(detect, "rdt_missing", lambda: "no resctrl here")
    assert main(["run", "backend=real", "host=this-vm", "scheduler=eevdf",
                 "workload=memlookup", "workload.partitions=[0-5]", "duration_s=1",
                 "warmup_s=0"]) != 0
    err = capsys.readouterr().err
    assert "workload.partitions needs RDT (resctrl)" in err and "no resctrl here" in err


# --- on this machine ------------------------------------------------------------
def _reason():
    from tests.hardware import cgroups_unavailable
    return cgroups_unavailable() or (None if shutil.which("gcc") else "needs gcc")


def _run(tmp_path, name, extra=()):
    from results.rundir import read_run_dir
    from cli.main import main
    out = tmp_path / name
    assert main(["run", "backend=real", "backend.lateness_action=flag", "host=this-vm",
                 f"scheduler={detect.fair_scheduler()}", "workload=memlookup",
                 "workload.containers=2", "duration_s=2", "warmup_s=0.5",
                 "backend.job_alone_s=0.2", *extra, f"output_dir={out}"]) == 0
    return read_run_dir(out)


@pytest.mark.hardware
def test_two_containers_run_bursts_back_to_back_as_the_simulator(tmp_path):
    reason = _reason()
    if reason:
        pytest.skip(reason)
    from results.rundir import read_run_dir
    from cli.main import main
    real = _run(tmp_path, "real")
    assert main(["run", "host=this-vm", f"scheduler={detect.fair_scheduler()}",
                 "workload=memlookup", "workload.containers=2", "duration_s=2",
                 "warmup_s=0.5", f"output_dir={tmp_path / 'sim'}"]) == 0
    sim = read_run_dir(tmp_path / "sim")
    req = real.requests.to_pandas()
    s = real.summary.to_pylist()[0]
    assert set(req.cgroup) == {"/memlookup/c0", "/memlookup/c1"}
    # back to back: each burst starts when the previous one of its thread ended
    assert (req.start_s == req.arrival_s).all() and (req.cpu_demand_s == 0.01).all()
    assert s["job_alone_ns_per_access_memlookup"] > 0
    assert math.isnan(s["llc_occupancy_mb"])                  # no classes to monitor
    # the speed alone measured again after the run, and the verdict on it
    assert (s["job_alone_spread_memlookup"] > 0.1) <= s["host_disturbed"]
    assert s["host_disturbed"] == bool(s["host_disturbed_reason"])
    if s["host_disturbed"]:
        # this VM's memory speed moves several-fold with its neighbours: a
        # disturbed run is flagged, not compared
        pytest.skip(f"speed comparison not made: {s['host_disturbed_reason']}")
    # a burst is 10 ms of work at the fastest speed measured alone, which held
    # within 10 % before and after the run: hardly any burst takes much less
    assert req.latency_s.quantile(0.05) > 0.008, req.latency_s.describe()
    # two containers, one thread each, ~100 bursts/s each: as the simulator
    ss = sim.summary.to_pylist()[0]
    assert s["throughput_rps"] == pytest.approx(ss["throughput_rps"], rel=0.2)


@pytest.mark.hardware
def test_partitioned_containers_get_their_classes_on_emulated_rdt(tmp_path, monkeypatch,
                                                                  emulated):
    reason = _reason()
    if reason:
        pytest.skip(reason)
    from backends.real import host as real_host
    calls = []

    def counters(e):
        # what CMT reads for the two classes (the emulated sidecar's prefix is colosim-)
        e.counters.write_text(json.dumps({f"colosim-c{i}": {"0": {"llc_occupancy": 3 << 20}}
                                          for i in (0, 1)}))
    monkeypatch.setattr(real_host, "RdtSidecar", logging_sidecars(emulated, calls, counters))
    monkeypatch.setattr(detect, "rdt_missing", lambda: None)
    monkeypatch.setenv("COLOSIM_RDT_STATE", str(tmp_path / "state"))
    run = _run(tmp_path, "part", ["workload.partitions=[0-4,5-8]", "workload.mb=[30,100]"])
    s = run.summary.to_pylist()[0]
    assert len(run.requests) > 50
    ops = [op for op, _, _ in calls]
    assert ops.index("root") < ops.index("configure")
    root = [f for op, f, _ in calls if op == "root"][0]
    assert int(root["l3"]) == 0x600            # the ways nobody has (min_cbm_bits 2 here)
    conf = [f["classes"] for op, f, _ in calls if op == "configure" and f["classes"]][-1]
    assert conf["c0"]["l3"] == 0x1f and conf["c0"]["exclusive"] and conf["c0"]["mb"] == 30
    assert conf["c1"]["l3"] == 0x1e0 and conf["c1"]["exclusive"]
    assert sorted(f["class"] for op, f, r in calls if op == "assign" and r["tids"]) == \
        ["c0", "c1"]
    assert s["llc_occupancy_mb"] == 6.0                      # 3 MiB per class, summed
    assert ops[-1] == "cleanup" and calls[-1][2]["root_restored"] is True


def test_the_memory_columns_come_from_the_containers_perf_intervals_after_warmup():
    from backends.real.jobs import STALL_EVENT
    from backends.real.perf import PerfSample

    def interval(t, cgroup, cycles, stall, refs, misses, cpu_ms):
        return [PerfSample(t, cgroup, e, v, "", 0, 100.0) for e, v in (
            ("cycles", cycles), (STALL_EVENT, stall), ("cache-references", refs),
            ("cache-misses", misses), ("task-clock", cpu_ms))]
    # perf started 0.05 s before t0; warm-up 0.2 s: the interval ending at
    # 0.2 s of perf time (0.15 s of run time) is warm-up
    samples = (interval(0.2, "/m/c0", 9000, 9000, 9, 9, 100)
               + interval(0.3, "/m/c0", 1000, 50, 100, 20, 100)
               + interval(0.3, "/m/c1", 1000, 500, 100, 60, 100))
    s = ML.perf_summary(samples, 0.05, 0.2, STALL_EVENT, priority=True)
    assert s["ipce_global"] == pytest.approx(1 - 550 / 2000) == s["ipce_priority"]
    assert math.isnan(s["ipce_batch"])                           # no batch container
    assert s["llc_miss_rate"] == pytest.approx(0.4)
    assert (s["llc_miss_rate_min"], s["llc_miss_rate_max"]) == pytest.approx((0.2, 0.6))
    assert s["time_above_target_frac"] == pytest.approx(0.5)    # c0 at 0.95, c1 at 0.5
    missing = [PerfSample(0.3, "/m/c0", "cache-misses", None, "", None, None, "not supported")]
    assert math.isnan(ML.perf_summary(missing, 0.05, 0.2, STALL_EVENT, True)["llc_miss_rate"])
