"""Exact window sums from running sums over integers: cost flat in the kernel size.

A running sum (add the tap entering the window, subtract the one leaving it) costs two operations
per output whatever the kernel size. In floating point it is wrong: a NaN or Inf, once added,
never leaves, and a huge value leaves its rounding error in every later window. So the values of
each group of slabs (or of each slab) are first checked (:func:`fixed_point_exponent`): when all are finite and
their dynamic range is small enough, there is one ``q`` such that every value is an integer
multiple of ``2**q`` and every partial sum of the pool, counted in units of ``2**q``, fits in an
int64. The values are turned into those integers and summed in int64, where addition does not
round: every window sum is exact, whatever the order of summation; only scaling it by ``2**q``
and the divisor's reciprocals (float64, 2**-53 each) and the final rounding to the output dtype
round. A slab that fails the check (NaN, Inf, or a range
wider than about ``2**(38 - log2(taps))`` between its largest and smallest nonzero magnitude) is
pooled by the float64 kernels of :mod:`.separable` instead.

Passes: along a contiguous axis (the last one of an NCX slab) each line is copied as integers
between zeros, and its window sums come eight at a time from an in-register prefix sum
(:mod:`.vector_scan`); along any other axis rows of ``inner`` values move as a running vector
sum. All passes but the last write integer window sums; the last one scales them and writes the
output. In NCX the contiguous axis goes first, so that the last pass, which converts and scales,
runs as vectors; a 2-D NCX slab (an image plane) is done in one sweep instead
(:func:`_exact_plane`), every intermediate in cache.
"""

from __future__ import annotations

import math

import numpy as np
from .jit import kernel

from .crew import call_native
from .separable import _COMPUTE, _JIT, _U
from .vector_scan import LANES, window_blocks

#: What :func:`fixed_point_exponent` returns for values that cannot be summed exactly in int64.
NOT_EXACT = 1 << 20
_ABS_BITS = np.uint32(0x7FFFFFFF)
_ONE = np.uint32(1)
_EXPONENT_ALL_ONES = 0x7F800000  # float32 bits at and above it (absolute value) are Inf or NaN
# The per-line steps are inlined where they are called (numba IR), not called: numba passes each
# array as a dozen stack words, and each call costs saving registers, reloading the arrays'
# fields and a fresh alias check per loop. With 256-value lines that was a tenth of the sweep
# (16 planes of 256x256, k31, serial, interleaved: 0.323-0.334 -> 0.298-0.299 ms).
_PER_LINE = dict(_COMPUTE, inline="always")


@kernel(**_COMPUTE)
def fixed_point_exponent(bits, n0, n1, headroom):
    """For the float32 values whose bit patterns are ``bits[n0:n1]``: the exponent ``q`` such
    that every value is an integer multiple of ``2**q`` and below ``2**(q + headroom)`` in
    magnitude, or NOT_EXACT if a value is NaN or Inf or the range needs more than ``headroom``
    bits. A float32 with exponent field ``E`` is a multiple of ``2**(max(E, 1) - 150)`` and below
    ``2**(max(E, 1) - 126)`` in magnitude."""
    # 32-bit lanes throughout (twice as many per vector as 64-bit ones: 2x faster, measured)
    top = np.uint32(0)
    bottom = np.uint32(0xFFFFFFFF)
    for i in range(_U(n0), _U(n1)):
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


@kernel(**_COMPUTE)
def _fixed(value, to_int):
    """``value * to_int`` as an int64: exact, ``to_int`` being ``2**-q`` with ``q`` from
    :func:`fixed_point_exponent` over the values converted."""
    return np.int64(np.float64(value) * to_int)


#: The largest ``to_int`` (``2**-q``) that :func:`_fixed32` takes: the largest power of two a
#: float32 holds.
_FLOAT32_TOP_POWER = 2.0**127


@kernel(**_COMPUTE)
def _fixed32(value, to_int):
    """:func:`_fixed` with the product taken in float32 (``to_int`` a float32), which one
    instruction converts to int64 where :func:`_fixed` needs two conversions. Exact as long as
    ``to_int`` is (``2**-q`` <= ``_FLOAT32_TOP_POWER``): the product is then an integer of at
    most 24 significant bits, below ``2**62``."""
    return np.int64(value * to_int)


@kernel(**_COMPUTE)
def _to_fixed_point(x, n0, n1, to_int, dst, d0):
    """``dst[d0 + i] = x[n0 + i]`` as an integer (:func:`_fixed`) for ``i < n1 - n0``."""
    for i in range(_U(n1 - n0)):
        dst[_U(d0) + i] = _fixed(x[_U(n0) + i], to_int)


@kernel(**_PER_LINE)
def _line_to_fixed_point(x, p, length, pad_begin, to_int, line):
    """``line`` = ``pad_begin`` zeros, the ``length`` values of ``x`` from ``p`` as integers
    (:func:`_fixed`), then zeros to its end: every window of the line lies inside it."""
    n, lead = _U(line.shape[0]), _U(pad_begin)
    for i in range(lead):
        line[i] = 0
    _to_fixed_point(x, p, p + _U(length), to_int, line, lead)
    for i in range(lead + _U(length), n):
        line[i] = 0


@kernel(**_PER_LINE)
def _line_window_sums(line, n_out, k, sums):
    """``sums[o] = line[o] + ... + line[o + k - 1]`` for ``o < n_out``, eight at a time after the
    first (:func:`.vector_scan.window_blocks`): ``line`` must hold ``n_out + k + 7`` values and
    ``sums`` ``n_out + 7``."""
    total = np.int64(0)
    for j in range(_U(k)):
        total += line[j]
    sums[0] = total
    window_blocks(line, 0, k, sums, 1, (n_out - 1 + LANES - 1) // LANES, total)


@kernel(**_PER_LINE)
def _scale_line(sums, out, w, m, scale, factors, f):
    """``out[w + i] = float64(sums[i]) * scale * factors[f + i]`` for ``i < m``: a line's
    integer window sums as the output, rounded once from float64."""
    for i in range(_U(m)):
        out[w + i] = np.float64(sums[i]) * scale * factors[f + i]


@kernel(**_COMPUTE)
def _running_lines(x, s0, dst, d0, rows, length, n_out, pad_begin, k, to_int, line, sums, final, out, unit, scales,
                   t0):
    """Window sums of ``k`` taps at stride 1 along a contiguous axis: ``rows`` lines of
    ``length`` float values from ``s0`` as integers (times ``to_int``), ``n_out`` sums each.
    Each line is first copied, as integers, between zeros (``pad_begin`` before it), so that
    every window, clipped or not, is ``k`` consecutive values of the copy. Not ``final``: the
    sums go to ``dst`` from ``d0``; ``final`` (the only axis of a 1-D NCX slab): to ``out`` from
    ``d0``, times ``unit`` and the axis's scales from ``scales[t0]``."""
    m, t = _U(n_out), _U(t0)
    for r in range(rows):
        _line_to_fixed_point(x, _U(s0 + r * length), length, pad_begin, to_int, line)
        _line_window_sums(line, n_out, k, sums)
        w = _U(d0 + r * n_out)
        if final:
            _scale_line(sums, out, w, m, unit, scales, t)
        else:
            for i in range(m):
                dst[w + i] = sums[i]


@kernel(**_PER_LINE)
def _vertical_step(x, p, width, f, e, a, b, to_int, line, lead):
    """Move ``line[lead:lead + width]``, the column sums of rows ``a..b`` of the float rows of
    ``width`` values from ``p`` (as integers, times ``to_int``), to rows ``f..e``: one loop for
    the common step (one row out, one in), else subtract and add row by row, or start afresh
    where the windows do not overlap. Returns the new (a, b)."""
    n = _U(width)
    if f == a + 1 and e == b + 1:
        old, new = p + _U(a) * n, p + _U(b) * n
        if to_int <= _FLOAT32_TOP_POWER:  # 1x16x256x256 k31 planes: 0.294-0.306 -> 0.278-0.296 ms
            narrow = np.float32(to_int)
            for i in range(n):
                line[lead + i] += _fixed32(x[new + i], narrow) - _fixed32(x[old + i], narrow)
        else:
            for i in range(n):
                line[lead + i] += _fixed(x[new + i], to_int) - _fixed(x[old + i], to_int)
        return f, e
    if f >= b or f < a or e < b:
        for i in range(n):
            line[lead + i] = 0
        a, b = f, f
    while a < f:
        row = p + _U(a) * n
        for i in range(n):
            line[lead + i] -= _fixed(x[row + i], to_int)
        a += 1
    while b < e:
        row = p + _U(b) * n
        for i in range(n):
            line[lead + i] += _fixed(x[row + i], to_int)
        b += 1
    return a, b


@kernel(**_COMPUTE)
def _exact_plane(x, p_in, out, p_out, axes, firsts, counts, scales, pad_begin, kernel, unit, line, sums):
    """A 2-D NCX slab in one sweep, every intermediate in cache: for each output row, the column
    sums of its window's rows (a running vector sum over the input rows, kept between zeros in
    ``line``), then their window sums along the row (:func:`_line_window_sums`), scaled into
    ``out``. The last axis has stride 1; ``pad_begin`` and ``kernel`` are its own."""
    n0, t0 = axes[0, 1], axes[0, 2]
    width, n1, t1 = axes[1, 0], axes[1, 1], _U(axes[1, 2])
    lead, to_int, m = _U(pad_begin), 1.0 / unit, _U(n1)
    for i in range(_U(line.shape[0])):
        line[i] = 0
    a, b = 0, 0
    for o in range(n0):
        c = counts[t0 + o]
        w = _U(p_out + o * n1)
        scale = unit * scales[t0 + o]
        if c == 0:  # no valid tap: 0 * (1/0) is NaN unless padding counts
            for i in range(m):
                out[w + i] = 0.0 * scale * scales[t1 + i]
            continue
        a, b = _vertical_step(x, _U(p_in), width, firsts[t0 + o], firsts[t0 + o] + c, a, b, to_int, line, lead)
        _line_window_sums(line, n1, kernel, sums)
        _scale_line(sums, out, w, m, scale, scales, t1)


@kernel(**_COMPUTE)
def _running_rows(src, s0, dst, d0, outer, length, n_out, inner, t0, firsts, counts, acc, final, out, o0, unit,
                  scales, row_factors, inner_factors):
    """Window sums along an axis of rows of ``inner`` values, for ``outer`` runs of ``length``
    rows: the running sum is a vector ``acc`` of ``inner`` ints. Not ``final``: the sums go to
    ``dst`` from ``d0`` as ints. ``final``: they go to ``out`` from ``o0``, times ``unit`` (the
    value of one integer step), the axis's scale, ``row_factors[run % len]`` (the scales of the
    axes before this one) and ``inner_factors[i]`` (those of the axes after it). The common
    step, one row leaving and one entering, is one loop that also stores."""
    n = _U(inner)
    runs_per_slab = row_factors.shape[0]
    for run in range(outer):
        sp = _U(s0 + run * length * inner)
        dp = _U(d0 + run * n_out * inner)
        op = _U(o0 + run * n_out * inner)
        row_scale = unit * row_factors[run % runs_per_slab]
        for i in range(n):
            acc[i] = 0
        a, b = 0, 0
        for o in range(n_out):
            c = counts[t0 + o]
            f = firsts[t0 + o]
            e = f + c
            scale = row_scale * scales[t0 + o]
            w = (op if final else dp) + _U(o * inner)
            if c > 0 and f == a + 1 and e == b + 1:
                old, new = sp + _U(a * inner), sp + _U(b * inner)
                a, b = f, e
                if final:
                    for i in range(n):
                        v = acc[i] + (src[new + i] - src[old + i])
                        acc[i] = v
                        out[w + i] = np.float64(v) * scale * inner_factors[i]
                else:
                    for i in range(n):
                        v = acc[i] + (src[new + i] - src[old + i])
                        acc[i] = v
                        dst[w + i] = v
                continue
            if c == 0:  # no valid tap: the sum is 0 (0 * 1/0 gives NaN unless padding counts)
                f, e = a, a
            elif f >= b or f < a or e < b:
                for i in range(n):
                    acc[i] = 0
                a, b = f, f
            while a < f:
                row = sp + _U(a * inner)
                for i in range(n):
                    acc[i] -= src[row + i]
                a += 1
            while b < e:
                row = sp + _U(b * inner)
                for i in range(n):
                    acc[i] += src[row + i]
                b += 1
            if final:
                for i in range(n):
                    out[w + i] = np.float64(acc[i] if c > 0 else 0) * scale * inner_factors[i]
            else:
                for i in range(n):
                    dst[w + i] = acc[i] if c > 0 else 0


@kernel(**_COMPUTE)
def _exact_group(x, bits, out, b, slabs, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                 row_factors, inner_factors, one_sweep, ints, size, acc, line, sums):
    """Pool slabs ``b..b + slabs`` exactly in int64; False (nothing written) if the check fails.
    ``one_sweep``: each slab is a 2-D NCX plane, pooled by :func:`_exact_plane` (``ints`` unused)."""
    q = fixed_point_exponent(bits, b * slab_in, (b + slabs) * slab_in, headroom)
    if q == NOT_EXACT:
        return False
    unit = math.ldexp(1.0, q)
    if one_sweep:
        for s in range(b, b + slabs):
            _exact_plane(x, s * slab_in, out, s * slab_out, axes, firsts, counts, scales, passes[0, 3], passes[0, 4],
                         unit, line, sums)
        return True
    half = slabs * size
    last = passes.shape[0] - 1
    for j in range(passes.shape[0]):
        axis, outer, inner = passes[j, 0], slabs * passes[j, 1], passes[j, 2]
        pad_begin, kernel = passes[j, 3], passes[j, 4]
        length, n_out, t0 = axes[axis, 0], axes[axis, 1], axes[axis, 2]
        s0 = (j % 2) * half
        d0 = ((j + 1) % 2) * half
        if passes[j, 5] > 0:  # the contiguous axis of NCX: always the first pass, read from x
            _running_lines(x, b * slab_in, ints, d0 if j < last else b * slab_out, outer, length, n_out, pad_begin,
                           kernel, 1.0 / unit, line, sums, j == last, out, unit, scales, t0)
        else:
            if j == 0:
                _to_fixed_point(x, b * slab_in, (b + slabs) * slab_in, 1.0 / unit, ints, 0)
            _running_rows(ints, s0, ints, d0, outer, length, n_out, inner, t0, firsts, counts, acc, j == last, out,
                          b * slab_out, unit, scales, row_factors, inner_factors)
    return True


@kernel(**_JIT)
def _cache_aligned(size, first):
    """``size`` uninitialised int64s whose element ``first`` starts a 64-byte cache line. The
    allocator aligns to 32 bytes only, and a vector store that straddles two lines costs about
    twice one that does not: aligning the column sums where the vertical step writes them and
    the window sums where the scan writes them took 1x16x256x256 k31 planes from 0.331-0.335
    to 0.321 ms (all eight offsets measured), against 0.366 as allocated."""
    spare = np.empty(size + LANES, np.int64)
    skip = (-(spare.ctypes.data // 8 + first)) % LANES
    return spare[skip:skip + size]


@kernel(entry=True, **_JIT)
def pool_slabs_exact(x, out, start, stop, group, band, axes, firsts, counts, splits, scales, channels, scratch_size,
                     global_scale, passes, headroom, row_factors, inner_factors, int_size, exact_group, fallback):
    """Pool slabs ``start..stop`` of a float32 input: each group of ``exact_group`` slabs exactly
    in int64 if its values allow (:func:`fixed_point_exponent`), else by :func:`.separable.pool_slabs`
    (whose arguments come first), called at its native address ``fallback``: linked in, it
    would have LLVM optimise the whole float64 kernel again (23 s of the first call, measured).
    ``passes[j]`` = (axis, runs per slab, inner, and for the contiguous pass its pad_begin,
    kernel and padded line length) in the order run; ``int_size`` is the largest intermediate
    of one slab."""
    bits = x.view(np.uint32)
    slab_in, slab_out = channels, channels
    widest, longest_line, most = 1, 1, 1
    for axis in range(axes.shape[0]):
        slab_in *= axes[axis, 0]
        slab_out *= axes[axis, 1]
        most = max(most, axes[axis, 1])
    for j in range(passes.shape[0]):
        widest = max(widest, passes[j, 2])
        longest_line = max(longest_line, passes[j, 5])
    one_sweep = passes.shape[0] == 2 and passes[0, 5] > 0  # 2-D NCX: no integer intermediates
    ints = np.empty(0 if one_sweep else 2 * exact_group * int_size, np.int64)
    acc = np.empty(widest, np.int64)
    # room for the eight-value blocks of _line_window_sums past the last output; the line's
    # values start at its pad_begin (the contiguous pass is the first)
    line = _cache_aligned(longest_line + LANES, passes[0, 3] if passes[0, 5] > 0 else 0)
    sums = _cache_aligned(most + LANES, 0)
    for b in range(start, stop, exact_group):
        slabs = min(exact_group, stop - b)
        if _exact_group(x, bits, out, b, slabs, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                        row_factors, inner_factors, one_sweep, ints, int_size, acc, line, sums):
            continue
        # slab by slab, so that how a slab is pooled depends on its values only, not on the
        # slabs it was grouped with (serial and threaded calls group differently)
        for s in range(b, b + slabs):
            if _exact_group(x, bits, out, s, 1, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                            row_factors, inner_factors, one_sweep, ints, int_size, acc, line, sums):
                continue
            if not call_native(fallback, x, out, s, s + 1, (group, band, axes, firsts, counts, splits, scales,
                                                            channels, scratch_size, global_scale)):
                raise RuntimeError("the float64 kernel failed on a slab the exact path could not take")
