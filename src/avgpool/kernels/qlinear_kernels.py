"""numba kernels for QLinearAveragePool (uint8/int8), bit-exact with onnxruntime's CPU kernel.

They take arrays and integers and validate nothing. Compiled on first use and cached on disk.
Every kernel computes the items ``lo <= item < hi`` of its output and releases the GIL, so the
engine can run disjoint ranges on several threads.
Everything else travels in one int64 array, ``tab`` (geometry, window tables, zero points; its
float32 values through ``tab.view(np.float32)``): numba types an array argument several times
faster than a float32 scalar, and each argument costs ~50 ns of a call.

The spatial axes are folded into two: "rows" (every spatial axis but the last, flattened) and the
last axis. An output row's window is a list of input rows (``row_ptr``/``row_idx``, in row-major
order) times a range of the last axis (``first``/``count``), so the taps of every window are visited
in onnxruntime's row-major order and its float32 sums are reproduced bit for bit.

General path, per output value (onnxruntime ``QLinearPool*Task``):
    ``acc = 0f; acc += x_scale * float(int(x) - x_zp)`` over the taps in row-major order
    (``float(x) - float(x_zp)`` is the same number exactly), then
    ``q = rint(acc / float(divisor) / y_scale + float(y_zp))`` in float32, clamped to [qmin, qmax].
Global path (MLAS ``MlasQLinearGlobalAveragePool``):
    ``S = int32(sum(x) - x_zp * n)``, ``f = float(S) * scale`` clamped to
    ``[qmin - y_zp, qmax - y_zp]``, ``q = rint(f) + y_zp``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .jit import INLINED, JIT, kernel
from .jit import U as _U
from .native import call_at


@kernel(**INLINED)
def _quantize(acc, divisor, ys, yzp, qmin, qmax):
    """onnxruntime's ``nearbyintf(acc / divisor / y_scale + y_zp)`` clamped to [qmin, qmax], all in
    float32 (yzp, qmin, qmax are float32 integers); clamping first saturates where onnxruntime's
    int cast is undefined."""
    q = acc / divisor / ys + yzp
    q = q if q > qmin else qmin  # NaN -> qmin
    q = q if q < qmax else qmax
    return np.int32(np.rint(q))


@kernel(**INLINED)
def _quantize_pow2(acc, inverse, ys, yzp, qmin, qmax):
    """:func:`_quantize` for a power-of-two divisor, given as its inverse: ``acc * 2**-k`` is
    ``acc / 2**k`` exactly (both are the correctly rounded value of the same real number)."""
    q = acc * inverse / ys + yzp
    q = q if q > qmin else qmin  # NaN -> qmin
    q = q if q < qmax else qmax
    return np.int32(np.rint(q))


# ---------------------------------------------------------------------------------------------
# Every kernel takes one argument after its bounds, ``tab`` (int64): numba types and unboxes each
# array argument on every call (~50 ns, ~90 ns read-only), which is most of a tiny call. Its float32
# values are read through ``tab.view(np.float32)``.
#
# General kernels: the header below, then the window tables at the offsets it gives, then from
# word ``tab[FLOATS]`` the float32 values x_scale, y_scale and the divisor of every output of a
# plane (or its inverse when every divisor is a power of two).

# the last axis: output length, its windows lying wholly inside the row ``full_lo <= o < full_hi``,
# kernel, stride, begin pad
OW, FULL_LO, FULL_HI, KERNEL, STRIDE, PAD = 0, 1, 2, 3, 4, 5
POW2 = 6  # the divisors are given as inverses (all powers of two)
DEQUANT = 7  # channels last: dequantize input rows once into a float32 ring (windows overlap)
X_ZP, Y_ZP, QMIN, QMAX = 8, 9, 10, 11
MOST_ROWS = 12  # the most input rows of a window
MOST_TAPS = 13  # the most taps of a window
CHUNK = 14  # channels last: inner windows summed in one call
ROWS_IN, WIDTH, ROWS_OUT = 15, 16, 17  # channels first: the shapes of x and out
ROW_PTR, ROW_IDX, FIRST, COUNT, FLOATS = 18, 19, 20, 21, 22  # where the tables start in tab
BLOCK = 23  # channels first through channels last: the channels of an item (pool_ncx_through_nxc)
NXC_KERNEL = 24  # channels first through channels last: pool_nxc's machine-code address (nxc_address)
HEADER = 25
X_SCALE, Y_SCALE, DIV = 0, 1, 2  # in the float32 values


# ---------------------------------------------------------------------------------------------
# general (float) path, channels first: x (P, R_in, W), out (P * R_out * OW,), P = N * C


@kernel(**INLINED)
def _general_tables(tab, rows_out, ow):
    """The general path's tables and quantisation values, read from ``tab``: the CSR input rows
    of each output row, each output column's first tap, tap count and divisor, the scales and the
    zero points and bounds as float32 (``x - x_zp`` is exact in float32: ``|x - x_zp| <= 255``)."""
    floats = tab.view(np.float32)[2 * tab[FLOATS] :]
    return (
        tab[tab[ROW_PTR] : tab[ROW_PTR] + rows_out + 1],
        tab[tab[ROW_IDX] : tab[FIRST]],
        tab[tab[FIRST] : tab[FIRST] + ow],
        tab[tab[COUNT] : tab[COUNT] + ow],
        floats[DIV:],
        floats[X_SCALE],
        floats[Y_SCALE],
        np.float32(tab[X_ZP]),
        np.float32(tab[Y_ZP]),
        np.float32(tab[QMIN]),
        np.float32(tab[QMAX]),
    )


#: Channels first, one output row of at most this many outputs per plane (a window over most of a
#: small plane: 1x1024x6x6 7x7 pads [0, 0, 1, 1]): planes are summed PLANES at a time.
PLANES_MAX_OW = 8
PLANES = 16


@kernel(**INLINED)
def _planes_at_once(
    xf, of, lo, hi, plane, width, ow, row_ptr, row_idx, first, count, div, xs, fzp, ys, yzp, qmin, qmax, pow2
):
    """Planes ``lo <= p < hi`` of one output row each, ``PLANES`` at a time: each output's taps are
    one chain of dependent float32 additions (onnxruntime's order), which one plane at a time ran
    at the latency of an addition per tap (1x1024x6x6 7x7 pads [0, 0, 1, 1], 36 taps: ~50 us
    serial); the chains of several planes, taken tap by tap side by side, overlap. Each output
    still gets its taps in row-major order."""
    acc = np.empty(PLANES * ow, np.float32)
    pa = lo
    while pa < hi:
        g = min(PLANES, hi - pa)
        acc[:] = np.float32(0.0)
        for t in range(row_ptr[0], row_ptr[1]):
            row = _U(row_idx[t] * width)
            for o in range(ow):
                a0 = _U(o * PLANES)
                for i in range(first[o], first[o] + count[o]):
                    at = _U(pa) * _U(plane) + row + _U(i)
                    for j in range(_U(g)):
                        acc[a0 + j] += xs * (np.float32(xf[at + j * _U(plane)]) - fzp)
        for j in range(g):
            for o in range(ow):
                if pow2:
                    of[(pa + j) * ow + o] = _quantize_pow2(acc[o * PLANES + j], div[o], ys, yzp, qmin, qmax)
                else:
                    of[(pa + j) * ow + o] = _quantize(acc[o * PLANES + j], div[o], ys, yzp, qmin, qmax)
        pa += g


@kernel(**JIT)
def pool_ncx(x, out, lo, hi, tab):
    """Output rows ``lo <= item < hi`` (item = plane * R_out + row).

    Taps are addressed by unsigned offsets into the flat input (numba then drops its
    negative-index wrap-around and LLVM vectorises the loops) and dequantized where they are read
    (uint8 reads into a float32 accumulator cannot alias, so no runtime alias checks either): a
    view per input row and tap cost ~15 ns of reference counting each, most of a small plane's
    time (1x1024x7x7 3x3). Sums are quantized a block of rows at a time, so that the divisions run
    in long vector loops too.
    """
    ow, full_lo, full_hi, kernel, stride, pad = tab[OW], tab[FULL_LO], tab[FULL_HI], tab[KERNEL], tab[STRIDE], tab[PAD]
    rows_out = tab[ROWS_OUT]
    rows_in, width = x.shape[1], x.shape[2]
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    row_ptr, row_idx, first, count, div, xs, ys, fzp, yzp, qmin, qmax = _general_tables(tab, rows_out, ow)
    n_full = _U(max(0, full_hi - full_lo))
    us = _U(stride)
    two = _U(2)
    if rows_out == 1 and ow <= PLANES_MAX_OW:
        _planes_at_once(
            xf,
            of,
            lo,
            hi,
            rows_in * width,
            width,
            ow,
            row_ptr,
            row_idx,
            first,
            count,
            div,
            xs,
            fzp,
            ys,
            yzp,
            qmin,
            qmax,
            tab[POW2] != 0,
        )
        return
    block = max(1, 1024 // ow)
    acc = np.empty(block * ow, np.float32)
    item = lo
    while item < hi:
        p = item // rows_out
        r0 = item - p * rows_out
        r1 = min(rows_out, r0 + block, r0 + hi - item)
        for r in range(r0, r1):
            a0 = _U((r - r0) * ow)
            for o in range(_U(ow)):
                acc[a0 + o] = np.float32(0.0)
            inner = a0 + _U(full_lo)
            for t in range(row_ptr[r], row_ptr[r + 1]):
                xrow = _U((p * rows_in + row_idx[t]) * width)
                # windows lying wholly inside the row: tap-major, vectorised over the outputs
                for j in range(kernel if n_full > 0 else 0):
                    xr = xrow + _U(full_lo * stride - pad + j)
                    if stride == 1:
                        for i in range(n_full):
                            acc[inner + i] += xs * (np.float32(xf[xr + i]) - fzp)
                    elif stride == 2:
                        for i in range(n_full):
                            acc[inner + i] += xs * (np.float32(xf[xr + two * i]) - fzp)
                    else:
                        for i in range(n_full):
                            acc[inner + i] += xs * (np.float32(xf[xr + us * i]) - fzp)
                # clipped windows at both ends
                for o in range(full_lo):
                    a = acc[a0 + _U(o)]
                    for i in range(first[o], first[o] + count[o]):
                        a += xs * (np.float32(xf[xrow + _U(i)]) - fzp)
                    acc[a0 + _U(o)] = a
                for o in range(full_hi, ow):
                    a = acc[a0 + _U(o)]
                    for i in range(first[o], first[o] + count[o]):
                        a += xs * (np.float32(xf[xrow + _U(i)]) - fzp)
                    acc[a0 + _U(o)] = a
        nq = _U((r1 - r0) * ow)
        d0 = _U(r0 * ow)
        o0 = _U((p * rows_out + r0) * ow)
        if tab[POW2]:
            for i in range(nq):
                of[o0 + i] = _quantize_pow2(acc[i], div[d0 + i], ys, yzp, qmin, qmax)
        else:
            for i in range(nq):
                of[o0 + i] = _quantize(acc[i], div[d0 + i], ys, yzp, qmin, qmax)
        item += r1 - r0


# ---------------------------------------------------------------------------------------------
# general (float) path, channels last: x (N, R_in, W, C), out (N, R_out, OW, C)
#
# One output row at a time; a window's taps are summed in one loop over its lanes (the contiguous
# channels) that also writes the quantized result: a second pass over a float accumulator costs
# nearly as much as the first (150K outputs of 9 taps: 35 us in one loop, 59 us as sums then
# quantization, 63 us as 4 + 4 + 1 taps; the divisions only overlap the additions in the same loop).
# Sums take the taps in onnxruntime's order, ``(((t0 + t1) + t2) + t3) ...``, which is its
# ``((0 + t0) + t1) ...`` but for the sign of a zero sum, and that never reaches the quantized value
# (0 / d / y_scale + y_zp is y_zp, or +0 when y_zp is 0). A window with fewer taps than its loop
# takes is padded with taps of value 0, which change no sum but that sign.
#
# Where windows overlap (an input value is a tap of several windows: 3x3 stride 1 reads each one
# nine times), each input row is dequantized once into a float32 ring of rows, plus a row of zeros
# for the padding taps (``x_scale * (x - x_zp)`` is one number whether it is computed once or nine
# times), and up to 9 taps (3x3) are summed in one loop, more 4 at a time into an accumulator
# first. Otherwise (2x2 stride 2) taps are dequantized where they are read, 4 at a time, and a
# padding tap is any tap with a scale of 0 (``0 * (x - x_zp)`` is +-0: |x - x_zp| <= 255).
# The windows lying wholly inside a row have the same taps shifted by stride * C: up to
# ``tab[CHUNK]`` of them are summed in one call, as one run of lanes with stride 1, window by
# window otherwise (a call per window cost 20-40 cycles of set-up and overlap tests per window).
# Taps are addressed by unsigned offsets into flat arrays, not by row views: a view per tap cost
# ~15 ns of reference counting per window, and a signed index a wrap-around test that keeps LLVM
# from vectorising.

#: Lanes (chunk * C) of the inner windows summed as one: the accumulator stays in L1.
CHUNK_LANES = 4096


@kernel(**INLINED)
def _tap(v, scale, fzp):
    """A uint8/int8 tap, dequantized (``scale`` is x_scale, or 0 for a padding tap)."""
    return scale * (np.float32(v) - fzp)


@kernel(**INLINED)
def _dequant(v, scale, zp):
    """:func:`_tap` with the int32 zero point ``zp``, for the ring: ``x - x_zp`` is taken in int32
    lanes, then converted (exact: |x - x_zp| <= 255), one float operation fewer per value (serial
    1x14x14x272 3x3 s2 p1, x86-64-v4: 9.0 us -> 8.6). Not for the taps dequantized where they are
    read (:func:`_tap`): LLVM then made the 2x2 stride-2 loops twice as slow."""
    return scale * np.float32(np.int32(np.int32(v) - zp))


@kernel(**INLINED)
def _same(v, scale, fzp):
    """A tap already dequantized."""
    return v


@kernel(**INLINED)
def _add4(acc, fresh, npos, n, step, src, taps, scales, g, tap, fzp):
    """``acc[:npos * n] (+)= taps g..g+3`` in that order (``fresh``: acc holds nothing yet), window
    ``w`` (of ``npos``) reading ``n`` values of ``src`` at each tap's offset plus ``w * step``. Two
    loops: reading ``acc`` through a second name made LLVM's overlap test fail (scalar code)."""
    p0, p1, p2, p3 = _U(taps[g]), _U(taps[g + 1]), _U(taps[g + 2]), _U(taps[g + 3])
    s0, s1, s2, s3 = scales[g], scales[g + 1], scales[g + 2], scales[g + 3]
    for w in range(npos):
        a = w * n
        b = w * step
        if fresh:
            for i in range(n):
                acc[a + i] = (
                    (tap(src[p0 + b + i], s0, fzp) + tap(src[p1 + b + i], s1, fzp)) + tap(src[p2 + b + i], s2, fzp)
                ) + tap(src[p3 + b + i], s3, fzp)
        else:
            for i in range(n):
                acc[a + i] = (
                    ((acc[a + i] + tap(src[p0 + b + i], s0, fzp)) + tap(src[p1 + b + i], s1, fzp))
                    + tap(src[p2 + b + i], s2, fzp)
                ) + tap(src[p3 + b + i], s3, fzp)


@kernel(**INLINED)
def _out4(acc, fresh, npos, n, step, src, taps, scales, g, tap, fzp, of, q, ostep, d, ys, yzp, qmin, qmax):
    """``of[q + w * ostep:][:n]`` for each window ``w``: :func:`_add4`'s sums, quantized (divided by
    ``d``: in the same loop as the additions the divisions cost next to nothing, so power-of-two
    divisors take no other path here)."""
    p0, p1, p2, p3 = _U(taps[g]), _U(taps[g + 1]), _U(taps[g + 2]), _U(taps[g + 3])
    s0, s1, s2, s3 = scales[g], scales[g + 1], scales[g + 2], scales[g + 3]
    for w in range(npos):
        a = w * n
        b = w * step
        c = q + w * ostep
        if fresh:
            for i in range(n):
                s = (
                    (tap(src[p0 + b + i], s0, fzp) + tap(src[p1 + b + i], s1, fzp)) + tap(src[p2 + b + i], s2, fzp)
                ) + tap(src[p3 + b + i], s3, fzp)
                of[c + i] = _quantize(s, d, ys, yzp, qmin, qmax)
        else:
            for i in range(n):
                s = (
                    ((acc[a + i] + tap(src[p0 + b + i], s0, fzp)) + tap(src[p1 + b + i], s1, fzp))
                    + tap(src[p2 + b + i], s2, fzp)
                ) + tap(src[p3 + b + i], s3, fzp)
                of[c + i] = _quantize(s, d, ys, yzp, qmin, qmax)


@kernel(**INLINED)
def _out9(npos, n, step, src, taps, g, of, q, ostep, d, ys, yzp, qmin, qmax):
    """:func:`_out4` for the 9 taps g..g+8 of a window without earlier taps, already dequantized
    (``t0 + t1`` is ``-0.0 + t0 + t1``: one addition and one load fewer per output)."""
    p0, p1, p2, p3, p4 = _U(taps[g]), _U(taps[g + 1]), _U(taps[g + 2]), _U(taps[g + 3]), _U(taps[g + 4])
    p5, p6, p7, p8 = _U(taps[g + 5]), _U(taps[g + 6]), _U(taps[g + 7]), _U(taps[g + 8])
    for w in range(npos):
        c = q + w * ostep
        b = w * step
        for i in range(n):
            s = (((src[p0 + b + i] + src[p1 + b + i]) + src[p2 + b + i]) + src[p3 + b + i]) + src[p4 + b + i]
            s = (((s + src[p5 + b + i]) + src[p6 + b + i]) + src[p7 + b + i]) + src[p8 + b + i]
            of[c + i] = _quantize(s, d, ys, yzp, qmin, qmax)


@kernel(**INLINED)
def _window_x(k, npos, n, step, src, taps, scales, acc, of, q, ostep, d, pad_tap, xs, fzp, ys, yzp, qmin, qmax):
    """Windows whose ``k`` taps are values of x, dequantized where they are read: 4 at a time into
    ``acc``, the last 1 to 4 (padded with taps of scale 0) quantized into ``of``."""
    g = 0
    while k - g > 4:
        _add4(acc, g == 0, npos, n, step, src, taps, scales, g, _tap, fzp)
        g += 4
    padding = taps[0] if k > 0 else pad_tap  # any tap: its scale is 0
    for j in range(k, g + 4):
        taps[j] = padding
        scales[j] = 0
    _out4(acc, g == 0, npos, n, step, src, taps, scales, g, _tap, fzp, of, q, ostep, d, ys, yzp, qmin, qmax)
    for j in range(k, g + 4):
        scales[j] = xs


@kernel(**INLINED)
def _window_ring(k, npos, n, step, src, taps, scales, acc, of, q, ostep, d, pad_tap, xs, fzp, ys, yzp, qmin, qmax):
    """Windows whose ``k`` taps are in the ring of dequantized rows: up to 9 (3x3) in one loop
    that also quantizes; more, 4 at a time into ``acc`` and the last 1 to 4 quantized. Padding
    taps read the row of zeros at ``pad_tap``."""
    if k > 4 and k <= 9:
        for j in range(k, 9):
            taps[j] = pad_tap
        _out9(npos, n, step, src, taps, 0, of, q, ostep, d, ys, yzp, qmin, qmax)
        return
    g = 0
    while k - g > 4:
        _add4(acc, g == 0, npos, n, step, src, taps, scales, g, _same, fzp)
        g += 4
    for j in range(k, g + 4):
        taps[j] = pad_tap
    _out4(acc, g == 0, npos, n, step, src, taps, scales, g, _same, fzp, of, q, ostep, d, ys, yzp, qmin, qmax)


@kernel(**INLINED)
def _pool_row(
    src,
    window,
    pad_tap,
    base,
    nrows,
    o0,
    o1,
    q0,
    d0,
    channels,
    px,
    tab,
    first,
    count,
    div,
    taps,
    scales,
    rel,
    acc,
    of,
    xs,
    fzp,
    ys,
    yzp,
    qmin,
    qmax,
):
    """Outputs ``o0 <= o < o1`` of one output row, whose window rows start at offsets
    ``base[:nrows]`` of ``src``, its pixels ``px`` values apart (``q0``, ``d0``: where the row starts
    in ``of`` and in ``div``), summed by ``window`` (:func:`_window_x` or :func:`_window_ring`;
    ``pad_tap``: the ring's row of zeros, or 0)."""
    full_lo, full_hi, kernel, stride, pad, chunk = (
        tab[FULL_LO],
        tab[FULL_HI],
        tab[KERNEL],
        tab[STRIDE],
        tab[PAD],
        tab[CHUNK],
    )
    inner = 0  # the taps of an inner window at column 0, relative (may be negative)
    for t in range(nrows):
        for j in range(kernel):
            rel[inner] = base[t] + (j - pad) * px
            inner += 1
    scales[:] = xs
    o = o0
    while o < o1:
        if full_lo <= o < full_hi:
            end = min(o1, full_hi, o + chunk)
            shift = o * stride * px
            for i in range(inner):
                taps[i] = rel[i] + shift
            k = inner
        else:
            end = o + 1
            k = 0
            for t in range(nrows):
                for w in range(first[o], first[o] + count[o]):
                    taps[k] = base[t] + w * px
                    k += 1
        # stride 1 over pixels of C values: the windows' lanes are contiguous, one window of (end - o) * C
        # lanes; otherwise end - o windows of C lanes, stride * px apart in the source, in one call
        whole = stride == 1 and px == channels
        npos = _U(1 if whole else end - o)
        n = _U((end - o) * channels) if whole else _U(channels)
        window(
            k,
            npos,
            n,
            _U(stride * px),
            src,
            taps,
            scales,
            acc,
            of,
            _U((q0 + o) * channels),
            _U(channels),
            div[d0 + o],
            pad_tap,
            xs,
            fzp,
            ys,
            yzp,
            qmin,
            qmax,
        )
        o = end


@functools.cache
def pool_nxc_kernel(dequant: bool) -> Any:
    """The channels-last kernel for tables whose ``DEQUANT`` word is ``dequant``: the taps read
    from a ring of dequantized rows, or dequantized where they are read. Each compiles only its
    own window loops (half of the one kernel that held both: tests/test_compile_counts.py)."""
    DEQUANT_ROWS = dequant

    @kernel(key=("pool_nxc", dequant), **JIT)
    def pool_nxc(x, out, lo, hi, tab):
        """Output positions ``lo <= item < hi`` (item = (n * R_out + row) * OW + column), one output
        row at a time, every channel at once (vectorised over the contiguous channels)."""
        rows_in, width, channels = x.shape[1], x.shape[2], x.shape[3]
        rows_out, ow = out.shape[1], out.shape[2]
        xf = x.reshape(-1)
        of = out.reshape(-1)
        row_ptr, row_idx, first, count, div, xs, ys, fzp, yzp, qmin, qmax = _general_tables(tab, rows_out, ow)
        izp = np.int32(tab[X_ZP])
        most_rows = max(1, tab[MOST_ROWS])
        lanes = tab[CHUNK] * channels
        wc = width * channels
        ntaps = max(tab[MOST_TAPS], most_rows * tab[KERNEL]) + 9  # room for padding taps
        dequant = DEQUANT_ROWS
        # ring rows are ``ring_row`` floats apart, not wc: where wc * 4 bytes is a multiple of 4 KiB (7x1024 or
        # 28x256 channels), every tap of a 3x3 window sat at the same address modulo 4096, and loads that
        # alias so cost 1.5 times more (9 float32 rows summed, isolated loop: 7.6 ns per 16 lanes 4 KiB
        # apart, 5.0 at 4 KiB + 192 bytes); inception_v2 node 7 (1x7x7x1024 3x3 p1 NHWC) in bench_qlinear.py
        # The same between the pixels of a ring row where pixels 2 apart fall 4 KiB apart (C = 512, 1024): a
        # window's taps in a row are then summed window by window, not in one run of lanes.
        #
        # The ring and the accumulator start on a 64-byte boundary, and ring rows are a multiple of 16 floats
        # apart: at an arbitrary offset into their allocation every 64-byte load and store of the loops
        # straddled two cache lines, which cost 15-20% of the whole call (serial, 1x14x14x272 3x3 s2 p1:
        # 9.3 us misaligned, 7.6 aligned; 1x14x14x576 3x3 p1: 43.5 vs 36.3; 1x28x28x192 3x3 p1: 60 vs 50).
        # bench_qlinear.py's NHWC node rows (shufflenet node 3, inception_v2 nodes 1 to 7).
        ring_px = channels
        while dequant and ((ring_px * 8) % 4096 < 192 or (ring_px * 8) % 4096 > 4096 - 192):
            ring_px += 16
        ring_row = (width * ring_px + 15) // 16 * 16
        while (ring_row * 4) % 4096 < 192 or (ring_row * 4) % 4096 > 4096 - 192:
            ring_row += 16
        zeros = most_rows * ring_row  # where the ring's row of zeros starts (as long as the padding taps step)
        ints = np.empty(2 * ntaps + 5 * most_rows, np.int64)  # two allocations per call, not nine
        acc_size = (lanes + 15) // 16 * 16
        ring_size = zeros + tab[CHUNK] * ring_px * max(1, tab[STRIDE]) if dequant else 0
        reals = np.empty(15 + acc_size + ring_size + ntaps, np.float32)
        skew = (16 - (reals.ctypes.data // 4) % 16) % 16  # floats to the first 64-byte boundary
        taps = ints[:ntaps]  # a window's taps: offsets into the source
        rel = ints[ntaps : 2 * ntaps]
        base = ints[2 * ntaps : 2 * ntaps + most_rows]
        tags = ints[2 * ntaps + most_rows : 2 * ntaps + 4 * most_rows]  # per ring slot: (input row, columns)
        used = ints[2 * ntaps + 4 * most_rows :]
        acc = reals[skew : skew + lanes]
        ring = reals[skew + acc_size : skew + acc_size + ring_size]
        scales = reals[skew + acc_size + ring_size : skew + acc_size + ring_size + ntaps]
        tags[:] = -1
        ring[zeros:] = np.float32(0.0)
        item = lo
        while item < hi:  # one output row at a time
            nr = item // ow
            o0 = item - nr * ow
            o1 = min(ow, o0 + hi - item)
            n = nr // rows_out
            r = nr - n * rows_out
            rows = row_idx[row_ptr[r] : row_ptr[r + 1]]
            nrows = rows.shape[0]
            if dequant:
                c0, c1 = width, 0  # the columns these windows read
                for o in range(o0, o1):
                    if count[o] > 0:
                        c0 = min(c0, first[o])
                        c1 = max(c1, first[o] + count[o])
                used[:] = 0
                for t in range(nrows):  # rows already in the ring
                    row = n * rows_in + rows[t]
                    base[t] = -1
                    for s in range(most_rows):
                        if tags[3 * s] == row and tags[3 * s + 1] <= c0 and tags[3 * s + 2] >= c1:
                            base[t] = s * ring_row
                            used[s] = 1
                            break
                for t in range(nrows):  # the others, into slots no window row of this output row uses
                    if base[t] < 0:
                        s = 0
                        while used[s]:
                            s += 1
                        used[s] = 1
                        row = n * rows_in + rows[t]
                        tags[3 * s], tags[3 * s + 1], tags[3 * s + 2] = row, c0, c1
                        if ring_px == channels:
                            dst = _U(s * ring_row + c0 * channels)
                            at = _U(row * wc + c0 * channels)
                            for i in range(_U(max(0, c1 - c0) * channels)):
                                ring[dst + i] = _dequant(xf[at + i], xs, izp)
                        else:
                            for col in range(c0, c1):
                                dst = _U(s * ring_row + col * ring_px)
                                at = _U(row * wc + col * channels)
                                for i in range(_U(channels)):
                                    ring[dst + i] = _dequant(xf[at + i], xs, izp)
                        base[t] = s * ring_row
                _pool_row(
                    ring,
                    _window_ring,
                    zeros,
                    base,
                    nrows,
                    o0,
                    o1,
                    nr * ow,
                    r * ow,
                    channels,
                    ring_px,
                    tab,
                    first,
                    count,
                    div,
                    taps,
                    scales,
                    rel,
                    acc,
                    of,
                    xs,
                    fzp,
                    ys,
                    yzp,
                    qmin,
                    qmax,
                )
            else:
                for t in range(nrows):
                    base[t] = (n * rows_in + rows[t]) * wc
                _pool_row(
                    xf,
                    _window_x,
                    0,
                    base,
                    nrows,
                    o0,
                    o1,
                    nr * ow,
                    r * ow,
                    channels,
                    channels,
                    tab,
                    first,
                    count,
                    div,
                    taps,
                    scales,
                    rel,
                    acc,
                    of,
                    xs,
                    fzp,
                    ys,
                    yzp,
                    qmin,
                    qmax,
                )
            item += o1 - o0

    return pool_nxc


def nxc_address(dequant: bool, dtype: Any) -> int:
    """The address of :func:`pool_nxc_kernel` ``(dequant)`` for the 4-D images of ``dtype`` the
    channels-first kernel makes (``tab[NXC_KERNEL]``): called there, not linked in, so that it is
    compiled once, not optimised again inside its caller (1.3 s of a first call)."""
    from numba import typeof, types

    from .native import address

    image = types.Array(typeof(np.empty(0, dtype)).dtype, 4, "C")
    return address(pool_nxc_kernel(dequant), (image, image, types.int64, types.int64, typeof(np.empty(0, np.int64))))


@functools.cache
def pool_ncx_through_nxc_kernel(dequant: bool) -> Any:
    """:func:`pool_ncx_through_nxc` over :func:`pool_nxc_kernel` ``(dequant)`` at ``tab[NXC_KERNEL]``."""

    @kernel(key=("pool_ncx_through_nxc", dequant), **JIT)
    def pool_ncx_through_nxc(x, out, lo, hi, tab):
        """Channels first, x (N, C, R_in * W) and out (N, C, R_out * OW), by the channels-last kernel:
        items are (image, block of ``tab[BLOCK]`` channels); a block's planes are transposed into an
        image of its channels (R_in, W, c), pooled by :func:`pool_nxc_kernel` with ``tab`` (made for
        channels last) and its outputs transposed back. The windows, their taps' order and the
        arithmetic are pool_nxc's, which are pool_ncx's: the same bits. Where the rows are short
        (7x7 to 28x28 planes) pool_ncx's loops along a row run a few iterations each, pool_nxc's
        over the channels run long; the transposes cost less than the difference
        (:attr:`avgpool.tuning.Tuning.qlinear_ncx_through_nxc_max_width`)."""
        channels, size, out_size = x.shape[1], x.shape[2], out.shape[2]
        rows_in, width, rows_out, ow = tab[ROWS_IN], tab[WIDTH], tab[ROWS_OUT], tab[OW]
        block = tab[BLOCK]
        blocks = (channels + block - 1) // block
        xf = x.reshape(x.size)
        of = out.reshape(out.size)
        for item in range(lo, hi):
            n = item // blocks
            c0 = (item - n * blocks) * block
            cw = min(block, channels - c0)
            image = np.empty((1, rows_in, width, cw), x.dtype)
            pooled = np.empty((1, rows_out, ow, cw), x.dtype)
            flat_image = image.reshape(image.size)
            flat_pooled = pooled.reshape(pooled.size)
            at = _U((n * channels + c0) * size)
            for i in range(_U(size)):
                for c in range(_U(cw)):
                    flat_image[i * _U(cw) + c] = xf[at + c * _U(size) + i]
            call_at(tab[NXC_KERNEL], (image, pooled, np.int64(0), np.int64(rows_out * ow), tab))
            at = _U((n * channels + c0) * out_size)
            for c in range(_U(cw)):
                for i in range(_U(out_size)):
                    of[at + c * _U(out_size) + i] = flat_pooled[i * _U(cw) + c]

    return pool_ncx_through_nxc


# ---------------------------------------------------------------------------------------------
# integer global path: tab = [-x_zp * n, y_zp, C], then the float32 values scale, qmin - y_zp and
# qmax - y_zp from word 3 (float32 index 6)
BIAS, GLOBAL_Y_ZP, CHANNELS = 0, 1, 2
SCALE, LOW, HIGH = 6, 7, 8


@kernel(**INLINED)
def _requantize(total, bias, scale, lo, hi, yzp):
    """MLAS: ``f = float(int32(total + bias)) * scale`` clamped to [lo, hi], rounded half to even."""
    s = total + bias
    s = ((s + 2147483648) & 4294967295) - 2147483648  # int32 wrap-around, as the SIMD sums do
    f = np.float32(s) * scale
    f = f if f > lo else lo
    f = f if f < hi else hi
    return np.int32(np.rint(f)) + yzp


@kernel(**JIT)
def global_ncx(x, out, lo, hi, tab):
    """x (P * n,) flat, out (P,): planes ``lo <= p < hi``. Each plane is summed in int32, wrapping
    around as MLAS's lanes do; the truncation at each step lets LLVM keep 16 lanes per vector
    (numba widens integer sums to int64: 8 lanes; 1024 planes of 49: 3.2 us against 5.0)."""
    n = _U(x.shape[0] // out.shape[0])
    floats = tab.view(np.float32)
    scale, flo, fhi, bias, yzp = floats[SCALE], floats[LOW], floats[HIGH], tab[BIAS], tab[GLOBAL_Y_ZP]
    for p in range(lo, hi):
        total = np.int32(0)
        at = _U(p) * n
        for i in range(n):
            total = np.int32(total + x[at + i])
        out[p] = _requantize(total, bias, scale, flo, fhi, yzp)


@kernel(**JIT)
def global_nxc(x, out, lo, hi, tab):
    """x (N, n, C), out (N * C,): batches ``lo <= b < hi``. Sums of up to 128 rows fit int16
    (|x| <= 255), which packs twice as many lanes per vector as int32; rows are added four at a
    time (|sum| <= 1020), so that the partial sums are loaded and stored once per four rows."""
    n = x.shape[1]
    channels = x.shape[2]
    floats = tab.view(np.float32)
    scale, flo, fhi, bias, yzp = floats[SCALE], floats[LOW], floats[HIGH], tab[BIAS], tab[GLOBAL_Y_ZP]
    part = np.empty(channels, np.int16)
    total = np.empty(channels, np.int32)  # int32 lanes wrap around exactly as MLAS's do
    for b in range(lo, hi):
        total[:] = np.int32(bias)
        start = 0
        while start < n:
            stop = min(n, start + 128)
            part[:] = 0
            i = start
            while i + 4 <= stop:
                r0, r1, r2, r3 = x[b, i], x[b, i + 1], x[b, i + 2], x[b, i + 3]
                for c in range(channels):
                    four = (np.int16(r0[c]) + np.int16(r1[c])) + (np.int16(r2[c]) + np.int16(r3[c]))
                    part[c] = np.int16(part[c] + four)
                i += 4
            for j in range(i, stop):
                row = x[b, j]
                for c in range(channels):
                    part[c] = np.int16(part[c] + row[c])
            for c in range(channels):
                total[c] = np.int32(total[c] + part[c])
            start = stop
        orow = out[b * channels : (b + 1) * channels]
        for c in range(channels):
            f = np.float32(total[c]) * scale
            f = f if f > flo else flo
            f = f if f < fhi else fhi
            orow[c] = np.int32(np.rint(f)) + yzp
