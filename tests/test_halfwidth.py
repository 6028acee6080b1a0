"""float16/bfloat16 conversion inside the kernels: bit-identical to numpy's and ml_dtypes' casts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from avgpool.kernels import halfwidth

FORMATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
EDGES = [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    65504.0,
    65519.99,
    65520.0,
    -65520.0,
    6e-8,
    2.98e-8,
    2.99e-8,
    5.96e-8,
    1e-300,
    3.4e38,
    3.3961775e38,
    3.3961776e38,
    1.0000000001,
    1.00390625,
    1.01171875,
    1.5 * 2.0**-133,
]


def _correctly_rounded(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 -> 16-bit patterns rounded once. numpy's float16 cast does that; ml_dtypes' bfloat16
    cast goes through float32 and rounds twice (1.00390625 + 2**-40 becomes a tie, then 1.0), so
    for bfloat16 the float32 step rounds to odd, which makes the second rounding exact."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == np.float16:
            return values.astype(dtype).view(np.uint16)
        nearest = values.astype(np.float32)
        toward_zero = np.where(
            np.abs(nearest.astype(np.float64)) > np.abs(values), np.nextafter(nearest, np.float32(0)), nearest
        )
        inexact = (toward_zero.astype(np.float64) != values) & np.isfinite(values)
        odd = np.where(inexact, toward_zero.view(np.uint32) | 1, toward_zero.view(np.uint32)).view(np.float32)
        return odd.astype(dtype).view(np.uint16)


def test_ml_dtypes_bfloat16_cast_rounds_twice():
    """Why the kernels do not use the cast: avgpool rounds once (semantics 1.4)."""
    value = np.array([1.00390625 + 2.0**-40])  # just above the tie between 1.0 and 1.0078125
    got = np.empty(1, np.uint16)
    halfwidth.narrow(value, got, 0, True)
    assert got[0] == 0x3F81  # 1.0078125, the nearer neighbour
    assert value.astype(ml_dtypes.bfloat16).view(np.uint16)[0] == 0x3F80


@pytest.mark.parametrize("dtype", FORMATS, ids=["float16", "bfloat16"])
def test_narrow_rounds_float64_once(dtype):
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.standard_normal(200_000) * 10.0 ** rng.integers(-45, 45, 200_000), EDGES])
    # every tie and near-tie of the 16-bit format: midpoints between neighbours, nudged both ways
    with np.errstate(invalid="ignore"):  # casting the NaN patterns
        patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).astype(np.float64)
    finite = patterns[np.isfinite(patterns)]
    finite.sort()
    mids = (finite[:-1] + finite[1:]) / 2
    values = np.concatenate([values, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    got = np.empty(values.size, np.uint16)
    halfwidth.narrow(values, got, 0, dtype != np.float16)
    expected = _correctly_rounded(values, dtype)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan], expected[~nan])
    with np.errstate(invalid="ignore"):
        assert np.isnan(got[nan].view(dtype).astype(np.float32)).all()


@pytest.mark.parametrize("dtype", FORMATS, ids=["float16", "bfloat16"])
def test_widen_is_exact_for_every_pattern(dtype):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(bits.size, np.float32)
    halfwidth.widen(bits, 0, bits.size, dtype != np.float16, got)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(got, bits.view(dtype).astype(np.float32), equal_nan=True)
