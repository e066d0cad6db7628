"""The real-host backend: cgroup control (cgroupfs), kernel scheduler and
host detection (detect), per-cgroup perf counts (perf), and ``RealHost``,
the ``Host`` protocol over the kernel (host).  See docs/real-backend.md."""
