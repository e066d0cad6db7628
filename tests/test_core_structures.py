"""The core's own containers against the plain Python they replace
(benchmarks/BASELINE.md, step 10): the calendar's and CFS's heap against
heapq over (key, seq), rq->cfs_tasks against a dict kept as an ordered set,
the recorder's columns against the requests given to it.  Each runs
compiled when the core is (tests/test_compiled.py compares whole runs)."""
from __future__ import annotations

import heapq

from hypothesis import given, settings, strategies as st

from sim.heap import Heap, Node, NodeStack
from sim.recorder import Recorder
from sim.rq import CfsRq, CfsTasks, Rq, SchedEntity, TaskGroup
from sim.task import Request

# push a key, or pop (None)
OPS = st.lists(st.one_of(st.integers(0, 20), st.none()), max_size=200)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_the_heap_pops_in_key_then_insertion_order_like_heapq(ops):
    heap, ref, seq = Heap(), [], 0
    for op in ops:
        if op is None:
            if ref:
                key, s = heapq.heappop(ref)
                node = heap.pop()
                assert (node.key, node.seq) == (key, s)
        else:
            seq += 1
            heap.push(Node(op, seq))
            heapq.heappush(ref, (op, seq))
        assert len(heap) == len(ref)
        if ref:
            assert (heap.items[0].key, heap.items[0].seq) == ref[0]


def test_the_heap_keeps_its_storage_and_drops_what_it_popped():
    heap = Heap()
    for i in range(8):
        heap.push(Node(i, i))
    while len(heap):
        heap.pop()
    assert len(heap.items) == 8 and all(item is None for item in heap.items)


def test_a_node_stack_hands_back_the_last_node_pushed():
    stack, a, b = NodeStack(), Node(1, 1), Node(2, 2)
    assert stack.pop() is None
    stack.push(a)
    stack.push(b)
    assert stack.pop() is b and stack.pop() is a and stack.pop() is None
    assert a.below is None and b.below is None


class _Task:
    """What CfsTasks reads of a task: its sched_entity (and the entity its task)."""

    def __init__(self, i):
        self.name = f"t{i}"
        self.se = SchedEntity(1024, None, None, task=self)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("add", "remove", "move")), st.integers(0, 7)),
                max_size=120))
def test_cfs_tasks_keeps_the_order_of_a_dict_used_as_an_ordered_set(ops):
    """Enqueue adds last (a queued task keeps its place), dequeue removes,
    a switch moves the next task last: as `d[p] = None`, `del d[p]` and
    `del d[p]; d[p] = None` did."""
    tasks = [_Task(i) for i in range(8)]
    lst, ref = CfsTasks(), {}
    for op, i in ops:
        p = tasks[i]
        if op == "add":
            lst.add_tail(p.se)
            ref[p] = None
        elif p in ref and op == "remove":
            lst.remove(p.se)
            del ref[p]
        elif p in ref:
            lst.move_tail(p.se)
            del ref[p]
            ref[p] = None
        assert list(lst) == list(ref) and len(lst) == len(ref)
        assert all((t in lst) == (t in ref) for t in tasks)
        assert lst.first(3) == list(ref)[:3]


def _leaf_list(cfs_rq, bound: int) -> list:
    """The cfs_rq's own list walked both ways (a broken link could loop:
    at most ``bound`` steps)."""
    tasks, se = [], cfs_rq.tasks_head
    while se is not None and len(tasks) <= bound:
        tasks.append(se.task)
        se = se.leaf_next
    back, se = [], cfs_rq.tasks_tail
    while se is not None and len(back) <= bound:
        back.append(se.task)
        se = se.leaf_prev
    assert back == tasks[::-1]
    return tasks


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("add", "remove", "move")), st.integers(0, 8)),
                max_size=120))
def test_each_cfs_rq_lists_its_tasks_in_the_cpus_cfs_tasks_order(ops):
    """With per_cfs_rq, a cfs_rq's own list is always rq->cfs_tasks
    restricted to the tasks queued on that cfs_rq (CFS-LAGS's pull walks it
    instead of the CPU's whole list)."""
    rq = Rq(0)
    groups = [CfsRq(rq, TaskGroup(f"g{i}", None, 1024, 1, None)) for i in range(3)]
    tasks = [_Task(i) for i in range(9)]
    for i, p in enumerate(tasks):
        p.se.cfs_rq = groups[i % 3]
    lst = CfsTasks()
    lst.per_cfs_rq = True
    for op, i in ops:
        se = tasks[i].se
        if op == "add":
            lst.add_tail(se)
        elif se in [t.se for t in lst] and op == "remove":
            lst.remove(se)
        elif se in [t.se for t in lst]:
            lst.move_tail(se)
        for q in groups:
            assert _leaf_list(q, len(tasks)) == [t for t in lst if t.se.cfs_rq is q]
    for p in list(lst):
        lst.remove(p.se)
    assert all(q.tasks_head is None and q.tasks_tail is None for q in groups)
    assert all(p.se.leaf_q is None for p in tasks)


def test_cfs_tasks_refuses_to_remove_a_task_it_does_not_hold():
    a, b = _Task(0), _Task(1)
    mine, other = CfsTasks(), CfsTasks()
    other.add_tail(b.se)
    for se in (a.se, b.se):
        try:
            mine.remove(se)
        except KeyError:
            continue
        raise AssertionError("removed an entity that was not queued here")
    assert list(other) == [b]


def test_the_recorder_keeps_every_request_after_warmup_through_its_growth():
    rec = Recorder(warmup_ns=100)
    rows = []
    for i in range(3000):              # past the first 1,024 rows, twice
        req = Request(f"f{i % 3}", f"/g{i % 2}", 50 + i, 1000)
        req.start, req.end, req.dropped = 60 + i, 90 + 2 * i, i % 7 == 0
        rec.request_arrived(req)
        rec.request_done(req)
        if req.arrival >= 100:
            rows.append((req.function, req.cgroup, req.arrival, req.start, req.end, 1000,
                         req.dropped))
    assert rec.rows == rows and rec.arrived == len(rows)
    table = rec.table()
    assert table.num_rows == len(rows)
    assert table.column("function").to_pylist() == [r[0] for r in rows]
    assert table.column("dropped").to_pylist() == [r[6] for r in rows]
