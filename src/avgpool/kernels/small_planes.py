"""Small NCX planes (7x7, 14x14: the later pooling nodes of image models) with 3 x 3 "same"
windows at stride 1 (or a single tap along an axis).

The separable passes (:mod:`.separable`) run a vector loop per row; rows of 7 or 14 values are
too short for that, and a third to a half of such a plane's outputs are edge windows, which they
sum one row or one column at a time. Here each pass is a single loop over a block of planes. Only
a window's first and last tap can fall outside the plane (the engine takes this kernel where the
middle tap is the output's own position): their loads come through per-position masks, which
LLVM turns into masked vector loads, and every window is summed from its first valid tap, left to
right, as the separable passes sum it, so the result has their bits, NaN payloads included
(tests/test_small_planes.py compares the two paths on random data with zeros, NaN and Inf).
Along the first axis an absent tap is -0.0, which leaves every sum as it was (``-0.0 + y == y``
for all y). Along the second the sums are written as selects of sums (``a + b if valid else
b``): written with -0.0 there too, LLVM reassociated the additions so that another NaN came
first (0xffc00000 against 0x7fc00000 on a window holding NaN, -inf and +inf); the first axis's
selects of loads are the faster form. A mask on every tap cost 15-20% more.

The masks and the divisor scales of a block of planes are the engine's cached tables
(``tables.small_plane_tables``): ``masks`` = 4 uint8 rows of ``block`` values (first and last
tap along the first axis, then the second), ``factors`` = 2 float64 rows (each axis's scale),
laid out for consecutive planes from a block's first plane, so that threads may split the
planes anywhere.
"""

from __future__ import annotations

import numpy as np

from .columns import LENGTH, PLANE_PAD
from .jit import COMPUTE, U, kernel


@kernel(**COMPUTE)
def pool_small_planes(x, out, start, stop, axes, masks, factors, sums):
    """Pool planes ``start..stop`` of the flat input ``x`` (see the module's conditions), a block
    of planes at a time: the first axis into ``sums`` (float64, the block and a value of margin
    at each end), the second from it into ``out``. ``axes[d, PLANE_PAD]``: the pad_begin of axis
    ``d`` (1: three taps, 0: one)."""
    width = axes[1, LENGTH]
    plane = axes[0, LENGTH] * width
    block = factors.shape[0] // 2
    # each table as an array of its own: LLVM vectorised the loops over one shared array 5x slower
    _pool_blocks(x, out, start, stop, block // plane, plane, width, axes[0, PLANE_PAD] > 0, axes[1, PLANE_PAD] > 0,
                 masks[:block], masks[block:2 * block], masks[2 * block:3 * block], masks[3 * block:],
                 factors[:block], factors[block:], sums)


@kernel(**COMPUTE)
def _pool_blocks(x, out, start, stop, planes, plane, width, tall, wide, up, down, left, right, factor0, factor1,
                 sums):
    """:func:`pool_small_planes` with its tables apart: ``up``/``down`` mask the taps a row above
    and below (``tall``: the first axis has three taps), ``left``/``right`` those a column to
    either side (``wide``)."""
    f64 = np.float64
    negative_zero = -0.0
    w, one = U(width), U(1)
    for b in range(start, stop, planes):
        base = U(b * plane)
        n = U(min(stop - b, planes) * plane)
        if tall:
            for i in range(n):
                q = base + i
                above = f64(x[q - w]) if up[i] else negative_zero
                below = f64(x[q + w]) if down[i] else negative_zero
                sums[one + i] = (above + f64(x[q]) + below) * factor0[i]
        else:
            for i in range(n):
                sums[one + i] = f64(x[base + i]) * factor0[i]
        if wide:
            for i in range(n):
                q = one + i
                front = sums[q - one] + sums[q] if left[i] else sums[q]
                out[base + i] = (front + sums[q + one] if right[i] else front) * factor1[i]
        else:
            for i in range(n):
                out[base + i] = sums[one + i] * factor1[i]
