"""Pod placement as kube-scheduler does it: filter the nodes a pod fits on,
score the rest, take the best.

Filters: the node's pod cap (``pods_per_node - reserved_pods``: the
kubelet's max-pods, 110 by default, less the pods the LAGS cluster kept for
system services [§3.2]) and NodeResourcesFit (the sum of the requests of
the pods on the node plus the new pod's must fit the node's allocatable
CPU and memory).  Scores, NodeResourcesFit's strategies, each the mean over
CPU and memory (weights 1) of a 0-100 figure after adding the pod:

- ``least_allocated`` (kube-scheduler's default): ``(allocatable -
  requested) x 100 / allocatable``, spreading pods;
- ``most_allocated`` (bin packing): ``requested x 100 / allocatable``.

kube-scheduler breaks ties between equally scored nodes at random; here
the lowest node index wins, so a placement is a function of the state
alone (and a seed never changes it)."""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

STRATEGIES = ("least_allocated", "most_allocated")


@dataclass
class NodeAllocation:
    cpu_mcpu: int             # allocatable
    memory_mb: int
    max_pods: int
    cpu_requested: int = 0
    memory_requested: int = 0
    pods: int = 0

    def fits(self, cpu: int, memory: int) -> bool:
        return (self.pods < self.max_pods and self.cpu_requested + cpu <= self.cpu_mcpu
                and self.memory_requested + memory <= self.memory_mb)

    def score(self, strategy: str, cpu: int, memory: int) -> float:
        # the mean over CPU and memory, summed in that order (place() calls
        # this for every node at every placement: no tuples or generators)
        used_cpu = (self.cpu_requested + cpu) / self.cpu_mcpu
        used_memory = (self.memory_requested + memory) / self.memory_mb
        if strategy == "most_allocated":
            return 100.0 * (used_cpu + used_memory) / 2
        return 100.0 * ((1.0 - used_cpu) + (1.0 - used_memory)) / 2

    def bind(self, cpu: int, memory: int) -> None:
        self.cpu_requested += cpu
        self.memory_requested += memory
        self.pods += 1

    def release(self, cpu: int, memory: int) -> None:
        self.cpu_requested -= cpu
        self.memory_requested -= memory
        self.pods -= 1


def empty_node(ccfg, cpus: int) -> NodeAllocation:
    """A node of the cluster config with nothing bound: allocatable CPU
    ``node_cpu_mcpu`` (null: the host's CPUs x 1000), memory, and the pod cap."""
    cpu = ccfg.get("node_cpu_mcpu")
    return NodeAllocation(cpus * 1000 if cpu is None else int(cpu), int(ccfg["node_memory_mb"]),
                          int(ccfg["pods_per_node"]) - int(ccfg["reserved_pods"]))


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"cluster.placement = {strategy!r}: choose from {', '.join(STRATEGIES)}")
    return strategy


def place(nodes: list[NodeAllocation], strategy: str, cpu: int, memory: int) -> int | None:
    """Bind a pod of these requests to the best node; its index, or None
    if it fits nowhere."""
    best, best_score = None, -1.0
    for i, node in enumerate(nodes):
        if node.fits(cpu, memory):
            s = node.score(strategy, cpu, memory)
            if s > best_score:
                best, best_score = i, s
    if best is not None:
        nodes[best].bind(cpu, memory)
    return best


# NodePool's order is exact while 50 / (allocatable CPU x memory), the least
# a score can differ by between two nodes whose requested sums differ, is far
# above the rounding error of score() (a few ulps of 100, ~1e-13)
MAX_EXACT_PRODUCT = 10**13


class NodePool:
    """The cluster's nodes (all of one size), kept sorted by how much of
    them is requested, so that a placement visits the few best nodes
    instead of scoring all of them; it chooses as ``place()`` does.

    On nodes of one size both strategies' scores are monotone in
    ``K = cpu_requested x memory + memory_requested x cpu`` (allocatable
    sizes): least_allocated's falls as K grows, most_allocated's rises.
    Two nodes whose K differ have scores apart by far more than rounding,
    so the scan's choice (the highest score, the lowest index among equal
    ones) is among the fitting nodes of the best K: scored here exactly
    as ``place()`` scores them, in index order."""

    def __init__(self, nodes: list[NodeAllocation], strategy: str):
        self.nodes = nodes
        self.strategy = check_strategy(strategy)
        sizes = {(n.cpu_mcpu, n.memory_mb) for n in nodes}
        if len(sizes) > 1:
            raise ValueError(f"NodePool: nodes of one size only, got {sorted(sizes)}")
        cpu, memory = sizes.pop() if sizes else (1, 1)
        if cpu * memory > MAX_EXACT_PRODUCT:
            raise ValueError(f"NodePool: {cpu} mCPU x {memory} MB allocatable exceeds "
                             f"{MAX_EXACT_PRODUCT:.0e}: scores of different nodes could round equal")
        # least_allocated visits the lowest K first, most_allocated the highest
        self._weights = (memory, cpu) if strategy == "least_allocated" else (-memory, -cpu)
        self._order = sorted((self._key(node), i) for i, node in enumerate(nodes))

    def _key(self, node: NodeAllocation) -> int:
        return node.cpu_requested * self._weights[0] + node.memory_requested * self._weights[1]

    def place(self, cpu: int, memory: int) -> int | None:
        """Bind a pod of these requests to the best node; its index, or
        None if it fits nowhere."""
        best, best_score, best_key = None, -1.0, None
        for key, i in self._order:
            if best_key is not None and key != best_key:
                break
            node = self.nodes[i]
            if node.fits(cpu, memory):
                best_key = key
                s = node.score(self.strategy, cpu, memory)
                if s > best_score:
                    best, best_score = i, s
        if best is not None:
            self._reorder(best, NodeAllocation.bind, cpu, memory)
        return best

    def release(self, index: int, cpu: int, memory: int) -> None:
        self._reorder(index, NodeAllocation.release, cpu, memory)

    def _reorder(self, index: int, change, cpu: int, memory: int) -> None:
        """Bind or release on one node and move it to its new place."""
        node = self.nodes[index]
        del self._order[bisect_left(self._order, (self._key(node), index))]
        change(node, cpu, memory)
        insort(self._order, (self._key(node), index))
