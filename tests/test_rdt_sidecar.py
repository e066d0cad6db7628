"""The RDT sidecar (backends/rdt-sidecar/, Go on intel/goresctrl) and its
supervisor (backends/real/rdt.py).

- The supervisor against a scripted stand-in: errors, time bounds, restarts.
- The real sidecar on this host: without resctrl it says what is missing and
  every RDT operation fails with that message.
- The real sidecar against an emulated resctrl (``hardware``: root and FUSE):
  backends/rdt-sidecar/emulator serves resctrl's files and semantics over
  FUSE inside a private mount namespace, where the sidecar's /proc/mounts
  lists it as resctrl (README.md there says what is real and what is not).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backends.host import RdtError, RdtLimits
from backends.real import rdt
from backends.real.rdt import RdtSidecar


# --- the supervisor, against a stand-in speaking the protocol ----------------------
FAKE = textwrap.dedent("""\
    import json, os, sys, time
    for line in sys.stdin:
        req = json.loads(line)
        op, rid = req["op"], req["id"]
        with open(sys.argv[0] + ".log", "a") as log:
            log.write(op + "\\n")
        if op == "hang":
            time.sleep(60)
        if op == "die":
            sys.stderr.write("boom: resctrl exploded\\n")
            sys.exit(3)
        if op == "garbage":
            print("this is not json", flush=True)
            continue
        if op == "wrong-id":
            print(json.dumps({"id": rid + 100, "ok": True}), flush=True)
            continue
        if op == "configure" and "bad" in req["classes"]:
            resp = {"id": rid, "ok": False, "error": "The mask 5 has non-consecutive 1-bits",
                    "errno": 22, "detail": "class bad, L3 cache id 0"}
        else:
            resp = {"id": rid, "ok": True, "pid": os.getpid(), "echo": req}
        print(json.dumps(resp), flush=True)
    """)


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake-sidecar"
    script.write_text(f"#!{sys.executable}\n" + FAKE)
    script.chmod(0o755)
    sc = RdtSidecar(script, timeout_s=5)
    yield sc
    sc.close()


def test_supervisor_errors_time_bounds_and_restarts(fake):
    first = fake.request("ping")
    assert first["echo"] == {"id": 1, "op": "ping"} and fake.pid == first["pid"]
    with pytest.raises(RdtError) as e:
        fake.configure({"ok": {"l3": 3}, "bad": {"l3": 5}})
    assert e.value.errno == errno.EINVAL
    assert e.value.strerror == "The mask 5 has non-consecutive 1-bits"
    assert e.value.detail == "class bad, L3 cache id 0"
    assert fake._classes == {}                      # a rejected configure changes nothing

    t0 = time.monotonic()
    with pytest.raises(RdtError) as e:
        fake.request("hang", timeout_s=0.3)
    assert e.value.errno == errno.ETIMEDOUT and "within 0.3 s; it was killed" in str(e.value)
    assert time.monotonic() - t0 < 3 and fake.pid is None
    second = fake.request("ping")                   # restarted
    assert second["pid"] != first["pid"]

    with pytest.raises(RdtError, match=r"exited \(code 3\) during 'die': boom: resctrl exploded"):
        fake.request("die")
    with pytest.raises(RdtError, match="not JSON"):
        fake.request("garbage")
    with pytest.raises(RdtError, match="answered request"):
        fake.request("wrong-id")
    assert fake.request("ping")["ok"]
    # a restarted sidecar is first given the classes configured so far
    fake.configure({"a": {"l3": 3}})
    with pytest.raises(RdtError, match="exited"):
        fake.request("die")
    log = Path(str(fake.binary) + ".log")
    seen = len(log.read_text().split())
    assert fake.request("ping")["ok"]
    assert log.read_text().split()[seen:] == ["configure", "ping"]
    pid = fake.pid
    fake.close()
    assert fake.pid is None and not Path(f"/proc/{pid}").exists()
    fake.close()                                    # idempotent


def test_the_prefix_must_be_colosims():
    with pytest.raises(ValueError, match="colosim-"):
        RdtSidecar(sys.executable, prefix="kube-")


# --- the real sidecar ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def sidecar_bin():
    if rdt.go_command() is None and not rdt.BUILT.exists():
        pytest.skip("go is needed to build the RDT sidecar (make rdt-sidecar)")
    return rdt.build_sidecar()


def test_go_unit_tests():
    """The sidecar's own Go tests (translation, validation, protocol, the
    root group's save and restore, the emulated kernel)."""
    go = rdt.go_command()
    if go is None:
        pytest.skip("go is needed to run the sidecar's unit tests")
    r = subprocess.run([go, "test", "./..."], cwd=rdt.SIDECAR_DIR, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _host_has_resctrl() -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[2:3] == ["resctrl"] for line in f)


def test_without_resctrl_capabilities_say_what_is_missing(sidecar_bin):
    if _host_has_resctrl():
        pytest.skip("this host has resctrl mounted; the test is for hosts without it")
    with RdtSidecar(sidecar_bin) as sc:
        caps = sc.capabilities()
        assert caps["ok"] and caps["resctrl"] is False and caps["goresctrl"].startswith("v")
        reason = caps["reason"]
        assert reason.startswith("RDT unavailable: resctrl filesystem not mounted")
        assert "resctrl_mount" in caps["missing"]
        with open("/proc/filesystems") as f:
            if "resctrl" not in f.read():
                assert "kernel lacks resctrl" in reason and "kernel_resctrl" in caps["missing"]
        # every RDT operation fails with that message
        for call in (sc.rdt_info, lambda: sc.rdt_create_class("hi", 0x3),
                     lambda: sc.configure({"hi": {"l3": 3}}), sc.cleanup,
                     lambda: sc.assign_pids("hi", [os.getpid()]), lambda: sc.rdt_mon("hi")):
            with pytest.raises(RdtError) as e:
                call()
            assert e.value.errno == errno.ENODEV and e.value.strerror == reason
        assert sc.close(cleanup=True) == []         # `colosim cleanup`: nothing to remove


# --- the real sidecar against the emulated resctrl -----------------------------------------
HW = {"cbm_len": 11, "min_cbm_bits": 2, "num_closids": 4, "domains": [0, 1], "cdp_capable": True,
      "mb_min": 10, "mb_gran": 10, "num_rmids": 8,
      "mon_features": ["llc_occupancy", "mbm_total_bytes", "mbm_local_bytes"],
      "llc_bytes": 11 * 1048576, "num_cpus": 2}


def _emulation_unavailable() -> str | None:
    if os.geteuid() != 0:
        return f"needs root to mount FUSE in a private mount namespace (uid {os.geteuid()})"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    with open("/proc/filesystems") as f:
        if "fuse" not in f.read().split():
            return "the kernel has no fuse filesystem (modprobe fuse)"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is missing"
    if rdt.go_command() is None and not (rdt.BUILT.exists() and rdt.EMULATOR_BUILT.exists()):
        return "go is needed to build the sidecar and the resctrl emulator"
    return None


@pytest.fixture(scope="module")
def emu_bins():
    reason = _emulation_unavailable()
    if reason:
        pytest.skip(reason)
    return rdt.build_sidecar(), rdt.build_emulator()


class Emulated:
    """The sidecar in a private mount namespace with the emulated resctrl."""

    def __init__(self, work: Path, bins, pids_of=None):
        self.work, self.mnt = work, work / "resctrl"
        (work / "hw.json").write_text(json.dumps(HW))
        self.counters = work / "counters.json"
        self.counters.write_text("{}")
        wrapper = ["unshare", "--mount", "--propagation", "private",
                   "sh", str(rdt.EMULATOR_LAUNCHER), str(work), str(bins[1]),
                   "--config", str(work / "hw.json"), "--counters", str(self.counters), "--"]
        self.sc = RdtSidecar(bins[0], command_prefix=wrapper, pids_of=pids_of, timeout_s=10)

    def kernel(self, script: str) -> subprocess.CompletedProcess:
        """A shell command in the sidecar's mount namespace, $R = the emulated resctrl."""
        return subprocess.run(["nsenter", "-t", str(self.sc.pid), "-m", "sh", "-c",
                               f"R={self.mnt}; {script}"],
                              capture_output=True, text=True, timeout=10)

    def emulator_pid(self) -> int:
        return int((self.work / "ready").read_text())


@pytest.fixture
def emulated(tmp_path, emu_bins):
    holder = {}

    def make(pids_of=None):
        holder["e"] = Emulated(tmp_path, emu_bins, pids_of)
        try:
            holder["e"].sc.capabilities()
        except RdtError as e:
            pytest.fail(f"the sidecar did not start under the emulated resctrl: {e}")
        return holder["e"]
    yield make
    if "e" in holder:
        holder["e"].sc.close()


def logging_sidecars(emulated, calls: list, setup=None):
    """A RealHost ``rdt_sidecar`` factory: the real sidecar on the emulated
    resctrl, every request appended to ``calls`` as (op, fields, response);
    ``setup(emulated)`` runs first (e.g. to write CMT counters)."""
    def make(prefix, pids_of):
        e = emulated(pids_of=pids_of)
        if setup is not None:
            setup(e)
        request = e.sc.request

        def logged(op, timeout_s=None, **fields):
            resp = request(op, timeout_s, **fields)
            calls.append((op, fields, resp))
            return resp
        e.sc.request = logged
        return e.sc
    return make


@pytest.fixture
def threaded_child():
    """A process with two threads (resctrl moves threads one by one)."""
    p = subprocess.Popen([sys.executable, "-c",
                          "import threading, time; threading.Thread(target=time.sleep, args=(60,), "
                          "daemon=True).start(); print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    yield p
    p.kill()
    p.wait()


def _tids(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


@pytest.mark.hardware
def test_emulated_two_classes_assign_monitor_cleanup(emulated, threaded_child):
    e = emulated(pids_of=lambda cgroup: [threaded_child.pid])
    sc = e.sc
    caps = sc.capabilities()
    assert caps["resctrl"] and caps["path"] == str(e.mnt) and caps["classes"] == []
    assert sc.rdt_info() == RdtLimits(ways=11, domains=(0, 1), num_closids=4, min_cbm_bits=2,
                                      mba_min=10, mba_gran=10)

    sc.rdt_create_class("hi", {0: 0x7f0, 1: 0x7f0}, mb_percent=50)
    sc.rdt_create_class("lo", 0x00f)
    classes = sc.classes()
    assert set(classes) == {"hi", "lo"}
    # the kernel's (emulated) own view, padded as the kernel prints it
    assert classes["hi"]["schemata"] == "    L3:0=7f0;1=7f0\n    MB:0=50;1=50\n"
    assert classes["lo"]["schemata"] == "    L3:0=f;1=f\n    MB:0=100;1=100\n"
    ls = e.kernel("ls $R")
    assert "colosim-hi" in ls.stdout.split() and "colosim-lo" in ls.stdout.split()

    # assign a PID (every thread of it) and read it back
    sc.rdt_assign("/faas/func-0", "hi")
    tids = _tids(threaded_child.pid)
    assert len(tids) == 2
    assert sc.pids("hi") == tids and sc.pids("lo") == []
    assert sc.rdt_class_of("/faas/func-0") == "hi"
    assert e.kernel("cat $R/colosim-hi/tasks").stdout.split() == [str(t) for t in tids]

    # monitoring: the values the emulated counters hold (the test sets them)
    assert sc.rdt_mon("hi") == {0: {"llc_occupancy": 0, "mbm_total_bytes": 0, "mbm_local_bytes": 0},
                                1: {"llc_occupancy": 0, "mbm_total_bytes": 0, "mbm_local_bytes": 0}}
    e.counters.write_text(json.dumps({"colosim-hi": {"1": {"llc_occupancy": 3 << 20,
                                                           "mbm_total_bytes": 10**9,
                                                           "mbm_local_bytes": 6 * 10**8}}}))
    assert sc.rdt_mon("hi")[1] == {"llc_occupancy": 3 << 20, "mbm_total_bytes": 10**9,
                                   "mbm_local_bytes": 6 * 10**8}

    # updates: MB is rounded up to the granularity as the kernel (and SimHost) would
    sc.rdt_update_class("hi", mb_percent={1: 55})
    assert sc.classes()["hi"]["schemata"] == "    L3:0=7f0;1=7f0\n    MB:0=50;1=60\n"
    sc.rdt_update_class("lo", l3_cbm={1: 0x3})
    assert sc.classes()["lo"]["schemata"].startswith("    L3:0=f;1=3\n")

    # removing a class sends its tasks back to the root group
    sc.rdt_remove_class("hi")
    assert set(sc.classes()) == {"lo"} and sc.rdt_class_of("/faas/func-0") == ""
    sc.assign_pids("lo", [threaded_child.pid])
    sc.rdt_assign("/faas/func-0", "")                 # and "" moves them back explicitly
    assert sc.pids("lo") == [] and set(tids) <= set(sc.pids(""))

    assert sc.cleanup() == ["lo"]
    assert sc.classes() == {} and "colosim-" not in e.kernel("ls $R").stdout

    emu_pid = e.emulator_pid()
    sc.close()
    for _ in range(100):
        if not Path(f"/proc/{emu_pid}").exists():
            break
        time.sleep(0.02)
    assert not Path(f"/proc/{emu_pid}").exists(), "the emulator outlived the sidecar"
    with open("/proc/mounts") as f:
        assert str(e.work) not in f.read(), "a mount leaked out of the private namespace"


BAD_MASKS = [(0x5, "The mask 5 has non-consecutive 1-bits"),
             (0x8, "Need at least 2 bits in the mask"),
             (0xfff, "Mask out of range"),
             (0, "Mask out of range")]


def test_the_simulators_resctrl_words_bad_masks_the_same():
    """The emulated kernel and the sidecar (test below) use these messages;
    so must sim/memory/resctrl.py, so that RdtError reads the same on both hosts."""
    from sim.memory.resctrl import RdtInfo, Resctrl
    sim = Resctrl(RdtInfo(cbm_len=11, num_closids=4, min_cbm_bits=2, domains=(0, 1)))
    sim.mkdir("ok")
    for mask, message in BAD_MASKS:
        with pytest.raises(OSError) as err:
            sim.write_schemata("ok", f"L3:1={mask:x}")
        assert err.value.status == message


@pytest.mark.hardware
def test_emulated_invalid_masks_are_rejected_in_the_kernels_words(emulated):
    e = emulated()
    sc = e.sc
    sc.rdt_create_class("ok", 0x0f0)
    for mask, message in BAD_MASKS:
        # the sidecar refuses before writing anything ...
        with pytest.raises(RdtError) as err:
            sc.rdt_create_class("bad", {0: 0x3, 1: mask})
        assert err.value.errno == errno.EINVAL and err.value.strerror == message
        assert "L3 cache id 1" in err.value.detail
        # ... in the words the (emulated) kernel uses for the same write ...
        k = e.kernel(f"printf 'L3:1={mask:x}\\n' > $R/colosim-ok/schemata; echo rc=$?; "
                     f"cat $R/info/last_cmd_status")
        assert "rc=1" in k.stdout and k.stdout.rstrip().endswith(message), k
    with pytest.raises(RdtError, match=r"unknown L3 cache id 7 \(this host has 0,1\)"):
        sc.rdt_create_class("bad", {7: 0x3})
    with pytest.raises(RdtError, match=r"MB value 5 out of range \[10,100\]"):
        sc.rdt_create_class("bad", 0x3, mb_percent=5)
    with pytest.raises(RdtError, match="MB value 55 is not a multiple of bandwidth_gran 10"):
        sc.configure({"ok": {"l3": 0xf0}, "bad": {"l3": 3, "mb": 55}})
    # all or nothing: no "bad" class, "ok" unchanged
    assert list(sc.classes()) == ["ok"]
    assert sc.classes()["ok"]["schemata"].startswith("    L3:0=f0;1=f0\n")

    # what only the kernel knows comes back in its words, and is rolled back
    sc.rdt_create_class("b", 0x3)
    sc.rdt_create_class("c", 0x3)
    with pytest.raises(RdtError) as err:               # 4 CLOSIDs: root, ok, b, c
        sc.rdt_create_class("d", 0x3)
    assert err.value.errno == errno.ENOSPC and err.value.strerror == "Out of CLOSIDs"
    sc.rdt_remove_class("c")
    with pytest.raises(RdtError) as err:               # the root group still has every way
        sc.rdt_create_class("x", 0x600, exclusive=True)
    assert err.value.errno == errno.EINVAL and err.value.strerror == "Schemata overlaps"
    assert sorted(sc.classes()) == ["b", "ok"]
    assert sc.close(cleanup=True) == ["b", "ok"] and sc.pid is None


@pytest.mark.hardware
def test_emulated_groups_of_others_are_never_touched(emulated, threaded_child):
    e = emulated()
    sc = e.sc
    tid = threaded_child.pid
    k = e.kernel(f"mkdir $R/other && echo {tid} > $R/other/tasks && "
                 f"mkdir $R/colosim-leftover && echo ok")
    assert k.stdout.strip() == "ok", k
    assert sc.capabilities()["classes"] == ["leftover"]   # a crashed run's group is visible
    with pytest.raises(RdtError) as err:
        sc.assign_pids("", [threaded_child.pid])
    assert err.value.errno == errno.EPERM and "resctrl group other" in err.value.strerror
    sc.rdt_create_class("mine", 0x3)                   # removes the (empty) leftover: declarative
    with pytest.raises(RdtError, match="which colosim does not manage"):
        sc.assign_pids("mine", [threaded_child.pid])
    assert sc.cleanup() == ["mine"]
    ls = e.kernel("ls $R; cat $R/other/tasks").stdout.split()
    assert "other" in ls and str(tid) in ls            # still there, task and all
