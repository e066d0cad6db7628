"""cgroup v1 and v2 control for the real-host backend.

A run owns one tree, ``colosim-<run>``, created at the top of every cgroup
hierarchy the backend needs and laid out like the scenario
(``colosim-<run>/faas.slice/func-3``).  Scenario paths (``/faas.slice/func-3``)
are translated to files per hierarchy:

=====================  ===============================  ==================================
what                   cgroup v2                         cgroup v1
=====================  ===============================  ==================================
weight (1..10000)      cpu.weight                        cpu.shares = weight * 1024 / 100
quota / period         cpu.max ("max 100000")            cpu.cfs_quota_us (-1), cpu.cfs_period_us
burst                  cpu.max.burst                     cpu.cfs_burst_us
cpuset                 cpuset.cpus (cpuset.mems)         cpuset.cpus, cpuset.mems (both required)
attach a process       cgroup.procs                      cgroup.procs (every hierarchy)
attach a thread        cgroup.threads (threaded only)    tasks
usage                  cpu.stat usage_usec               cpuacct.usage (ns)
throttling             cpu.stat nr_periods,              cpu.stat nr_periods, nr_throttled,
                       nr_throttled, throttled_usec      throttled_time (ns)
=====================  ===============================  ==================================

Safety: every write goes through :meth:`CgroupFS._write`, which refuses any
path that is not inside a ``colosim-*`` directory at the top of a known
cgroup mount (:func:`check_owned`).  Processes are only ever signalled when
they were read from a ``colosim-*`` cgroup's ``cgroup.procs``.  Nothing is
created before :func:`preflight` has checked root and the controllers.

Ownership: a run records who made its tree in ``OWNERS_DIR/<tree>.json``
(the process's pid and start time, and the name the user gave the run);
`colosim cleanup` removes only trees whose owner is gone (or unknown: made
before this record existed, or by a process that never wrote one), so it
never kills another user's live run.  /run is a tmpfs, like the cgroup
filesystems, so a reboot clears both.
"""
from __future__ import annotations

import atexit
import errno
import json
import os
import re
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from backends.host import CpuStat

PREFIX = "colosim-"
NEEDED = ("cpu", "cpuacct", "cpuset")   # cpuacct is implied by cpu on v2
_RUN_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


OWNERS_DIR = Path("/run/colosim-runs")


class CgroupError(RuntimeError):
    """Something the backend needs is missing, or a cgroup write failed."""


def _start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field
    22): with the pid, it names the process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def record_owner(tree: str, given: str, owners: Path = OWNERS_DIR) -> None:
    """Note that this process owns the cgroup tree ``tree`` (run ``given``)."""
    owners.mkdir(parents=True, exist_ok=True)
    (owners / f"{tree}.json").write_text(json.dumps(
        {"pid": os.getpid(), "start": _start_time(os.getpid()), "given": given}))


def forget_owner(tree: str, owners: Path = OWNERS_DIR) -> None:
    (owners / f"{tree}.json").unlink(missing_ok=True)


def owner_of(tree: str, owners: Path = OWNERS_DIR) -> dict | None:
    """The record of the tree's owner (pid, start, given), None if there is none."""
    try:
        return json.loads((owners / f"{tree}.json").read_text())
    except (OSError, ValueError):
        return None


def owner_alive(owner: dict | None) -> bool:
    return owner is not None and _start_time(owner["pid"]) == owner["start"]


class PathGuardError(CgroupError):
    """A write outside the ``colosim-*`` prefix was refused."""


@dataclass(frozen=True)
class Mount:
    path: Path
    version: int                  # 1 or 2
    controllers: frozenset[str]   # v1: mount options naming controllers; v2: cgroup.controllers


# Mount options of a v1 cgroup mount that are not controllers.
_V1_OPTIONS = {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr",
               "clone_children", "noprefix", "cpuset_v2_mode", "favordynmods"}


def parse_mounts(text: str, v2_controllers=None) -> list[Mount]:
    """cgroup and cgroup2 mounts from /proc/mounts text.  ``v2_controllers``
    maps a v2 mount path to its controllers (default: read cgroup.controllers)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        path = Path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup":
            opts = parts[3].split(",")
            ctrls = {o for o in opts if o not in _V1_OPTIONS and "=" not in o}
            ctrls |= {o for o in opts if o.startswith("name=")}
            mounts.append(Mount(path, 1, frozenset(ctrls)))
        elif parts[2] == "cgroup2":
            if v2_controllers is not None:
                ctrls = set(v2_controllers.get(str(path), ()))
            else:
                try:
                    ctrls = set((path / "cgroup.controllers").read_text().split())
                except OSError:
                    ctrls = set()
            mounts.append(Mount(path, 2, frozenset(ctrls)))
    return mounts


@dataclass
class Layout:
    """Which mount serves each controller.  On v2 perf_event is implicit
    (always on), so it lives on the v2 mount unless a v1 mount claims it."""
    mounts: list[Mount]
    by_controller: dict[str, Mount] = field(default_factory=dict)

    @classmethod
    def from_mounts(cls, mounts: list[Mount]) -> "Layout":
        lay = cls(mounts)
        v2 = [m for m in mounts if m.version == 2]
        for m in mounts:
            if m.version == 1:
                for c in m.controllers:
                    lay.by_controller.setdefault(c, m)
        for m in v2[:1]:
            for c in m.controllers | {"perf_event"}:
                lay.by_controller.setdefault(c, m)
            if "cpu" in m.controllers:   # cpu.stat usage_usec replaces cpuacct on v2
                lay.by_controller.setdefault("cpuacct", m)
        return lay

    def version(self, controller: str) -> int:
        return self.by_controller[controller].version

    def describe(self) -> str:
        v1 = sorted(c for c, m in self.by_controller.items() if m.version == 1
                    and not c.startswith("name="))
        v2 = sorted(c for c, m in self.by_controller.items() if m.version == 2)
        parts = []
        if v1:
            parts.append("v1: " + ",".join(v1))
        if v2:
            parts.append("v2: " + ",".join(v2))
        return "; ".join(parts) or "no cgroup mounts"


def detect_layout(mounts_file: str | os.PathLike = "/proc/mounts") -> Layout:
    return Layout.from_mounts(parse_mounts(Path(mounts_file).read_text()))


def check_owned(path: Path, mounts: list[Mount]) -> Path:
    """The one place that decides whether colosim may write ``path``: it
    must lie strictly inside a ``colosim-*`` directory at the top of a
    cgroup mount.  Returns the normalised path or raises PathGuardError."""
    p = Path(os.path.normpath(os.path.abspath(path)))
    # the deepest mount containing the path decides
    for m in sorted(mounts, key=lambda m: len(Path(m.path).parts), reverse=True):
        root = Path(os.path.normpath(m.path))
        try:
            rel = p.relative_to(root)
        except ValueError:
            continue
        if rel.parts and rel.parts[0].startswith(PREFIX) and rel.parts[0] != PREFIX:
            return p
        break
    raise PathGuardError(f"refusing to write {p}: colosim writes only inside "
                         f"{PREFIX}* cgroups at the top of a cgroup mount")


def preflight(layout: Layout, needed=NEEDED, *, require_root: bool = True) -> None:
    """Raise CgroupError naming everything missing, before anything is created."""
    missing = []
    if require_root and os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()}; cgroup files under "
                       f"/sys/fs/cgroup are writable only by root)")
    for c in needed:
        m = layout.by_controller.get(c)
        if m is None:
            missing.append(f"the {c} controller (mounted: {layout.describe()})")
        elif m.version == 2 and c != "perf_event":
            try:
                enabled = (m.path / "cgroup.subtree_control").read_text().split()
            except OSError:
                enabled = []
            if c != "cpuacct" and c not in enabled:
                missing.append(f"the {c} controller enabled for children of the cgroup2 "
                               f"root ({m.path / 'cgroup.subtree_control'} has: "
                               f"{' '.join(enabled) or 'nothing'}; colosim does not write "
                               f"outside its own prefix, so enable it with "
                               f"`echo +{c} > {m.path / 'cgroup.subtree_control'}`)")
    if missing:
        raise CgroupError("the real backend cannot run here; missing: " + "; ".join(missing))


def _kill_and_wait(procs_file: Path, timeout_s: float = 3.0) -> list[int]:
    """SIGKILL every process listed in a colosim cgroup's cgroup.procs (never
    ourselves) until the file reads empty.  Returns the pids signalled."""
    killed: list[int] = []
    me = os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pids = [int(x) for x in procs_file.read_text().split()]
        except FileNotFoundError:
            return killed
        except OSError as e:
            if e.errno == errno.EOPNOTSUPP:
                return killed     # a v2 threaded cgroup: its threaded root lists the processes
            raise
        pids = [p for p in pids if p not in (me, 1)]
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                if pid not in killed:
                    killed.append(pid)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise CgroupError(f"processes {pids} in {procs_file.parent} did not exit")
        time.sleep(0.02)


def _remove_tree(top: Path, mounts: list[Mount]) -> tuple[list[Path], list[int]]:
    """Kill what runs in ``top`` and below, then rmdir bottom-up."""
    check_owned(top / "x", mounts)
    removed: list[Path] = []
    killed: list[int] = []
    if not top.is_dir():
        return removed, killed
    dirs = [Path(d) for d, _, _ in os.walk(top)]
    for d in dirs:
        for f in ("cgroup.procs",):
            pf = d / f
            if pf.exists():
                killed += [p for p in _kill_and_wait(pf) if p not in killed]
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        for attempt in range(100):
            try:
                d.rmdir()
                removed.append(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno == errno.EBUSY and attempt < 99:
                    _kill_and_wait(d / "cgroup.procs")
                    time.sleep(0.02)
                    continue
                raise CgroupError(f"cannot remove {d}: {e}") from e
    return removed, killed


def tree_pids(top: Path) -> list[int]:
    """Processes in a cgroup tree (read only)."""
    pids: list[int] = []
    for d, _, _ in os.walk(top):
        try:
            pids += [int(x) for x in (Path(d) / "cgroup.procs").read_text().split()]
        except OSError:
            pass
    return pids


def remove_tree(top: Path, layout: Layout) -> tuple[list[Path], list[int]]:
    """Kill the processes in one colosim-* tree, then rmdir it bottom-up."""
    return _remove_tree(top, layout.mounts)


def find_leftovers(layout: Layout | None = None) -> list[Path]:
    """Every ``colosim-*`` cgroup at the top of every cgroup mount."""
    layout = layout or detect_layout()
    found = []
    for m in layout.mounts:
        try:
            found += sorted(p for p in m.path.iterdir()
                            if p.is_dir() and p.name.startswith(PREFIX) and p.name != PREFIX)
        except OSError:
            continue
    return found


@dataclass
class Leftover:
    """One run's ``colosim-*`` tree found by `colosim cleanup`."""
    tree: str
    dirs: list[Path]            # the tree's top directory in each hierarchy
    owner: dict | None          # its owner record (owner_of)
    live: bool                  # the owner is still running: not a leftover


def leftovers(layout: Layout | None = None, given: str | None = None,
              owners: Path = OWNERS_DIR) -> list[Leftover]:
    """The ``colosim-*`` trees, each with its owner, optionally only those of
    the run ``given``: its tree name (with or without the prefix), or the
    name the user gave it (``output_dir``'s name), which the tree's name
    carries with a random suffix."""
    trees: dict[str, list[Path]] = {}
    for d in find_leftovers(layout):
        trees.setdefault(d.name, []).append(d)
    found = []
    for tree, dirs in sorted(trees.items()):
        owner = owner_of(tree, owners)
        if given is not None and not (
                tree in (given, PREFIX + given) or (owner or {}).get("given") == given
                or re.fullmatch(re.escape(PREFIX + safe_name(given)) + r"-[0-9a-f]{6}", tree)):
            continue
        found.append(Leftover(tree, dirs, owner, owner_alive(owner)))
    return found


def safe_name(given: str) -> str:
    """A run's name as cgroup names may spell it."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", given)[:80] or "run"


def tree_name(given: str) -> str:
    """The tree of a run the user named ``given``: a random suffix keeps two
    runs of one name apart."""
    return f"{safe_name(given)}-{uuid.uuid4().hex[:6]}"


# --- clean-up on exit, SIGINT and SIGTERM -------------------------------------
_LIVE: list["CgroupFS"] = []
_HANDLERS_INSTALLED = False
_LOCK = threading.Lock()


def _cleanup_live() -> None:
    for cg in list(_LIVE):
        try:
            cg.remove()
        except Exception as e:  # noqa: BLE001 - best effort at exit; report it
            print(f"colosim: cleanup of {cg.name} failed: {e}; run `colosim cleanup`",
                  file=__import__("sys").stderr)


def _install_handlers() -> None:
    """atexit covers normal exit and SIGINT (KeyboardInterrupt unwinds to
    exit); SIGTERM is turned into a clean-up then the default action."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_cleanup_live)
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        _cleanup_live()
        if callable(previous):
            previous(signum, frame)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class CgroupFS:
    """One run's ``colosim-<run>`` tree in every needed hierarchy.

    ``needed`` lists the controllers the run uses (``perf_event`` adds the
    hierarchy ``perf stat -G`` reads).  Creation is lazy and idempotent:
    :meth:`create` makes a scenario cgroup and its parents.  ``mounts_text``
    and ``require_root=False`` let tests drive a fake cgroupfs in a temp dir.
    """

    def __init__(self, run: str, needed=NEEDED + ("perf_event",), *,
                 mounts_text: str | None = None, v2_controllers=None,
                 require_root: bool = True, cleanup_on_exit: bool = True,
                 given: str | None = None):
        if not _RUN_NAME.match(run):
            raise ValueError(f"run name {run!r}: use letters, digits, '_', '.', '-'")
        self.run = run
        self.name = run if run.startswith(PREFIX) else PREFIX + run
        text = mounts_text if mounts_text is not None else Path("/proc/mounts").read_text()
        self.layout = Layout.from_mounts(parse_mounts(text, v2_controllers))
        required = tuple(c for c in needed if c != "perf_event")
        preflight(self.layout, required, require_root=require_root)
        self.controllers = {c: self.layout.by_controller[c] for c in needed
                            if c in self.layout.by_controller}
        # distinct hierarchies, in a stable order
        self.hierarchies: list[Mount] = []
        for m in self.controllers.values():
            if m not in self.hierarchies:
                self.hierarchies.append(m)
        stale = [m.path / self.name for m in self.hierarchies if (m.path / self.name).exists()]
        if stale:
            raise CgroupError(f"{', '.join(map(str, stale))} already exist(s): another run of "
                              f"that name is live, or one crashed (`colosim cleanup --run "
                              f"{self.name.removeprefix(PREFIX)}` removes it)")
        self._created: set[str] = set()
        self._owned = mounts_text is None     # a fake cgroupfs has no owner record
        if self._owned:
            record_owner(self.name, given or run)
        if cleanup_on_exit:
            with _LOCK:
                _LIVE.append(self)
            _install_handlers()

    # --- paths ------------------------------------------------------------
    @staticmethod
    def norm(cgroup: str) -> str:
        parts = [p for p in cgroup.strip("/").split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"cgroup {cgroup!r}: '.' and '..' are not allowed")
        return "/".join(parts)

    def dir(self, controller: str, cgroup: str = "") -> Path:
        rel = self.norm(cgroup)
        base = self.controllers[controller].path / self.name
        return base / rel if rel else base

    def perf_name(self, cgroup: str) -> str:
        """The name ``perf stat -G`` takes: the path below the perf_event mount."""
        if "perf_event" not in self.controllers:
            raise CgroupError("no perf_event hierarchy: per-cgroup perf counts are unavailable")
        rel = self.norm(cgroup)
        return f"{self.name}/{rel}" if rel else self.name

    # --- low-level I/O ----------------------------------------------------
    def _write(self, path: Path, value: str) -> None:
        p = check_owned(path, self.layout.mounts)
        try:
            with open(p, "w") as f:
                f.write(value)
        except OSError as e:
            raise CgroupError(f"writing {value!r} to {p}: {e.strerror or e}") from e

    def _mkdir(self, path: Path) -> None:
        p = check_owned(path, self.layout.mounts)
        p.mkdir(exist_ok=True)

    @staticmethod
    def _read(path: Path) -> str:
        return path.read_text()

    # --- tree -------------------------------------------------------------
    def create(self, cgroup: str = "") -> None:
        """mkdir the scenario cgroup (and parents) in every hierarchy."""
        rel = self.norm(cgroup)
        parts = rel.split("/") if rel else []
        for i in range(len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self._created and self.dir(next(iter(self.controllers)), sub).is_dir():
                continue
            for m in self.hierarchies:
                d = (m.path / self.name / sub) if sub else m.path / self.name
                self._mkdir(d)
                if m.version == 1 and "cpuset" in m.controllers:
                    self._init_v1_cpuset(d)
                if m.version == 2:
                    self._enable_v2_children(d.parent if sub else None, d)
            self._created.add(sub)

    def _init_v1_cpuset(self, d: Path) -> None:
        # A new v1 cpuset is empty; it must get cpus and mems before tasks join.
        for f in ("cpuset.cpus", "cpuset.mems"):
            if not (d / f).exists():   # fake cgroupfs in tests
                val = self.read_or(d.parent / f, "")
                self._write(d / f, val.strip() or "0")
                continue
            if not (d / f).read_text().strip():
                self._write(d / f, (d.parent / f).read_text().strip())

    def _enable_v2_children(self, parent: Path | None, d: Path) -> None:
        """Enable our v2 controllers for the children of ``parent`` (inside the
        tree only; the root's subtree_control was checked by preflight)."""
        if parent is None:
            return
        ctrls = [c for c, m in self.controllers.items() if m.version == 2
                 and c in ("cpu", "cpuset") and c in m.controllers]
        sc = parent / "cgroup.subtree_control"
        have = self.read_or(sc, "").split()
        todo = [c for c in ctrls if c not in have]
        if todo:
            self._write(sc, " ".join("+" + c for c in todo))

    @staticmethod
    def read_or(path: Path, default: str) -> str:
        """A file's text, or ``default`` if it cannot be read (absent in a
        fake tree, or a file this kernel does not have)."""
        try:
            return path.read_text()
        except OSError:
            return default

    def remove(self) -> tuple[list[Path], list[int]]:
        """Kill remaining processes, rmdir bottom-up in every hierarchy."""
        removed: list[Path] = []
        killed: list[int] = []
        for m in self.hierarchies:
            r, k = _remove_tree(m.path / self.name, self.layout.mounts)
            removed += r
            killed += [p for p in k if p not in killed]
        self._created.clear()
        if self._owned and not any((m.path / self.name).exists() for m in self.hierarchies):
            forget_owner(self.name)
        with _LOCK:
            if self in _LIVE:
                _LIVE.remove(self)
        return removed, killed

    def __enter__(self) -> "CgroupFS":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    # --- levers -------------------------------------------------------------
    def set_weight(self, cgroup: str, weight: int) -> None:
        """cgroup v2 weight 1..10000 (100 = default); v1 cpu.shares = weight*1024/100."""
        if not 1 <= weight <= 10000:
            raise ValueError(f"cpu weight {weight}: allowed 1..10000")
        if self.layout.version("cpu") == 2:
            self._write(self.dir("cpu", cgroup) / "cpu.weight", str(int(weight)))
        else:
            self._write(self.dir("cpu", cgroup) / "cpu.shares", str(weight_to_shares(weight)))

    def set_shares(self, cgroup: str, shares: int) -> None:
        """v1 cpu.shares directly (v2: converted to the nearest weight)."""
        if self.layout.version("cpu") == 2:
            self.set_weight(cgroup, shares_to_weight(shares))
        else:
            self._write(self.dir("cpu", cgroup) / "cpu.shares", str(int(shares)))

    def set_cpu_max(self, cgroup: str, quota_us: int | None, period_us: int = 100_000,
                    burst_us: int = 0) -> None:
        """Bandwidth control: quota None is unlimited.  Burst is cleared first
        (the kernel refuses a quota below the burst in force), then set last."""
        if quota_us is not None and quota_us < 1000:
            raise ValueError(f"quota {quota_us} us: the kernel needs at least 1000 us")
        if not 1000 <= period_us <= 1_000_000:
            raise ValueError(f"period {period_us} us: allowed 1000..1000000")
        if burst_us and (quota_us is None or burst_us > quota_us):
            raise ValueError(f"burst {burst_us} us needs a quota >= the burst")
        d = self.dir("cpu", cgroup)
        if self.layout.version("cpu") == 2:
            if (d / "cpu.max.burst").exists():
                self._write(d / "cpu.max.burst", "0")
            self._write(d / "cpu.max", f"{'max' if quota_us is None else int(quota_us)} "
                                       f"{int(period_us)}")
            if burst_us:
                self._write(d / "cpu.max.burst", str(int(burst_us)))
        else:
            if (d / "cpu.cfs_burst_us").exists():
                self._write(d / "cpu.cfs_burst_us", "0")
            self._write(d / "cpu.cfs_period_us", str(int(period_us)))
            self._write(d / "cpu.cfs_quota_us", "-1" if quota_us is None else str(int(quota_us)))
            if burst_us:
                self._write(d / "cpu.cfs_burst_us", str(int(burst_us)))

    def set_cpuset(self, cgroup: str, cpus: str, mems: str | None = None) -> None:
        """cpuset.cpus (and cpuset.mems; v1 needs both: they start as the
        parent's when the cgroup is created).  v1 requires a child's cpus
        within its parent's, so descendants in the tree whose cpus are not
        inside ``cpus`` are narrowed first (to their overlap with ``cpus``,
        or to ``cpus`` when there is none)."""
        d = self.dir("cpuset", cgroup)
        m = self.controllers["cpuset"]
        if m.version == 1:
            new = parse_cpulist(cpus)
            subdirs = sorted((Path(p) for p, _, _ in os.walk(d) if Path(p) != d),
                             key=lambda p: len(p.parts), reverse=True)
            for sub in subdirs:   # bottom-up: a child never exceeds its parent
                have = parse_cpulist(self.read_or(sub / "cpuset.cpus", ""))
                if not have <= new:
                    self._write(sub / "cpuset.cpus", format_cpulist((have & new) or new))
        if mems is not None:
            self._write(d / "cpuset.mems", mems)
        self._write(d / "cpuset.cpus", cpus)

    def attach(self, cgroup: str, pid: int) -> None:
        """Move a whole process (all its threads) into ``cgroup`` in every hierarchy."""
        if pid in (0, os.getpid()):
            # Moving ourselves would get us killed by remove().
            raise CgroupError("refusing to attach the colosim process itself to a run cgroup")
        for m in self.hierarchies:
            d = m.path / self.name / self.norm(cgroup)
            self._write(d / "cgroup.procs", str(int(pid)))

    def procs_files(self, cgroup: str) -> list[str]:
        """The ``cgroup.procs`` files of ``cgroup`` in every hierarchy, checked
        to be inside the run's tree: a child writes its own pid to them before
        exec (backends/real/jobs.py), which ``attach`` refuses to do for us."""
        return [str(check_owned(m.path / self.name / self.norm(cgroup) / "cgroup.procs",
                                self.layout.mounts)) for m in self.hierarchies]

    def make_threaded(self, cgroup: str) -> None:
        """v2: make ``cgroup`` and its ancestors below the run's top threaded
        (``cgroup.type``), so :meth:`attach_thread` can move single threads
        of a process living higher in the tree there (the top becomes
        "domain threaded"); v1 places threads anywhere, so nothing to do."""
        parts = self.norm(cgroup).split("/") if self.norm(cgroup) else []
        for m in self.hierarchies:
            if m.version != 2:
                continue
            for i in range(1, len(parts) + 1):
                t = m.path / self.name / "/".join(parts[:i]) / "cgroup.type"
                if self.read_or(t, "").strip() != "threaded":
                    self._write(t, "threaded")

    def attach_thread(self, cgroup: str, tid: int) -> None:
        """Move one thread: v1 ``tasks``; v2 ``cgroup.threads`` (the cgroup must
        be threaded: :meth:`make_threaded`)."""
        for m in self.hierarchies:
            d = m.path / self.name / self.norm(cgroup)
            self._write(d / ("tasks" if m.version == 1 else "cgroup.threads"), str(int(tid)))

    # --- reads --------------------------------------------------------------
    def pids(self, cgroup: str) -> list[int]:
        return [int(x) for x in self._read(self.dir("cpu", cgroup) / "cgroup.procs").split()]

    def threads(self, cgroup: str, below: bool = False) -> list[int]:
        """Thread ids in ``cgroup`` (``below``: and in its descendants)."""
        m = self.controllers["cpu"]
        f = "tasks" if m.version == 1 else "cgroup.threads"
        top = self.dir("cpu", cgroup)
        dirs = [Path(d) for d, _, _ in os.walk(top)] if below else [top]
        return [int(x) for d in dirs for x in self._read(d / f).split()]

    def usage_ns(self, cgroup: str) -> int:
        """Hierarchical CPU time: v1 cpuacct.usage; v2 cpu.stat usage_usec."""
        if self.layout.version("cpuacct") == 1:
            return int(self._read(self.dir("cpuacct", cgroup) / "cpuacct.usage"))
        return read_kv(self._read(self.dir("cpu", cgroup) / "cpu.stat"))["usage_usec"] * 1000

    def cpu_stat_raw(self, cgroup: str) -> dict[str, int]:
        return read_kv(self._read(self.dir("cpu", cgroup) / "cpu.stat"))

    def cpu_stat(self, cgroup: str) -> CpuStat:
        return cpu_stat_from(self.cpu_stat_raw(cgroup))

    def cpu_max(self, cgroup: str) -> tuple[int | None, int, int]:
        """(quota_us or None, period_us, burst_us) in force."""
        d = self.dir("cpu", cgroup)
        if self.layout.version("cpu") == 2:
            q, p = self._read(d / "cpu.max").split()
            burst = int(self.read_or(d / "cpu.max.burst", "0").strip() or 0)
            return (None if q == "max" else int(q)), int(p), burst
        quota = int(self._read(d / "cpu.cfs_quota_us"))
        period = int(self._read(d / "cpu.cfs_period_us"))
        burst = int(self.read_or(d / "cpu.cfs_burst_us", "0").strip() or 0)
        return (None if quota < 0 else quota), period, burst


def parse_cpulist(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def format_cpulist(cpus: set[int]) -> str:
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def weight_to_shares(weight: int) -> int:
    return max(2, int(weight) * 1024 // 100)


def shares_to_weight(shares: int) -> int:
    return min(10000, max(1, round(int(shares) * 100 / 1024)))


def read_kv(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def cpu_stat_from(kv: dict[str, int]) -> CpuStat:
    """v1 throttled_time is ns, v2 throttled_usec is us; CpuStat uses v2 names."""
    if "throttled_usec" in kv:
        thr = kv["throttled_usec"]
    else:
        thr = kv.get("throttled_time", 0) // 1000
    return CpuStat(kv.get("nr_periods", 0), kv.get("nr_throttled", 0), thr)
