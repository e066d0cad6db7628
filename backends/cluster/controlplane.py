"""The cluster's control plane: Knative-style autoscaling, keep-alive and
scale-to-zero, pod placement, and the request router.

It acts only at window boundaries (conservative synchronisation: the
nodes are independent between two boundaries, so they can be simulated in
parallel).  At the boundary ``t`` it

1. reads every node's report for the window that just ended: each pod's
   requests in flight and their time-average (its concurrency);
2. autoscales each function as Knative's KPA does: desired pods =
   ceil(concurrency averaged over the last ``stable_window_s`` /
   (``target_concurrency`` x ``target_utilization``)); when the average
   over the panic window (``panic_window_pct`` of the stable one) asks for
   ``panic_threshold_pct`` of the pods there are or more, it decides on
   that average instead and scales down no more until the panic window
   passes without it (KPA's panic mode); extra pods are placed now and
   ready ``cold_start_s`` later; idle pods beyond the desired count (at
   least one) are removed; a function with no invocation for
   ``keep_alive_s`` and nothing in flight scales to zero, unless it keeps
   ``min_scale`` pods (Knative's min-scale annotation; those are deployed
   before the run starts, ready at t = 0, placed in function order);
3. routes every invocation of the trace that arrives in ``[t, t + W)``:
   to the function's ready pod with the fewest requests in flight (only
   when none is ready, to the one that will be ready first), counting
   those it was reported to have at ``t`` plus those routed to it since
   (completions inside the window are not seen until the next boundary:
   the price of conservative synchronisation); a function with no pod
   gets one placed at the invocation's arrival (a cold start: the request
   waits ``cold_start_s``, and so does every request routed to a pod that
   is still starting).  An invocation whose pod fits on no node is
   dropped (``dropped`` in requests.parquet, ``n_unplaced`` in the summary).

Each pod requests ``cpu_request_mcpu`` of the function (the
``cpu_request`` rule, backends/cluster/run.py) and ``memory_request_mb``; with
``cpu_limit`` (``request``: the pod's request; or millicores) its cgroup
gets the matching cpu.max (backends/cluster/node.py).
"""
from __future__ import annotations

import math
from collections import deque

from backends.cluster.node import Commands, Delivery
from backends.cluster.placement import NodePool, empty_node
from sim.engine import s_to_ns


class Instance:
    __slots__ = ("pod", "function", "node", "ready_ns", "inflight", "routed", "pending_ns",
                 "serial")

    def __init__(self, pod: str, function: str, node: int, ready_ns: int, serial: int):
        self.pod = pod
        self.function = function
        self.node = node
        self.ready_ns = ready_ns
        self.inflight = 0        # as of the last report
        self.routed = 0          # routed to it since the last report
        self.pending_ns = -1     # latest delivery handed to its node
        self.serial = serial


class Function:
    __slots__ = ("name", "cpu_mcpu", "instances", "history", "last_request_ns", "created",
                 "panic_until_ns")

    def __init__(self, name: str, cpu_mcpu: int, stable_windows: int):
        self.name = name
        self.cpu_mcpu = cpu_mcpu
        self.instances: list[Instance] = []
        self.history: deque = deque(maxlen=stable_windows)
        self.panic_until_ns = -1
        self.last_request_ns = -1
        self.created = 0


class ControlPlane:
    def __init__(self, ccfg, nodes: int, node_cpus: int, requests_mcpu: dict, window_ns: int):
        self.window_ns = window_ns
        self.memory_mb = int(ccfg["memory_request_mb"])
        self.cold_start_ns = s_to_ns(float(ccfg["cold_start_s"]))
        self.keep_alive_ns = s_to_ns(float(ccfg["keep_alive_s"]))
        self.per_pod = float(ccfg["target_concurrency"]) * float(ccfg["target_utilization"])
        self.alloc = NodePool([empty_node(ccfg, node_cpus) for _ in range(nodes)],
                              str(ccfg["placement"]))
        stable_ns = s_to_ns(float(ccfg["stable_window_s"]))
        stable = max(1, math.ceil(stable_ns / window_ns))
        self.panic_ns = int(stable_ns * float(ccfg["panic_window_pct"]) / 100)
        self.panic_windows = max(1, math.ceil(self.panic_ns / window_ns))
        self.panic_threshold = float(ccfg["panic_threshold_pct"]) / 100
        self.functions = {name: Function(name, mcpu, stable)
                          for name, mcpu in requests_mcpu.items()}
        self.min_scale = int(ccfg["min_scale"])
        self.limit = ccfg.get("cpu_limit")
        self.by_pod: dict[str, Instance] = {}
        self.dropped: list[tuple] = []      # (function, arrival ns, demand ns)
        self.pod_starts = 0
        self.cold_starts = 0                # invocations that waited for a starting pod
        self.scale_to_zero = 0
        self.pods_live = 0
        self.pods_peak = 0

    # -- pods ------------------------------------------------------------
    def _start(self, fn: Function, at_ns: int, commands: list[Commands]) -> Instance | None:
        """A new pod of ``fn`` placed at ``at_ns``, ready a cold start later."""
        node = self.alloc.place(fn.cpu_mcpu, self.memory_mb)
        if node is None:
            return None
        inst = Instance(f"{fn.name}-{fn.created}", fn.name, node, at_ns + self.cold_start_ns,
                        fn.created)
        fn.created += 1
        fn.instances.append(inst)
        self.by_pod[inst.pod] = inst
        limit = None if self.limit is None else \
            fn.cpu_mcpu if self.limit == "request" else int(self.limit)
        commands[node].new_pods.append((inst.pod, fn.name, fn.cpu_mcpu, limit))
        self.pod_starts += 1
        self.pods_live += 1
        self.pods_peak = max(self.pods_peak, self.pods_live)
        return inst

    def _remove(self, fn: Function, inst: Instance) -> None:
        fn.instances.remove(inst)
        del self.by_pod[inst.pod]
        self.alloc.release(inst.node, fn.cpu_mcpu, self.memory_mb)
        self.pods_live -= 1

    @staticmethod
    def _idle(inst: Instance, t_ns: int) -> bool:
        return inst.inflight == 0 and inst.ready_ns <= t_ns and inst.pending_ns < t_ns

    # -- a boundary ------------------------------------------------------
    def boundary(self, t_ns: int, reports, arrivals) -> list[Commands]:
        """Commands for every node for the window starting at ``t_ns``.
        ``reports``: the nodes' NodeReports for the window that ended (None
        at t = 0); ``arrivals``: (arrival ns, function, demand ns, threads)
        of the window, in arrival order."""
        commands = [Commands() for _ in self.alloc.nodes]
        if reports is None:
            for fn in self.functions.values():
                for _ in range(self.min_scale):
                    self._start(fn, -self.cold_start_ns, commands)
        pods = None if reports is None else [r.pods for r in reports]
        for fn in self.functions.values():
            if not fn.instances:
                continue
            # the function's concurrency over the window: its pods' time
            # averages summed in creation order
            concurrency = 0.0
            if pods is not None:
                for inst in fn.instances:
                    inflight, area = pods[inst.node].get(inst.pod, (0, 0))
                    inst.inflight, inst.routed = inflight, 0
                    concurrency += area / self.window_ns
            fn.history.append(concurrency)
            self._autoscale(fn, t_ns, commands)
        for arrival, name, demand, threads in arrivals:
            fn = self.functions[name]
            fn.last_request_ns = arrival
            inst = self._route(fn, arrival) if fn.instances else \
                self._start(fn, arrival, commands)
            if inst is None:
                self.dropped.append((name, arrival, demand))
                continue
            inst.routed += 1
            at = max(arrival, inst.ready_ns)
            self.cold_starts += at > arrival
            inst.pending_ns = max(inst.pending_ns, at)
            commands[inst.node].deliveries.append(Delivery(at, inst.pod, demand, threads,
                                                           arrival))
        return commands

    @staticmethod
    def _route(fn: Function, arrival: int) -> Instance:
        if len(fn.instances) == 1:          # most functions, at most windows
            return fn.instances[0]
        ready = [i for i in fn.instances if i.ready_ns <= arrival]
        if not ready:
            return min(fn.instances, key=lambda i: (i.ready_ns, i.serial))
        return min(ready, key=lambda i: (i.inflight + i.routed, i.serial))

    def _autoscale(self, fn: Function, t_ns: int, commands: list[Commands]) -> None:
        if not self.min_scale and t_ns - fn.last_request_ns >= self.keep_alive_ns and \
                all(self._idle(i, t_ns) for i in fn.instances):
            for inst in list(fn.instances):
                self._remove(fn, inst)
            fn.history.clear()
            self.scale_to_zero += 1
            return
        desired = max(1, self.min_scale,
                      math.ceil(sum(fn.history) / len(fn.history) / self.per_pod))
        recent = list(fn.history)[-self.panic_windows:]
        panic = max(1, math.ceil(sum(recent) / len(recent) / self.per_pod))
        if panic >= self.panic_threshold * len(fn.instances):
            fn.panic_until_ns = t_ns + self.panic_ns
        if t_ns < fn.panic_until_ns:
            desired = max(desired, panic, len(fn.instances))
        while len(fn.instances) < desired:
            if self._start(fn, t_ns, commands) is None:
                break
        if len(fn.instances) > desired:
            idle = [i for i in fn.instances if self._idle(i, t_ns)]
            for inst in sorted(idle, key=lambda i: -i.serial)[:len(fn.instances) - desired]:
                self._remove(fn, inst)
