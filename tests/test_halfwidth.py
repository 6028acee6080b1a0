"""float16/bfloat16 conversion inside the kernels: float64 narrowed with one rounding (against an exact
reference built from the formats' bits, not from a library's cast), widening exact."""

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


#: The largest finite pattern of each format (sign bit clear); the next one up is infinity.
_MAX_FINITE = {np.dtype(np.float16): 0x7BFF, np.dtype(ml_dtypes.bfloat16): 0x7F7F}


def _pattern_values(dtype: np.dtype) -> np.ndarray:
    """The float64 value of every non-negative finite pattern, and of the infinity after them
    (as the power of two it rounds from), read from the bits: no library cast involved."""
    bits = np.arange(_MAX_FINITE[dtype] + 2, dtype=np.uint64)
    if dtype == np.float16:  # 1 sign, 5 exponent (bias 15), 10 fraction bits
        exponent, fraction, bias, width = bits >> 10, bits & 0x3FF, 15, 10
    else:  # bfloat16: float32's upper half, 8 exponent bits (bias 127), 7 fraction bits
        exponent, fraction, bias, width = bits >> 7, bits & 0x7F, 127, 7
    normal = exponent > 0
    significand = np.where(normal, fraction + (1 << width), fraction).astype(np.float64)
    power = np.where(normal, exponent.astype(np.int64), 1) - bias - width
    return np.ldexp(significand, power)


def _correctly_rounded(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 -> 16-bit patterns rounded once to nearest, ties to even, by comparing each value
    with the exact midpoints between neighbouring patterns (a midpoint has one bit more than the
    16-bit format holds, so float64 represents it exactly and every comparison is exact)."""
    table = _pattern_values(dtype)
    magnitude = np.abs(values)
    low = np.clip(np.searchsorted(table, magnitude, side="right") - 1, 0, table.size - 2)
    middle = (table[low] + table[low + 1]) / 2
    up = (magnitude > middle) | ((magnitude == middle) & (low % 2 == 1))
    pattern = (low + up).astype(np.uint16)  # the pattern after the largest finite one is infinity
    return pattern | np.where(np.signbit(values), np.uint16(0x8000), np.uint16(0))


def test_the_reference_reads_the_formats_patterns():
    """The reference's table is every finite pattern's value (widening is exact in every library)."""
    for dtype in FORMATS:
        table = _pattern_values(dtype)
        patterns = np.arange(table.size - 1, dtype=np.uint16).view(dtype)
        assert np.array_equal(table[:-1], patterns.astype(np.float64))
        assert table[-1] == 2.0 ** (16 if dtype == np.float16 else 128)


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        # just above the tie between 1.0 and 1.0078125: one rounding gives the nearer neighbour,
        # two (to float32 first, which makes it the tie, then to even) would give 1.0
        (1.00390625 + 2.0**-40, 0x3F81),
        (1.00390625, 0x3F80),  # the tie itself: to even
        (-(1.00390625 + 2.0**-40), 0xBF81),
        (3.3961775e38, 0x7F7F),  # below the midpoint to 2**128: the largest finite
        (2.0**128 - 2.0**119, 0x7F80),  # the midpoint to 2**128, whose even side is infinity
    ],
)
def test_bfloat16_narrowing_rounds_once(value, pattern):
    """avgpool rounds a float64 average once to bfloat16 (docs/semantics.md, one rounding): the
    kernels do not go through float32, which would round twice."""
    got = np.empty(1, np.uint16)
    halfwidth.narrow(np.array([value]), got, 0, True)
    assert got[0] == pattern
    assert _correctly_rounded(np.array([value]), np.dtype(ml_dtypes.bfloat16))[0] == pattern


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
