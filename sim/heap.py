"""A binary min-heap of ``Node``s ordered by (key, seq), for the engine's
calendar and CFS's timeline.

``heapq`` over tuples would do the same, but every comparison of two
tuples goes through Python's rich comparison of their items; here the keys
are C integers when compiled (sim/heap.pxd), which makes the heap several
times cheaper on the simulator's hottest paths.  ``seq`` breaks ties in
insertion order, so the order is total and runs are deterministic.
"""
from __future__ import annotations

import cython


class Node:
    """A heap entry: ``key`` (a time or a vruntime, ns) and ``seq`` (insertion order)."""

    __slots__ = ("key", "seq")

    def __init__(self, key: int, seq: int):
        self.key = key
        self.seq = seq


# indices stay within the list by construction: compiled, no bounds or
# negative-index tests per item (the decorators do nothing in the sources)
@cython.boundscheck(False)
@cython.wraparound(False)
def heap_push(heap: list, node: Node) -> None:
    heap.append(node)
    i = len(heap) - 1
    key, seq = node.key, node.seq
    while i > 0:
        parent = (i - 1) >> 1
        # every item is a Node: compiled, no type test per item read
        p = cython.cast(Node, heap[parent])
        if p.key < key or (p.key == key and p.seq < seq):
            break
        heap[i] = p
        i = parent
    heap[i] = node


@cython.boundscheck(False)
@cython.wraparound(False)
def heap_pop(heap: list) -> Node:
    """Remove and return the smallest node (the heap must not be empty)."""
    last = cython.cast(Node, heap.pop())
    n = len(heap)
    if n == 0:
        return last
    top = cython.cast(Node, heap[0])
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        c = cython.cast(Node, heap[child])
        if child + 1 < n:
            r = cython.cast(Node, heap[child + 1])
            if r.key < c.key or (r.key == c.key and r.seq < c.seq):
                child += 1
                c = r
        if last.key < c.key or (last.key == c.key and last.seq < c.seq):
            break
        heap[i] = c
        i = child
    heap[i] = last
    return top
