"""``pingpong``: the simulated twin of the context-switch microbenchmark
(calibration/bench/ctx_switch.py, lmbench lat_ctx and Li, Ding & Shen 2007).

Two threads A and B pass a token.  Each, on receiving it, runs ``hop_ns`` of
CPU (on the real host: the pipe write and read and one pass over its own
``ws_bytes`` working set), wakes its partner and blocks, so on one CPU
every hop ends in exactly one switch.  The partners sit in cgroups
``levels`` hierarchy levels apart by ``sim.machine.levels_walked``'s rule:
0 is one cgroup, 2 siblings, 2d cousins d levels below their common
ancestor.  ``busy_cgroups`` more cgroups each hold a CPU hog at the lowest
weight (cpu.shares 2) on the pair's CPU, so the run queue is longer while
the pair still runs at once on each wake-up.  With ``migrate`` the pair
moves to the other of ``cpus`` every round trip, as the benchmark's
sched_setaffinity does.  ``partners: 1`` is the benchmark's baseline: one
thread doing both hops of a round trip with no switch.

The workload records when each round trip ends (``round_ends``), the raw
material of the benchmark's timed batches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from sim.config import MAX_COUNT, MISSING, tunable
from sim.task import BURST_BLOCK
from sim.workloads.base import Workload, WorkloadConfig

MIN_SHARES = 2
ROOT = "pingpong"


def partner_paths(levels: int) -> tuple[str, str]:
    """Cgroups of A and B that are ``levels`` switch levels apart."""
    if levels < 0 or levels % 2:
        raise ValueError(f"pingpong levels must be an even number >= 0, got {levels}")
    if levels == 0:
        return ROOT, ROOT
    depth = levels // 2
    a = "/".join(f"a{i}" for i in range(1, depth + 1))
    b = "/".join(f"b{i}" for i in range(1, depth + 1))
    return f"{ROOT}/{a}", f"{ROOT}/{b}"


@dataclass
class PingPongConfig(WorkloadConfig):
    """Written by calibration/simbench.py (there is no option file)."""
    hop_ns: int = tunable(MISSING, range=(1, None))
    ws_bytes: int = tunable(0, range=(0, None))
    cpus: Optional[List[int]] = None    # null: the last CPU
    migrate: bool = False
    partners: int = tunable(2, choices=(1, 2))
    levels: int = tunable(0, range=(0, MAX_COUNT))   # even
    busy_cgroups: int = tunable(0, range=(0, MAX_COUNT))


class PingPongWorkload(Workload):
    CONFIG = PingPongConfig

    def __init__(self, cfg: PingPongConfig, machine, recorder):
        super().__init__(cfg, machine, recorder)
        self.hop_ns = int(cfg.hop_ns)
        if self.hop_ns <= 0:
            raise ValueError("pingpong hop_ns must be > 0")
        ws = int(cfg.ws_bytes)
        self.cpus = [int(c) for c in cfg.cpus or [machine.topology.nr_cpus - 1]]
        self.migrate = bool(cfg.migrate)
        if self.migrate and len(self.cpus) != 2:
            raise ValueError("pingpong migrate needs two cpus")
        self.where = 0
        pin = frozenset([self.cpus[0]])
        partners = int(cfg.partners)
        if partners not in (1, 2):
            raise ValueError("pingpong partners must be 1 or 2")
        paths = partner_paths(int(cfg.levels))[:partners]
        groups = {}
        for path in dict.fromkeys(paths):
            groups[path] = machine.create_group(path)
        self.tasks = [machine.new_task(f"{path}/{name}", groups[path], 0, self.hop_ns, ws, self)
                      for path, name in zip(paths, "AB")]
        for t in self.tasks:
            t.cpus_allowed = pin
        self.hogs = []
        for i in range(int(cfg.busy_cgroups)):
            tg = machine.create_group(f"busy{i}", MIN_SHARES)
            hog = machine.new_task(f"busy{i}/hog", tg, 0, 1 << 62, 0, self)
            hog.cpus_allowed = pin
            self.hogs.append(hog)
        self.started = [False] * len(self.tasks)
        self.hops = 0
        self.round_ends: list[int] = []

    def start(self):
        cpu = self.cpus[0]
        for hog in self.hogs:
            self.machine.wake_up_new_task(hog, cpu)
        self.started[0] = True
        self.machine.wake_up_new_task(self.tasks[0], cpu)

    def burst_done(self, t):
        if t in self.hogs:
            raise RuntimeError("a pingpong hog finished its endless burst")
        t.remaining = self.hop_ns
        self.hops += 1
        if self.hops % 2 == 0:
            self.round_ends.append(self.engine.now)
            if self.migrate:
                self.where ^= 1
                pin = frozenset([self.cpus[self.where]])
                for p in self.tasks:
                    p.cpus_allowed = pin
        if len(self.tasks) == 1:
            return 0
        other = 1 - self.tasks.index(t)
        partner = self.tasks[other]
        if not self.started[other]:
            self.started[other] = True
            self.machine.wake_up_new_task(partner, self.cpus[self.where])
        else:
            self.machine.wake_up(partner)
        return BURST_BLOCK


WORKLOAD = PingPongWorkload
