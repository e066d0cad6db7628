"""``backend=real``: run a scenario on this machine and return the tables
the simulator returns (summary, requests, intervals; same columns).

Flow (``run_real``):
1. refuse what the host cannot provide before creating anything: the
   ``scheduler=`` (detect.check_scheduler), RDT for a controller that uses
   it (detect.rdt_missing), root and the cgroup controllers
   (cgroupfs.preflight), the workload (it must replay an invocation trace);
2. build the native worker (gcc) and the trace (backends/real/trace.py);
3. create ``colosim-<run>/<parent_cgroup>/<function>`` cgroups, apply the
   workload's weight / cpu.max and ``backend.cpus``, start one worker per
   function cgroup and attach it before it gets any work;
4. start ``perf stat`` on the function cgroups (software events; hardware
   events are recorded as missing where the PMU has none);
5. replay the trace open loop (backends/real/loadgen.py) with interval
   sampling, the warm-up snapshot and the controller's start/step on the
   same loop;
6. stop, tear everything down (also on SIGINT / SIGTERM / exceptions:
   workers, the RDT sidecar's classes, the cgroups), and
   build the tables.  Columns the real host cannot measure
   (``sched_overhead_frac``, ``ctx_switch_cost_mean_us``,
   ``runqueue_wait_mean_s``, ``sim_events``) are null/NaN, never invented.
"""
from __future__ import annotations

import math
import os
import platform
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from backends.real import cgroupfs, detect
from results.schema import request_columns, run_identity
from backends.real.cgroupfs import CgroupError, CgroupFS, parse_cpulist
from backends.real.loadgen import Timer, lateness_stats, lateness_verdict, replay, set_timer_slack
from backends.real.workers import WorkerError, WorkerProc, worker_binary

NS = 1_000_000_000
# the job-stream workload (backends/real/jobs.py)
JOBS = "noisy_jobs"
MEMLOOKUP = "memlookup"


class _Terminated(BaseException):
    """SIGTERM during a run: unwind through the clean-up, then die of it."""


def _on_term(signum, frame):
    raise _Terminated()


class RealRunError(RuntimeError):
    """The real run could not start, or was rejected; nothing was written."""


@dataclass
class RealResult:
    summary: pa.Table
    requests: pa.Table
    intervals: pa.Table
    config: dict
    trace: pa.Table


def _plain(cfg) -> dict:
    from omegaconf import DictConfig, OmegaConf
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def backend_keys(cfg: dict) -> dict:
    from backends.real.jobs import STALL_EVENT
    defaults = {"cpus": None, "loadgen_cpu": None, "perf": True, "perf_interval_ms": 100,
                "worker": None, "spin_us": 100, "max_lateness_p99_s": 0.002,
                "lateness_action": "reject", "grace_s": 5.0,
                "loadgen_rt_priority": None, "stall_event": STALL_EVENT,
                "job_alone_s": 0.5}
    b = dict(defaults)
    b.update({k: v for k, v in (cfg.get("backend") or {}).items() if k != "name"})
    return b


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


def check_controller(cfg: dict, b: dict) -> None:
    """RealRunError naming what is missing when the controller acts through
    RDT (its ``uses_rdt``) or reads perf counts (``uses_perf_counts``) and
    this host cannot provide them."""
    from policies.control import NONE, module
    name = (cfg.get("controller") or {}).get("controller") or NONE
    if name == NONE:
        return
    ctl = module(name).CONTROLLER
    missing = detect.rdt_missing() if ctl.uses_rdt else None
    if missing:
        raise RealRunError(f"controller={name} needs RDT (resctrl), which backend=real cannot "
                           f"provide on this host: {missing}")
    if ctl.uses_perf_counts:
        from backends.real.jobs import counted_events
        events = counted_events(str(b["stall_event"]))
        missing = ("backend.perf is false" if not b["perf"]
                   else detect.perf_missing(events))
        if missing:
            raise RealRunError(f"controller={name} reads each job's {', '.join(events)} "
                               f"(IPC, IPCE, memory-stall load): {missing}; set "
                               f"backend.stall_event to this CPU's memory-stall event if "
                               f"only that one is missing")


def _run_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "run"
    return f"{s}-{uuid.uuid4().hex[:6]}"


def run_real(cfg, trace: pa.Table | None = None, progress=None,
             run_name: str = "run") -> RealResult:
    cfg = _plain(cfg)
    b = backend_keys(cfg)
    host_sched = check_host_scheduler(str(cfg["scheduler"]["name"]))
    check_controller(cfg, b)
    from backends.real.trace import SUPPORTED
    wname = cfg["workload"]["name"]
    jobs = None
    if wname == JOBS:
        from backends.real.trace import jobs_for_real
        from sim.workloads.noisy_jobs import to_invocations
        try:
            jobs = trace if trace is not None else jobs_for_real(cfg)
        except ValueError as e:
            raise RealRunError(str(e)) from None
        trace = to_invocations(jobs)
    periodic = wname in PERIODIC
    # containers of memory workers running bursts back to back (backends/real/memlookup.py)
    memlook = wname == MEMLOOKUP
    if memlook:
        from backends.real import memlookup
        try:
            container_names = memlookup.container_names(cfg["workload"])
        except memlookup.MemLookupError as e:
            raise RealRunError(str(e)) from None
        missing = detect.rdt_missing() if memlookup.needs_rdt(cfg["workload"]) else None
        if missing:
            raise RealRunError(f"workload.partitions needs RDT (resctrl), which backend=real "
                               f"cannot provide on this host: {missing}; run without "
                               f"partitions (workload.partitions=null) to share the LLC")
    pooled = wname in POOLED
    # a pool driven by closed-loop clients: no trace, loadgen.closed_loop
    closed = pooled and cfg["workload"].get("clients") is not None
    if not periodic and not memlook and jobs is None and wname not in SUPPORTED and not (
            cfg["workload"].get("trace_file") and "functions" in cfg["workload"]):
        raise RealRunError(f"workload={wname} is not supported by backend=real yet; it runs "
                           f"invocation traces (workload={', workload='.join(SUPPORTED)}, or "
                           f"a function workload with a trace_file), periodic threads "
                           f"(workload={', workload='.join(PERIODIC)}), job streams "
                           f"(workload={JOBS}) and memory-lookup containers "
                           f"(workload={MEMLOOKUP})")
    duration_ns = int(round(float(cfg["duration_s"]) * NS))
    warmup_ns = int(round(float(cfg.get("warmup_s", 0.0)) * NS))
    interval_ns = int(round(float(cfg.get("interval_s", 1.0)) * NS))
    w = cfg["workload"]
    if periodic:
        try:
            groups = periodic_groups(w)
        except ValueError as e:
            raise RealRunError(str(e)) from None
        trace = _empty_trace()
        parent = ""
        fn_names = [g["name"] for g in groups]
    elif memlook:
        trace = _empty_trace()
        parent = str(w.get("parent_cgroup") or "memlookup").strip("/")
        fn_names = container_names
    elif closed:
        trace = _empty_trace()
        parent = ""
    else:
        if trace is None:
            from backends.real.trace import trace_for_real
            try:
                trace = trace_for_real(cfg)
            except ValueError as e:
                raise RealRunError(str(e)) from None
        parent = str(w.get("parent_cgroup") or "").strip("/")
        fn_names = sorted(set(trace.column("function").to_pylist()),
                          key=lambda s: (len(s), s))
        if w["name"] == "poisson" and not w.get("trace_file"):
            fn_names = [f"func-{i}" for i in range(int(w["functions"]))]
    if pooled:
        # one server cgroup, as sim/workloads/worker_pool.py makes it
        from sim.workloads.worker_pool import NAME
        parent, fn_names = "", [NAME]
    cgroups = [f"/{parent}/{f}" if parent else f"/{f}" for f in fn_names]

    try:
        binary = worker_binary(b["worker"])
    except WorkerError as e:
        raise RealRunError(str(e)) from None
    online = os.sched_getaffinity(0)
    cpus = set(parse_cpulist(b["cpus"])) if b["cpus"] else set(online)
    if not cpus <= set(range(os.cpu_count() or 1)):
        raise RealRunError(f"backend.cpus = {b['cpus']}: this host has CPUs "
                           f"0-{(os.cpu_count() or 1) - 1}")
    ncpus = len(cpus)
    host_cpus = int(cfg["host"]["sockets"]) * int(cfg["host"]["cores"]) * \
        int(cfg["host"]["threads_per_core"])
    if host_cpus != ncpus:
        print(f"colosim: warning: host={cfg['host'].get('name')} describes {host_cpus} CPUs "
              f"but the real run uses {ncpus} ({cgroupfs.format_cpulist(cpus)}); compare it "
              f"with a simulator run of a host option with {ncpus} CPUs",
              file=sys.stderr)

    try:
        cg = CgroupFS(_run_name(run_name))
    except CgroupError as e:
        raise RealRunError(str(e)) from None
    workers: list[WorkerProc] = []
    job_alone: dict[str, float] = {}
    job_summary: dict[str, float] = {}
    host = None
    perf = None
    sampler = None
    old_affinity = os.sched_getaffinity(0)
    wall0 = time.perf_counter()
    rt_set = False
    terminated = False
    # SIGTERM unwinds like SIGINT, so workers are reaped and cgroups removed
    # by the finally below (cgroupfs's own handler is the last resort)
    old_term = (signal.signal(signal.SIGTERM, _on_term)
                if threading.current_thread() is threading.main_thread() else None)
    try:
        from backends.real.host import RealHost
        host = RealHost(cg, cgroups, None if periodic or memlook else trace, parent)
        if b["cpus"]:
            cg.set_cpuset("", cgroupfs.format_cpulist(cpus))
        max_s = (duration_ns / NS) + float(b["grace_s"])
        sched = cfg["scheduler"]
        rr = {c: (sched.get("task_policy") == "rr", int(sched.get("rt_priority", 50)))
              for c in cgroups}
        if periodic:
            for g, c in zip(groups, cgroups):
                _apply_cgroup(cg, host, c, g, g if g["own_bandwidth"] else w)
                gcpus = cpus
                if g.get("cpuset"):
                    gcpus = set(parse_cpulist(str(g["cpuset"])))
                    if not gcpus <= cpus:
                        raise RealRunError(f"group {g['name']}: cpuset {g['cpuset']} is not "
                                           f"inside the run's CPUs {cgroupfs.format_cpulist(cpus)}")
                    cg.set_cpuset(c, cgroupfs.format_cpulist(gcpus))
                if g.get("task_policy") is not None:
                    rr[c] = (g["task_policy"] == "rr", int(g.get("rt_priority") or 50))
                workers.append(WorkerProc(
                    binary, g["name"], max_s, attach=lambda pid, c=c: cg.attach(c, pid),
                    cpus=gcpus, periodic=(g["threads"], g["run_us"], g["sleep_us"]),
                    nices=g["nices"]))
        elif memlook:
            for c in cgroups:
                _apply_cgroup(cg, host, c, w, w)
            from backends.real.memworker import build_memworker
            try:
                groups = memlookup.plan(w, host.cores_by_socket())
                workers, ns, ml_classes = memlookup.start_containers(
                    w, groups, cgroups, host, cg, build_memworker(), max_s,
                    float(b["job_alone_s"]), int(cfg.get("seed", 0)))
            except memlookup.MemLookupError as e:
                raise RealRunError(str(e)) from None
            job_alone = {"memlookup": ns}
        elif jobs is not None:
            for c in cgroups:
                _apply_cgroup(cg, host, c, w, w)
            gate = _job_gate(cfg, b, jobs, fn_names, cgroups, host, cg, cpus, max_s)
            host.use_jobs(gate)
            workers = gate.procs
            job_alone = gate.alone
        else:
            for c in cgroups:
                _apply_cgroup(cg, host, c, w, w)
            pool = (int(w["workers"]), int(w["capacity"])) if pooled else None
            for f, c in zip(fn_names, cgroups):
                workers.append(WorkerProc(binary, f, max_s,
                                          attach=lambda pid, c=c: cg.attach(c, pid),
                                          cpus=cpus, nice=int(w.get("nice", 0) or 0),
                                          pool=pool))
        for c, (is_rr, prio) in rr.items():
            if is_rr:
                host.set_rt_policy(c, "rr", prio)
        controller = _controller(cfg)

        # trace rows sorted by arrival
        arr_s = trace.column("arrival_s").to_numpy()
        order = np.argsort(arr_s, kind="stable")
        arrival_ns = np.rint(arr_s[order] * NS).astype(np.int64)
        demand_ns = np.maximum(1, np.rint(trace.column("demand_s").to_numpy()[order] * NS)
                               ).astype(np.int64)
        threads = trace.column("threads").to_numpy()[order].astype(np.int64)
        fn_col = np.asarray(trace.column("function").to_pylist(), dtype=object)[order]
        index = {f: i for i, f in enumerate(fn_names)}
        # a pool serves every row, whatever its function (as the simulator's
        # worker_pool and webserver replay a trace)
        worker_of_row = np.array([0 if pooled else index[f] for f in fn_col], dtype=np.int64)
        keep = arrival_ns < duration_ns
        arrival_ns, demand_ns, threads, fn_col, worker_of_row = (
            a[keep] for a in (arrival_ns, demand_ns, threads, fn_col, worker_of_row))

        perf_status = "off"
        perf_t0 = time.monotonic_ns()
        if jobs is not None:
            # each job counts under its own perf stat (backends/real/jobs.py)
            perf_status = "per job" if gate.perf else "off"
        elif b["perf"]:
            from backends.real.perf import DEFAULT_EVENTS, PerfStat, PerfUnavailable
            try:
                events = DEFAULT_EVENTS
                if memlook:   # the memory columns: miss rate, IPCE
                    events += tuple(detect.perf_accepts(
                        ("cache-references", "cache-misses", str(b["stall_event"]))))
                perf = PerfStat({cg.perf_name(c): c for c in cgroups}, events,
                                int(b["perf_interval_ms"]))
                perf.start()
                perf_status = "ok"
            except (PerfUnavailable, CgroupError) as e:
                perf, perf_status = None, f"unavailable: {e}"
                print(f"colosim: warning: {e}; ctx_switches and migrations will be missing",
                      file=sys.stderr)

        sampler = _Sampler(cg, cgroups, parent, ncpus)
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

        def on_done(row, d):
            if controller is not None:
                end_s = (d.end_ns - t0) / NS
                host.push_completed(cgroups[worker_of_row[row]],
                                    end_s - arrival_ns[row] / NS, end_s)

        loadgen_cpu = b["loadgen_cpu"]
        if loadgen_cpu is None and set(online) - cpus:
            loadgen_cpu = min(set(online) - cpus)   # a CPU the workers do not use
        if loadgen_cpu is not None:
            os.sched_setaffinity(0, {int(loadgen_cpu)})
        set_timer_slack(1)
        if b["loadgen_rt_priority"] is not None:
            # only this thread, and only for the replay (children started
            # before keep their policy); above SCHED_RR workers, or they
            # would starve the dispatcher
            prio = int(b["loadgen_rt_priority"])
            rr_prios = [pr for is_rr, pr in rr.values() if is_rr]
            if rr_prios:
                prio = max(prio, min(99, max(rr_prios) + 1))
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
                rt_set = True
            except OSError as e:
                raise RealRunError(f"backend.loadgen_rt_priority: sched_setscheduler "
                                   f"SCHED_FIFO failed: {e.strerror}") from None
        time.sleep(0.05)   # let perf attach its counters
        t0 = time.monotonic_ns() + 10_000_000
        host._t0 = t0      # the Host clock starts with the replay
        if jobs is not None:
            gate.warmup_end_ns = t0 + warmup_ns
        if periodic or memlook:
            for wp in workers:
                wp.go(t0)
        if closed:
            res = _closed_loop(cfg, workers, t0, duration_ns, timers, host, cgroups[0],
                               controller, int(b["spin_us"]) * 1000)
            arrival_ns, demand_ns = res.due_ns, res.demand_ns
            fn_col = np.full(len(arrival_ns), fn_names[0], dtype=object)
            worker_of_row = np.zeros(len(arrival_ns), dtype=np.int64)
        else:
            res = replay(arrival_ns, worker_of_row, demand_ns, threads, workers, t0,
                         duration_ns, timers, on_done, spin_ns=int(b["spin_us"]) * 1000)
        sampler.sample(time.monotonic_ns() - t0, final=True)
        if jobs is not None:
            job_summary = gate.summary()     # before the jobs still running are stopped
        if memlook:                          # before the run's classes are removed
            ml_occupancy = memlookup.occupancy_mb(host, ml_classes)
        os.sched_setaffinity(0, old_affinity)
        perf_samples = None
        if perf is not None:
            try:
                perf_samples = perf.stop()
            except Exception as e:  # noqa: BLE001 - perf failing must not lose the run
                perf_status = f"failed: {e}"
            perf = None
        for wp in workers:
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
        for wp in workers:
            wp.kill()
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
    lat = (res.dispatch_ns - arrival_ns) / NS
    stats = lateness_stats(lat[res.dispatch_ns >= 0])
    ok, reason = lateness_verdict(stats, b["max_lateness_p99_s"])
    if not ok and b["lateness_action"] == "reject":
        raise RealRunError(reason + "; rerun on a quieter host, set backend.loadgen_cpu / "
                           "backend.cpus to separate the load generator from the workers, "
                           "or backend.lateness_action=flag to keep the run flagged")
    if not ok:
        print(f"colosim: warning: {reason}; the run is flagged (loadgen_ok = false)",
              file=sys.stderr)

    perf_by_interval = _perf_rows(perf_samples, (t0 - perf_t0) / NS,
                                  int(b["perf_interval_ms"]) / 1000) if perf_samples else None
    if memlook:
        job_summary = {**memlookup.perf_summary(perf_samples or [], (t0 - perf_t0) / NS,
                                                warmup_ns / NS, str(b["stall_event"]),
                                                str(w.get("tag") or "priority") == "priority"),
                       "llc_occupancy_mb": ml_occupancy}
    if periodic or memlook:
        requests = _burst_requests(res.bursts, cgroups, groups, t0, warmup_ns, duration_ns)
        arrived = requests.num_rows + sum(g["threads"] for g in groups)
    else:
        requests = _requests(arrival_ns, demand_ns, fn_col, worker_of_row, cgroups, res, t0,
                             warmup_ns, duration_ns)
        arrived = int((arrival_ns >= warmup_ns).sum())
    intervals = sampler.table(perf_by_interval)
    summary = _summary(cfg, b, requests, sampler, perf_by_interval, stats, ok, perf_status,
                       host_sched, cpus, warmup_ns, duration_ns, wall, arrived, loadgen_cpu)
    if controller is not None:
        for column, value in controller.summary().items():
            summary = summary.append_column(column, pa.array([value]))
    for column, value in job_summary.items():
        summary = summary.append_column(column, pa.array([value], pa.float64()))
    for cls, ns in sorted(job_alone.items()):
        summary = summary.append_column(f"job_alone_ns_per_access_{cls}", pa.array([ns]))
    # a closed loop's arrivals came from the responses: there is no trace to
    # replay; a job stream's trace is its job table, as the simulator writes it
    return RealResult(summary, requests, intervals, cfg,
                      None if closed else jobs if jobs is not None else trace)


def _closed_loop(cfg, workers, t0, duration_ns, timers, host, cgroup, controller, spin_ns):
    """``clients`` closed-loop clients on the pool (as sim/workloads/worker_pool.py):
    each client its own seeded demand and (fixed) think-time streams."""
    from backends.real.loadgen import client_samplers, closed_loop
    w, seed = cfg["workload"], int(cfg.get("seed", 0))
    clients = int(w["clients"])
    demand = client_samplers(clients, w.get("service", "exp"), float(w["mean_service_s"]),
                             seed, "demand", float(w.get("service_sigma", 1.0)))
    think = client_samplers(clients, "det", float(w.get("think_s") or 0.0), seed, "think")

    def on_done(rid, d, due_ns):
        if controller is not None:
            end_s = (d.end_ns - t0) / NS
            host.push_completed(cgroup, end_s - due_ns / NS, end_s)
    return closed_loop(workers, [0] * clients, demand, think, t0, duration_ns,
                       timers=timers, on_done=on_done, spin_ns=spin_ns)


def _job_gate(cfg, b, jobs: pa.Table, fn_names, cgroups, host, cg, cpus, max_s):
    """The run's jobs (backends/real/jobs.py), each class's speed alone
    measured first on one of the run's CPUs."""
    from backends.real import jobs as J
    from backends.real.memworker import build_memworker
    from sim.memory.progress import MemoryProfile
    memory = cfg["workload"].get("memory") or {}
    try:
        profiles = {c: MemoryProfile.from_spec(dict(spec)) for c, spec in memory.items()}
        rows = {name: r for r, name in enumerate(jobs.column("job").to_pylist())}
        cols = {n: jobs.column(n).to_pylist() for n in
                ("arrival_s", "length_s", "cores", "sensitivity", "priority")}
        classes = sorted(set(cols["sensitivity"])) if profiles else ["cpu"]
        missing = [c for c in classes if profiles and c not in profiles]
        if missing:
            raise ValueError(f"workload.memory needs a profile for {missing}")
        shapes = {c: J.job_args(profiles.get(c)) for c in classes}
        binary = build_memworker()
        alone = J.calibrate(shapes, min(cpus), float(b["job_alone_s"]), binary)
    except (ValueError, J.JobError) as e:
        raise RealRunError(str(e)) from None
    seed = int(cfg.get("seed", 0))
    specs = []
    for f, c in zip(fn_names, cgroups):
        r = rows[f]
        cls = cols["sensitivity"][r] if profiles else "cpu"
        specs.append(J.JobSpec(c, cols["arrival_s"][r], cols["length_s"][r], cols["cores"][r],
                               bool(cols["priority"][r]), tuple(shapes[cls]), alone[cls],
                               J.job_seed(seed, f)))
    perf = J.job_perf() if b["perf"] else None
    return J.JobGate(specs, binary, max_s, time.monotonic_ns, cg.procs_files, host.cpus_of,
                     perf, int(b["perf_interval_ms"]), str(b["stall_event"]), alone)


def _controller(cfg):
    from policies.control import build
    return build(cfg.get("controller"))


def _apply_cgroup(cg: CgroupFS, host, c: str, weights: dict, bandwidth: dict) -> None:
    """cpu.shares / weight from ``weights``, cpu.max from ``bandwidth``."""
    from sim.workloads.common import cgroup_bandwidth
    if weights.get("cgroup_shares") is not None:
        cg.set_shares(c, int(weights["cgroup_shares"]))
    elif weights.get("cgroup_weight") not in (None, 100):
        cg.set_weight(c, int(weights["cgroup_weight"]))
    bw = cgroup_bandwidth(bandwidth)
    if bw is not None:
        host.set_cpu_max(c, *bw)


PERIODIC = ("periodic", "ebizzy")
# served by one pool-mode worker (funcworker --pool) behind a bounded queue
POOLED = ("worker_pool",)


def periodic_groups(w: dict) -> list[dict]:
    """The groups of a periodic/ebizzy workload as sim/workloads/periodic.py
    builds them: name, threads, nices, run/sleep (us), cpuset, weights,
    task policy, and whether the group has its own cpu.max keys."""
    from sim.workloads.common import BANDWIDTH_KEYS
    from sim.workloads.ebizzy import resolve
    from sim.workloads.periodic import _nices
    if w["name"] == "ebizzy":
        w = resolve(w)
    groups = w.get("groups") or [{
        "name": w.get("name") or "periodic", "threads": w["threads"], "nice": w.get("nice", 0),
        "cgroup_weight": w.get("cgroup_weight"), "cgroup_shares": w.get("cgroup_shares"),
        "cpuset": w.get("cpuset")}]
    out = []
    for g in groups:
        g = dict(g)
        name = str(g["name"])
        run_ms = w["run_ms"] if g.get("run_ms") is None else g["run_ms"]
        sleep_ms = w.get("sleep_ms", 0.0) if g.get("sleep_ms") is None else g["sleep_ms"]
        g.update(name=name, threads=int(g["threads"]),
                 nices=_nices(g.get("nice", 0), int(g["threads"]), f"workload.groups[{name}]"),
                 run_us=int(round(float(run_ms) * 1000)),
                 sleep_us=int(round(float(sleep_ms or 0) * 1000)),
                 own_bandwidth=any(g.get(k) is not None for k in BANDWIDTH_KEYS))
        if g["run_us"] <= 0 or g["sleep_us"] < 0:
            raise ValueError(f"workload group {name}: run_ms must be > 0, sleep_ms >= 0")
        out.append(g)
    return out


def _empty_trace() -> pa.Table:
    from sim.workloads.trace import TRACE_SCHEMA
    return TRACE_SCHEMA.empty_table()


def _burst_requests(bursts, cgroups, groups, t0, warmup_ns, end_ns) -> pa.Table:
    """Periodic bursts as request rows (function = cgroup = the group's
    path, arrival = release), as the simulator records them."""
    rows = []
    for wi, bu in bursts:
        a, e = bu.release_ns - t0, bu.end_ns - t0
        if a < warmup_ns or e > end_ns:
            continue
        c = cgroups[wi]
        rows.append((c, c, a / NS, (bu.start_ns - t0) / NS, e / NS, (e - a) / NS,
                     groups[wi]["run_us"] / 1e6, None, bu.cpu_ns / NS, False))
    return _request_table(rows)


class _Sampler:
    """Per-cgroup usage and cpu.stat counters every interval (and at the
    warm-up instant for the summary window)."""

    def __init__(self, cg: CgroupFS, functions: list[str], parent: str, ncpus: int):
        self.cg = cg
        self.ncpus = ncpus
        self.cgroups = ["/"] + ([f"/{parent}"] if parent else []) + list(functions)
        self.rows: list[dict] = []
        self._last = None
        self.at_warmup = None
        self.last = None

    def _open(self) -> None:
        """Keep every counter file open and pread it from offset 0 (a few us
        per file instead of ~100 us for open/read/close), so a sample barely
        delays the load generator's next dispatch."""
        cg, self._fds = self.cg, {}
        v2 = cg.layout.version("cpu") == 2
        for c in self.cgroups:
            d = cg.dir("cpu", c)
            files = {"stat": d / "cpu.stat"}
            if v2:
                files["max"] = d / "cpu.max"
            else:
                files["quota"] = d / "cpu.cfs_quota_us"
                files["period"] = d / "cpu.cfs_period_us"
                if cg.layout.version("cpuacct") == 1:
                    files["usage"] = cg.dir("cpuacct", c) / "cpuacct.usage"
            self._fds[c] = {k: os.open(f, os.O_RDONLY) for k, f in files.items()}

    def close(self) -> None:
        for fds in getattr(self, "_fds", {}).values():
            for fd in fds.values():
                os.close(fd)
        self._fds = {}

    def _raw(self, c: str) -> tuple[dict, int, int | None, int]:
        fds = self._fds[c]
        rd = lambda k: os.pread(fds[k], 4096, 0).decode()  # noqa: E731
        kv = cgroupfs.read_kv(rd("stat"))
        if "max" in fds:
            q, per = rd("max").split()
            quota, period = (None if q == "max" else int(q)), int(per)
        else:
            q = int(rd("quota"))
            quota, period = (None if q < 0 else q), int(rd("period"))
        usage = int(rd("usage")) if "usage" in fds else kv["usage_usec"] * 1000
        return kv, usage, quota, period

    def read(self, now_ns: int) -> dict:
        out = {"t_ns": now_ns}
        if not getattr(self, "_fds", None):
            self._open()
        for c in self.cgroups:
            kv, usage, quota, period = self._raw(c)
            out[c] = {"usage_ns": usage,
                      "nr_periods": kv.get("nr_periods", 0),
                      "nr_throttled": kv.get("nr_throttled", 0),
                      "throttled_ns": kv["throttled_usec"] * 1000 if "throttled_usec" in kv
                      else kv.get("throttled_time", 0),
                      "nr_bursts": kv.get("nr_bursts"),
                      "burst_ns": kv["burst_usec"] * 1000 if "burst_usec" in kv
                      else kv.get("burst_time"),
                      "quota_us": quota, "period_us": period}
        return out

    def start(self, now_ns: int = 0) -> None:
        self._last = self.read(now_ns)
        self.first = self._last

    def warmup(self, now_ns: int) -> None:
        self.at_warmup = self.read(now_ns)

    def sample(self, now_ns: int, final: bool = False) -> None:
        cur = self.read(now_ns)
        prev = self._last
        span = cur["t_ns"] - prev["t_ns"]
        if span <= 0:
            return
        for c in self.cgroups:
            a, z = prev[c], cur[c]
            used = z["usage_ns"] - a["usage_ns"]
            self.rows.append({
                "interval_start_s": prev["t_ns"] / NS, "interval_end_s": cur["t_ns"] / NS,
                "cgroup": c, "usage_s": used / NS, "usage_frac": used / (span * self.ncpus),
                "nr_periods": z["nr_periods"] - a["nr_periods"],
                "nr_throttled": z["nr_throttled"] - a["nr_throttled"],
                "throttled_time_s": (z["throttled_ns"] - a["throttled_ns"]) / NS,
                "nr_bursts": None if z["nr_bursts"] is None else z["nr_bursts"] - a["nr_bursts"],
                "burst_time_s": None if z["burst_ns"] is None
                else (z["burst_ns"] - a["burst_ns"]) / NS,
                "quota_us": z["quota_us"], "period_us": z["period_us"]})
        self._last = cur
        self.last = cur

    def table(self, perf_rows) -> pa.Table:
        rows = self.rows
        counts = {name: [] for name in PERF_COLUMNS.values()}
        for r in rows:
            sel = []
            if perf_rows is not None:
                key = r["cgroup"]
                sel = [p for p in perf_rows if r["interval_start_s"] <= p[0] < r["interval_end_s"]
                       and (key == "/" or p[1] == key or p[1].startswith(key + "/"))]
            for i, name in enumerate(PERF_COLUMNS.values()):
                counts[name].append(_sum_or_none([p[2 + i] for p in sel])
                                    if sel or (perf_rows is not None and key == "/") else None)
        col = lambda k, t: pa.array([r[k] for r in rows], t)  # noqa: E731
        return pa.table({
            "interval_start_s": col("interval_start_s", pa.float64()),
            "interval_end_s": col("interval_end_s", pa.float64()),
            "cgroup": col("cgroup", pa.string()),
            "usage_s": col("usage_s", pa.float64()),
            "usage_frac": col("usage_frac", pa.float64()),
            "ctx_switches": pa.array(counts["ctx_switches"], pa.int64()),
            "sched_overhead_s": pa.array([None] * len(rows), pa.float64()),
            "migrations": pa.array(counts["migrations"], pa.int64()),
            "nr_periods": col("nr_periods", pa.int64()),
            "nr_throttled": col("nr_throttled", pa.int64()),
            "throttled_time_s": col("throttled_time_s", pa.float64()),
            "nr_bursts": col("nr_bursts", pa.int64()),
            "burst_time_s": col("burst_time_s", pa.float64()),
            "quota_us": col("quota_us", pa.int64()),
            "period_us": col("period_us", pa.int64()),
            # hardware counts where the PMU has them; null where perf said
            # <not supported> (a VM without a virtual PMU), never 0
            **{name: pa.array(counts[name], pa.int64())
               for name in list(PERF_COLUMNS.values())[2:]},
        })


def _sum_or_none(values):
    vals = [v for v in values if v is not None]
    return int(sum(vals)) if vals else None


# perf events -> intervals.parquet columns, in the order of _perf_rows' values
PERF_COLUMNS = {"context-switches": "ctx_switches", "cpu-migrations": "migrations",
                "instructions": "instructions", "cycles": "cycles",
                "stalled-cycles-frontend": "stalled_cycles_frontend",
                "stalled-cycles-backend": "stalled_cycles_backend"}
_PERF_INDEX = {ev: i for i, ev in enumerate(PERF_COLUMNS)}


def _perf_rows(samples, offset_s: float, step_s: float):
    """(midpoint in run time, cgroup, then one count per PERF_COLUMNS event)
    per perf interval and cgroup; a count perf could not take is None."""
    acc: dict[tuple[float, str], list] = {}
    for s in samples:
        if s.time_s is None or s.cgroup is None:
            continue
        row = acc.setdefault((s.time_s, s.cgroup), [None] * len(PERF_COLUMNS))
        i = _PERF_INDEX.get(s.event.split(":")[0])
        if i is not None:
            row[i] = s.value
    out = []
    prev_t: dict[str, float] = {}
    for (t, c), values in sorted(acc.items()):
        start = prev_t.get(c, max(0.0, t - step_s))
        prev_t[c] = t
        out.append(((start + t) / 2 - offset_s, c, *values))
    return out


def _requests(arrival_ns, demand_ns, fn_col, worker_of_row, cgroups, res, t0, warmup_ns,
              end_ns) -> pa.Table:
    rows = []
    for i in range(len(arrival_ns)):
        if arrival_ns[i] < warmup_ns:
            continue
        a = arrival_ns[i] / NS
        if i in res.dropped:    # the simulator's dropped rows: no start, end or latency
            rows.append((fn_col[i], cgroups[worker_of_row[i]], a, math.nan, math.nan,
                         math.nan, demand_ns[i] / NS, (res.dispatch_ns[i] - arrival_ns[i]) / NS,
                         math.nan, True))
            continue
        d = res.done.get(i)
        if d is None or d.end_ns - t0 > end_ns:
            continue   # unfinished at the end, as in the simulator
        e = (d.end_ns - t0) / NS
        rows.append((fn_col[i], cgroups[worker_of_row[i]], a, (d.start_ns - t0) / NS, e,
                     e - a, demand_ns[i] / NS, (res.dispatch_ns[i] - arrival_ns[i]) / NS,
                     d.cpu_ns / NS, False))
    return _request_table(rows)


def _request_table(rows) -> pa.Table:
    cols = [list(c) for c in zip(*rows)] if rows else [[] for _ in range(10)]
    return pa.table({
        "function": pa.array(cols[0], pa.string()),
        "cgroup": pa.array(cols[1], pa.string()),
        "arrival_s": pa.array(cols[2], pa.float64()),
        "start_s": pa.array(cols[3], pa.float64()),
        "end_s": pa.array(cols[4], pa.float64()),
        "latency_s": pa.array(cols[5], pa.float64()),
        "cpu_demand_s": pa.array(cols[6], pa.float64()),
        "dropped": pa.array(cols[9], pa.bool_()),
        # real backend only: dispatch - scheduled arrival, and the CPU time
        # the worker's threads measured for the request
        "dispatch_lateness_s": pa.array(cols[7], pa.float64()),
        "cpu_measured_s": pa.array(cols[8], pa.float64()),
    })


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
        win = [p for p in perf_rows if p[0] >= warmup_ns / NS]
        sw = _sum_or_none([p[2] for p in win])
        mg = _sum_or_none([p[3] for p in win])
    nan = math.nan
    row = {
        **run_identity(cfg, "real"),
        **request_columns(requests, window_s, slo_s),
        "n_unfinished": int(arrived_after_warmup - requests.num_rows),
        "cpu_util": (z[top]["usage_ns"] - a[top]["usage_ns"]) / NS / (span_s * len(cpus))
        if span_s > 0 else nan,
        "sched_overhead_frac": nan,          # not measurable on the real host
        "ctx_switches": sw,
        "ctx_switch_rate_per_s": nan if sw is None else sw / window_s,
        "ctx_switch_cost_mean_us": nan,      # not measurable on the real host
        # perf stat -G counts a cgroup's switches when its task leaves the CPU
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
        "loadgen_max_lateness_p99_s": nan if b["max_lateness_p99_s"] is None
        else float(b["max_lateness_p99_s"]),
        "loadgen_ok": bool(ok),
        "real_cpus": cgroupfs.format_cpulist(set(cpus)),
        "loadgen_cpu": loadgen_cpu,
        "real_kernel": platform.release(),
        "real_scheduler": host_sched,
        "perf_status": perf_status,
    }
    schema = pa.schema([("ctx_switches", pa.int64()), ("migrations", pa.int64()),
                        ("loadgen_cpu", pa.int64()),
                        ("nr_bursts", pa.int64()), ("sim_events", pa.int64())])
    arrays = {k: pa.array([v], schema.field(k).type if k in schema.names else None)
              for k, v in row.items()}
    return pa.table(arrays)
