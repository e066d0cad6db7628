"""``simulate(cfg)``: one run of one scenario on the simulated host: the
host (backends.simhost.build_host), the workload, the controller, the
measurement window and the summary row."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa
from omegaconf import DictConfig

from backends.host import plain_config
from backends.simhost import SimHost, build_host, drive
from policies.control import build as build_controller
from results.schema import request_columns, run_identity
from scenarios.validate import validate_mapping
from sim import workloads
from sim.engine import NSEC_PER_SEC, quiet_gc, s_to_ns
from sim.kthreads import KernelThreads, RcuGp
from sim.loadgen import NAME as LOADGEN, SAMPLED_BESIDE_FUNCTIONS, SELF_TIMED, LoadGenerator
from sim.memory.progress import empty_summary
from sim.metrics import HostCounters, IntervalSampler
from sim.tracing import SchedTracer, enabled as tracing, trace_config
from sim.workloads.openmp import summary_columns as openmp_columns
from sim.workloads.request_path import WORKER_HOST_COSTS, WorkerPath
from sim.workloads.rtapp import RtAppWorkload


@dataclass
class SimResult:
    summary: pa.Table
    requests: pa.Table
    intervals: pa.Table
    config: dict
    # more tables of the run directory (name -> table): sched.parquet under
    # trace=sched, the workload's own (Workload.tables: rtapp.parquet)
    extra: dict = field(default_factory=dict)


def build(cfg: dict, trace=None):
    """Assemble engine, machine and workload for a resolved config (and the
    invocation trace a trace-driven workload replays)."""
    engine, machine, recorder = build_host(cfg, int(cfg.get("seed", 0)))
    wl_cfg = cfg["workload"]
    if wl_cfg.get("request_path") == "worker":
        # the native worker's dispatch cost belongs to the host: its profile's measurement
        cal = cfg["calibration"]
        wl_cfg = {**wl_cfg,
                  "dispatch_us": _first(wl_cfg.get("dispatch_us"), cal.get("worker_dispatch_us")),
                  "thread_us": _first(wl_cfg.get("thread_us"), cal.get("worker_thread_us"))}
    workload = workloads.build(wl_cfg, machine, recorder, trace)
    attach_host_tasks(cfg, machine, workload)
    return engine, machine, recorder, workload


def attach_host_tasks(cfg: dict, machine, workload) -> None:
    """What else runs on the host, where the calibration profile measured it
    and its switch is on: the native worker's own CPU beyond its dispatch
    (``WorkerPath.set_host_costs``), the real backend's driving loop (on the
    worker path and under self-timed workloads), with its sampler's reads
    (sim/loadgen.py), RCU's grace-period
    kthread woken by exiting threads, and the per-CPU kernel
    threads (sim/kthreads.py); and what rt-app's busy loop costs there
    (``RtAppWorkload.set_host_loop``).  Created after the workload, so its tasks
    keep their pids."""
    cal = cfg["calibration"]
    path = getattr(workload, "path", None)
    if cal.get("worker_host_costs", True) and isinstance(path, WorkerPath) \
            and cal.get("worker_cold_decay_ms") is not None:
        path.set_host_costs(*(float(cal.get(k) or 0.0) for k in WORKER_HOST_COSTS))
    loop = driving_loop(cal, machine, workload) if cal.get("loadgen", True) else None
    if loop is not None:
        end_ns = s_to_ns(float(cfg["duration_s"]))
        loop.sample_at(s_to_ns(float(cfg.get("interval_s", 1.0))),
                       s_to_ns(float(cfg.get("warmup_s", 0.0))), end_ns)
        loop.background_until(end_ns)
    if cal.get("kthreads", True) and cal.get("kthread_rate_per_s") is not None:
        KernelThreads(machine, float(cal["kthread_rate_per_s"]), cal["kthread_run_us"],
                      int(cal.get("kthread_nice", 0)))
    if cal.get("rtapp_loops", True) and cal.get("rtapp_loop_ns") is not None \
            and isinstance(workload, RtAppWorkload):
        workload.set_host_loop(float(cal["rtapp_loop_ns"]), cal.get("rtapp_calibration_ns"))
    if cal.get("rcu", True) and cal.get("rcu_gp_period_ms") is not None:
        RcuGp(machine, float(cal.get("rcu_gp_wakeups_per_exit") or 0.0),
              float(cal["rcu_gp_period_ms"]), float(cal.get("rcu_gp_run_us") or 0.0))


def driving_loop(cal: dict, machine, workload) -> LoadGenerator | None:
    """The real backend's driving loop as a host task (sim/loadgen.py),
    where the profile measured it: on the worker path, dispatching each
    request; under a self-timed workload, with nothing to dispatch (a
    periodic worker process per group, whose burst lines it reads;
    rt-app's threads log to files)."""
    path = getattr(workload, "path", None)
    sample = [float(cal.get(k) or 0.0) for k in ("loadgen_sample_us", "loadgen_sample_cgroup_us")]
    if cal.get("loadgen_dispatch_us") is not None and isinstance(path, WorkerPath):
        path.loadgen = LoadGenerator(
            machine, float(cal["loadgen_dispatch_us"]), float(cal.get("loadgen_worker_us") or 0.0),
            path.workers, *sample, lambda: path.workers() + SAMPLED_BESIDE_FUNCTIONS,
            float(cal.get("loadgen_background_us_per_s") or 0.0),
            float(cal.get("loadgen_background_worker_us_per_s") or 0.0))
        return path.loadgen
    if workload.REAL_BACKEND not in SELF_TIMED:
        return None
    rtapp = workload.REAL_BACKEND == "rtapp"
    base = cal.get("loadgen_rtapp_us_per_s" if rtapp else "loadgen_periodic_us_per_s")
    if base is None:
        return None
    workers = 0 if rtapp else len({t.tg for t in workload.threads})
    groups = len(machine.groups)   # the sampler reads the run's cgroups and the root
    loop = LoadGenerator(machine, 0.0, 0.0, lambda: workers, *sample, lambda: groups, float(base),
                         0.0 if rtapp else float(cal.get("loadgen_periodic_worker_us_per_s") or 0.0),
                         0.0 if rtapp else float(cal.get("loadgen_burst_us") or 0.0))
    if not rtapp:
        loop.read_bursts(workload.recorder)
    return loop


def _first(*values):
    return next((v for v in values if v is not None), None)


def attach_controller(cfg: dict, engine, machine, recorder, workload):
    """Run the config's controller (if any) on the simulated host from t = 0;
    returns it (or None)."""
    controller = build_controller(cfg.get("controller"))
    if controller is None:
        return None
    host = SimHost(machine, getattr(workload, "trace", None),
                   str(cfg["workload"].get("parent_cgroup") or ""), workload=workload,
                   reads_completed=controller.reads_completed)
    recorder.observers.append(host.request_done)
    drive(controller, host, engine)
    return controller


def simulate(cfg, progress=None, trace=None) -> SimResult:
    """Run the scenario ``cfg`` (a DictConfig or a plain dict with the keys
    of scenarios/conf) and return its summary, requests and intervals.

    ``progress(sim_time_s, duration_s)``, if given, is called as simulated
    time advances.  ``trace`` (a table of sim.workloads.trace.TRACE_SCHEMA)
    is what a trace-driven workload replays; without it the workload reads
    its ``trace_file``.  ``scenarios.runner.replayed_trace(cfg)`` gives the
    trace a config replays (its file's, or the one generated from the seed).
    A plain dict is checked as the command line checks its config
    (scenarios.validate); ConfigError names the first bad key."""
    if not isinstance(cfg, DictConfig):   # a composed one was checked when composed
        validate_mapping(cfg, has_trace=trace is not None)
    cfg = plain_config(cfg)
    duration_ns = s_to_ns(float(cfg["duration_s"]))
    warmup_ns = s_to_ns(float(cfg.get("warmup_s", 0.0)))
    if not 0 <= warmup_ns < duration_ns:
        raise ValueError(f"warmup_s must be in [0, duration_s); got {cfg.get('warmup_s')}")
    interval_ns = s_to_ns(float(cfg.get("interval_s", 1.0)))
    wall0 = time.perf_counter()
    engine, machine, recorder, workload = build(cfg, trace)
    controller = attach_controller(cfg, engine, machine, recorder, workload)
    tracer = attach_tracer(cfg, machine)
    sampler = IntervalSampler(machine, interval_ns)
    at_warmup: list[HostCounters] = []
    stats_at_warmup: dict = {}
    path_at_warmup: dict = {}

    def snapshot():
        machine.sync()
        at_warmup.append(HostCounters.read(machine))
        stats_at_warmup.update(policy_stats(machine))
        path_at_warmup.update(path_stats(workload))
    engine.call_at(warmup_ns, snapshot)
    if machine.memory is not None:
        machine.memory.warmup_ns = warmup_ns
    workload.start()
    sampler.start()
    report = None
    if progress is not None:
        def report(t_ns, until_ns):
            progress(t_ns / NSEC_PER_SEC, until_ns / NSEC_PER_SEC)
    # the run, then its tables: the run's objects stay frozen until both are done
    with quiet_gc():
        events = engine.run(duration_ns, report, max(duration_ns // 100, 1))
        sampler.sample(reschedule=False)
        totals = HostCounters.read(machine) - at_warmup[0]
        wall = time.perf_counter() - wall0
        requests = recorder.table()
        summary = _summary(cfg, machine, recorder, requests, totals,
                           (duration_ns - warmup_ns) / NSEC_PER_SEC, wall, events)
        for column, value in cpu_limit_columns(machine, warmup_ns, duration_ns).items():
            summary = summary.append_column(column, pa.array([value], pa.float64()))
        for column, value in memory_columns(machine).items():
            summary = summary.append_column(column, pa.array([value], pa.float64()))
        prefix = machine.policy.stats_prefix
        for key, value in policy_stats(machine).items():
            summary = summary.append_column(f"{prefix}_{key}",
                                            pa.array([value - stats_at_warmup.get(key, 0)], pa.int64()))
        window_ns = (duration_ns - warmup_ns) * machine.topology.nr_cpus
        for column, value in openmp_columns({k: v - path_at_warmup[k]
                                             for k, v in path_stats(workload).items()},
                                            window_ns).items():
            summary = summary.append_column(column, pa.array([value]))
        if controller is not None:
            for column, value in controller.summary().items():
                summary = summary.append_column(column, pa.array([value]))
        extra = dict(workload.tables())
        if tracer is not None:
            extra["sched"] = tracer.table()
            summary = summary.append_column("sched_trace_events", pa.array([extra["sched"].num_rows]))
            summary = summary.append_column("sched_trace_truncated", pa.array([tracer.truncated]))
        return SimResult(summary, requests, sampler.table(), cfg, extra)


def attach_tracer(cfg: dict, machine) -> SchedTracer | None:
    """trace=sched / optional: the machine's (and bandwidth control's)
    tracepoints recorded from t = 0 (sim/tracing.py); None under trace=none."""
    tcfg = trace_config(cfg)
    if not tracing(tcfg):
        return None
    tracer = SchedTracer(tcfg)
    machine.tracer = tracer
    bandwidth = getattr(machine.policy, "bandwidth", None)
    if bandwidth is not None:
        bandwidth.throttle_observers.append(
            lambda cfs_rq, now: tracer.cfs_throttle(now, cfs_rq.rq.cpu, cfs_rq.tg.name, True))
        bandwidth.unthrottle_observers.append(
            lambda cfs_rq, now, _ns: tracer.cfs_throttle(now, cfs_rq.rq.cpu, cfs_rq.tg.name,
                                                         False))
    return tracer


def policy_stats(machine) -> dict:
    """A copy of the scheduling policy's mechanism counters
    (sim.sched_class.KernelScheduler.stats; CFS-LAGS: entities queued by
    credit, credit wakeup and tick preemptions, credit placements, balancer
    pulls); the summary gets their counts over the window after warmup as
    ``<policy.stats_prefix>_<counter>``."""
    return dict(machine.policy.stats)


def path_stats(workload) -> dict:
    """The request path's own counters so far (the bentoml path's OpenMP
    teams, sim/workloads/openmp.py); none for other paths."""
    stats = getattr(getattr(workload, "path", None), "stats", None)
    return {} if stats is None else stats()


def memory_columns(machine) -> dict:
    """LLC/IPCE columns of the memory model (sim/memory/progress.py); NaN
    when no cgroup had a memory profile."""
    return empty_summary() if machine.memory is None else machine.memory.summary()


def cpu_limit_columns(machine, start_ns: int, end_ns: int) -> dict:
    """``cpu_limit_mcpu_mean``: the CPU limit (1000 x quota / period) of every
    cgroup that had a cpu.max at some point in the run, summed over those
    cgroups and averaged over [start_ns, end_ns) exactly, from the
    machine's log of cpu.max writes; ``cpu_limit_mcpu_final``: the same
    sum at the end.  While such a cgroup has no limit (before its first
    write, or "max") it counts as the whole host (1000 x CPUs).  NaN when
    no cgroup was ever limited."""
    host_mcpu = 1000.0 * machine.topology.nr_cpus
    writes: dict = {}
    for t, tg, quota_us, period_us in machine.cpu_max_log:
        mcpu = host_mcpu if quota_us is None else 1000.0 * quota_us / period_us
        writes.setdefault(tg, []).append((t, mcpu))
    limited = [w for tg, w in writes.items()
               if any(e[1] is tg and e[2] is not None for e in machine.cpu_max_log)]
    if not limited or end_ns <= start_ns:
        return {"cpu_limit_mcpu_mean": float("nan"), "cpu_limit_mcpu_final": float("nan")}
    area, final = 0.0, 0.0
    for w in limited:
        level, t_prev = host_mcpu, start_ns
        for t, mcpu in w:
            if t > start_ns:
                area += level * (min(t, end_ns) - t_prev)
                t_prev = min(t, end_ns)
            if t < end_ns:
                level = mcpu
        area += level * (end_ns - t_prev)
        final += level
    return {"cpu_limit_mcpu_mean": area / (end_ns - start_ns), "cpu_limit_mcpu_final": final}


def _summary(cfg, machine, recorder, requests, c: HostCounters, window_s, wall_s, events):
    capacity_ns = window_s * NSEC_PER_SEC * machine.topology.nr_cpus
    row = {
        **run_identity(cfg, "sim"),
        **request_columns(requests, window_s, float(cfg.get("slo_s", 1.0)),
                          recorder.arrived - requests.num_rows),
        # the workload's CPU, as the real run's cgroups account it: not the
        # host's own tasks (sim/loadgen.py, sim/kthreads.py)
        "cpu_util": (c.busy_ns + c.overhead_ns - c.host_busy_ns) / capacity_ns,
        "sched_overhead_frac": c.overhead_ns / capacity_ns,
        # the real backend's driving loop where it is modelled (the colosim
        # process's CPU on the real host, backends/real/disturbance.py)
        "colosim_cpu_frac": (c.loadgen_busy_ns / capacity_ns
                             if any(t.name == LOADGEN for t in machine.root_tg.tasks)
                             else float("nan")),
        "ctx_switches": c.switches,
        "ctx_switch_rate_per_s": c.switches / window_s,
        "ctx_switch_cost_mean_us": (c.overhead_ns / c.switches / 1000) if c.switches else 0.0,
        "switch_out_rate_per_s": c.switch_outs / window_s,
        "migrations": c.migrations,
        "runqueue_wait_mean_s": (c.run_delay_ns / c.pcount / NSEC_PER_SEC) if c.pcount else 0.0,
        # cpu.stat bandwidth counters of all cgroups, summed over the window
        # (a throttle still in progress at the end is not counted yet)
        "nr_periods": c.nr_periods,
        "nr_throttled": c.nr_throttled,
        "throttled_time_s": c.throttled_time_ns / NSEC_PER_SEC,
        "nr_bursts": c.nr_bursts,
        "burst_time_s": c.burst_time_ns / NSEC_PER_SEC,
        "wall_time_s": wall_s,
        "sim_events": int(events),
        "sim_s_per_wall_s": float(cfg["duration_s"]) / wall_s if wall_s > 0 else float("inf"),
    }
    return pa.Table.from_pylist([row])
