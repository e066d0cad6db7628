"""The simulated host: ``build_host`` assembles a config's engine, machine
and request recorder (the kernel policy looked up by name in
policies.kernel); ``SimHost`` puts the machine behind the ``Host`` protocol
(backends/host.py), and ``drive`` runs a controller on the simulation clock."""
from __future__ import annotations

import numpy as np

from backends.host import (NO_ADMISSION, Completed, CpuStat, PendingJob, PerfCounts, RdtError, RdtLimits,
                           checked_cpuset, cores_of, trace_demand)
from policies.kernel import config as sched_config, load as load_policy
from sim.costmodel import CostModel
from sim.engine import NSEC_PER_SEC, Engine, s_to_ns
from sim.machine import Machine
from sim.recorder import Recorder
from sim.topology import Topology


def build_host(cfg: dict, seed: int):
    """The engine, simulated machine and request recorder of a resolved
    config's host, scheduler and cost model (no workload yet)."""
    engine = Engine(seed)
    topology = Topology.from_config(cfg["host"])
    sched = sched_config(cfg["scheduler"])
    machine = Machine(engine, topology, load_policy(sched.policy), sched,
                      CostModel.from_config(cfg["calibration"]))
    machine.host_cfg = dict(cfg["host"])
    return engine, machine, Recorder(s_to_ns(float(cfg.get("warmup_s", 0.0))))


class SimHost:
    def __init__(self, machine, trace=None, parent_cgroup: str = "", workload=None,
                 reads_completed: bool = True):
        """``reads_completed``: keep finished requests for ``completed()``
        (request_done observes them); without it nothing is kept, so a
        long run's memory does not grow with its requests."""
        self.machine = machine
        self.workload = workload
        self._trace = trace
        self._parent = "/" + parent_cgroup.strip("/") if parent_cgroup.strip("/") else ""
        self._done: list[tuple[str, int, int]] | None = [] if reads_completed else None

    def request_done(self, req) -> None:
        """Recorder observer: every request (warm-up included; controllers
        act from t = 0)."""
        if not req.dropped and self._done is not None:
            self._done.append((req.cgroup, req.end - req.arrival, req.end))

    # --- reads --------------------------------------------------------------
    def now_ns(self) -> int:
        return self.machine.engine.now

    def functions(self) -> list[str]:
        return [path for path, tg in self.machine.groups.items()
                if tg.parent is not None and not tg.children]

    def function_demand(self) -> dict[str, float]:
        return trace_demand(self._trace, self._parent)

    def cpu_usage_ns(self, cgroup: str) -> int:
        self.machine.sync()
        return _hier_usage(self._group(cgroup))

    def cpu_stat(self, cgroup: str) -> CpuStat:
        b = self._group(cgroup).cfs_bandwidth
        return CpuStat(b.nr_periods, b.nr_throttled, b.throttled_time // 1000)

    def completed(self) -> Completed:
        if self._done is None:
            raise RuntimeError("host.completed(): this host keeps no finished requests "
                               "(a controller that reads them declares reads_completed = True)")
        rows, self._done = self._done, []
        cgroups = np.array([r[0] for r in rows], dtype=object)
        lat = np.array([r[1] for r in rows], dtype=np.float64) / NSEC_PER_SEC
        end = np.array([r[2] for r in rows], dtype=np.float64) / NSEC_PER_SEC
        return Completed(cgroups, lat, end)

    # --- levers -------------------------------------------------------------
    def set_cpu_max(self, cgroup: str, quota_us: int | None, period_us: int,
                    burst_us: int = 0) -> None:
        self.machine.set_cfs_bandwidth(self._group(cgroup), quota_us, period_us, burst_us)

    def set_rt_policy(self, cgroup: str, policy: str, rt_priority: int = 50) -> None:
        # sched_setscheduler on every thread of the cgroup, as the real
        # backend does; threads created later inherit it (on a real host
        # from the thread that clones them, here from the group)
        tg = self._group(cgroup)
        machine = self.machine
        machine.set_group_task_policy(tg, policy, rt_priority)
        for p in list(tg.tasks):
            machine.sched_setscheduler(p, policy, rt_priority)

    def cpu_max(self, cgroup: str) -> tuple[int | None, int]:
        b = self._group(cgroup).cfs_bandwidth
        return (None if not b.enabled else b.quota // 1000), b.period // 1000

    # --- optional capability: in-kernel bandwidth tracing --------------------
    # (backends.host.BandwidthTracing; a real host has no such hook)
    def bandwidth_slice_ns(self) -> int:
        return self.machine.policy.bandwidth.slice

    def trace_bandwidth(self, cgroup: str, observer) -> None:
        tg = self._group(cgroup)
        _BandwidthTrace(self.machine, tg, observer)

    # --- topology, placement and admission ---------------------------------
    def cores_by_socket(self) -> dict[int, list[tuple[int, ...]]]:
        return cores_of((c.socket, c.core, c.cpu) for c in self.machine.topology.cpus)

    def set_cpuset(self, cgroup: str, cpus) -> None:
        tg = self._group(cgroup)
        allowed = checked_cpuset(cgroup, cpus, range(self.machine.topology.nr_cpus))
        # a group with live threads may change LLC domain: the memory model
        # accounts and re-solves at the move, as at an RDT change
        mem = self.machine.memory if tg.tasks else None
        if mem is not None:
            mem.changed()
            old_domains = mem.domains_of(tg.cpus_allowed)
        tg.cpus_allowed = allowed
        # cpuset.cpus applies to the group's live threads too (the kernel
        # rewrites every member's mask), not only to threads it starts later
        for p in list(tg.tasks):
            self.machine.set_cpus_allowed(p, allowed)
        if mem is not None:
            mem.moved(tg, old_domains)

    def _admission(self):
        w = self.workload
        if w is None or not hasattr(w, "hold_jobs"):
            raise ValueError(NO_ADMISSION)
        return w

    def hold_jobs(self) -> None:
        self._admission().hold_jobs()

    def pending_jobs(self) -> list[PendingJob]:
        return [PendingJob(cg, arrival_ns / NSEC_PER_SEC, threads, prio)
                for cg, arrival_ns, threads, prio in self._admission().pending_jobs()]

    def admit_job(self, cgroup: str, cpus=None) -> None:
        w = self._admission()
        if cpus is not None:
            self.set_cpuset(cgroup, cpus)
        w.admit_job("/" + cgroup.strip("/"))

    # --- RDT ------------------------------------------------------------------
    def _mem(self):
        return self.machine.memory_model()

    def rdt_info(self) -> RdtLimits:
        i = self._mem().resctrl.info
        return RdtLimits(i.cbm_len, tuple(i.domains), i.num_closids, i.min_cbm_bits,
                         i.mba_min_bandwidth if i.has_mba else 0, i.mba_bandwidth_gran)

    def _schemata(self, l3, mb) -> str:
        rc = self._mem().resctrl
        doms = rc.info.domains
        lines = []
        if l3 is not None:
            vals = l3 if isinstance(l3, dict) else dict.fromkeys(doms, l3)
            lines.append("L3:" + ";".join(f"{d}={int(v):x}" for d, v in sorted(vals.items())))
        if mb is not None and rc.info.has_mba:
            vals = mb if isinstance(mb, dict) else dict.fromkeys(doms, mb)
            lines.append("MB:" + ";".join(f"{d}={int(v)}" for d, v in sorted(vals.items())))
        return "\n".join(lines)

    def rdt_create_class(self, name: str, l3_cbm, mb_percent=100, exclusive: bool = False) -> None:
        mem = self._mem()
        rc = mem.resctrl
        try:
            rc.mkdir(name)
        except OSError as err:
            raise RdtError(err.errno, getattr(err, "status", str(err))) from None
        try:
            rc.write_schemata(name, self._schemata(l3_cbm, mb_percent))
            if exclusive:
                rc.write_mode(name, "exclusive")
        except OSError as err:
            rc.rmdir(name)
            raise RdtError(err.errno, getattr(err, "status", str(err))) from None
        mem.changed()

    def rdt_update_class(self, name: str, l3_cbm=None, mb_percent=None) -> None:
        mem = self._mem()
        text = self._schemata(l3_cbm, mb_percent)
        if text:
            try:
                mem.resctrl.write_schemata(name, text)
            except OSError as err:
                raise RdtError(err.errno, getattr(err, "status", str(err))) from None
            mem.changed()

    def rdt_remove_class(self, name: str) -> None:
        mem = self._mem()
        try:
            mem.resctrl.rmdir(name)
        except OSError as err:
            raise RdtError(err.errno, getattr(err, "status", str(err))) from None
        mem.changed()

    def rdt_assign(self, cgroup: str, name: str) -> None:
        try:
            self._mem().assign(self._group(cgroup), name)
        except OSError as err:
            raise RdtError(err.errno, getattr(err, "status", str(err))) from None

    def rdt_class_of(self, cgroup: str) -> str:
        return self._mem().class_of(self._group(cgroup))

    def rdt_mon(self, name: str) -> dict[int, dict[str, int]]:
        mem = self._mem()
        return {int(k[len("mon_L3_"):]): v for k, v in mem.resctrl.mon_data(name).items()}

    def perf_counts(self, cgroup: str) -> PerfCounts:
        tg = self._group(cgroup)
        mem = self.machine.memory
        if mem is None or tg not in mem.cgroups:
            # no memory profile: no memory stalls, IPC = IPC alone (CPI 1)
            self.machine.sync()
            cycles = float(_hier_usage(tg))
            return PerfCounts(cycles, cycles, 0.0, cycles)
        c = mem.counters(tg)
        return PerfCounts(c.instructions, c.cycles, c.stall_cycles, c.alone_cycles,
                          c.llc_refs, c.llc_misses)

    def _group(self, cgroup: str):
        try:
            return self.machine.groups["/" + cgroup.strip("/")]
        except KeyError:
            raise ValueError(f"no cgroup {cgroup}; the scenario has: "
                             f"{', '.join(self.functions())}") from None


class _BandwidthTrace:
    """One traced cgroup, on sim/bandwidth.py's hooks filtered to the
    group's own cfs_rqs and pool: every borrow (``assign_observers``) is
    passed on with the time the cfs_rq spent throttled since its previous
    borrow (``unthrottle_observers``: the throttled time exactly as
    unthrottle_cfs_rq adds it to throttled_time), and every expiry of the
    group's period timer (``period_observers``) closes a period.

    A period is reported right after the timer's callback (an event at the
    same instant), so that a cpu.max the controller writes there does not
    re-enter the bandwidth code in the middle of the refill.  The timer
    stops after a period in which nothing borrowed and restarts in phase at
    the next borrow: the periods it slept through are not reported (the
    kernel does not count them either), and the period that ends at its
    first expiry after the restart is one period long; its usage is the
    group's since the last reported period (idle but for runs on the 1 ms a
    cfs_rq keeps)."""

    def __init__(self, machine, tg, observer):
        self.machine, self.tg, self.observer = machine, tg, observer
        self.engine = machine.engine
        self.cfs_b = tg.cfs_bandwidth
        self.cfs_rqs = set(tg.cfs_rq)
        self.throttled_ns = dict.fromkeys(tg.cfs_rq, 0)   # since each one's last borrow
        self.throttled_in_period = False
        bw = machine.policy.bandwidth
        bw.assign_observers.append(self._assigned)
        bw.throttle_observers.append(self._throttled)
        bw.unthrottle_observers.append(self._unthrottled)
        bw.period_observers.append(self._period)
        machine.sync()
        self.last_usage = _hier_usage(tg)
        self.last_boundary = self.engine.now
        self.next_expiry = self.cfs_b.expires if self.cfs_b.period_active else None
        self.first = True

    def _assigned(self, cfs_rq, amount, now) -> None:
        if cfs_rq not in self.cfs_rqs:
            return
        throttled_ns = self.throttled_ns[cfs_rq]
        self.throttled_ns[cfs_rq] = 0
        exec_ns = _se_exec(cfs_rq.se, now)
        group_ns = sum(_se_exec(c.se, now) for c in self.tg.cfs_rq)
        self.observer.runtime_assigned(cfs_rq.cpu, now, exec_ns, throttled_ns, group_ns)

    def _throttled(self, cfs_rq, now) -> None:
        if cfs_rq in self.cfs_rqs:
            self.throttled_in_period = True

    def _unthrottled(self, cfs_rq, now, throttled_ns) -> None:
        if cfs_rq in self.cfs_rqs:
            self.throttled_ns[cfs_rq] += throttled_ns

    def _period(self, cfs_b, now, overrun, used, throttled) -> None:
        if cfs_b is not self.cfs_b:
            return
        # a timer that ran since the last report ends a period that began
        # there (a cpu.max period change takes effect one period late, as
        # in the kernel); a restarted one was forwarded by the period in force
        length = now - self.last_boundary if now == self.next_expiry else cfs_b.period
        self.next_expiry = cfs_b.expires
        throttled = throttled or self.throttled_in_period
        self.throttled_in_period = False
        self.engine.call_at(now, self._report, length, throttled)

    def _report(self, length: int, throttled: bool) -> None:
        now = self.engine.now
        self.machine.sync()
        usage = _hier_usage(self.tg)
        if not self.first:
            self.observer.period_elapsed(now, length, usage - self.last_usage, throttled)
        self.first = False          # the period under way at registration is partial
        self.last_usage, self.last_boundary = usage, now


def _se_exec(se, now: int) -> int:
    """CPU time of a group entity, the running one charged up to now
    (update_curr charges the levels bottom-up, so at a borrow ours may lag)."""
    if se.cfs_rq.curr is se:
        return se.sum_exec_runtime + max(0, now - se.exec_start)
    return se.sum_exec_runtime


def _hier_usage(tg) -> int:
    return tg.usage_ns + sum(_hier_usage(c) for c in tg.children)


def drive(controller, host: SimHost, engine) -> None:
    """start() at t = 0, then step() every interval_s, on the simulation clock."""
    interval = s_to_ns(controller.interval_s)

    def start():
        controller.start(host)
        engine.call_later(interval, step)

    def step():
        controller.step(host)
        engine.call_later(interval, step)

    engine.call_at(0, start)
