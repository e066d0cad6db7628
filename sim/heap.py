"""A binary min-heap of ``Node``s ordered by (key, seq), for the engine's
calendar and CFS's timeline, and a stack of spare nodes for reuse.

``heapq`` over tuples would do the same, but every comparison of two
tuples goes through Python's rich comparison of their items; here the keys
are C integers when compiled (sim/heap.pxd), which makes the heap several
times cheaper on the simulator's hottest paths.  ``seq`` breaks ties in
insertion order, so the order is total and runs are deterministic.

Neither structure lets CPython shrink a list: a small run queue's timeline
empties and fills again at nearly every switch, and a list that drops
below half its allocation is reallocated (and grown again on the next
append), which was a fortieth of a dense run.
"""
from __future__ import annotations

import cython


class Node:
    """A heap entry: ``key`` (a time or a vruntime, ns) and ``seq`` (insertion
    order); ``below`` links a spare node to the next one of its NodeStack."""

    __slots__ = ("key", "seq", "below")

    def __init__(self, key: int, seq: int):
        self.key = key
        self.seq = seq
        self.below = None


class Heap:
    """The heap is ``items[:n]``, smallest first; the slots past ``n`` are
    None and kept (the list never shrinks)."""

    __slots__ = ("items", "n")

    def __init__(self):
        self.items: list[Node | None] = []
        self.n = 0

    def __len__(self) -> int:
        return self.n

    # indices stay within the list by construction: compiled, no bounds or
    # negative-index tests per item (the decorators do nothing in the sources)
    @cython.boundscheck(False)
    @cython.wraparound(False)
    def push(self, node: Node) -> None:
        items = self.items
        i = self.n
        if i == len(items):
            items.append(node)
        self.n = i + 1
        key, seq = node.key, node.seq
        while i > 0:
            parent = (i - 1) >> 1
            # every item below n is a Node: compiled, no type test per read
            p = cython.cast(Node, items[parent])
            if p.key < key or (p.key == key and p.seq < seq):
                break
            items[i] = p
            i = parent
        items[i] = node

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def pop(self) -> Node:
        """Remove and return the smallest node (the heap must not be empty)."""
        items = self.items
        n = self.n - 1
        self.n = n
        last = cython.cast(Node, items[n])
        items[n] = None
        if n == 0:
            return last
        top = cython.cast(Node, items[0])
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            c = cython.cast(Node, items[child])
            if child + 1 < n:
                r = cython.cast(Node, items[child + 1])
                if r.key < c.key or (r.key == c.key and r.seq < c.seq):
                    child += 1
                    c = r
            if last.key < c.key or (last.key == c.key and last.seq < c.seq):
                break
            items[i] = c
            i = child
        items[i] = last
        return top


class NodeStack:
    """Spare nodes kept for reuse (an allocation and a release per event
    otherwise), linked through their ``below`` field."""

    __slots__ = ("top",)

    def __init__(self):
        self.top: Node | None = None

    def push(self, node: Node) -> None:
        node.below = self.top
        self.top = node

    def pop(self) -> Node | None:
        """The last node pushed (None if there is none)."""
        node = self.top
        if node is not None:
            self.top = node.below
            node.below = None
        return node
