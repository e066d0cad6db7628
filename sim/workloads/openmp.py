"""``workload.openmp``: a model-serving container's OpenMP runtime, the
barriers of its parallel regions and how its threads wait at them (the
``bentoml`` request path's PyTorch stage, sim/workloads/request_path.py).

PyTorch's CPU operators run on OpenMP: ``at::parallel_for`` opens one
``#pragma omp parallel`` region per operator large enough to split
(aten/src/ATen/ParallelOpenMP.h ``invoke_parallel``; below
``at::internal::GRAIN_SIZE`` elements an operator runs on the caller alone),
and every region uses all the team's threads (the same file: PyTorch does not
pass ``num_threads`` "due to bugs in GOMP's thread pool").  So an inference
is a chain of regions, each ending at a barrier where the team's threads wait
for the slowest, and PyTorch's Linux builds use GCC's libgomp, whose threads
wait by spinning first and sleeping only after a spin budget:

- libgomp/config/linux/wait.h ``do_wait``: ``do_spin`` polls the barrier's
  flag ``gomp_spin_count_var`` times, then ``futex_wait``;
  ``gomp_throttled_spin_count_var`` replaces it while the process has more
  libgomp threads than CPUs available (``gomp_managed_threads >
  gomp_available_cpus``);
- libgomp/env.c ``initialize_env``: with neither ``GOMP_SPINCOUNT`` nor
  ``OMP_WAIT_POLICY`` set, 300,000 spins ("3 msec blocking", by the file's
  "rough estimation of 100000 spins per msec"), throttled 100; ACTIVE: 30
  billion (5 min), throttled 1,000; PASSIVE: 0 (the libgomp manual,
  GOMP_SPINCOUNT, says the same).  The 300,000 default dates from GCC 4.6
  (PR libgomp/43706); before, 20 million (200 ms);
- libgomp/config/linux/proc.c ``gomp_init_num_threads``: the CPUs available
  are those of the affinity mask (``pthread_getaffinity_np``), not a cgroup
  quota: a container with a CPU limit still counts the host's CPUs.

The team (``Team``): the master thread (the caller, thread 0) and
``nthreads - 1`` pooled workers.  An inference of demand D runs ``regions``
regions of D / regions each, split evenly over the threads.  A thread that
finishes its part waits at the region's barrier; the last to arrive releases
it.  Waiting is libgomp's: spin (the thread keeps its CPU; its CPU time is
counted as ``spin``) for at most the spin budget, then block (futex_wait: a
switch away, and a wake-up and switch back when released: futex_wake wakes
every sleeper of the barrier).  Between regions the workers wait at the pool's
dock (libgomp/team.c ``gomp_thread_start``: ``gomp_team_barrier_wait_final``,
then ``gomp_simple_barrier_wait (&pool->threads_dock)``) until the master
starts the next region (``gomp_team_start``), with a fresh spin budget; if the
master is on its CPU when the barrier is released it starts the next region
at once (PyTorch's code between two operators is not modelled), otherwise the
region starts when the master next runs.  After the last region the master
returns to its caller and the workers spin at the dock, then sleep, until the
next inference.

``enabled: false`` (the default) keeps the path's single fork-join per
batch, whose threads block as soon as their part is done; ``true`` runs the
team above.  A team of one thread has no barrier to wait at: its inference
is one burst.

Not modelled: the serial code between operators, operators below the grain
size (run by the master alone), nested parallelism, libgomp's task queues, and
the cache effect of a spinning hyperthread on its sibling beyond the host's
SMT throughput.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.config import MAX_COUNT, tunable
from sim.engine import NSEC_PER_SEC
from sim.task import BURST_BLOCK
from sim.workloads.hashd import SYSCALL_NS

WAIT_POLICIES = ("default", "active", "passive")   # OMP_WAIT_POLICY: unset | ACTIVE | PASSIVE
# libgomp/env.c initialize_env (module docstring): gomp_spin_count_var and
# gomp_throttled_spin_count_var by OMP_WAIT_POLICY
SPIN_COUNT = {"default": 300_000, "active": 30_000_000_000, "passive": 0}
THROTTLED_SPIN_COUNT = {"default": 100, "active": 1_000, "passive": 0}
# libgomp/env.c's own estimate, "100000 spins per msec"
NS_PER_SPIN = 10.0
# Parallel regions per inference: torchvision's ResNet-50 (torchvision/
# models/resnet.py: a stem of conv, batch norm, ReLU and max-pool; 16
# Bottleneck blocks of three conv + batch norm pairs, two ReLUs, the residual
# add and its ReLU; four downsample conv + batch norm pairs; average pool,
# flatten and the final linear layer) is about 175 operators, each one region
# at an ImageNet input (every activation is far above GRAIN_SIZE).  The
# paper's function is "a PyTorch image classification model" [§3.2] without
# a name: ResNet-50, the common reference, is an assumption.
REGIONS = 175

# what a team thread is doing
WORK, SPIN, DOCK, SLEEP, LAUNCH, RETURN = range(6)


@dataclass
class OpenMPConfig:
    """``workload.openmp`` (scenarios/conf/workload/openmp/): the PyTorch
    stage's OpenMP team; null keys take libgomp's defaults (above)."""
    enabled: bool = False
    # parallel regions per inference; null: REGIONS
    regions: Optional[int] = tunable(None, range=(1, MAX_COUNT))
    # OMP_WAIT_POLICY: default (unset) | active | passive
    wait_policy: str = tunable("default", choices=WAIT_POLICIES)
    # GOMP_SPINCOUNT; null: libgomp's default for the wait policy
    spin_count: Optional[int] = tunable(None, range=(0, None))
    # how long one spin takes; null: libgomp's estimate (10 ns)
    ns_per_spin: Optional[float] = tunable(None, above=0)


def spin_budget_ns(cfg: OpenMPConfig, nthreads: int, available_cpus: int) -> int:
    """How long a waiting thread of a team of ``nthreads`` spins before it
    sleeps, in a process that may use ``available_cpus`` CPUs."""
    count = SPIN_COUNT[cfg.wait_policy] if cfg.spin_count is None else int(cfg.spin_count)
    if nthreads > available_cpus:
        count = min(count, THROTTLED_SPIN_COUNT[cfg.wait_policy])
    ns = NS_PER_SPIN if cfg.ns_per_spin is None else float(cfg.ns_per_spin)
    return int(round(count * ns))


def summary_columns(stats: dict, capacity_ns: float) -> dict:
    """A run's summary columns of the teams' counters over its window
    (``stats``: summed Team.stats; none for a path without teams) on
    ``capacity_ns`` of CPU time (window x CPUs): ``omp_spin_s`` and
    ``omp_spin_frac`` (CPU time spent spinning, in seconds and as a share
    of the capacity), ``omp_futex_waits`` (sleeps at a barrier or the
    dock), ``omp_regions`` and ``omp_inferences``."""
    if not stats:
        return {}
    return {"omp_spin_s": stats["spin_ns"] / NSEC_PER_SEC,
            "omp_spin_frac": stats["spin_ns"] / capacity_ns if capacity_ns else 0.0,
            "omp_futex_waits": int(stats["futex_waits"]), "omp_regions": int(stats["regions"]),
            "omp_inferences": int(stats["inferences"])}


class Team:
    """One OpenMP team of ``nthreads`` threads in cgroup ``tg`` (the module
    docstring has the model).  ``run(demand_ns, hint)`` starts an inference;
    ``on_done()`` is called when the master has returned from it.

    Counters: ``spin_ns`` (CPU time the threads spent spinning),
    ``spins`` (waits that began with a spin), ``futex_waits`` (times a
    thread slept at a barrier or the dock), ``regions_run`` and
    ``inferences``."""

    def __init__(self, machine, cfg: OpenMPConfig, nthreads: int, name: str, tg, nice: int,
                 ws_bytes: int, on_done):
        self.machine = machine
        self.n = nthreads
        # one thread waits for nobody: its inference is a single burst
        self.regions = (REGIONS if cfg.regions is None else int(cfg.regions)) \
            if nthreads > 1 else 1
        cpus = len(tg.cpus_allowed) if tg.cpus_allowed else machine.topology.nr_cpus
        self.budget_ns = spin_budget_ns(cfg, nthreads, cpus)
        self.name = name
        self.tg = tg
        self.nice = nice
        self.ws_bytes = ws_bytes
        self.on_done = on_done
        self.threads: list = []
        self.index: dict = {}         # task -> its thread number
        self.state: list[int] = []
        self.spin_from: list[int] = []  # a spinning thread's CPU time when it began
        self.k = 0                    # the region running
        self.arrived = 0              # threads at its barrier
        self.share = 1                # each thread's part of a region, ns
        self.first = 1                # the master's part of the first region
        self.spin_ns = 0
        self.spins = 0
        self.futex_waits = 0
        self.regions_run = 0
        self.inferences = 0

    def stats(self) -> dict:
        return {"spin_ns": self.spin_ns, "spins": self.spins, "futex_waits": self.futex_waits,
                "regions": self.regions_run, "inferences": self.inferences}

    def _cpu_ns(self, t) -> int:
        """The thread's CPU time so far (sum_exec_runtime, brought up to now
        while it runs)."""
        se = t.se
        if t.on_cpu:
            return se.sum_exec_runtime + max(0, self.machine.engine.now - se.exec_start)
        return se.sum_exec_runtime

    def _end_spin(self, i: int) -> None:
        self.spin_ns += self._cpu_ns(self.threads[i]) - self.spin_from[i]

    def run(self, demand_ns: int, hint: int) -> None:
        """Start an inference of ``demand_ns``: the master is woken (created,
        the first time) and starts the first region when it runs."""
        self.inferences += 1
        self.k = 0
        q, extra = divmod(demand_ns, self.regions * self.n)
        self.share = max(1, q)
        self.first = self.share + extra   # the remainder goes to the master's first part
        m = self.machine
        if not self.threads:
            self._add_thread(SYSCALL_NS, LAUNCH)
            m.wake_up_new_task(self.threads[0], hint)
            return
        master = self.threads[0]
        master.remaining = SYSCALL_NS
        self.state[0] = LAUNCH
        m.wake_up(master)

    def _add_thread(self, burst_ns: int, state: int):
        t = self.machine.new_task(self.name, self.tg, self.nice, burst_ns, self.ws_bytes, self)
        self.index[t] = len(self.threads)
        self.threads.append(t)
        self.state.append(state)
        self.spin_from.append(0)
        return t

    def _launch(self) -> None:
        """The master starts region ``k`` (gomp_team_start): every worker
        leaves the dock, the first time they are created."""
        if len(self.threads) < self.n:
            hint = self.threads[0].cpu
            for _ in range(1, self.n):
                t = self._add_thread(self.share, WORK)
                self.machine.wake_up_new_task(t, hint)
                hint = t.cpu
        else:
            for j in range(1, self.n):
                self._resume(j)
        self._region_started()

    def _region_started(self) -> None:
        self.arrived = 0
        self.regions_run += 1

    def _resume(self, j: int) -> None:
        """Thread ``j`` (waiting at the dock or a barrier, spinning or
        asleep) takes its part of the region that starts."""
        t = self.threads[j]
        st = self.state[j]
        self.state[j] = WORK
        if st == SLEEP:
            t.remaining = self.share
            self.machine.wake_up(t)
        elif st == DOCK or st == SPIN:
            self._end_spin(j)
            self.machine.replace_burst(t, self.share)
        else:
            raise RuntimeError(f"{self.name}: thread {j} resumed while in state {st}")

    def _wait(self, i: int, state: int):
        """Thread ``i`` waits (at a barrier or the dock): it spins for the
        budget, or sleeps at once if there is none."""
        t = self.threads[i]
        if self.budget_ns == 0:
            self.futex_waits += 1
            self.state[i] = SLEEP
            return BURST_BLOCK
        self._spin(i, state)
        t.remaining = self.budget_ns
        return 0

    def _spin(self, i: int, state: int) -> None:
        self.state[i] = state
        self.spins += 1
        self.spin_from[i] = self._cpu_ns(self.threads[i])

    def _to_dock(self, j: int) -> None:
        """Worker ``j``, waiting at the barrier just released, goes on to the
        dock: a spinner starts a fresh spin there; a sleeper is woken by
        futex_wake and spins there (with no spin budget it would block again
        at once: it is left asleep)."""
        t = self.threads[j]
        st = self.state[j]
        if st == SPIN:
            self._end_spin(j)
            self._spin(j, DOCK)
            self.machine.replace_burst(t, self.budget_ns)
        elif st == SLEEP:
            if self.budget_ns:
                self._spin(j, DOCK)
                t.remaining = self.budget_ns
                self.machine.wake_up(t)
        else:
            raise RuntimeError(f"{self.name}: thread {j} docked while in state {st}")

    def _release(self, i: int):
        """Thread ``i`` arrived last at region ``k``'s barrier."""
        self.k += 1
        t = self.threads[i]
        last_region = self.k == self.regions
        if not last_region and (i == 0 or (self.state[0] == SPIN and self.threads[0].on_cpu)):
            # the master sees the release on its CPU and starts the next region
            for j in range(self.n):
                if j != i:
                    self._resume(j)
            self._region_started()
            t.remaining = self.share
            return 0
        # the workers go to the dock; the master must run to go on
        for j in range(1, self.n):
            if j != i:
                self._to_dock(j)
        if i == 0:                    # (only at the last barrier: see above)
            return self._returned()
        self._master_goes_on(last_region)
        return self._wait(i, DOCK)

    def _master_goes_on(self, last_region: bool) -> None:
        """The master, waiting at the barrier just released, runs a moment
        to go on: to start the next region, or to return to its caller."""
        master = self.threads[0]
        st = self.state[0]
        self.state[0] = RETURN if last_region else LAUNCH
        if st == SPIN:
            self._end_spin(0)
            self.machine.replace_burst(master, SYSCALL_NS)
        elif st == SLEEP:
            master.remaining = SYSCALL_NS
            self.machine.wake_up(master)
        else:
            raise RuntimeError(f"{self.name}: master released while in state {st}")

    def _returned(self):
        self.state[0] = SLEEP
        self.on_done()
        return BURST_BLOCK

    def burst_done(self, t):
        i = self.index[t]
        st = self.state[i]
        if st == WORK:
            self.arrived += 1
            if self.arrived == self.n:
                return self._release(i)
            return self._wait(i, SPIN)
        if st == SPIN or st == DOCK:
            # the spin budget ran out: futex_wait
            self._end_spin(i)
            self.futex_waits += 1
            self.state[i] = SLEEP
            return BURST_BLOCK
        if st == LAUNCH:
            self.state[0] = WORK
            t.remaining = self.first if self.k == 0 else self.share
            self._launch()
            return 0
        if st == RETURN:
            return self._returned()
        raise RuntimeError(f"{self.name}: thread {i} ended a burst while asleep")
