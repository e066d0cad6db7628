"""Running the nodes: all in this process, or spread over Ray actors.

Between two window boundaries the nodes do not interact, so they are
grouped into shards and each shard advances its nodes to the boundary on
its own; the control plane waits for every shard's reports before it acts.
A node's results depend only on its seed and the commands it receives, so
which shard or process runs it cannot change them: a Ray run equals the
serial run for the same seed (tests/test_cluster.py checks it)."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from backends.cluster.node import NodeSim
from backends.cluster.options import PARALLEL
from sim.engine import quiet_gc


def node_seed(seed: int, index: int) -> int:
    """An independent seed per node: nodes share stream names (the
    machine's), so one seed for all would give every node the same draws."""
    return int(np.random.SeedSequence([int(seed), index]).generate_state(1)[0])


class Shard:
    """Some nodes of the cluster, stepped together.  From its creation to
    its finish it is one quiet_gc() block, so each window's engine runs
    nest in it and freeze what they made: in a Ray actor, where nothing
    else holds a block open, the nodes' state would otherwise be unfrozen
    and traversed again after every window (in this process the cluster
    run's own block already does it)."""

    def __init__(self, cfg: dict, indices: list[int]):
        self._gc = ExitStack()
        self._gc.enter_context(quiet_gc())
        self.nodes = {i: NodeSim(i, cfg, node_seed(cfg.get("seed", 0), i)) for i in indices}

    def step(self, until_ns: int, commands: dict) -> dict:
        return {i: node.step(until_ns, commands[i]) for i, node in self.nodes.items()}

    def finish(self) -> dict:
        try:
            return {i: node.finish() for i, node in self.nodes.items()}
        finally:
            self.close()

    def close(self) -> None:
        """End the block (again: a no-op), also when a window failed."""
        self._gc.close()


def split(n: int, parts: int) -> list[list[int]]:
    return [list(map(int, chunk)) for chunk in np.array_split(np.arange(n), parts) if len(chunk)]


class SerialNodes:
    def __init__(self, cfg: dict, n: int):
        self.shard = Shard(cfg, list(range(n)))

    def step(self, until_ns: int, commands: list) -> list:
        reports = self.shard.step(until_ns, dict(enumerate(commands)))
        return [reports[i] for i in range(len(commands))]

    def finish(self) -> list:
        done = self.shard.finish()
        return [done[i] for i in sorted(done)]

    def close(self) -> None:
        self.shard.close()


class RayNodes:
    """Shards as Ray actors: ``workers`` of them (default: the CPUs Ray
    sees), on a local Ray or the cluster at ``address``."""

    def __init__(self, cfg: dict, n: int, workers: int | None, address: str | None):
        try:
            import ray
        except ImportError:
            raise RuntimeError("cluster.parallel = ray needs Ray: pip install 'colosim[ray]'") \
                from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            # "local" starts a new Ray even where an old one left its address behind
            ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        workers = workers or max(1, int(ray.available_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1)(Shard)
        self.shards = [(idx, actor.remote(cfg, idx)) for idx in split(n, min(workers, n))]

    def step(self, until_ns: int, commands: list) -> list:
        futures = [s.step.remote(until_ns, {i: commands[i] for i in idx})
                   for idx, s in self.shards]
        out: dict = {}
        for part in self.ray.get(futures):
            out.update(part)
        return [out[i] for i in range(len(commands))]

    def finish(self) -> list:
        out: dict = {}
        for part in self.ray.get([s.finish.remote() for _, s in self.shards]):
            out.update(part)
        return [out[i] for i in sorted(out)]

    def close(self) -> None:
        for _, shard in self.shards:
            self.ray.kill(shard)
        if self.started:
            self.ray.shutdown()


def start_nodes(cfg: dict, n: int):
    ccfg = cfg["cluster"]
    kind = str(ccfg.get("parallel", "serial"))
    if kind == "serial":
        return SerialNodes(cfg, n)
    if kind == "ray":
        return RayNodes(cfg, n, ccfg.get("workers"), ccfg.get("ray_address"))
    raise ValueError(f"cluster.parallel = {kind!r}: choose from {', '.join(PARALLEL)}")
