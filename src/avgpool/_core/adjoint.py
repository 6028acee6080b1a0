"""The exact adjoint of a pool in float64: each input position receives the sum of
``grad / divisor`` over the windows that hold it, within half an ulp of the exact value plus
what double-double sums lose.

The compiled kernels sum float64 in float64, one rounding per add: right for float32 and the
16-bit formats (their terms are far more precise than their ulp, the sum rounded once), but a
float64 gradient whose terms cancel lost up to 16245 ulp that way (tests/test_torch.py
test_float64_gradients_within_one_ulp). Every quotient is taken as a double-double (the rounded
quotient and its exact remainder: numpy has no fma). :func:`split_adjoint` then uses the
kernels' own float64 adjoint pool on parts whose sums are exact (ExtractVector), and
:func:`exact_adjoint`, its twin and fallback, sums with TwoSum in numpy, one gather per window
offset (``prod(ceil(k / s))`` of them). Nothing is compiled here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from .adaptive import AxisWindows

_SPLIT = 2.0**27 + 1.0  # Dekker's splitter for float64's 53-bit significand


def _two_product_error(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``a * b - p`` exactly, where ``p`` is ``a * b`` rounded (Dekker's TwoProduct)."""
    ca, cb = _SPLIT * a, _SPLIT * b
    a_hi, b_hi = ca - (ca - a), cb - (cb - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def _quotients(grad: np.ndarray, divisor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``grad / divisor`` as (rounded quotient, the rest of the exact quotient, rounded): the
    remainder ``grad - q * divisor`` is exact (a float64 number), so ``q + rest`` is within
    2**-106 of the exact quotient. Non-finite quotients get no rest."""
    with np.errstate(all="ignore"):
        q = grad / divisor
        if np.max(np.abs(divisor), initial=0.0) < 2.0**26:
            # the divisors (tap counts) have at most 26 bits: q's 26-bit halves times one are
            # exact, and so is the remainder from them (6 operations rather than 15)
            c = _SPLIT * q
            q_high = c - (c - q)
            remainder = (grad - q_high * divisor) - (q - q_high) * divisor
        else:
            p = q * divisor
            remainder = (grad - p) - _two_product_error(q, np.broadcast_to(divisor, q.shape), p)
        rest = remainder / divisor
    if np.isfinite(rest).all():
        return q, rest
    return q, np.where(np.isfinite(rest) & np.isfinite(q), rest, 0.0)


def _window_divisors(
    grad: np.ndarray, window_divisors: tuple[np.ndarray, ...], spatial_axes: tuple[int, ...]
) -> np.ndarray:
    """Each output's divisor (the product of its window's factors per axis), shaped to divide
    ``grad``."""
    divisor = np.ones((), np.float64)
    for factors in window_divisors:
        divisor = np.multiply.outer(divisor, np.asarray(factors, np.float64))
    shape = [1] * grad.ndim
    for axis, length in zip(spatial_axes, divisor.shape):
        shape[axis] = length
    return divisor.reshape(shape)


def exact_adjoint(
    grad: np.ndarray,
    adjoint_axes: tuple[AxisWindows, ...],
    window_divisors: tuple[np.ndarray, ...],
    spatial_axes: tuple[int, ...],
) -> np.ndarray:
    """The adjoint of a pool on the float64 ``grad`` (the forward output's shape):
    ``adjoint_axes`` are each input position's windows per axis (:func:`.adaptive.adjoint_axis`:
    first window and count), ``window_divisors`` each window's divisor factor per axis (a
    window's divisor is their product). Returns an array of the input's shape, C-contiguous."""
    divisor = _window_divisors(grad, window_divisors, spatial_axes)
    q, rest = _quotients(grad, divisor)
    in_shape = list(grad.shape)
    for axis, windows in zip(spatial_axes, adjoint_axes):
        in_shape[axis] = windows.out  # the adjoint's outputs are the input's positions
    total = np.zeros(in_shape)
    low = np.zeros(in_shape)
    if total.size == 0 or q.size == 0:
        return total
    offsets = [range(max(w.count, default=0)) for w in adjoint_axes]
    first = [np.asarray(w.first, np.intp) for w in adjoint_axes]
    count = [np.asarray(w.count, np.intp) for w in adjoint_axes]
    with np.errstate(all="ignore"):
        for offset in itertools.product(*offsets):
            term_q, term_rest, inside = q, rest, None
            for axis, j, lo, n in zip(spatial_axes, offset, first, count):
                index = np.minimum(lo + j, q.shape[axis] - 1)
                term_q = np.take(term_q, index, axis=axis)
                term_rest = np.take(term_rest, index, axis=axis)
                mask_shape = [1] * grad.ndim
                mask_shape[axis] = index.size
                axis_inside = (n > j).reshape(mask_shape)
                inside = axis_inside if inside is None else inside & axis_inside
            term_q = np.where(inside, term_q, 0.0)
            term_rest = np.where(inside, term_rest, 0.0)
            # TwoSum: total + term_q = new total + its exact error, kept in low
            new_total = total + term_q
            virtual = new_total - total
            error = (total - (new_total - virtual)) + (term_q - virtual)
            low += error + term_rest
            total = new_total
        result = total + low
    # Inf and NaN: the plain sum's (its TwoSum errors are NaN), as the windows' quotients give it
    return np.ascontiguousarray(np.where(np.isfinite(total), result, total))


def _extract(values: np.ndarray, terms: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``values`` as ``high + low`` exactly, where ``high`` is a multiple of one power of two
    (the unit) and any ``terms`` of them, and every partial sum, are float64 numbers: sums of
    ``high`` are exact in any order (Rump, Ogita and Oishi's ExtractVector). Returns (high,
    low, the unit), or None where the power of two would leave float64's range."""
    largest = float(np.max(np.abs(values), initial=0.0))
    if largest == 0.0:
        return np.zeros_like(values), values, 0.0
    exponent = math.frexp(largest)[1] + math.ceil(math.log2(terms + 2)) + 1
    if not -1000 < exponent < 1000:
        return None
    sigma = math.ldexp(1.0, exponent)
    high = (sigma + values) - sigma
    return high, values - high, math.ldexp(1.0, exponent - 52)


def split_adjoint(
    grad: np.ndarray,
    pool_sum: Callable[[np.ndarray], np.ndarray],
    window_divisors: tuple[np.ndarray, ...],
    spatial_axes: tuple[int, ...],
    terms: int,
) -> np.ndarray | None:
    """:func:`exact_adjoint` by the compiled float64 adjoint pool ``pool_sum`` (each input
    position's sum over its windows, divisor 1), which sums exactly what :func:`_extract` makes
    summable exactly: the quotients' two high parts are summed exactly, the rest (below 2**-100
    of the largest quotient) and the quotients' remainders (2**-53 of each) with float64's
    error, all four added as a double-double and rounded once. None where that error could
    reach 2**-20 ulp of a result, or a scale leaves float64's range: then :func:`exact_adjoint`.
    ``terms``: the most windows holding one position."""
    divisor = _window_divisors(grad, window_divisors, spatial_axes)
    q, rest = _quotients(grad, divisor)
    finite = np.isfinite(q)
    every_finite = bool(finite.all())
    if not every_finite:
        q = np.where(finite, q, 0.0)
    first = _extract(q, terms)
    if first is None:
        return None
    high1, low1, _ = first
    second = _extract(low1, terms)
    if second is None:
        return None
    high2, low2, unit2 = second
    with np.errstate(all="ignore"):
        s1, s2 = pool_sum(high1), pool_sum(high2)  # exact
        s3, s4 = pool_sum(low2), pool_sum(np.ascontiguousarray(rest))
        total = s1 + s2
        virtual = total - s1
        error = (s1 - (total - virtual)) + (s2 - virtual)
        result = total + (error + (s3 + s4))
        # what s3's float64 sums can lose (|low2| <= unit2 each), against each result's ulp
        bound = terms * terms * 2.0**-52 * unit2
        tiny = np.abs(result) * 2.0**-72 < bound
    if np.any(tiny & (result != 0)) or (bound > 0 and np.any((result == 0) & (s3 != 0))):
        return None
    if not every_finite:
        plain = pool_sum(np.ascontiguousarray(grad / divisor))
        result = np.where(np.isfinite(plain), result, plain)
    return result
