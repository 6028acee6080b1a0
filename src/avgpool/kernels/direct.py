"""Direct sums of the valid taps along one axis (cost ``k`` per output: small kernels, large strides).

A pass along an axis with ``inner`` contiguous values after it sums whole rows of ``inner``
values at a time; the last axis of an NCX slab (``inner == 1``) sums strided taps instead. The
windows that lie wholly inside the input are done as long vector loops, the clipped edge windows
one by one. Every window sums its taps from the first, in order (-0.0 + -0.0 stays -0.0).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .columns import DILATION, INNER_HI, INNER_LO, LENGTH, OFFSET, OUTPUTS, STRIDE
from .jit import COMPUTE, INLINED, NO, YES, U, kernel


@kernel(**COMPUTE)
def _side_by_side(taps, tap_step, stride):
    """Whether windows go by :func:`_side_by_side_sums`: 4 or 8 contiguous taps at that stride."""
    return tap_step == 1 and stride == taps and (taps == 4 or taps == 8)


@kernel(**COMPUTE)
def _side_by_side_sums(src, p, dst, o, m, taps, scale, acc):
    """``dst[o + i] = scale * sum_j src[p + taps*i + j]`` for ``i < m``, ``taps`` 4 or 8: windows
    side by side along a contiguous axis, summed in pairs, each level a loop of literal stride 2,
    which LLVM vectorises (a loop of stride 4 stays scalar: 77 ps per input value in pairs against
    250, in cache). ``acc`` holds ``m * taps`` values."""
    f64 = np.float64
    one, two = U(1), U(2)
    pairs = U(m) * U(taps) // two
    for i in range(pairs):
        acc[i] = f64(src[p + two * i]) + f64(src[p + two * i + one])
    level = U(0)
    if taps == 8:  # the sums of four
        level = pairs
        for i in range(pairs // two):
            acc[level + i] = acc[two * i] + acc[two * i + one]
    for i in range(U(m)):
        dst[o + i] = (acc[level + two * i] + acc[level + two * i + one]) * scale


def _sums_kernel(many: bool) -> Any:
    """:func:`strided_sums` (``many``: windows of any number of taps) or :func:`few_sums` (at
    most 3 taps: the loops for more are not compiled)."""
    MANY = many

    @kernel(key=("sums", many), **COMPUTE)
    def sums(src, p0, dst, w, rows, src_row, dst_row, m, taps, tap_step, stride, scale, acc):
        """``dst[w + a*dst_row + i] = scale * sum_j src[p0 + a*src_row + j*tap_step + i*stride]``
        for ``a < rows``, ``i < m``: the one loop nest every direct sum goes through.

        Taps 1 to 3 are unrolled, more go into ``acc`` a few at a time; strides 1 and 2 (contiguous
        taps) are spelled as literals: LLVM vectorises only loops with no inner loop and a known
        stride (0.2 ns per output against 0.6 for the general form here). The row loop sits inside,
        so the set-up of a short vector loop is paid once per pass rather than once per row.
        """
        f64 = np.float64
        m, t1 = U(m), U(tap_step)
        t2 = t1 + t1
        two = U(2)
        for a in range(rows):
            p = U(p0 + a * src_row)
            o = U(w + a * dst_row)
            if 1 <= taps <= 3 and stride <= 2:
                if stride == 1:
                    if taps == 1:
                        for i in range(m):
                            dst[o + i] = f64(src[p + i]) * scale
                    elif taps == 2:
                        for i in range(m):
                            dst[o + i] = (f64(src[p + i]) + f64(src[p + t1 + i])) * scale
                    else:
                        for i in range(m):
                            dst[o + i] = (f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i])) * scale
                elif t1 == 1:  # contiguous taps at a literal offset: LLVM vectorises the interleaved loads
                    one = U(1)
                    if taps == 1:
                        for i in range(m):
                            dst[o + i] = f64(src[p + two * i]) * scale
                    elif taps == 2:
                        for i in range(m):
                            dst[o + i] = (f64(src[p + two * i]) + f64(src[p + two * i + one])) * scale
                    else:
                        for i in range(m):
                            dst[o + i] = (
                                f64(src[p + two * i]) + f64(src[p + two * i + one]) + f64(src[p + two * i + two])
                            ) * scale
                else:  # dilated taps at stride 2 (rare): the general loop
                    _spaced_sums(src, p, t1, np.int64(stride), taps, dst, o, m, scale)
                continue
            if MANY and _side_by_side(taps, t1, stride) and acc.shape[0] >= m * U(taps):
                _side_by_side_sums(src, p, dst, o, m, taps, scale, acc)
                continue
            if taps == 0:  # no valid tap: 0 * (1/0) is NaN unless padding counts
                for i in range(m):
                    dst[o + i] = 0.0 * scale
                continue
            if taps <= 3:  # a stride above 2
                _spaced_sums(src, p, t1, np.int64(stride), taps, dst, o, m, scale)
                continue
            if MANY:  # (without: the plan promised at most 3 taps)
                # more taps: six (stride 1) or three taps at a time into acc (each pass over acc costs
                # about as much as three taps: 1x16x256x256 k15 serial 3.03 ms with six, 3.34 with three); the
                # last one to three taps go with acc straight into dst
                if taps > 6 and stride == 1:
                    _add_six_taps(src, p, t1, acc, m, YES)
                    j = 6
                else:
                    _add_three_taps(src, p, t1, stride, acc, m, YES)
                    j = 3
                while taps - j > 6 and stride == 1:
                    _add_six_taps(src, p + U(j) * t1, t1, acc, m, NO)
                    j += 6
                while taps - j > 3:
                    _add_three_taps(src, p + U(j) * t1, t1, stride, acc, m, NO)
                    j += 3
                _last_taps(src, p + U(j) * t1, t1, stride, taps - j, acc, dst, o, m, scale)

    return sums


strided_sums = _sums_kernel(True)
few_sums = _sums_kernel(False)


@kernel(**COMPUTE)
def _spaced_sums(src, p, t1, stride, taps, dst, o, m, scale):
    """``dst[o + i] = scale * (the 1 to 3 taps at q = p + i * stride, t1 apart)``: windows of a
    stride above 2 (summed from their first tap, so that a sum of -0.0 stays -0.0)."""
    f64 = np.float64
    t2 = t1 + t1
    us = U(stride)
    if taps == 1:
        for i in range(m):
            dst[o + i] = f64(src[p + us * i]) * scale
    elif taps == 2:
        for i in range(m):
            dst[o + i] = (f64(src[p + us * i]) + f64(src[p + t1 + us * i])) * scale
    else:
        for i in range(m):
            dst[o + i] = (f64(src[p + us * i]) + f64(src[p + t1 + us * i]) + f64(src[p + t2 + us * i])) * scale


@kernel(**COMPUTE)
def _add_three_taps(src, p, t1, stride, acc, m, assign):
    """``acc[i] (= or +=) src[q] + src[q + t1] + src[q + 2 t1]``, ``q = p + i * stride``. Every
    branch sits outside the loops and strides 1 and 2 reach them as constants, so that LLVM
    vectorises."""
    if stride == 1:
        _three_taps_at(src, p, t1, U(1), acc, m, assign)
    elif stride == 2:
        _three_taps_at(src, p, t1, U(2), acc, m, assign)
    else:
        _three_taps_at(src, p, t1, U(stride), acc, m, assign)


@kernel(**INLINED)
def _three_taps_at(src, p, t1, us, acc, m, assign):
    """:func:`_add_three_taps` at stride ``us``: inlined where it is called (numba IR), so that a
    literal stride is a constant of the loops."""
    f64 = np.float64
    t2 = t1 + t1
    if assign:
        for i in range(m):
            acc[i] = f64(src[p + us * i]) + f64(src[p + t1 + us * i]) + f64(src[p + t2 + us * i])
    else:
        for i in range(m):
            acc[i] += f64(src[p + us * i]) + f64(src[p + t1 + us * i]) + f64(src[p + t2 + us * i])


@kernel(**COMPUTE)
def _add_six_taps(src, p, t1, acc, m, assign):
    """``acc[i] (= or +=)`` the six taps ``src[p + i + j t1]``, ``j < 6`` (stride 1)."""
    f64 = np.float64
    t2 = t1 + t1
    t3 = t2 + t1
    t4 = t3 + t1
    t5 = t4 + t1
    if assign:
        for i in range(m):
            acc[i] = (
                f64(src[p + i])
                + f64(src[p + t1 + i])
                + f64(src[p + t2 + i])
                + f64(src[p + t3 + i])
                + f64(src[p + t4 + i])
                + f64(src[p + t5 + i])
            )
    else:
        for i in range(m):
            acc[i] += (
                f64(src[p + i])
                + f64(src[p + t1 + i])
                + f64(src[p + t2 + i])
                + f64(src[p + t3 + i])
                + f64(src[p + t4 + i])
                + f64(src[p + t5 + i])
            )


@kernel(**COMPUTE)
def _last_taps(src, p, t1, stride, taps, acc, dst, o, m, scale):
    """``dst[o + i] = (acc[i] + the 1 to 3 taps at q = p + i * stride, t1 apart) * scale``."""
    f64 = np.float64
    t2 = t1 + t1
    us = U(stride)
    if stride == 1:
        if taps == 1:
            for i in range(m):
                dst[o + i] = (acc[i] + f64(src[p + i])) * scale
        elif taps == 2:
            for i in range(m):
                dst[o + i] = (acc[i] + f64(src[p + i]) + f64(src[p + t1 + i])) * scale
        else:
            for i in range(m):
                dst[o + i] = (acc[i] + f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i])) * scale
    else:
        if taps == 1:
            for i in range(m):
                dst[o + i] = (acc[i] + f64(src[p + us * i])) * scale
        elif taps == 2:
            for i in range(m):
                dst[o + i] = (acc[i] + f64(src[p + us * i]) + f64(src[p + t1 + us * i])) * scale
        else:
            for i in range(m):
                dst[o + i] = (
                    acc[i] + f64(src[p + us * i]) + f64(src[p + t1 + us * i]) + f64(src[p + t2 + us * i])
                ) * scale


@kernel(**COMPUTE)
def _edge_column(src, p0, dst, w, rows, length, n_out, taps, dil, scale):
    """``dst[w + a*n_out] = scale * sum_j src[p0 + a*length + j*dil]`` for ``a < rows``: one
    clipped window per row along a contiguous axis."""
    step, out_step, d = U(length), U(n_out), U(dil)
    p, o = U(p0), U(w)
    if taps == 0:  # no valid tap: 0 * (1/0) is NaN unless padding counts
        for a in range(U(rows)):
            dst[o + a * out_step] = 0.0 * scale
        return
    for a in range(U(rows)):
        q = p + a * step
        total = np.float64(src[q])  # from the first tap, as every other sum: -0.0 + -0.0 stays -0.0
        for j in range(U(1), U(taps)):
            total += src[q + j * d]
        dst[o + a * out_step] = total * scale


#: How the windows that lie wholly inside the input are summed along an axis (:func:`interior_kind`):
#: along a contiguous axis (``inner == 1``) as one loop over all rows' outputs where each row's
#: continue the previous row's, else row by row at a literal stride 2 or 1, or any; along an
#: axis with ``inner`` values per position, at stride 1 over all rows at once, as one row of
#: ``inner`` values per output where rows continue each other, else output by output.
LINE_FLAT, LINE_STRIDE_TWO, LINE_STRIDE_ONE, LINE, ROWS_STRIDE_ONE, ROWS_FLAT, ROWS_EACH = range(7)


def interior_kind(length: int, n_out: int, inner: int, dil: int, stride: int) -> int:
    """The interior loop of an axis's direct pass (one of :data:`LINE_FLAT` ... :data:`ROWS_EACH`)."""
    if inner == 1:
        if n_out * stride == length:
            return LINE_FLAT
        if dil == 1 and stride == 2:
            return LINE_STRIDE_TWO
        if dil == 1 and stride == 1:
            return LINE_STRIDE_ONE
        return LINE
    if stride == 1:
        return ROWS_STRIDE_ONE
    if n_out * stride == length:
        return ROWS_FLAT
    return ROWS_EACH


@functools.cache
def direct_pass_kernel(kind: int, many: bool) -> Any:
    """The direct pass along an axis whose interior windows go by ``kind`` (:func:`interior_kind`)
    and whose windows take more than 3 taps (``many``) or not: each combination compiles only
    its own loops."""
    KIND = kind
    LINES = kind <= LINE
    sums = strided_sums if many else few_sums

    # inlined into direct_pass (numba IR), its one caller: compiled and optimised once, inside it,
    # not on its own and then again linked in (benchmarks/compile_times.py)
    @kernel(key=("direct_pass", kind, many), **INLINED)
    def interior_sums(src, s0, dst, d0, outer, length, n_out, inner, first, taps, scale, dil, stride, lo, hi, acc):
        """The windows ``lo..hi`` of every row, which lie wholly inside the input and share a divisor."""
        start = s0 + first * inner
        if KIND == LINE_FLAT:
            # each row's outputs continue where the previous row's stop, in the input as in the
            # output: all rows are one long loop (rows of 28 outputs are too short to vectorise
            # well); the outputs between two rows' interiors get windows straddling the rows,
            # rewritten after
            total = (outer - 1) * n_out + hi - lo
            # windows side by side are summed in pairs in acc: taps values per output
            chunk = max(1, acc.shape[0] // taps) if _side_by_side(taps, dil, stride) else acc.shape[0]
            for c in range(0, total, chunk):
                sums(
                    src,
                    start + c * stride,
                    dst,
                    d0 + lo + c,
                    1,
                    0,
                    0,
                    min(chunk, total - c),
                    taps,
                    dil,
                    stride,
                    scale,
                    acc,
                )
        elif KIND == LINE_STRIDE_TWO:
            # the common steps as literals: numba compiles the sums for them, and LLVM folds the
            # set-up of each short row's loop (1x96x55x55 k3 s2 serial: 78 us against 91; 1x64x56x56
            # k3 s1: 82-87 against 94-103)
            sums(src, start, dst, d0 + lo, outer, length, n_out, hi - lo, taps, 1, 2, scale, acc)
        elif KIND == LINE_STRIDE_ONE:
            sums(src, start, dst, d0 + lo, outer, length, n_out, hi - lo, taps, 1, 1, scale, acc)
        elif KIND == LINE:
            sums(src, start, dst, d0 + lo, outer, length, n_out, hi - lo, taps, dil, stride, scale, acc)
        elif KIND == ROWS_STRIDE_ONE:
            sums(
                src,
                start,
                dst,
                d0 + lo * inner,
                outer,
                length * inner,
                n_out * inner,
                (hi - lo) * inner,
                taps,
                dil * inner,
                1,
                scale,
                acc,
            )
        elif KIND == ROWS_FLAT:  # as LINE_FLAT: one row of ``inner`` values per output of every row
            sums(
                src,
                start,
                dst,
                d0 + lo * inner,
                (outer - 1) * n_out + hi - lo,
                stride * inner,
                inner,
                inner,
                taps,
                dil * inner,
                1,
                scale,
                acc,
            )
        else:
            for o in range(lo, hi):
                sums(
                    src,
                    start + (o - lo) * stride * inner,
                    dst,
                    d0 + o * inner,
                    outer,
                    length * inner,
                    n_out * inner,
                    inner,
                    taps,
                    dil * inner,
                    1,
                    scale,
                    acc,
                )

    @kernel(key=("direct_pass", kind, many), **COMPUTE)
    def direct_pass(src, s0, dst, d0, t, axis, outer, inner, prefix, suffix, acc, u0, u1, tiles):
        """Direct sums along ``axis`` by the tables ``t`` (:class:`.arguments.SlabTables`):
        ``outer`` rows of ``length`` x ``inner`` values, outputs ``u0..u1`` of each row (a band
        of them only with ``outer == 1``), output ``u0`` at ``d0``; ``prefix``, ``suffix`` and
        ``tiles``: unused (the block passes' scratch, :func:`.separable.block_axis`).

        Windows ``lo..hi`` lie wholly inside the input and share one divisor (``KIND``'s loop).
        The clipped edge windows go one by one.
        """
        axes, firsts, counts, scales = t.axes, t.firsts, t.counts, t.scales
        length, n_out, t0 = axes[axis, LENGTH], axes[axis, OUTPUTS], axes[axis, OFFSET]
        dil, stride, lo, hi = axes[axis, DILATION], axes[axis, STRIDE], axes[axis, INNER_LO], axes[axis, INNER_HI]
        d0 -= u0 * inner  # where output 0 would be (maybe before the buffer: only outputs >= u0 are written)
        a, b = max(lo, u0), min(hi, u1)
        if b > a:
            interior_sums(
                src,
                s0,
                dst,
                d0,
                outer,
                length,
                n_out,
                inner,
                firsts[t0 + a],
                counts[t0 + a],
                scales[t0 + a],
                dil,
                stride,
                a,
                b,
                acc,
            )
        # the edge windows last: the flat interior loop also writes them (with windows that straddle
        # two rows), and they overwrite that
        for o in range(u0, u1):
            if a <= o < b:
                continue
            if LINES:  # one output per row: a loop over the rows (one call per row costs more)
                _edge_column(
                    src, s0 + firsts[t0 + o], dst, d0 + o, outer, length, n_out, counts[t0 + o], dil, scales[t0 + o]
                )
            else:
                sums(
                    src,
                    s0 + firsts[t0 + o] * inner,
                    dst,
                    d0 + o * inner,
                    outer,
                    length * inner,
                    n_out * inner,
                    inner,
                    counts[t0 + o],
                    dil * inner,
                    1,
                    scales[t0 + o],
                    acc,
                )

    return direct_pass
