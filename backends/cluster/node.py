"""One node of the cluster: the full single-host model (machine, scheduler,
cost model) with the function pods the control plane put on it, advanced
one synchronisation window at a time."""
from __future__ import annotations

from dataclasses import dataclass, field

from backends.simhost import build_host
from sim.bandwidth import DEFAULT_CFS_PERIOD, MIN_CFS_QUOTA_PERIOD, NSEC_PER_USEC
from sim.engine import s_to_ns
from sim.metrics import HostCounters, IntervalSampler
from sim.workloads import request_path
from sim.workloads.common import ForkJoin, apply_cgroup_bandwidth, cgroup_shares


CFS_PERIOD_US = DEFAULT_CFS_PERIOD // NSEC_PER_USEC
MIN_QUOTA_US = MIN_CFS_QUOTA_PERIOD // NSEC_PER_USEC


@dataclass(slots=True)
class Delivery:
    """An invocation handed to a pod: forked at ``at_ns`` (later than
    ``arrival_ns`` when the pod was still cold-starting)."""
    at_ns: int
    pod: str
    demand_ns: int
    threads: int
    arrival_ns: int


@dataclass
class Commands:
    """What the control plane tells a node at a window boundary."""
    new_pods: list = field(default_factory=list)      # (pod id, function, CPU request
    #                                                   mcpu, CPU limit mcpu or None)
    deliveries: list = field(default_factory=list)    # Delivery


@dataclass
class NodeReport:
    """What a node tells the control plane at a window boundary: its
    counters over the window, the request path's own counters over it
    (``stats``: the OpenMP teams', sim/workloads/openmp.py) and, per pod
    with activity, requests in flight now and the time integral of that
    count over the window (ns)."""
    counters: HostCounters
    pods: dict
    stats: dict = field(default_factory=dict)


class Pod:
    __slots__ = ("tg", "function", "inflight", "area_ns", "since_ns", "hint")

    def __init__(self, tg, function: str, now: int, hint: int):
        self.tg = tg
        self.function = function
        self.inflight = 0
        self.area_ns = 0
        self.since_ns = now
        self.hint = hint


class PodWorkload(ForkJoin):
    """Function pods as cgroups ``parent_cgroup/<pod id>`` on one host;
    each invocation takes the workload's request path (direct or knative)."""

    def __init__(self, wcfg, machine, recorder):
        self.machine = machine
        self.engine = machine.engine
        self.recorder = recorder
        self.cfg = wcfg
        self.nice = int(wcfg.get("nice", 0))
        self.ws_bytes = int(wcfg.get("working_set_kb", 0)) * 1024
        self.parent = str(wcfg.get("parent_cgroup") or "").strip("/")
        self.shares = cgroup_shares(wcfg)
        self.path = request_path.build(wcfg, self)
        self.pods: dict[str, Pod] = {}
        self.by_cgroup: dict[str, Pod] = {}
        self.touched: set[str] = set()

    def add(self, pod_id: str, function: str, request_mcpu: int | None = None,
            limit_mcpu: int | None = None) -> None:
        """A pod's cgroup; a CPU limit becomes its cpu.max as the kubelet
        writes it (quota = limit x period / 1000 at the default 100 ms
        period, at least the kernel's 1 ms), else the workload's own.  The
        request path sizes the pod's thread pools from both
        (sim/workloads/pools.py)."""
        m = self.machine
        tg = m.create_group(f"{self.parent}/{pod_id}" if self.parent else pod_id, self.shares)
        if limit_mcpu is None:
            apply_cgroup_bandwidth(m, tg, self.cfg)
        else:
            m.set_cfs_bandwidth(tg, max(MIN_QUOTA_US, limit_mcpu * CFS_PERIOD_US // 1000),
                                CFS_PERIOD_US, 0)
        if self.path is not None:
            self.path.add_function(tg, limit_mcpu, request_mcpu)
        pod = Pod(tg, function, self.engine.now, len(self.pods) % m.topology.nr_cpus)
        self.pods[pod_id] = pod
        self.by_cgroup[tg.name] = pod

    def _count(self, pod: Pod, delta: int) -> None:
        now = self.engine.now
        pod.area_ns += pod.inflight * (now - pod.since_ns)
        pod.since_ns = now
        pod.inflight += delta

    def arrive(self, d: Delivery) -> None:
        pod = self.pods[d.pod]
        self._count(pod, 1)
        self.touched.add(d.pod)
        pod.hint = self.fork_request(pod.function, pod.tg, d.demand_ns, d.threads, pod.hint,
                                     d.arrival_ns)

    def request_done(self, req) -> None:
        self._count(self.by_cgroup[req.cgroup], -1)
        self.recorder.request_done(req)

    def stats(self) -> dict:
        """The request path's own counters so far (none on most paths)."""
        stats = getattr(self.path, "stats", None)
        return {} if stats is None else stats()

    def report(self) -> dict:
        """(in flight, area ns) of every pod active in the window; resets the areas."""
        out = {}
        for pod_id in self.touched:
            pod = self.pods[pod_id]
            self._count(pod, 0)
            out[pod_id] = (pod.inflight, pod.area_ns)
            pod.area_ns = 0
        self.touched = {p for p in self.touched if self.pods[p].inflight}
        return out


class NodeSim:
    """A host of the cluster, simulated window by window."""

    def __init__(self, index: int, cfg: dict, seed: int):
        self.index = index
        self.engine, self.machine, self.recorder = build_host(cfg, seed)
        self.pods = PodWorkload(cfg["workload"], self.machine, self.recorder)
        self.sampler = IntervalSampler(self.machine, s_to_ns(float(cfg.get("interval_s", 1.0))))
        self.sampler.start()
        self.last = HostCounters()
        self.last_stats = self.pods.stats()
        self.events = 0

    def step(self, until_ns: int, commands: Commands) -> NodeReport:
        for pod_id, function, request_mcpu, limit_mcpu in commands.new_pods:
            self.pods.add(pod_id, function, request_mcpu, limit_mcpu)
        for d in commands.deliveries:
            self.engine.call_at(d.at_ns, self.pods.arrive, d)
        self.events += self.engine.run(until_ns)
        self.machine.sync()
        now = HostCounters.read(self.machine)
        delta, self.last = now - self.last, now
        stats = self.pods.stats()
        stats_delta = {k: v - self.last_stats[k] for k, v in stats.items()}
        self.last_stats = stats
        return NodeReport(delta, self.pods.report(), stats_delta)

    def finish(self):
        """The node's requests and intervals tables, its event count, and
        how many requests that arrived after warm-up had not finished."""
        self.sampler.sample(reschedule=False)
        requests = self.recorder.table()
        return requests, self.sampler.table(), self.events, \
            self.recorder.arrived - requests.num_rows
