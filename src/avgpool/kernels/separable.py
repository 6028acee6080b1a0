"""Compiled separable average pooling: one 1-D pass per spatial axis, float64 accumulation.

The input is seen as slabs: ``x2[b]`` is one slab ``L1 x ... x Ln x C`` flattened (for NCX,
b runs over N*C and C is 1; for NXC, b runs over N and C is the channel count). Within a slab the
passes run in cache-sized scratch buffers, so memory is touched about once per call.

A pass along an axis with ``inner`` contiguous elements after it sums whole rows of ``inner``
values at a time; the last axis of an NCX slab (``inner == 1``) sums strided taps instead. The
windows that lie wholly inside the input are done as long vector loops, the clipped edge windows
one by one.

Each pass sums the valid taps either directly (cost ``k`` per output, best for small kernels and
large strides) or from block partial sums (cost flat in ``k``): the taps of one residue class
modulo the dilation are split into blocks of ``k``; a window spans at most two blocks, so its sum
is a suffix sum of one block plus a prefix sum of the next. Unlike a running sum, every partial
sum holds only taps of the window it serves, so a NaN, an Inf or the rounding error of a huge
value reaches only windows that contain it
(tests/test_properties.py::test_huge_value_leaves_no_error_in_other_windows).

Inner loops index whole arrays at unsigned offsets (``U``): numba then drops its
negative-index wraparound test and LLVM vectorises the loop (3 to 5 times faster here); and no
loop takes slices, because each numba slice costs two atomic reference-count updates (slices
per row made a 28x28 pool four times slower than its arithmetic).

Compiling costs a minute per dtype, so it happens lazily on first use, and the machine code is
cached on disk or shipped precompiled (:mod:`.jit`). Kernels validate nothing: the engine hands them consistent tables.
"""

from __future__ import annotations

import numpy as np

from .halfwidth import narrow, widen
from .jit import COMPUTE, JIT, U, kernel
from .small_planes import block_planes, fill_tables, pool_small_planes

# Constant arguments of inner calls as numpy scalars: numba compiles a function once more for each
# combination of literal arguments (a Python 0, 1 or True), every copy costing seconds of LLVM
# time. The literals kept (stride 1, the single row of a joined pass) measured a few % faster.
_ZERO, _ONE = np.int64(0), np.int64(1)
_YES, _NO = np.bool_(True), np.bool_(False)
#: Rows turned into columns at a time by :func:`_transposed_pass` (vectors of this many sums).
TILE_ROWS = 16
#: Longest axis the transposed pass takes (its tiles, ~5 x 16 x this many float64, stay in cache).
TILE_MAX_LENGTH = 2048


@kernel(**COMPUTE)
def _side_by_side(taps, tap_step, stride):
    """Whether windows go by :func:`_side_by_side_sums`: 4 or 8 contiguous taps at that stride."""
    return tap_step == 1 and stride == taps and (taps == 4 or taps == 8)


@kernel(**COMPUTE)
def _side_by_side_sums(src, p, dst, o, m, taps, scale, acc):
    """``dst[o + i] = scale * sum_j src[p + taps*i + j]`` for ``i < m``, ``taps`` 4 or 8: windows
    side by side along a contiguous axis, summed in pairs, each level a loop of literal stride 2,
    which LLVM vectorises (a loop of stride 4 stays scalar: 250 -> 77 ps per input value, in
    cache). ``acc`` holds ``m * taps`` values."""
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


@kernel(**COMPUTE)
def _strided_sums(src, p0, dst, w, rows, src_row, dst_row, m, taps, tap_step, stride, scale, acc):
    """``dst[w + a*dst_row + i] = scale * sum_j src[p0 + a*src_row + j*tap_step + i*stride]``
    for ``a < rows``, ``i < m``: the one loop nest every direct sum goes through.

    Taps 1 to 3 are unrolled, more go into ``acc`` a few at a time; strides 1 and 2 are spelled as
    literals: LLVM vectorises only loops with no inner loop and a known stride (0.2 ns per
    output against 0.6 for the general form here). The row loop sits inside, so the set-up of a
    short vector loop is paid once per pass rather than once per row.
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
                        dst[o + i] = (f64(src[p + two * i]) + f64(src[p + two * i + one])
                                      + f64(src[p + two * i + two])) * scale
            else:
                if taps == 1:
                    for i in range(m):
                        dst[o + i] = f64(src[p + two * i]) * scale
                elif taps == 2:
                    for i in range(m):
                        dst[o + i] = (f64(src[p + two * i]) + f64(src[p + t1 + two * i])) * scale
                else:
                    for i in range(m):
                        dst[o + i] = (f64(src[p + two * i]) + f64(src[p + t1 + two * i])
                                      + f64(src[p + t2 + two * i])) * scale
            continue
        if _side_by_side(taps, t1, stride) and acc.shape[0] >= m * U(taps):
            _side_by_side_sums(src, p, dst, o, m, taps, scale, acc)
            continue
        if taps == 0:  # no valid tap: 0 * (1/0) is NaN unless padding counts
            for i in range(m):
                dst[o + i] = 0.0 * scale
            continue
        if taps <= 3:  # a stride above 2
            _spaced_sums(src, p, t1, stride, taps, dst, o, m, scale)
            continue
        # more taps: six (stride 1) or three taps at a time into acc (each pass over acc costs
        # about as much as three taps: 1x16x256x256 k15 serial 3.34 -> 3.03 ms with six); the
        # last one to three taps go with acc straight into dst
        if taps > 6 and stride == 1:
            _add_six_taps(src, p, t1, acc, m, _YES)
            j = 6
        else:
            _add_three_taps(src, p, t1, stride, acc, m, _YES)
            j = 3
        while taps - j > 6 and stride == 1:
            _add_six_taps(src, p + U(j) * t1, t1, acc, m, _NO)
            j += 6
        while taps - j > 3:
            _add_three_taps(src, p + U(j) * t1, t1, stride, acc, m, _NO)
            j += 3
        _last_taps(src, p + U(j) * t1, t1, stride, taps - j, acc, dst, o, m, scale)


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
    branch sits outside the loops and strides 1 and 2 are literals, so that LLVM vectorises."""
    f64 = np.float64
    t2 = t1 + t1
    if stride == 1:
        if assign:
            for i in range(m):
                acc[i] = f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i])
        else:
            for i in range(m):
                acc[i] += f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i])
    elif stride == 2:
        two = U(2)
        if assign:
            for i in range(m):
                acc[i] = f64(src[p + two * i]) + f64(src[p + t1 + two * i]) + f64(src[p + t2 + two * i])
        else:
            for i in range(m):
                acc[i] += f64(src[p + two * i]) + f64(src[p + t1 + two * i]) + f64(src[p + t2 + two * i])
    else:
        us = U(stride)
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
            acc[i] = (f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i]) + f64(src[p + t3 + i])
                      + f64(src[p + t4 + i]) + f64(src[p + t5 + i]))
    else:
        for i in range(m):
            acc[i] += (f64(src[p + i]) + f64(src[p + t1 + i]) + f64(src[p + t2 + i]) + f64(src[p + t3 + i])
                       + f64(src[p + t4 + i]) + f64(src[p + t5 + i]))


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
                dst[o + i] = (acc[i] + f64(src[p + us * i]) + f64(src[p + t1 + us * i])
                              + f64(src[p + t2 + us * i])) * scale


@kernel(**COMPUTE)
def _direct_pass(src, s0, dst, d0, outer, length, n_out, inner, t0, firsts, counts, scales, dil, stride, lo, hi, acc,
                 u0, u1):
    """Direct sums along an axis: ``outer`` rows of ``length`` x ``inner`` values, outputs
    ``u0..u1`` of each row (a band of them only with ``outer == 1``), output ``u0`` at ``d0``.

    Windows ``lo..hi`` lie wholly inside the input and share one divisor: with ``inner == 1``
    they are one strided loop over outputs per row; with stride 1 one loop over all their rows
    at once; otherwise one loop per output row. The clipped edge windows go one by one.
    """
    d0 -= u0 * inner  # where output 0 would be (maybe before the buffer: only outputs >= u0 are written)
    a, b = max(lo, u0), min(hi, u1)
    if b > a:
        _interior_sums(src, s0, dst, d0, outer, length, n_out, inner, firsts[t0 + a], counts[t0 + a],
                       scales[t0 + a], dil, stride, a, b, acc)
    # the edge windows last: the flat interior loop also writes them (with windows that straddle
    # two rows), and they overwrite that
    for o in range(u0, u1):
        if a <= o < b:
            continue
        if inner == 1:  # one output per row: a loop over the rows (one call per row costs more)
            _edge_column(src, s0 + firsts[t0 + o], dst, d0 + o, outer, length, n_out, counts[t0 + o], dil,
                         scales[t0 + o])
        else:
            _strided_sums(src, s0 + firsts[t0 + o] * inner, dst, d0 + o * inner, outer, length * inner,
                          n_out * inner, inner, counts[t0 + o], dil * inner, 1, scales[t0 + o], acc)


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


@kernel(**COMPUTE)
def _interior_sums(src, s0, dst, d0, outer, length, n_out, inner, first, taps, scale, dil, stride, lo, hi, acc):
    """The windows ``lo..hi`` of every row, which lie wholly inside the input and share a divisor."""
    start = s0 + first * inner
    if inner == 1 and n_out * stride == length and outer > 1:
        # each row's outputs continue where the previous row's stop, in the input as in the output:
        # all rows are one long loop (rows of 28 outputs are too short to vectorise well); the
        # outputs between two rows' interiors get windows straddling the rows, rewritten after
        total = (outer - 1) * n_out + hi - lo
        # windows side by side are summed in pairs in acc: taps values per output
        chunk = max(1, acc.shape[0] // taps) if _side_by_side(taps, dil, stride) else acc.shape[0]
        for c in range(0, total, chunk):
            _strided_sums(src, start + c * stride, dst, d0 + lo + c, 1, 0, 0, min(chunk, total - c), taps, dil,
                          stride, scale, acc)
    elif inner == 1:
        _strided_sums(src, start, dst, d0 + lo, outer, length, n_out, hi - lo, taps, dil, stride, scale, acc)
    elif stride == 1:
        _strided_sums(src, start, dst, d0 + lo * inner, outer, length * inner, n_out * inner, (hi - lo) * inner,
                      taps, dil * inner, 1, scale, acc)
    elif n_out * stride == length:  # as above: one row of ``inner`` values per output of every row
        _strided_sums(src, start, dst, d0 + lo * inner, (outer - 1) * n_out + hi - lo, stride * inner, inner, inner,
                      taps, dil * inner, 1, scale, acc)
    else:
        for o in range(lo, hi):
            _strided_sums(src, start + (o - lo) * stride * inner, dst, d0 + o * inner, outer, length * inner,
                          n_out * inner, inner, taps, dil * inner, 1, scale, acc)


@kernel(**COMPUTE)
def _block_partial_sums(src, s0, length, inner, row_stride, dil, block, prefix, suffix):
    """Prefix and suffix sums within blocks of ``block`` taps of each residue class mod ``dil``.

    Rows of ``inner`` values, ``row_stride`` apart in ``src``, are summed as vectors (prefix and
    suffix hold them ``inner`` apart). A single row (``inner == 1``) is a chain of
    dependent additions per block; the scalar loop steps through all blocks at once so that
    several chains are in flight (the add latency, not the adds, limits a single chain).
    """
    if inner == 1:
        for r in range(min(dil, length)):
            taps = (length - r + dil - 1) // dil
            blocks = (taps + block - 1) // block
            span = block * dil
            for b in range(blocks):
                p = r + b * span
                prefix[p] = src[s0 + p]
            for t in range(1, block):
                p = r + t * dil
                for b in range(blocks - 1):
                    prefix[p] = prefix[p - dil] + src[s0 + p]
                    p += span
                if (blocks - 1) * block + t < taps:
                    prefix[p] = prefix[p - dil] + src[s0 + p]
            last = (taps - 1) % block  # the position of the final tap in the last, partial, block
            for b in range(blocks):
                end = block - 1 if b < blocks - 1 else last
                p = r + (b * block + end) * dil
                suffix[p] = src[s0 + p]
            for t in range(block - 2, -1, -1):
                p = r + t * dil
                for b in range(blocks - 1):
                    suffix[p] = suffix[p + dil] + src[s0 + p]
                    p += span
                if t < last:
                    suffix[p] = suffix[p + dil] + src[s0 + p]
        return
    n = U(inner)
    step = U(dil * inner)
    for r in range(min(dil, length)):
        taps = (length - r + dil - 1) // dil
        for q in range(taps):
            p = U((r + q * dil) * inner)
            v = U(s0 + (r + q * dil) * row_stride)
            if q % block == 0:
                for i in range(n):
                    prefix[p + i] = src[v + i]
            else:
                for i in range(n):
                    prefix[p + i] = prefix[p - step + i] + src[v + i]
        for q in range(taps - 1, -1, -1):
            p = U((r + q * dil) * inner)
            v = U(s0 + (r + q * dil) * row_stride)
            if q % block == block - 1 or q == taps - 1:
                for i in range(n):
                    suffix[p + i] = src[v + i]
            else:
                for i in range(n):
                    suffix[p + i] = suffix[p + step + i] + src[v + i]


@kernel(**COMPUTE)
def _block_pass(src, s0, dst, d0, length, n_out, inner, t0, splits, scales, dil, block, prefix, suffix):
    """Window sums from block partial sums: cost independent of the kernel size. A window of at
    most ``block`` taps is a suffix of one block plus a prefix of the next, or lies in one block
    (then it starts that block, or is clipped by the end of the input). ``splits[o]`` holds the
    suffix and prefix positions to add (-1: none) and the block the window starts in, worked out
    once in the plan because integer divisions per output cost more than the sums."""
    if dil == 1 and inner > 1 and 2 * block <= length:
        _streaming_block_pass(src, s0, dst, d0, length, n_out, inner, t0, splits, scales, block, prefix, suffix)
        return
    _block_partial_sums(src, s0, length, inner, inner, dil, block, prefix, suffix)
    n = U(inner)
    for o in range(n_out):
        w = U(d0 + o * inner)
        d = scales[t0 + o]
        at_suffix, at_prefix = splits[t0 + o, 0], splits[t0 + o, 1]
        if at_suffix >= 0 and at_prefix >= 0:
            fp, lp = U(at_suffix * inner), U(at_prefix * inner)
            for i in range(n):
                dst[w + i] = (suffix[fp + i] + prefix[lp + i]) * d
        elif at_prefix >= 0:
            lp = U(at_prefix * inner)
            for i in range(n):
                dst[w + i] = prefix[lp + i] * d
        elif at_suffix >= 0:
            fp = U(at_suffix * inner)
            for i in range(n):
                dst[w + i] = suffix[fp + i] * d
        else:
            for i in range(n):
                dst[w + i] = 0.0 * d  # no valid tap: 0 * (1/0) is NaN unless padding counts


@kernel(**COMPUTE)
def _partial_block(src, s0, first, stop, inner, buf, off, backward):
    """Running sums of rows ``first..stop`` into ``buf[off:]`` (row ``first`` at ``off``), from
    the first row forward or from the last backward."""
    n = U(inner)
    rows = stop - first
    for t in range(rows):
        r = t if not backward else rows - 1 - t
        p = U(off + r * inner)
        v = U(s0 + (first + r) * inner)
        if t == 0:
            for i in range(n):
                buf[p + i] = src[v + i]
        else:
            q = p - U(inner) if not backward else p + U(inner)
            for i in range(n):
                buf[p + i] = buf[q + i] + src[v + i]


@kernel(**COMPUTE)
def _streaming_block_pass(src, s0, dst, d0, length, n_out, inner, t0, splits, scales, block, prefix, suffix):
    """The block pass as one sweep over the blocks (no dilation): at block B only the suffix
    sums of B and the prefix sums of B and B+1 are kept, so the input is read from memory once
    and the partial sums stay in cache (the whole-axis form was 2x slower on 512x512 planes)."""
    n = U(inner)
    span = block * inner
    blocks = (length + block - 1) // block
    _partial_block(src, s0, _ZERO, min(block, length), inner, prefix, _ZERO, _NO)
    o = 0
    for b in range(blocks):
        start = b * block
        _partial_block(src, s0, start, min(start + block, length), inner, suffix, _ZERO, _YES)
        if b + 1 < blocks:
            _partial_block(src, s0, start + block, min(start + 2 * block, length), inner, prefix,
                           ((b + 1) % 2) * span, _NO)
        here, after = (b % 2) * span, ((b + 1) % 2) * span
        while o < n_out and splits[t0 + o, 2] <= b:
            w = U(d0 + o * inner)
            d = scales[t0 + o]
            at_suffix, at_prefix = splits[t0 + o, 0], splits[t0 + o, 1]
            if at_suffix >= 0 and at_prefix >= 0:
                fp, lp = U((at_suffix - start) * inner), U(after + (at_prefix - start - block) * inner)
                for i in range(n):
                    dst[w + i] = (suffix[fp + i] + prefix[lp + i]) * d
            elif at_prefix >= 0:
                lp = U(here + (at_prefix - start) * inner)
                for i in range(n):
                    dst[w + i] = prefix[lp + i] * d
            elif at_suffix >= 0:
                fp = U((at_suffix - start) * inner)
                for i in range(n):
                    dst[w + i] = suffix[fp + i] * d
            else:
                for i in range(n):
                    dst[w + i] = 0.0 * d  # no valid tap: 0 * (1/0) is NaN unless padding counts
            o += 1


@kernel(**COMPUTE)
def _one_pass(src, s_base, dst, d_base, axes, axis, outer, inner, firsts, counts, splits, scales, prefix, suffix,
              acc, u0, u1, tiles):
    """One pass along ``axis``, its outputs ``u0..u1`` (a band only for direct sums, ``outer == 1``)."""
    length, n_out, t0 = axes[axis, 0], axes[axis, 1], axes[axis, 2]
    dil, stride, block, lo, hi = axes[axis, 3], axes[axis, 4], axes[axis, 5], axes[axis, 6], axes[axis, 7]
    if block > 0 and inner == 1 and outer >= TILE_ROWS and tiles.shape[0] >= _tile_scratch(length, n_out):
        whole = outer - outer % TILE_ROWS
        _transposed_pass(src, s_base, dst, d_base, axes, axis, whole, firsts, counts, splits, scales, tiles)
        s_base, d_base, outer = s_base + whole * length, d_base + whole * n_out, outer - whole
    if block > 0:
        for a in range(outer):
            _block_pass(src, s_base + a * length * inner, dst, d_base + a * n_out * inner, length, n_out, inner, t0,
                        splits, scales, dil, block, prefix, suffix)
    else:
        _direct_pass(src, s_base, dst, d_base, outer, length, n_out, inner, t0, firsts, counts, scales, dil, stride,
                     lo, hi, acc, u0, u1)


@kernel(**COMPUTE)
def _tile_scratch(length, n_out):
    """Scratch of :func:`_transposed_pass`: the tile in and out, and prefix, suffix and acc."""
    return TILE_ROWS * (4 * length + n_out)


@kernel(**COMPUTE)
def _transposed_pass(src, s_base, dst, d_base, axes, axis, outer, firsts, counts, splits, scales, tiles):
    """A pass along a contiguous axis (``inner == 1``), ``TILE_ROWS`` rows at a time turned into
    columns: the block sums then run along rows of ``TILE_ROWS`` values, as vectors, where along
    the contiguous axis they are scalar chains (measured on 1x16x256x256, k21 along the last axis:
    8.7 ms -> 3.2 ms, serial). Direct sums gain less than the two transposes cost.
    ``outer`` is a multiple of ``TILE_ROWS``."""
    length, n_out, t0 = axes[axis, 0], axes[axis, 1], axes[axis, 2]
    dil, stride, block, lo, hi = axes[axis, 3], axes[axis, 4], axes[axis, 5], axes[axis, 6], axes[axis, 7]
    rows = TILE_ROWS
    n_in = U(length * rows)
    tile_in, tile_out = tiles[:n_in], tiles[n_in:n_in + U(n_out * rows)]
    rest = n_in + U(n_out * rows)
    prefix, suffix, acc = tiles[rest:rest + n_in], tiles[rest + n_in:rest + 2 * n_in], tiles[rest + 2 * n_in:]
    r_step = U(rows)
    for a0 in range(0, outer, rows):
        p = U(s_base + a0 * length)
        n = U(length)
        for t in range(n):
            q = t * r_step
            for r in range(r_step):
                tile_in[q + r] = src[p + r * n + t]
        if block > 0:
            _block_pass(tile_in, _ZERO, tile_out, _ZERO, length, n_out, rows, t0, splits, scales, dil, block, prefix,
                        suffix)
        else:
            _direct_pass(tile_in, _ZERO, tile_out, _ZERO, _ONE, length, n_out, rows, t0, firsts, counts, scales, dil,
                         stride, lo, hi, acc, _ZERO, n_out)
        p = U(d_base + a0 * n_out)
        m = U(n_out)
        for o in range(m):
            q = o * r_step
            for r in range(r_step):
                dst[p + r * m + o] = tile_out[q + r]


@kernel(**COMPUTE)
def _pool_slabs(x, out, start, stop, group, band, axes, firsts, counts, splits, scales, channels, scratch, size,
                tiles):
    """Pool slabs ``start..stop`` of the flat input ``x`` into the flat ``out``, ``group`` slabs
    at a time (consecutive slabs are just more outer rows of each pass, so the set-up of each
    vector loop is paid once per group; the engine sizes groups to stay in cache). A slab too
    big for that (``group == 1``) goes in bands of ``band`` outputs of the first axis, every
    pass done on a band before the next, so that its intermediates stay in cache too.

    ``axes[i]`` = (length, outputs, table offset, dilation, stride, block, interior lo, interior
    hi). ``scratch`` holds two ping-pong buffers of ``group * size`` and prefix, suffix and acc
    of ``size``; ``tiles`` is the scratch of :func:`_transposed_pass`. Pass ``axis`` reads the
    input (first pass) or the buffer the previous pass wrote, and writes the output (last pass)
    or the other buffer; the four cases are spelled out because numba types each variable once
    (input, buffers and output may have three dtypes).
    """
    ndim = axes.shape[0]
    ping, pong = 0, group * size
    rest = 2 * group * size
    pre, suf, acc = scratch[rest:rest + size], scratch[rest + size:rest + 2 * size], scratch[rest + 2 * size:]
    slab_in, row_out = channels, channels
    for axis in range(ndim):
        slab_in *= axes[axis, 0]
        if axis > 0:
            row_out *= axes[axis, 1]
    n0 = axes[0, 1]
    slab_out = n0 * row_out
    for b in range(start, stop, group):
        slabs = min(group, stop - b)
        for u0 in range(0, n0, band):
            u1 = min(n0, u0 + band)
            for axis in range(ndim):
                outer = slabs * (u1 - u0 if axis > 0 else 1)
                for i in range(1, axis):
                    outer *= axes[i, 1]
                inner = channels
                for i in range(axis + 1, ndim):
                    inner *= axes[i, 0]
                v0, v1 = (u0, u1) if axis == 0 else (0, axes[axis, 1])
                previous = pong if axis % 2 == 0 else ping
                following = ping if axis % 2 == 0 else pong
                if axis == 0 and ndim == 1:
                    _one_pass(x, b * slab_in, out, b * slab_out + u0 * row_out, axes, axis, outer, inner, firsts,
                              counts, splits, scales, pre, suf, acc, v0, v1, tiles)
                elif axis == 0:
                    _one_pass(x, b * slab_in, scratch, following, axes, axis, outer, inner, firsts, counts, splits,
                              scales, pre, suf, acc, v0, v1, tiles)
                elif axis == ndim - 1:
                    _one_pass(scratch, previous, out, b * slab_out + u0 * row_out, axes, axis, outer, inner, firsts,
                              counts, splits, scales, pre, suf, acc, v0, v1, tiles)
                else:
                    _one_pass(scratch, previous, scratch, following, axes, axis, outer, inner, firsts, counts, splits,
                              scales, pre, suf, acc, v0, v1, tiles)


@kernel(fastmath={"reassoc"}, **COMPUTE)
def _contiguous_sum(x, base, n):
    """A float64 sum of ``n`` values. Reassociation lets LLVM keep vector partial sums (4x faster
    here than one running sum, which waits on each addition); it leaves NaN and Inf semantics
    alone, and the order of a float64 sum of at most float32-sized terms does not matter to the
    contract (semantics 1.4)."""
    total = 0.0
    for i in range(n):
        total += x[base + i]
    return total


@kernel(**COMPUTE)
def _global_slabs(x, out, start, stop, channels, scale, acc):
    """Every axis has one window covering the whole input: one sum per slab and channel.

    One channel (NCX) is a contiguous sum (:func:`_contiguous_sum`); channels (NXC) are summed
    as vectors of channels.
    """
    slab = x.shape[0] // max(1, out.shape[0] // channels)
    if channels == 1:
        for b in range(start, stop):
            out[b] = _contiguous_sum(x, U(b * slab), U(slab)) * scale
        return
    n = U(channels)
    positions = slab // channels
    for b in range(start, stop):
        for c in range(n):
            acc[c] = 0.0
        for p in range(positions):
            base = U(b * slab + p * channels)
            for c in range(n):
                acc[c] += x[base + c]
        w = U(b * channels)
        for c in range(n):
            out[w + c] = acc[c] * scale


@kernel(entry=True, **JIT)
def pool_slabs(x, out, start, stop, group, band, axes, firsts, counts, splits, scales, channels, scratch_size,
               global_scale):
    """Pool slabs ``start..stop`` (any thread: the GIL is released)."""
    if axes[0, 8] >= 0:  # small planes, windows of up to 3 x 3 (engine.small_planes)
        values = block_planes(axes) * axes[0, 0] * axes[1, 0]
        masks, factors = np.empty(6 * values, np.uint8), np.empty(2 * values)
        fill_tables(axes, firsts, counts, scales, masks, factors)
        pool_small_planes(x, out, start, stop, axes, masks, factors, np.empty(values + 4))
        return
    scratch = np.empty((2 * group + 3) * scratch_size)
    if global_scale > 0:
        _global_slabs(x, out, start, stop, channels, global_scale, scratch)
        return
    longest = 0
    for axis in range(axes.shape[0]):
        if axes[axis, 0] <= TILE_MAX_LENGTH:
            longest = max(longest, _tile_scratch(axes[axis, 0], axes[axis, 1]))
    _pool_slabs(x, out, start, stop, group, band, axes, firsts, counts, splits, scales, channels, scratch,
                scratch_size, np.empty(longest))


@kernel(entry=True, **JIT)
def pool_slabs_16(bits, out_bits, start, stop, group, band, axes, firsts, counts, splits, scales, channels,
                  scratch_size, global_scale, bfloat16, block_slabs):
    """Pool slabs ``start..stop`` of float16/bfloat16 data given as bit patterns: blocks of
    ``block_slabs`` slabs are widened to float32, pooled in float64 and rounded once back."""
    slab_in, slab_out = channels, channels
    for axis in range(axes.shape[0]):
        slab_in *= axes[axis, 0]
        slab_out *= axes[axis, 1]
    wide_in = np.empty(block_slabs * slab_in, np.float32)
    wide_out = np.empty(block_slabs * slab_out, np.float64)
    for b in range(start, stop, block_slabs):
        n = min(block_slabs, stop - b)
        widen(bits, b * slab_in, (b + n) * slab_in, bfloat16, wide_in)
        pool_slabs(wide_in, wide_out, 0, n, group, band, axes, firsts, counts, splits, scales, channels, scratch_size,
                   global_scale)
        narrow(wide_out[:n * slab_out], out_bits, b * slab_out, bfloat16)
