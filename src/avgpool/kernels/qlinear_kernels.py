"""numba kernels for QLinearAveragePool (uint8/int8), bit-exact with onnxruntime's CPU kernel.

They take arrays and integers and validate nothing. Compiled on first use and cached on disk.
Every kernel computes the items ``lo <= item < hi`` of its output and releases the GIL, so the
engine can run disjoint ranges on several threads.
Scalars travel in small arrays (``geo``: int64 geometry; ``fq``/``iq``: float32/int64 quantisation
values): numba types an array argument several times faster than a float32 scalar.

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

import numpy as np
from .jit import kernel


@kernel(nogil=True, inline="always", error_model="numpy")
def _quantize(acc, divisor, ys, yzp, qmin, qmax):
    """onnxruntime's ``nearbyintf(acc / divisor / y_scale + y_zp)`` clamped to [qmin, qmax], all in
    float32 (yzp, qmin, qmax are float32 integers); clamping first saturates where onnxruntime's
    int cast is undefined."""
    q = acc / divisor / ys + yzp
    q = q if q > qmin else qmin  # NaN -> qmin
    q = q if q < qmax else qmax
    return np.int32(np.rint(q))


@kernel(nogil=True, inline="always", error_model="numpy")
def _quantize_pow2(acc, inverse, ys, yzp, qmin, qmax):
    """:func:`_quantize` for a power-of-two divisor, given as its inverse: ``acc * 2**-k`` is
    ``acc / 2**k`` exactly (both are the correctly rounded value of the same real number)."""
    q = acc * inverse / ys + yzp
    q = q if q > qmin else qmin  # NaN -> qmin
    q = q if q < qmax else qmax
    return np.int32(np.rint(q))


# ---------------------------------------------------------------------------------------------
# general (float) path, channels first: x (P, R_in, W), out (P, R_out * OW), P = N * C
# geo = [OW, full_lo, full_hi, kernel, stride, pad, pow2] of the last axis (pow2: ``div`` holds
# the inverses of power-of-two divisors); fq = [x_scale, y_scale]; iq = [x_zp, y_zp, qmin, qmax]


@kernel(entry=True, nogil=True, boundscheck=False, error_model="numpy")
def pool_ncx(x, out, lo, hi, row_ptr, row_idx, first, count, div, geo, fq, iq):
    """Output rows ``lo <= item < hi`` (item = plane * R_out + row).

    Loops run from 0 over slices (numba then drops its negative-index wrap-around and LLVM
    vectorises them), and taps are dequantized where they are read (uint8 reads into a float32
    accumulator cannot alias, so no runtime alias checks either). Sums are quantized a block of
    rows at a time, so that the divisions run in long vector loops too.
    """
    ow, full_lo, full_hi, kernel, stride, pad = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
    xs, ys = fq[0], fq[1]
    fzp = np.float32(iq[0])  # x - x_zp is exact in float32 (|x - x_zp| <= 255)
    yzp, qmin, qmax = np.float32(iq[1]), np.float32(iq[2]), np.float32(iq[3])
    rows_out = out.shape[1] // ow
    n_full = full_hi - full_lo
    block = max(1, 1024 // ow)
    acc = np.empty(block * ow, np.float32)
    item = lo
    while item < hi:
        p = item // rows_out
        r0 = item - p * rows_out
        r1 = min(rows_out, r0 + block, r0 + hi - item)
        for r in range(r0, r1):
            arow = acc[(r - r0) * ow:(r - r0 + 1) * ow]
            arow[:] = np.float32(0.0)
            inner = arow[full_lo:full_hi]
            for t in range(row_ptr[r], row_ptr[r + 1]):
                xrow = x[p, row_idx[t]]
                # windows lying wholly inside the row: tap-major, vectorised over the outputs
                for j in range(kernel):
                    xr = xrow[full_lo * stride - pad + j:]
                    if stride == 1:
                        for i in range(n_full):
                            inner[i] += xs * (np.float32(xr[i]) - fzp)
                    elif stride == 2:
                        for i in range(n_full):
                            inner[i] += xs * (np.float32(xr[2 * i]) - fzp)
                    else:
                        for i in range(n_full):
                            inner[i] += xs * (np.float32(xr[stride * i]) - fzp)
                # clipped windows at both ends
                for o in range(full_lo):
                    a = arow[o]
                    for i in range(first[o], first[o] + count[o]):
                        a += xs * (np.float32(xrow[i]) - fzp)
                    arow[o] = a
                for o in range(full_hi, ow):
                    a = arow[o]
                    for i in range(first[o], first[o] + count[o]):
                        a += xs * (np.float32(xrow[i]) - fzp)
                    arow[o] = a
        nq = (r1 - r0) * ow
        aq = acc[:nq]
        dq = div[r0 * ow:r1 * ow]
        oq = out[p, r0 * ow:r1 * ow]
        if geo[6]:
            for i in range(nq):
                oq[i] = _quantize_pow2(aq[i], dq[i], ys, yzp, qmin, qmax)
        else:
            for i in range(nq):
                oq[i] = _quantize(aq[i], dq[i], ys, yzp, qmin, qmax)
        item += r1 - r0


# ---------------------------------------------------------------------------------------------
# general (float) path, channels last: x (N, R_in, W, C), out (N, R_out, OW, C)
#
# A window's taps are summed four at a time in one loop over the channels (``((acc + t0) + t1) +
# t2) + t3`` is onnxruntime's order), and the last one to four go straight into the quantized
# output: a 2x2 window is one loop that reads four input rows and writes one output row. A window
# of at most four taps starts from a row of -0.0, for which ``-0.0 + t`` is ``t`` exactly (also for
# t = +-0). Taps are addressed by unsigned offsets into the flat arrays, not by row views: a view
# per tap cost ~15 ns of reference counting per window, and a signed index a wrap-around test that
# keeps LLVM from vectorising; a "fresh or not" test inside a loop did too, hence the loop pairs.

_U = np.uint64


@kernel(nogil=True, inline="always", error_model="numpy")
def _tap(v, xs, fzp):
    return xs * (np.float32(v) - fzp)


@kernel(nogil=True, inline="always", boundscheck=False, error_model="numpy")
def _sum_four(acc, fresh, xf, pa, pb, pc, pe, xs, fzp):
    """``acc (+)= t(a) + t(b) + t(c) + t(e)`` in that order, the taps at offsets ``pa..pe`` of ``xf``
    (``fresh``: acc holds nothing yet)."""
    n = _U(acc.shape[0])
    if fresh:
        for i in range(n):
            acc[i] = ((_tap(xf[pa + i], xs, fzp) + _tap(xf[pb + i], xs, fzp)) + _tap(xf[pc + i], xs, fzp)) \
                + _tap(xf[pe + i], xs, fzp)
    else:
        for i in range(n):
            acc[i] = (((acc[i] + _tap(xf[pa + i], xs, fzp)) + _tap(xf[pb + i], xs, fzp)) + _tap(xf[pc + i], xs, fzp)) \
                + _tap(xf[pe + i], xs, fzp)


@kernel(nogil=True, inline="always", boundscheck=False, error_model="numpy")
def _finish(src, xf, pa, pb, pc, pe, rest, of, q, quantize, d, xs, fzp, ys, yzp, qmin, qmax):
    """``src`` plus the window's last ``rest`` (1 to 4) taps, quantized into ``of[q:q + C]`` by
    ``quantize`` (:func:`_quantize`, or :func:`_quantize_pow2` with ``d`` the inverse of the
    divisor), which numba compiles in: a divisor-kind test inside the loops kept them from
    vectorising. One loop per tap count."""
    n = _U(src.shape[0])
    if rest == 4:
        for i in range(n):
            s = (((src[i] + _tap(xf[pa + i], xs, fzp)) + _tap(xf[pb + i], xs, fzp)) + _tap(xf[pc + i], xs, fzp)) \
                + _tap(xf[pe + i], xs, fzp)
            of[q + i] = quantize(s, d, ys, yzp, qmin, qmax)
    elif rest == 3:
        for i in range(n):
            s = ((src[i] + _tap(xf[pa + i], xs, fzp)) + _tap(xf[pb + i], xs, fzp)) + _tap(xf[pc + i], xs, fzp)
            of[q + i] = quantize(s, d, ys, yzp, qmin, qmax)
    elif rest == 2:
        for i in range(n):
            s = (src[i] + _tap(xf[pa + i], xs, fzp)) + _tap(xf[pb + i], xs, fzp)
            of[q + i] = quantize(s, d, ys, yzp, qmin, qmax)
    else:
        for i in range(n):
            of[q + i] = quantize(src[i] + _tap(xf[pa + i], xs, fzp), d, ys, yzp, qmin, qmax)


@kernel(entry=True, nogil=True, boundscheck=False, error_model="numpy")
def pool_nxc(x, out, lo, hi, row_ptr, row_idx, first, count, div, geo, fq, iq):
    """Output positions ``lo <= item < hi`` (item = (n * R_out + row) * OW + column): one window
    at a time, every channel at once (vectorised over the contiguous channels)."""
    rows_in, width, channels = x.shape[1], x.shape[2], x.shape[3]
    rows_out, ow = out.shape[1], out.shape[2]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    xs, ys = fq[0], fq[1]
    fzp = np.float32(iq[0])  # x - x_zp is exact in float32 (|x - x_zp| <= 255)
    yzp, qmin, qmax = np.float32(iq[1]), np.float32(iq[2]), np.float32(iq[3])
    pow2 = geo[6] != 0
    most_rows = 1
    for r in range(rows_out):
        most_rows = max(most_rows, row_ptr[r + 1] - row_ptr[r])
    taps = np.zeros(most_rows * max(1, geo[3]), _U)  # a window's tap offsets; geo[3]: the last kernel
    acc = np.empty(channels, np.float32)
    negzero = np.full(channels, np.float32(-0.0))
    item = lo
    while item < hi:  # one output row at a time
        nr = item // ow
        o0 = item - nr * ow
        o1 = min(ow, o0 + hi - item)
        n = nr // rows_out
        r = nr - n * rows_out
        for o in range(o0, o1):
            k = 0  # the taps in row-major order
            for t in range(row_ptr[r], row_ptr[r + 1]):
                row = (n * rows_in + row_idx[t]) * width
                for w in range(first[o], first[o] + count[o]):
                    taps[k] = _U((row + w) * channels)
                    k += 1
            q = _U((nr * ow + o) * channels)
            d = div[r * ow + o]
            if k == 0:  # a window without taps (onnxruntime's geometry may not make one): 0 / divisor
                for i in range(channels):
                    of[q + _U(i)] = _quantize_pow2(np.float32(0.0), d, ys, yzp, qmin, qmax) if pow2 else \
                        _quantize(np.float32(0.0), d, ys, yzp, qmin, qmax)
                continue
            g = 0
            while k - g > 4:
                _sum_four(acc, g == 0, xf, taps[g], taps[g + 1], taps[g + 2], taps[g + 3], xs, fzp)
                g += 4
            last = k - 1  # taps beyond the window's last are never read (``rest`` says how many count)
            src = negzero if g == 0 else acc
            pa, pb, pc, pe = taps[g], taps[min(g + 1, last)], taps[min(g + 2, last)], taps[min(g + 3, last)]
            if pow2:
                _finish(src, xf, pa, pb, pc, pe, k - g, of, q, _quantize_pow2, d, xs, fzp, ys, yzp, qmin, qmax)
            else:
                _finish(src, xf, pa, pb, pc, pe, k - g, of, q, _quantize, d, xs, fzp, ys, yzp, qmin, qmax)
        item += o1 - o0


# ---------------------------------------------------------------------------------------------
# integer global path: fq = [scale, qmin - y_zp, qmax - y_zp] (float32), iq = [-x_zp * n, y_zp]


@kernel(nogil=True, inline="always", error_model="numpy")
def _requantize(total, bias, scale, lo, hi, yzp):
    """MLAS: ``f = float(int32(total + bias)) * scale`` clamped to [lo, hi], rounded half to even."""
    s = total + bias
    s = ((s + 2147483648) & 4294967295) - 2147483648  # int32 wrap-around, as the SIMD sums do
    f = np.float32(s) * scale
    f = f if f > lo else lo
    f = f if f < hi else hi
    return np.int32(np.rint(f)) + yzp


@kernel(entry=True, nogil=True, boundscheck=False, error_model="numpy")
def global_ncx(x, out, lo, hi, fq, iq):
    """x (P * n,) flat, out (P,): planes ``lo <= p < hi``."""
    n = x.shape[0] // out.shape[0]
    sums = np.empty(hi - lo, np.int64)
    for p in range(lo, hi):
        total = 0
        row = x[p * n:(p + 1) * n]
        for i in range(n):
            total += np.int32(row[i])
        sums[p - lo] = total
    part = out[lo:hi]
    scale, flo, fhi, bias, yzp = fq[0], fq[1], fq[2], iq[0], iq[1]
    for i in range(hi - lo):
        part[i] = _requantize(sums[i], bias, scale, flo, fhi, yzp)


@kernel(entry=True, nogil=True, boundscheck=False, error_model="numpy")
def global_nxc(x, out, lo, hi, fq, iq):
    """x (N, n, C), out (N, C): batches ``lo <= b < hi``. Sums of up to 128 rows fit int16
    (|x| <= 255), which packs twice as many lanes per vector as int32."""
    n = x.shape[1]
    channels = x.shape[2]
    scale, flo, fhi, bias, yzp = fq[0], fq[1], fq[2], iq[0], iq[1]
    part = np.empty(channels, np.int16)
    total = np.empty(channels, np.int32)  # int32 lanes wrap around exactly as MLAS's do
    for b in range(lo, hi):
        total[:] = np.int32(bias)
        start = 0
        while start < n:
            stop = min(n, start + 128)
            part[:] = 0
            for i in range(start, stop):
                row = x[b, i]
                for c in range(channels):
                    part[c] = np.int16(part[c] + row[c])
            for c in range(channels):
                total[c] = np.int32(total[c] + part[c])
            start = stop
        orow = out[b]
        for c in range(channels):
            f = np.float32(total[c]) * scale
            f = f if f > flo else flo
            f = f if f < fhi else fhi
            orow[c] = np.int32(np.rint(f)) + yzp
