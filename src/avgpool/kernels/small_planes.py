"""Small NCX planes (7x7, 14x14: the later pooling nodes of image models) with 3 x 3 "same"
windows at stride 1 (or a single tap along an axis).

The separable passes (:mod:`.separable`) run a vector loop per row; rows of 7 or 14 values are
too short for that, and a third to a half of such a plane's outputs are edge windows, which they
sum one row or one column at a time. Here each pass is a single loop over a block of planes. Only
a window's first and last tap can fall outside the plane (the engine takes this kernel where the
middle tap is the output's own position): each output adds its middle tap to its first and then
its last where a per-position mask says they are valid taps, which LLVM turns into masked vector
loads and blends. That is the separable passes' order (every window from its first valid tap,
left to right), so the result has the same bits, NaN payloads included: the additions are
written as selects of sums, not as sums of selected taps with -0.0 for an absent tap, which
LLVM reassociated so that another NaN operand came first (tests/test_small_planes.py compares
the two paths on random data with zeros, NaN and Inf). A mask on every tap cost 15-20% more.

The masks and the divisor scales of a block of planes are the engine's cached tables
(``tables.small_plane_tables``): ``masks`` = 4 uint8 rows of ``block`` values (first and last
tap along the first axis, then the second), ``factors`` = 2 float64 rows (each axis's scale),
laid out for consecutive planes from a block's first plane, so that threads may split the
planes anywhere.
"""

from __future__ import annotations

import numpy as np

from .jit import COMPUTE, U, kernel


@kernel(**COMPUTE)
def pool_small_planes(x, out, start, stop, axes, masks, factors, sums):
    """Pool planes ``start..stop`` of the flat input ``x`` (see the module's conditions), a block
    of planes at a time: the first axis into ``sums`` (float64, the block and a value of margin
    at each end), the second from it into ``out``. ``axes[d, 8]``: the pad_begin of axis ``d`` (1: three taps,
    0: one)."""
    width = axes[1, 0]
    plane = axes[0, 0] * width
    block = factors.shape[0] // 2
    # each table as an array of its own: LLVM vectorised the loops over one shared array 5x slower
    _pool_blocks(x, out, start, stop, block // plane, plane, width, axes[0, 8] > 0, axes[1, 8] > 0,
                 masks[:block], masks[block:2 * block], masks[2 * block:3 * block], masks[3 * block:],
                 factors[:block], factors[block:], sums)


@kernel(**COMPUTE)
def _pool_blocks(x, out, start, stop, planes, plane, width, tall, wide, up, down, left, right, factor0, factor1,
                 sums):
    """:func:`pool_small_planes` with its tables apart: ``up``/``down`` mask the taps a row above
    and below (``tall``: the first axis has three taps), ``left``/``right`` those a column to
    either side (``wide``)."""
    f64 = np.float64
    w, one = U(width), U(1)
    for b in range(start, stop, planes):
        base = U(b * plane)
        n = U(min(stop - b, planes) * plane)
        if tall:
            for i in range(n):
                q = base + i
                top = f64(x[q - w]) + f64(x[q]) if up[i] else f64(x[q])
                sums[one + i] = (top + f64(x[q + w]) if down[i] else top) * factor0[i]
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
