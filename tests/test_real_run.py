"""`colosim run backend=real` end to end on this machine (root, cgroup
cpu/cpuacct/cpuset, perf, gcc).  Marked ``hardware``; skips with the reason
when the host cannot run it.  About 35 s."""
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from backends.real import cgroupfs, detect
from results.rundir import read_run_dir
from cli.main import main
from tests.hardware import cgroups_unavailable

pytestmark = pytest.mark.hardware


REASON = cgroups_unavailable() or (
    None if shutil.which("gcc") else "needs gcc to build the native worker")
if REASON:
    pytestmark = [pytest.mark.hardware, pytest.mark.skip(reason=REASON)]

SCHED = detect.fair_scheduler() if not REASON else "eevdf"
BASE = ["host=this-vm", f"scheduler={SCHED}", "workload=poisson", "workload.functions=4",
        "duration_s=10", "warmup_s=1", "seed=1"]   # the 10-second replay


def _ours(name):
    return [p for p in cgroupfs.find_leftovers() if p.name.startswith(f"colosim-{name}")]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / f"rt-{os.getpid()}-poisson"
    # flag instead of reject: a busy shared host must not fail the test; the
    # lateness is still reported and checked below
    assert main(["run", "backend=real", *BASE, "backend.lateness_action=flag",
                 f"output_dir={out}"]) == 0
    assert not _ours(out.name)          # cgroups and workers removed
    return out


def test_every_request_is_accounted_for_and_latencies_cover_demand(real_run):
    run = read_run_dir(real_run)
    s = run.summary.to_pylist()[0]
    trace = pq.read_table(real_run / "trace.parquet").to_pandas()
    after = trace[trace.arrival_s >= 1.0]
    req = run.requests.to_pandas()
    assert s["backend"] == "real" and s["scheduler"] == SCHED and len(req) > 100
    assert s["n_requests"] + s["n_unfinished"] == len(after)
    m = req.merge(after, on=["function", "arrival_s"], how="left")
    assert not m.demand_s.isna().any()
    assert np.allclose(m.cpu_demand_s, m.demand_s, atol=1e-9)
    assert (req.latency_s >= req.cpu_demand_s / m.threads).all()
    assert (req.end_s <= 10.0).all() and (req.start_s >= req.arrival_s - 1e-3).all()
    # the worker spins until its thread CPU time reaches the demand: never
    # less, and beyond it only by the last loop turn.  Rarely much more: a
    # vCPU the hypervisor deschedules inside that turn keeps charging the
    # thread (one request overshot by 28 ms in ~800 in a CI run), so a few
    # such requests are tolerated, not a systematic overshoot
    over = req.cpu_measured_s - req.cpu_demand_s
    assert (over >= -1e-6).all()
    assert np.quantile(over, 0.95) < 2e-4, over.describe()
    assert (over > 5e-3).mean() <= 0.005, req[over > 5e-3]


def test_lateness_and_perf_counts_are_reported(real_run):
    s = read_run_dir(real_run).summary.to_pylist()[0]
    for k in ("p50", "p99", "max"):
        assert 0 <= s[f"loadgen_lateness_{k}_s"] < 1.0
    assert s["loadgen_lateness_p50_s"] <= s["loadgen_lateness_p99_s"] <= \
        s["loadgen_lateness_max_s"]
    assert isinstance(s["loadgen_ok"], bool)
    assert s["perf_status"] == "ok" and s["ctx_switches"] > 0 and s["migrations"] is not None
    assert s["ctx_switch_rate_per_s"] == pytest.approx(s["ctx_switches"] / 9.0)   # after warmup
    iv = read_run_dir(real_run).intervals.to_pandas()
    for column in ("instructions", "cycles", "stalled_cycles_frontend", "stalled_cycles_backend"):
        # null where the PMU lacks the event (this VM), counts where it has it
        assert (iv[column].dropna() >= 0).all(), column
    # what the real host cannot measure stays missing
    assert np.isnan(s["sched_overhead_frac"]) and np.isnan(s["ctx_switch_cost_mean_us"])
    assert s["sim_events"] is None
    assert 0 < s["cpu_util"] < 1


def test_intervals_have_the_simulators_columns(real_run, tmp_path):
    sim_out = tmp_path / "sim"
    assert main(["run", *BASE, "calibration=ideal", f"output_dir={sim_out}"]) == 0
    real = read_run_dir(real_run).intervals
    sim = read_run_dir(sim_out).intervals
    assert set(sim.column_names) <= set(real.column_names)
    for name in sim.column_names:
        assert real.schema.field(name).type == sim.schema.field(name).type, name
    cg = set(real.column("cgroup").to_pylist())
    assert cg == set(sim.column("cgroup").to_pylist())
    iv = real.to_pandas()
    fn = iv[iv.cgroup == "/faas.slice/func-0"]
    assert len(fn) == 10 and fn.usage_s.sum() > 0
    # same config, same requests: the simulator and the real run side by side
    sreq = read_run_dir(sim_out).requests.to_pandas()
    assert set(sreq.arrival_s) <= set(pq.read_table(real_run / "trace.parquet")
                                      .column("arrival_s").to_pylist())
    assert main(["compare", str(sim_out), str(real_run), "--metric",
                 "latency_p99_s,ctx_switch_rate_per_s"]) == 0


def test_static_controller_throttles_in_cpu_stat(tmp_path):
    out = tmp_path / f"rt-{os.getpid()}-static"
    # 40 req/s x 10 ms = 0.4 CPU per function against a 0.02 CPU limit: far
    # enough above it that other load on the machine cannot hide the throttling
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={SCHED}",
                 "workload.functions=4", "workload.rate_rps=40", "duration_s=3",
                 "warmup_s=0.5", "controller=static", "controller.quota_us=2000",
                 "backend.lateness_action=flag", f"output_dir={out}"]) == 0
    run = read_run_dir(out)
    s = run.summary.to_pylist()[0]
    assert s["controllers"] == "static" and s["static_limit_mcpu"] == 20
    assert s["nr_throttled"] > 0 and s["throttled_time_s"] > 0
    iv = run.intervals.to_pandas()
    fn = iv[iv.cgroup.str.startswith("/faas.slice/func-")]
    assert (fn.quota_us == 2000).all() and (fn.period_us == 100000).all()
    assert fn.nr_throttled.sum() > 0
    # an interval of length L overlaps at most ceil(L / period) + 1 bandwidth
    # periods, each refilling every function's 2 ms quota (the period timer's
    # phase is not the interval's), plus 5% for when the samples were taken
    by_interval = fn.groupby("interval_start_s")
    length = by_interval.interval_end_s.first() - by_interval.interval_start_s.first()
    refills = np.ceil(length / 0.1) + 1
    assert (by_interval.usage_s.sum() <= 4 * 0.002 * refills * 1.05).all()
    assert not _ours(out.name)


def test_cpuset_spread_writes_each_function_cgroups_cpuset(tmp_path, monkeypatch):
    """workload.cpuset_spread=llc on this host: the run's CPUs (backend.cpus
    = 1) form one LLC set, written to every function cgroup's cpuset.cpus
    before its worker starts, and every request is served."""
    from backends.real.host import RealHost
    written = []
    real_set = RealHost.set_cpuset

    def recorded(self, cgroup, cpus):
        real_set(self, cgroup, cpus)
        written.append((cgroup, self.cpus_of(cgroup)))
    monkeypatch.setattr(RealHost, "set_cpuset", recorded)
    out = tmp_path / f"rt-{os.getpid()}-spread"
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={SCHED}",
                 "workload.functions=3", "workload.rate_rps=20", "duration_s=2",
                 "warmup_s=0.5", "workload.cpuset_spread=llc", "backend.cpus=1",
                 "backend.lateness_action=flag", f"output_dir={out}"]) == 0
    assert written == [(f"/faas.slice/func-{i}", {1}) for i in range(3)]
    s = read_run_dir(out).summary.to_pylist()[0]
    assert s["n_requests"] > 0 and s["migrations"] == 0   # one CPU: none to migrate to
    assert not _ours(out.name)


def test_periodic_hog_under_quota(tmp_path):
    out = tmp_path / f"rt-{os.getpid()}-periodic"
    # one CPU hog in bursts of 10 ms, limited to 20 ms per 100 ms; this VM's
    # profile, so that the run checks the vCPUs' speed against its rt-app loop
    assert main(["run", "backend=real", "host=this-vm", "calibration=this-vm",
                 f"scheduler={SCHED}", "workload=periodic", "workload.threads=1",
                 "workload.run_ms=10", "workload.sleep_ms=0", "workload.quota_us=20000",
                 "duration_s=2.5", "warmup_s=0.5", f"output_dir={out}"]) == 0
    run = read_run_dir(out)
    s = run.summary.to_pylist()[0]
    req = run.requests.to_pandas()
    assert s["n_unfinished"] == 1 and len(req) > 10
    assert (req.cgroup == "/periodic").all() and (req.cpu_demand_s == 0.01).all()
    iv = run.intervals.to_pandas()
    g = iv[iv.cgroup == "/periodic"]
    assert (g.quota_us == 20000).all() and g.nr_throttled.sum() > 0
    full = g[(g.interval_end_s - g.interval_start_s) > 0.9]
    assert ((full.usage_s / (full.interval_end_s - full.interval_start_s)).between(0.17, 0.23)
            ).all()
    assert not _ours(out.name)
    # each burst spins reading its thread's CPU clock until it has grown by
    # 10 ms, so an overshoot is one gap between two reads in which the clock
    # jumped: a pause of the vCPU charged to the thread (11.18 ms once, with
    # the vCPUs at half speed; 10.00-10.11 ms in four runs at that speed
    # with the check off): checked on a quiet host only
    if s["host_disturbed"]:
        pytest.skip(f"host disturbed during the run: {s['host_disturbed_reason']}")
    off = req[~np.isclose(req.cpu_measured_s, 0.01, atol=5e-4)]
    assert off.empty, off[["start_s", "end_s", "cpu_measured_s"]].to_dict("records")


def test_worker_pool_serves_from_a_bounded_queue_and_drops(tmp_path):
    # one worker, no queue, 1.2 CPUs of offered work: some arrivals are dropped
    out = tmp_path / f"rt-{os.getpid()}-pool"
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={SCHED}",
                 "workload=worker_pool", "workload.workers=1", "workload.capacity=0",
                 "workload.rate_rps=60", "workload.mean_service_s=0.02", "duration_s=3",
                 "warmup_s=0.5", "backend.lateness_action=flag", f"output_dir={out}"]) == 0
    run = read_run_dir(out)
    s = run.summary.to_pylist()[0]
    req = run.requests.to_pandas()
    trace = pq.read_table(out / "trace.parquet").to_pandas()
    assert set(req.cgroup) == {"/server"} and 0 < s["n_dropped"] < len(req)
    assert s["n_requests"] + s["n_unfinished"] == (trace.arrival_s >= 0.5).sum()
    dropped, done = req[req.dropped], req[~req.dropped]
    assert dropped.latency_s.isna().all() and dropped.start_s.isna().all()
    assert (done.latency_s >= done.cpu_demand_s).all()
    # one worker: no two requests in service at once
    done = done.sort_values("start_s")
    assert (done.start_s.to_numpy()[1:] >= done.end_s.to_numpy()[:-1] - 1e-6).all()
    assert not _ours(out.name)


def test_a_scheduler_the_kernel_does_not_run_is_refused(tmp_path, capsys):
    other = "cfs" if SCHED != "cfs" else "eevdf"
    out = tmp_path / "refused"
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={other}",
                 f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert f"scheduler={other}" in err and f"pass scheduler={SCHED}" in err
    assert not out.exists()


def test_worker_pool_under_closed_loop_clients(tmp_path):
    # 3 clients, 10 ms requests, 50 ms think: at most N / (S + Z) = 50 req/s,
    # less by whatever the host adds to S; the simulator runs the same clients
    out = tmp_path / f"rt-{os.getpid()}-closed"
    args = ["host=this-vm", f"scheduler={SCHED}", "workload=worker_pool",
            "workload.clients=3", "workload.think_s=0.05", "workload.workers=3",
            "workload.service=det", "workload.mean_service_s=0.01", "duration_s=4",
            "warmup_s=1", "backend.lateness_action=flag"]
    assert main(["run", "backend=real", *args, f"output_dir={out}"]) == 0
    assert main(["run", *args[:-1], f"output_dir={out}-sim"]) == 0
    assert not _ours(out.name)
    real, sim = read_run_dir(out), read_run_dir(f"{out}-sim")
    assert not (out / "trace.parquet").exists()      # a closed loop has no trace
    r = real.summary.to_pylist()[0]
    req = real.requests.to_pandas()
    assert r["n_dropped"] == 0 and r["n_unfinished"] <= 3     # one in flight per client
    assert np.allclose(req.cpu_measured_s, 0.01, atol=0.002)
    assert (req.latency_s >= 0.01 - 1e-4).all()
    bound = 3 / (0.01 + 0.05)
    assert 0.5 * bound <= r["throughput_rps"] <= 1.02 * bound
    assert sim.summary.to_pylist()[0]["throughput_rps"] == pytest.approx(bound, rel=0.03)


@pytest.mark.parametrize("controller, keys, column", [
    ("vpa", ["controller.interval_s=0.25", "controller.recommender_interval_s=0.5",
             "controller.update_interval_s=1"], "vpa_target_mcpu_mean"),
    ("catcloud", ["controller.interval_s=0.005"], "catcloud_cpu_max_writes"),
])
def test_controllers_drive_real_cpu_max(tmp_path, controller, keys, column):
    # the same controller objects as in the simulator, on the wall clock: a
    # periodic thread (10 ms run, 30 ms sleep) gets a cpu.max they computed
    out = tmp_path / f"rt-{os.getpid()}-{controller}"
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={SCHED}",
                 "workload=periodic", "workload.threads=1", "workload.run_ms=10",
                 "workload.sleep_ms=30", "duration_s=4", "warmup_s=0.5",
                 f"controller={controller}", *keys, f"output_dir={out}"]) == 0
    assert not _ours(out.name)
    run = read_run_dir(out)
    s = run.summary.to_pylist()[0]
    assert s["controllers"] == controller and s[column] > 0
    iv = run.intervals.to_pandas()
    limited = iv[iv.quota_us.notna() & (iv.cgroup != "/")]
    assert not limited.empty                       # a real cpu.max was in force
    if controller == "catcloud":
        assert s["catcloud_tracer"] == "userspace-approximation"
