"""Shared test helpers: comparison with the float64 reference, edge arrays."""

from __future__ import annotations

import ml_dtypes
import numpy as np

FLOAT_DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16)]


def ulp(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at each value (float64 array)."""
    finfo = ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)
    magnitude = np.abs(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(exponent, finfo.minexp)
    return np.exp2(exponent - finfo.nmant)


def assert_close_to_exact(got: np.ndarray, exact: np.ndarray, abs_average: np.ndarray, taps: int, context: str = "") -> None:
    """``got`` (any float dtype) against the exact average ``exact`` (float64).

    Allowed: one ulp of the output dtype (the final rounding) plus what a float64 accumulation
    can lose, ``taps * 2**-52 * mean(|x|)`` of the window (semantics 1.4). NaN and +-Inf must sit
    at exactly the same places.
    """
    assert got.shape == exact.shape, f"shape {got.shape} != reference {exact.shape} {context}"
    got64 = got.astype(np.float64)
    nan_got, nan_ref = np.isnan(got64), np.isnan(exact)
    assert np.array_equal(nan_got, nan_ref), f"NaN at different places {context}\n got {got64}\n ref {exact}"
    inf_ref = np.isinf(exact)
    # an exact average beyond the dtype's range cannot occur (|mean| <= max |x|), so Inf is exact
    assert np.array_equal(np.isinf(got64), inf_ref), f"Inf at different places {context}\n got {got64}\n ref {exact}"
    assert np.array_equal(got64[inf_ref], exact[inf_ref]), f"Inf signs differ {context}"
    finite = ~(nan_ref | inf_ref)
    with np.errstate(invalid="ignore", over="ignore"):
        tolerance = ulp(exact, got.dtype) + 2.0 * taps * 2.0**-52 * abs_average
        bad = finite & ~(np.abs(got64 - exact) <= tolerance)
    assert not bad.any(), (
        f"{int(bad.sum())} values off {context}\n got {got64[bad][:5]}\n ref {exact[bad][:5]}\n tol {tolerance[bad][:5]}")
