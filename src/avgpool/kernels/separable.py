"""Compiled separable average pooling: one 1-D pass per spatial axis, float64 accumulation.

The input is seen as slabs: ``x2[b]`` is one slab ``L1 x ... x Ln x C`` flattened (for NCX,
b runs over N*C and C is 1; for NXC, b runs over N and C is the channel count). Within a slab the
passes run in cache-sized scratch buffers, so memory is touched about once per call.

Each pass sums the valid taps either directly (:mod:`.direct`: cost ``k`` per output, best for
small kernels and large strides) or from block partial sums (:mod:`.blocks`: cost flat in
``k``); small planes with 3 x 3 "same" windows go by :mod:`.small_planes`, and channels-last
planes whose windows do not overlap along the second axis run both passes fused
(:func:`_fused_rows`).

Inner loops index whole arrays at unsigned offsets (``U``): numba then drops its
negative-index wraparound test and LLVM vectorises the loop (3 to 5 times faster here); and no
loop takes slices, because each numba slice costs two atomic reference-count updates (slices
per row made a 28x28 pool four times slower than its arithmetic).

Each axis's pass is its own small kernel, chosen by the plan and called at its address
(:mod:`.native`), so a first call compiles only the loops it runs (a few seconds); the machine
code is cached on disk (:mod:`.jit`). Kernels validate nothing: the engine hands them consistent
tables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blocks import block_pass
from .columns import BLOCK, DILATION, FUSED, LENGTH, OFFSET, OUTPUTS, PLANE_PAD, STRIDE
from .direct import direct_pass_kernel, few_sums, interior_kind
from .halfwidth import narrow, widen
from .jit import COMPUTE, JIT, ZERO, U, kernel
from .native import address, call_at, flat
from .small_planes import pool_small_planes

#: Rows turned into columns at a time by :func:`_transposed_pass` (vectors of this many sums).
TILE_ROWS = 16
#: Longest axis the transposed pass takes (its tiles, ~5 x 16 x this many float64, stay in cache).
TILE_MAX_LENGTH = 2048


@kernel(**COMPUTE)
def block_axis(src, s_base, dst, d_base, t, axis, outer, inner, prefix, suffix, acc, u0, u1, tiles):
    """The pass along ``axis`` by block partial sums (:mod:`.blocks`), with
    :func:`.direct.direct_pass`'s arguments (``u0``, ``u1`` and ``acc``: unused, a block pass
    is never banded); rows of a contiguous axis ``TILE_ROWS`` at a time turned into columns
    where the tiles fit."""
    axes = t.axes
    length, n_out, t0 = axes[axis, LENGTH], axes[axis, OUTPUTS], axes[axis, OFFSET]
    dil, block = axes[axis, DILATION], axes[axis, BLOCK]
    if inner == 1 and outer >= TILE_ROWS and tiles.shape[0] >= _tile_scratch(length, n_out):
        whole = outer - outer % TILE_ROWS
        _transposed_pass(src, s_base, dst, d_base, axes, axis, whole, t.splits, t.scales, tiles)
        s_base, d_base, outer = s_base + whole * length, d_base + whole * n_out, outer - whole
    for a in range(outer):
        block_pass(
            src,
            s_base + a * length * inner,
            dst,
            d_base + a * n_out * inner,
            length,
            n_out,
            inner,
            t0,
            t.splits,
            t.scales,
            dil,
            block,
            prefix,
            suffix,
        )


@kernel(**COMPUTE)
def _tile_scratch(length, n_out):
    """Scratch of :func:`_transposed_pass`: the tile in and out, and prefix, suffix and acc."""
    return TILE_ROWS * (4 * length + n_out)


@kernel(**COMPUTE)
def _transposed_pass(src, s_base, dst, d_base, axes, axis, outer, splits, scales, tiles):
    """A block pass along a contiguous axis (``inner == 1``), ``TILE_ROWS`` rows at a time turned
    into columns: the block sums then run along rows of ``TILE_ROWS`` values, as vectors, where
    along the contiguous axis they are scalar chains (1x16x256x256, k21 along the last axis,
    serial: 3.2 ms transposed against 8.7 ms). Direct sums gain less than the two transposes
    cost. ``outer`` is a multiple of ``TILE_ROWS``."""
    length, n_out, t0 = axes[axis, LENGTH], axes[axis, OUTPUTS], axes[axis, OFFSET]
    dil, block = axes[axis, DILATION], axes[axis, BLOCK]
    rows = TILE_ROWS
    n_in = U(length * rows)
    tile_in, tile_out = tiles[:n_in], tiles[n_in : n_in + U(n_out * rows)]
    rest = n_in + U(n_out * rows)
    prefix, suffix = tiles[rest : rest + n_in], tiles[rest + n_in : rest + 2 * n_in]
    r_step = U(rows)
    for a0 in range(0, outer, rows):
        p = U(s_base + a0 * length)
        n = U(length)
        for t in range(n):
            q = t * r_step
            for r in range(r_step):
                tile_in[q + r] = src[p + r * n + t]
        block_pass(tile_in, ZERO, tile_out, ZERO, length, n_out, rows, t0, splits, scales, dil, block, prefix, suffix)
        p = U(d_base + a0 * n_out)
        m = U(n_out)
        for o in range(m):
            q = o * r_step
            for r in range(r_step):
                dst[p + r * m + o] = tile_out[q + r]


@kernel(**COMPUTE)
def _pool_slabs(x, out, start, stop, t, scratch, tiles):
    """Pool items ``start..stop`` of the flat input ``x`` into the flat ``out``: item ``i`` is
    part ``i % parts`` of slab ``i // parts``, the outputs of the first axis cut in ``parts``
    ranges (so that threads can share a few big slabs: ``parts > 1`` only with ``group == 1``
    and direct sums along the first axis). Slabs go ``group`` at a time (consecutive slabs are
    just more outer rows of each pass, so the set-up of each vector loop is paid once per
    group; the engine sizes groups to stay in cache). A slab too big for that (``group == 1``)
    goes in bands of ``band`` outputs of the first axis, every pass done on a band before the
    next, so that its intermediates stay in cache too. A window's sum does not depend on the
    band or part it is computed in: the bits are the same however a slab is cut.

    Each axis's pass is the kernel at ``t.passes[axis]`` (:func:`pass_kernel`), called at its
    address: compiled on its own for this plan, not linked in. ``scratch`` holds two ping-pong
    buffers of ``group * size`` and prefix, suffix and acc of ``size``; ``tiles`` is the scratch
    of :func:`_transposed_pass`. Pass ``axis`` reads the input (first pass) or the buffer the
    previous pass wrote, and writes the output (last pass) or the other buffer; the four cases
    are spelled out because numba types each variable once (input, buffers and output may have
    three dtypes).
    """
    axes, group, band, channels, size, parts, passes = (
        t.axes,
        t.group,
        t.band,
        t.channels,
        t.scratch_size,
        t.parts,
        t.passes,
    )
    i64 = np.int64
    ndim = axes.shape[0]
    ping, pong = 0, group * size
    rest = 2 * group * size
    pre, suf, acc = scratch[rest : rest + size], scratch[rest + size : rest + 2 * size], scratch[rest + 2 * size :]
    slab_in, row_out = channels, channels
    for axis in range(ndim):
        slab_in *= axes[axis, LENGTH]
        if axis > 0:
            row_out *= axes[axis, OUTPUTS]
    n0 = axes[0, OUTPUTS]
    slab_out = n0 * row_out
    for item in range(start, stop, group):
        b, part = item // parts, item % parts
        slabs = min(group, stop - item)
        r0, r1 = part * n0 // parts, (part + 1) * n0 // parts
        for u0 in range(r0, r1, band):
            u1 = min(r1, u0 + band)
            for axis in range(ndim):
                outer = slabs * (u1 - u0 if axis > 0 else 1)
                for i in range(1, axis):
                    outer *= axes[i, OUTPUTS]
                inner = channels
                for i in range(axis + 1, ndim):
                    inner *= axes[i, LENGTH]
                v0, v1 = (u0, u1) if axis == 0 else (0, axes[axis, OUTPUTS])
                previous = pong if axis % 2 == 0 else ping
                following = ping if axis % 2 == 0 else pong
                shape = (i64(axis), i64(outer), i64(inner), pre, suf, acc, i64(v0), i64(v1), tiles)
                if axis == 0 and ndim == 1:
                    call_at(passes[axis], (x, i64(b * slab_in), out, i64(b * slab_out + u0 * row_out), t) + shape)
                elif axis == 0:
                    call_at(passes[axis], (x, i64(b * slab_in), scratch, i64(following), t) + shape)
                elif axis == ndim - 1:
                    call_at(passes[axis], (scratch, i64(previous), out, i64(b * slab_out + u0 * row_out), t) + shape)
                else:
                    call_at(passes[axis], (scratch, i64(previous), scratch, i64(following), t) + shape)


def pass_kernel(t: Any, axis: int) -> Any:
    """The kernel of axis ``axis``'s pass by the tables ``t``: block sums, or direct sums by
    their interior loop and the most taps a window takes (:func:`.direct.direct_pass_kernel`)."""
    axes = t.axes
    if axes[axis, BLOCK] > 0:
        return block_axis
    inner = t.channels * int(np.prod(axes[axis + 1 :, LENGTH]))
    kind = interior_kind(
        int(axes[axis, LENGTH]), int(axes[axis, OUTPUTS]), inner, int(axes[axis, DILATION]), int(axes[axis, STRIDE])
    )
    t0, n_out = int(axes[axis, OFFSET]), int(axes[axis, OUTPUTS])
    many = bool(n_out and t.counts[t0 : t0 + n_out].max() > 3)
    return direct_pass_kernel(kind, many)


def pass_signature(src_dtype: Any, dst_dtype: Any, t: Any) -> tuple:
    """The types :func:`_pool_slabs` calls a pass with: source and destination flat arrays of
    these dtypes, the tables ``t``, and the pass's place and scratch."""
    from numba import typeof, types

    i64, f64 = types.int64, flat(np.float64)
    return (flat(src_dtype), i64, flat(dst_dtype), i64, typeof(t), i64, i64, i64, f64, f64, f64, i64, i64, f64)


def set_pass_addresses(t: Any, x_dtype: Any, out_dtype: Any) -> None:
    """Compile (or load) each axis's pass for the dtypes it reads and writes when the input is
    ``x_dtype`` and the output ``out_dtype`` (intermediates are float64), and put their addresses
    in ``t.passes``."""
    ndim = t.axes.shape[0]
    if not uses_passes(t):
        return
    for axis in range(ndim):
        src = x_dtype if axis == 0 else np.float64
        dst = out_dtype if axis == ndim - 1 else np.float64
        t.passes[axis] = address(pass_kernel(t, axis), pass_signature(src, dst, t))


@kernel(**COMPUTE)
def _fused_rows(x, out, b, r0, r1, axes, firsts, counts, scales, channels, h):
    """First-axis outputs ``r0..r1`` of slab ``b`` of a channels-last plane whose windows take at
    most three taps along each axis and do not overlap along the second (tables.fuses_passes):
    both passes at once, on vectors of channels, with no intermediate in memory. Each column's
    sum is scaled, then the columns are summed and scaled, in the passes' order, so the bits are
    those of the two passes (1x56x56x128 2x2 s2, prepared, two threads: 23-24 us against 32-33;
    benchmarks/README.md).
    ``h`` holds three columns' sums of ``channels`` values (taps <= 3: the sums of
    :func:`.direct.strided_sums` need no accumulator)."""
    f64 = np.float64
    l1, n0, n1 = axes[1, LENGTH], axes[0, OUTPUTS], axes[1, OUTPUTS]
    t0, t1 = axes[0, OFFSET], axes[1, OFFSET]
    c = U(channels)
    row = U(l1 * channels)
    tap_h, tap_w = U(axes[0, DILATION]) * row, U(axes[1, DILATION]) * c
    for r in range(r0, r1):
        taps_h, sh = counts[t0 + r], scales[t0 + r]
        top = U((b * axes[0, LENGTH] + firsts[t0 + r]) * l1 * channels)
        for i in range(n1):
            taps_w, sw = counts[t1 + i], scales[t1 + i]
            p = top + U(firsts[t1 + i] * channels)
            o = U(((b * n0 + r) * n1 + i) * channels)
            if taps_h == 2 and taps_w == 2:  # 2 x 2 windows (DenseNet's transitions): one loop
                q = p + tap_w
                for k in range(c):
                    out[o + k] = (
                        (f64(x[p + k]) + f64(x[p + tap_h + k])) * sh + (f64(x[q + k]) + f64(x[q + tap_h + k])) * sh
                    ) * sw
                continue
            for j in range(taps_w):  # the first pass's sums, then the second's (direct.strided_sums)
                few_sums(x, np.int64(p + U(j) * tap_w), h, np.int64(U(j) * c), 1, 0, 0, c, taps_h, tap_h, 1, sh, h)
            few_sums(h, 0, out, np.int64(o), 1, 0, 0, c, taps_w, c, 1, sw, h)


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
def _global_slabs(x, out, start, stop, channels, scale, acc, parts):
    """Every axis has one window covering the whole input: one sum per slab and channel.

    One channel (NCX) is a contiguous sum (:func:`_contiguous_sum`); channels (NXC) are summed
    as vectors of channels, item ``i`` being part ``i % parts`` of the channels of slab
    ``i // parts`` (each channel's sum is its own: the bits do not depend on the parts). Four
    positions are added in pairs before each update of the running sums, which then load and
    store once per four rows (1x13x13x1000 float32, both parts on one thread: 15.3-15.8 us against
    17.9-18.5 one row at a time; the order of a float64 sum of float32 terms does not matter to
    the contract, semantics 1.4).
    """
    slab = x.shape[0] // max(1, out.shape[0] // channels)
    if channels == 1:
        for b in range(start, stop):
            out[b] = _contiguous_sum(x, U(b * slab), U(slab)) * scale
        return
    positions = slab // channels
    for item in range(start, stop):
        b, part = item // parts, item % parts
        c0 = part * channels // parts
        n = U((part + 1) * channels // parts - c0)
        for c in range(n):
            acc[c] = 0.0
        step = U(channels)
        p = 0
        while p + 4 <= positions:
            b0 = U(b * slab + p * channels + c0)
            b1 = b0 + step
            b2 = b1 + step
            b3 = b2 + step
            for c in range(n):
                acc[c] += (np.float64(x[b0 + c]) + np.float64(x[b1 + c])) + (
                    np.float64(x[b2 + c]) + np.float64(x[b3 + c])
                )
            p += 4
        for q in range(p, positions):
            base = U(b * slab + q * channels + c0)
            for c in range(n):
                acc[c] += x[base + c]
        w = U(b * channels + c0)
        for c in range(n):
            out[w + c] = acc[c] * scale


@kernel(**JIT)
def pool_planes(x, out, start, stop, t):
    """Pool small planes with 3 x 3 "same" windows (tables.small_planes) ``start..stop``."""
    pool_small_planes(x, out, start, stop, t.axes, t.plane_masks, t.plane_factors, np.empty(t.plane_sums))


@kernel(**JIT)
def pool_global(x, out, start, stop, t):
    """Pool items ``start..stop`` whose one window covers every axis: running sums of one slab's
    channels only (:func:`_global_slabs`)."""
    _global_slabs(x, out, start, stop, t.channels, t.global_scale, np.empty(t.channels), t.parts)


@kernel(**JIT)
def pool_fused(x, out, start, stop, t):
    """Pool items ``start..stop`` of channels-last planes whose two passes run fused
    (:func:`_fused_rows`): three columns' sums of one position's channels only."""
    axes = t.axes
    h = np.empty(3 * t.channels)
    n0, parts = axes[0, OUTPUTS], t.parts
    for item in range(start, stop):
        part = item % parts
        _fused_rows(
            x,
            out,
            item // parts,
            part * n0 // parts,
            (part + 1) * n0 // parts,
            axes,
            t.firsts,
            t.counts,
            t.scales,
            t.channels,
            h,
        )


@kernel(**JIT)
def pool_passes(x, out, start, stop, t):
    """Pool items ``start..stop`` (any thread: the GIL is released) by one pass per axis with
    the tables ``t`` (:class:`.arguments.SlabTables`, its ``passes`` set by
    :func:`set_pass_addresses`): slabs, or with ``t.parts > 1`` parts of slabs (ranges of
    first-axis outputs, :func:`_pool_slabs`)."""
    axes = t.axes
    longest = 0
    for axis in range(axes.shape[0]):
        if axes[axis, LENGTH] <= TILE_MAX_LENGTH:
            longest = max(longest, _tile_scratch(axes[axis, LENGTH], axes[axis, OUTPUTS]))
    _pool_slabs(x, out, start, stop, t, np.empty((2 * t.group + 3) * t.scratch_size), np.empty(longest))


def uses_passes(t: Any) -> bool:
    """Whether the tables ``t`` pool by :func:`pool_passes` (not small planes, one global window
    or fused passes)."""
    return not (t.axes[0, PLANE_PAD] >= 0 or t.global_scale > 0 or t.axes[0, FUSED] > 0)


def entry_kernel(t: Any) -> Any:
    """The entry kernel that pools by the tables ``t``: each family compiles on its own."""
    if t.axes[0, PLANE_PAD] >= 0:
        return pool_planes
    if t.global_scale > 0:
        return pool_global
    if t.axes[0, FUSED] > 0:
        return pool_fused
    return pool_passes


def entry_signature(x_dtype: Any, out_dtype: Any, t: Any) -> tuple:
    """The types :func:`pool_slabs_16` calls an entry kernel with (a block widened to float32,
    pooled into float64)."""
    from numba import typeof, types

    return (flat(x_dtype), flat(out_dtype), types.int64, types.int64, typeof(t))


@kernel(**JIT)
def _parts_16(bits, out_bits, start, stop, t, bfloat16, slab_in, slab_out, family):
    """Items ``start..stop`` of float16/bfloat16 bit patterns, each a part of a slab (a range of
    first-axis outputs, :func:`_pool_slabs`): only the input rows the part's windows read are
    widened (at their place in a slab-sized buffer), pooled as that part of slab 0, and its
    outputs rounded back."""
    axes, firsts, counts, parts = t.axes, t.firsts, t.counts, t.parts
    n0, t0, dil = axes[0, OUTPUTS], axes[0, OFFSET], axes[0, DILATION]
    row_in, row_out = slab_in // max(1, axes[0, LENGTH]), slab_out // max(1, n0)
    wide_in = np.empty(slab_in, np.float32)
    wide_out = np.empty(slab_out, np.float64)
    for item in range(start, stop):
        b, part = item // parts, item % parts
        r0, r1 = part * n0 // parts, (part + 1) * n0 // parts
        lo, hi = axes[0, LENGTH], 0
        for o in range(r0, r1):
            if counts[t0 + o] > 0:
                lo = min(lo, firsts[t0 + o])
                hi = max(hi, firsts[t0 + o] + (counts[t0 + o] - 1) * dil + 1)
        if hi > lo:
            widen(bits, b * slab_in + lo * row_in, b * slab_in + hi * row_in, bfloat16, wide_in[lo * row_in :])
        call_at(family, (wide_in, wide_out, np.int64(part), np.int64(part + 1), t))
        narrow(wide_out[r0 * row_out : r1 * row_out], out_bits, b * slab_out + r0 * row_out, bfloat16)


@kernel(**JIT)
def pool_slabs_16(bits, out_bits, start, stop, t, bfloat16, block_slabs, family):
    """Pool slabs ``start..stop`` of float16/bfloat16 data given as bit patterns: blocks of
    ``block_slabs`` slabs are widened to float32, pooled in float64 by the tables ``t`` with the
    entry kernel at address ``family`` (:func:`entry_kernel`, :func:`entry_signature`) and
    rounded once back; or, with ``t.parts > 1``, items ``start..stop``, parts of slabs
    (:func:`_parts_16`)."""
    axes = t.axes
    slab_in, slab_out = t.channels, t.channels
    for axis in range(axes.shape[0]):
        slab_in *= axes[axis, LENGTH]
        slab_out *= axes[axis, OUTPUTS]
    if t.parts > 1:
        _parts_16(bits, out_bits, start, stop, t, bfloat16, slab_in, slab_out, family)
        return
    wide_in = np.empty(block_slabs * slab_in, np.float32)
    wide_out = np.empty(block_slabs * slab_out, np.float64)
    for b in range(start, stop, block_slabs):
        n = min(block_slabs, stop - b)
        widen(bits, b * slab_in, (b + n) * slab_in, bfloat16, wide_in)
        call_at(family, (wide_in, wide_out, np.int64(0), np.int64(n), t))
        narrow(wide_out[: n * slab_out], out_bits, b * slab_out, bfloat16)
