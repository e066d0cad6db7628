"""``backend=real``: run a scenario on this machine and return the tables
the simulator returns (summary, requests, intervals; same columns).

A workload runs here through the real-backend capability it declares
(:func:`capability`): ``functions`` (one native worker per function
replaying an invocation trace, backends/real/functions.py), ``worker_pool``
(a pool-mode worker, open loop or closed-loop clients, the same module),
``webserver`` (that pool behind a listen backlog and an accept thread, the
same module),
``periodic`` (backends/real/periodic.py), ``jobs`` (backends/real/jobs.py),
``memlookup`` (backends/real/memlookup.py) or ``rtapp`` (the rt-app binary,
backends/real/rtapp.py); each has a
:class:`~backends.real.runner.Runner` there.  ``run_real`` is the flow they
share:

1. refuse what the host cannot provide before creating anything: the
   ``scheduler=`` (detect.check_scheduler), RDT or perf counts for a
   controller that uses them (detect.rdt_missing, detect.perf_missing), a
   workload without a capability, and whatever its runner checks up front
   (its trace, its groups, RDT for memlookup's partitions); then the native
   worker (gcc), root and the cgroup controllers (cgroupfs.preflight);
2. create ``colosim-<run>/<parent_cgroup>/<function>`` cgroups and the
   ``backend.cpus`` cpuset; the runner applies the workload's weight /
   cpu.max and starts its workers, each attached to its cgroup before it
   gets any work; SCHED_RR where the scheduler or a group asks for it;
3. start counting on the function cgroups (software events; hardware
   events are recorded as missing where the PMU has none): each task's
   counters through perf's Python binding, summed per cgroup
   (backends/real/taskcount.py), else ``perf stat -G``, saying why
   (``perf_status``); unless the runner counts otherwise (a job under its
   own perf stat);
4. run the load (backends/real/loadgen.py) with interval sampling, the
   warm-up snapshot and the controller's start/step on the same loop;
5. stop, tear everything down (also on SIGINT / SIGTERM / exceptions:
   workers, perf, the RDT sidecar's classes, the cgroups), and build the
   tables.  Columns the real host cannot measure
   (``sched_overhead_frac``, ``ctx_switch_cost_mean_us``,
   ``runqueue_wait_mean_s``, ``sim_events``) are null/NaN, never invented.
"""
from __future__ import annotations

import math
import os
import platform
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa

from backends.host import plain_config
from backends.real import cgroupfs, detect, schedtrace
from backends.real.cgroupfs import CgroupError, CgroupFS, parse_cpulist
from backends.real.disturbance import measure as measure_disturbance
from backends.real.disturbance import furthest, speed_probe
from backends.real.disturbance import verdict as disturbance_verdict
from backends.real.config import RealBackend
from backends.real.functions import FunctionsRunner, WebserverRunner, WorkerPoolRunner
from backends.real.host import RealHost
from backends.real.intervals import Sampler, perf_rows, perf_spans, sum_or_none
from backends.real.jobs import JobError, JobsRunner, calibrate, counted_events
from backends.real.loadgen import Timer, lateness_stats, lateness_verdict, set_timer_slack
from backends.real.memlookup import MemLookupRunner
from backends.real.perf import PerfUnavailable
from backends.real.periodic import PeriodicRunner
from backends.real.rtapp import RtAppRunner, loop_ns, rtapp_binary
from backends.real.runner import RealRunError, Runner, Setup
from backends.real.taskcount import TaskCounters
from backends.real.workers import WorkerError, worker_binary
from policies.control import NONE
from policies.control import build as build_controller
from policies.control import module as controller_module
from results.schema import request_columns, run_identity
from sim.config import from_mapping
from sim.engine import NSEC_PER_SEC as NS
from sim.tracing import trace_config
from sim.workloads import available as available_workloads
from sim.workloads import workload_class

# each capability's runner, in the order the refusal message lists them
RUNNERS: dict[str, type[Runner]] = {
    "functions": FunctionsRunner, "worker_pool": WorkerPoolRunner,
    "webserver": WebserverRunner, "periodic": PeriodicRunner, "jobs": JobsRunner,
    "memlookup": MemLookupRunner, "rtapp": RtAppRunner}

def capabilities() -> dict[str, str | None]:
    """Each workload module's real-backend capability (a key of
    :data:`RUNNERS`; None: it does not run on the real host)."""
    return {n: workload_class(n).REAL_BACKEND for n in available_workloads()}


def capability(w: dict) -> str | None:
    """The capability of workload config ``w`` (its ``model``, else its
    ``name``): how the real backend runs it, None if it cannot."""
    return workload_class(w).REAL_BACKEND


def runner_for(cfg: dict, b: RealBackend, trace: pa.Table | None = None) -> Runner:
    """The runner of the scenario's workload, its up-front checks done;
    RealRunError naming what runs here when the workload does not."""
    w = cfg["workload"]
    cap = capability(w)
    if cap is None and w.get("trace_file") and "functions" in w:
        cap = "functions"    # any function workload replays its trace file
    if cap is None:
        names: dict[str, list[str]] = {}
        for name, c in capabilities().items():
            if c is not None:
                names.setdefault(c, []).append(f"workload={name}")
        names.setdefault("functions", []).append("or a function workload with a trace_file")
        runs = [f"{r.RUNS} ({', '.join(names[c])})" for c, r in RUNNERS.items() if c in names]
        raise RealRunError(f"workload={w['name']} is not supported by backend=real yet; it "
                           f"runs {', '.join(runs[:-1])} and {runs[-1]}")
    return RUNNERS[cap](cfg, b, trace)


class _Terminated(BaseException):
    """SIGTERM during a run: unwind through the clean-up, then die of it."""


def _on_term(signum, frame):
    raise _Terminated()


@dataclass
class RealResult:
    summary: pa.Table
    requests: pa.Table
    intervals: pa.Table
    config: dict
    trace: pa.Table | None    # trace.parquet (None: a closed loop has none)
    # more tables of the run directory (name -> table): sched.parquet under trace=sched
    extra: dict = field(default_factory=dict)


def backend_keys(cfg: dict) -> RealBackend:
    """The scenario's ``backend`` keys as the typed RealBackend (its defaults
    for the keys a plain-dict config leaves out; ValueError naming an
    unknown key)."""
    return from_mapping(RealBackend, {"name": "real", **(cfg.get("backend") or {})}, "backend")


def check_host_scheduler(name: str) -> str:
    """The fair scheduler this host runs, or RealRunError suggesting the
    ``scheduler=`` override that matches it."""
    try:
        return detect.check_scheduler(name)
    except detect.SchedulerUnavailable as e:
        found = detect.fair_scheduler()
        raise RealRunError(f"{e}; backend=real runs on the kernel's own scheduler, so pass "
                           f"scheduler={found} on this host (e.g. `colosim run backend=real "
                           f"scheduler={found} ...`) and compare with the simulator's "
                           f"scheduler={found}") from None


def check_controller(cfg: dict, b: RealBackend) -> None:
    """RealRunError naming what is missing when the controller acts through
    RDT (its ``uses_rdt``) or reads perf counts (``uses_perf_counts``) and
    this host cannot provide them."""
    name = (cfg.get("controller") or {}).get("controller") or NONE
    if name == NONE:
        return
    ctl = controller_module(name).CONTROLLER
    missing = detect.rdt_missing() if ctl.uses_rdt else None
    if missing:
        raise RealRunError(f"controller={name} needs RDT (resctrl), which backend=real cannot "
                           f"provide on this host: {missing}")
    if ctl.uses_perf_counts:
        events = counted_events(str(b.stall_event))
        missing = ("backend.perf is false" if not b.perf
                   else detect.perf_missing(events))
        if missing:
            raise RealRunError(f"controller={name} reads each job's {', '.join(events)} "
                               f"(IPC, IPCE, memory-stall load): {missing}; set "
                               f"backend.stall_event to this CPU's memory-stall event if "
                               f"only that one is missing")


def _run_cpus(cfg: dict, b: RealBackend, online: set[int]) -> set[int]:
    """The CPUs the workers run on (``backend.cpus``, else every CPU this
    process may use), with a warning when the ``host=`` option describes
    another count."""
    cpus = set(parse_cpulist(b.cpus)) if b.cpus else set(online)
    if not cpus <= set(range(os.cpu_count() or 1)):
        raise RealRunError(f"backend.cpus = {b.cpus}: this host has CPUs "
                           f"0-{(os.cpu_count() or 1) - 1}")
    ncpus = len(cpus)
    host_cpus = int(cfg["host"]["sockets"]) * int(cfg["host"]["cores"]) * \
        int(cfg["host"]["threads_per_core"])
    if host_cpus != ncpus:
        print(f"colosim: warning: host={cfg['host'].get('name')} describes {host_cpus} CPUs "
              f"but the real run uses {ncpus} ({cgroupfs.format_cpulist(cpus)}); compare it "
              f"with a simulator run of a host option with {ncpus} CPUs",
              file=sys.stderr)
    return cpus


def _pin_load_generator(b: RealBackend, online: set[int], cpus: set[int]) -> int | None:
    """Pin this thread to ``backend.loadgen_cpu``, else to a CPU the
    workers do not use if there is one; the CPU (None: not pinned)."""
    loadgen_cpu = b.loadgen_cpu
    if loadgen_cpu is None and set(online) - cpus:
        loadgen_cpu = min(set(online) - cpus)
    if loadgen_cpu is not None:
        os.sched_setaffinity(0, {int(loadgen_cpu)})
    return loadgen_cpu


def _load_generator_fifo(b: RealBackend, rr: dict[str, tuple[bool, int]]) -> bool:
    """SCHED_FIFO at ``backend.loadgen_rt_priority`` for this thread (True:
    set; the caller restores SCHED_OTHER).  Only this thread, and only for
    the replay (children started before keep their policy); above SCHED_RR
    workers, or they would starve the dispatcher."""
    if b.loadgen_rt_priority is None:
        return False
    prio = int(b.loadgen_rt_priority)
    rr_prios = [pr for is_rr, pr in rr.values() if is_rr]
    if rr_prios:
        prio = max(prio, min(99, max(rr_prios) + 1))
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
    except OSError as e:
        raise RealRunError(f"backend.loadgen_rt_priority: sched_setscheduler "
                           f"SCHED_FIFO failed: {e.strerror}") from None
    return True


def run_real(cfg, trace: pa.Table | None = None, progress=None,
             run_name: str = "run") -> RealResult:
    """Run ``cfg`` on this machine (the flow in the module docstring).
    ``trace``: the rows to replay, as the simulator would (None: the
    workload's own); ``progress(now_s, duration_s)`` is called about every
    1% of the run."""
    cfg = plain_config(cfg)
    b = backend_keys(cfg)
    host_sched = check_host_scheduler(str(cfg["scheduler"]["name"]))
    check_controller(cfg, b)
    tcfg = trace_config(cfg)
    if tcfg.window_s is None:
        # the whole run is its duration, as the simulator's trace: what the
        # workers do while they are torn down is not the run's
        tcfg = replace(tcfg, window_s=[0.0, float(cfg["duration_s"])])
    try:
        trace_plan = schedtrace.plan(tcfg)
    except schedtrace.TraceRefused as e:
        raise RealRunError(str(e)) from None
    runner = runner_for(cfg, b, trace)
    ws_kb = runner.w.get("working_set_kb") or 0
    if runner.SPINS_ON_CPU_CLOCK and ws_kb > 0:
        print(f"colosim: warning: workload.working_set_kb={ws_kb} is the simulator's: here the "
              f"native workers walk no memory and spin on their own CPU clock (a refill would "
              f"count as work); simulate this run with workload.working_set_kb=0",
              file=sys.stderr)
    duration_ns = int(round(float(cfg["duration_s"]) * NS))
    warmup_ns = int(round(float(cfg.get("warmup_s", 0.0)) * NS))
    interval_ns = int(round(float(cfg.get("interval_s", 1.0)) * NS))
    cgroups = runner.cgroups

    try:
        binary = worker_binary(b.worker)
    except WorkerError as e:
        raise RealRunError(str(e)) from None
    online = os.sched_getaffinity(0)
    cpus = _run_cpus(cfg, b, online)
    ncpus = len(cpus)
    loop_ref, probe = _loop_probe(cfg)
    loop_before = speed_probe(probe, cpus, loop_ref) if probe else None

    try:
        cg = CgroupFS(cgroupfs.tree_name(run_name), given=run_name)
    except CgroupError as e:
        raise RealRunError(str(e)) from None
    # named now: after a SIGKILL this is what `colosim cleanup --run` takes
    print(f"colosim: real run {run_name!r} in cgroups {cg.name} (if it is killed: "
          f"colosim cleanup --run {shlex.quote(run_name)})", file=sys.stderr)
    host = None
    perf = None
    sampler = None
    tracer = None
    captured = None
    old_affinity = os.sched_getaffinity(0)
    wall0 = time.perf_counter()
    rt_set = False
    terminated = False
    # SIGTERM unwinds like SIGINT, so workers are reaped and cgroups removed
    # by the finally below (cgroupfs's own handler is the last resort)
    old_term = (signal.signal(signal.SIGTERM, _on_term)
                if threading.current_thread() is threading.main_thread() else None)
    try:
        host = RealHost(cg, cgroups, runner.host_trace(), runner.parent)
        if b.cpus:
            cg.set_cpuset("", cgroupfs.format_cpulist(cpus))
        max_s = (duration_ns / NS) + float(b.grace_s)
        runner.start(Setup(cg, host, cgroups, cpus, binary, max_s, int(cfg.get("seed", 0))))
        rr = runner.rt_policies()
        for c, (is_rr, prio) in rr.items():
            if is_rr:
                host.set_rt_policy(c, "rr", prio)
        controller = build_controller(cfg.get("controller"))
        rows = runner.rows(duration_ns)

        perf_t0 = time.monotonic_ns()
        perf, perf_status = runner.start_perf(cg)
        tracer, trace_plan = _start_trace(trace_plan, tcfg, cg, runner.members(), online)

        sampler = Sampler(cg, cgroups, runner.parent, ncpus,
                          counters=perf if isinstance(perf, TaskCounters) else None)
        sampler.open()
        # at equal times timers run in list order: counters at 0 first
        timers = [Timer(0, None, sampler.start),
                  Timer(interval_ns, interval_ns, sampler.sample),
                  Timer(warmup_ns, None, sampler.warmup)]
        if controller is not None:
            c_int = int(round(controller.interval_s * NS))
            timers.append(Timer(0, None, lambda now: controller.start(host)))
            timers.append(Timer(c_int, c_int, lambda now: controller.step(host)))
        if progress is not None:
            step = max(duration_ns // 100, 50_000_000)
            timers.append(Timer(step, step, lambda now: progress(now / NS, duration_ns / NS)))

        loadgen_cpu = _pin_load_generator(b, online, cpus)
        set_timer_slack(1)
        rt_set = _load_generator_fifo(b, rr)
        # perf counts from its time zero on, which is when its first interval
        # line shows (less the time it prints): the run starts after it
        if perf is not None:
            perf_t0 = perf.counting_since() or perf_t0
        else:
            time.sleep(0.05)
        t0 = runner.t0(time.monotonic_ns() + 10_000_000)
        host._t0 = t0      # the Host clock starts with the replay
        if tracer is not None:
            tracer.set_t0(t0)
        runner.go(t0, t0 + warmup_ns)
        # completions go to the host only where a controller reads them
        res, rows = runner.drive(rows, t0, duration_ns, timers, int(b.spin_us) * 1000,
                                 host if controller is not None else None)
        sampler.sample(time.monotonic_ns() - t0)
        runner.finish(host)
        os.sched_setaffinity(0, old_affinity)
        if tracer is not None:
            captured, trace_plan = _stop_trace(tracer, trace_plan, tcfg)
            tracer = None
        perf_samples = None
        if perf is not None:
            try:
                perf_samples = perf.stop()
            except Exception as e:  # noqa: BLE001 - perf failing must not lose the run
                perf_status = f"failed: {e}"
            perf = None
        for wp in runner.workers:
            wp.quit()
        wall = time.perf_counter() - wall0
    except _Terminated:
        terminated = True
    finally:
        if rt_set:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        try:
            os.sched_setaffinity(0, old_affinity)
        except OSError:
            pass
        if perf is not None:
            try:
                perf.stop()
            except Exception:  # noqa: BLE001
                pass
        for wp in runner.workers:
            wp.kill()
        if tracer is not None:
            tracer.close()
        if sampler is not None:
            sampler.close()
        if host is not None:
            host.close()
        else:
            cg.remove()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    if terminated:
        os.kill(os.getpid(), signal.SIGTERM)   # the handler in force before the run
        raise KeyboardInterrupt("terminated")

    if res.errors:
        raise RealRunError("workers reported errors: " + "; ".join(res.errors[:5]))
    lat = (res.dispatch_ns - rows.arrival_ns) / NS
    stats = lateness_stats(lat[res.dispatch_ns >= 0])
    ok, reason = lateness_verdict(stats, b.max_lateness_p99_s)
    if not ok and b.lateness_action == "reject":
        raise RealRunError(reason + "; rerun on a quieter host, set backend.loadgen_cpu / "
                           "backend.cpus to separate the load generator from the workers, "
                           "or backend.lateness_action=flag to keep the run flagged")
    if not ok:
        print(f"colosim: warning: {reason}; the run is flagged (loadgen_ok = false)",
              file=sys.stderr)

    perf_offset_s = (t0 - perf_t0) / NS
    perf_step_s = int(b.perf_interval_ms) / 1000
    perf_by_interval = perf_rows(perf_samples, perf_offset_s,
                                  perf_step_s) if perf_samples else None
    # the perf intervals the summary counts: those centred in [warmup, duration]
    perf_window = [(a, z) for a, z in perf_spans(perf_samples, perf_offset_s, perf_step_s)
                   if warmup_ns / NS <= (a + z) / 2 <= duration_ns / NS] if perf_samples else []
    requests, arrived = runner.requests(res, rows, t0, warmup_ns, duration_ns)
    intervals = sampler.table(perf_by_interval)
    summary = _summary(cfg, b, requests, sampler, perf_by_interval, stats, ok, perf_status,
                       host_sched, cpus, warmup_ns, duration_ns, wall, arrived, loadgen_cpu)
    if controller is not None:
        for column, value in controller.summary().items():
            summary = summary.append_column(column, pa.array([value]))
    for column, value in runner.summary_columns(perf_samples, perf_offset_s,
                                                warmup_ns).items():
        summary = summary.append_column(column, pa.array(
            [value], pa.float64() if isinstance(value, float) else None))
    for cls, ns in sorted(runner.alone.items()):
        summary = summary.append_column(f"job_alone_ns_per_access_{cls}", pa.array([ns]))
    spreads = alone_spreads(runner, b)
    for cls, (_, _, spread) in sorted(spreads.items()):
        summary = summary.append_column(f"job_alone_spread_{cls}", pa.array([spread]))
    loop = None
    if probe:
        after = speed_probe(probe, cpus, loop_ref)
        loop = furthest((loop_before, after), loop_ref)
    summary = summary.append_column("host_loop_ns", pa.array([loop], pa.float64()))
    summary = summary.append_column("host_loop_ns_ref", pa.array(
        [loop_ref if probe else None], pa.float64()))
    row = summary.slice(0, 1).to_pylist()[0]
    why = disturbance_verdict(row, spreads, b.disturbed_steal_frac, b.disturbed_other_frac,
                              b.disturbed_alone_spread,
                              None if loop is None else (loop, loop_ref), b.disturbed_speed_frac)
    if why:
        print(f"colosim: warning: the host was disturbed during the run ({why}); the run "
              f"is flagged (host_disturbed = true): compare it only with that in mind",
              file=sys.stderr)
    summary = summary.append_column("host_disturbed", pa.array([bool(why)]))
    summary = summary.append_column("host_disturbed_reason", pa.array([why], pa.string()))
    summary = summary.append_column("perf_window_start_s", pa.array(
        [perf_window[0][0] if perf_window else None], pa.float64()))
    summary = summary.append_column("perf_window_end_s", pa.array(
        [perf_window[-1][1] if perf_window else None], pa.float64()))
    extra = runner.tables()
    if trace_plan is not None:
        for column, (value, typ) in trace_columns(captured, trace_plan).items():
            summary = summary.append_column(column, pa.array([value], typ))
        if captured is not None:
            extra["sched"] = captured.table
    return RealResult(summary, requests, intervals, cfg, runner.result_trace(), extra)


def _start_trace(p: schedtrace.Plan | None, tcfg, cg: CgroupFS, cgroups: list[str],
                 online: set[int]):
    """The schedule's capture, started before t0 (None: not recorded) and
    the plan as it stands.  A capture that fails to start fails the run
    under trace=sched; under trace=optional the run goes on without it."""
    if p is None or p.method is None:
        return None, p
    tracer = schedtrace.capture(p, tcfg, cg, cgroups, online)
    try:
        tracer.start()
    except (OSError, PerfUnavailable, ValueError) as e:
        tracer.close()
        if tcfg.name == "sched":
            raise RealRunError(f"trace=sched: the capture failed to start: {e}") from None
        print(f"colosim: trace=optional: no sched.parquet (the capture failed to start: {e})",
              file=sys.stderr)
        return None, schedtrace.Plan(None, f"off: failed to start: {e}")
    return tracer, p


def _stop_trace(tracer, p: schedtrace.Plan, tcfg):
    """The capture's result (None if it failed: the run is kept, saying so)
    and the plan's final status; lost records are warned about."""
    try:
        cap = tracer.stop()
    except (OSError, PerfUnavailable, ValueError) as e:
        print(f"colosim: warning: trace={tcfg.name}: the capture failed ({e}); no "
              f"sched.parquet", file=sys.stderr)
        return None, schedtrace.Plan(None, f"off: failed: {e}")
    if cap.lost:
        print(f"colosim: warning: sched trace: {cap.lost:,} records lost (perf's ring buffers "
              f"overflowed): sched.parquet misses them (sched_trace_lost)", file=sys.stderr)
    return cap, p


def trace_columns(cap: schedtrace.Capture | None, p: schedtrace.Plan) -> dict:
    """Summary columns of trace=sched / optional: the rows written, whether
    max_events cut them, how they were recorded (or why not), the records
    perf lost, the records read per CPU (every task's: "cpu:count ..."), the
    clock offset's uncertainty."""
    return {"sched_trace_events": (0 if cap is None else cap.table.num_rows, pa.int64()),
            "sched_trace_truncated": (False if cap is None else cap.truncated, pa.bool_()),
            "sched_trace_status": (p.status, pa.string()),
            "sched_trace_lost": (None if cap is None else cap.lost, pa.int64()),
            "sched_trace_cpu_records": (None if cap is None else " ".join(
                f"{c}:{n}" for c, n in sorted(cap.per_cpu.items())), pa.string()),
            "sched_trace_clock_err_us": (None if cap is None else cap.offset_err_ns / 1000,
                                         pa.float64())}


def _loop_probe(cfg: dict):
    """(the profile's rtapp_loop_ns, a probe of the vCPU's speed on a CPU
    now) for the run's disturbance check (backends/real/disturbance.py
    ``host_loop_ns``); (None, None) when the profile has no such reference,
    or rt-app is missing (said once)."""
    ref = (cfg.get("calibration") or {}).get("rtapp_loop_ns")
    if not ref:
        return None, None
    try:
        binary = rtapp_binary()
    except RealRunError:
        print("colosim: warning: rt-app is not installed, so the vCPUs' speed is not checked "
              "against the calibration profile's rtapp_loop_ns (host_loop_ns stays empty)",
              file=sys.stderr)
        return None, None
    return float(ref), lambda cpu: loop_ns(binary, cpu)


def alone_spreads(runner: Runner, b: RealBackend) -> dict[str, tuple[float, float, float]]:
    """Per job class measured alone before the run: the same measurements
    after it, and (fastest, slowest, slowest / fastest - 1) of ns per access
    over all of them (a neighbour contending for the cache or memory shows
    here, where steal and load do not see it)."""
    if not runner.alone_shapes:
        return {}
    try:
        after = calibrate(runner.alone_shapes, runner.alone_cpu, float(b.job_alone_s))
    except JobError as e:
        print(f"colosim: warning: {e}; the run's memory speed spread is unknown",
              file=sys.stderr)
        return {}
    out = {}
    for cls, samples in after.items():
        ns = samples + runner.alone_samples[cls]
        out[cls] = (min(ns), max(ns), max(ns) / min(ns) - 1)
    return out


def _summary(cfg, b, requests, sampler, perf_rows, lstats, ok, perf_status, host_sched, cpus,
             warmup_ns, duration_ns, wall_s, arrived_after_warmup,
             loadgen_cpu=None) -> pa.Table:
    window_s = (duration_ns - warmup_ns) / NS
    slo_s = float(cfg.get("slo_s", 1.0))
    a, z = sampler.at_warmup or sampler.first, sampler.last
    span_s = (z["t_ns"] - a["t_ns"]) / NS
    top = "/"
    groups = sampler.cgroups
    diff = lambda k: sum(z[c][k] - a[c][k] for c in groups)  # noqa: E731
    bursts_known = all(z[c]["nr_bursts"] is not None for c in groups)
    sw = mg = None
    if perf_rows is not None:
        # the intervals centred in the window (not those after its end: perf
        # counts on until the run's teardown)
        win = [p for p in perf_rows if warmup_ns / NS <= p[0] <= duration_ns / NS]
        sw = sum_or_none([p[2] for p in win])
        mg = sum_or_none([p[3] for p in win])
    nan = math.nan
    row = {
        **run_identity(cfg, "real"),
        **request_columns(requests, window_s, slo_s, arrived_after_warmup - requests.num_rows),
        "cpu_util": (z[top]["usage_ns"] - a[top]["usage_ns"]) / NS / (span_s * len(cpus))
        if span_s > 0 else nan,
        "sched_overhead_frac": nan,          # not measurable on the real host
        "ctx_switches": sw,
        "ctx_switch_rate_per_s": nan if sw is None else sw / window_s,
        "ctx_switch_cost_mean_us": nan,      # not measurable on the real host
        # both counting paths count a task's switch when it leaves the CPU
        "switch_out_rate_per_s": nan if sw is None else sw / window_s,
        "migrations": mg,
        "runqueue_wait_mean_s": nan,         # per-thread schedstat dies with the threads
        "nr_periods": int(diff("nr_periods")),
        "nr_throttled": int(diff("nr_throttled")),
        "throttled_time_s": diff("throttled_ns") / NS,
        "nr_bursts": int(diff("nr_bursts")) if bursts_known else None,
        "burst_time_s": diff("burst_ns") / NS if bursts_known else nan,
        "wall_time_s": wall_s,
        "sim_events": None,
        "loadgen_lateness_p50_s": lstats["p50"],
        "loadgen_lateness_p99_s": lstats["p99"],
        "loadgen_lateness_max_s": lstats["max"],
        "loadgen_lateness_mean_s": lstats["mean"],
        "loadgen_max_lateness_p99_s": nan if b.max_lateness_p99_s is None
        else float(b.max_lateness_p99_s),
        "loadgen_ok": bool(ok),
        "real_cpus": cgroupfs.format_cpulist(set(cpus)),
        "loadgen_cpu": loadgen_cpu,
        "real_kernel": platform.release(),
        "real_scheduler": host_sched,
        "perf_status": perf_status,
        # what one of the sampler's reads (the perf counters' with it) costs
        # the load generator's thread: the profile's loadgen_sample_* terms
        "sampler_read_us": sampler.read_cpu_ns / sampler.reads / 1e3 if sampler.reads else nan,
        **measure_disturbance(a, z, top),
    }
    schema = pa.schema([("ctx_switches", pa.int64()), ("migrations", pa.int64()),
                        ("loadgen_cpu", pa.int64()),
                        ("nr_bursts", pa.int64()), ("sim_events", pa.int64())])
    arrays = {k: pa.array([v], schema.field(k).type if k in schema.names else None)
              for k, v in row.items()}
    return pa.table(arrays)
