"""Per-socket (per-LLC) cache geometry from the host preset.

An LLC of ``size`` bytes with ``ways`` ways is split into ``slices`` slices
(one per core/CHA on Intel server parts); each slice has
``sets = size / (ways * slices * line)`` sets.  A physical address PA maps to

- slice ``h(PA)`` through the slice hash (:mod:`sim.memory.slicehash`), and
- set ``(PA >> log2(line)) mod sets``, i.e. PA bits 6..16 for 2048 sets of
  64-byte lines (Haswell to Ice Lake; ``L3_INDEX_PER_SLICE`` in
  ``aliireza/slice-aware``).

A (slice, set) pair is a *bucket*: ``bucket = slice * sets + set``.  CAT
restricts the ways a class may fill in every bucket alike, so a class owning
``w`` ways can hold at most ``w`` lines per bucket.

``silver-4314-2s``: 24 MiB, 12 ways, 16 slices -> 2048 sets, 2 MiB per way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from sim.memory.slicehash import make_slice_hash

MIB = 1 << 20


@dataclass(frozen=True)
class LLCGeometry:
    size_bytes: int
    ways: int
    slices: int
    line_bytes: int = 64
    hash_kind: str = "auto"      # "auto" | "xor" | "uniform" (sim.memory.slicehash)
    hash_seed: int = 0
    hash_masks: tuple[int, ...] | None = None   # custom XOR masks (hash_kind "xor")

    def __post_init__(self):
        if self.ways < 1 or self.slices < 1 or self.size_bytes < 1:
            raise ValueError(f"LLC size, ways and slices must be >= 1: {self}")
        if self.line_bytes < 1 or self.line_bytes & (self.line_bytes - 1):
            raise ValueError(f"line_bytes must be a power of two, not {self.line_bytes}")
        per_set = self.ways * self.slices * self.line_bytes
        if self.size_bytes % per_set:
            raise ValueError(
                f"LLC of {self.size_bytes} bytes is not a whole number of sets of "
                f"{self.ways} ways x {self.slices} slices x {self.line_bytes}-byte lines")

    @classmethod
    def from_host(cls, host: Mapping[str, Any], hash_kind: str = "auto",
                  hash_seed: int = 0, line_bytes: int = 64) -> "LLCGeometry":
        """From a host preset (``llc_mb`` per LLC in MiB, ``llc_ways``, ``llc_slices``)."""
        return cls(size_bytes=int(round(float(host["llc_mb"]) * MIB)), ways=int(host["llc_ways"]),
                   slices=int(host["llc_slices"]), line_bytes=line_bytes,
                   hash_kind=hash_kind, hash_seed=hash_seed)

    @property
    def sets(self) -> int:
        """Sets per slice."""
        return self.size_bytes // (self.ways * self.slices * self.line_bytes)

    @property
    def buckets(self) -> int:
        """(slice, set) pairs."""
        return self.sets * self.slices

    @property
    def way_bytes(self) -> int:
        """Capacity of one way across all slices and sets (2 MiB on the 4314)."""
        return self.size_bytes // self.ways

    @property
    def lines(self) -> int:
        return self.size_bytes // self.line_bytes

    @property
    def line_shift(self) -> int:
        return self.line_bytes.bit_length() - 1

    def slice_hash(self):
        return make_slice_hash(self.hash_kind, self.slices, self.hash_seed, self.line_bytes,
                               self.hash_masks)

    def set_index(self, pa: np.ndarray) -> np.ndarray:
        return ((np.asarray(pa, dtype=np.uint64) >> np.uint64(self.line_shift))
                % np.uint64(self.sets)).astype(np.int64)

    def bucket(self, pa: np.ndarray) -> np.ndarray:
        """(slice, set) bucket of every physical address."""
        pa = np.asarray(pa, dtype=np.uint64)
        return self.slice_hash()(pa) * self.sets + self.set_index(pa)


def socket_bandwidth_bytes_per_s(host: Mapping[str, Any]) -> float:
    """Peak DRAM bandwidth of one socket, bytes/s (host key ``mem_bw_gbps``, GB/s = 1e9 B/s)."""
    return float(host["mem_bw_gbps"]) * 1e9
