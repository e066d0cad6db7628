"""A workload's buffer -> physical frames -> per-(slice, set) demand.

A buffer of ``W`` bytes is backed by pages of 4 KiB, 2 MiB (THP or hugetlb)
or 1 GiB.  The kernel picks the physical frames: for small pages they are
scattered over physical memory (drawn here uniformly at random, without
replacement, with a seeded RNG: memory after some uptime); a 1 GiB page is
one contiguous, 1 GiB-aligned frame.  Inside a page, the physical offset is
the virtual offset, so the page size decides how many physical-address bits
the *application* controls:

- 4 KiB: bits 0-11 (6 of the 11 set-index bits; every slice-hash bit >= 12 is
  random per page),
- 2 MiB: bits 0-20 (the whole set index and hash bits 6-20),
- 1 GiB: bits 0-29.

Every touched line is mapped to its bucket (slice, set) through the geometry
(:class:`sim.memory.llc.LLCGeometry`); the per-bucket count of touched lines
is the *demand* ``D_b`` that :mod:`sim.memory.cachemodel` sets against the
ways a class owns.  No page-size constant appears anywhere: the differences
between page sizes come only from this layout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from sim.memory.llc import LLCGeometry

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
PAGE_BYTES = {"4k": 4 * KIB, "2m": 2 * MIB, "1g": GIB}
# The --hugepages names of the noisy-neighbor thesis's neighbor microbenchmark
# ("Mitigating the Noisy Neighbor Problem: Improving Isolation of Containers on
# Multi-Tenant Intel Cloud Servers", Appendix A.5).
PAGE_ALIASES = {"none": "4k", "thp": "2m", "hugetlb-2m": "2m", "hugetlb-1g": "1g"}
PATTERNS = ("random", "stride", "sequential")
DEFAULT_PHYS_BYTES = 1 << 38   # 256 GiB: covers every bit the XOR hash reads (6..37)


def parse_page_size(page: int | str) -> int:
    """4096 / '4k' / '4KB' / 'none' / '2m' / 'thp' / 'hugetlb-2m' / '1g' / 'hugetlb-1g' -> bytes."""
    if isinstance(page, (int, np.integer)):
        if int(page) not in PAGE_BYTES.values():
            raise ValueError(f"page size must be 4 KiB, 2 MiB or 1 GiB, not {page} bytes")
        return int(page)
    key = str(page).strip().lower()
    key = PAGE_ALIASES.get(key, key)
    key = re.sub(r"i?b$", "", key)
    if key not in PAGE_BYTES:
        raise ValueError(f"unknown page size {page!r}: use 4k, 2m, 1g, none, thp, "
                         "hugetlb-2m or hugetlb-1g")
    return PAGE_BYTES[key]


@dataclass(frozen=True)
class Buffer:
    """What a workload touches: ``size_bytes`` backed by ``page_bytes`` pages,
    accessed with ``pattern`` (random: uniform line references; sequential: a
    cyclic sweep; stride: a cyclic sweep over every ``stride_bytes``-th byte)."""
    size_bytes: int
    page_bytes: int = 4 * KIB
    pattern: str = "random"
    stride_bytes: int = 4 * KIB

    def __post_init__(self):
        if self.size_bytes < 1:
            raise ValueError(f"buffer size must be >= 1 byte, not {self.size_bytes}")
        parse_page_size(self.page_bytes)
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, not {self.pattern!r}")
        if self.stride_bytes < 1:
            raise ValueError(f"stride_bytes must be >= 1, not {self.stride_bytes}")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "Buffer":
        """``{"buffer_mb": 6, "pages": "thp", "pattern": "random", "stride_bytes": 4096}``."""
        return cls(size_bytes=int(round(float(spec["buffer_mb"]) * MIB)),
                   page_bytes=parse_page_size(spec.get("pages", "4k")),
                   pattern=spec.get("pattern", "random"),
                   stride_bytes=int(spec.get("stride_bytes", 4 * KIB)))

    @property
    def n_pages(self) -> int:
        return -(-self.size_bytes // self.page_bytes)


def frame_layout(buffer: Buffer, rng: np.random.Generator | int,
                 phys_bytes: int = DEFAULT_PHYS_BYTES, layout: str | None = None) -> np.ndarray:
    """Physical base address of each page of ``buffer`` (uint64 array).

    ``layout``: ``"scattered"`` (distinct frames drawn uniformly; the default
    below 1 GiB) or ``"contiguous"`` (one run of frames at a random aligned
    base; the default for 1 GiB pages, and what a freshly defragmented
    machine may give THP)."""
    rng = np.random.default_rng(rng)
    page = buffer.page_bytes
    n_frames = phys_bytes // page
    n = buffer.n_pages
    if n > n_frames:
        raise ValueError(f"buffer needs {n} pages of {page} bytes; physical memory has {n_frames}")
    layout = layout or ("contiguous" if page >= GIB else "scattered")
    if layout == "scattered":
        frames = rng.choice(n_frames, size=n, replace=False)
    elif layout == "contiguous":
        frames = int(rng.integers(0, n_frames - n + 1)) + np.arange(n)
    else:
        raise ValueError(f"layout must be 'scattered' or 'contiguous', not {layout!r}")
    return frames.astype(np.uint64) * np.uint64(page)


def touched_lines(buffer: Buffer, line_bytes: int = 64) -> np.ndarray:
    """Virtual line indices the access pattern touches (each once)."""
    n_lines = -(-buffer.size_bytes // line_bytes)
    if buffer.pattern == "stride" and buffer.stride_bytes > line_bytes:
        return np.arange(0, buffer.size_bytes, buffer.stride_bytes, dtype=np.uint64) // np.uint64(line_bytes)
    return np.arange(n_lines, dtype=np.uint64)


def line_addresses(buffer: Buffer, frames: np.ndarray, line_bytes: int = 64) -> np.ndarray:
    """Physical address of every touched line (uint64)."""
    virt = touched_lines(buffer, line_bytes) * np.uint64(line_bytes)
    page = np.uint64(buffer.page_bytes)
    return np.asarray(frames, dtype=np.uint64)[(virt // page).astype(np.int64)] + virt % page


def bucket_demand(geometry: LLCGeometry, buffer: Buffer, rng: np.random.Generator | int = 0,
                  phys_bytes: int = DEFAULT_PHYS_BYTES, layout: str | None = None) -> np.ndarray:
    """Touched lines per (slice, set) bucket: an int64 array of ``geometry.buckets``."""
    frames = frame_layout(buffer, rng, phys_bytes, layout)
    buckets = geometry.bucket(line_addresses(buffer, frames, geometry.line_bytes))
    return np.bincount(buckets, minlength=geometry.buckets).astype(np.int64)
