"""Why a hardware test cannot run on this host (None: it can)."""
from __future__ import annotations

import os

from backends.real import cgroupfs
from backends.real.cgroupfs import CgroupError


def cgroups_unavailable() -> str | None:
    """Root and the cgroup controllers the real backend writes."""
    if os.geteuid() != 0:
        return f"needs root to write cgroups (running as uid {os.geteuid()})"
    try:
        cgroupfs.preflight(cgroupfs.detect_layout())
    except (CgroupError, OSError) as e:
        return str(e)
    return None
