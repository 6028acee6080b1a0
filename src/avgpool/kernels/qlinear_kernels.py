"""numba kernels for QLinearAveragePool (uint8/int8), bit-exact with onnxruntime's CPU kernel.

They take arrays and integers and validate nothing. Compiled on first use and cached on disk.

The spatial axes are folded into two: "rows" (every spatial axis but the last, flattened) and the
last axis. An output row's window is a list of input rows (``row_ptr``/``row_idx``, in row-major
order) times a range of the last axis (``first``/``count``), so the taps of every window are visited
in onnxruntime's row-major order and its float32 sums are reproduced bit for bit.

General path, per output value (onnxruntime ``QLinearPool*Task``):
    ``acc = 0f; acc += x_scale * float(int(x) - x_zp)`` over the taps in row-major order,
    ``q = rint(acc / float(divisor) / y_scale + float(y_zp))`` in float32, clamped to [qmin, qmax].
Global path (MLAS ``MlasQLinearGlobalAveragePool``):
    ``S = int32(sum(x) - x_zp * n)``, ``f = float(S) * scale`` clamped to
    ``[qmin - y_zp, qmax - y_zp]``, ``q = rint(f) + y_zp``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# ---------------------------------------------------------------------------------------------
# general (float) path, channels first: x (P, R_in, W), out (P, R_out, OW), P = N * C


@njit(cache=True, nogil=True, boundscheck=False)
def _ncx_rows(x, out, lo, hi, row_ptr, row_idx, first, count, div, full_lo, full_hi, kernel, stride, pad,
              xs, xzp, ys, yzp, qmin, qmax):
    """Output rows ``lo <= item < hi`` (item = plane * R_out + row)."""
    width = x.shape[2]
    rows_out = out.shape[1]
    ow = out.shape[2]
    acc = np.empty(ow, np.float32)
    frow = np.empty(width, np.float32)
    for item in range(lo, hi):
        p = item // rows_out
        r = item - p * rows_out
        for o in range(ow):
            acc[o] = np.float32(0.0)
        for t in range(row_ptr[r], row_ptr[r + 1]):
            xrow = x[p, row_idx[t]]
            for w in range(width):
                frow[w] = xs * np.float32(np.int32(xrow[w]) - xzp)
            # windows lying wholly inside the row: tap-major, vectorised over the outputs
            for j in range(kernel):
                base = j - pad
                for o in range(full_lo, full_hi):
                    acc[o] += frow[o * stride + base]
            # clipped windows at both ends
            for o in range(full_lo):
                a = acc[o]
                for i in range(first[o], first[o] + count[o]):
                    a += frow[i]
                acc[o] = a
            for o in range(full_hi, ow):
                a = acc[o]
                for i in range(first[o], first[o] + count[o]):
                    a += frow[i]
                acc[o] = a
        drow = div[r]
        orow = out[p, r]
        for o in range(ow):
            q = acc[o] / drow[o] / ys + yzp
            if not q >= qmin:  # also NaN
                q = qmin
            elif q > qmax:
                q = qmax
            orow[o] = np.int32(np.rint(q))


@njit(cache=True, nogil=True, parallel=True)
def _ncx_rows_parallel(x, out, chunks, row_ptr, row_idx, first, count, div, full_lo, full_hi, kernel, stride,
                       pad, xs, xzp, ys, yzp, qmin, qmax):
    total = out.shape[0] * out.shape[1]
    for c in prange(chunks):
        _ncx_rows(x, out, total * c // chunks, total * (c + 1) // chunks, row_ptr, row_idx, first, count, div,
                  full_lo, full_hi, kernel, stride, pad, xs, xzp, ys, yzp, qmin, qmax)


def pool_ncx(x, out, chunks, row_ptr, row_idx, first, count, div, full_lo, full_hi, kernel, stride, pad,
             xs, xzp, ys, yzp, qmin, qmax):
    """General path, channels first; ``chunks`` > 1 runs that many pieces on numba threads."""
    if chunks > 1:
        _ncx_rows_parallel(x, out, chunks, row_ptr, row_idx, first, count, div, full_lo, full_hi, kernel, stride,
                           pad, xs, xzp, ys, yzp, qmin, qmax)
    else:
        _ncx_rows(x, out, 0, out.shape[0] * out.shape[1], row_ptr, row_idx, first, count, div, full_lo, full_hi,
                  kernel, stride, pad, xs, xzp, ys, yzp, qmin, qmax)


# ---------------------------------------------------------------------------------------------
# general (float) path, channels last: x (N, R_in, W, C), out (N, R_out, OW, C)


@njit(cache=True, nogil=True, boundscheck=False)
def _nxc_points(x, out, lo, hi, row_ptr, row_idx, first, count, div, xs, xzp, ys, yzp, qmin, qmax):
    """Output positions ``lo <= item < hi`` (item = (n * R_out + row) * OW + column)."""
    rows_out = out.shape[1]
    ow = out.shape[2]
    channels = out.shape[3]
    acc = np.empty(channels, np.float32)
    for item in range(lo, hi):
        nr = item // ow
        o = item - nr * ow
        n = nr // rows_out
        r = nr - n * rows_out
        for c in range(channels):
            acc[c] = np.float32(0.0)
        for t in range(row_ptr[r], row_ptr[r + 1]):
            xrow = x[n, row_idx[t]]
            for w in range(first[o], first[o] + count[o]):
                xv = xrow[w]
                for c in range(channels):
                    acc[c] += xs * np.float32(np.int32(xv[c]) - xzp)
        d = div[r, o]
        orow = out[n, r, o]
        for c in range(channels):
            q = acc[c] / d / ys + yzp
            if not q >= qmin:  # also NaN
                q = qmin
            elif q > qmax:
                q = qmax
            orow[c] = np.int32(np.rint(q))


@njit(cache=True, nogil=True, parallel=True)
def _nxc_points_parallel(x, out, chunks, row_ptr, row_idx, first, count, div, xs, xzp, ys, yzp, qmin, qmax):
    total = out.shape[0] * out.shape[1] * out.shape[2]
    for c in prange(chunks):
        _nxc_points(x, out, total * c // chunks, total * (c + 1) // chunks, row_ptr, row_idx, first, count, div,
                    xs, xzp, ys, yzp, qmin, qmax)


def pool_nxc(x, out, chunks, row_ptr, row_idx, first, count, div, xs, xzp, ys, yzp, qmin, qmax):
    """General path, channels last; ``chunks`` > 1 runs that many pieces on numba threads."""
    if chunks > 1:
        _nxc_points_parallel(x, out, chunks, row_ptr, row_idx, first, count, div, xs, xzp, ys, yzp, qmin, qmax)
    else:
        _nxc_points(x, out, 0, out.shape[0] * out.shape[1] * out.shape[2], row_ptr, row_idx, first, count, div,
                    xs, xzp, ys, yzp, qmin, qmax)


# ---------------------------------------------------------------------------------------------
# integer global path


@njit(cache=True, nogil=True)
def _requantize(total, bias, scale, lo, hi, yzp):
    s = total + bias
    s = ((s + 2147483648) & 4294967295) - 2147483648  # int32 wrap-around, as the SIMD sums do
    f = np.float32(s) * scale
    if not f >= lo:
        f = lo
    elif f > hi:
        f = hi
    return np.int32(np.rint(f)) + yzp


@njit(cache=True, nogil=True, boundscheck=False)
def _global_ncx(x, out, lo, hi, bias, scale, flo, fhi, yzp):
    """x (P, n), out (P,): planes ``lo <= p < hi``."""
    n = x.shape[1]
    for p in range(lo, hi):
        total = 0
        row = x[p]
        for i in range(n):
            total += row[i]
        out[p] = _requantize(total, bias, scale, flo, fhi, yzp)


@njit(cache=True, nogil=True, parallel=True)
def _global_ncx_parallel(x, out, chunks, bias, scale, flo, fhi, yzp):
    total = x.shape[0]
    for c in prange(chunks):
        _global_ncx(x, out, total * c // chunks, total * (c + 1) // chunks, bias, scale, flo, fhi, yzp)


def global_ncx(x, out, chunks, bias, scale, flo, fhi, yzp):
    """Integer global path, channels first: x (N * C, n) -> out (N * C,)."""
    if chunks > 1:
        _global_ncx_parallel(x, out, chunks, bias, scale, flo, fhi, yzp)
    else:
        _global_ncx(x, out, 0, x.shape[0], bias, scale, flo, fhi, yzp)


@njit(cache=True, nogil=True, boundscheck=False)
def _global_nxc(x, out, lo, hi, bias, scale, flo, fhi, yzp):
    """x (N, n, C), out (N, C): batches ``lo <= b < hi``."""
    n = x.shape[1]
    channels = x.shape[2]
    acc = np.empty(channels, np.int64)
    for b in range(lo, hi):
        for c in range(channels):
            acc[c] = 0
        for i in range(n):
            row = x[b, i]
            for c in range(channels):
                acc[c] += row[c]
        orow = out[b]
        for c in range(channels):
            orow[c] = _requantize(acc[c], bias, scale, flo, fhi, yzp)


@njit(cache=True, nogil=True, parallel=True)
def _global_nxc_parallel(x, out, chunks, bias, scale, flo, fhi, yzp):
    total = x.shape[0]
    for c in prange(chunks):
        _global_nxc(x, out, total * c // chunks, total * (c + 1) // chunks, bias, scale, flo, fhi, yzp)


def global_nxc(x, out, chunks, bias, scale, flo, fhi, yzp):
    """Integer global path, channels last: x (N, n, C) -> out (N, C)."""
    if chunks > 1:
        _global_nxc_parallel(x, out, chunks, bias, scale, flo, fhi, yzp)
    else:
        _global_nxc(x, out, 0, x.shape[0], bias, scale, flo, fhi, yzp)
