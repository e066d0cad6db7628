"""The noisy-neighbor thesis's sensitivity probe ("Mitigating the Noisy Neighbor
Problem: Improving Isolation of Containers on Multi-Tenant Intel Cloud
Servers", §4.5.2-4.5.3, Listings 4.17-4.19, Table 4.2, Eq. 3.5) on a simulated
workload.

    python -m calibration.sensitivity --archetype tsearch_2e17 [--ways 6 --mb 50]
                                      [--no-isolation] [--default-t 12] [--threshold 0.1]

A busy neighbor shares an RDT class with the target (isolated probing: 6 ways
and 50% MB by default, the thesis's §6.2 / §7.3.5 partition; ``--no-isolation``
puts both in the root group with every way).  ``default_t`` is split into six
equal segments (§4.5.2): the baseline with the neighbor idle, then one stress-ng
stressor per segment on one core (§7.3).  Per segment the tool prints the
target's IPC and IPCE, and per stressor the sensitivity
``min(1, max(0, (IPCE_base - IPCE_j) / IPCE_base))`` (Eq. 3.5; also on IPC,
as Listing 4.19 computes).

Each segment is the steady state of the progress model for the two tenants
(:func:`sim.memory.progress.solve`), which is what a run's ``MemorySystem``
settles to every epoch: the model has no transients, so the segment length
and the 50 ms sampling (§4.5.2) do not change the averages.

Stressors as memory profiles.  stress-ng's per-instruction behaviour is not
in the thesis; the values below are our assumptions from what each stressor
does (Table 4.2 and its rationale, §4.5.3):

- LLC ``--cache 0 --cache-level 3``: random read-modify-writes over a buffer
  the size of the LLC.
- MemRead ``--memrate ... --memrate-wr-mbs 0``: sequential 64-bit reads over
  500 MB, no writes.
- MemWrite ``--memrate-method write64nt``: sequential writes over 256 MB (the
  memrate default).  The model has no non-temporal stores: the writer also
  fills ways, so it stresses the LLC as well as write bandwidth.
- Syscall ``--futex 0``: kernel lock contention, which the model does not
  have: reported as not measured (the thesis's ``SensitivityMetrics`` fields
  are nullable, Listing 4.18).
- Prefetch ``--stream 0 --stream-madvise hugepage --stream-index 0``: a
  sequential stream over three arrays on 2 MB pages, one written.  The model
  has no prefetcher, so this differs from MemRead only by its writes: the
  thesis too finds the two overlap heavily (§7.3).

Classification.  The thesis labels jobs moderately or highly sensitive
(§5.1; ``sensitivity: high | low`` in the pool, Listing 4.4) but gives no
rule from the probe's numbers to the label.  The tool's rule is ours: *high*
when the largest sensitivity over the measured stressors is at least
``--threshold`` (default 0.20), else *moderate*.  The default is chosen so that
the fitted archetypes get the thesis's §7.3 statements: tsearch is sensitive
from 2^15 nodes (§7.3.1), the CPU-bound job is not (§7.3.6).  Listing 4.4's
label ``high`` for stress-ng's default matrix-3d (128^3) does not follow: in
the probe's 6 ways the 24 MiB of matrices already miss at baseline, the
thesis's own explanation for the small penalty of 256^3 (§7.3.1).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from sim.memory.progress import MemoryProfile, TenantIn, archetypes, solve
from calibration.memory_profiles import Model

SEGMENTS = ("baseline", "LLC", "MemRead", "MemWrite", "Syscall", "Prefetch")
# what each stressor does to memory (see the module docstring); None: not modelled
STRESSORS: dict[str, MemoryProfile | None] = {
    "LLC": MemoryProfile(buffer_mb=24.0, pages="4k", pattern="random", refs_per_kinstr=100.0,
                         cpi_core=0.5, mlp=4.0, dirty_fraction=1.0),
    "MemRead": MemoryProfile(buffer_mb=500.0, pages="4k", pattern="sequential",
                             refs_per_kinstr=125.0, cpi_core=0.5, mlp=10.0, dirty_fraction=0.0),
    "MemWrite": MemoryProfile(buffer_mb=256.0, pages="4k", pattern="sequential",
                              refs_per_kinstr=125.0, cpi_core=0.5, mlp=10.0, dirty_fraction=1.0),
    "Syscall": None,
    "Prefetch": MemoryProfile(buffer_mb=96.0, pages="2m", pattern="sequential",
                              refs_per_kinstr=125.0, cpi_core=0.5, mlp=10.0,
                              dirty_fraction=1 / 3),
}
THRESHOLD = 0.20


@dataclass
class Segment:
    name: str
    start_s: float
    end_s: float
    ipc: float | None              # per thread of the target
    ipce: float | None
    sensitivity_ipce: float | None = None
    sensitivity_ipc: float | None = None


def clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def probe(profile: MemoryProfile, threads: int = 1, ways: int = 6, mb: int = 50,
          isolated: bool = True, default_t: float = 12.0, stressor_cores: int = 1,
          model: Model | None = None) -> list[Segment]:
    """The six segments of one probe of ``profile`` (``threads`` CPU-bound threads)."""
    model = model or Model()
    total = model.geometry.ways
    if isolated:
        if not 1 <= ways <= total:
            raise ValueError(f"--ways must be in 1..{total}")
        if mb not in model.mba:
            raise ValueError(f"--mb must be one of {sorted(model.mba)}")
        cbm, mba = (1 << ways) - 1, model.mba[mb]
    else:
        cbm, mba = (1 << total) - 1, 1.0
    seg_t = default_t / len(SEGMENTS)
    target = TenantIn("target", profile, model.curve(profile), cbm, float(threads), mba)
    out = []
    for i, name in enumerate(SEGMENTS):
        span = (i * seg_t, (i + 1) * seg_t)
        stressor = STRESSORS.get(name)
        if name != "baseline" and stressor is None:
            out.append(Segment(name, *span, None, None))
            continue
        tenants = [target]
        if stressor is not None:
            tenants.append(TenantIn("neighbor", stressor, model.curve(stressor), cbm,
                                    float(stressor_cores), mba))
        o = solve(tenants, total, model.hp)[0]
        out.append(Segment(name, *span, 1.0 / o.cpi, profile.cpi_core / o.cpi))
    base = out[0]
    for s in out[1:]:
        if s.ipce is not None:
            s.sensitivity_ipce = clamp((base.ipce - s.ipce) / base.ipce)
            s.sensitivity_ipc = clamp((base.ipc - s.ipc) / base.ipc)
    return out


def classify(segments: list[Segment], threshold: float = THRESHOLD) -> str:
    worst = max(s.sensitivity_ipce for s in segments if s.sensitivity_ipce is not None)
    return "high" if worst >= threshold else "moderate"


def render(segments: list[Segment], threshold: float = THRESHOLD) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
    lines = [f"{'segment':<9} {'t (s)':>11} {'IPC':>7} {'IPCE':>7} {'sens IPCE':>9} {'sens IPC':>9}"]
    for s in segments:
        lines.append(f"{s.name:<9} {s.start_s:5.1f}-{s.end_s:<5.1f} {fmt(s.ipc):>7} "
                     f"{fmt(s.ipce):>7} {fmt(s.sensitivity_ipce):>9} {fmt(s.sensitivity_ipc):>9}")
    lines.append(f"classification: {classify(segments, threshold)} "
                 f"(high: max IPCE sensitivity >= {threshold:g}; our rule, the thesis gives none)")
    if any(s.ipce is None for s in segments):
        lines.append("n/a: the model has no kernel-lock contention (futex stressor)")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archetype", required=True, choices=sorted(archetypes()))
    ap.add_argument("--threads", type=int, default=None,
                    help="target threads (default: the archetype's)")
    ap.add_argument("--ways", type=int, default=6, help="isolation partition ways (default 6)")
    ap.add_argument("--mb", type=int, default=50, help="isolation partition MB %% (default 50)")
    ap.add_argument("--no-isolation", action="store_true",
                    help="probe in the root group with every way and full bandwidth")
    ap.add_argument("--default-t", type=float, default=12.0, help="probe time, s (Listing 4.17)")
    ap.add_argument("--stressor-cores", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=THRESHOLD)
    args = ap.parse_args(argv)
    entry = archetypes()[args.archetype]
    profile = MemoryProfile.from_spec({"archetype": args.archetype})
    threads = args.threads or int(entry.get("threads", 1))
    segs = probe(profile, threads, args.ways, args.mb, not args.no_isolation, args.default_t,
                 args.stressor_cores)
    where = ("root group, all ways" if args.no_isolation
             else f"isolated: {args.ways} ways, {args.mb}% MB")
    print(f"{args.archetype}: {threads} thread(s), {where}, {args.default_t:g} s in 6 segments")
    print(render(segs, args.threshold))


if __name__ == "__main__":
    main()
