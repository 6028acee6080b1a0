"""Window sums from block partial sums along one axis (cost flat in the kernel size ``k``).

The taps of one residue class modulo the dilation are split into blocks of ``k``; a window spans
at most two blocks, so its sum is a suffix sum of one block plus a prefix sum of the next. Unlike
a running sum, every partial sum holds only taps of the window it serves, so a NaN, an Inf or the
rounding error of a huge value reaches only windows that contain it
(tests/test_properties.py::test_huge_value_leaves_no_error_in_other_windows).
"""

from __future__ import annotations

from .jit import COMPUTE, NO, YES, ZERO, U, kernel


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
def block_pass(src, s0, dst, d0, length, n_out, inner, t0, splits, scales, dil, block, prefix, suffix):
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
    _partial_block(src, s0, ZERO, min(block, length), inner, prefix, ZERO, NO)
    o = 0
    for b in range(blocks):
        start = b * block
        _partial_block(src, s0, start, min(start + block, length), inner, suffix, ZERO, YES)
        if b + 1 < blocks:
            _partial_block(
                src, s0, start + block, min(start + 2 * block, length), inner, prefix, ((b + 1) % 2) * span, NO
            )
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
