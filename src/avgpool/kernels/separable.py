"""Compiled separable average pooling: one 1-D pass per spatial axis, float64 accumulation.

The input is seen as slabs: ``x2[b]`` is one slab ``L1 x ... x Ln x C`` flattened (for NCX,
b runs over N*C and C is 1; for NXC, b runs over N and C is the channel count). Within a slab the
passes run in cache-sized scratch buffers, so memory is touched about once per call.

Each pass sums the valid taps of every window either directly (cost ``k`` per output, best for
small kernels and large strides) or from block partial sums (cost flat in ``k``): the taps of
one residue class modulo the dilation are split into blocks of ``k``; a window spans at most two
blocks, so its sum is a suffix sum of one block plus a prefix sum of the next. Unlike a running
sum, every partial sum holds only taps of the window it serves, so a NaN, an Inf or the rounding
error of a huge value reaches only windows that contain it
(tests/test_properties.py::test_huge_value_leaves_no_error_in_other_windows).

Compiling costs about a second per dtype pair, so it happens lazily on first use and is cached
on disk (``cache=True``). Kernels validate nothing: the engine hands them consistent tables.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_JIT = dict(cache=True, nogil=True, error_model="numpy", boundscheck=None)


@njit(**_JIT)
def _direct_pass(src, s_base, dst, d_base, outer, length, n_out, inner, first, count, div, dil, acc):
    for a in range(outer):
        s0 = s_base + a * length * inner
        d0 = d_base + a * n_out * inner
        if inner == 1:
            for o in range(n_out):
                total = 0.0
                position = s0 + first[o]
                for _ in range(count[o]):
                    total += src[position]
                    position += dil
                dst[d0 + o] = total / div[o]
        else:
            for o in range(n_out):
                for i in range(inner):
                    acc[i] = 0.0
                row = s0 + first[o] * inner
                for _ in range(count[o]):
                    for i in range(inner):
                        acc[i] += src[row + i]
                    row += dil * inner
                out = d0 + o * inner
                d = div[o]
                for i in range(inner):
                    dst[out + i] = acc[i] / d


@njit(**_JIT)
def _block_pass(src, s_base, dst, d_base, outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix):
    for a in range(outer):
        s0 = s_base + a * length * inner
        d0 = d_base + a * n_out * inner
        # partial sums within blocks of `block` taps of each residue class modulo the dilation
        for r in range(min(dil, length)):
            taps = (length - r + dil - 1) // dil
            for q in range(taps):
                p = (r + q * dil) * inner
                if q % block == 0:
                    for i in range(inner):
                        prefix[p + i] = src[s0 + p + i]
                else:
                    back = p - dil * inner
                    for i in range(inner):
                        prefix[p + i] = prefix[back + i] + src[s0 + p + i]
            for q in range(taps - 1, -1, -1):
                p = (r + q * dil) * inner
                if q % block == block - 1 or q == taps - 1:
                    for i in range(inner):
                        suffix[p + i] = src[s0 + p + i]
                else:
                    ahead = p + dil * inner
                    for i in range(inner):
                        suffix[p + i] = suffix[ahead + i] + src[s0 + p + i]
        for o in range(n_out):
            out = d0 + o * inner
            d = div[o]
            c = count[o]
            if c == 0:
                for i in range(inner):
                    dst[out + i] = 0.0 / d
                continue
            f = first[o]
            last = f + (c - 1) * dil
            qf = f // dil
            fp, lp = f * inner, last * inner
            if qf // block != (last // dil) // block:
                for i in range(inner):
                    dst[out + i] = (suffix[fp + i] + prefix[lp + i]) / d
            elif qf % block == 0:  # starts a block: a prefix sum
                for i in range(inner):
                    dst[out + i] = prefix[lp + i] / d
            else:  # clipped at the end of the input: a suffix sum
                for i in range(inner):
                    dst[out + i] = suffix[fp + i] / d


@njit(**_JIT)
def _one_pass(src, dst, outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix, acc):
    if block > 0:
        _block_pass(src, 0, dst, 0, outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix)
    else:
        _direct_pass(src, 0, dst, 0, outer, length, n_out, inner, first, count, div, dil, acc)


@njit(**_JIT)
def _pool_slabs(x2, out2, start, stop, lengths, outs, offsets, firsts, counts, divs, dils, blocks, channels, scratch):
    """Pool slabs ``start..stop``; ``scratch`` holds two ping-pong buffers, prefix, suffix, acc.

    Pass ``axis`` reads the input (first pass) or the buffer the previous pass wrote, and writes
    the output (last pass) or the other buffer; the four cases are spelled out because numba
    types each variable once (input, buffers and output may have three different dtypes).
    """
    ndim = lengths.shape[0]
    size = scratch.shape[0] // 5
    ping = scratch[0:size]
    pong = scratch[size:2 * size]
    prefix = scratch[2 * size:3 * size]
    suffix = scratch[3 * size:4 * size]
    acc = scratch[4 * size:5 * size]
    for b in range(start, stop):
        for axis in range(ndim):
            outer = 1
            for i in range(axis):
                outer *= outs[i]
            inner = channels
            for i in range(axis + 1, ndim):
                inner *= lengths[i]
            lo, hi = offsets[axis], offsets[axis + 1]
            first, count, div = firsts[lo:hi], counts[lo:hi], divs[lo:hi]
            length, n_out, dil, block = lengths[axis], outs[axis], dils[axis], blocks[axis]
            previous = pong if axis % 2 == 0 else ping
            following = ping if axis % 2 == 0 else pong
            if axis == 0 and ndim == 1:
                _one_pass(x2[b], out2[b], outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix, acc)
            elif axis == 0:
                _one_pass(x2[b], following, outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix, acc)
            elif axis == ndim - 1:
                _one_pass(previous, out2[b], outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix, acc)
            else:
                _one_pass(previous, following, outer, length, n_out, inner, first, count, div, dil, block, prefix, suffix, acc)


@njit(**_JIT)
def pool_serial(x2, out2, lengths, outs, offsets, firsts, counts, divs, dils, blocks, channels, scratch_size):
    scratch = np.empty(5 * scratch_size)
    _pool_slabs(x2, out2, 0, x2.shape[0], lengths, outs, offsets, firsts, counts, divs, dils, blocks, channels, scratch)


@njit(parallel=True, **_JIT)
def pool_parallel(x2, out2, lengths, outs, offsets, firsts, counts, divs, dils, blocks, channels, scratch_size, chunks):
    slabs = x2.shape[0]
    for chunk in prange(chunks):
        scratch = np.empty(5 * scratch_size)
        _pool_slabs(x2, out2, chunk * slabs // chunks, (chunk + 1) * slabs // chunks, lengths, outs, offsets, firsts,
                    counts, divs, dils, blocks, channels, scratch)
