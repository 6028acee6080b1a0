"""avgpool.block_mean against an exact reference (Python fractions, rounded once), xarray's
coarsen, numpy's nanmean over reshaped blocks, and itself chunked by dask."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import avgpool
from avgpool import AvgPoolError

BF16 = np.dtype(ml_dtypes.bfloat16)
INTEGERS = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.uint32, np.int64]
FLOATS = [np.float16, np.float32, np.float64, BF16]


def block_ranges(n: int, k: int, boundary: str, side: str) -> list[range]:
    """The input indices of each block along an axis, written from the contract alone."""
    whole, rest = divmod(n, k)
    if side == "left":
        ranges = [range(i * k, (i + 1) * k) for i in range(whole)]
        if rest and boundary == "pad":
            ranges.append(range(whole * k, n))
    else:
        ranges = [range(rest + i * k, rest + (i + 1) * k) for i in range(whole)]
        if rest and boundary == "pad":
            ranges.insert(0, range(0, rest))
    return ranges


def reference(x, block, boundary="exact", side="left", skipna=False, min_count=1, mask=None):
    """(exact means as Fractions, or None for a NaN/missing block, or a float for inf/nan results;
    the blocks' missing flags), by brute force over every block."""
    axes = [block_ranges(n, k, boundary, side) for n, k in zip(x.shape, block)]
    out_shape = tuple(len(a) for a in axes)
    means = np.empty(out_shape, object)
    few = np.zeros(out_shape, bool)
    for index in itertools.product(*(range(len(a)) for a in axes)):
        values = []
        for point in itertools.product(*(axes[axis][i] for axis, i in enumerate(index))):
            if mask is not None and mask[point]:
                continue
            v = x[point]
            if skipna and np.issubdtype(x.dtype, np.floating) and np.isnan(float(v)):
                continue
            values.append(v)
        if len(values) < min_count and (skipna or mask is not None or boundary == "pad"):
            means[index], few[index] = None, True
            continue
        floats = [float(v) for v in values]
        if any(math.isnan(f) or math.isinf(f) for f in floats):
            means[index] = sum(floats) / len(floats)  # nan or +-inf, as a float64 sum gives
        else:
            means[index] = sum(
                Fraction(v) if not isinstance(v, (bool, np.bool_)) else Fraction(int(v)) for v in floats
            ) / len(floats)
    return means, few


def rounded(means, dtype) -> np.ndarray:
    """The reference rounded once to ``dtype`` (integers: half to even)."""
    dtype = np.dtype(dtype)
    out = np.empty(means.shape, dtype)
    for index, m in np.ndenumerate(means):
        if m is None:
            out[index] = np.nan if is_float(dtype) else 0
        elif isinstance(m, float):
            out[index] = m
        elif dtype.kind in "iu":
            q, r = divmod(m.numerator, m.denominator)
            up = 2 * r > m.denominator or (2 * r == m.denominator and q % 2 == 1)
            out[index] = q + up
        else:
            # a Fraction rounded once: via float64's correct rounding for float64 and through the
            # exact neighbours for the narrower formats
            out[index] = _round_fraction(m, dtype)
    return out


def _round_fraction(m: Fraction, dtype: np.dtype):
    """``m`` rounded to nearest (ties to even) in ``dtype``, by exact comparison with the neighbours
    of a candidate (float64 rounding first can round twice)."""
    if dtype == np.float64:
        return float(m)  # Python's Fraction to float rounds correctly
    with np.errstate(over="ignore"):
        candidate = np.array([float(m)], np.float64).astype(dtype)
    if not np.isfinite(candidate.astype(np.float64))[0]:
        return candidate[0]  # beyond the format's range: an infinity, as one rounding gives
    width = np.uint16 if dtype.itemsize == 2 else np.uint32
    bits = int(candidate.view(width)[0])
    options = []
    for delta in (-1, 0, 1):
        value = np.array([(bits + delta) % (1 << (8 * dtype.itemsize))], width).view(dtype)
        if np.isfinite(value.astype(np.float64))[0]:
            options.append((abs(Fraction(float(value[0])) - m), (bits + delta) & 1, value[0]))
    if not options:
        return candidate[0]
    return min(options, key=lambda o: (o[0], o[1]))[2]


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOATS or np.dtype(dtype).kind == "f"  # bfloat16's kind is "V"


def random_array(rng, shape, dtype, nan_share=0.0):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
        return rng.integers(low, high, shape, endpoint=True).astype(dtype)
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(dtype)
    if nan_share:
        x[rng.random(shape) < nan_share] = np.nan
    return x


@pytest.mark.parametrize("seed", range(120))
def test_random_configurations_match_the_exact_reference(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(0 if seed % 17 == 0 else 1, 8 if rank < 4 else 5, rank))
    block = tuple(int(k) for k in rng.integers(1, 4, rank))
    boundary = ["exact", "trim", "pad"][seed % 3]
    if boundary == "exact":
        shape = tuple(max(1, n // k) * k for n, k in zip(shape, block))
    side = ["left", "right"][(seed // 3) % 2]
    dtype = (INTEGERS + FLOATS)[seed % len(INTEGERS + FLOATS)]
    nan_share = [0.0, 0.01, 0.5, 1.0][(seed // 2) % 4] if is_float(dtype) else 0.0
    x = random_array(rng, shape, dtype, nan_share)
    skipna = bool(seed % 4 < 2)
    min_count = int(rng.integers(1, 3))
    masked = seed % 5 == 0
    mask = rng.random(shape) < 0.3 if masked else None
    arg = np.ma.MaskedArray(x, mask=mask) if masked else x
    got = avgpool.block_mean(arg, block, boundary=boundary, side=side, skipna=skipna, min_count=min_count)
    means, few = reference(x, block, boundary, side, skipna, min_count, mask)
    out_dtype = np.dtype(dtype) if is_float(dtype) else np.dtype(np.float64)
    expected = rounded(means, out_dtype)
    if masked:
        assert isinstance(got, np.ma.MaskedArray)
        np.testing.assert_array_equal(np.ma.getmaskarray(got), few)
        got = np.ma.getdata(got)
    assert got.dtype == out_dtype and got.shape == expected.shape
    if is_float(dtype):
        # float inputs: float64 sums, within what a float64 sum can lose, then rounded once
        close = np.isclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-12, atol=0, equal_nan=True)
        with np.errstate(invalid="ignore"):
            ulp = np.abs(
                np.spacing(expected.astype(np.float64).astype(np.float32 if out_dtype.itemsize <= 4 else out_dtype))
            )
            if out_dtype.itemsize == 2:
                ulp = ulp * (2.0**13 if out_dtype == np.float16 else 2.0**16)
            one_ulp = np.abs(got.astype(np.float64) - expected.astype(np.float64)) <= ulp.astype(np.float64)
        assert np.all(close | one_ulp), (got, expected)
        np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(expected.astype(np.float64)))
    else:
        np.testing.assert_array_equal(got, expected)  # integers: the exact mean rounded once


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.int32, np.bool_])
@pytest.mark.parametrize("out", [np.float64, np.float32, np.float16, BF16, "input"])
def test_integer_inputs_give_the_exact_mean_rounded_once(dtype, out):
    rng = np.random.default_rng(3)
    x = random_array(rng, (9, 10), dtype)
    out_dtype = np.dtype(dtype) if out == "input" else np.dtype(out)
    if out == "input" and np.dtype(dtype).kind == "b":
        with pytest.raises(AvgPoolError, match="dtype"):
            avgpool.block_mean(x, (3, 2), dtype=out_dtype)
        return
    got = avgpool.block_mean(x, (3, 2), boundary="exact", dtype=out_dtype)
    means, _ = reference(x, (3, 2))
    np.testing.assert_array_equal(got, rounded(means, out_dtype))
    assert got.dtype == out_dtype


def test_rounding_half_to_even_for_integer_outputs():
    x = np.array([1, 2, 2, 3, 3, 4, 250, 251], np.uint8)  # means 1.5, 2.5, 3.5, 250.5
    np.testing.assert_array_equal(avgpool.block_mean(x, 2, dtype=np.uint8), [2, 2, 4, 250])
    y = np.array([-1, -2, -3, -4], np.int16)  # -1.5 -> -2, -3.5 -> -4
    np.testing.assert_array_equal(avgpool.block_mean(y, 2, dtype=np.int16), [-2, -4])


def test_large_integer_sums_stay_exact():
    x = np.array([2**61, 2**61 - 1, 3, 4], np.int64)  # a sum past 2**53: exact, then rounded once
    got = avgpool.block_mean(x, 2)
    assert got[0] == float(Fraction(2**62 - 1, 2)) and got[1] == 3.5
    with pytest.raises(AvgPoolError, match="2\\*\\*63"):
        avgpool.block_mean(np.array([2**62, 2**62, 2**62], np.int64), 3)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("boundary", ["exact", "trim", "pad"])
def test_agrees_with_xarray_coarsen(boundary, side):
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(5)
    x = random_array(rng, (12, 10), np.float64, nan_share=0.1)
    if boundary == "exact":
        x = x[:, :9]
    da = xr.DataArray(x, dims=("y", "x"))
    for skipna in (True, False):
        coarse = da.coarsen(y=3, x=3, boundary=boundary, side=side)
        theirs = coarse.reduce(np.nanmean if skipna else np.mean)
        ours = avgpool.block_mean(x, 3, boundary=boundary, side=side, skipna=skipna)
        if boundary == "pad" and not skipna:
            # coarsen pads with NaN, which its plain mean then propagates; avgpool averages the
            # values present (docs/semantics.md 8): compare the whole blocks
            whole = (slice(0, 4), slice(0, 3) if side == "left" else slice(1, 4))
            np.testing.assert_allclose(ours[whole], theirs.values[whole], rtol=1e-14)
        else:
            np.testing.assert_allclose(ours, theirs.values, rtol=1e-14, equal_nan=True)


def test_agrees_with_nanmean_over_reshaped_blocks():
    rng = np.random.default_rng(6)
    x = random_array(rng, (8, 12, 6), np.float32, nan_share=0.05)
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if np.isnan(x).all() else _nothing():
        theirs = np.nanmean(x.astype(np.float64).reshape(4, 2, 4, 3, 3, 2), axis=(1, 3, 5))
    ours = avgpool.block_mean(x, (2, 3, 2), skipna=True)
    np.testing.assert_allclose(ours, theirs.astype(np.float32), rtol=1e-6, equal_nan=True)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# astropy.nddata.block_reduce(data, block, func) trims a partial block from the end of each axis
# (its docstring; block_reduce: ``data[: nblocks * block]`` per axis), so it is boundary="trim"
# with side="left"; its np.mean of an integer block sums in float64 (exact below 2**53) and divides
# once, so integer inputs agree bit for bit.


def _astropy_case(seed, dtypes):
    rng = np.random.default_rng(700 + seed)
    rank = 1 + seed % 4
    shape = tuple(int(n) for n in rng.integers(1, 12 if rank < 3 else 7, rank))
    block = tuple(int(k) for k in rng.integers(1, 5, rank))
    return rng, shape, block, dtypes[seed % len(dtypes)]


@pytest.mark.parametrize("seed", range(24))
def test_integer_inputs_agree_with_astropy_block_reduce_bit_for_bit(seed):
    nddata = pytest.importorskip("astropy.nddata")
    rng, shape, block, dtype = _astropy_case(seed, [np.uint8, np.uint16, np.int16, np.int32, np.bool_])
    x = random_array(rng, shape, dtype)
    theirs = nddata.block_reduce(x, block, func=np.mean)
    ours = avgpool.block_mean(x, block, boundary="trim")
    assert ours.dtype == theirs.dtype == np.float64
    assert ours.shape == theirs.shape and ours.tobytes() == theirs.tobytes(), (shape, block, dtype)


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("skipna", [False, True])
def test_float_inputs_agree_with_astropy_block_reduce(seed, skipna):
    nddata = pytest.importorskip("astropy.nddata")
    rng, shape, block, dtype = _astropy_case(seed, [np.float64, np.float32])
    x = random_array(rng, shape, dtype, nan_share=[0.0, 0.01, 0.5, 1.0][seed % 4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of an all-NaN block: NaN, and a warning
        # float64 copy: astropy's np.mean of a float32 block sums in float32, which is not a
        # reference for block_mean's float64 sums
        theirs = nddata.block_reduce(x.astype(np.float64), block, func=np.nanmean if skipna else np.mean)
    ours = avgpool.block_mean(x, block, boundary="trim", skipna=skipna)
    assert ours.dtype == x.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    if dtype == np.float32:  # the float64 mean rounded once to float32: equal, or a double rounding
        np.testing.assert_array_max_ulp(ours, theirs.astype(np.float32), maxulp=1)
    else:  # two float64 sums in different orders: within what n additions can lose
        scale = nddata.block_reduce(np.abs(np.nan_to_num(x)), block, func=np.max)
        known = ~np.isnan(theirs)
        assert np.all(np.abs(ours - theirs)[known] <= (4 * math.prod(block) * 2.0**-53 * scale)[known])


def test_masked_inputs_agree_with_astropy_block_reduce():
    nddata = pytest.importorskip("astropy.nddata")
    rng = np.random.default_rng(8)
    x = random_array(rng, (13, 10), np.uint16)
    mask = rng.random(x.shape) < 0.4
    mask[:3, :3] = True  # a block with no value present
    theirs = nddata.block_reduce(np.ma.MaskedArray(x, mask=mask), 3, func=np.mean)  # numpy.ma's mean
    ours = avgpool.block_mean(np.ma.MaskedArray(x, mask=mask), 3, boundary="trim")
    assert isinstance(theirs, np.ma.MaskedArray) and isinstance(ours, np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(ours), np.ma.getmaskarray(theirs))
    assert np.ma.getmaskarray(ours)[0, 0]
    present = ~np.ma.getmaskarray(theirs)
    np.testing.assert_allclose(np.ma.getdata(ours)[present], np.ma.getdata(theirs)[present], rtol=4e-16)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("boundary", ["exact", "trim", "pad"])
def test_dask_gives_the_numpy_bits_whatever_the_chunks(boundary, side):
    dask_array = pytest.importorskip("dask.array")
    rng = np.random.default_rng(7)
    x = random_array(rng, (23, 17, 5), np.float32, nan_share=0.05)
    if boundary == "exact":
        x = x[:21, :15, :4]
    block = (3, 5, 2)
    for skipna in (False, True):
        expected = avgpool.block_mean(x, block, boundary=boundary, side=side, skipna=skipna)
        for chunks in [(4, 6, 5), (7, 3, 2), (23, 17, 5), (1, 1, 1)]:
            lazy = avgpool.block_mean(
                dask_array.from_array(x, chunks=chunks), block, boundary=boundary, side=side, skipna=skipna
            )
            assert isinstance(lazy, dask_array.Array)
            got = lazy.compute()
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes(), (chunks, skipna)
    ints = rng.integers(0, 65536, (20, 14), dtype=np.uint16)
    assert (
        avgpool.block_mean(dask_array.from_array(ints, chunks=(3, 5)), 4, boundary="pad", side=side).compute().tobytes()
        == avgpool.block_mean(ints, 4, boundary="pad", side=side).tobytes()
    )


def test_no_nan_skipna_gives_the_same_bits():
    x = random_array(np.random.default_rng(8), (10, 12), np.float32)
    assert avgpool.block_mean(x, 2, skipna=True).tobytes() == avgpool.block_mean(x, 2).tobytes()


def test_infinities_are_data():
    x = np.array([np.inf, 1.0, np.inf, -np.inf, np.nan, 2.0])
    np.testing.assert_array_equal(avgpool.block_mean(x, 2, skipna=True), [np.inf, np.nan, 2.0])
    np.testing.assert_array_equal(avgpool.block_mean(x, 2), [np.inf, np.nan, np.nan])


def test_min_count():
    x = np.array([np.nan, 1.0, np.nan, np.nan, 3.0, 5.0])
    np.testing.assert_array_equal(avgpool.block_mean(x, 2, skipna=True, min_count=2), [np.nan, np.nan, 4.0])
    np.testing.assert_array_equal(
        avgpool.block_mean(np.arange(5.0), 2, boundary="pad", min_count=2), [0.5, 2.5, np.nan]
    )


def test_masked_values_are_missing_whatever_skipna_says():
    x = np.ma.MaskedArray([1.0, np.nan, 3.0, 4.0, 5.0, 6.0], mask=[0, 0, 1, 1, 0, 0])
    got = avgpool.block_mean(x, 2)
    np.testing.assert_array_equal(np.ma.getmaskarray(got), [False, True, False])
    np.testing.assert_array_equal(np.ma.getdata(got), [np.nan, np.nan, 5.5])
    got = avgpool.block_mean(x, 2, skipna=True)
    np.testing.assert_array_equal(np.ma.getdata(got), [1.0, np.nan, 5.5])


def test_memory_is_the_output_and_a_few_mib():
    tracemalloc = pytest.importorskip("tracemalloc")
    x = np.random.default_rng(9).integers(0, 65536, (2048, 2048), dtype=np.uint16)  # 8 MiB
    tracemalloc.start()
    try:
        got = avgpool.block_mean(x, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.nbytes == 8 << 20
    assert peak <= got.nbytes + (16 << 20), peak


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(block=0), ["block_mean", "`block`", "0", ">= 1"]),
        (dict(block=[2]), ["block_mean", "`block`", "2 axes"]),
        (dict(block=2.0), ["`block`", "2.0"]),
        (dict(block=3), ["block_mean", "axis 0", "length 4", "block 3", "boundary='exact'"]),
        (dict(block=2, boundary="same"), ["`boundary`", "'same'", "'exact'"]),
        (dict(block=2, side="middle"), ["`side`", "'middle'"]),
        (dict(block=2, skipna=1), ["`skipna`", "True or False"]),
        (dict(block=2, min_count=0), ["`min_count`", "0", ">= 1"]),
        (dict(block=2, min_count=1.5), ["`min_count`", "1.5"]),
        (dict(block=2, dtype=np.int8), ["`dtype`", "int8", "uint16"]),
        (dict(block=2, dtype="not a dtype"), ["`dtype`", "not a dtype"]),
    ],
)
def test_bad_arguments_name_themselves(kwargs, words):
    x = np.zeros((4, 6), np.uint16)
    with pytest.raises(AvgPoolError) as info:
        avgpool.block_mean(x, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("x", [np.array(3.0), np.array(["a", "b"]), np.zeros(4, complex), [object()]])
def test_bad_inputs_are_refused(x):
    with pytest.raises(AvgPoolError, match="block_mean"):
        avgpool.block_mean(x, 1)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("boundary", ["exact", "trim", "pad"])
@pytest.mark.parametrize("backed", ["numpy", "dask"])
def test_xarray_block_mean_is_coarsen_mean(boundary, side, backed):
    xr = pytest.importorskip("xarray")
    pd = pytest.importorskip("pandas")
    import avgpool.xarray  # noqa: F401 - registers the accessor

    rng = np.random.default_rng(11)
    values = random_array(rng, (4, 12, 10), np.float32, nan_share=0.1)
    if boundary == "exact":
        values = values[:, :, :9]
    coords = {
        "time": pd.date_range("2020-01-01", periods=4, freq="6h"),
        "y": np.arange(12.0) * 10,
        "x": np.arange(values.shape[2]) * 0.5,
        "label": ("time", ["a", "b", "c", "d"]),
    }
    arr = xr.DataArray(values, dims=("time", "y", "x"), coords=coords, name="t", attrs={"units": "K"})
    if backed == "dask":
        arr = arr.chunk({"y": 5, "x": 4})
    windows = {"y": 3, "x": 3}
    ours = arr.avgpool.block_mean(windows, boundary=boundary, side=side)
    # coarsen's float32 nanmean sums in float32: compared with its float64 mean, ours (a float64
    # sum rounded once) is within half an ulp
    theirs = arr.astype(np.float64).coarsen(windows, boundary=boundary, side=side).reduce(np.nanmean)
    assert ours.dims == theirs.dims and ours.name == "t" and ours.attrs == {"units": "K"}
    assert (backed == "dask") == (ours.chunks is not None) and ours.dtype == np.float32
    np.testing.assert_allclose(ours.values, theirs.values, rtol=2**-24, atol=0, equal_nan=True)
    for name in ("time", "y", "x", "label"):
        np.testing.assert_array_equal(ours[name].values, theirs[name].values)
    ds = xr.Dataset({"t": arr, "n": ("time", np.arange(4)), "h": (("time", "y"), rng.integers(0, 9, (4, 12)))})
    pooled = avgpool.xarray.block_mean(ds, windows, boundary=boundary, side=side)
    np.testing.assert_array_equal(pooled["n"].values, np.arange(4))  # no window dim: kept
    reference = ds["h"].coarsen({"y": 3}, boundary=boundary, side=side).mean()
    np.testing.assert_allclose(pooled["h"].values, reference.values)  # only some of the dims: along those


def test_xarray_block_mean_refuses_bad_arguments():
    xr = pytest.importorskip("xarray")
    import avgpool.xarray

    arr = xr.DataArray(np.zeros((4, 6)), dims=("y", "x"))
    for kwargs, words in [
        (dict(windows={"z": 2}), ["z"]),
        (dict(windows={}), ["`windows`"]),
        (dict(windows={"x": 4}), ["'x'", "length 6", "block 4"]),
        (dict(windows={"x": 2}, coord_func="max"), ["`coord_func`", "'max'"]),
        (dict(windows={"x": 2}, min_count=0), ["`min_count`"]),
    ]:
        with pytest.raises(AvgPoolError) as info:
            avgpool.xarray.block_mean(arr, **kwargs)
        for word in words:
            assert word in str(info.value), (word, str(info.value))
