# Compiled declarations of sim/heap.py (docs/performance.md, "Compiled core").
cimport cython

cdef class Node:
    cdef public long long key
    cdef public long long seq
    cdef public Node below

@cython.final
cdef class Heap:
    cdef public list items
    cdef public Py_ssize_t n

    @cython.locals(items=list, i=Py_ssize_t, parent=Py_ssize_t, p=Node, key=cython.longlong,
                   seq=cython.longlong)
    cpdef push(self, Node node)
    @cython.locals(items=list, last=Node, top=Node, c=Node, r=Node, n=Py_ssize_t, i=Py_ssize_t,
                   child=Py_ssize_t)
    cpdef Node pop(self)

@cython.final
cdef class NodeStack:
    cdef public Node top

    cpdef push(self, Node node)
    @cython.locals(node=Node)
    cpdef Node pop(self)
