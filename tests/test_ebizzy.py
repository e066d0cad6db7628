"""workload=ebizzy: sleeping ebizzy over the periodic model, with the
CATCloud thesis's presets ("CATCloud: Closing Semantic Gaps of CPU Interfaces
for Precise Autoscaling in the Cloud", §2.3.1)."""
import pytest
from omegaconf import OmegaConf

from scenarios.config import compose
from scenarios.validate import ConfigError
from scenarios.simulate import simulate
from sim.workloads.ebizzy import PRESETS, resolve
from simcfg import make_cfg, run_for


def _ebizzy(**keys):
    overrides = ["workload=ebizzy"] + [f"workload.{k}={'null' if v is None else v}"
                                       for k, v in keys.items()]
    return OmegaConf.to_container(compose(overrides), resolve=True)["workload"]


def test_presets_are_the_theses_experiments():
    assert PRESETS == {"exp1": (20.0, 150.0), "exp2": (40.0, 30.0)}
    w = resolve(_ebizzy())
    assert (w["preset"], w["run_ms"], w["sleep_ms"], w["threads"]) == ("exp1", 20.0, 150.0, 1)
    w = resolve(_ebizzy(preset="exp2"))
    assert (w["run_ms"], w["sleep_ms"]) == (40.0, 30.0)
    # an explicit value wins over the preset's; without a preset both are needed
    assert resolve(_ebizzy(preset="exp2", sleep_ms=100))["sleep_ms"] == 100.0
    w = resolve(_ebizzy(preset=None, run_ms=5, sleep_ms=5))
    assert (w["run_ms"], w["sleep_ms"]) == (5.0, 5.0)


@pytest.mark.parametrize("keys, message", [
    ({"preset": "exp3"}, "workload.preset = exp3 is invalid: must be one of exp1, exp2"),
    ({"preset": None}, "workload.run_ms = None is invalid: must be set when workload.preset is "
                       "null"),
    ({"run_ms": -1}, "workload.run_ms = -1.0 is invalid: must be > 0"),
])
def test_bad_ebizzy_keys_name_the_key(keys, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        _ebizzy(**keys)


@pytest.mark.parametrize("preset", ["exp1", "exp2"])
def test_uncontended_threads_run_their_duty_cycle(preset):
    """One thread per CPU, free switches: each burst takes exactly run_ms,
    a thread releases one per run+sleep, and the cgroup uses
    threads x run/(run+sleep) of the CPUs."""
    run_ms, sleep_ms = PRESETS[preset]
    cycle_s = (run_ms + sleep_ms) / 1000
    cycles = 60
    duration = cycles * cycle_s
    w = resolve(_ebizzy(preset=preset, threads=2))
    cfg = make_cfg(w, cores=2, duration_s=duration, warmup_s=0.0)
    result = simulate(cfg)
    req = result.requests.to_pydict()
    assert set(req["cgroup"]) == {"/ebizzy"}
    assert len(req["latency_s"]) == 2 * cycles
    assert req["latency_s"] == pytest.approx([run_ms / 1000] * (2 * cycles), abs=1e-9)
    # releases are one cycle apart per thread
    assert sorted(req["arrival_s"])[::2] == pytest.approx([i * cycle_s for i in range(cycles)])
    usage = [r["usage_s"] for r in result.intervals.to_pylist() if r["cgroup"] == "/ebizzy"]
    duty = run_ms / (run_ms + sleep_ms)
    assert sum(usage) / (2 * duration) == pytest.approx(duty, rel=1e-6)
    assert result.summary.column("cpu_util")[0].as_py() == pytest.approx(duty, rel=1e-6)


def test_per_thread_share_when_contended_is_a_fair_share():
    """exp2 (duty 4/7) with 8 threads on one CPU wants 32/7 CPUs: each
    thread gets an equal share of the CPU, far below its duty cycle, and
    every burst queues (latency > run_ms).  Not all of the CPU: processor
    sharing makes the threads finish their bursts together and sleep
    together, so the CPU idles in a few of their 30 ms sleeps."""
    w = resolve(_ebizzy(preset="exp2", threads=8))
    machine, wl, rec = run_for(make_cfg(w, cores=1, duration_s=20.0, warmup_s=0.0), 20.0)
    shares = [t.se.sum_exec_runtime / 20e9 for t in wl.threads]
    assert 0.95 < sum(shares) <= 1.0
    assert shares == pytest.approx([sum(shares) / 8] * 8, rel=0.02)
    lat = [(end - arr) for _, _, arr, _, end, _, _ in rec.rows]
    assert min(lat) > 40e6
