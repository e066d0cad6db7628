# Compiled declarations of sim/heap.py (docs/performance.md, "Compiled core").
cimport cython

cdef class Node:
    cdef public long long key
    cdef public long long seq

@cython.locals(i=Py_ssize_t, parent=Py_ssize_t, p=Node, key=cython.longlong,
               seq=cython.longlong)
cpdef heap_push(list heap, Node node)
@cython.locals(last=Node, top=Node, c=Node, r=Node, n=Py_ssize_t, i=Py_ssize_t,
               child=Py_ssize_t)
cpdef Node heap_pop(list heap)
