"""Exact window sums from running sums over integers: cost flat in the kernel size.

A running sum (add the tap entering the window, subtract the one leaving it) costs two operations
per output whatever the kernel size. In floating point it is wrong: a NaN or Inf, once added,
never leaves, and a huge value leaves its rounding error in every later window. So the values of
each group of slabs (or of each slab) are first checked (:func:`fixed_point_exponent`): when all
are finite and their dynamic range is small enough, there is one ``q`` such that every value is an integer
multiple of ``2**q`` and every partial sum of the pool, counted in units of ``2**q``, fits in an
int64. The values are turned into those integers and summed in int64, where addition does not
round: every window sum is exact, whatever the order of summation; only scaling it by ``2**q``
and the divisor's reciprocals (float64, 2**-53 each) and the final rounding to the output dtype
round. A slab that fails the check (NaN, Inf, or a range wider than about ``2**27`` between its
largest and smallest nonzero magnitude, ``2**(38 - log2(taps))`` past 2048 taps: each value an
integer of at most 51 bits, :func:`avgpool.tables.headroom`) is pooled by the float64 kernels of
:mod:`.separable` instead.

A slab is swept once, in order, holding only running sums: along each spatial axis but the
last, a running vector sum of the rows the current window covers (``_vertical_step``: one row
leaves, one enters, as integers), each level summing rows of the level above it; the first
level reads the input, converting its values as they enter and leave. Along the last axis, an
NXC slab's rows of channels move the same way and are scaled into the output; an NCX slab's
last axis is contiguous, and each line of column sums gets its window sums eight at a time from
an in-register prefix sum (:mod:`.vector_scan`). So the integers held are one row of each
level (``2 * slab / L0`` bytes and less), never a copy of the slab; where those rows would
be big (a slab of few rows: 1x2xWxC held as much as itself), the slab is swept box by box
(:func:`_exact_stream`): each box a range of outputs along some later axes (NXC: and a range of
channels) and the input its windows read, its rows within the engine's budget. Integer sums
do not depend on how they are split, so the bits are those of one sweep. Memory is the input,
the output, and a few rows (a 2-D NCX slab, an image plane, is one sweep, :func:`_exact_plane`,
every intermediate in cache). A line of column sums whose padded line would be much longer
than its input and output (a huge kernel with few outputs) takes its window sums from the
prefix sums of the values actually read instead (``clipped``); a 1-D NCX line is copied whole
only up to :data:`WHOLE_LINE_MAX`, else streamed in chunks (:func:`_streamed_lines`), whatever
its length and kernel.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numba import types
from numba.extending import overload

from .columns import LENGTH, OFFSET, OUTPUTS, PASS_CLIPPED, PASS_KERNEL, PASS_LINE, PASS_PAD_BEGIN
from .jit import COMPUTE, INLINED, JIT, NO, ONE, ZERO, U, kernel
from .vector_scan import LANES, window_blocks

#: What :func:`fixed_point_exponent` returns for values that cannot be summed exactly in int64.
NOT_EXACT = 1 << 20
_ABS_BITS = np.uint32(0x7FFFFFFF)
_ONE = np.uint32(1)
_EXPONENT_ALL_ONES = 0x7F800000  # float32 bits at and above it (absolute value) are Inf or NaN
# The per-line steps are inlined where they are called (numba IR), not called: numba passes each
# array as a dozen stack words, and each call costs saving registers, reloading the arrays'
# fields and a fresh alias check per loop. With 256-value lines that is a tenth of the sweep
# (16 planes of 256x256, k31, serial, interleaved: 0.298-0.299 ms inlined, 0.323-0.334 called).
_PER_LINE = INLINED


@kernel(**COMPUTE)
def fixed_point_exponent(bits, n0, n1, headroom):
    """For the float32 values whose bit patterns are ``bits[n0:n1]``: the exponent ``q`` such
    that every value is an integer multiple of ``2**q`` and below ``2**(q + headroom)`` in
    magnitude, or NOT_EXACT if a value is NaN or Inf or the range needs more than ``headroom``
    bits. A float32 with exponent field ``E`` is a multiple of ``2**(max(E, 1) - 150)`` and below
    ``2**(max(E, 1) - 126)`` in magnitude."""
    # 32-bit lanes throughout (twice as many per vector as 64-bit ones: 2x faster, measured)
    top = np.uint32(0)
    bottom = np.uint32(0xFFFFFFFF)
    for i in range(U(n0), U(n1)):
        magnitude = np.uint32(bits[i] & _ABS_BITS)
        top = max(top, magnitude)
        bottom = min(bottom, np.uint32(magnitude - _ONE))  # zero wraps to the largest value: ignored
    if top >= _EXPONENT_ALL_ONES:
        return NOT_EXACT
    if top == 0:
        return 0
    q = max(np.int64(bottom + _ONE) >> 23, 1) - 150
    if max(np.int64(top) >> 23, 1) - 126 - q > headroom:
        return NOT_EXACT
    return q


#: 1.5 * 2**52: :func:`_bias_of` scales it by ``2**q``.
_MAGIC = 6755399441055744.0


@kernel(**COMPUTE)
def _bias_of(unit):
    """The ``bias`` of :func:`_fixed` for values in units of ``unit`` (``2**q``)."""
    return _MAGIC * unit


@kernel(**COMPUTE)
def _fixed(value, bias):
    """``value / 2**q`` as an int64, ``bias`` being ``1.5 * 2**(52 + q)`` (:func:`_bias_of`) with
    ``q`` from :func:`fixed_point_exponent` over the values converted: exact, the value being a
    multiple of ``2**q`` below ``2**(q + 51)`` in magnitude (the headroom is at most 51 bits:
    :data:`avgpool.tables.VALUE_BITS_MAX`). The sum ``value + bias`` then lies
    in ``[2**(52 + q), 2**(53 + q))``, whose float64 spacing is ``2**q``: it is exact, and its
    low bits are the integer plus those of ``bias``. A float to int64 conversion is one
    instruction with AVX-512 but a scalar one per value with AVX2; this is three vector
    instructions on either (1x16x256x256 k31 planes on an AMD EPYC with AVX2, compiled for it,
    serial: 1.16-1.19 ms against 2.35 by the conversion, the same bits)."""
    return np.float64(np.float64(value) + bias).view(np.int64) - np.float64(bias).view(np.int64)


_SIGN = np.uint64(1 << 63)
_HALF_BITS = np.uint64(32)
_LOW_HALF = np.uint64(0xFFFFFFFF)
_HIGH_EXPONENT = np.uint64(0x4530000000000000)  # the bits of 2**84: 2**84 + h * 2**32 with h in its low bits
_LOW_EXPONENT = np.uint64(0x4330000000000000)  # the bits of 2**52: 2**52 + l
_HIGH_BIAS = float(2**84 + 2**63 + 2**52)  # exact in float64


@kernel(**COMPUTE)
def _to_double(v):
    """``np.float64(v)`` for any int64 ``v``, the same bits (rounded to nearest even), in vector
    instructions: AVX2 has none for the conversion (AVX-512DQ's ``vcvtqq2pd``), and LLVM converts
    one value at a time there. ``v + 2**63 = h * 2**32 + l`` in 32-bit halves; the float64 whose
    bits are 2**84's with ``h`` in its low bits, minus ``2**84 + 2**63 + 2**52``, is exact (both
    in ``[2**84, 2**85)``): ``h * 2**32 - 2**63 - 2**52``; ``2**52 + l`` is exact too, and their
    sum ``v`` rounds once. 1x16x256x256 k31 on an AMD EPYC (AVX2), two threads, interleaved:
    0.82 ms against 0.88 by the conversion (tests/test_vector_scan.py checks the bits)."""
    u = np.uint64(v) ^ _SIGN
    high = np.uint64((u >> _HALF_BITS) | _HIGH_EXPONENT).view(np.float64) - _HIGH_BIAS
    return high + np.uint64((u & _LOW_HALF) | _LOW_EXPONENT).view(np.float64)


@kernel(**COMPUTE)
def _to_fixed_point(x, n0, n1, bias, dst, d0):
    """``dst[d0 + i] = x[n0 + i]`` as an integer (:func:`_fixed`) for ``i < n1 - n0``."""
    for i in range(U(n1 - n0)):
        dst[U(d0) + i] = _fixed(x[U(n0) + i], bias)


@kernel(**_PER_LINE)
def _line_to_fixed_point(x, p, length, pad_begin, bias, line):
    """``line`` = ``pad_begin`` zeros, the ``length`` values of ``x`` from ``p`` as integers
    (:func:`_fixed`), then zeros to its end: every window of the line lies inside it."""
    n, lead = U(line.shape[0]), U(pad_begin)
    for i in range(lead):
        line[i] = 0
    _to_fixed_point(x, p, p + U(length), bias, line, lead)
    for i in range(lead + U(length), n):
        line[i] = 0


@kernel(**_PER_LINE)
def _line_window_sums(line, n_out, k, sums):
    """``sums[o] = line[o] + ... + line[o + k - 1]`` for ``o < n_out``, eight at a time after the
    first (:func:`.vector_scan.window_blocks`): ``line`` must hold ``n_out + k + 7`` values and
    ``sums`` ``n_out + 7``."""
    total = np.int64(0)
    for j in range(U(k)):
        total += line[j]
    sums[0] = total
    window_blocks(line, 0, k, sums, 1, (n_out - 1 + LANES - 1) // LANES, total)


@kernel(**_PER_LINE)
def _contiguous_sums(line, width, n_out, k, clipped, firsts, counts, t, sums):
    """``sums[o]`` for ``o < n_out``: the window sums along a contiguous axis of ``width`` values.
    Not ``clipped``: ``line`` holds them between zeros (the axis's pad_begin zeros before them),
    and every window is ``k`` consecutive values of it (:func:`_line_window_sums`). ``clipped``
    (a line that long would be much longer than the input and the output: a huge kernel with
    few outputs): ``line`` holds the values from its start, and the window sums are differences
    of their prefix sums, written after them (``line`` holds ``2 * width + 1``), over the windows
    clipped to the input (``firsts``, ``counts`` from ``t``). Both sums are exact integers: the
    same, either way."""
    if not clipped:
        _line_window_sums(line, n_out, k, sums)
        return
    n = U(width)
    total = np.int64(0)
    line[n] = 0
    for i in range(n):
        total += line[i]
        line[n + 1 + i] = total
    for o in range(U(n_out)):
        f = firsts[t + o]
        sums[o] = line[n + U(f + counts[t + o])] - line[n + U(f)]


@kernel(**_PER_LINE)
def _scale_line(sums, out, w, m, scale, factors, f):
    """``out[w + i] = float64(sums[i]) * scale * factors[f + i]`` (:func:`_to_double`) for ``i < m``: a line's
    integer window sums as the output, rounded once from float64."""
    for i in range(U(m)):
        out[w + i] = _to_double(sums[i]) * scale * factors[f + i]


#: Outputs of a 1-D line summed per chunk by :func:`_streamed_lines`: its buffers (three times
#: this many int64s, 96 KiB) stay in the L2 cache, whatever the line's length or kernel.
LINE_CHUNK = 4096
#: A 1-D NCX line (zeros, pads and all) up to this long is copied whole as integers
#: (:func:`_running_lines`: each value converted once, where :func:`_streamed_lines` converts
#: it entering and leaving: 4x16x20000 k9 took 0.80 ms serial, 0.39 on two threads, against
#: 0.91 and 0.47 streamed); a longer one, or a clipped one, is streamed (its line and sums
#: would take 16 bytes per value: 1x1x4M k9 5.8 ms streamed, 36 copied whole, out of cache).
WHOLE_LINE_MAX = 1 << 16


@kernel(**_PER_LINE)
def _segment_to_fixed_point(x, p, length, start, count, bias, buf, at):
    """``buf[at + m]`` for ``m < count``: the value at index ``start + m`` of the line of
    ``length`` floats of ``x`` from ``p``, as an integer (:func:`_fixed`), or 0 outside it."""
    lo = min(max(-start, 0), count)
    hi = max(min(length - start, count), lo)
    d = U(at)
    for m in range(U(lo)):
        buf[d + m] = 0
    src = U(p + start + lo)
    for m in range(U(hi - lo)):
        buf[d + U(lo) + m] = _fixed(x[src + m], bias)
    for m in range(U(hi), U(count)):
        buf[d + m] = 0


@kernel(**COMPUTE)
def _streamed_lines(x, s0, rows, length, n_out, pad_begin, k, bias, buf, sums, out, d0, scale, scales, t0):
    """A 1-D NCX slab, or ``rows`` of them (or the one row of a 2-D one): window sums of ``k``
    taps at stride 1 along the contiguous axis of ``rows`` lines of ``length`` float values from
    ``s0`` (as integers, :func:`_fixed`), ``n_out`` each, written to ``out`` from ``d0`` times
    ``scale`` (``unit`` times the scales of the axes before) and the axis's scales from
    ``scales[t0]``. The first window is summed over the input it covers; then
    :data:`LINE_CHUNK` outputs at a time, the values leaving the window go to ``buf[:LINE_CHUNK]``
    and those entering it to ``buf[LINE_CHUNK:]``, and their differences' running sum comes eight
    at a time (:func:`.vector_scan.window_blocks`, the two halves ``LINE_CHUNK`` apart): no line
    as long as the input or the kernel, whatever the two."""
    chunk = LINE_CHUNK
    t = U(t0)
    for r in range(rows):
        p = s0 + r * length
        w = U(d0 + r * n_out)
        total = np.int64(0)
        # the first window covers [-pad_begin, k - pad_begin); a tile's may start inside the line
        for i in range(U(min(max(0, -pad_begin), length)), U(max(0, min(length, k - pad_begin)))):
            total += _fixed(x[U(p) + i], bias)
        out[w] = np.float64(total) * scale * scales[t]
        u = 0  # ``total`` is the sum of window ``u``
        while u + 1 < n_out:
            count = min(chunk, n_out - 1 - u)
            _segment_to_fixed_point(x, p, length, u - pad_begin, count, bias, buf, 0)
            _segment_to_fixed_point(x, p, length, u + k - pad_begin, count, bias, buf, chunk)
            window_blocks(buf, 0, chunk, sums, 0, (count + LANES - 1) // LANES, total)
            _scale_line(sums, out, w + U(u + 1), U(count), scale, scales, t + U(u + 1))
            total = sums[count - 1]
            u += count


@kernel(**COMPUTE)
def _running_lines(x, s0, rows, length, n_out, pad_begin, k, bias, line, sums, out, d0, unit, scales, t0):
    """A 1-D NCX slab, or ``rows`` of them, whose line is at most :data:`WHOLE_LINE_MAX` long:
    window sums of ``k`` taps at stride 1 along the contiguous axis, of ``rows`` lines of
    ``length`` float values from ``s0`` as integers (:func:`_fixed`), ``n_out`` sums each,
    written to ``out`` from ``d0`` times ``unit`` and the axis's scales from ``scales[t0]``.
    Each line is first copied, as integers, between zeros (``pad_begin`` before it), so that
    every window, clipped or not, is ``k`` consecutive values of the copy."""
    m, t = U(n_out), U(t0)
    for r in range(rows):
        _line_to_fixed_point(x, U(s0 + r * length), length, pad_begin, bias, line)
        _line_window_sums(line, n_out, k, sums)
        _scale_line(sums, out, U(d0 + r * n_out), m, unit, scales, t)


def _as_int(value, bias):
    """``value`` as an integer of the running sums: a float in fixed point (:func:`_fixed`);
    an integer, a sum of such integers already, as it is. Compiled code only."""
    raise NotImplementedError


@overload(_as_int)
def _as_int_typed(value, bias):
    if isinstance(value, types.Integer):
        return lambda value, bias: value
    return lambda value, bias: _fixed(value, bias)


@kernel(**_PER_LINE)
def _vertical_step(src, p, stride, width, f, e, a, b, bias, dst, lead):
    """Move ``dst[lead:lead + width]``, the column sums of rows ``a..b`` of the rows of ``width``
    values from ``p``, ``stride`` apart (floats as integers, :func:`_fixed`, or integer sums of
    the level above), to rows ``f..e``: one loop for the common step (one row out, one in), else
    subtract and add row by row, or start afresh where the windows do not overlap (or ``b`` is
    negative: the line holds nothing yet). Returns the new (a, b), which is always (f, e)."""
    n, step = U(width), U(stride)
    if f == a + 1 and e == b + 1:
        old, new = p + U(a) * step, p + U(b) * step
        for i in range(n):
            dst[lead + i] += _as_int(src[new + i], bias) - _as_int(src[old + i], bias)
        return f, e
    if f >= b or f < a or e < b:
        for i in range(n):
            dst[lead + i] = 0
        a, b = f, f
    while a < f:
        row = p + U(a) * step
        for i in range(n):
            dst[lead + i] -= _as_int(src[row + i], bias)
        a += 1
    while b < e:
        row = p + U(b) * step
        for i in range(n):
            dst[lead + i] += _as_int(src[row + i], bias)
        b += 1
    return a, b


#: ``bias`` of :func:`_vertical_step` over rows of integer sums (unused: they are integers).
_INTEGERS = 1.0


#: The (a, b) of a running sum that holds nothing yet: its first step starts afresh.
_FRESH = np.int64(-2)


@kernel(**COMPUTE)
def _exact_plane(
    x, p_in, out, p_out, axes, firsts, counts, scales, pad_begin, kernel, clipped, unit, line, sums, r0, r1
):
    """Output rows ``r0..r1`` of a 2-D NCX slab in one sweep, every intermediate in cache: for
    each output row, the column sums of its window's rows (a running vector sum over the input
    rows, kept between zeros in ``line``), then their window sums along the row
    (:func:`_contiguous_sums`), scaled into ``out``. The last axis has stride 1; ``pad_begin``,
    ``kernel`` and ``clipped`` are its own."""
    t0 = axes[0, OFFSET]
    width, n1, t1 = axes[1, LENGTH], axes[1, OUTPUTS], U(axes[1, OFFSET])
    lead, bias, m = U(0 if clipped else pad_begin), _bias_of(unit), U(n1)
    for i in range(U(line.shape[0])):
        line[i] = 0
    a, b = 0, 0
    for o in range(r0, r1):
        c = counts[t0 + o]
        w = U(p_out + o * n1)
        scale = unit * scales[t0 + o]
        if c == 0:  # no valid tap: 0 * (1/0) is NaN unless padding counts
            for i in range(m):
                out[w + i] = 0.0 * scale * scales[t1 + i]
            continue
        a, b = _vertical_step(x, U(p_in), width, width, firsts[t0 + o], firsts[t0 + o] + c, a, b, bias, line, lead)
        _contiguous_sums(line, width, n1, kernel, clipped, firsts, counts, t1, sums)
        _scale_line(sums, out, w, m, scale, scales, t1)


# The columns of ``dims``, one row per dimension of a slab's later values (its spatial axes, then its
# channels): the input's stride along it, outputs per box (channels per box), the box being swept.
_STRIDE, _PER_BOX, _AT = 0, 1, 2
# The columns of ``box``, one row per dimension: the first input index the box reads, how many
# (along the channels, the box's own channels), its first output, its end output.
_LO, _LENGTH, _U0, _U1 = 0, 1, 2, 3


@kernel(**COMPUTE)
def _set_box(axes, firsts, counts, dims, box):
    """``box`` of box ``dims[:, _AT]``: along each spatial axis, its ``dims[d, _PER_BOX]``
    outputs and the input from the first valid tap of their windows to the last (the whole axis
    where one box holds every output, as an unboxed sweep reads it); its channels. Axis 0 is
    never cut: the sweep runs along it."""
    ndim = axes.shape[0]
    for d in range(ndim + 1):
        whole = axes[d, LENGTH] if d < ndim else dims[ndim - 1, _STRIDE]  # the channels: NCX's stride is 1
        n = axes[d, OUTPUTS] if d < ndim else whole
        u0 = dims[d, _AT] * dims[d, _PER_BOX]
        u1 = min(n, u0 + dims[d, _PER_BOX])
        lo, hi = 0, whole
        if d < ndim and u1 - u0 < n:
            lo, hi = whole, 0
            t = axes[d, OFFSET]
            for o in range(u0, u1):
                if counts[t + o] > 0:
                    lo = min(lo, firsts[t + o])
                    hi = max(hi, firsts[t + o] + counts[t + o])
            hi = max(hi, lo)  # no valid tap in the box: it reads nothing
        elif d == ndim:
            lo, hi = u0, u1
        box[d, _LO], box[d, _LENGTH], box[d, _U0], box[d, _U1] = lo, hi - lo, u0, u1


@kernel(**COMPUTE)
def _next_box(axes, dims):
    """Move ``dims[:, _AT]`` to the next box (the channels' boxes fastest, then the last
    axis's, ...): False after the last."""
    ndim = axes.shape[0]
    for d in range(ndim, 0, -1):
        n = axes[d, OUTPUTS] if d < ndim else dims[ndim - 1, _STRIDE]
        dims[d, _AT] += 1
        if dims[d, _AT] * dims[d, _PER_BOX] < n:
            return True
        dims[d, _AT] = 0
    return False


@kernel(**COMPUTE)
def _box_levels(box, ncx, levels):
    """``levels[i]`` = (values per row along axis ``i`` in the box: the product of the later
    axes' lengths and its channels, where its running sum is kept in the ints); returns the
    ints they take."""
    ndim = levels.shape[0]
    width = box[ndim, _LENGTH]
    for axis in range(ndim - 1, -1, -1):
        levels[axis, 0] = width
        width *= box[axis, _LENGTH]
    held = 0
    for axis in range(max(0, ndim - 2) if ncx else ndim):  # NCX: the last level's line is ``line``
        if axis == 0 and ndim == 2 and box[0, _LENGTH] == 1:
            continue  # a 2-D NXC slab of one row: its last level reads the input (_sweep)
        levels[axis, 1] = held
        held += levels[axis, 0]
    return held


@kernel(**COMPUTE)
def _box_runs(box, dims):
    """The box's row of axis 0 as runs of consecutive input values: (the last dimension ``q``
    that the box cuts, 0 if none; how many runs; their length). Past ``q`` every dimension is
    whole, so a run spans it; the dimensions from 1 to ``q - 1`` index the runs."""
    ndim = box.shape[0] - 1
    q = 0
    for d in range(ndim, 0, -1):
        whole = dims[d - 1, _STRIDE] // dims[d, _STRIDE]
        if box[d, _LO] > 0 or box[d, _LENGTH] < whole:
            q = d
            break
    runs = 1
    for d in range(1, q):
        runs *= box[d, _LENGTH]
    return q, runs, box[q, _LENGTH] * dims[q, _STRIDE] if q > 0 else dims[0, _STRIDE]


@kernel(**COMPUTE)
def _run_start(box, dims, q, s):
    """Where run ``s`` of the box's row of axis 0 starts, from the start of an input row."""
    start = box[q, _LO] * dims[q, _STRIDE]
    for d in range(q - 1, 0, -1):
        start += (box[d, _LO] + s % box[d, _LENGTH]) * dims[d, _STRIDE]
        s //= box[d, _LENGTH]
    return start


@kernel(**_PER_LINE)
def _row_step(x, p, box, dims, q, runs, run, f, e, a, b, bias, ints, lead):
    """:func:`_vertical_step` of level 0, whose rows are the box's part of the input's rows
    along axis 0 (``runs`` runs of ``run`` values each, :func:`_box_runs`), kept one after the
    other from ``ints[lead]``. Returns (f, e)."""
    for s in range(runs):
        _vertical_step(
            x, p + U(_run_start(box, dims, q, s)), dims[0, _STRIDE], run, f, e, a, b, bias, ints, lead + U(s * run)
        )
    return f, e


@kernel(**COMPUTE)
def _box_first(firsts, counts, at, lo):
    """The first valid tap of window ``at`` in a box's input from ``lo``; 0 for an empty window
    (which reads nothing, wherever it is)."""
    return firsts[at] - lo if counts[at] > 0 else 0


@kernel(**COMPUTE)
def _last_level(
    x,
    from_x,
    src_at,
    src_stride,
    ints,
    levels,
    last,
    r,
    out,
    p_out,
    axes,
    firsts,
    counts,
    scales,
    ncx,
    pad_begin,
    kernel,
    clipped,
    bias,
    unit,
    line,
    sums,
    row_factors,
    box,
    channels,
):
    """Every output of the box along axis ``last`` (the last spatial axis of an NXC slab, the
    one before it of an NCX slab) for output row ``r`` of the axes before it, whose running sums
    stand in ``ints`` from ``src_at`` (level ``last - 1``), or ``from_x``: the input's rows from
    ``src_at``, ``src_stride`` apart (``last`` is 0, or the axes before it have one row). Its
    own running sum goes to level ``last`` (NXC: rows of the box's channels, scaled into the
    output as the window moves) or to ``line`` (NCX: a line of column sums, whose window sums
    along the contiguous axis are scaled into the output). A window's scale is ``unit *
    row_factors[r]`` times the axis's own, then (NCX) the contiguous axis's: the products the
    multi-pass kernel took, so the bits are the same (NXC's channels have no divisor)."""
    n, t = axes[last, OUTPUTS], axes[last, OFFSET]
    lo, u0, u1 = box[last, _LO], box[last, _U0], box[last, _U1]
    width = levels[last, 0]
    row_scale = unit * row_factors[r]
    a, b = _FRESH, _FRESH
    if ncx:
        lead = U(0 if clipped else pad_begin)
        ln, tl = axes[last + 1, OUTPUTS], U(axes[last + 1, OFFSET])
        m = U(ln)
        for o in range(u0, u1):  # here ``last`` >= 1 and not ``from_x``: 1-D and 2-D NCX slabs have their own kernels
            f = _box_first(firsts, counts, t + o, lo)
            a, b = _vertical_step(ints, U(src_at), width, width, f, f + counts[t + o], a, b, _INTEGERS, line, lead)
            _contiguous_sums(line, axes[last + 1, LENGTH], ln, kernel, clipped, firsts, counts, tl, sums)
            _scale_line(sums, out, U(p_out + (r * n + o) * ln), m, row_scale * scales[t + o], scales, tl)
        return
    acc = U(levels[last, 1])
    c, c0 = U(width), box[axes.shape[0], _LO]
    for o in range(u0, u1):
        f = _box_first(firsts, counts, t + o, lo)
        if from_x:
            a, b = _vertical_step(x, U(src_at), src_stride, width, f, f + counts[t + o], a, b, bias, ints, acc)
        else:
            a, b = _vertical_step(ints, U(src_at), width, width, f, f + counts[t + o], a, b, _INTEGERS, ints, acc)
        scale = row_scale * scales[t + o]
        w = U(p_out + (r * n + o) * channels + c0)
        for i in range(c):
            out[w + i] = _to_double(ints[acc + i]) * scale


@kernel(**COMPUTE)
def _sweep(
    x,
    p_in,
    out,
    p_out,
    axes,
    firsts,
    counts,
    scales,
    ncx,
    pad_begin,
    kernel,
    clipped,
    unit,
    ints,
    levels,
    state,
    line,
    sums,
    row_factors,
    dims,
    box,
):
    """The outputs of one box of a slab (NXC, or NCX of 3 or more axes), in one sweep along axis
    0 (its outputs ``box[0, _U0]`` to ``box[0, _U1]``, the whole axis but in a part of a slab,
    the input rows counted from the slab's first): level ``i`` is the running sum along axis
    ``i`` of rows of ``levels[i, 0]`` values (the product of the box's later lengths and
    channels) of level ``i - 1`` (level 0: of the input, converted as they enter and leave),
    kept in ``ints`` from ``levels[i, 1]``. Each time the
    levels above the last one stand at a new output, :func:`_last_level` makes every output of
    the box along the last one. ``state[i]`` = (output, a, b) of level ``i``."""
    ndim = axes.shape[0]
    last = ndim - 2 if ncx else ndim - 1
    bias = _bias_of(unit)
    channels, c0 = dims[ndim - 1, _STRIDE], box[ndim, _LO]
    if last == 0:
        _last_level(
            x,
            True,
            p_in + c0,
            channels,
            ints,
            levels,
            last,
            0,
            out,
            p_out,
            axes,
            firsts,
            counts,
            scales,
            ncx,
            pad_begin,
            kernel,
            clipped,
            bias,
            unit,
            line,
            sums,
            row_factors,
            box,
            channels,
        )
        return
    if last == 1 and not ncx and axes[0, LENGTH] == 1:
        # a 2-D NXC slab of one row (N, 1, W, C): each window along the first axis holds that row
        # or nothing, so the last level reads the input row itself (level 0 would copy the slab)
        n1, t1, c = axes[1, OUTPUTS], axes[1, OFFSET], U(box[ndim, _LENGTH])
        src = p_in + box[1, _LO] * channels + c0
        for o in range(box[0, _U0], box[0, _U1]):
            if counts[axes[0, OFFSET] + o] > 0:
                _last_level(
                    x,
                    True,
                    src,
                    channels,
                    ints,
                    levels,
                    last,
                    o,
                    out,
                    p_out,
                    axes,
                    firsts,
                    counts,
                    scales,
                    ncx,
                    pad_begin,
                    kernel,
                    clipped,
                    bias,
                    unit,
                    line,
                    sums,
                    row_factors,
                    box,
                    channels,
                )
                continue
            row_scale = unit * row_factors[o]
            for o1 in range(box[1, _U0], box[1, _U1]):  # no valid tap: 0 * (1/0) is NaN unless padding counts
                scale = row_scale * scales[t1 + o1]
                w = U(p_out + (o * n1 + o1) * channels + c0)
                for i in range(c):
                    out[w + i] = np.float64(0) * scale
        return
    q, runs, run = _box_runs(box, dims)
    level = 0
    state[0, 0], state[0, 1], state[0, 2] = box[0, _U0], _FRESH, _FRESH
    while True:
        i = level
        o = state[i, 0]
        if o == box[i, _U1]:
            if i == 0:
                return
            level = i - 1
            state[level, 0] += 1
            continue
        t = axes[i, OFFSET]
        f = _box_first(firsts, counts, t + o, box[i, _LO])
        e = f + counts[t + o]
        if i == 0:
            a, b = _row_step(
                x, U(p_in), box, dims, q, runs, run, f, e, state[0, 1], state[0, 2], bias, ints, U(levels[0, 1])
            )
        else:
            a, b = _vertical_step(
                ints,
                U(levels[i - 1, 1]),
                levels[i, 0],
                levels[i, 0],
                f,
                e,
                state[i, 1],
                state[i, 2],
                _INTEGERS,
                ints,
                U(levels[i, 1]),
            )
        state[i, 1], state[i, 2] = a, b
        if i + 1 < last:
            level = i + 1
            state[level, 0], state[level, 1], state[level, 2] = box[level, _U0], _FRESH, _FRESH
            continue
        r = 0  # the output row of the levels above the last
        for j in range(last):
            r = r * axes[j, OUTPUTS] + state[j, 0]
        _last_level(
            x,
            False,
            levels[last - 1, 1],
            levels[last, 0],
            ints,
            levels,
            last,
            r,
            out,
            p_out,
            axes,
            firsts,
            counts,
            scales,
            ncx,
            pad_begin,
            kernel,
            clipped,
            bias,
            unit,
            line,
            sums,
            row_factors,
            box,
            channels,
        )
        state[i, 0] += 1


@kernel(**COMPUTE)
def _exact_stream(
    x,
    p_in,
    out,
    p_out,
    axes,
    firsts,
    counts,
    scales,
    ncx,
    pad_begin,
    kernel,
    clipped,
    unit,
    ints,
    levels,
    state,
    line,
    sums,
    row_factors,
    boxed,
    dims,
    box,
    r0,
    r1,
):
    """Outputs ``r0..r1`` along axis 0 of a slab of any other shape (NXC, or NCX of 3 or more
    axes): box by box when ``boxed`` (:func:`_sweep` each; the boxes' windows share no running
    sum, so the integers summed are the same), else in one sweep (``box`` and ``levels`` hold
    the whole slab's)."""
    box[0, _U0], box[0, _U1] = r0, r1
    if not boxed:
        _sweep(
            x,
            p_in,
            out,
            p_out,
            axes,
            firsts,
            counts,
            scales,
            ncx,
            pad_begin,
            kernel,
            clipped,
            unit,
            ints,
            levels,
            state,
            line,
            sums,
            row_factors,
            dims,
            box,
        )
        return
    for d in range(dims.shape[0]):
        dims[d, _AT] = 0
    while True:
        _set_box(axes, firsts, counts, dims, box)
        box[0, _U0], box[0, _U1] = r0, r1  # axis 0 is never cut in boxes: its input stays whole
        _box_levels(box, ncx, levels)
        _sweep(
            x,
            p_in,
            out,
            p_out,
            axes,
            firsts,
            counts,
            scales,
            ncx,
            pad_begin,
            kernel,
            clipped,
            unit,
            ints,
            levels,
            state,
            line,
            sums,
            row_factors,
            dims,
            box,
        )
        if not _next_box(axes, dims):
            return


#: The sweeps of :func:`exact_kernel`, one per kernel (:func:`exact_form` picks it): 1-D NCX lines
#: streamed in chunks, 2-D NCX planes of one row streamed, 1-D NCX lines whole, 2-D NCX planes
#: (:func:`_exact_plane`), any other slab (:func:`_exact_stream`).
STREAMED_LINES, STREAMED_ROW, RUNNING_LINES, PLANE, STREAM = range(5)


def exact_form(ndim: int, first_length: int, passes: np.ndarray) -> int:
    """The sweep of :func:`exact_kernel` for slabs of ``ndim`` axes (the first ``first_length``
    long) pooled by running-sum ``passes`` (RunningTables.passes)."""
    ncx = passes[0, PASS_LINE] > 0
    one_line = ndim == 1 or (ndim == 2 and first_length == 1)
    if ncx and one_line and (passes[0, PASS_CLIPPED] > 0 or passes[0, PASS_LINE] > WHOLE_LINE_MAX):
        return STREAMED_LINES if ndim == 1 else STREAMED_ROW
    if ncx and ndim == 1:
        return RUNNING_LINES
    return PLANE if ncx and ndim == 2 else STREAM


@functools.cache
def _exact_group_kernel(form: int) -> Any:
    """:func:`_exact_group` for slabs of sweep ``form`` (:data:`STREAMED_LINES` ...): the
    others are not compiled."""
    FORM = form

    @kernel(key=("exact_group", form), **COMPUTE)
    def _exact_group(
        x,
        bits,
        out,
        b,
        slabs,
        slab_in,
        slab_out,
        axes,
        firsts,
        counts,
        scales,
        passes,
        headroom,
        row_factors,
        streamed,
        ints,
        levels,
        state,
        line,
        sums,
        boxed,
        dims,
        box,
        r0,
        r1,
    ):
        """Pool slabs ``b..b + slabs`` exactly in int64, their outputs ``r0..r1`` along axis 0 (all
        but in a part of a slab: 2-D or more, not ``streamed``); False (nothing written) if the
        check fails (one ``q`` for them all, from the whole slabs' values). NCX passes the
        contiguous axis's (pad_begin, kernel, clipped). ``streamed``: 1-D NCX lines, or 2-D NCX
        planes of one row, go through :func:`_streamed_lines`."""
        q = fixed_point_exponent(bits, b * slab_in, (b + slabs) * slab_in, headroom)
        if q == NOT_EXACT:
            return False
        unit = math.ldexp(1.0, q)
        bias = _bias_of(unit)
        ncx = passes[0, PASS_LINE] > 0
        pad_begin, kernel, clipped = passes[0, PASS_PAD_BEGIN], passes[0, PASS_KERNEL], passes[0, PASS_CLIPPED] > 0
        if FORM == STREAMED_LINES:
            _streamed_lines(
                x,
                b * slab_in,
                slabs,
                axes[0, LENGTH],
                axes[0, OUTPUTS],
                pad_begin,
                kernel,
                bias,
                line,
                sums,
                out,
                b * slab_out,
                unit,
                scales,
                axes[0, OFFSET],
            )
            return True
        if FORM == STREAMED_ROW:  # 2-D planes of one row: each output row is that row's line, or nothing
            n0, t0, n1, t1 = axes[0, OUTPUTS], axes[0, OFFSET], axes[1, OUTPUTS], U(axes[1, OFFSET])
            for s in range(b, b + slabs):
                for o in range(n0):
                    scale = unit * scales[t0 + o]
                    w = s * slab_out + o * n1
                    if counts[t0 + o] > 0:
                        _streamed_lines(
                            x,
                            s * slab_in,
                            1,
                            axes[1, LENGTH],
                            n1,
                            pad_begin,
                            kernel,
                            bias,
                            line,
                            sums,
                            out,
                            w,
                            scale,
                            scales,
                            axes[1, OFFSET],
                        )
                        continue
                    for i in range(U(n1)):  # no valid tap: 0 * (1/0) is NaN unless padding counts
                        out[U(w) + i] = 0.0 * scale * scales[t1 + i]
            return True
        if FORM == RUNNING_LINES:
            _running_lines(
                x,
                b * slab_in,
                slabs,
                axes[0, LENGTH],
                axes[0, OUTPUTS],
                pad_begin,
                kernel,
                bias,
                line,
                sums,
                out,
                b * slab_out,
                unit,
                scales,
                axes[0, OFFSET],
            )
            return True
        for s in range(b, b + slabs):
            if FORM == PLANE:
                _exact_plane(
                    x,
                    s * slab_in,
                    out,
                    s * slab_out,
                    axes,
                    firsts,
                    counts,
                    scales,
                    pad_begin,
                    kernel,
                    clipped,
                    unit,
                    line,
                    sums,
                    r0,
                    r1,
                )
            else:
                _exact_stream(
                    x,
                    s * slab_in,
                    out,
                    s * slab_out,
                    axes,
                    firsts,
                    counts,
                    scales,
                    ncx,
                    pad_begin,
                    kernel,
                    clipped,
                    unit,
                    ints,
                    levels,
                    state,
                    line,
                    sums,
                    row_factors,
                    boxed,
                    dims,
                    box,
                    r0,
                    r1,
                )
        return True

    return _exact_group


@kernel(**JIT)
def _cache_aligned(size, first):
    """``size`` uninitialised int64s whose element ``first`` starts a 64-byte cache line. The
    allocator aligns to 32 bytes only, and a vector store that straddles two lines costs about
    twice one that does not: aligning the column sums where the vertical step writes them and
    the window sums where the scan writes them took 1x16x256x256 k31 planes from 0.331-0.335
    to 0.321 ms (all eight offsets measured), against 0.366 as allocated."""
    spare = np.empty(size + LANES, np.int64)
    skip = (-(spare.ctypes.data // 8 + first)) % LANES
    return spare[skip : skip + size]


@kernel(**COMPUTE)
def _most_held(axes, firsts, counts, ncx, dims, box, levels):
    """The most ints that the running sums of any one box hold; ``box`` and ``levels`` are left
    at the first box (the whole slab's, unboxed)."""
    most = 0
    while True:
        _set_box(axes, firsts, counts, dims, box)
        most = max(most, _box_levels(box, ncx, levels))
        if not _next_box(axes, dims):
            break
    _set_box(axes, firsts, counts, dims, box)
    _box_levels(box, ncx, levels)
    return most


@functools.cache
def exact_kernel(form: int) -> Any:
    """The entry kernel of the exact running sums for slabs of sweep ``form`` (:func:`exact_form`)."""
    FORM = form
    sweep = _exact_group_kernel(form)

    @kernel(key=("exact", form), **JIT)
    def pool_slabs_exact(x, out, start, stop, t, sums_plan, failed):
        """Pool slabs ``start..stop`` of a float32 input: each group of ``sums_plan.group`` slabs
        exactly in int64 if its values allow (:func:`fixed_point_exponent`); an item (a slab or a
        part of one) whose values do not is left for the float64 kernels of :mod:`.separable`
        with ``failed[item] = 1`` (the caller runs them after: :class:`avgpool._core.pools.PreparedPool`,
        so that a call whose values all pass never compiles them, 9 s of a first call).
        ``t``: :class:`.arguments.SlabTables`; ``sums_plan``: :class:`.arguments.RunningTables`.
        ``passes[j]`` = (axis, runs per slab, inner, and for the contiguous axis of NCX, always
        ``passes[0]``, its pad_begin, kernel, line length and whether it is clipped). A slab of
        :func:`_exact_stream` is swept in boxes of ``box_outputs[d]`` outputs along each spatial
        axis ``d`` (``box_outputs[ndim]``: channels) — its outputs, its channels: one box, the whole
        slab. ``int_size``: the int64 running sums held, one row per level of the biggest box (the
        engine's :func:`~avgpool.tables.running_plan` sizes both; a smaller one is refused)."""
        axes, firsts, counts, scales, channels = t.axes, t.firsts, t.counts, t.scales, t.channels
        passes, headroom, row_factors = sums_plan.passes, sums_plan.headroom, sums_plan.row_factors
        int_size, box_outputs, exact_group = sums_plan.int_size, sums_plan.box_outputs, sums_plan.group
        bits = x.view(np.uint32)
        ndim = axes.shape[0]
        ncx = passes[0, PASS_LINE] > 0
        slab_in, slab_out, most = channels, channels, 1
        for axis in range(ndim):
            slab_in *= axes[axis, LENGTH]
            slab_out *= axes[axis, OUTPUTS]
            most = max(most, axes[axis, OUTPUTS])
        levels = np.zeros((ndim, 2), np.int64)
        state = np.zeros((ndim, 3), np.int64)
        dims = np.zeros((ndim + 1, 3), np.int64)
        box = np.zeros((ndim + 1, 4), np.int64)
        dims[ndim, _STRIDE] = 1
        for d in range(ndim - 1, -1, -1):
            dims[d, _STRIDE] = dims[d + 1, _STRIDE] * (axes[d + 1, LENGTH] if d + 1 < ndim else channels)
        boxed = NO  # a bool, not the literal False: one compiled sweep for every call below
        for d in range(ndim + 1):
            dims[d, _PER_BOX] = box_outputs[d]
            boxed |= box_outputs[d] < (axes[d, OUTPUTS] if d < ndim else channels)
        if _most_held(axes, firsts, counts, ncx, dims, box, levels) > int_size:
            raise RuntimeError("the exact kernel was given too little scratch for its running sums")
        ints = np.empty(int_size, np.int64)
        # a 1-D NCX line, or the one row of 2-D NCX planes, longer than WHOLE_LINE_MAX or clipped
        streamed = FORM <= STREAMED_ROW
        if streamed:  # _streamed_lines: the values leaving and entering a chunk of windows
            line = _cache_aligned(2 * LINE_CHUNK, 0)
            sums = _cache_aligned(LINE_CHUNK, 0)
        else:
            # room for the eight-value blocks of _line_window_sums past the last output; the line's
            # values start at its pad_begin (or at 0 when clipped)
            lead = passes[0, PASS_PAD_BEGIN] if ncx and passes[0, PASS_CLIPPED] == 0 else 0
            line = _cache_aligned((passes[0, PASS_LINE] if ncx else 0) + LANES, lead)
            line[:] = 0  # the zeros around a line of column sums (the running sums touch only its values)
            sums = _cache_aligned(most + LANES, 0)
        n0, parts = axes[0, OUTPUTS], t.parts
        if parts > 1:  # items are parts of slabs: ranges of their outputs along axis 0, checked whole
            for item in range(start, stop):
                b, part = item // parts, item % parts
                if not sweep(
                    x,
                    bits,
                    out,
                    b,
                    ONE,
                    slab_in,
                    slab_out,
                    axes,
                    firsts,
                    counts,
                    scales,
                    passes,
                    headroom,
                    row_factors,
                    streamed,
                    ints,
                    levels,
                    state,
                    line,
                    sums,
                    boxed,
                    dims,
                    box,
                    part * n0 // parts,
                    (part + 1) * n0 // parts,
                ):
                    failed[item] = 1
            return
        for b in range(start, stop, exact_group):
            slabs = min(exact_group, stop - b)
            if sweep(
                x,
                bits,
                out,
                b,
                slabs,
                slab_in,
                slab_out,
                axes,
                firsts,
                counts,
                scales,
                passes,
                headroom,
                row_factors,
                streamed,
                ints,
                levels,
                state,
                line,
                sums,
                boxed,
                dims,
                box,
                ZERO,
                n0,
            ):
                continue
            # slab by slab, so that how a slab is pooled depends on its values only, not on the
            # slabs it was grouped with (serial and threaded calls group differently)
            for s in range(b, b + slabs):
                if sweep(
                    x,
                    bits,
                    out,
                    s,
                    ONE,
                    slab_in,
                    slab_out,
                    axes,
                    firsts,
                    counts,
                    scales,
                    passes,
                    headroom,
                    row_factors,
                    streamed,
                    ints,
                    levels,
                    state,
                    line,
                    sums,
                    boxed,
                    dims,
                    box,
                    ZERO,
                    n0,
                ):
                    continue
                failed[s] = 1

    return pool_slabs_exact
