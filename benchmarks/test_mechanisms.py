"""What the dense-fidelity mechanisms of issue 21 §3 cost the simulator.

The dense suite's ``f64-rho95`` point (calibration/suites/dense.yaml: this-vm,
64 functions on the worker path at rho 0.95, ``calibration=this-vm``) run
with every mechanism on, as the suite runs it, and with every one off:
EEVDF as 6.6 (``scheduler=eevdf66``, which also keeps no idle CPU's tick
for RCU and forks on the least-loaded CPU), no load generator or kernel threads
as host tasks (``calibration.loadgen=false calibration.kthreads=false``),
no timer slack or timer interrupt (``calibration.timer_slack_ns=0
calibration.timer_irq_ns=0``) and no CPU-clock reads
(``workload.cputime_poll=false``).  Each round runs both back to back;
``extra_info`` has, from the median of the rounds' ratios, the
mechanisms' cost in simulated seconds per wall second (what a user's run
costs: the mechanisms make more switches, so more work) and in switches
per wall second (the cost per switch), and each side's figures.
"""
from __future__ import annotations

from omegaconf import OmegaConf

from scenarios.config import compose
from scenarios.simulate import simulate

POINT = ["host=this-vm", "calibration=this-vm", "seed=0", "duration_s=6", "warmup_s=1",
         "workload=poisson", "workload.request_path=worker", "workload.mean_service_s=0.01",
         "workload.functions=64", "workload.rate_rps=2.96875"]
ON = ["scheduler=eevdf", "workload.cputime_poll=true"]
OFF = ["scheduler=eevdf66", "workload.cputime_poll=false", "calibration.loadgen=false",
       "calibration.kthreads=false", "calibration.timer_slack_ns=0", "calibration.timer_irq_ns=0"]


def _cfg(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose(POINT + overrides), resolve=True)


def _figures(cfg: dict) -> dict:
    s = simulate(cfg).summary.to_pylist()[0]
    wall = s["wall_time_s"]
    return {"wall_time_s": wall, "ctx_switches": s["ctx_switches"],
            "sim_s_per_wall_s": cfg["duration_s"] / wall,
            "ctx_switches_per_wall_s": s["ctx_switches"] / wall}


def test_mechanisms(benchmark):
    on_cfg, off_cfg = _cfg(ON), _cfg(OFF)
    pairs = []

    def once():
        pairs.append((_figures(on_cfg), _figures(off_cfg)))
    benchmark.pedantic(once, rounds=5, iterations=1, warmup_rounds=1)

    def median(xs):
        return sorted(xs)[len(xs) // 2]
    speed = median([on["sim_s_per_wall_s"] / off["sim_s_per_wall_s"] for on, off in pairs])
    per_switch = median([on["ctx_switches_per_wall_s"] / off["ctx_switches_per_wall_s"]
                         for on, off in pairs])
    best_on = max((on for on, _ in pairs), key=lambda f: f["sim_s_per_wall_s"])
    best_off = max((off for _, off in pairs), key=lambda f: f["sim_s_per_wall_s"])
    benchmark.extra_info.update({"on": best_on, "off": best_off,
                                 "sim_s_per_wall_s_on_over_off": speed,
                                 "switches_per_wall_s_on_over_off": per_switch})
    assert best_on["ctx_switches"] > best_off["ctx_switches"] > 0
