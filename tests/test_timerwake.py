"""Timer-driven wake-ups (sim/machine.py ``timer_sleep``, the cost model's
timer_slack_ns and timer_irq_ns): where the trace puts the wake-up, what
the interrupt takes from a running task, the profiles that leave them off,
the fit's timer points, and the simulator against the timerwake
microbenchmark recorded on this VM (calibration/data/this-vm)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from calibration import fit as F
from calibration.bench.common import read_bench
from scenarios.simulate import simulate
from sim.costmodel import CostModel
from tests.simcfg import DEFAULT_COSTS, IDEAL, make_cfg, periodic

REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "scenarios" / "conf" / "calibration"
BENCH = REPO / "calibration" / "data" / "this-vm" / "timerwake.parquet"
TRACE = {"name": "sched"}
SLACK, IRQ, EXIT = 50_000, 13_000, 30_000
SLEEP_MS = 5.0


def _sleeps_and_wakeups(sched, comm: str) -> np.ndarray:
    """Per sleep of ``comm``: its sched_wakeup time minus the switch that
    put it to sleep (ns)."""
    ev = sched.to_pandas()
    mine = ev[((ev.event == "sched_switch") & (ev.prev_comm == comm))
              | ((ev.event == "sched_wakeup") & (ev.next_comm == comm))]
    out, slept = [], None
    for r in mine.itertuples():
        if r.event == "sched_switch":
            slept = r.time_ns
        elif slept is not None:
            out.append(r.time_ns - slept)
            slept = None
    return np.array(out)


@pytest.mark.parametrize("policy, delay", [(None, SLACK), ("rr", 0)])
def test_the_trace_shows_the_wakeup_after_the_slack(policy, delay):
    """A fair thread's timer expires timer_slack_ns late, an RT thread's on
    time; alone, its CPU is idle when it fires: the interrupt is in the
    idle exit, after the wake-up."""
    costs = {**DEFAULT_COSTS, "idle_exit_ns": EXIT, "timer_slack_ns": SLACK,
             "timer_irq_ns": IRQ}
    groups = [{"name": "t", "threads": 1, "task_policy": policy}]
    cfg = make_cfg(periodic(threads=1, run_ms=1.0, sleep_ms=SLEEP_MS, groups=groups),
                   duration_s=0.2, warmup_s=0, calibration=costs) | {"trace": TRACE}
    sched = simulate(cfg).extra["sched"]
    gaps = _sleeps_and_wakeups(sched, "t/0")
    assert gaps.size > 20 and (gaps == SLEEP_MS * 1e6 + delay).all()


def test_off_the_wakeup_is_at_the_requested_time():
    cfg = make_cfg(periodic(threads=1, run_ms=1.0, sleep_ms=SLEEP_MS), duration_s=0.2,
                   warmup_s=0, calibration=DEFAULT_COSTS) | {"trace": TRACE}
    gaps = _sleeps_and_wakeups(simulate(cfg).extra["sched"], "periodic/0")
    assert gaps.size > 20 and (gaps == SLEEP_MS * 1e6).all()


def test_the_interrupt_stops_the_running_task():
    """An RR sleeper beside a hog on one CPU: every expiry takes
    timer_irq_ns from the hog (scheduler overhead, not useful work) and the
    sleeper's burst completes that much later than its release + run; the
    trace shows its wake-up that much after the expiry."""
    def run(irq):
        groups = [{"name": "rt", "threads": 1, "task_policy": "rr", "run_ms": 0.5,
                   "sleep_ms": 2.0}, {"name": "hog", "threads": 1, "run_ms": 100_000.0,
                                      "sleep_ms": 0.0}]
        cfg = make_cfg(periodic(threads=1, run_ms=1.0, groups=groups), duration_s=1.0,
                       warmup_s=0, calibration={**IDEAL, "timer_irq_ns": irq,
                                                "timer_slack_ns": SLACK})
        return simulate(cfg | {"trace": TRACE})
    off, on = run(0), run(IRQ)
    gaps = _sleeps_and_wakeups(on.extra["sched"], "rt/0")
    assert gaps.size > 100 and (gaps == 2_000_000 + IRQ).all()
    lat_off, lat_on = (r.requests.to_pandas().query("cgroup == '/rt'").latency_s.to_numpy()
                       * 1e9 for r in (off, on))
    assert np.allclose(lat_off[1:], 500_000) and np.allclose(lat_on[1:], 500_000 + IRQ)
    wakeups = lat_on.size - 1       # the first burst starts at t0, without a timer
    lost = (on.summary["sched_overhead_frac"][0].as_py()
            - off.summary["sched_overhead_frac"][0].as_py())
    assert lost * 1e9 == pytest.approx(wakeups * IRQ, rel=0.02)


@pytest.mark.parametrize("profile", ["default", "e5-2430l", "ideal"])
def test_other_profiles_leave_timers_off(profile):
    cal = yaml.safe_load((PROFILES / f"{profile}.yaml").read_text())
    model = CostModel.from_config(cal)
    assert (model.timer_slack_ns, model.timer_irq_ns) == (0, 0)


def _table(lateness: dict) -> pa.Table:
    """A timerwake table: {(sleeper, load): [per-sweep lateness arrays]}."""
    rows = []
    for (sleeper, load), sweeps in lateness.items():
        for r, values in enumerate(sweeps):
            rows += [{"repeat": r, "sleeper": sleeper, "load": load, "kind": "wake",
                      "period_ns": 1_000_000, "lateness_ns": int(v)} for v in values]
    return pa.Table.from_pylist(rows)


def test_timer_points_recover_slack_and_interrupt():
    """Lateness made from known slack, interrupt and switch costs: the fit's
    timer points and its formulas give them back."""
    rng = np.random.default_rng(0)
    model = CostModel("x", direct_ns=1000, per_level_ns=100, idle_exit_ns=EXIT)
    switch = model.switch_cost(3, 0, 0, False, 2, whole_ns=False)
    idle = model.switch_cost(3, 0, 0, False, 1, from_idle=True, whole_ns=False)

    def sweeps(center):
        return [center + rng.normal(0, 300, 400) for _ in range(3)]
    table = _table({("other-1ns", "idle"): sweeps(idle),
                    ("fifo-50us", "same"): sweeps(IRQ + switch),
                    ("other-1ns", "same"): sweeps(IRQ + switch + 2000),
                    ("other-50us", "same"): sweeps(IRQ + switch + 2000 + SLACK)})
    points = F.timer_points(table, 3)
    assert [p.kind for p in points] == ["timer_idle", "timer", "slack"]
    p = {"direct_ns": 1000, "per_level_ns": 100, "queue_ns_per_log2": 0, "migration_ns": 0,
         "idle_exit_ns": EXIT, "idle_exit_cold_ns": 0, "idle_exit_decay_ns": 1,
         "timer_irq_ns": IRQ, "timer_slack_ns": SLACK}
    for pt in points:
        assert F.predict(p, pt, []) == pytest.approx(pt.value_ns, abs=4 * pt.se_ns + 50)


def test_a_disturbed_sweep_is_left_out_of_the_fit():
    """A sweep with one configuration measured beside other load is dropped
    whole (the slack point pairs a sweep's medians); all disturbed: refused."""
    rng = np.random.default_rng(1)
    configs = [("other-1ns", "idle"), ("fifo-50us", "same"), ("other-1ns", "same"),
               ("other-50us", "same")]
    table = _table({c: [20_000 + rng.normal(0, 300, 200) for _ in range(3)] for c in configs})
    # sweep 1's busy configuration ran beside a disturbance: 50 us later
    late = table.column("lateness_ns").to_numpy().copy()
    hit = ((table.column("repeat").to_numpy() == 1)
           & (table.column("sleeper").to_numpy(zero_copy_only=False) == "fifo-50us"))
    late[hit] += 50_000
    table = table.set_column(table.column_names.index("lateness_ns"), "lateness_ns",
                             pa.array(late))
    disturbed = table.append_column("host_disturbed", pa.array(hit))
    kept = F.quiet_sweeps(disturbed)
    assert sorted(set(kept.column("repeat").to_pylist())) == [0, 2]
    busy = {p.kind: p for p in F.timer_points(disturbed, 3)}["timer"]
    assert busy.value_ns == pytest.approx(20_000, abs=200)
    assert {p.kind: p for p in F.timer_points(table, 3)}["timer"].value_ns > 30_000
    everything = table.append_column("host_disturbed", pa.array([True] * table.num_rows))
    with pytest.raises(ValueError, match="all 3 sweeps were measured on a disturbed host"):
        F.timer_points(everything, 3)


def test_the_benchmark_flags_other_load_and_steal():
    from calibration.bench.common import disturbance
    s = 1_000_000_000
    h0 = {"busy_ns": 0, "steal_ns": 0, "total_ns": 0, "self_ns": 0}
    quiet = disturbance(h0, {"busy_ns": 1 * s, "steal_ns": 0, "total_ns": 2 * s,
                             "self_ns": s // 100}, own_ns=s - s // 50)
    assert quiet["other_frac"] == pytest.approx(0.005) and not quiet["host_disturbed"]
    busy = disturbance(h0, {"busy_ns": 2 * s, "steal_ns": 0, "total_ns": 2 * s, "self_ns": 0},
                       own_ns=s)
    assert busy["other_frac"] == pytest.approx(0.5) and busy["host_disturbed"]
    stolen = disturbance(h0, {"busy_ns": s, "steal_ns": s // 10, "total_ns": 2 * s,
                              "self_ns": 0}, own_ns=s)
    assert stolen["steal_frac"] == pytest.approx(0.05) and stolen["host_disturbed"]


def _sim_wakeup_us(tmp_path, sleeper: str, **costs) -> float:
    """The median wake-up latency (us) of the benchmark's busy
    configuration run by rt-app on the simulator with the this-vm profile
    (``costs`` override it): a 1 ms timer sleeper beside a nice-19 hog it
    preempts on CPU 0."""
    policy = "SCHED_FIFO" if sleeper.startswith("fifo") else "SCHED_OTHER"
    doc = {"global": {"calibration": 16},
           "tasks": {"sleeper": {"policy": policy, "cpus": [0], "run": 2,
                                 "timer": {"ref": "unique", "period": 1000}},
                     "hog": {"policy": "SCHED_OTHER", "priority": 19, "cpus": [0],
                             "run": 100000}}}
    f = tmp_path / "timerwake.json"
    f.write_text(json.dumps(doc))
    cal = yaml.safe_load((PROFILES / "this-vm.yaml").read_text()) | costs
    res = simulate(make_cfg({"name": "rtapp", "file": str(f)}, duration_s=0.5, warmup_s=0,
                            calibration=cal, scheduler={"name": "eevdf"}))
    rows = [r for r in res.extra["rtapp"].to_pylist() if r["task"] == "sleeper-0"]
    return float(np.median([r["wu_lat_us"] for r in rows[1:]]))


def _within_spread(sim_us: float, sleeper: str) -> bool:
    """The simulated latency lies within the recorded sweeps' medians
    widened by the measurement error of the points that fixed the
    parameters it uses (the profile's fit block: the busy point's for the
    interrupt, the slack point's for a SCHED_OTHER sleeper), +-0.5 us for
    rt-app's rounding to whole us."""
    t = read_bench(BENCH)[0].to_pandas()
    sel = t[(t.kind == "wake") & (t.sleeper == sleeper) & (t.load == "same")]
    medians = sel.groupby("repeat").lateness_ns.median().to_numpy()
    fit = yaml.safe_load((PROFILES / "this-vm.yaml").read_text())["fit"]
    error = {r["kind"]: r["error_ns"] for r in fit["residuals"]}
    e = error["timer"] if sleeper.startswith("fifo") else np.hypot(error["timer"], error["slack"])
    return (medians.min() - e) / 1e3 - 0.5 <= sim_us <= (medians.max() + e) / 1e3 + 0.5


@pytest.mark.skipif(not BENCH.exists(), reason="no timerwake.parquet recorded")
@pytest.mark.parametrize("sleeper", ["fifo-50us", "other-50us"])
def test_the_simulator_reproduces_the_busy_cpu_benchmark(tmp_path, sleeper):
    """With the profile fitted to it, a timer wake-up on a busy CPU (the
    slack, the interrupt and the preemption) reproduces the recorded
    lateness within its spread; without the mechanisms it does not."""
    assert _within_spread(_sim_wakeup_us(tmp_path, sleeper), sleeper)
    assert not _within_spread(_sim_wakeup_us(tmp_path, sleeper, timer_slack_ns=0,
                                             timer_irq_ns=0), sleeper)


def test_timer_irq_spread_is_the_interrupts_scatter_less_the_switch():
    """Wake-ups beside the hog made of a switch and an interrupt scattered
    lognormally, each sweep at its own median: the spread is the
    interrupt's ratios to its median at SPREAD_QUANTILES (the ends at the
    1st and 99th percentiles), the switch taken out."""
    from scipy.stats import norm

    from sim.costmodel import SPREAD_QUANTILES
    rng = np.random.default_rng(1)
    sigma, switch = 0.3, 1_500
    sweeps = [switch + IRQ * scale * np.exp(sigma * rng.standard_normal(20_000))
              for scale in (0.9, 1.0, 1.2)]
    got = F.timer_irq_spread(_table({("fifo-50us", "same"): sweeps}), switch)
    want = np.exp(sigma * norm.ppf(np.clip(SPREAD_QUANTILES, 0.01, 0.99)))
    assert got[3] == 1.0
    assert got == pytest.approx(want, rel=0.03)
    # with the switch left in, the scatter looks narrower
    assert F.timer_irq_spread(_table({("fifo-50us", "same"): sweeps}), 0)[-1] < got[-1]
    assert F.timer_irq_spread(_table({("fifo-50us", "same"): [sweeps[0][:50]]}), switch) is None
