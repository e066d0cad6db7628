"""Kernel scheduler detection and the host fingerprint."""
import pytest

from backends.real import detect
from backends.real.detect import SchedulerUnavailable, check_scheduler, fair_scheduler


@pytest.mark.parametrize("release,expected", [
    ("5.18.0-1-amd64", "cfs"), ("6.5.13", "cfs"), ("6.6.0", "eevdf"),
    ("6.18.44-fc-v657", "eevdf"), ("7.0.1", "eevdf"), ("4.19.0", "cfs")])
def test_fair_scheduler_by_version(release, expected):
    assert fair_scheduler(release, latency_awareness=False) == expected


def test_lags_only_with_latency_awareness():
    assert fair_scheduler("5.15.0", latency_awareness=True) == "lags"
    assert check_scheduler("lags", "5.15.0", True) == "lags"
    with pytest.raises(SchedulerUnavailable, match=r"scheduler=lags needs a CFS-LAGS kernel "
                       r"\(cpu.latency_awareness.*6.18.44-fc-v657 \(EEVDF\)"):
        check_scheduler("lags", "6.18.44-fc-v657", False)


def test_refusals_name_what_was_found():
    with pytest.raises(SchedulerUnavailable) as e:
        check_scheduler("cfs", "6.18.44-fc-v657", False)
    assert str(e.value) == ("scheduler=cfs needs a kernel before 6.6; this host runs "
                            "6.18.44-fc-v657 (EEVDF)")
    with pytest.raises(SchedulerUnavailable, match=r"eevdf needs a kernel 6.6 or later; "
                       r"this host runs 5.18.0 \(CFS\)"):
        check_scheduler("eevdf", "5.18.0", False)
    with pytest.raises(SchedulerUnavailable, match="does not change scheduler tunables"):
        check_scheduler("eevdf_tuned", "6.8.0", False)
    with pytest.raises(SchedulerUnavailable, match="CFS-LAGS kernel"):
        check_scheduler("cfs", "5.15.0", True)
    assert check_scheduler("eevdf", "6.8.0", False) == "eevdf"
    assert check_scheduler("cfs", "5.18.0", False) == "cfs"
    assert check_scheduler("rr", "6.8.0", False) == "eevdf"


def test_kernel_version_parse():
    assert detect.kernel_version("6.18.44-fc-v657") == (6, 18)
    with pytest.raises(ValueError):
        detect.kernel_version("weird")


def test_fingerprint_fields():
    fp = detect.fingerprint(probe_perf=False)
    for k in ("cpu_model", "cores", "threads", "kernel", "scheduler", "cgroup_version",
              "resctrl", "perf_software_events", "perf_hardware_events"):
        assert k in fp
    assert fp["scheduler"] in ("cfs", "eevdf", "lags")
    assert fp["threads"] >= 1
