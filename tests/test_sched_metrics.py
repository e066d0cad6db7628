"""Scheduling metrics from sched.parquet (results/sched.py): hand-built
traces with known answers, the run's own summary, the run directory file
and the `colosim trace` command."""
import math
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from hypothesis import given, settings
from hypothesis import strategies as st

from results.sched import SchedTraceError, analyse, read_sched, sched_metrics
from results.schema import SCHED, SCHED_METRICS, SCHED_METRICS_FILE, THREAD_SUMMARY
from scenarios.simulate import simulate
from tests.simcfg import DEFAULT_COSTS, make_cfg, poisson

CG = {1: "/g1", 2: "/g1", 3: "/g2", 4: "/g2"}


def sched_table(events, comm=lambda pid: f"t{pid}") -> pa.Table:
    """SCHED rows from (time_ns, event, cpu, ...) tuples: switch rows are
    (t, cpu, prev_pid, prev_state, next_pid), the others (t, event, cpu, pid)
    plus orig_cpu for a migration; ``comm(pid)`` names a task."""
    rows = []
    for e in events:
        row = dict.fromkeys(SCHED.names)
        if e[1] == "sched_switch":
            t, _, cpu, prev, state, nxt = e
            row.update(prev_pid=prev, prev_state=state, next_pid=nxt, cost_ns=1000)
            for side, pid in (("prev", prev), ("next", nxt)):
                row[f"{side}_comm"] = comm(pid) if pid else f"swapper/{cpu}"
                row[f"{side}_cgroup"] = CG.get(pid)
        else:
            t, _, cpu, pid, *orig = e
            row.update(next_pid=pid, next_comm=comm(pid), next_cgroup=CG.get(pid),
                       orig_cpu=orig[0] if orig else None)
        row.update(time_ns=t, event=e[1], cpu=cpu)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SCHED)


SW = "sched_switch"
HAND_EVENTS = [
    (5, SW, 1, 4, "S", 0),                 # 4 ran from before the trace: no run
    (0, "sched_wakeup_new", 0, 1),
    (10, SW, 0, 0, "R", 1),                # 1: latency 10
    (15, "sched_wakeup", 0, 2),
    (20, "throttle_cfs_rq", 0, 0),         # not about a task
    (40, SW, 0, 1, "R", 2),                # 1 preempted after 30; 2: latency 25
    (50, "sched_wakeup", 0, 1),            # of a runnable task: not a wake-up latency
    (60, SW, 0, 2, "S", 1),                # 2 ran 20, sleeps; 1 back with no latency sample
    (70, "sched_migrate_task", 1, 2, 0),
    (80, SW, 0, 1, "X", 0),                # 1 ran 20, exits
    (90, "sched_wakeup", 1, 2),
    (95, "sched_wakeup", 1, 2),            # already woken: the first one counts
    (100, "sched_wakeup_new", 0, 3),
    (100, SW, 1, 0, "R", 2),               # 2: latency 10
    (120, SW, 1, 2, "S", 0),               # 2 ran 20
    (130, SW, 0, 0, "R", 3),               # 3: latency 30, still running at the end
]
HAND = sched_table(HAND_EVENTS)


def rows(metrics: pa.Table) -> dict:
    return {(r["level"], r["pid"] if r["level"] == "task" else r["cgroup"]): r
            for r in metrics.to_pylist()}


def test_hand_built_trace_has_the_known_metrics():
    a = analyse(HAND)
    assert {p: (v * 1e9).round().tolist() for p, v in a.wakeup_latencies("task").items()} == \
        {1: [10], 2: [25, 10], 3: [30], 4: []}
    assert {p: (v * 1e9).round().tolist() for p, v in a.run_lengths("task").items()} == \
        {1: [30, 20], 2: [20, 20], 3: [], 4: []}
    assert sorted(a.wakeup_latencies()) == ["/g1", "/g2"]
    m = rows(sched_metrics(HAND))
    t1, t2, t3, t4 = (m["task", p] for p in (1, 2, 3, 4))
    assert (t1["switches_voluntary"], t1["switches_involuntary"], t1["n_wakeups"]) == (1, 1, 2)
    assert (t2["switches_voluntary"], t2["switches_involuntary"], t2["n_wakeups"]) == (2, 0, 3)
    assert (t2["migrations"], t1["migrations"], t2["n_runs"]) == (1, 0, 2)
    assert t2["migrations_wakeup"] == 1     # asleep at 70, woken at 90
    assert t1["involuntary_frac"] == 0.5 and t2["involuntary_frac"] == 0.0
    assert math.isnan(t3["involuntary_frac"]) and t3["n_runs"] == 0 and t3["runtime_s"] == 0
    assert math.isnan(t3["run_length_mean_s"])
    assert t4["switches_voluntary"] == 1 and t4["comm"] == "t4" and t4["cgroup"] == "/g2"
    g1 = m["cgroup", "/g1"]
    assert g1["pid"] is None and g1["comm"] is None
    assert g1["runtime_s"] == pytest.approx(90e-9) and g1["n_runs"] == 4
    assert g1["wakeup_latency_mean_s"] == pytest.approx(15e-9)
    assert g1["wakeup_latency_p50_s"] == pytest.approx(10e-9)
    assert g1["wakeup_latency_max_s"] == pytest.approx(25e-9)
    assert g1["run_length_mean_s"] == pytest.approx(22.5e-9)
    assert g1["run_length_p50_s"] == pytest.approx(20e-9)
    assert (g1["switches_voluntary"], g1["switches_involuntary"]) == (3, 1)
    assert g1["involuntary_frac"] == 0.25 and g1["migrations"] == 1 and g1["n_wakeups"] == 5
    g2 = m["cgroup", "/g2"]
    assert g2["wakeup_latency_p99_s"] == pytest.approx(30e-9) and g2["n_runs"] == 0


def test_percentiles_are_numpys_per_group():
    """Many tasks with random wake-up latencies: every group's statistics
    are np.percentile's / mean / max of its samples."""
    rng = np.random.default_rng(3)
    events, t, truth = [], 0, {}
    for _ in range(400):
        pid = int(rng.integers(1, 5))
        lat = int(rng.integers(0, 10_000))
        run = int(rng.integers(1, 1000))
        events += [(t, "sched_wakeup", 0, pid), (t + lat, SW, 0, 0, "R", pid),
                   (t + lat + run, SW, 0, pid, "S", 0)]
        truth.setdefault(pid, []).append(lat * 1e-9)
        t += lat + run + 1
    m = rows(sched_metrics(sched_table(events)))
    for pid, lat in truth.items():
        r = m["task", pid]
        assert r["wakeup_latency_p95_s"] == pytest.approx(np.percentile(lat, 95), abs=1e-15)
        assert r["wakeup_latency_p50_s"] == pytest.approx(np.percentile(lat, 50), abs=1e-15)
        assert r["wakeup_latency_mean_s"] == pytest.approx(np.mean(lat))
        assert r["wakeup_latency_max_s"] == pytest.approx(max(lat))
    pooled = truth[1] + truth[2]
    assert m["cgroup", "/g1"]["wakeup_latency_p99_s"] == pytest.approx(np.percentile(pooled, 99))


def test_a_named_thread_has_its_own_samples_in_the_window():
    """HAND's task 2 woke at 15 (latency 25) and 90 (latency 10) and
    migrated at 70: the window keeps the samples whose wake-up (and the
    migrations that) lie in it; tasks of one name are pooled."""
    def thread(table, comm, lo=0, hi=None):
        t = analyse(table).thread(comm, lo, hi)
        return t.tasks, (t.wakeup_latency_s * 1e9).round().tolist(), t.migrations

    assert thread(HAND, "t2") == (1, [25, 10], 1)
    assert thread(HAND, "t2", 20) == (1, [10], 1)
    assert thread(HAND, "t2", 0, 60) == (1, [25], 0)
    assert thread(HAND, "t2", 71, 89) == (1, [], 0)
    # tasks 1 and 2 both named "acc": their samples pooled, in trace order per task
    both = sched_table(HAND_EVENTS, lambda pid: "acc" if pid in (1, 2) else f"t{pid}")
    assert thread(both, "acc") == (2, [10, 25, 10], 1)
    assert thread(both, "t2") == (0, [], 0)
    s = analyse(both).thread("acc").summary()
    assert list(s) == THREAD_SUMMARY.names
    assert (s["thread_comm"], s["thread_tasks"], s["thread_wakeups"]) == ("acc", 2, 3)
    assert s["thread_wakeup_latency_p50_s"] == pytest.approx(10e-9)
    assert s["thread_wakeup_latency_mean_s"] == pytest.approx(15e-9)
    assert s["thread_wakeup_latency_max_s"] == pytest.approx(25e-9)
    none = analyse(HAND).thread("nobody").summary()
    assert none["thread_tasks"] == 0 and none["thread_migrations"] == 0
    assert math.isnan(none["thread_wakeup_latency_p99_s"])


def test_a_named_threads_histogram_has_the_thesis_scales():
    """One wake-up per decade, at the scales of the affinity thesis's
    wake-up -> switch tables (µs, a few ms, tens of ms, one near 1 s)."""
    lat = [500, 2_189, 84_467, 346_295, 3_088_527, 34_595_561, 998_331_135, 1_500_000_000]
    events, t = [], 0
    for d in lat:
        events += [(t, "sched_wakeup", 0, 1), (t + d, SW, 0, 0, "R", 1),
                   (t + d + 10, SW, 0, 1, "S", 0)]
        t += d + 100
    h = analyse(sched_table(events)).thread("t1").histogram()
    assert [n for _, n in h] == [1] * 8
    assert h[0][0] == "< 1 us" and h[-1][0] == ">= 1 s"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5000), st.integers(1, 500),
                          st.booleans()), min_size=1, max_size=60),
       st.integers(0, 200_000))
def test_a_named_thread_over_the_whole_trace_is_its_tasks_pooled(runs, lo):
    """Invariant: with no window a name's samples are its tasks' per-task
    samples concatenated, and its migrations their sum; a window keeps a
    subset of both."""
    events, t = [], 0
    for pid, lat, run, migrate in runs:
        events.append((t, "sched_wakeup", 0, pid))
        if migrate:
            events.append((t, "sched_migrate_task", 1, pid, 0))
        events += [(t + lat, SW, 0, 0, "R", pid), (t + lat + run, SW, 0, pid, "S", 0)]
        t += lat + run + 1
    table = sched_table(events, lambda pid: "even" if pid % 2 == 0 else f"t{pid}")
    a = analyse(table)
    per_task = a.wakeup_latencies("task")
    m = rows(a.metrics())
    evens = [p for p in per_task if p % 2 == 0]
    whole = a.thread("even")
    assert whole.tasks == len(evens)
    assert sorted(whole.wakeup_latency_s) == sorted(np.concatenate(
        [per_task[p] for p in evens] or [np.zeros(0)]))
    assert whole.migrations == sum(m["task", p]["migrations"] for p in evens)
    part = a.thread("even", lo)
    assert part.wakeup_latency_s.size <= whole.wakeup_latency_s.size
    assert part.migrations <= whole.migrations


def test_a_trace_where_no_task_leaves_a_cpu_has_its_metrics():
    """Tasks that only ever start (switches from idle, nothing switched
    out, as threads that never block on a CPU of their own): no run, no
    wake-up latency without a wake-up, and the named thread is found."""
    table = sched_table([(0, "sched_wakeup_new", 0, 1), (10, SW, 0, 0, "R", 1),
                         (20, "sched_wakeup_new", 1, 2), (25, SW, 1, 0, "R", 2)])
    m = rows(sched_metrics(table))
    assert m["task", 1]["n_runs"] == 0 and m["task", 2]["comm"] == "t2"
    assert (analyse(table).thread("t2").wakeup_latency_s * 1e9).round().tolist() == [5]


def test_an_empty_trace_gives_an_empty_table():
    metrics = sched_metrics(SCHED.empty_table())
    assert metrics.num_rows == 0 and metrics.schema == SCHED_METRICS


def test_a_million_events_take_seconds_not_minutes():
    """The vectorised path: 1M events (a switch and a wake-up per run of
    2,000 tasks on 8 CPUs) in well under the time a Python loop would take."""
    n = 500_000
    rng = np.random.default_rng(0)
    pid = rng.integers(1, 2001, n)
    t = np.arange(n) * 1000
    prev = np.ravel(np.column_stack([np.zeros(n), np.roll(pid, 1)])).astype(np.int64)
    table = pa.table({
        "time_ns": np.repeat(t, 2) + np.tile([0, 500], n),
        "event": pa.array(["sched_wakeup", "sched_switch"] * n),
        "cpu": pa.array(np.repeat(pid % 8, 2), pa.int32()),
        "prev_pid": prev, "prev_comm": pa.nulls(2 * n, pa.string()),
        "prev_cgroup": pa.array(np.char.add("/g", (prev % 50).astype(str))),
        "prev_state": pa.array(["", "R"] * n).cast(pa.string()),
        "next_pid": pa.array(np.repeat(pid, 2)),
        "next_comm": pa.nulls(2 * n, pa.string()),
        "next_cgroup": pa.array(np.char.add("/g", (np.repeat(pid, 2) % 50).astype(str))),
        "orig_cpu": pa.nulls(2 * n, pa.int32()), "cost_ns": pa.nulls(2 * n, pa.int64()),
    }, schema=SCHED)
    t0 = time.perf_counter()
    metrics = sched_metrics(table)
    took = time.perf_counter() - t0
    assert metrics.num_rows == 2000 + 50
    assert took < 15, f"1M events took {took:.1f} s"


def _traced_cfg(**kw):
    cfg = make_cfg(poisson(functions=20, rate_rps=40, quota_us=20000, period_us=100000),
                   host="e5-2430l", duration_s=2.0, warmup_s=0.5, calibration=DEFAULT_COSTS,
                   **kw)
    # the trace over the summary's window, so both count the same switches
    cfg["trace"] = {"name": "sched", "max_events": 10**7, "window_s": [0.5, 2.0]}
    return cfg


def test_a_simulated_runs_metrics_agree_with_its_summary():
    res = simulate(_traced_cfg())
    s = res.summary.to_pylist()[0]
    m = sched_metrics(res.extra["sched"]).to_pandas()
    cg = m[m["level"] == "cgroup"]
    window, cpus = 1.5, 12
    switches = (cg["switches_voluntary"] + cg["switches_involuntary"]).sum()
    assert switches == round(s["switch_out_rate_per_s"] * window)
    assert cg["migrations"].sum() == s["migrations"]
    assert cg["switches_involuntary"].sum() > 0      # the load preempts
    # runs cut by the window's edges are not counted: at most one per CPU each side
    busy = s["cpu_util"] * window * cpus
    assert cg["runtime_s"].sum() == pytest.approx(busy, abs=2 * cpus * cg["run_length_p99_s"].max())
    assert cg["runtime_s"].sum() <= busy + 1e-9


def _run(tmp_path, name="r", *extra):
    out = tmp_path / name
    assert main(["run", "duration_s=1", "warmup_s=0.2", "workload.functions=12",
                 f"output_dir={out}", *extra]) == 0
    return out


def test_traced_run_writes_sched_metrics_and_trace_prints_them(tmp_path, capsys):
    out = _run(tmp_path, "r", "trace=sched")
    written = pq.read_table(out / SCHED_METRICS_FILE)
    assert written.schema == SCHED_METRICS
    assert written.to_pandas().equals(sched_metrics(read_sched(out)).to_pandas())  # NaN == NaN
    capsys.readouterr()
    assert main(["trace", str(out)]) == 0
    text = capsys.readouterr().out
    assert "/faas.slice/func-0" in text and "wake-up latency" in text
    assert main(["trace", str(out), "--tasks"]) == 0
    assert "func-0" in capsys.readouterr().out.split("tasks")[-1]


def test_untraced_run_has_no_metrics_file_and_trace_says_so(tmp_path, capsys):
    out = _run(tmp_path)
    assert not (out / SCHED_METRICS_FILE).exists()
    capsys.readouterr()
    assert main(["trace", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(out / "sched.parquet") in err and "trace=sched" in err


@pytest.mark.parametrize("damage", ["truncated", "schema"])
def test_a_bad_sched_file_is_one_line_naming_it(tmp_path, capsys, damage):
    out = _run(tmp_path, "r", "trace=sched")
    path = out / "sched.parquet"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    else:
        pq.write_table(read_sched(out).drop_columns(["prev_state"]), path)
    with pytest.raises(SchedTraceError):
        read_sched(out)
    capsys.readouterr()
    assert main(["trace", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err
    assert ("prev_state" in err) == (damage == "schema")


def test_trace_thread_puts_the_named_threads_columns_in_the_summary(tmp_path, capsys):
    """trace.thread=accept on the webserver: the summary's thread_* columns
    are the accept task's samples after warmup, the same the per-task row
    of sched_metrics.parquet has when the trace records just that window;
    without trace.thread the summary has none of them."""
    out = tmp_path / "web"
    keys = ["workload=webserver", "host=generic", "workload.workers=6", "duration_s=6",
            "warmup_s=1", "trace=sched"]
    assert main(["run", *keys, "trace.thread=accept", "trace.window_s=[1,6]",
                 f"output_dir={out}"]) == 0
    s = pq.read_table(out / "summary.parquet").to_pylist()[0]
    task = pq.read_table(out / SCHED_METRICS_FILE).to_pandas().query("comm == 'accept'")
    assert len(task) == 1 and s["thread_comm"] == "accept" and s["thread_tasks"] == 1
    row = task.iloc[0]
    assert s["thread_migrations"] == row["migrations"] <= s["migrations"]
    assert s["thread_wakeups"] == len(analyse(read_sched(out)).wakeup_latencies("task")[
        row["pid"]]) > 40                      # ~10 connections a second, 5 s
    for q in ("mean", "p50", "p95", "p99", "max"):
        assert s[f"thread_wakeup_latency_{q}_s"] == pytest.approx(
            row[f"wakeup_latency_{q}_s"], abs=1e-12)
    capsys.readouterr()
    assert main(["trace", str(out), "--thread", "accept"]) == 0
    text = capsys.readouterr().out
    assert f"thread 'accept': 1 task, 1 s to 6 s: {s['thread_wakeups']:,} wake-ups" in text
    assert "1-10 ms" in text
    plain = tmp_path / "plain"
    assert main(["run", *keys, f"output_dir={plain}"]) == 0
    names = pq.read_table(plain / "summary.parquet").column_names
    assert not [n for n in names if n.startswith("thread_")]


def test_a_migration_is_at_wake_up_when_the_wake_up_follows():
    """Task 1 is preempted and then pulled while queued (a balancer); task 2
    sleeps and is placed on another CPU as it wakes; task 3 is moved while
    running (a stopper), later sleeps and wakes where it is."""
    t = sched_table([
        (0, "sched_wakeup_new", 0, 1), (1, "sched_wakeup_new", 0, 3),
        (5, SW, 0, 0, "R", 1),
        (10, SW, 0, 1, "R", 2),                 # 1 preempted: runnable
        (20, "sched_migrate_task", 1, 1, 0),    # pulled while queued
        (25, SW, 1, 0, "R", 1),
        (30, SW, 0, 2, "S", 3),                 # 2 sleeps
        (40, "sched_migrate_task", 1, 2, 0),    # placed at its wake-up
        (41, "sched_wakeup", 1, 2),
        (50, SW, 1, 1, "S", 2),
        (55, "sched_migrate_task", 1, 3, 0),    # 3, running on CPU 0, moved
        (60, SW, 1, 2, "S", 3),
        (70, SW, 1, 3, "S", 0),
        (80, "sched_wakeup", 1, 3),
    ])
    m = rows(sched_metrics(t))
    got = {p: (m["task", p]["migrations"], m["task", p]["migrations_wakeup"]) for p in (1, 2, 3)}
    assert got == {1: (1, 0), 2: (1, 1), 3: (1, 0)}
    g = m["cgroup", "/g1"]                      # tasks 1 and 2
    assert (g["migrations"], g["migrations_wakeup"]) == (2, 1)
