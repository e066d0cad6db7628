"""``RealHost``: the ``Host`` protocol (backends/host.py) over the kernel's
cgroup files, so a controller written against ``SimHost`` runs unchanged on
the machine itself.

Cgroups are scenario paths (``/faas.slice/func-3``); ``RealHost`` maps them
into its ``colosim-<run>`` tree through :class:`CgroupFS`.  The clock is
CLOCK_MONOTONIC since the host object was created (or :meth:`reset_clock`).
Requests complete in whatever runs the load (the load generator of issue 7,
later); until then they are pushed with :meth:`push_completed`.

``set_rt_policy`` calls ``sched_setscheduler`` on every thread present in
the cgroup at the time of the call (not its children, not threads created
later: a worker that forks a thread per request must inherit the policy from
its parent thread, which it does because sched_setscheduler's policy is
inherited on clone unless SCHED_RESET_ON_FORK is set).  On a kernel with RT
group scheduling (v1 ``cpu.rt_runtime_us`` present), an RT thread may only
join a cgroup that has RT runtime, so the first promotion under a parent
splits that parent's RT runtime equally among its children (the run's top
cgroup gets the root's unallocated runtime).  Each function then has an RT
budget of (its share) per ``cpu.rt_period_us`` per CPU, a stricter cap than
the simulator's global 95 % RT throttling.

Admission (``hold_jobs``, ``pending_jobs``, ``admit_job``) and
``perf_counts`` act on the run's jobs (workload=noisy_jobs,
backends/real/jobs.py, given with :meth:`use_jobs`); for other workloads
they raise as SimHost's do.

The ``rdt_*`` methods go through one RDT sidecar (backends/real/rdt.py),
started on first use with the run's prefix (``colosim-<run>-``) and closed
with its classes removed by :meth:`close`.  Without resctrl every ``rdt_*``
raises RdtError(ENODEV) with what the sidecar says is missing.
``rdt_update_class("")`` writes the root group's schemata (system/default,
as on SimHost); the sidecar saves what it found and restores it when the
run closes (or at ``colosim cleanup`` after a crash).
"""
from __future__ import annotations

import errno
import os
import threading
import time
from typing import Callable

import numpy as np

from pathlib import Path

from backends.host import (NO_ADMISSION, Completed, CpuStat, PendingJob, PerfCounts, RdtError,
                           RdtLimits, checked_cpuset, cores_of, trace_demand)
from backends.real.cgroupfs import CgroupError, CgroupFS, format_cpulist, parse_cpulist
from backends.real.jobs import JobGate
from backends.real.perf import PerfUnavailable
from backends.real.rdt import RdtSidecar
from sim.topology import cpu_sets_by

_POLICIES = {"rr": os.SCHED_RR, "normal": os.SCHED_OTHER}
SYSFS_CPU = Path("/sys/devices/system/cpu")


class RealHost:
    def __init__(self, cg: CgroupFS, functions: list[str], trace=None,
                 parent_cgroup: str = "", create: bool = True,
                 rdt_sidecar: Callable[..., RdtSidecar] | None = None):
        """``rdt_sidecar(prefix=, pids_of=)`` makes the RDT sidecar (default
        :class:`RdtSidecar`, looked up when the host is made, so tests can
        substitute one running against an emulated resctrl)."""
        self.cg = cg
        self._functions = ["/" + CgroupFS.norm(f) for f in functions]
        self._trace = trace
        p = parent_cgroup.strip("/")
        self._parent = "/" + p if p else ""
        self._done: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()
        self._make_rdt = rdt_sidecar or RdtSidecar
        self._rdt: RdtSidecar | None = None
        self._rdt_missing: RdtError | None = None
        self._jobs: JobGate | None = None
        if create:
            for f in self._functions:
                cg.create(f)
        self._t0 = time.monotonic_ns()

    def reset_clock(self) -> None:
        self._t0 = time.monotonic_ns()

    # --- reads --------------------------------------------------------------
    def now_ns(self) -> int:
        return time.monotonic_ns() - self._t0

    def functions(self) -> list[str]:
        return list(self._functions)

    def function_demand(self) -> dict[str, float]:
        return trace_demand(self._trace, self._parent)

    def cpu_usage_ns(self, cgroup: str) -> int:
        return self.cg.usage_ns(self._known(cgroup))

    def cpu_stat(self, cgroup: str) -> CpuStat:
        return self.cg.cpu_stat(self._known(cgroup))

    def push_completed(self, cgroup: str, latency_s: float, end_s: float) -> None:
        """Record one finished request (thread-safe; the load generator calls it)."""
        with self._lock:
            self._done.append(("/" + CgroupFS.norm(cgroup), float(latency_s), float(end_s)))

    def completed(self) -> Completed:
        with self._lock:
            rows, self._done = self._done, []
        return Completed(np.array([r[0] for r in rows], dtype=object),
                         np.array([r[1] for r in rows], dtype=np.float64),
                         np.array([r[2] for r in rows], dtype=np.float64))

    def snapshot(self) -> list[dict]:
        """One row per function cgroup: the counters an interval sampler
        differences into intervals.parquet (usage, throttling, cpu.max)."""
        t = self.now_ns()
        rows = []
        for f in self._functions:
            st = self.cg.cpu_stat(f)
            quota, period, burst = self.cg.cpu_max(f)
            rows.append({"t_ns": t, "cgroup": f, "usage_ns": self.cg.usage_ns(f),
                         "nr_periods": st.nr_periods, "nr_throttled": st.nr_throttled,
                         "throttled_usec": st.throttled_usec, "quota_us": quota,
                         "period_us": period, "burst_us": burst})
        return rows

    # --- levers -------------------------------------------------------------
    def set_cpu_max(self, cgroup: str, quota_us: int | None, period_us: int,
                    burst_us: int = 0) -> None:
        self.cg.set_cpu_max(self._known(cgroup), quota_us, period_us, burst_us)

    def set_rt_policy(self, cgroup: str, policy: str, rt_priority: int = 50) -> None:
        if policy not in _POLICIES:
            raise ValueError(f"policy {policy!r}: use one of {', '.join(_POLICIES)}")
        cgroup = self._known(cgroup)
        if policy == "rr":
            if not 1 <= rt_priority <= 99:
                raise ValueError(f"rt_priority {rt_priority}: allowed 1..99")
            self.ensure_rt_runtime(cgroup)
            param = os.sched_param(rt_priority)
        else:
            param = os.sched_param(0)
        for tid in self.cg.threads(cgroup):
            try:
                os.sched_setscheduler(tid, _POLICIES[policy], param)
            except ProcessLookupError:
                continue   # exited since the cgroup was read
            except OSError as e:
                raise CgroupError(f"sched_setscheduler({tid}, {policy}) in {cgroup}: "
                                  f"{e.strerror}") from e

    def ensure_rt_runtime(self, cgroup: str) -> None:
        """Give ``cgroup`` (and its ancestors in the run) RT runtime where RT
        group scheduling is on and they have none, so RT threads may join
        it (the split described in the module docstring)."""
        if self.cg.layout.version("cpu") != 1:
            return
        root = self.cg.controllers["cpu"].path
        if not (root / "cpu.rt_runtime_us").exists():
            return   # no RT group scheduling: nothing to allocate
        rel = CgroupFS.norm(cgroup)
        chain = [""] + ["/".join(rel.split("/")[:i + 1]) for i in range(len(rel.split("/")))]
        parent = root
        for sub in chain:
            d = self.cg.dir("cpu", sub)
            if int((d / "cpu.rt_runtime_us").read_text()) == 0:
                siblings = [c for c in parent.iterdir() if c.is_dir()]
                if parent == root:
                    taken = sum(int((c / "cpu.rt_runtime_us").read_text()) for c in siblings
                                if c != d)
                    share = int((root / "cpu.rt_runtime_us").read_text()) - taken
                    self.cg._write(d / "cpu.rt_runtime_us", str(max(share, 0)))
                else:
                    share = int((parent / "cpu.rt_runtime_us").read_text()) // len(siblings)
                    for c in siblings:   # all inside our tree
                        if int((c / "cpu.rt_runtime_us").read_text()) == 0:
                            self.cg._write(c / "cpu.rt_runtime_us", str(share))
            parent = d

    # --- topology and placement --------------------------------------------
    def run_cpus(self) -> frozenset[int]:
        """The CPUs the run's top cgroup may use (its effective cpuset; the
        CPUs this process may run on where no cpuset file says)."""
        return self.cpus_of("")

    def cpus_of(self, cgroup: str) -> frozenset[int]:
        """The CPUs a cgroup of the run may use (as run_cpus)."""
        d = self.cg.dir("cpuset", cgroup)
        for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
            text = CgroupFS.read_or(d / name, "").strip()
            if text:
                return frozenset(parse_cpulist(text))
        return frozenset(os.sched_getaffinity(0))

    def cores_by_socket(self, sysfs: Path = SYSFS_CPU) -> dict[int, list[tuple[int, ...]]]:
        """The run's CPUs grouped by sysfs topology (physical_package_id,
        core_id): each core as its hardware threads."""
        def topo(cpu: int, name: str) -> int:
            return int((sysfs / f"cpu{cpu}" / "topology" / name).read_text())
        return cores_of((topo(c, "physical_package_id"), topo(c, "core_id"), c)
                        for c in sorted(self.run_cpus()))

    def cpu_sets(self, level: str, sysfs: Path = SYSFS_CPU) -> list[frozenset[int]]:
        """The run's CPUs grouped by NUMA node (``level`` "node": the cpuN/nodeM
        link) or by LLC ("llc": cache/index3/id), in id order, as
        sim/topology.py's Topology.cpu_sets; a CPU sysfs gives neither is
        in node / LLC 0."""
        def key(cpu: int) -> int:
            d = sysfs / f"cpu{cpu}"
            if level == "node":
                nodes = [int(n.name[4:]) for n in d.glob("node[0-9]*")]
                return min(nodes, default=0)
            return int(CgroupFS.read_or(d / "cache" / "index3" / "id", "0").strip() or 0)
        return cpu_sets_by(self.run_cpus(), key)

    def set_cpuset(self, cgroup: str, cpus) -> None:
        """cpuset.cpus: the kernel moves the cgroup's live threads off CPUs
        outside the set at once; None gives back every CPU of the run."""
        c = self._known(cgroup)
        have = self.run_cpus()
        allowed = checked_cpuset(cgroup, cpus, have)
        self.cg.set_cpuset(c, format_cpulist(have if allowed is None else allowed))

    def _known(self, cgroup: str) -> str:
        c = "/" + CgroupFS.norm(cgroup)
        if c not in self._functions and not self.cg.dir("cpu", c).is_dir():
            raise ValueError(f"no cgroup {cgroup}; the scenario has: "
                             f"{', '.join(self._functions)}")
        return c

    # --- admission (workload=noisy_jobs: backends/real/jobs.py) -------------
    def use_jobs(self, gate: JobGate) -> None:
        """The run's jobs: what hold_jobs, pending_jobs, admit_job and
        perf_counts act on."""
        self._jobs = gate

    def _gate(self) -> JobGate:
        if self._jobs is None:
            raise ValueError(NO_ADMISSION)
        return self._jobs

    def hold_jobs(self) -> None:
        self._gate().hold()

    def pending_jobs(self) -> list[PendingJob]:
        return self._gate().pending()

    def admit_job(self, cgroup: str, cpus=None) -> None:
        gate = self._gate()
        c = self._known(cgroup)
        if cpus is not None:
            self.set_cpuset(c, cpus)
        gate.admit(c)

    def perf_counts(self, cgroup: str) -> PerfCounts:
        """The job's counts from the perf stat its worker runs under
        (backends/real/jobs.py); PerfUnavailable naming what perf could not
        count."""
        if self._jobs is None:
            raise PerfUnavailable("perf_counts on backend=real counts the jobs of "
                                  "workload=noisy_jobs (each under its own perf stat)")
        return self._jobs.perf_counts(self._known(cgroup))

    # --- RDT (the sidecar) --------------------------------------------------
    def rdt(self) -> RdtSidecar:
        """The run's sidecar, started on first use; RdtError when RDT is
        unavailable.  Every rdt_* calls it before anything else, so without
        resctrl they all fail with what is missing, not with their own checks."""
        if self._rdt_missing is not None:
            raise RdtError(self._rdt_missing.errno, self._rdt_missing.strerror)
        if self._rdt is None:
            sc = self._make_rdt(prefix=f"{self.cg.name}-", pids_of=self.cg.pids)
            try:
                sc.rdt_info()
            except RdtError as e:
                sc.close()
                if e.errno == errno.ENODEV:   # resctrl will not appear during the run
                    self._rdt_missing = e
                raise
            self._rdt = sc
        return self._rdt

    def rdt_info(self) -> RdtLimits:
        return self.rdt().rdt_info()

    def rdt_create_class(self, name: str, l3_cbm: int | dict[int, int],
                         mb_percent: int | dict[int, int] = 100, exclusive: bool = False) -> None:
        self.rdt().rdt_create_class(name, l3_cbm, mb_percent, exclusive)

    def rdt_update_class(self, name: str, l3_cbm: int | dict[int, int] | None = None,
                         mb_percent: int | dict[int, int] | None = None) -> None:
        # "" is the root group (system/default): the sidecar restores it at close
        self.rdt().rdt_update_class(name, l3_cbm, mb_percent)

    def rdt_remove_class(self, name: str) -> None:
        self.rdt().rdt_remove_class(name)

    def rdt_assign(self, cgroup: str, name: str) -> None:
        sc = self.rdt()
        sc.rdt_assign(self._known(cgroup), name)

    def rdt_class_of(self, cgroup: str) -> str:
        sc = self.rdt()
        return sc.rdt_class_of(self._known(cgroup))

    def rdt_mon(self, name: str) -> dict[int, dict[str, int]]:
        return self.rdt().rdt_mon(name)

    def close(self) -> None:
        """Remove the run's resctrl classes (their tasks go back to the root
        group) and its cgroups, killing what still runs in them."""
        rdt, self._rdt = self._rdt, None
        try:
            if rdt is not None:
                rdt.close(cleanup=True)
        finally:
            self.cg.remove()
