"""The memory model: LLC geometry, slice hashing, page layouts, RDT (resctrl)
classes, way sharing and memory-bandwidth sharing.

Pure functions and small classes; :mod:`sim.memory.progress` wires them into
a run (memory-profiled tasks' speeds, RDT state, perf-like counters).  See
docs/memory.md for the equations.

- :mod:`sim.memory.llc`        per-socket LLC geometry (ways x slices x sets)
- :mod:`sim.memory.slicehash`  physical address -> LLC slice (linear XOR, uniform)
- :mod:`sim.memory.pages`      buffer -> physical frames -> per-(slice,set) demand
- :mod:`sim.memory.cachemodel` demand + ways -> miss ratio, occupancy
- :mod:`sim.memory.contention` shared ways by fill rate, socket bandwidth and MBA
- :mod:`sim.memory.resctrl`    resctrl semantics: groups, schemata, modes, monitoring
- :mod:`sim.memory.progress`   memory profiles, the CPI model, the per-run MemorySystem
"""
from sim.memory.cachemodel import MissProfile, miss_profile, miss_ratio, occupancy_lines
from sim.memory.contention import Tenant, TenantResult, share_bandwidth, solve_socket
from sim.memory.llc import LLCGeometry, socket_bandwidth_bytes_per_s
from sim.memory.pages import Buffer, bucket_demand, frame_layout, line_addresses, parse_page_size
from sim.memory.resctrl import RdtInfo, Resctrl, ResctrlError
from sim.memory.slicehash import UniformSliceHash, XorSliceHash, make_slice_hash

__all__ = [
    "Buffer", "LLCGeometry", "MissProfile", "RdtInfo", "Resctrl", "ResctrlError", "Tenant",
    "TenantResult", "UniformSliceHash", "XorSliceHash", "bucket_demand", "frame_layout",
    "line_addresses", "make_slice_hash", "miss_profile", "miss_ratio", "occupancy_lines",
    "parse_page_size", "share_bandwidth", "socket_bandwidth_bytes_per_s", "solve_socket",
]
