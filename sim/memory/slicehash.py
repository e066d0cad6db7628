"""Physical address -> LLC slice ("complex addressing").

Two hashes:

- :class:`XorSliceHash`: the linear hash reverse-engineered for Intel parts
  with 2**n slices (Maurice et al., RAID 2015; masks as used in
  ``aliireza/slice-aware`` ``lib/cache-utils.c`` and other repositories).
  Output bit k is the parity of
  ``PA & mask_k``; ``slice = o_{n-1} ... o_1 o_0``.  The 4th mask
  (``0x11aeeb1200``) is the one a public repository uses for the 16-slice
  Xeon Gold 6130.  Whether the Xeon Silver 4314 (16 slices, Ice Lake-SP) uses
  this function is NOT known: McCalpin found a non-linear
  sequence-plus-permutation hash on the Ice Lake Xeon Gold 6330.
- :class:`UniformSliceHash`: a seeded pseudo-random function of the line
  address, uniform over any slice count.  The default for slice counts that
  are not a power of two (or above 16), where no linear hash is known.

Both take and return numpy arrays (uint64 addresses -> int64 slices).
"""
from __future__ import annotations

import numpy as np

XOR_MASKS = (0x1B5F575440, 0x2EB5FAA880, 0x3CCCC93100, 0x11AEEB1200)
HASH_KINDS = ("auto", "xor", "uniform")


def _parity(x: np.ndarray) -> np.ndarray:
    return (np.bitwise_count(x) & 1).astype(np.int64)


class XorSliceHash:
    """Linear XOR slice hash for 1, 2, 4, 8 or 16 slices."""

    kind = "xor"

    def __init__(self, slices: int, masks: tuple[int, ...] | None = None):
        """``masks``: one PA mask per output bit (default: Maurice et al.'s, see module doc);
        pass others to try hypothetical hashes (e.g. rank-deficient over bits 17-20)."""
        masks = XOR_MASKS if masks is None else tuple(masks)
        if slices < 1 or slices & (slices - 1) or slices > 2 ** len(masks):
            raise ValueError(f"the XOR slice hash needs a power of two <= {2 ** len(masks)} "
                             f"slices, not {slices}")
        self.slices = slices
        self.masks = tuple(np.uint64(m) for m in masks[: slices.bit_length() - 1])

    def __call__(self, pa: np.ndarray) -> np.ndarray:
        pa = np.asarray(pa, dtype=np.uint64)
        out = np.zeros(pa.shape, dtype=np.int64)
        for k, mask in enumerate(self.masks):
            out |= _parity(pa & mask) << k
        return out


class UniformSliceHash:
    """A seeded uniform hash of the line address (PA >> 6): splitmix64 finaliser."""

    kind = "uniform"

    def __init__(self, slices: int, seed: int = 0, line_bytes: int = 64):
        if slices < 1:
            raise ValueError(f"slices must be >= 1, not {slices}")
        self.slices = slices
        self.seed = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        self.line_shift = np.uint64(line_bytes.bit_length() - 1)

    def __call__(self, pa: np.ndarray) -> np.ndarray:
        z = (np.asarray(pa, dtype=np.uint64) >> self.line_shift) ^ self.seed
        with np.errstate(over="ignore"):
            z = z + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        return (z % np.uint64(self.slices)).astype(np.int64)


def make_slice_hash(kind: str, slices: int, seed: int = 0, line_bytes: int = 64,
                    masks: tuple[int, ...] | None = None):
    """``auto``: XOR for 1/2/4/8/16 slices, uniform otherwise."""
    if kind not in HASH_KINDS:
        raise ValueError(f"slice hash must be one of {HASH_KINDS}, not {kind!r}")
    if kind == "auto":
        kind = "xor" if slices & (slices - 1) == 0 and slices <= 2 ** len(XOR_MASKS) else "uniform"
    if kind == "xor":
        return XorSliceHash(slices, masks)
    return UniformSliceHash(slices, seed, line_bytes)
