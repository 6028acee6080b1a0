"""Small NCX planes (7x7, 14x14: the later pooling nodes of image models) with windows of at most
three taps per axis at stride 1 and an output the size of the input ("same" padding).

The separable passes (:mod:`.separable`) run a vector loop per row; rows of 7 or 14 values are
too short for that, and a third to a half of such a plane's outputs are edge windows, which they
sum one row or one column at a time. Here each pass is a single loop over a block of planes in
which every output sums three taps: a tap outside its window is replaced by -0.0, which leaves
every sum as it was (``-0.0 + y == y`` for all y: signed zeros, infinities and NaN included),
so each window adds its valid taps in the order the separable passes add them and the result
has the same bits (tests/test_small_planes.py compares the two on random data, zeros, NaN and
Inf). The taps come through per-position masks, which LLVM turns into masked vector loads.
"""

from __future__ import annotations

import numpy as np

from .jit import COMPUTE, U, kernel

#: Values of the planes pooled together: the per-position masks and scales of a block (10 bytes
#: a value) and its intermediate sums (8) stay in the L1 cache (512 to 2048 measured alike).
BLOCK_VALUES = 1024


@kernel(**COMPUTE)
def block_planes(axes):
    """The planes pooled together in one block."""
    return max(1, BLOCK_VALUES // (axes[0, 0] * axes[1, 0]))


@kernel(**COMPUTE)
def _tap_masks(axes, axis, firsts, counts, scales, masks, factors, plane, row_size, tap_step):
    """``masks[t * tap_step + i]``: whether tap ``t`` (0 to 2) of the window of position ``i``
    along ``axis`` is one of its valid taps; ``factors[i]``: that window's divisor scale.
    Position i of the plane is at row ``i // row_size``, column ``i % row_size``."""
    length, offset, pad_begin = axes[axis, 0], axes[axis, 2], axes[axis, 8]
    for i in range(plane):
        o = i // row_size if axis == 0 else i % row_size
        first, count = firsts[offset + o], counts[offset + o]
        for t in range(3):
            tap = o - pad_begin + t
            masks[t * tap_step + i] = 1 if first <= tap < first + count and tap < length else 0
        factors[i] = scales[offset + o]


@kernel(**COMPUTE)
def _repeat(values, part, times):
    """``values[k * part : (k + 1) * part] = values[:part]`` for ``k < times``."""
    for k in range(1, times):
        base = U(k * part)
        for i in range(U(part)):
            values[base + i] = values[i]


@kernel(**COMPUTE)
def fill_tables(axes, firsts, counts, scales, masks, factors):
    """The masks (6 per value: three taps along each axis) and scales (2 per value) of a block of
    planes, laid out as :func:`pool_small_planes` reads them."""
    width = axes[1, 0]
    plane = axes[0, 0] * width
    block = block_planes(axes) * plane
    for axis in range(2):
        _tap_masks(axes, axis, firsts, counts, scales, masks[3 * axis * block:], factors[axis * block:], plane, width,
                   block)
        for t in range(3):
            _repeat(masks[(3 * axis + t) * block:], plane, block // plane)
        _repeat(factors[axis * block:], plane, block // plane)


@kernel(**COMPUTE)
def pool_small_planes(x, out, start, stop, axes, masks, factors, sums):
    """Pool planes ``start..stop`` of the flat input ``x`` (see the module's conditions), a block
    of :func:`block_planes` at a time: the first axis into ``sums`` (float64, two values of
    margin at each end), the second from ``sums`` into ``out``."""
    width = axes[1, 0]
    block = block_planes(axes) * axes[0, 0] * width
    # each table as an array of its own: LLVM vectorised the loops over one shared array 5x slower
    _pool_blocks(x, out, start, stop, block_planes(axes), axes[0, 0] * width, axes[0, 8] * width, width, axes[1, 8],
                 masks[:block], masks[block:2 * block], masks[2 * block:3 * block], masks[3 * block:4 * block],
                 masks[4 * block:5 * block], masks[5 * block:6 * block], factors[:block], factors[block:2 * block],
                 sums)


@kernel(**COMPUTE)
def _pool_blocks(x, out, start, stop, planes, plane, before0, width, before1, down0, down1, down2, across0, across1,
                 across2, factor0, factor1, sums):
    """:func:`pool_small_planes` with its tables apart: ``down<t>`` and ``across<t>`` are the masks
    of tap t along the first and second axis, whose windows start ``before0`` values (a whole
    number of rows of ``width``) and ``before1`` values before their output."""
    f64 = np.float64
    negative_zero = -0.0
    # tap t of position i is x[i + shift<t>] along the first axis, sums[2 + i - before1 + t] along the second
    shift0, shift1, shift2 = U(-before0), U(width - before0), U(2 * width - before0)
    for b in range(start, stop, planes):
        base = U(b * plane)
        for i in range(U(min(stop - b, planes) * plane)):
            q = base + i
            a0 = f64(x[q + shift0]) if down0[i] else negative_zero
            a1 = f64(x[q + shift1]) if down1[i] else negative_zero
            a2 = f64(x[q + shift2]) if down2[i] else negative_zero
            sums[U(2) + i] = (a0 + a1 + a2) * factor0[i]
        first = U(2 - before1)
        for i in range(U(min(stop - b, planes) * plane)):
            q = first + i
            c0 = sums[q] if across0[i] else negative_zero
            c1 = sums[q + U(1)] if across1[i] else negative_zero
            c2 = sums[q + U(2)] if across2[i] else negative_zero
            out[base + i] = (c0 + c1 + c2) * factor1[i]
