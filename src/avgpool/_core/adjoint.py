"""The exact adjoint of a pool in float64: each input position receives the sum of
``grad / divisor`` over the windows that hold it, within half an ulp of the exact value plus
what double-double sums lose (about ``taps * 2**-104`` of the sum of the terms' magnitudes).

The compiled kernels sum float64 in float64, one rounding per add: right for float32 and the
16-bit formats (their terms are exact in float64, the sum rounded once), but a float64 gradient
whose terms cancel lost up to 108 ulp that way (tests/test_torch.py
test_float64_gradients_within_one_ulp). Here every quotient is a double-double (the rounded
quotient and its exact remainder, by Dekker's product: numpy has no fma) and the terms are
summed with TwoSum, vectorised over the input: one gather per window offset, ``prod(ceil(k / s))``
of them. Nothing is compiled: this is plain numpy, for float64 gradients only.
"""

from __future__ import annotations

import itertools

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
        p = q * divisor
        remainder = (grad - p) - _two_product_error(q, np.broadcast_to(divisor, q.shape), p)
        rest = remainder / divisor
    return q, np.where(np.isfinite(rest) & np.isfinite(q), rest, 0.0)


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
    divisor = np.ones((), np.float64)
    for factors in window_divisors:
        divisor = np.multiply.outer(divisor, np.asarray(factors, np.float64))
    shape = [1] * grad.ndim
    for axis, length in zip(spatial_axes, divisor.shape):
        shape[axis] = length
    q, rest = _quotients(grad, divisor.reshape(shape))
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
