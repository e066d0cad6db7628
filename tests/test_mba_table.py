"""calibration/mba_table.py: the MBA step table, through the RDT sidecar.
Where resctrl is missing (this VM) it says so and exits 2; on the emulated
resctrl (``hardware``: root, FUSE, go) it runs every step end to end (the
emulation does not throttle, so only the plumbing is checked)."""
import json
import shutil

import pytest

from calibration import mba_table
from tests.test_rdt_sidecar import _host_has_resctrl, emu_bins, emulated, sidecar_bin  # noqa: F401


def test_without_resctrl_it_says_what_is_missing(sidecar_bin, capsys, tmp_path):
    if _host_has_resctrl():
        pytest.skip("this host has resctrl mounted")
    assert mba_table.main(["--cpus", "0", "--host", "x", "--out", str(tmp_path),
                           "--table-dir", str(tmp_path)]) == 2
    assert "resctrl filesystem not mounted" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.hardware
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc for the memory worker")
def test_every_step_runs_in_its_class_on_emulated_rdt(emulated, tmp_path, capsys):
    e = emulated()
    mbs = []
    update = e.sc.rdt_update_class

    def seen_update(name, l3_cbm=None, mb_percent=None):
        mbs.append(mb_percent)
        update(name, l3_cbm, mb_percent)
        # the class exists with that MB while the workers run in it
        assert f"MB:0={mb_percent};1={mb_percent}" in e.sc.classes()["mba-probe"]["schemata"]
    e.sc.rdt_update_class = seen_update
    assert mba_table.main(["--cpus", "0", "--buffer-mb", "8", "--seconds", "0.05",
                           "--host", "emu", "--out", str(tmp_path),
                           "--table-dir", str(tmp_path)],
                          sidecar=lambda prefix: e.sc) == 0
    assert mbs == list(range(10, 101, 10))
    table = json.loads((tmp_path / "emu.json").read_text())
    assert sorted(map(int, table["applied"])) == mbs and table["applied"]["100"] == 100.0
    assert all(r["gbps"] > 0 and r["ns_per_access"] > 0 for r in table["rows"])
    assert "| 100 |" in (tmp_path / "mba_emu.md").read_text()


def test_the_model_reads_a_measured_table(tmp_path, monkeypatch):
    from sim.memory import resctrl
    monkeypatch.setattr(resctrl, "MBA_DIR", tmp_path)
    (tmp_path / "h.json").write_text(json.dumps({"applied": {"10": 4.0, "20": 11.5}}))
    host = {"name": "h", "llc_ways": 12, "rdt_num_closids": 16, "rdt_min_cbm_bits": 1,
            "mba_min_bandwidth": 10, "mba_bandwidth_gran": 10, "sockets": 1, "cores": 4}
    rc = resctrl.Resctrl.from_host(host)
    rc.mkdir("a")
    rc.write_schemata("a", "MB:0=10")
    assert rc.mba_fraction("a", 0) == pytest.approx(0.04)
    rc.write_schemata("a", "MB:0=30")
    assert rc.mba_fraction("a", 0) == pytest.approx(0.30)       # not measured: linear
    assert resctrl.measured_mba("other") is None
