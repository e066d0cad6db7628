"""What the host's kernel can provide: which fair scheduler it runs, and a
fingerprint of the machine recorded with every real run.

- EEVDF replaced CFS as the fair class in Linux 6.6; before it, CFS.
- CFS-LAGS is a patched kernel; it exists only where the cpu controller has
  a ``cpu.latency_awareness`` file (checked at the cpu hierarchy's root and
  in its first-level cgroups, since the file may be absent on the root).
- SCHED_RR (``scheduler=rr``) is available on every kernel.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from backends.host import RdtError
from backends.real.cgroupfs import Layout, detect_layout
from backends.real.perf import parse_perf_csv
from backends.real.rdt import RdtSidecar

EEVDF_SINCE = (6, 6)


class SchedulerUnavailable(RuntimeError):
    pass


def kernel_version(release: str | None = None) -> tuple[int, int]:
    release = release or platform.release()
    m = re.match(r"(\d+)\.(\d+)", release)
    if not m:
        raise ValueError(f"cannot parse kernel release {release!r}")
    return int(m.group(1)), int(m.group(2))


def has_latency_awareness(layout: Layout | None = None) -> bool:
    try:
        layout = layout or detect_layout()
    except OSError:
        return False
    m = layout.by_controller.get("cpu")
    if m is None:
        return False
    if (m.path / "cpu.latency_awareness").exists():
        return True
    try:
        return any((d / "cpu.latency_awareness").exists()
                   for d in m.path.iterdir() if d.is_dir())
    except OSError:
        return False


def fair_scheduler(release: str | None = None, latency_awareness: bool | None = None) -> str:
    """'lags', 'eevdf' or 'cfs': the fair class this kernel runs."""
    if latency_awareness is None:
        latency_awareness = has_latency_awareness()
    if latency_awareness:
        return "lags"
    return "eevdf" if kernel_version(release) >= EEVDF_SINCE else "cfs"


def describe(release: str | None = None, latency_awareness: bool | None = None) -> str:
    release = release or platform.release()
    return f"{release} ({fair_scheduler(release, latency_awareness).upper()})"


def check_scheduler(requested: str, release: str | None = None,
                    latency_awareness: bool | None = None) -> str:
    """Return the fair scheduler the host runs if it can provide
    ``requested`` (a ``scheduler=`` option), else raise SchedulerUnavailable
    naming what was found."""
    release = release or platform.release()
    if latency_awareness is None:
        latency_awareness = has_latency_awareness()
    found = fair_scheduler(release, latency_awareness)
    here = f"this host runs {release} ({found.upper()})"
    base = requested.removesuffix("_tuned")
    if requested.endswith("_tuned"):
        raise SchedulerUnavailable(
            f"scheduler={requested}: the real backend does not change scheduler tunables "
            f"(/sys/kernel/debug/sched is outside colosim's prefix); use scheduler={base}")
    if base == "rr":
        return found
    if base == "cfs":
        if found == "cfs":
            return found
        if found == "lags":
            raise SchedulerUnavailable(f"scheduler=cfs: {here}, a CFS-LAGS kernel; "
                                       f"boot an unpatched kernel before 6.6")
        raise SchedulerUnavailable(f"scheduler=cfs needs a kernel before 6.6; {here}")
    if base == "eevdf":
        if found == "eevdf":
            return found
        raise SchedulerUnavailable(f"scheduler=eevdf needs a kernel 6.6 or later; {here}")
    if base == "lags":
        if found == "lags":
            return found
        raise SchedulerUnavailable(
            f"scheduler=lags needs a CFS-LAGS kernel (cpu.latency_awareness in the cpu "
            f"controller); {here}, which has no cpu.latency_awareness")
    raise SchedulerUnavailable(f"scheduler={requested}: unknown to the real backend")


def _cpuinfo() -> dict:
    model, cores, sockets = None, set(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for block in text.split("\n\n"):
        kv = {}
        for line in block.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                kv[k.strip()] = v.strip()
        if not kv:
            continue
        model = model or kv.get("model name")
        pkg, core = kv.get("physical id", "0"), kv.get("core id", kv.get("processor"))
        sockets.add(pkg)
        cores.add((pkg, core))
    return {"cpu_model": model or platform.processor() or None,
            "sockets": len(sockets) or None, "cores": len(cores) or None,
            "threads": os.cpu_count()}


def _perf_probe(perf: str, events) -> dict[str, float | None] | str:
    """``perf stat -e events -- true``: the count per event (None: not
    counted), or what went wrong."""
    try:
        r = subprocess.run([perf, "stat", "-x,", "-e", ",".join(events), "--", "true"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"perf stat failed: {e}"
    samples = {s.event.split(":")[0]: s.value for s in parse_perf_csv(r.stderr, interval=False,
                                                                      has_cgroup=False)}
    if not samples:
        # perf's complaint comes before its usage text
        why = r.stderr.split(" Usage:")[0].strip()
        return f"perf stat -e {','.join(events)} failed: " + (
            " ".join(ln.strip() for ln in why.splitlines() if ln.strip()) or
            "it counted nothing")
    return samples


def perf_events(probe: bool = True) -> dict:
    """Which perf events count here: ``perf stat`` once per event class."""
    perf = shutil.which("perf")
    if perf is None:
        return {"perf": None, "software": False, "hardware": False,
                "reason": "perf not installed (Debian: apt-get install linux-perf)"}
    out = {"perf": perf, "software": False, "hardware": False, "reason": ""}
    if not probe:
        return out
    samples = _perf_probe(perf, ("task-clock", "cycles", "instructions"))
    if isinstance(samples, str):
        out["reason"] = samples
        return out
    out["software"] = samples.get("task-clock") is not None
    out["hardware"] = (samples.get("cycles") is not None
                       and samples.get("instructions") is not None)
    if not out["software"]:
        out["reason"] = "perf stat counted no task-clock"
    elif not out["hardware"]:
        out["reason"] = "no hardware PMU events (cycles/instructions <not supported>)"
    return out


def perf_accepts(events, perf: str | None = None) -> list[str]:
    """Those of ``events`` this host's perf knows (it may still not be able
    to count them: ``<not supported>``); an unknown name makes perf reject
    the whole event list, so each is tried alone."""
    perf = perf or shutil.which("perf")
    if perf is None:
        return []
    return [e for e in events if not isinstance(_perf_probe(perf, (e,)), str)]


def perf_missing(events) -> str | None:
    """None when ``perf stat`` counts every one of ``events`` here, else what
    is missing (perf itself, or the events it cannot count)."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed (Debian: apt-get install linux-perf)"
    samples = _perf_probe(perf, events)
    if isinstance(samples, str):
        return samples
    missing = [e for e in events if samples.get(e) is None]
    if missing:
        return (f"perf cannot count {', '.join(missing)} here (not supported by this host's "
                f"PMU: a VM without PMU passthrough, or another CPU vendor's event names)")
    return None


def fingerprint(probe_perf: bool = True) -> dict:
    """CPU model, cores/threads, kernel, scheduler, cgroup layout, resctrl, perf."""
    fp = _cpuinfo()
    try:
        layout = detect_layout()
        cg = layout.describe()
        versions = {m.version for c, m in layout.by_controller.items()
                    if c in ("cpu", "cpuacct", "cpuset")}
        cgv = "+".join(f"v{v}" for v in sorted(versions)) or None
    except OSError:
        layout, cg, cgv = None, None, None
    resctrl = resctrl_mounted()
    resctrl_fs = "resctrl" in _read("/proc/filesystems")
    pe = perf_events(probe_perf)
    fp.update({
        "kernel": platform.release(),
        "scheduler": fair_scheduler(latency_awareness=has_latency_awareness(layout)),
        "cgroup_version": cgv,
        "cgroup_layout": cg,
        "resctrl": resctrl,
        "resctrl_kernel_support": resctrl_fs,
        "perf": pe["perf"],
        "perf_software_events": pe["software"],
        "perf_hardware_events": pe["hardware"],
    })
    return fp


def resctrl_mounted() -> bool:
    return Path("/sys/fs/resctrl/schemata").exists() or any(
        line.split()[2:3] == ["resctrl"] for line in _read("/proc/mounts").splitlines())


def rdt_missing() -> str | None:
    """What keeps RDT (resctrl) from this host, in the RDT sidecar's words
    (or why the sidecar could not run); None when it is usable."""
    try:
        with RdtSidecar() as sc:
            sc.rdt_info()
    except RdtError as e:
        return e.strerror
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
