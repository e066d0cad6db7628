"""The speed tools of benchmarks/ refuse bad input before any run."""
import pytest

from benchmarks import instructions
from benchmarks.configs import fig3_point, overload


@pytest.mark.parametrize("argv, message", [
    (["--scenario", "nope"], "invalid choice: 'nope'"),
    (["--duration", "0"], "--duration 0.0: must be > 0"),
    (["--schedulers", "cfs,xx"], "scheduler=xx is not a known option"),
    (["--scenario", "fig3", "--schedulers", "xx"], "scheduler=xx is not a known option"),
])
def test_instructions_refuses_before_counting(argv, message, capsys, monkeypatch):
    # a refusal comes before the counted runs: none may start
    monkeypatch.setattr(instructions, "_count", lambda *a: pytest.fail("a run was counted"))
    with pytest.raises(SystemExit) as exc:
        instructions.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("make", [overload, fig3_point])
def test_speed_scenarios_take_the_scheduler(make):
    cfg = make("eevdf")
    assert cfg["scheduler"]["name"] == "eevdf"
    assert cfg["host"]["name"] == "e5-2430l"


def test_fig3_point_is_the_grids_largest():
    cfg = fig3_point("lags")
    assert (cfg["workload"]["name"], cfg["workload"]["functions"]) == ("azure2021", 228)
    assert cfg["workload"]["request_path"] == "rdhashd"
    assert (cfg["duration_s"], cfg["warmup_s"]) == (30.0, 5.0)
