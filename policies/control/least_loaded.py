"""Least-loaded placement: the noisy-neighbor thesis's baseline
("Mitigating the Noisy Neighbor Problem: Improving Isolation of Containers on
Multi-Tenant Intel Cloud Servers", §3.5, Alg. 4).

Every ``interval_s`` (T_tick): relinquish the cores of finished jobs; then,
while jobs wait, take the head J of the FIFO queue, and among the sockets
where J fits (enough uncommitted physical cores) pick the one with the fewest
committed cores (ties: the lower socket id); admit J there on distinct free
physical cores (one hardware thread each, the thesis's "no explicit
hyperthreading"), or stop and wait for the next tick if no socket fits.
Strict FIFO: no backfilling, no distinction between priority and batch jobs,
no RDT partitioning (everything stays in system/default).

Needs a workload with admission control (Host.hold_jobs: noisy_jobs).
"""
from __future__ import annotations

from dataclasses import dataclass

from policies.control import ControlConfig, Controller
from sim.sched_class import tunable


@dataclass
class LeastLoadedConfig(ControlConfig):
    cpuset: str = tunable("cores", choices=("cores", "socket"))  # distinct cores | whole socket


class CoreAccountant:
    """Committed physical cores per socket, with ownership (the thesis's
    accountant 𝒜, cores only)."""

    def __init__(self, host):
        self.cores = host.cores_by_socket()            # socket -> [(cpu, sibling...), ...]
        self.free = {s: list(range(len(c))) for s, c in self.cores.items()}
        self.jobs: dict[str, tuple[int, list[int]]] = {}   # cgroup -> (socket, core indices)

    def committed(self, socket: int) -> int:
        return len(self.cores[socket]) - len(self.free[socket])

    def fits(self, threads: int, socket: int) -> bool:
        return len(self.free[socket]) >= threads

    def take(self, cgroup: str, socket: int, threads: int) -> set[int]:
        idx = self.free[socket][:threads]
        self.free[socket] = self.free[socket][threads:]
        self.jobs[cgroup] = (socket, idx)
        return {self.cores[socket][i][0] for i in idx}

    def release(self, cgroup: str) -> int | None:
        got = self.jobs.pop(cgroup, None)
        if got is None:
            return None
        socket, idx = got
        self.free[socket] = sorted(self.free[socket] + idx)
        return socket

    def socket_cpus(self, socket: int) -> set[int]:
        return {cpu for core in self.cores[socket] for cpu in core}

    def pin(self, cgroup: str, socket: int, threads: int, cpuset: str) -> set[int]:
        """Commit ``threads`` cores of ``socket`` to ``cgroup`` and return its
        cpuset: those cores (``cpuset: cores``) or the whole socket
        (``socket``)."""
        cpus = self.take(cgroup, socket, threads)
        return self.socket_cpus(socket) if cpuset == "socket" else cpus


def least_committed(acct: CoreAccountant, threads: int) -> int | None:
    """Alg. 4's choice: the socket with the fewest committed cores that fits."""
    best = None
    for s in sorted(acct.cores):
        if acct.fits(threads, s) and (best is None or acct.committed(s) < acct.committed(best)):
            best = s
    return best


class LeastLoaded(Controller):
    reads_completed = True

    def start(self, host) -> None:
        self.acct = CoreAccountant(host)
        self.admitted = 0
        self.admissions: list[tuple[int, str, int]] = []    # (t_ns, cgroup, socket)
        host.hold_jobs()

    def step(self, host) -> None:
        for cgroup in host.completed().cgroup:
            self.acct.release(str(cgroup))
        for job in host.pending_jobs():                     # FIFO; stop at the first misfit
            socket = least_committed(self.acct, job.threads)
            if socket is None:
                break
            cpus = self.acct.pin(job.cgroup, socket, job.threads, self.cfg.cpuset)
            host.admit_job(job.cgroup, cpus)
            self.admitted += 1
            self.admissions.append((host.now_ns(), job.cgroup, socket))

    def summary(self) -> dict:
        return {"least_loaded_admitted": self.admitted}


CONTROLLER = LeastLoaded
CONFIG = LeastLoadedConfig
