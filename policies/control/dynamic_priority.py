"""Dynamic priority: the noisy-neighbor thesis's RDT isolation policy
("Mitigating the Noisy Neighbor Problem: Improving Isolation of Containers on
Multi-Tenant Intel Cloud Servers", §3.4, Alg. 3).

Every ``interval_s`` (T_tick):

1. relinquish the cores and RDT classes of finished jobs;
2. allocation queue (Q_alloc, FIFO, blocking): the head is either a *probe*
   of a priority job that finished its warm-up, or the allocation a probe
   found.  A head that does not fit triggers a consolidation (repacking the
   socket's classes to the low ways; the memory model charges every moved
   class the refetch of the lines it leaves behind, sim/memory/progress.py);
   if it still does not fit the queue blocks until the next tick.  Probes
   are buffered: one probe at a time per socket, with the free run it
   sweeps in reserved for it (``SocketRdt.hold``), so its sweep is
   uninterrupted: an allocation found meanwhile goes outside that run, and
   one that only a consolidation could fit waits for the probe to end
   (consolidating would move the probing class out of its run);
3. admission, strict FIFO without backfilling: a priority job goes to the
   socket (that fits its cores) with the most uncommitted RDT resources
   (free ways, then free MB percent) and stays in system/default until its
   probe; a batch job goes to the socket with the least memory-stall load
   (stall cycles of its running jobs over the last tick; ``batch_placement:
   committed_cores`` uses least_loaded's metric instead, an ablation).

**Probe**: after ``warmup_s`` in system/default, the job gets a class and
the sweep runs over (ways, MB) ways-major between (``probe_min_ways``,
``probe_min_mb``) and (the free run of ways, the unbooked MB) in steps of 1
way and ``probe_mb_step``, each point for ``max(probe_s / points,
interval_s)`` (``probe_s``: the thesis's "maximum probing duration").  A
point passes when the job's IPC relative to running alone
(PerfCounts.alone_cycles / cycles: the "90% of the best possible IPC" of
§4.5.1) reaches ``target``.  ``probe_order``: ``ascending`` (Alg. 1, the
default: the thesis's evaluation ran ascending, §7.1) stops at the first
passing point, else returns the largest; ``descending`` (Alg. 2) starts at
the largest and returns the last passing point before the first failing one.
``greedy_allocation`` (§4.5.1) runs the whole sweep and returns the passing
point that fits the socket best (``_greedy_choice``).  After ``cooldown_s`` the allocation is made with
``find_best_fit_bitmask`` (the thesis's findBestFitBitmaskForWays, exactly),
MB booked additively per socket (at most 100%), and kept for the job's life
(plus ``buffer_ways``).

Ways: the root group (system/default, where batch jobs run) keeps
``reserved_ways`` top ways always, plus every free way contiguous with them.
No mask is shorter than resctrl's ``min_cbm_bits``: the reserved ways and
``probe_min_ways`` are raised to it.
Priority classes are disjoint on their socket by this controller's
accounting (``SocketRdt.allocated``), not by resctrl: on the other socket
each class shares the reserved way with the root, so the classes are
resctrl ``shareable`` (docs/memory.md, "Controllers").

**Balancing and swap** (``rebalance``, on as in every run the thesis
presents, §5.1).  The thesis names the option (Alg. 3 lines 32-33 and
37-38: a rebalance timer of T_warmup after each batch admission; §3.4 "the
scheduler will continuously rebalance the load"; §5.1 "consolidate and
move batch containers to enable admissions or probings") but gives no
rule, so this is our reading, built from its own placement heuristic:

- *rebalance*, due ``warmup_s`` after a batch admission: of the batch jobs
  on the socket with the most memory-stall load (stall cycles over the last
  tick), move the one that leaves the two sockets' loads closest, if it fits
  on the least loaded socket and the move narrows the gap; after a move,
  check again once the moved job has warmed up (``warmup_s`` later);
- *swap*: when the head of the job queue fits no socket, move one batch job
  to another socket if that frees enough cores for the head (the smallest
  such job, then the least loaded one), trying the sockets in the head's
  order of preference; the head is then admitted there.

Priority jobs never move (their classes and probes are per socket).  A move
re-pins the running job's threads (``Host.set_cpuset``), and the memory
model has it fetch its whole occupancy on the new socket
(``MemorySystem.moved``).  Swaps for probings are not done: a probe needs
ways, which moving a batch job (it runs in system/default) does not free.
"""
from __future__ import annotations

from dataclasses import dataclass

from policies.control import ControlConfig, Controller
from policies.control.least_loaded import CoreAccountant
from sim.sched_class import tunable


def find_best_fit_bitmask(target_ways: int, allocated: int, total_ways: int) -> int:
    """findBestFitBitmaskForWays (the thesis's Appendix A.2, Listing A.4), exactly:
    for every free start bit, count the free ways from it upwards; keep the
    start whose run is >= target and *strictly* shorter than the best so far
    (scanning inside runs too); the mask is ``target_ways`` bits from there.
    Raises ValueError with the Go code's messages."""
    if target_ways <= 0:
        raise ValueError(f"invalid target ways: {target_ways} (must be > 0)")
    if target_ways > total_ways:
        raise ValueError(f"requested {target_ways} ways but only {total_ways} available")
    best_start, best_length = -1, 0
    for start in range(total_ways):
        if allocated & (1 << start):
            continue
        length = 0
        i = start
        while i < total_ways and not allocated & (1 << i):
            length += 1
            i += 1
        if length >= target_ways and (best_start == -1 or length < best_length):
            best_start, best_length = start, length
    if best_start == -1:
        raise ValueError(f"no contiguous {target_ways} cache ways available")
    return ((1 << target_ways) - 1) << best_start


def longest_free_run(allocated: int, total_ways: int) -> tuple[int, int]:
    """(start, length) of the longest run of free ways (lowest first)."""
    best = (0, 0)
    i = 0
    while i < total_ways:
        if allocated & (1 << i):
            i += 1
            continue
        j = i
        while j < total_ways and not allocated & (1 << j):
            j += 1
        if j - i > best[1]:
            best = (i, j - i)
        i = j
    return best


@dataclass
class DynamicPriorityConfig(ControlConfig):
    # T_tick; also the shortest probe segment
    interval_s: float = tunable(0.1, range=(0.001, None))
    # IPC relative to running alone ("90% of the best possible IPC")
    target: float = tunable(0.9, range=(0.0, 1.0))
    # in system/default before a probe (>= 3 s)
    warmup_s: float = tunable(3.0, range=(0.0, None))
    cooldown_s: float = tunable(1.0, range=(0.0, None))     # after a probe (>= 1 s)
    probe_s: float = tunable(12.0, range=(0.0, None))       # maximum probing duration (12 s)
    # the sweep starts at 1 way / 10% MB (the thesis's)
    probe_min_ways: int = tunable(1, range=(1, None))
    probe_min_mb: int = tunable(10, range=(10, 100))
    probe_mb_step: int = tunable(10, range=(10, 100))
    # the top ways system/default always keeps (1 of 12)
    reserved_ways: int = tunable(1, range=(1, None))
    buffer_ways: int = tunable(0, range=(0, None))          # extra ways on top of the probe
    # the thesis's reverse_probe_order / greedy_allocation (§4.5.1), off in its
    # evaluation
    probe_order: str = tunable("ascending", choices=("ascending", "descending"))
    greedy_allocation: bool = tunable(False)
    # cores: distinct free physical cores; socket: the whole socket
    cpuset: str = tunable("cores", choices=("cores", "socket"))
    # the thesis's "balancing and swap option" (Alg. 3 lines 32-33, 37-38;
    # §5.1: on in every presented run); our reading of it, module docstring
    rebalance: bool = tunable(True)
    # a batch job's socket: stall_load, the least memory-stall load (§3.4,
    # "sums the stalled cycles caused by the memory subsystem"); committed_cores,
    # the fewest committed cores (least_loaded's Alg. 4 metric; an ablation,
    # docs/memory.md "Noisy-scenario ablations")
    batch_placement: str = tunable("stall_load", choices=("stall_load", "committed_cores"))


@dataclass
class _Job:
    cgroup: str
    socket: int
    threads: int
    priority: bool
    admitted_ns: int
    state: str = "batch"       # batch | warmup | queued | probing | cooldown | allocated
    cls: str | None = None
    mask: int = 0
    mb: int = 0
    probe_points: list | None = None
    probe_i: int = 0
    probe_rel: list | None = None   # (point, relative IPC) measured so far
    run_start: int = 0         # lowest way of the free run the probe grows in
    seg_len: int = 0
    seg_end: int = 0
    seg_start: tuple | None = None
    result: tuple | None = None
    ready_ns: int = 0


class SocketRdt:
    """The thesis's SocketState: allocated ways (bitmask) and booked MB."""

    def __init__(self, ways: int, reserved: int):
        self.ways = ways
        self.reserved = ((1 << ways) - 1) & ~((1 << (ways - reserved)) - 1)
        self.allocated = self.reserved      # the root's top ways are never handed out
        self.mb_used = 0
        self.probing: str | None = None     # the job whose probe holds the free ways
        self.hold = 0                       # the run that probe grows in: no one else's

    @property
    def allocatable(self) -> int:
        return self.ways - bin(self.reserved).count("1")

    def free_ways(self) -> int:
        return self.ways - bin(self.allocated).count("1")

    def root_mask(self) -> int:
        """The reserved top ways plus the free ways contiguous below them."""
        mask = self.reserved
        i = self.ways - bin(self.reserved).count("1") - 1
        while i >= 0 and not self.allocated & (1 << i):
            mask |= 1 << i
            i -= 1
        return mask


class DynamicPriority(Controller):
    uses_rdt = True
    uses_perf_counts = True
    reads_completed = True

    def start(self, host) -> None:
        info = host.rdt_info()
        self.info = info
        self.acct = CoreAccountant(host)
        # no mask may be shorter than resctrl's min_cbm_bits (1 on the
        # thesis's Xeons; 2 on some parts): not the root's, not a probe's
        least = max(1, int(info.min_cbm_bits))
        self.probe_min_ways = max(int(self.cfg.probe_min_ways), least)
        self.sock = {s: SocketRdt(info.ways, max(int(self.cfg.reserved_ways), least))
                     for s in self.acct.cores}
        self.domain = {s: d for s, d in zip(sorted(self.acct.cores), info.domains)}
        self.jobs: dict[str, _Job] = {}
        self.q_alloc: list[str] = []
        self.n_classes = 0
        self.stall_seen: dict[str, float] = {}
        self.load = dict.fromkeys(self.acct.cores, 0.0)
        self.allocations: list[tuple[int, str, int, int, int]] = []   # (t, cgroup, socket, mask, mb)
        self.consolidations = 0
        self.closid_waits = 0
        self.max_ways_seen = 0
        self.tick_ns = int(self.interval_s * 1e9)
        self.job_load: dict[str, float] = {}       # stall cycles of each job over the last tick
        self.rebalance_due_ns: int | None = None
        self.rebalance_moves = 0
        self.swaps = 0
        self._write_roots(host)
        host.hold_jobs()

    # ---- RDT helpers --------------------------------------------------------------------
    def _write_roots(self, host) -> None:
        host.rdt_update_class("", l3_cbm={self.domain[s]: st.root_mask()
                                          for s, st in self.sock.items()})

    def _class_mask(self, job: _Job) -> dict:
        # the job's socket gets its mask; the other domains get the reserved ways
        # (a CBM may not be empty), which are shared with the root
        return {self.domain[s]: (job.mask if s == job.socket else st.reserved)
                for s, st in self.sock.items()}

    def _set_class(self, host, job: _Job, mask: int, mb: int) -> None:
        st = self.sock[job.socket]
        old = job.mask
        st.allocated = (st.allocated & ~old) | mask
        job.mask, job.mb = mask, mb
        mbs = {self.domain[s]: (mb if s == job.socket else 100) for s in self.sock}
        if job.cls is None:
            self.n_classes += 1
            job.cls = f"prio-{self.n_classes}"
            self._write_roots(host)               # shrink the root first
            # other domains: the reserved ways overlap the root, so not exclusive there;
            # the mode is per group, so the socket's exclusivity is kept by the accountant
            host.rdt_create_class(job.cls, self._class_mask(job), mbs)
            host.rdt_assign(job.cgroup, job.cls)
        else:
            if mask & ~old:
                self._write_roots(host)           # shrink before growing
            host.rdt_update_class(job.cls, self._class_mask(job), mbs)
            if old & ~mask:
                self._write_roots(host)
        self.max_ways_seen = max(self.max_ways_seen, bin(st.allocated & ~st.reserved).count("1"))

    def _drop_class(self, host, job: _Job) -> None:
        if job.cls is None:
            return
        st = self.sock[job.socket]
        st.allocated &= ~job.mask
        if job.state == "allocated":
            st.mb_used -= job.mb
        host.rdt_remove_class(job.cls)
        job.cls, job.mask = None, 0
        self._write_roots(host)

    def _consolidate(self, host, socket: int) -> None:
        """Repack the socket's classes to the low ways, in their current order."""
        st = self.sock[socket]
        owned = sorted((j for j in self.jobs.values() if j.socket == socket and j.cls),
                       key=lambda j: j.mask)
        base = 0
        st.allocated = st.reserved
        for j in owned:
            n = bin(j.mask).count("1")
            j_mask = ((1 << n) - 1) << base
            base += n
            st.allocated |= j_mask
            j.mask = j_mask
            host.rdt_update_class(j.cls, self._class_mask(j))
        self._write_roots(host)
        self.consolidations += 1

    # ---- the tick -----------------------------------------------------------------------
    def step(self, host) -> None:
        now = host.now_ns()
        for cgroup in host.completed().cgroup:
            job = self.jobs.pop(str(cgroup), None)
            if job is None:
                continue
            self.acct.release(job.cgroup)
            st = self.sock[job.socket]
            if st.probing == job.cgroup:
                st.probing, st.hold = None, 0
            if job.cgroup in self.q_alloc:
                self.q_alloc.remove(job.cgroup)
            self._drop_class(host, job)
        self._update_load(host)
        for job in self.jobs.values():
            if job.state == "warmup" and now >= job.ready_ns:
                job.state = "queued"
                self.q_alloc.append(job.cgroup)
            elif job.state == "probing":
                self._probe_step(host, job, now)
        self._serve_allocations(host, now)
        self._admit(host, now)
        if self.rebalance_due_ns is not None and now >= self.rebalance_due_ns:
            self._rebalance(host, now)

    def _update_load(self, host) -> None:
        self.load = dict.fromkeys(self.sock, 0.0)
        self.job_load = {}
        for job in self.jobs.values():
            stall = host.perf_counts(job.cgroup).stall_cycles
            self.job_load[job.cgroup] = stall - self.stall_seen.get(job.cgroup, 0.0)
            self.load[job.socket] += self.job_load[job.cgroup]
            self.stall_seen[job.cgroup] = stall

    def _closid_free(self) -> bool:
        live = sum(1 for j in self.jobs.values() if j.cls is not None)
        return live < self.info.num_closids - 1          # the root holds CLOSID 0

    def _serve_allocations(self, host, now: int) -> None:
        while self.q_alloc:
            job = self.jobs[self.q_alloc[0]]
            st = self.sock[job.socket]
            if job.state in ("queued", "cooldown") and not self._closid_free():
                self.closid_waits += 1
                break                                      # "Out of CLOSIDs": wait
            if job.state == "queued":                  # a probe request
                if st.probing is not None:
                    break                              # buffered: one sweep per socket
                _, run = longest_free_run(st.allocated, st.ways)
                if run < self.probe_min_ways and st.free_ways() >= self.probe_min_ways:
                    self._consolidate(host, job.socket)
                    _, run = longest_free_run(st.allocated, st.ways)
                if run < self.probe_min_ways or 100 - st.mb_used < int(
                        self.cfg.probe_min_mb):
                    break
                self.q_alloc.pop(0)
                self._start_probe(host, job, run, now)
            elif job.state == "cooldown":              # a probe result
                if now < job.ready_ns:
                    break
                ways, mb = job.result
                ways = min(ways + int(self.cfg.buffer_ways), st.allocatable)
                mb = min(mb, 100 - st.mb_used)
                if mb < int(self.cfg.probe_min_mb):
                    break
                try:
                    # not in the run a probe on this socket is still growing in
                    mask = find_best_fit_bitmask(ways, st.allocated | st.hold, st.ways)
                except ValueError:
                    # consolidating would move the probing class out of its run:
                    # the result waits for the probe to end
                    if st.free_ways() < ways or st.probing is not None:
                        break
                    self._consolidate(host, job.socket)
                    try:
                        mask = find_best_fit_bitmask(ways, st.allocated, st.ways)
                    except ValueError:
                        break
                self.q_alloc.pop(0)
                self._set_class(host, job, mask, mb)
                st.mb_used += mb
                job.state = "allocated"
                self.allocations.append((now, job.cgroup, job.socket, mask, mb))
            else:
                self.q_alloc.pop(0)

    def _start_probe(self, host, job: _Job, run: int, now: int) -> None:
        st = self.sock[job.socket]
        lo = self.probe_min_ways
        mb_lo, mb_step = int(self.cfg.probe_min_mb), int(self.cfg.probe_mb_step)
        mb_hi = 100 - st.mb_used
        mbs = list(range(mb_lo, mb_hi + 1, mb_step)) or [mb_hi]
        points = [(w, b) for w in range(lo, run + 1) for b in mbs]
        job.probe_points = points[::-1] if self.cfg.probe_order == "descending" else points
        job.probe_rel = []
        seg = max(int(float(self.cfg.probe_s) * 1e9 / len(job.probe_points)), self.tick_ns)
        job.seg_len = seg
        job.probe_i = 0
        st.probing = job.cgroup
        job.state = "probing"
        # hold the whole free run: the sweep grows inside it
        start, _ = longest_free_run(st.allocated, st.ways)
        job.run_start = start
        st.hold = ((1 << run) - 1) << start
        self._probe_apply(host, job, now)

    def _probe_apply(self, host, job: _Job, now: int) -> None:
        w, mb = job.probe_points[job.probe_i]
        self._set_class(host, job, ((1 << w) - 1) << job.run_start, mb)
        c = host.perf_counts(job.cgroup)
        job.seg_start = (c.cycles, c.alone_cycles)
        job.seg_end = now + job.seg_len

    def _probe_step(self, host, job: _Job, now: int) -> None:
        if now < job.seg_end:
            return
        c = host.perf_counts(job.cgroup)
        cyc = c.cycles - job.seg_start[0]
        rel = (c.alone_cycles - job.seg_start[1]) / cyc if cyc > 0 else 0.0
        job.probe_rel.append((job.probe_points[job.probe_i], rel))
        result = self._probe_result(job, last=job.probe_i + 1 >= len(job.probe_points))
        if result is not None:
            job.result = result
            self._finish_probe(host, job, now)
            return
        job.probe_i += 1
        self._probe_apply(host, job, now)

    def _probe_result(self, job: _Job, last: bool) -> tuple | None:
        """The allocation the sweep returns once it has one, else None.
        Ascending (Alg. 1, §3.2.2): the first point at the target, or the
        largest.  Descending (Alg. 2, §3.2.2): the point before the first
        one below the target (the largest if that is the first), or the
        smallest.  Greedy (§4.5.1): the whole sweep, then the point at the
        target that fits the socket best (``_greedy_choice``)."""
        target = float(self.cfg.target) - 1e-9
        point, rel = job.probe_rel[-1]
        if self.cfg.greedy_allocation:
            return self._greedy_choice(job) if last else None
        if self.cfg.probe_order == "descending":
            if rel < target:
                return job.probe_rel[-2][0] if len(job.probe_rel) > 1 else point
            return point if last else None
        return point if rel >= target or last else None

    def _greedy_choice(self, job: _Job) -> tuple:
        """§4.5.1: "choose the one which fits better into the current
        allocation, e.g. if most of the memory bandwidth is already allocated
        ... compensate for this with more last-level cache ways".  The thesis
        gives no formula; here the fit of (ways, MB) is the larger of its
        shares of the ways the probe holds and of the socket's unbooked MB
        (the scarcer resource decides), smallest wins, then fewer ways and
        less MB.  With no point at the target, the largest (as Alg. 1)."""
        st = self.sock[job.socket]
        target = float(self.cfg.target) - 1e-9
        ways_free = max(w for w, _ in job.probe_points)
        mb_free = 100 - st.mb_used
        good = [p for p, rel in job.probe_rel if rel >= target and p[1] <= mb_free]
        if not good:
            return max(job.probe_points)
        return min(good, key=lambda p: (max(p[0] / ways_free, p[1] / mb_free), p))

    def _finish_probe(self, host, job: _Job, now: int) -> None:
        st = self.sock[job.socket]
        st.probing, st.hold = None, 0
        self._drop_class(host, job)                    # back to system/default meanwhile
        job.state = "cooldown"
        job.ready_ns = now + int(float(self.cfg.cooldown_s) * 1e9)
        self.q_alloc.append(job.cgroup)

    def _admit(self, host, now: int) -> None:
        for p in host.pending_jobs():                  # strict FIFO, no backfilling
            fits = [s for s in self._placement_order(p) if self.acct.fits(p.threads, s)]
            socket = fits[0] if fits else self._swap_for(host, p)
            if socket is None:
                break
            host.admit_job(p.cgroup, self.acct.pin(p.cgroup, socket, p.threads,
                                                   self.cfg.cpuset))
            job = _Job(p.cgroup, socket, p.threads, p.priority, now)
            if p.priority:
                job.state = "warmup"
                job.ready_ns = now + int(float(self.cfg.warmup_s) * 1e9)
            elif self.cfg.rebalance:
                self._rebalance_after_warmup(now)
            self.jobs[p.cgroup] = job

    def _placement_order(self, p) -> list[int]:
        """Sockets best first: a priority job's with the most uncommitted RDT
        resources (free ways, then free MB), a batch job's with the least
        memory-stall load (``batch_placement: committed_cores``: the fewest
        committed cores); fewer committed cores break ties."""
        if p.priority:
            return sorted(self.sock, key=lambda s: (-self.sock[s].free_ways(),
                                                    self.sock[s].mb_used,
                                                    self.acct.committed(s), s))
        if self.cfg.batch_placement == "committed_cores":
            return sorted(self.sock, key=lambda s: (self.acct.committed(s), s))
        return sorted(self.sock, key=lambda s: (self.load[s], self.acct.committed(s), s))

    # ---- balancing and swap (our reading; module docstring) ------------------------------
    def _rebalance_after_warmup(self, now: int) -> None:
        self.rebalance_due_ns = now + int(float(self.cfg.warmup_s) * 1e9)

    def _batch_on(self, socket: int) -> list[_Job]:
        return [j for j in self.jobs.values() if j.socket == socket and not j.priority]

    def _move(self, host, job: _Job, socket: int) -> None:
        """Re-pin a running batch job to free cores of ``socket`` (it runs in
        system/default, so no RDT class moves with it)."""
        self.acct.release(job.cgroup)
        host.set_cpuset(job.cgroup, self.acct.pin(job.cgroup, socket, job.threads,
                                                  self.cfg.cpuset))
        job.socket = socket

    def _rebalance(self, host, now: int) -> None:
        """Move the one batch job whose last-tick stall load best evens out
        the most and the least loaded sockets, if it fits on the latter and
        the move narrows the gap; after a move, check again once the moved
        job has warmed up on its new socket."""
        self.rebalance_due_ns = None
        hi = max(self.sock, key=lambda s: (self.load[s], s))
        lo = min(self.sock, key=lambda s: (self.load[s], s))
        gap = self.load[hi] - self.load[lo]
        best, best_gap = None, gap
        for job in self._batch_on(hi):
            load = self.job_load.get(job.cgroup, 0.0)
            after = abs(gap - 2 * load)
            if load > 0 and after < best_gap and self.acct.fits(job.threads, lo):
                best, best_gap = job, after
        if best is not None:
            self._move(host, best, lo)
            self.rebalance_moves += 1
            self._rebalance_after_warmup(now)

    def _swap_for(self, host, p) -> int | None:
        """The head job fits no socket: if moving one batch job to another
        socket frees enough cores for it, move the smallest such job (then
        the one with the least stall load) and return the socket it freed,
        in the head's order of preference; None if no single move does."""
        if not self.cfg.rebalance:
            return None
        for socket in self._placement_order(p):
            need = p.threads - len(self.acct.free[socket])
            moves = [(job.threads, self.job_load.get(job.cgroup, 0.0), job.cgroup, job, other)
                     for job in self._batch_on(socket) if job.threads >= need
                     for other in self._placement_order(job)
                     if other != socket and self.acct.fits(job.threads, other)]
            if moves:
                _, _, _, job, other = min(moves, key=lambda m: m[:3])
                self._move(host, job, other)
                self.swaps += 1
                return socket
        return None

    def summary(self) -> dict:
        return {"dynamic_priority_allocations": len(self.allocations),
                "dynamic_priority_consolidations": self.consolidations,
                "dynamic_priority_closid_waits": self.closid_waits,
                "dynamic_priority_max_ways": self.max_ways_seen,
                "dynamic_priority_rebalance_moves": self.rebalance_moves,
                "dynamic_priority_swaps": self.swaps}


CONTROLLER = DynamicPriority
CONFIG = DynamicPriorityConfig
