"""RDT control groups with Linux resctrl semantics (CAT L3 + MBA), simulated.

Mirrors the kernel's resctrl filesystem (``Documentation/arch/x86/resctrl.rst``;
``arch/x86/kernel/cpu/resctrl/ctrlmondata.c`` and ``rdtgroup.c``, moved to
``fs/resctrl/`` in 6.16), so a controller written against it behaves as on the
real host:

- ``num_closids`` CLOSIDs including the root group's (closid 0, goresctrl's
  ``system/default``); ``mkdir`` takes the lowest free one, and fails with
  "Out of CLOSIDs" (ENOSPC) when none is left.
- A new group starts with MB at 100 and, per L3 domain, the lowest contiguous
  run of the bits that are unused or used by shareable groups; if that run is
  shorter than ``min_cbm_bits`` the mkdir fails with "No space on L3:<id>".
- Schemata writes (``L3:<id>=<hex cbm>;...`` and ``MB:<id>=<percent>;...``)
  are validated exactly as ``cbm_validate`` / ``bw_validate`` /
  ``parse_cbm`` / ``parse_line`` do and the message goes to
  ``last_cmd_status`` ("ok" after a success).  A write is all-or-nothing.
  MB values are rounded *up* to the next ``bandwidth_gran`` step.
- Modes ``shareable`` / ``exclusive``; a group can become exclusive only if no
  other group's CBM (nor ``shareable_bits``) overlaps its own ("Schemata
  overlaps"); no CBM may be written that overlaps an exclusive group
  ("Overlaps with exclusive group").  Pseudo-locking is not modelled
  ("Unknown or unsupported mode", as on kernels built without it).
- Removing a group moves its tasks to the root group; the root cannot be removed.
- Monitoring per group and L3 domain: ``llc_occupancy`` (bytes now),
  ``mbm_total_bytes`` / ``mbm_local_bytes`` (cumulative byte counters), fed by
  the memory model through :meth:`Resctrl.record`.

MBA is a throttle cap, not a guarantee.  The value the kernel programs
(requested, rounded up to the granularity) is mapped to the bandwidth
fraction the hardware actually applies by a per-host table
(:func:`measured_mba`, written by ``calibration.mba_table``; identity where
nothing was measured).
Intel semantics only: contiguous CBMs, no empty CBM (AMD allows both).
"""
from __future__ import annotations

import errno as _errno
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

ROOT = ""                         # the resctrl mount point itself
ROOT_ALIASES = ("", "/", "system/default")
MAX_MBA_BW = 100
MODES = ("shareable", "exclusive")
MON_EVENTS = ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes")

# Programmed MB percent -> applied percent of the socket's bandwidth, per host
# preset: what `python -m calibration.mba_table --host <preset>` measured on
# a host with MBA, read from MBA_DIR/<preset>.json ({"applied": {MB: percent}}).
# No file = linear (applied == programmed); nothing is measured yet.
MBA_DIR = Path(__file__).resolve().parent / "mba"


def measured_mba(host_name: str) -> dict[int, float] | None:
    """The requested -> applied MB table measured for a host preset, if any."""
    f = MBA_DIR / f"{host_name}.json"
    if not host_name or not f.is_file():
        return None
    return {int(k): float(v) for k, v in json.loads(f.read_text())["applied"].items()}


class ResctrlError(OSError):
    """A rejected resctrl operation.  ``str(e)`` is what ``info/last_cmd_status`` shows."""

    def __init__(self, err: int, status: str):
        super().__init__(err, status)
        self.status = status


@dataclass(frozen=True)
class RdtInfo:
    """What ``info/`` exposes, per resource."""
    cbm_len: int                  # L3 ways (bits of info/L3/cbm_mask)
    num_closids: int              # min over enabled resources, root's included
    min_cbm_bits: int = 1
    shareable_bits: int = 0
    mba_min_bandwidth: int = 10
    mba_bandwidth_gran: int = 10  # 0: no MBA
    domains: tuple[int, ...] = (0,)
    num_rmids: int = 0            # 0: not modelled (no limit)

    @classmethod
    def from_host(cls, host: Mapping[str, Any]) -> "RdtInfo":
        sockets = int(host["sockets"])
        cores, per_llc = int(host["cores"]), int(host.get("cores_per_llc", 0) or 0)
        llcs = sockets * (cores // per_llc if per_llc else 1)
        return cls(cbm_len=int(host["llc_ways"]), num_closids=int(host["rdt_num_closids"]),
                   min_cbm_bits=int(host["rdt_min_cbm_bits"]),
                   mba_min_bandwidth=int(host["mba_min_bandwidth"]),
                   mba_bandwidth_gran=int(host["mba_bandwidth_gran"]),
                   domains=tuple(range(llcs)))

    @property
    def cbm_mask(self) -> int:
        return (1 << self.cbm_len) - 1

    @property
    def has_cat(self) -> bool:
        return self.num_closids > 0 and self.cbm_len > 0

    @property
    def has_mba(self) -> bool:
        return self.num_closids > 0 and self.mba_bandwidth_gran > 0


@dataclass
class Group:
    name: str
    closid: int
    mode: str = "shareable"
    l3: dict[int, int] = field(default_factory=dict)     # domain -> CBM
    mb: dict[int, int] = field(default_factory=dict)     # domain -> programmed percent
    tasks: set = field(default_factory=set)
    mon: dict[int, dict[str, int]] = field(default_factory=dict)


def _contiguous_low_run(cbm: int, cbm_len: int) -> int:
    """cbm_ensure_valid(): keep the lowest contiguous run of set bits."""
    if cbm == 0:
        return 0
    first = (cbm & -cbm).bit_length() - 1
    run = first
    while run < cbm_len and (cbm >> run) & 1:
        run += 1
    return ((1 << run) - 1) & ~((1 << first) - 1)


class Resctrl:
    """One host's resctrl filesystem, simulated."""

    def __init__(self, info: RdtInfo, mba_applied: Mapping[int, float] | Callable[[int], float] | None = None):
        self.info = info
        self._mba_applied = mba_applied
        self.last_cmd_status = "ok"
        self._groups: dict[str, Group] = {}
        self._task_group: dict[Any, str] = {}
        root = Group(ROOT, 0)
        for d in info.domains:
            if info.has_cat:
                root.l3[d] = info.cbm_mask
            if info.has_mba:
                root.mb[d] = MAX_MBA_BW
            root.mon[d] = dict.fromkeys(MON_EVENTS, 0)
        self._groups[ROOT] = root

    @classmethod
    def from_host(cls, host: Mapping[str, Any]) -> "Resctrl":
        return cls(RdtInfo.from_host(host), measured_mba(str(host.get("name", ""))))

    # ---- helpers ------------------------------------------------------------------------
    def _fail(self, err: int, status: str | None) -> ResctrlError:
        self.last_cmd_status = status if status else "ok"
        return ResctrlError(err, status or _errno.errorcode.get(err, str(err)))

    def _group(self, name: str) -> Group:
        key = ROOT if name in ROOT_ALIASES else name
        if key not in self._groups:
            raise ResctrlError(_errno.ENOENT, f"no resctrl group {name!r}")
        return self._groups[key]

    def _overlaps(self, dom: int, cbm: int, closid: int, exclusive: bool) -> bool:
        """rdtgroup_cbm_overlaps(): does ``cbm`` overlap another closid's (exclusive: an
        exclusive closid's) CBM, or (not exclusive) the hardware's shareable bits?"""
        if not exclusive and cbm & self.info.shareable_bits:
            return True
        for g in self._groups.values():
            if g.closid == closid or not cbm & g.l3.get(dom, 0):
                continue
            if not exclusive or g.mode == "exclusive":
                return True
        return False

    # ---- groups -------------------------------------------------------------------------
    @property
    def groups(self) -> list[str]:
        return list(self._groups)

    def mkdir(self, name: str) -> None:
        """Create a CTRL_MON group (a directory under the mount point)."""
        self.last_cmd_status = "ok"
        if name in ROOT_ALIASES or name in self._groups or name == "info":
            raise ResctrlError(_errno.EEXIST, f"{name!r} exists")
        if not name or "/" in name or not re.fullmatch(r"[^\s/]+", name):
            raise ResctrlError(_errno.EINVAL, f"bad group name {name!r}")
        if self.info.num_closids <= 0:
            raise ResctrlError(_errno.ENODEV, "no RDT allocation on this host")
        used = {g.closid for g in self._groups.values()}
        free = [c for c in range(self.info.num_closids) if c not in used]
        if not free:
            raise self._fail(_errno.ENOSPC, "Out of CLOSIDs")
        group = Group(name, free[0])
        for d in self.info.domains:
            if self.info.has_cat:
                new = used_b = self.info.shareable_bits
                for g in self._groups.values():
                    used_b |= g.l3.get(d, 0)
                    if g.mode == "shareable":
                        new |= g.l3.get(d, 0)
                new |= ~used_b & self.info.cbm_mask
                new = _contiguous_low_run(new, self.info.cbm_len)
                if bin(new).count("1") < max(self.info.min_cbm_bits, 1):
                    raise self._fail(_errno.ENOSPC, f"No space on L3:{d}")
                group.l3[d] = new
            if self.info.has_mba:
                group.mb[d] = MAX_MBA_BW
            group.mon[d] = dict.fromkeys(MON_EVENTS, 0)
        self._groups[name] = group

    def rmdir(self, name: str) -> None:
        group = self._group(name)
        if group.name == ROOT:
            raise ResctrlError(_errno.EPERM, "cannot remove the root group")
        for pid in group.tasks:
            self._task_group[pid] = ROOT
            self._groups[ROOT].tasks.add(pid)
        del self._groups[group.name]

    # ---- tasks --------------------------------------------------------------------------
    def add_task(self, name: str, pid: Any) -> None:
        """Write ``pid`` to ``<group>/tasks`` (moves it from its old group)."""
        group = self._group(name)
        old = self._task_group.get(pid, ROOT)
        self._groups[old].tasks.discard(pid)
        group.tasks.add(pid)
        self._task_group[pid] = group.name

    def group_of(self, pid: Any) -> str:
        return self._task_group.get(pid, ROOT)

    def tasks(self, name: str) -> set:
        return set(self._group(name).tasks)

    # ---- schemata -----------------------------------------------------------------------
    def _validate_cbm(self, text: str) -> int:
        try:
            val = int(text, 16)
            if val < 0:
                raise ValueError
        except ValueError:
            raise self._fail(_errno.EINVAL, f"Non-hex character in the mask {text}") from None
        info = self.info
        if val == 0 or val > info.cbm_mask:
            raise self._fail(_errno.EINVAL, "Mask out of range")
        first = (val & -val).bit_length() - 1
        zero = first
        while zero < info.cbm_len and (val >> zero) & 1:
            zero += 1
        if val >> zero:
            raise self._fail(_errno.EINVAL, f"The mask {val:x} has non-consecutive 1-bits")
        if zero - first < info.min_cbm_bits:
            raise self._fail(_errno.EINVAL, f"Need at least {info.min_cbm_bits} bits in the mask")
        return val

    def _validate_bw(self, text: str) -> int:
        if not re.fullmatch(r"\+?[0-9]+", text):
            raise self._fail(_errno.EINVAL, f"Non-decimal digit in MB value {text}")
        bw = int(text)
        lo = self.info.mba_min_bandwidth
        if bw < lo or bw > MAX_MBA_BW:
            raise self._fail(_errno.EINVAL, f"MB value {bw} out of range [{lo},{MAX_MBA_BW}]")
        gran = self.info.mba_bandwidth_gran
        return -(-bw // gran) * gran

    def write_schemata(self, name: str, text: str) -> None:
        """``echo "L3:0=3f;1=fc0\\nMB:0=50" > <group>/schemata``; all-or-nothing."""
        group = self._group(name)
        self.last_cmd_status = "ok"
        resources = ([("L3", group.l3)] if self.info.has_cat else []) + \
                    ([("MB", group.mb)] if self.info.has_mba else [])
        staged: dict[str, dict[int, int]] = {}
        for raw in text.rstrip("\n").split("\n"):
            resname, sep, tok = raw.partition(":")
            resname = resname.strip()
            if not sep:
                raise self._fail(_errno.EINVAL, "Missing ':'")
            if tok == "":
                raise self._fail(_errno.EINVAL, f"Missing '{resname}' value")
            if resname not in dict(resources):
                raise self._fail(_errno.EINVAL, f"Unknown or unsupported resource name '{resname}'")
            stage = staged.setdefault(resname, {})
            line: str | None = tok
            while line:
                dom, _, line = line.partition(";") if ";" in line else (line, "", None)
                dom_id, eq, val = dom.partition("=")
                if not eq or not re.fullmatch(r"\s*\+?[0-9]+", dom_id):
                    raise self._fail(_errno.EINVAL, "Missing '=' or non-numeric domain")
                d = int(dom_id)
                if d not in self.info.domains:
                    raise self._fail(_errno.EINVAL, None)     # the kernel says nothing here
                if d in stage:
                    raise self._fail(_errno.EINVAL, f"Duplicate domain {d}")
                val = val.strip()
                if resname == "MB":
                    stage[d] = self._validate_bw(val)
                    continue
                cbm = self._validate_cbm(val)
                if self._overlaps(d, cbm, group.closid, exclusive=True):
                    raise self._fail(_errno.EINVAL, "Overlaps with exclusive group")
                if self._overlaps(d, cbm, group.closid, exclusive=False) and group.mode == "exclusive":
                    raise self._fail(_errno.EINVAL, "Overlaps with other group")
                stage[d] = cbm
        for resname, values in staged.items():
            dict(resources)[resname].update(values)

    def schemata(self, name: str) -> str:
        """The ``schemata`` file as the kernel prints it (``%*s:`` names, padded values)."""
        group = self._group(name)
        cache_width = (self.info.cbm_len + 3) // 4
        width = max(cache_width if self.info.has_cat else 0, 3 if self.info.has_mba else 0)
        names = (["L3"] if self.info.has_cat else []) + (["MB"] if self.info.has_mba else [])
        name_width = max((len(n) for n in names), default=0)
        out = []
        if self.info.has_cat:
            out.append(f"{'L3':>{name_width}}:" + ";".join(
                f"{d}={group.l3[d]:0{width}x}" for d in self.info.domains))
        if self.info.has_mba:
            out.append(f"{'MB':>{name_width}}:" + ";".join(
                f"{d}={group.mb[d]:>{width}}" for d in self.info.domains))
        return "".join(line + "\n" for line in out)

    # ---- modes --------------------------------------------------------------------------
    def write_mode(self, name: str, mode: str) -> None:
        group = self._group(name)
        self.last_cmd_status = "ok"
        mode = mode.rstrip("\n")
        if mode == group.mode:
            return
        if mode == "shareable":
            group.mode = mode
        elif mode == "exclusive":
            if not self.info.has_cat:
                raise self._fail(_errno.EINVAL, "Cannot be exclusive without CAT/CDP")
            for d in self.info.domains:
                if self._overlaps(d, group.l3[d], group.closid, exclusive=False):
                    raise self._fail(_errno.EINVAL, "Schemata overlaps")
            group.mode = mode
        else:
            raise self._fail(_errno.EINVAL, "Unknown or unsupported mode")

    def mode(self, name: str) -> str:
        return self._group(name).mode

    # ---- what the memory model reads ----------------------------------------------------
    def cbm(self, name: str, domain: int) -> int:
        return self._group(name).l3[domain]

    def ways(self, name: str, domain: int) -> int:
        return bin(self.cbm(name, domain)).count("1")

    def mb(self, name: str, domain: int) -> int:
        """Programmed MB percent (after rounding up to the granularity)."""
        group = self._group(name)
        return group.mb.get(domain, MAX_MBA_BW)

    def mba_fraction(self, name: str, domain: int) -> float:
        """The applied bandwidth cap as a fraction of the socket's bandwidth."""
        programmed = self.mb(name, domain)
        m = self._mba_applied
        if m is None:
            applied = float(programmed)
        elif callable(m):
            applied = float(m(programmed))
        else:
            applied = float(m.get(programmed, programmed))
        return max(0.0, min(1.0, applied / MAX_MBA_BW))

    def size(self, name: str, domain: int, llc_bytes: int) -> int:
        """``size`` file: bytes of L3 the CBM covers (llc_bytes / cbm_len * bits)."""
        return llc_bytes // self.info.cbm_len * self.ways(name, domain)

    # ---- monitoring (CMT / MBM) ---------------------------------------------------------
    def record(self, name: str, domain: int, occupancy_bytes: float | None = None,
               total_bytes: float = 0.0, local_bytes: float | None = None) -> None:
        """Feed the model's numbers: occupancy now; bytes moved since the last call."""
        mon = self._group(name).mon[domain]
        if occupancy_bytes is not None:
            mon["llc_occupancy"] = int(occupancy_bytes)
        mon["mbm_total_bytes"] += int(total_bytes)
        mon["mbm_local_bytes"] += int(total_bytes if local_bytes is None else local_bytes)

    def mon_data(self, name: str) -> dict[str, dict[str, int]]:
        """``mon_data/mon_L3_<id>/<event>``: {"mon_L3_00": {"llc_occupancy": ..., ...}}."""
        return {f"mon_L3_{d:02d}": dict(v) for d, v in self._group(name).mon.items()}

    def info_files(self) -> dict[str, str]:
        i = self.info
        files = {"info/last_cmd_status": self.last_cmd_status}
        if i.has_cat:
            files.update({"info/L3/cbm_mask": f"{i.cbm_mask:x}", "info/L3/min_cbm_bits": str(i.min_cbm_bits),
                          "info/L3/num_closids": str(i.num_closids),
                          "info/L3/shareable_bits": f"{i.shareable_bits:x}"})
        if i.has_mba:
            files.update({"info/MB/min_bandwidth": str(i.mba_min_bandwidth),
                          "info/MB/bandwidth_gran": str(i.mba_bandwidth_gran),
                          "info/MB/delay_linear": "1", "info/MB/num_closids": str(i.num_closids)})
        return files
