"""RDT on the real backend: RealHost's rdt_* through the RDT sidecar
(backends/real/rdt.py), a real run refusing an RDT controller where resctrl
is missing, and `colosim cleanup` of resctrl groups.

The sidecar and its emulated resctrl are tests/test_rdt_sidecar.py's; the
tests on the emulation need root and FUSE (``hardware``), the others only
the sidecar binary (go) and a host without resctrl.
"""
import errno
import json
import os

import pytest

from backends.host import RdtError, RdtLimits
from backends.real import detect, rdt
from backends.real.cgroupfs import CgroupError, CgroupFS
from backends.real.host import RealHost
from cli.main import main
from tests.hardware import cgroups_unavailable
from tests.test_real_cgroupfs import fake_v1
from tests.test_rdt_sidecar import (_host_has_resctrl, _tids, emu_bins, emulated,  # noqa: F401
                                    sidecar_bin, threaded_child)

FUNCS = ["/faas/func-0", "/faas/func-1"]


@pytest.fixture
def no_resctrl(sidecar_bin):
    """What the sidecar says is missing on this host."""
    if _host_has_resctrl():
        pytest.skip("this host has resctrl mounted; the test is for hosts without it")
    with rdt.RdtSidecar(sidecar_bin) as sc:
        return sc.capabilities()["reason"]


def test_without_resctrl_every_rdt_call_says_what_is_missing(tmp_path, no_resctrl, sidecar_bin):
    text, v2c = fake_v1(tmp_path)
    cg = CgroupFS("t-rdt", mounts_text=text, v2_controllers=v2c, require_root=False,
                  cleanup_on_exit=False)
    started = []

    def sidecar(**kw):
        started.append(rdt.RdtSidecar(sidecar_bin, **kw))
        return started[-1]
    host = RealHost(cg, FUNCS, create=False, rdt_sidecar=sidecar)
    calls = [host.rdt_info, lambda: host.rdt_create_class("hi", 0x3),
             lambda: host.rdt_update_class("hi", mb_percent=50),
             lambda: host.rdt_update_class("", l3_cbm=0x3), lambda: host.rdt_remove_class("hi"),
             lambda: host.rdt_assign("/faas/func-0", "hi"),
             lambda: host.rdt_class_of("/faas/func-1"), lambda: host.rdt_mon("hi")]
    for call in calls:
        with pytest.raises(RdtError) as e:
            call()
        assert e.value.errno == errno.ENODEV and e.value.strerror == no_resctrl
    # one sidecar, with the run's prefix, asked once and stopped
    assert [s.prefix for s in started] == ["colosim-t-rdt-"] and started[0].pid is None
    assert detect.rdt_missing() == no_resctrl
    host.close()


def test_a_run_with_an_rdt_controller_is_refused_before_creating_anything(
        tmp_path, capsys, monkeypatch, no_resctrl):
    created = []

    def no_cgroups(*args, **kw):
        created.append(args)
        raise CgroupError("the test stops the run here")
    monkeypatch.setattr("backends.real.run.CgroupFS", no_cgroups)
    out = tmp_path / "refused"
    assert main(["run", "backend=real", "host=this-vm", f"scheduler={detect.fair_scheduler()}",
                 "controller=dynamic_priority", "workload.functions=2", "duration_s=2",
                 "warmup_s=0.5", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "controller=dynamic_priority needs RDT (resctrl)" in err and no_resctrl in err
    assert created == [] and not out.exists()


def test_cleanup_without_resctrl_has_nothing_to_remove(capsys, monkeypatch, no_resctrl):
    run = f"rdt-none-{os.getpid()}"
    for extra in ([], ["--dry-run"]):
        assert main(["cleanup", "--run", run, *extra]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"no colosim-{run} cgroups", f"no colosim-{run}-* resctrl groups: {no_resctrl}"]

    def no_sidecar(**kw):
        raise RdtError(errno.ENOENT, "go is needed to build colosim-rdt-sidecar")
    monkeypatch.setattr(rdt, "RdtSidecar", no_sidecar)
    assert main(["cleanup", "--run", run]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"no colosim-{run}-* resctrl groups: resctrl is not mounted"


# --- on the emulated resctrl (root, FUSE) -------------------------------------------------
@pytest.mark.hardware
def test_emulated_round_trip_through_real_host(emulated, threaded_child, monkeypatch, tmp_path):
    reason = cgroups_unavailable()
    if reason:
        pytest.skip(reason)
    state = tmp_path / "rdt-state"
    monkeypatch.setenv("COLOSIM_RDT_STATE", str(state))
    emu = {}

    def sidecar(prefix, pids_of):
        # the emulation's sidecar keeps its own prefix, colosim-
        emu["e"] = emulated(pids_of=pids_of)
        return emu["e"].sc
    cg = CgroupFS(f"test-rdt-{os.getpid()}")
    try:
        host = RealHost(cg, FUNCS, rdt_sidecar=sidecar)
        cg.attach("/faas/func-0", threaded_child.pid)
        assert host.rdt_info() == RdtLimits(ways=11, domains=(0, 1), num_closids=4,
                                            min_cbm_bits=2, mba_min=10, mba_gran=10)
        e = emu["e"]
        sc = e.sc
        host.rdt_create_class("hi", {0: 0x7f0, 1: 0x7f0}, mb_percent=55)
        host.rdt_create_class("lo", 0x00f)
        with pytest.raises(RdtError) as err:
            host.rdt_create_class("lo", 0x3)
        assert err.value.errno == errno.EEXIST
        assert sc.classes()["hi"]["schemata"] == "    L3:0=7f0;1=7f0\n    MB:0=60;1=60\n"

        host.rdt_assign("/faas/func-0", "hi")     # the cgroup's processes, every thread
        assert sc.pids("hi") == _tids(threaded_child.pid)
        assert host.rdt_class_of("/faas/func-0") == "hi"
        assert host.rdt_class_of("/faas/func-1") == ""
        with pytest.raises(ValueError, match="no cgroup /faas/nope"):
            host.rdt_assign("/faas/nope", "hi")

        e.counters.write_text(json.dumps({"colosim-hi": {"0": {"llc_occupancy": 1 << 20,
                                                               "mbm_total_bytes": 10**6,
                                                               "mbm_local_bytes": 10**5}}}))
        assert host.rdt_mon("hi")[0] == {"llc_occupancy": 1 << 20, "mbm_total_bytes": 10**6,
                                         "mbm_local_bytes": 10**5}
        host.rdt_update_class("lo", l3_cbm={1: 0x3})
        assert sc.classes()["lo"]["schemata"].startswith("    L3:0=f;1=3\n")
        # the root group (system/default): written on request, validated as a
        # class, its schemata as found saved and restored at close
        with pytest.raises(RdtError, match="non-consecutive"):
            host.rdt_update_class("", l3_cbm=0x5f0)
        host.rdt_update_class("", l3_cbm={0: 0x0f0})
        host.rdt_update_class("", mb_percent={1: 50})         # keeps the L3 written before
        assert e.kernel("cat $R/schemata").stdout == "    L3:0=f0;1=7ff\n    MB:0=100;1=50\n"
        assert (state / f"{sc.prefix}root.schemata").read_text() == \
            "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"

        host.rdt_remove_class("hi")
        assert host.rdt_class_of("/faas/func-0") == "" and set(sc.classes()) == {"lo"}

        removed, root_after = [], []
        cleanup = sc.cleanup

        def seen_cleanup():
            removed.extend(cleanup())
            root_after.append(e.kernel("cat $R/schemata").stdout)
            return removed
        monkeypatch.setattr(sc, "cleanup", seen_cleanup)
        host.close()                              # classes, the root group, then cgroups
        assert removed == ["lo"] and sc.pid is None and not cg.dir("cpu").exists()
        assert root_after == ["    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n"]
        assert not list(state.iterdir())          # nothing left for colosim cleanup
    finally:
        cg.remove()


@pytest.mark.hardware
def test_emulated_cleanup_removes_and_lists_leftover_groups(emulated, monkeypatch, capsys,
                                                            tmp_path):
    run = f"rdt-crashed-{os.getpid()}"
    # the crashed run had shrunk the root group and saved what it found
    monkeypatch.setenv("COLOSIM_RDT_STATE", str(tmp_path))
    saved = tmp_path / f"colosim-{run}-root.schemata"
    saved.write_text("L3:0=7ff;1=7ff\nMB:0=100;1=100\n")
    e = emulated()
    k = e.kernel(f"mkdir $R/colosim-{run}-prio-1 $R/colosim-{run}-prio-2 $R/other && "
                 "echo 'L3:0=f0' > $R/schemata && echo ok")
    assert k.stdout.strip() == "ok", k
    prefixes, seen = [], {}

    def sidecar(prefix):
        prefixes.append(prefix)
        return e.sc
    close = e.sc.close

    def close_after_looking(cleanup=False):
        seen["ls"] = e.kernel("ls $R").stdout.split()
        seen["root"] = e.kernel("cat $R/schemata").stdout
        return close(cleanup=cleanup)
    monkeypatch.setattr(rdt, "RdtSidecar", sidecar)
    monkeypatch.setattr(e.sc, "close", close_after_looking)
    assert main(["cleanup", "--run", run]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"removed resctrl group colosim-{run}-prio-1",
        f"removed resctrl group colosim-{run}-prio-2",
        "restored the root resctrl group's schemata saved by a crashed run"]
    assert seen["root"] == "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n" and not saved.exists()
    assert prefixes == [f"colosim-{run}-"]
    assert "other" in seen["ls"] and not any(n.startswith("colosim-") for n in seen["ls"])
