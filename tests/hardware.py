"""Why a hardware test cannot run on this host (None: it can)."""
from __future__ import annotations

import os
import signal

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


def default_sigint() -> None:
    """Popen preexec_fn for a child the test will SIGINT: a shell that
    starts jobs in the background (``cmd &`` without job control, nohup)
    hands them SIGINT ignored, and colosim rightly keeps an ignored SIGINT
    ignored, so the child must start with the default action."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
