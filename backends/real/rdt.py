"""The RDT sidecar (backends/rdt-sidecar/, Go on intel/goresctrl): building
it, and one supervised sidecar process that creates resctrl classes (L3
CAT masks, MBA percent), assigns processes to them and reads CMT/MBM.

Protocol: JSON lines on the sidecar's stdin/stdout, one response per
request, in order (backends/rdt-sidecar/README.md has every field)::

    {"id": 1, "op": "capabilities"}
    {"id": 2, "op": "configure", "classes": {"hi": {"l3": {"0": 2032}, "mb": 50}}, "force": false}
    {"id": 3, "op": "assign", "class": "hi", "pids": [1234]}
    {"id": 4, "op": "pids", "class": "hi"}        {"id": 5, "op": "classes"}
    {"id": 6, "op": "monitor", "class": "hi"}     {"id": 7, "op": "cleanup"}
    {"id": 8, "op": "root", "l3": {"0": 15}}      (the root group's schemata)
    -> {"id": N, "ok": true, ...} | {"id": N, "ok": false, "error": "...", "errno": 22, ...}

``configure`` is declarative (goresctrl's model): it gives the whole set of
classes, and the sidecar removes its groups that are not in it.  This
supervisor therefore keeps the classes it has configured and sends the full
set on every change; a rejected change is rolled back by the sidecar, so the
Host protocol's "all or nothing" holds.

How the real host uses it (backends/real/host.py, run.py, cli/main.py)::

    rdt = RdtSidecar(prefix=f"colosim-{run_id}-", pids_of=cgroup_pids)
    caps = rdt.capabilities()   # caps["resctrl"] False: caps["reason"] says
                                # what is missing; every rdt_* then raises
                                # RdtError(ENODEV) with that reason
    RealHost.rdt_info / rdt_create_class / rdt_update_class / rdt_remove_class
        / rdt_assign / rdt_class_of / rdt_mon  ->  the same methods here
    on exit, SIGINT, SIGTERM:  rdt.close(cleanup=True)
    colosim cleanup:           RdtSidecar(prefix="colosim-").close(cleanup=True)
                               -> the class names it removed ([] without resctrl)

``pids_of(cgroup)`` maps a Host cgroup name ("/faas/func-3") to the pids of
its processes (cgroup.procs); every thread of each is moved (resctrl moves
one task per write).  Threads and processes created later inherit the class
of the task that creates them, so a worker started after ``rdt_assign`` by
anything else than an assigned task needs another ``rdt_assign``.  A
per-run prefix keeps concurrent runs apart: the sidecar only sees and
removes groups under its own prefix ("colosim-" sees every run's).

The root group (system/default, every other process of the host) is
written only through ``rdt_update_class("")`` (op ``root``): a policy that
gives classes exclusive ways must take them from the root group first.  The
sidecar saves the root's schemata before its first write (also in
/run/colosim-rdt/<prefix>root.schemata) and restores them at cleanup, or at
``colosim cleanup`` if the run's sidecar died first.

Semantics follow SimHost (backends/simhost.py): MB percentages are rounded
up to info/MB/bandwidth_gran here, as the kernel does (the sidecar itself
refuses values it would have to change); MB is left out on hosts without
MBA; errors are RdtError(errno, message) with resctrl's own wording where
resctrl gave one ("The mask 5 has non-consecutive 1-bits", "Out of
CLOSIDs"), and ``e.detail`` says more.
"""
from __future__ import annotations

import errno
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from backends.host import RdtError, RdtLimits
from backends.real.build import atomic_binary
from backends.real.perf import die_with_parent

SIDECAR_DIR = Path(__file__).resolve().parents[1] / "rdt-sidecar"
BUILT = SIDECAR_DIR / "build" / "colosim-rdt-sidecar"
EMULATOR_BUILT = SIDECAR_DIR / "build" / "colosim-resctrl-emu"
EMULATOR_LAUNCHER = SIDECAR_DIR / "emulator" / "with-emulated-resctrl.sh"
BUILD_TIMEOUT_S = 900     # the first build downloads goresctrl's modules and compiles them


def go_command() -> str | None:
    """The go tool: on PATH, or the official tarball's /usr/local/go/bin/go."""
    found = shutil.which(os.environ.get("GO", "go"))
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if fallback.is_file() and os.access(fallback, os.X_OK) else None


def _sources(package: str) -> list[Path]:
    files = [SIDECAR_DIR / "go.mod", SIDECAR_DIR / "go.sum"]
    pkg_dir = SIDECAR_DIR if package == "." else SIDECAR_DIR / package
    pattern = "*.go" if package == "." else "**/*.go"
    return files + [p for p in pkg_dir.glob(pattern) if not p.name.endswith("_test.go")]


def _go_build(package: str, out: Path, force: bool) -> Path:
    """``go build -o out package`` in backends/rdt-sidecar unless ``out`` is
    newer than every source.  Atomic: a temp file renamed into place."""
    out = Path(out)
    sources = _sources(package)
    if not force and out.exists() and all(out.stat().st_mtime >= s.stat().st_mtime
                                          for s in sources if s.exists()):
        return out
    go = go_command()
    if go is None:
        raise RdtError(errno.ENOENT, f"go is needed to build {out.name} from {SIDECAR_DIR} "
                                     f"(https://go.dev/dl/, or Debian: apt-get install golang-go); "
                                     f"or run `make rdt-sidecar` where go exists")
    with atomic_binary(out) as tmp:
        try:
            r = subprocess.run([go, "build", "-o", tmp, package], cwd=SIDECAR_DIR,
                               capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RdtError(errno.ETIMEDOUT, f"go build of {out.name} took over "
                                            f"{BUILD_TIMEOUT_S}s") from None
        if r.returncode != 0:
            raise RdtError(errno.EIO, f"go build of {out.name} failed:\n{r.stderr.strip()}")
    return out


def build_sidecar(out: Path = BUILT, force: bool = False) -> Path:
    """Build the sidecar (what `make rdt-sidecar` does) unless it is up to date."""
    return _go_build(".", out, force)


def build_emulator(out: Path = EMULATOR_BUILT, force: bool = False) -> Path:
    """Build the FUSE resctrl emulator used by the tests (never by a run)."""
    return _go_build("./emulator", out, force)


def sidecar_binary(path: str | os.PathLike | None = None) -> Path:
    """The sidecar binary: ``path`` if given (must be executable), else the built one."""
    if path:
        p = Path(path)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise RdtError(errno.ENOENT, f"RDT sidecar {path}: not an executable file")
        return p
    return build_sidecar()


def _error(resp: dict) -> RdtError:
    code = resp.get("errno")
    e = RdtError(code if isinstance(code, int) and code > 0 else errno.EIO,
                 str(resp.get("error", "the RDT sidecar failed without a message")))
    e.detail = resp.get("detail", "")
    return e


def _domains(value: int | dict[int, int]) -> int | dict[str, int]:
    if isinstance(value, dict):
        return {str(int(d)): int(v) for d, v in value.items()}
    return int(value)


class RdtSidecar:
    """One sidecar process; restarted on the next request if it died or was
    killed after a timeout.  Not thread-safe: one caller at a time."""

    def __init__(self, binary: str | os.PathLike | None = None, prefix: str = "colosim-", *,
                 pids_of: Callable[[str], Iterable[int]] | None = None,
                 timeout_s: float = 10.0, command_prefix: Iterable[str] = (),
                 args: Iterable[str] | None = None, env: dict[str, str] | None = None):
        """``command_prefix`` runs the sidecar through a wrapper (the tests'
        emulated resctrl); ``args`` replaces its arguments (default
        ``--prefix PREFIX``)."""
        if not prefix.startswith("colosim-"):
            raise ValueError(f"prefix {prefix!r} must start with 'colosim-'")
        self.binary = sidecar_binary(binary)
        self.prefix = prefix
        self.timeout_s = float(timeout_s)
        self._pids_of = pids_of
        self._argv = [*command_prefix, str(self.binary),
                      *(["--prefix", prefix] if args is None else list(args))]
        self._env = env
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._buf = b""
        self._next_id = 0
        self._classes: dict[str, dict] = {}     # what the sidecar was last configured with
        self._root: dict = {}                   # the root group's spec written so far
        self.root_restored = False              # by the last cleanup
        self._limits: RdtLimits | None = None

    # ---- the process -----------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The sidecar's pid (wrappers exec it, so it is theirs too), or None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, bufsize=0, env=self._env,
                                      preexec_fn=lambda: die_with_parent(signal.SIGKILL))
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._buf = b""

    def _stderr_tail(self, n: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")[-n:].strip()
        except (OSError, ValueError):
            return ""

    def _stop(self, grace_s: float = 2.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()                    # EOF: the sidecar exits by itself
        except OSError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
        for f in (proc.stdout, self._stderr):
            try:
                f.close()
            except (OSError, AttributeError):
                pass
        self._stderr = None

    def close(self, cleanup: bool = False) -> list[str]:
        """Stop the sidecar (EOF, then SIGKILL after 2 s).  With ``cleanup``
        first remove every class under the prefix (their tasks go back to
        the root group) and return their names; nothing to remove on a host
        without resctrl.  Idempotent."""
        removed: list[str] = []
        try:
            if cleanup:
                try:
                    removed = self.cleanup()
                except RdtError as e:
                    if e.errno != errno.ENODEV:
                        raise
        finally:
            self._stop()
        return removed

    def __enter__(self) -> "RdtSidecar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _readline(self, deadline: float) -> bytes | None:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return b""                        # EOF: the sidecar exited
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def request(self, op: str, timeout_s: float | None = None, **fields) -> dict:
        """Send one request, wait for its response (at most ``timeout_s``,
        default the constructor's), raise RdtError if it failed.  A sidecar
        that died (or was killed after a timeout) is restarted first, and
        given the classes configured so far again: a later failed configure
        then rolls back to them, not to nothing."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
            if self._classes:
                self._exchange("configure", timeout_s, {"classes": self._classes, "force": False})
        return self._exchange(op, timeout_s, fields)

    def _exchange(self, op: str, timeout_s: float | None, fields: dict) -> dict:
        self._next_id += 1
        rid = self._next_id
        data = json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            os.write(self._proc.stdin.fileno(), data)
        except (BrokenPipeError, OSError):
            line = b""
        else:
            line = self._readline(time.monotonic() + timeout)
        if line is None:
            self._stop(grace_s=0)
            raise RdtError(errno.ETIMEDOUT, f"the RDT sidecar did not answer {op!r} within "
                                            f"{timeout:g} s; it was killed (restarted on the "
                                            f"next request)")
        if not line:
            try:
                code = self._proc.wait(2)
            except subprocess.TimeoutExpired:
                code = None
            tail = self._stderr_tail()
            self._stop(grace_s=0)
            raise RdtError(errno.EIO, f"the RDT sidecar exited (code {code}) during {op!r}"
                                      + (f": {tail}" if tail else ""))
        try:
            resp = json.loads(line)
        except ValueError:
            self._stop(grace_s=0)
            raise RdtError(errno.EIO, f"the RDT sidecar answered {op!r} with a line that is "
                                      f"not JSON: {line[:200]!r}") from None
        if not isinstance(resp, dict) or resp.get("id") != rid:
            self._stop(grace_s=0)
            raise RdtError(errno.EIO, f"the RDT sidecar answered request {rid} ({op!r}) with "
                                      f"{str(resp)[:200]}")
        if not resp.get("ok"):
            raise _error(resp)
        return resp

    # ---- the protocol's operations --------------------------------------------------
    def capabilities(self) -> dict:
        """What resctrl offers; ``resctrl`` False with ``reason`` and
        ``missing`` when it is unavailable."""
        return self.request("capabilities")

    def configure(self, classes: dict[str, dict], force: bool = False) -> dict:
        """The whole set of classes (the sidecar's JSON class specs)."""
        resp = self.request("configure", classes=classes, force=force)
        self._classes = {name: dict(spec) for name, spec in classes.items()}
        return resp

    def assign_pids(self, name: str, pids: Iterable[int]) -> dict:
        """Move every thread of the processes to class ``name`` ("" = root)."""
        return self.request("assign", **{"class": name, "pids": [int(p) for p in pids]})

    def pids(self, name: str) -> list[int]:
        """The class's tasks file (thread ids)."""
        return self.request("pids", **{"class": name})["pids"]

    def classes(self) -> dict[str, dict]:
        """Every class under the prefix: pids, schemata, mode."""
        return self.request("classes")["classes"]

    def monitor(self, name: str) -> dict:
        return self.request("monitor", **{"class": name})

    def cleanup(self) -> list[str]:
        """Remove every class under the prefix and give the root group back
        the schemata it had before the first ``root``; the names removed."""
        resp = self.request("cleanup")
        self._classes = {}
        self._root = {}
        # whether the root group got back schemata this or a crashed run saved
        self.root_restored = bool(resp.get("root_restored"))
        return resp["removed"]

    # ---- the Host protocol's RDT actuators ----------------------------------------------
    def rdt_info(self) -> RdtLimits:
        caps = self.capabilities()
        if not caps.get("resctrl"):
            raise RdtError(errno.ENODEV, caps.get("reason", "RDT unavailable"))
        l3, mb = caps.get("l3") or {}, caps.get("mb") or {}
        domains = tuple(l3.get("cache_ids") or mb.get("cache_ids") or ())
        self._limits = RdtLimits(ways=int(l3.get("ways", 0)), domains=domains,
                                 num_closids=int(caps.get("num_closids", 0)),
                                 min_cbm_bits=int(l3.get("min_cbm_bits", 0)),
                                 mba_min=int(mb.get("min_bandwidth", 0)) if mb else 0,
                                 mba_gran=int(mb.get("bandwidth_gran", 0)) if mb else 0)
        return self._limits

    def _mb(self, mb_percent: int | dict[int, int]) -> int | dict[str, int] | None:
        """MB for the sidecar: values in [min, 100] rounded up to the
        granularity like the kernel (and SimHost); None on hosts without
        MBA, where SimHost ignores it."""
        lim = self._limits or self.rdt_info()
        if not lim.mba_gran:
            return None
        g = lim.mba_gran

        def up(v):   # as bw_validate: the range is checked before rounding
            v = int(v)
            return -(-v // g) * g if lim.mba_min <= v <= 100 else v
        if isinstance(mb_percent, dict):
            return {str(int(d)): up(v) for d, v in mb_percent.items()}
        return up(mb_percent)

    def _merge(self, old, new):
        """A per-domain update on top of the old value(s) (None keeps nothing)."""
        if not isinstance(new, dict) or old is None:
            return new
        if not isinstance(old, dict):
            lim = self._limits or self.rdt_info()
            old = {str(d): old for d in lim.domains}
        return {**old, **new}

    def _apply(self, classes: dict[str, dict], force: bool) -> None:
        self.configure(classes, force=force)

    def rdt_create_class(self, name: str, l3_cbm: int | dict[int, int],
                         mb_percent: int | dict[int, int] = 100, exclusive: bool = False) -> None:
        if name in self._classes:
            raise RdtError(errno.EEXIST, f"{name!r} exists")
        spec: dict = {"l3": _domains(l3_cbm), "exclusive": bool(exclusive)}
        mb = self._mb(mb_percent)
        if mb is not None:
            spec["mb"] = mb
        self._apply({**self._classes, name: spec}, force=False)

    def rdt_update_class(self, name: str, l3_cbm: int | dict[int, int] | None = None,
                         mb_percent: int | dict[int, int] | None = None) -> None:
        if name == "":
            spec = self._updated(self._root, l3_cbm, mb_percent)
            self.request("root", **spec)
            self._root = spec
            return
        if name not in self._classes:
            raise RdtError(errno.ENOENT, f"no resctrl group {name!r}")
        spec = self._updated(self._classes[name], l3_cbm, mb_percent)
        self._apply({**self._classes, name: spec}, force=False)

    def _updated(self, spec: dict, l3_cbm, mb_percent) -> dict:
        """``spec`` with the given resources rewritten (None keeps one)."""
        spec = dict(spec)
        if l3_cbm is not None:
            spec["l3"] = self._merge(spec.get("l3"), _domains(l3_cbm))
        if mb_percent is not None:
            mb = self._mb(mb_percent)
            if mb is not None:
                spec["mb"] = self._merge(spec.get("mb", 100), mb)
        return spec

    def rdt_remove_class(self, name: str) -> None:
        if name not in self._classes:
            raise RdtError(errno.ENOENT, f"no resctrl group {name!r}")
        self._apply({n: s for n, s in self._classes.items() if n != name}, force=True)

    def _cgroup_pids(self, cgroup: str) -> list[int]:
        if self._pids_of is None:
            raise ValueError("RdtSidecar(pids_of=...) is needed to map cgroups to processes")
        return [int(p) for p in self._pids_of(cgroup)]

    def rdt_assign(self, cgroup: str, name: str) -> None:
        pids = self._cgroup_pids(cgroup)
        if not pids:
            raise RdtError(errno.ESRCH, f"cgroup {cgroup} has no processes to assign")
        self.assign_pids(name, pids)

    def rdt_class_of(self, cgroup: str) -> str:
        """The class holding most of the cgroup's threads ("" = system/default)."""
        tids: set[int] = set()
        for pid in self._cgroup_pids(cgroup):
            try:
                tids.update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
        votes = Counter({name: len(tids.intersection(c["pids"]))
                         for name, c in self.classes().items()})
        votes = Counter({n: v for n, v in votes.items() if v > 0})
        if not votes:
            return ""
        return sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def rdt_mon(self, name: str) -> dict[int, dict[str, int]]:
        return {int(d): {k: int(v) for k, v in ev.items()}
                for d, ev in self.monitor(name)["l3"].items()}
