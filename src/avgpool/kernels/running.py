"""Exact window sums from running sums over integers: cost flat in the kernel size.

A running sum (add the tap entering the window, subtract the one leaving it) costs two operations
per output whatever the kernel size. In floating point it is wrong: a NaN or Inf, once added,
never leaves, and a huge value leaves its rounding error in every later window. So the values of
each group of slabs are first checked (:func:`fixed_point_exponent`): when all are finite and
their dynamic range is small enough, there is one ``q`` such that every value is an integer
multiple of ``2**q`` and every partial sum of the pool, counted in units of ``2**q``, fits in an
int64. The values are turned into those integers and summed in int64, where addition does not
round: every window sum is exact, whatever the order of summation, and is rounded only once,
when it is scaled by ``2**q`` and the divisor. A slab that fails the check (NaN, Inf, or a range
wider than about ``2**(38 - log2(taps))`` between its largest and smallest nonzero magnitude) is
pooled by the float64 kernels of :mod:`.separable` instead.

Passes: along a contiguous axis (the last one of an NCX slab) each line is one chain of integer
additions, ``s += v[i + k] - v[i]`` (one cycle per output: integer additions have no latency to
hide); along any other axis rows of ``inner`` values move as vectors. All passes but the last
write integer window sums; the last one scales them and writes the output. In NCX the
contiguous axis goes first, so that the last pass, which converts and scales, runs as vectors.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .separable import _COMPUTE, _JIT, _U, pool_slabs

#: What :func:`fixed_point_exponent` returns for values that cannot be summed exactly in int64.
NOT_EXACT = 1 << 20
_ABS_BITS = np.uint32(0x7FFFFFFF)
_EXPONENT_ALL_ONES = 0x7F800000  # float32 bits at and above it (absolute value) are Inf or NaN


@njit(**_COMPUTE)
def fixed_point_exponent(bits, n0, n1, headroom):
    """For the float32 values whose bit patterns are ``bits[n0:n1]``: the exponent ``q`` such
    that every value is an integer multiple of ``2**q`` and below ``2**(q + headroom)`` in
    magnitude, or NOT_EXACT if a value is NaN or Inf or the range needs more than ``headroom``
    bits. A float32 with exponent field ``E`` is a multiple of ``2**(max(E, 1) - 150)`` and below
    ``2**(max(E, 1) - 126)`` in magnitude."""
    top = _U(0)
    bottom = _U(0xFFFFFFFFFFFFFFFF)
    for i in range(_U(n0), _U(n1)):
        magnitude = _U(bits[i] & _ABS_BITS)
        top = max(top, magnitude)
        bottom = min(bottom, magnitude - _U(1))  # zero wraps to the largest value: ignored
    if top >= _U(_EXPONENT_ALL_ONES):
        return NOT_EXACT
    if top == 0:
        return 0
    q = max(np.int64((bottom + _U(1)) >> _U(23)), 1) - 150
    if max(np.int64(top >> _U(23)), 1) - 126 - q > headroom:
        return NOT_EXACT
    return q


@njit(**_COMPUTE)
def _to_fixed_point(x, n0, n1, unit, dst):
    """``dst[i] = x[n0 + i] * unit`` as an int64 (exact: the engine chose ``unit = 2**-q``)."""
    for i in range(_U(n1 - n0)):
        dst[i] = np.int64(np.float64(x[_U(n0) + i]) * unit)


@njit(**_COMPUTE)
def _line_to_fixed_point(x, p, length, pad_begin, unit, line):
    """``line`` = ``pad_begin`` zeros, the ``length`` values of ``x`` from ``p`` as integers (times
    ``unit``), then zeros to its end: every window of the line lies inside it."""
    n, lead = _U(line.shape[0]), _U(pad_begin)
    for i in range(lead):
        line[i] = 0
    for i in range(_U(length)):
        line[lead + i] = np.int64(np.float64(x[p + i]) * unit)
    for i in range(lead + _U(length), n):
        line[i] = 0


@njit(**_COMPUTE)
def _running_lines(x, s0, dst, d0, rows, length, n_out, pad_begin, k, unit, line_a, line_b):
    """Window sums of ``k`` taps at stride 1 along a contiguous axis: ``rows`` lines of
    ``length`` float values from ``s0`` as integers, ``n_out`` sums each to ``dst`` from ``d0``.
    Each line is first copied, as integers, between zeros (``pad_begin`` before it), so that
    every window, clipped or not, is the chain ``s += v[o + k - 1] - v[o - 1]``; two lines go
    through the loop together, their chains side by side."""
    tap = _U(k)
    m = _U(n_out)
    for r in range(0, rows, 2):
        pair = r + 1 < rows
        _line_to_fixed_point(x, _U(s0 + r * length), length, pad_begin, unit, line_a)
        _line_to_fixed_point(x, _U(s0 + (r + 1 if pair else r) * length), length, pad_begin, unit, line_b)
        total_a, total_b = np.int64(0), np.int64(0)
        for j in range(tap):
            total_a += line_a[j]
            total_b += line_b[j]
        wa = _U(d0 + r * n_out)
        wb = _U(d0 + (r + 1 if pair else r) * n_out)
        dst[wa] = total_a
        dst[wb] = total_b
        for i in range(_U(1), m):
            total_a += line_a[i + tap - _U(1)] - line_a[i - _U(1)]
            total_b += line_b[i + tap - _U(1)] - line_b[i - _U(1)]
            dst[wa + i] = total_a
            dst[wb + i] = total_b


@njit(**_COMPUTE)
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


@njit(**_COMPUTE)
def _exact_group(x, bits, out, b, slabs, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                 row_factors, inner_factors, ints, size, acc, line_a, line_b):
    """Pool slabs ``b..b + slabs`` exactly in int64; False (nothing written) if the check fails."""
    q = fixed_point_exponent(bits, b * slab_in, (b + slabs) * slab_in, headroom)
    if q == NOT_EXACT:
        return False
    half = slabs * size
    unit = math.ldexp(1.0, q)
    last = passes.shape[0] - 1
    for j in range(passes.shape[0]):
        axis, outer, inner, pad_begin, kernel = passes[j, 0], slabs * passes[j, 1], passes[j, 2], passes[j, 3], passes[j, 4]
        length, n_out, t0 = axes[axis, 0], axes[axis, 1], axes[axis, 2]
        s0 = (j % 2) * half
        d0 = ((j + 1) % 2) * half
        if passes[j, 5] > 0:  # the contiguous axis of NCX: always the first pass, read from x
            _running_lines(x, b * slab_in, ints, d0, outer, length, n_out, pad_begin, kernel, 1.0 / unit, line_a,
                           line_b)
        else:
            if j == 0:
                _to_fixed_point(x, b * slab_in, (b + slabs) * slab_in, 1.0 / unit, ints)
            _running_rows(ints, s0, ints, d0, outer, length, n_out, inner, t0, firsts, counts, acc, j == last, out,
                          b * slab_out, unit, scales, row_factors, inner_factors)
    return True


@njit(**_JIT)
def pool_slabs_exact(x, out, start, stop, group, band, axes, firsts, counts, splits, scales, channels, scratch_size,
                     global_scale, passes, headroom, row_factors, inner_factors, int_size):
    """Pool slabs ``start..stop`` of a float32 input: each group of ``group`` slabs exactly in
    int64 if its values allow (:func:`fixed_point_exponent`), else by :func:`.separable.pool_slabs`
    (whose arguments come first). ``passes[j]`` = (axis, runs per slab, inner, and for the
    contiguous pass its pad_begin, kernel and padded line length) in the order run; ``int_size``
    is the largest intermediate of one slab."""
    bits = x.view(np.uint32)
    slab_in, slab_out = channels, channels
    widest, line = 1, 1
    for axis in range(axes.shape[0]):
        slab_in *= axes[axis, 0]
        slab_out *= axes[axis, 1]
    for j in range(passes.shape[0]):
        widest = max(widest, passes[j, 2])
        line = max(line, passes[j, 5])
    ints = np.empty(2 * group * int_size, np.int64)
    acc = np.empty(widest, np.int64)
    line_a, line_b = np.empty(line, np.int64), np.empty(line, np.int64)
    for b in range(start, stop, group):
        slabs = min(group, stop - b)
        if _exact_group(x, bits, out, b, slabs, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                        row_factors, inner_factors, ints, int_size, acc, line_a, line_b):
            continue
        # slab by slab, so that how a slab is pooled depends on its values only, not on the
        # slabs it was grouped with (serial and threaded calls group differently)
        for s in range(b, b + slabs):
            if not _exact_group(x, bits, out, s, 1, slab_in, slab_out, axes, firsts, counts, scales, passes, headroom,
                                row_factors, inner_factors, ints, int_size, acc, line_a, line_b):
                pool_slabs(x, out, s, s + 1, 1, band, axes, firsts, counts, splits, scales, channels, scratch_size,
                           global_scale)
