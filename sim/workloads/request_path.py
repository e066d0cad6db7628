"""The path a request takes through its function's pod
(``workload.request_path`` of the function workloads: poisson, trace
replays such as azure2021, resctl).

``direct`` (the default): the request's threads are forked in the function
cgroup ``parent_cgroup/<function>`` at arrival and the request ends when
the last exits (sim.workloads.common.ForkJoin).  Nothing here runs.

``knative``: the function is a Knative pod (the LAGS paper, Fig. 1):
the pod cgroup ``parent_cgroup/<function>`` holds one
child cgroup per container, ``queue-proxy`` (Knative's sidecar) and
``user-container`` (the function), as the kubelet lays out
``kubepods-burstable.slice/<pod>.slice/<container>.scope``.  Set
``parent_cgroup: kubepods.slice/kubepods-burstable.slice`` for the full
kubepods depth; switches between pods walk the same levels either way.
One request makes three hops, each a wake-up of another thread in its own
cgroup, so each is a context switch:

1. a queue-proxy thread receives the request (``PROXY_IN_US`` of CPU) and
   forwards it to the user container;
2. ``threads_per_request`` user-container threads are forked (the demand
   split evenly, as in ``direct``);
3. when the last of them exits, a queue-proxy thread takes the response
   (``PROXY_OUT_US``) and sends it; the request ends then.

queue-proxy is a Go program: its threads sleep in the netpoller between
requests and are reused (most recently idle first, as Go's idle-M list);
at most ``nr_cpus`` run Go code at once (GOMAXPROCS), so a hop that finds
them all busy waits in the pod's run queue and the next thread to finish
takes it without sleeping.  Container cgroups keep the default weight
(1024): the LAGS evaluation resets every cgroup's weight to it.

Not modelled: the Istio ingress gateway and activator (they ran on other
nodes), the pause container (idle), queue-proxy's timers (metrics,
probes), and network softirq work.

``bentoml``: the Knative pod of ``knative`` whose user container is a
BentoML 1.0 service running a PyTorch model (the LAGS paper's cluster
function: "two thread pools for queuing and batching requests, plus a
separate thread pool for model serving").  queue-proxy's hops are as in
``knative``; between them the request passes four more threads of the user
container, each hand-off a wake-up:

1. an API server thread (``api_workers`` of them: BentoML starts one
   uvicorn worker per CPU) parses the HTTP request and decodes and resizes
   the image (``api_us``) and sends it to the runner;
2. the runner's event loop thread takes it (``batch_us`` per pass) into
   its adaptive-batching dispatcher, which hands the waiting requests (at
   most ``max_batch_size``) to the model as one batch whenever the model is
   free, re-checking every 1 ms while requests wait;
3. the batch's demand (its requests' trace demands summed) runs split over
   ``torch_threads`` threads, the model-serving thread and PyTorch's
   intra-op pool (torch.set_num_threads), a fork-join;
4. the loop thread returns each result to an API server thread, which
   writes the response (``api_out_us``) to queue-proxy.

All these threads are reused.  Null keys take BentoML's defaults
(the constants below cite them); the request's
``threads_per_request`` is not used, PyTorch's threads are the parallelism.
Not modelled: the dispatcher holding requests while the model is free
(BentoML's cork rule does so only while the recent mean wait exceeds the
regressed run time per request, ~ the demand, so only in a pod already
queueing for longer than an inference takes), Python's GIL,
the API server and runner being separate processes (their sockets' wake-ups
are the hand-offs above), and PyTorch's threads spinning before they sleep.

``worker``: the real backend's native worker (backends/workers/funcworker.c)
as it runs on a host: one dispatcher thread per function cgroup blocks on
its pipe, wakes for each request, creates the request's threads (its own
CPU: ``dispatch_us`` per request to read and parse the line, plus
``thread_us`` per thread created) and blocks again; requests arriving while
it works wait in the pipe.  The threads run the demand in the function
cgroup as in ``direct``.  This is the path to compare a simulation with a
``backend=real`` run: each request costs one more wake-up and switch than
``direct``.  Null keys take the calibration profile's
``worker_dispatch_us`` and ``worker_thread_us`` (measured by ``colosim
calibrate``'s dispatch benchmark).  Where the profile also measured the
rest of the worker's own CPU (``set_host_costs``), each request thread
runs ``worker_thread_start_us`` before its share (the request counts as
started when it first runs, a few us before the real worker's clock
starts) and ``worker_thread_exit_us`` after it (the request has ended
then: the real worker reports the end before the thread exits), and all
the worker's costs grow the longer its dispatcher was away from a CPU:
x (1 + factor x (1 - exp(-away / worker_cold_decay_ms))), with
``worker_cold_factor`` for the dispatcher's and
``worker_cold_thread_factor`` for its threads' (away: since the
dispatcher last ran; a request read from a backlog is warm, a new
dispatcher's first is cold).  On a VM that is most of the cost: the same
request costs the worker ~40 us warm and ~150 us after 10 ms away, whether
its CPU was idle or busy meanwhile (calibration/bench/dispatch.py;
docs/calibration-host.md), the caches and TLB the guest's code paths lose
to the hypervisor's other work.  The spinning share itself is timed by the
thread's CPU clock on the real host, so its own slowdown costs no CPU.
Where the profile also measured the
real backend's load generator, the SCHED_FIFO thread that writes each
request to the worker's pipe runs as a task of the host too
(sim/loadgen.py; ``WorkerPath.loadgen``).

``rdhashd``: resctl-demo's rd-hashd, the program the LAGS benchmark ran per
function: a dispatch thread and a pool of reused workers, each request
sleeping three times (sim/workloads/hashd.py has the details and sources).
``dispatch_us`` is the dispatch thread's CPU per event (a request or a
completion; null: the worker path's default).
"""
from __future__ import annotations

from collections import deque
from math import expm1

from sim.config import from_mapping
from sim.engine import NSEC_PER_USEC
from sim.task import BURST_BLOCK, BURST_EXIT
from sim.workloads.common import cgroup_bandwidth, fork_threads
from sim.workloads.hashd import HashdPath
from sim.workloads.openmp import OpenMPConfig, Team
from sim.workloads.pools import PoolsConfig, pool_cpus

DIRECT = "direct"
KNATIVE = "knative"
BENTOML = "bentoml"
WORKER = "worker"
RDHASHD = "rdhashd"
REQUEST_PATHS = (DIRECT, KNATIVE, BENTOML, WORKER, RDHASHD)
# the dispatcher's CPU when neither the workload nor the calibration profile
# gives it: calibration/bench/dispatch.py on the development VM (Xeon, Linux
# 6.18; calibration=this-vm holds the fitted values)
DEFAULT_DISPATCH_US = 10.9
DEFAULT_THREAD_US = 11.3
# the calibration profile's keys for the rest of the worker's own CPU, in
# WorkerPath.set_host_costs's order (calibration/bench/dispatch.py)
WORKER_HOST_COSTS = ("worker_thread_start_us", "worker_thread_exit_us", "worker_cold_factor",
                     "worker_cold_thread_factor", "worker_cold_decay_ms")
QUEUE_PROXY = "queue-proxy"
USER_CONTAINER = "user-container"
API_SERVER = "api-server"
RUNNER = "runner"
TORCH = "torch"

# CPU per request in Knative's queue-proxy, split evenly between the request
# (in) and the response (out).  Platform constants, not fitted to anything.
# The one published measurement of queue-proxy's CPU per request: Red Hat,
# "Scalability and performance of OpenShift Serverless Serving" (OpenShift
# Serverless 1.30 on OCP 4.13, AWS m6 nodes): each data-plane component,
# queue-proxy among them, consumes "up to 1 vCPU ... for handling 2500
# requests per second" depending on the payload size, i.e. <= 400 us per
# request.  An Envoy sidecar (Istio) measured 0.18 vCPU at 1k req/s and
# 0.45 vCPU at 5k req/s, 180-90 us per request (istio/istio.io#15335,
# 2024).  We take 200 us per request: half the OpenShift bound (the paper's
# requests carry small payloads), about the Envoy small-payload figure.
PROXY_IN_US = 100.0
PROXY_OUT_US = 100.0

# bentoml.  BentoML 1.0 (the release current with the paper's Kubernetes 1.23
# setup), src/bentoml/_internal/configuration/default_configuration.yaml:
# runners.batching.max_batch_size 100, max_latency_ms 10000 (BentoML 1.1
# raised max_latency_ms to 60000).
MAX_BATCH_SIZE = 100
MAX_LATENCY_MS = 10_000.0
# CorkDispatcher.tick_interval (src/bentoml/_internal/marshal/dispatcher.py):
# while requests wait for the model the dispatcher re-checks every 1 ms
# (asyncio.sleep(tick_interval)).
TICK_US = 1000.0
# The API server's CPU per request: HTTP parsing and the image's decoding
# and resizing to a PIL image.  Pillow decodes an ImageNet validation JPEG
# in 1.4-2.8 ms on one thread of current server CPUs (360-726 images/s,
# ternaus/imread_benchmark, arXiv:2501.13131); we take 2 ms for decoding,
# resizing and the HTTP request together.  The E5-2430L (2012, 2 GHz) is
# slower than those CPUs, so this is if anything low.
API_US = 2000.0
# The API server's CPU to return the result (a class label as JSON in an
# HTTP response): an assumption, the size of one queue-proxy hop.
API_OUT_US = 100.0
# The runner event loop's CPU per pass (read the request from the API
# server's socket, run the cork check, hand a batch over, write results
# back): an assumption, a few asyncio callbacks of Python.
BATCH_US = 50.0

_IN, _OUT, _API_IN, _API_OUT = 0, 1, 2, 3


def _ns(us: float) -> int:
    return int(round(us * NSEC_PER_USEC))


def check(cfg) -> str:
    """The config's request path (default direct); ValueError if unknown."""
    kind = str(cfg.get("request_path") or DIRECT)
    if kind not in REQUEST_PATHS:
        raise ValueError(f"workload.request_path = {kind!r}: choose from "
                         f"{', '.join(REQUEST_PATHS)}")
    return kind


def build(cfg, workload):
    """The request path of ``workload`` (a ForkJoin): None for direct."""
    kind = check(cfg)
    if kind == KNATIVE:
        return KnativePath(workload, cfg)
    if kind == BENTOML:
        return BentoPath(workload, cfg)
    if kind == RDHASHD:
        per_event = cfg.get("dispatch_us")
        return HashdPath(workload, cfg,
                         DEFAULT_DISPATCH_US if per_event is None else float(per_event))
    if kind == WORKER:
        per_request, per_thread = cfg.get("dispatch_us"), cfg.get("thread_us")
        return WorkerPath(workload,
                          DEFAULT_DISPATCH_US if per_request is None else float(per_request),
                          DEFAULT_THREAD_US if per_thread is None else float(per_thread))
    return None


class Pod:
    __slots__ = ("tg", "user", "limit_mcpu", "request_mcpu", "proxy", "api", "runner")

    def __init__(self, tg, user):
        self.tg = tg                  # the pod cgroup (the function's cgroup)
        self.user = user              # <pod>/user-container
        self.limit_mcpu = None        # its CPU limit and request, if it has them
        self.request_mcpu = None
        self.proxy = None             # queue-proxy's ThreadPool
        self.api = None               # bentoml: the API server's ThreadPool
        self.runner = None            # bentoml: the Runner


class ThreadPool:
    """The threads of one container that serve a request path's hops: they
    sleep between hops and are reused (most recently idle first); at most
    ``cap`` exist, so a hop that finds them all busy waits in ``backlog`` and
    the next thread to finish takes it without sleeping."""

    __slots__ = ("path", "pod", "tg", "name", "cap", "idle", "jobs", "nr_threads", "backlog")

    def __init__(self, path, pod, tg, name: str, cap: int):
        self.path = path
        self.pod = pod
        self.tg = tg
        self.name = name
        self.cap = cap
        self.idle: list = []          # threads asleep (Go's netpoller, an event loop's epoll)
        self.jobs: dict = {}          # thread -> (request, hop) it runs
        self.nr_threads = 0
        self.backlog: deque = deque()  # hops waiting for a thread

    def submit(self, req, hop: int, hint: int) -> int:
        """Wake an idle thread for the hop, start a new one, or queue the
        hop; returns the CPU the thread was placed on (``hint`` if queued)."""
        path = self.path
        m = path.machine
        if self.idle:
            t = self.idle.pop()
            t.request = req
            t.remaining = path.cost_ns[hop]
            self.jobs[t] = (req, hop)
            m.wake_up(t)
            return t.cpu
        if self.nr_threads < self.cap:
            self.nr_threads += 1
            t = m.new_task(f"{req.function}/{self.name}", self.tg, path.wl.nice,
                           path.cost_ns[hop], path.wl.ws_bytes, self, req)
            self.jobs[t] = (req, hop)
            m.wake_up_new_task(t, hint)
            return t.cpu
        self.backlog.append((req, hop))
        return hint

    def burst_done(self, task):
        req, hop = self.jobs.pop(task)
        self.path.hop_done(self.pod, req, hop, task.cpu)
        if self.backlog:
            nxt, nhop = self.backlog.popleft()
            if nxt.start < 0:
                nxt.start = self.path.engine.now
            task.request = nxt
            task.remaining = self.path.cost_ns[nhop]
            self.jobs[task] = (nxt, nhop)
            return 0
        task.request = None
        self.idle.append(task)
        return BURST_BLOCK


class KnativePath:
    """Requests of a ForkJoin workload through queue-proxy and back."""

    def __init__(self, workload, cfg):
        self.wl = workload
        self.machine = workload.machine
        self.engine = workload.machine.engine
        self.cost_ns = {_IN: _ns(PROXY_IN_US), _OUT: _ns(PROXY_OUT_US)}
        self.pods: dict = {}          # pod cgroup -> Pod
        self.by_user: dict = {}       # user-container cgroup -> Pod
        # the CPU count the pod's runtimes size their pools by (sim/workloads/pools.py)
        self.pools = from_mapping(PoolsConfig, cfg.get("pools") or {}, "workload.pools")
        # the function cgroups' own cpu.max, if the workload sets one
        bandwidth = cgroup_bandwidth(cfg)
        self.quota_mcpu = None if bandwidth is None or bandwidth[0] is None else \
            -(-1000 * bandwidth[0] // bandwidth[1])

    def pool_cpus(self, limit_mcpu, request_mcpu, reads_quota: bool) -> int:
        return pool_cpus(self.pools, self.machine.topology.nr_cpus, limit_mcpu, request_mcpu,
                         reads_quota)

    def add_function(self, tg, limit_mcpu: int | None = None,
                     request_mcpu: int | None = None) -> Pod:
        """The containers' cgroups of the pod whose cgroup is ``tg``, whose
        CPU limit (else the workload's own quota, if any) and request (a
        cluster's pod) are given in millicores."""
        m = self.machine
        qp = m.create_group(f"{tg.name}/{QUEUE_PROXY}")
        pod = Pod(tg, m.create_group(f"{tg.name}/{USER_CONTAINER}"))
        if limit_mcpu is None:
            limit_mcpu = self.quota_mcpu
        pod.limit_mcpu, pod.request_mcpu = limit_mcpu, request_mcpu
        # GOMAXPROCS: the Go threads that run at once
        pod.proxy = ThreadPool(self, pod, qp, QUEUE_PROXY,
                               self.pool_cpus(limit_mcpu, request_mcpu, False))
        self.pods[tg] = pod
        self.by_user[pod.user] = pod
        return pod

    def start(self, req, tg, hint: int) -> int:
        """``req`` (arrived, its threads in ``req.pending``) reaches the pod
        ``tg``'s queue-proxy; returns the CPU the queue-proxy thread was
        placed on."""
        return self.pods[tg].proxy.submit(req, _IN, hint)

    def hop_done(self, pod: Pod, req, hop: int, cpu: int) -> None:
        """A pool thread finished ``hop`` of ``req`` on ``cpu``: start the next."""
        if hop == _IN:
            fork_threads(self.machine, req, pod.user, self.wl.nice, self.wl.ws_bytes, self, cpu)
        else:
            req.end = self.engine.now
            self.wl.request_done(req)

    def burst_done(self, task):
        """A user-container thread exits; the last of a request's hands the
        response to queue-proxy."""
        req = task.request
        req.pending -= 1
        if req.pending == 0:
            self.by_user[task.tg].proxy.submit(req, _OUT, task.cpu)
        return BURST_EXIT


class BentoPath(KnativePath):
    """Requests of a ForkJoin workload through queue-proxy, a BentoML API
    server, its runner's batching dispatcher and PyTorch, and back."""

    def __init__(self, workload, cfg):
        super().__init__(workload, cfg)

        def key(name, default):
            value = cfg.get(name)
            value = default if value is None else value
            if value < 0:
                raise ValueError(f"workload.{name} = {value}: must be >= 0")
            return value

        self.cost_ns.update({_API_IN: _ns(key("api_us", API_US)),
                             _API_OUT: _ns(key("api_out_us", API_OUT_US))})
        self.batch_ns = max(1, _ns(key("batch_us", BATCH_US)))
        self.tick_ns = _ns(TICK_US)
        self.max_batch = int(key("max_batch_size", MAX_BATCH_SIZE))
        self.max_latency_ns = _ns(key("max_latency_ms", MAX_LATENCY_MS) * 1000)
        # null: BentoML sizes both from the container's CPUs, per pod (pools.py)
        self.api_workers = cfg.get("api_workers")
        self.torch_threads = cfg.get("torch_threads")
        if self.max_batch < 1 or any(v is not None and v < 1
                                     for v in (self.api_workers, self.torch_threads)):
            raise ValueError("workload.max_batch_size, api_workers and torch_threads "
                             "must be >= 1")
        if self.max_latency_ns <= 0:
            raise ValueError("workload.max_latency_ms must be > 0")
        # the PyTorch stage's OpenMP team (sim/workloads/openmp.py)
        self.openmp = from_mapping(OpenMPConfig, cfg.get("openmp") or {}, "workload.openmp")
        self.teams: list[Team] = []

    def add_function(self, tg, limit_mcpu: int | None = None,
                     request_mcpu: int | None = None) -> Pod:
        pod = super().add_function(tg, limit_mcpu, request_mcpu)
        cpus = self.pool_cpus(pod.limit_mcpu, pod.request_mcpu, True)
        pod.api = ThreadPool(self, pod, pod.user, API_SERVER, int(self.api_workers or cpus))
        pod.runner = Runner(self, pod, int(self.torch_threads or cpus))
        return pod

    def stats(self) -> dict:
        """The OpenMP teams' counters summed (sim/workloads/openmp.py Team)."""
        total = dict.fromkeys(("spin_ns", "spins", "futex_waits", "regions", "inferences"), 0)
        for team in self.teams:
            for k, v in team.stats().items():
                total[k] += v
        return total

    def hop_done(self, pod: Pod, req, hop: int, cpu: int) -> None:
        if hop == _IN:
            pod.api.submit(req, _API_IN, cpu)
        elif hop == _API_IN:
            pod.runner.enqueue(req, cpu)
        elif hop == _API_OUT:
            pod.proxy.submit(req, _OUT, cpu)
        else:
            super().hop_done(pod, req, hop, cpu)


class Runner:
    """A pod's BentoML runner: one worker process (a CPU multi-threading
    runnable gets one), its asyncio event loop thread, and the thread that
    runs the model with PyTorch's intra-op threads.

    The loop thread runs a pass (``batch_us``) whenever something wakes it:
    a request from the API server, the end of a batch, or the dispatcher's
    tick.  A pass returns finished results to the API server, cancels
    requests that waited ``max_latency_ms``, and, if the model is free,
    hands it the waiting requests as one batch (at most ``max_batch_size``);
    while requests still wait it sleeps one tick, else until woken.  What
    arrives while a pass is due or running is handled by it, as an event
    loop finds it on its next poll without sleeping.

    The batch's demand (its requests' demands summed) is split evenly over
    ``torch_threads`` threads, the serving thread and the intra-op pool,
    woken together (the pool is woken by the serving thread in PyTorch: we
    skip that instant); the batch ends when the last finishes.
    """

    def __init__(self, path: BentoPath, pod: Pod, torch_threads: int):
        self.path = path
        self.pod = pod
        self.torch_threads = torch_threads
        self.team: Team | None = None  # the OpenMP team, when the path models one
        self.waiting: deque = deque()  # (enqueued ns, request) corked
        self.loop = None               # the event loop thread
        self.due = False               # a pass is due or running
        self.tick_gen = 0              # the armed tick's; older ticks are stale
        self.batch: list | None = None  # requests the model is running
        self.done: list = []           # finished requests whose results go back
        self.threads: list = []        # the serving thread, then the intra-op threads
        self.running = 0               # threads still on the batch
        self.batches = 0               # handed to the model so far

    def enqueue(self, req, cpu: int) -> None:
        path = self.path
        self.waiting.append((path.engine.now, req))
        if self.loop is None:
            self.due = True
            self.loop = path.machine.new_task(f"{req.function}/{RUNNER}", self.pod.user,
                                              path.wl.nice, path.batch_ns, path.wl.ws_bytes,
                                              self)
            path.machine.wake_up_new_task(self.loop, cpu)
        else:
            self._wake()

    def _wake(self) -> None:
        if not self.due:
            self.due = True
            self.loop.remaining = self.path.batch_ns
            self.path.machine.wake_up(self.loop)

    def _tick(self, gen: int) -> None:
        if gen == self.tick_gen:
            self._wake()

    def burst_done(self, task):
        if task is self.loop:
            return self._pass(task.cpu)
        self.running -= 1
        if self.running == 0:
            self._batch_done()
        return BURST_BLOCK

    def _batch_done(self) -> None:
        """The model has run the batch: the loop returns its results."""
        self.done.extend(self.batch)
        self.batch = None
        self._wake()

    def _pass(self, cpu: int):
        path = self.path
        now = path.engine.now
        api = self.pod.api
        for req in self.done:
            api.submit(req, _API_OUT, cpu)
        self.done.clear()
        # BentoML cancels on its estimate of the wait plus the batch's run
        # time; we cancel on the wait alone (later), sparing the regression
        waiting = self.waiting
        while waiting and now - waiting[0][0] >= path.max_latency_ns:
            req = waiting.popleft()[1]
            req.dropped = True
            api.submit(req, _API_OUT, cpu)
        if self.batch is None and waiting:
            self.batch = [waiting.popleft()[1]
                          for _ in range(min(len(waiting), path.max_batch))]
            self._run_batch(cpu)
        self.due = False
        self.tick_gen += 1
        if waiting:
            path.engine.call_later(path.tick_ns, self._tick, self.tick_gen)
        return BURST_BLOCK

    def _run_batch(self, hint: int) -> None:
        path = self.path
        m = path.machine
        n = self.torch_threads
        demand = sum(r.demand for r in self.batch)
        self.batches += 1
        if path.openmp.enabled:
            if self.team is None:
                self.team = Team(m, path.openmp, n, f"{self.batch[0].function}/{TORCH}",
                                 self.pod.user, path.wl.nice, path.wl.ws_bytes,
                                 self._batch_done)
                path.teams.append(self.team)
            self.team.run(demand, hint)
            return
        share, extra = divmod(demand, n)
        self.running = n
        for j in range(n):
            cost = max(1, share + (extra if j == 0 else 0))
            if j < len(self.threads):
                t = self.threads[j]
                t.remaining = cost
                m.wake_up(t)
            else:
                t = m.new_task(f"{self.batch[0].function}/{TORCH}", self.pod.user,
                               path.wl.nice, cost, path.wl.ws_bytes, self)
                self.threads.append(t)
                m.wake_up_new_task(t, hint)
            hint = t.cpu



class WorkerPath:
    """Requests of a ForkJoin workload through funcworker's dispatcher thread."""

    def __init__(self, workload, dispatch_us: float, thread_us: float):
        for key, value in (("dispatch_us", dispatch_us), ("thread_us", thread_us)):
            if value < 0:
                raise ValueError(f"workload.{key} = {value}: must be >= 0")
        self.wl = workload
        self.machine = workload.machine
        self.engine = workload.machine.engine
        self.dispatch_ns = int(round(dispatch_us * NSEC_PER_USEC))
        self.thread_ns = int(round(thread_us * NSEC_PER_USEC))
        self.dispatcher: dict = {}    # function cgroup -> its dispatcher thread
        self.job: dict = {}           # dispatcher -> request it is dispatching
        self.pipe: dict = {}          # function cgroup -> requests waiting to be read
        # the real backend's load generator (sim/loadgen.py), where modelled:
        # it sends each request to the worker's pipe
        self.loadgen = None
        # the threads' own start-up and exit CPU and the cold factors
        # (set_host_costs; none until the profile gives them)
        self.start_ns = self.exit_ns = 0
        self.cold_factor = self.cold_thread_factor = 0.0
        self.cold_decay_ns = 1.0
        self.cold: dict = {}          # request being read -> its cold fraction
        self.thread_exit: dict = {}   # request -> its threads' exit CPU
        self.exiting: set = set()     # request threads running their exit

    def set_host_costs(self, start_us: float, exit_us: float, cold_factor: float,
                       cold_thread_factor: float, cold_decay_ms: float) -> None:
        """The rest of the worker's own CPU, as the calibration profile
        measured it (module docstring): each request thread's start-up
        before its share and exit after it, and how much more everything
        costs once the worker has been away from the CPU."""
        for key, value in (("worker_thread_start_us", start_us),
                           ("worker_thread_exit_us", exit_us),
                           ("worker_cold_factor", cold_factor),
                           ("worker_cold_thread_factor", cold_thread_factor)):
            if value < 0:
                raise ValueError(f"calibration.{key} = {value}: must be >= 0")
        if cold_decay_ms <= 0:
            raise ValueError(f"calibration.worker_cold_decay_ms = {cold_decay_ms}: must be > 0")
        self.start_ns = start_us * NSEC_PER_USEC
        self.exit_ns = exit_us * NSEC_PER_USEC
        self.cold_factor = cold_factor
        self.cold_thread_factor = cold_thread_factor
        self.cold_decay_ns = cold_decay_ms * 1e6

    def add_function(self, tg) -> None:
        """The dispatcher starts with the first request (its thread exists
        from the start on a real host, blocked on the pipe: the same)."""
        self.pipe[tg] = deque()

    def workers(self) -> int:
        """The worker processes: one per function cgroup."""
        return len(self.pipe)

    def start(self, req, tg, hint: int) -> int:
        m = self.machine
        if self.loadgen is not None:
            self.loadgen.dispatch(hint)
        d = self.dispatcher.get(tg)
        if d is None:
            d = m.new_task(f"{req.function}/dispatcher", tg, self.wl.nice, self._cost(req, -1),
                           0, self)
            self.dispatcher[tg] = d
            self.job[d] = req
            m.wake_up_new_task(d, hint)
        elif d in self.job:
            self.pipe[tg].append(req)
        else:
            self.job[d] = req
            d.remaining = self._cost(req, -1 if d.last_ran < 0
                                     else self.engine.now - d.last_ran)
            m.wake_up(d)
        return d.cpu

    def _cost(self, req, away) -> int:
        """The dispatcher's CPU for ``req``, read after ``away`` ns off the
        CPU (negative, as the cost model's ``away_ns``: a new dispatcher,
        away since ever; 0: read from a backlog), and the request's cold
        fraction kept for its threads: the decay form of the module
        docstring."""
        cost = self.dispatch_ns + self.thread_ns * req.pending
        if self.cold_factor or self.cold_thread_factor:
            cold = 1.0 if away < 0 else -expm1(-away / self.cold_decay_ns)
            self.cold[req] = cold
            cost = int(cost * (1.0 + self.cold_factor * cold))
        return max(1, cost)

    def burst_done(self, d):
        if d not in self.job:
            return self._thread_done(d)
        req = self.job.pop(d)
        wl = self.wl
        cold = self.cold.pop(req, 0.0) if self.cold else 0.0
        if self.start_ns or self.exit_ns:
            scale = 1.0 + self.cold_thread_factor * cold
            fork_threads(self.machine, req, d.tg, wl.nice, wl.ws_bytes, self, d.cpu,
                         int(self.start_ns * scale))
            self.thread_exit[req] = int(self.exit_ns * scale)
        else:
            fork_threads(self.machine, req, d.tg, wl.nice, wl.ws_bytes, wl, d.cpu)
        pipe = self.pipe[d.tg]
        if pipe:
            nxt = pipe.popleft()
            self.job[d] = nxt
            d.remaining = self._cost(nxt, 0)
            return 0
        return BURST_BLOCK

    def _thread_done(self, t):
        """A request thread's share ran out (the request's accounting, as
        the workload's), then its exit; it is gone after that."""
        if t in self.exiting:
            self.exiting.discard(t)
            return BURST_EXIT
        req = t.request
        done = self.wl.burst_done(t)
        exit_ns = self.thread_exit[req] if req.pending else self.thread_exit.pop(req)
        if exit_ns <= 0:
            return done
        self.exiting.add(t)
        t.remaining = exit_ns
        return 0
