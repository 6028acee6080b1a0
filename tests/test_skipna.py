"""average_pool's missing values: skipna, min_count and numpy masked arrays (docs/semantics.md 1.6),
against a brute-force float64 reference over every window."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

import avgpool
from avgpool import AvgPoolError

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def brute_force(x, kernel, strides, pads, dilations, cip, skipna, min_count, mask=None, ceil=False):
    """Window by window from the definition: the values present summed in float64 (math.fsum),
    divided by the valid taps (count_include_pad=0) or the taps inside the padded extent, less the
    missing ones. Returns (means, windows with fewer than min_count values present)."""
    spatial = x.shape[2:]
    n = len(spatial)
    out_shape = avgpool.output_shape(x.shape, kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil)[
        2:
    ]
    means = np.empty(x.shape[:2] + tuple(out_shape))
    scale = np.zeros(means.shape)  # the window's largest magnitude present: what a float64 sum can lose
    few = np.zeros(means.shape, bool)
    for b, c, *o in itertools.product(*(range(s) for s in means.shape)):
        values, padded_taps, missing = [], 0, 0
        for j in itertools.product(*(range(k) for k in kernel)):
            p = [o[a] * strides[a] - pads[a] + j[a] * dilations[a] for a in range(n)]
            if all(-pads[a] <= p[a] < spatial[a] + pads[n + a] for a in range(n)):
                padded_taps += 1
            if not all(0 <= p[a] < spatial[a] for a in range(n)):
                continue
            v = float(x[(b, c, *p)])
            if (mask is not None and mask[(b, c, *p)]) or (skipna and math.isnan(v)):
                missing += 1
                continue
            values.append(v)
            scale[(b, c, *o)] = max(scale[(b, c, *o)], abs(v) if math.isfinite(v) else 0.0)
        divisor = (padded_taps if cip else len(values) + missing) - missing
        few[(b, c, *o)] = len(values) < min_count
        if few[(b, c, *o)]:
            means[(b, c, *o)] = np.nan
        elif any(math.isnan(v) or math.isinf(v) for v in values):
            means[(b, c, *o)] = sum(values) / divisor
        else:
            means[(b, c, *o)] = math.fsum(values) / divisor if divisor else np.nan
    return means, few, scale


@pytest.mark.parametrize("seed", range(60))
def test_random_configurations_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    n = 1 + seed % 2
    spatial = tuple(int(s) for s in rng.integers(3, 8, n))
    kernel = [int(k) for k in rng.integers(1, 4, n)]
    strides = [int(s) for s in rng.integers(1, 3, n)]
    dilations = [int(d) for d in rng.integers(1, 3, n)]
    pads = [int(rng.integers(0, k)) for k in kernel] * 2
    dilations = [d if (k - 1) * d + 1 <= s else 1 for k, d, s in zip(kernel, dilations, spatial)]  # a valid geometry
    cip = int(seed % 3 == 0)
    ceil = bool(seed % 4 == 1)
    dtype = DTYPES[seed % len(DTYPES)]
    x = rng.standard_normal((2, 2, *spatial)).astype(dtype)
    x[rng.random(x.shape) < [0.0, 0.2, 0.6, 1.0][seed % 4]] = np.nan
    if seed % 7 == 0:
        x.flat[rng.integers(0, x.size)] = np.inf
    min_count = int(rng.integers(1, 3))
    masked = seed % 5 == 0
    mask = rng.random(x.shape) < 0.3 if masked else None
    arg = np.ma.MaskedArray(x, mask=mask) if masked else x
    attrs = dict(strides=strides, pads=pads, dilations=dilations, count_include_pad=cip, ceil_mode=ceil)
    got = avgpool.average_pool(arg, kernel, **attrs, skipna=True, min_count=min_count)
    means, few, scale = brute_force(x, kernel, strides, pads, dilations, cip, True, min_count, mask, ceil)
    if masked:
        np.testing.assert_array_equal(np.ma.getmaskarray(got), few)
        got = np.ma.getdata(got)
    assert got.dtype == np.dtype(dtype)
    got = got.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(means))
    finite = np.isfinite(means)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(means)], means[~finite & ~np.isnan(means)])
    # one ulp of the output's format, plus what float64 sums and scalings can lose (semantics 1.4)
    ulp = {2: 2.0**-7 if dtype == ml_dtypes.bfloat16 else 2.0**-10, 4: 2.0**-23, 8: 2.0**-52}[np.dtype(dtype).itemsize]
    bound = ulp * np.abs(means[finite]) + 16 * 2.0**-52 * math.prod(kernel) * scale[finite]
    assert np.all(np.abs(got[finite] - means[finite]) <= bound), (got, means)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCX", "NXC"])
def test_no_nan_gives_the_same_bits(dtype, layout):
    x = np.random.default_rng(1).standard_normal((2, 5, 7, 3)).astype(dtype)
    attrs = dict(strides=[2, 1], pads=[1, 1, 1, 1], layout=layout, count_include_pad=1)
    plain = avgpool.average_pool(x, [3, 2], **attrs)
    assert avgpool.average_pool(x, [3, 2], **attrs, skipna=True).tobytes() == plain.tobytes()


def test_a_window_wholly_in_the_padding_is_nan_under_skipna():
    x = np.arange(1.0, 4.0).reshape(1, 1, 3)
    kwargs = dict(pads=[0, 3], strides=[3], count_include_pad=1, ceil_mode=1)
    np.testing.assert_array_equal(avgpool.average_pool(x, [2], **kwargs), [[[1.5, 0.0]]])  # ONNX: 0 / 2
    np.testing.assert_array_equal(avgpool.average_pool(x, [2], **kwargs, skipna=True), [[[1.5, np.nan]]])
    np.testing.assert_array_equal(
        avgpool.average_pool(np.array([[[1.0, 2.0]]]), [2], pads=[0, 2], strides=[2], count_include_pad=1, skipna=True),
        [[[1.5, np.nan]]],
    )


def test_min_count_changes_nothing_without_skipna_or_a_mask():
    x = np.array([[[np.nan, 1.0, 2.0, 3.0]]])
    np.testing.assert_array_equal(avgpool.average_pool(x, [2], min_count=5), avgpool.average_pool(x, [2]))


def test_out_is_written():
    x = np.array([[[np.nan, 1.0, 3.0, 5.0]]], np.float32)
    out = np.empty((1, 1, 3), np.float32)
    assert avgpool.average_pool(x, [2], skipna=True, out=out) is out
    np.testing.assert_array_equal(out, [[[1.0, 2.0, 4.0]]])


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(skipna=1), ["AveragePool-22", "`skipna`", "True or False"]),
        (dict(skipna="yes"), ["`skipna`"]),
        (dict(min_count=0), ["`min_count`", "0", ">= 1"]),
        (dict(min_count=1.0), ["`min_count`", "1.0"]),
        (dict(skipna=True, min_count=-2), ["`min_count`"]),
    ],
)
def test_bad_values_name_the_argument(kwargs, words):
    with pytest.raises(AvgPoolError) as info:
        avgpool.average_pool(np.zeros((1, 1, 4)), [2], **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dask_gives_the_numpy_bits_whatever_the_chunks(dtype):
    dask_array = pytest.importorskip("dask.array")
    import avgpool.dask

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 17, 13)).astype(dtype)
    x[rng.random(x.shape) < 0.2] = np.nan
    for cip in (0, 1):
        kwargs = dict(pads=[1, 1, 1, 1], strides=[2, 1], count_include_pad=cip, skipna=True, min_count=2)
        expected = avgpool.average_pool(x, [3, 3], **kwargs)
        for chunks in [(1, 1, 5, 4), (2, 3, 17, 13), (1, 2, 3, 3)]:
            got = avgpool.dask.average_pool(dask_array.from_array(x, chunks=chunks), [3, 3], **kwargs).compute()
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), (cip, chunks)


def test_xarray_skips_nan_by_default_for_float_data_as_xarray_does():
    xr = pytest.importorskip("xarray")
    import avgpool.xarray

    arr = xr.DataArray([[np.nan, 1.0, 2.0, 3.0]], dims=("y", "x"))
    np.testing.assert_array_equal(
        avgpool.xarray.average_pool(arr, kernel={"x": 2}, strides={"x": 2}).values, [[1.0, 2.5]]
    )
    np.testing.assert_array_equal(arr.coarsen(x=2).mean().values, [[1.0, 2.5]])
    plain = avgpool.xarray.average_pool(arr, kernel={"x": 2}, strides={"x": 2}, skipna=False)
    np.testing.assert_array_equal(plain.values, [[np.nan, 2.5]])
    with pytest.raises(AvgPoolError, match="`min_count`"):
        avgpool.xarray.average_pool(arr, kernel={"x": 2}, min_count=0)


def _random_case(seed):
    """A random pool configuration and input for the prepared-pool comparison: every layout, dtype,
    count_include_pad, ceil_mode, dilation and NaN density (0, 1%, 50%, 100%), masks or none."""
    rng = np.random.default_rng(1000 + seed)
    n = 1 + seed % 3
    spatial = tuple(int(s) for s in rng.integers(4, 10, n))
    kernel = [int(k) for k in rng.integers(1, 4, n)]
    dilations = [int(d) if (k - 1) * int(d) + 1 <= s else 1 for k, d, s in zip(kernel, rng.integers(1, 3, n), spatial)]
    attrs = dict(
        strides=[int(s) for s in rng.integers(1, 3, n)],
        pads=[int(rng.integers(0, k)) for k in kernel] * 2,
        dilations=dilations,
        count_include_pad=int(rng.integers(0, 2)),
        ceil_mode=int(rng.integers(0, 2)),
        layout=["NCX", "NXC"][seed % 2],
    )
    dtype = DTYPES[(seed // 2) % len(DTYPES)]
    x = rng.standard_normal((2, *spatial, 3) if attrs["layout"] == "NXC" else (2, 3, *spatial)).astype(dtype)
    x[rng.random(x.shape) < [0.0, 0.01, 0.5, 1.0][(seed // 8) % 4]] = np.nan
    if seed % 5 == 0:
        x = np.ma.MaskedArray(x, mask=rng.random(x.shape) < 0.3)
    return kernel, attrs, x, seed % 3 != 2, int(rng.integers(1, 4))


@pytest.mark.parametrize("seed", range(64))
def test_the_prepared_pool_gives_the_function_bits(seed):
    kernel, attrs, x, skipna, min_count = _random_case(seed)
    expected = avgpool.average_pool(x, kernel, **attrs, skipna=skipna, min_count=min_count)
    pool = avgpool.AveragePool(kernel, **attrs, skipna=skipna, min_count=min_count)
    for _ in range(2):  # the first call prepares, the second finds what the first kept
        got = pool(x)
        assert type(got) is type(expected) and got.dtype == expected.dtype
        assert np.ma.getdata(got).tobytes() == np.ma.getdata(expected).tobytes(), (kernel, attrs, skipna, min_count)
        np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(expected))
    if np.ma.isMaskedArray(x):  # a mask or NaN is what makes values missing, not the pool's last call
        plain = np.ma.getdata(x)
        same = avgpool.average_pool(plain, kernel, **attrs, skipna=skipna, min_count=min_count)
        assert pool(plain).tobytes() == same.tobytes()
        assert np.ma.isMaskedArray(pool(x))


def test_a_masked_input_after_a_plain_one_of_its_shape_is_still_masked():
    x = np.array([[[1.0, 2.0, 4.0, 8.0]]])
    pool = avgpool.AveragePool([2], strides=[2])
    np.testing.assert_array_equal(pool(x), [[[1.5, 6.0]]])
    got = pool(np.ma.MaskedArray(x, mask=[[[True, True, False, False]]]))
    np.testing.assert_array_equal(np.ma.getmaskarray(got), [[[True, False]]])
    np.testing.assert_array_equal(np.ma.getdata(got), [[[np.nan, 6.0]]])


def test_the_prepared_pool_writes_out():
    x = np.array([[[np.nan, 1.0, 3.0, 5.0]]], np.float32)
    out = np.empty((1, 1, 3), np.float32)
    assert avgpool.AveragePool([2], skipna=True)(x, out) is out
    np.testing.assert_array_equal(out, [[[1.0, 2.0, 4.0]]])


def test_out_with_a_masked_input_is_refused_not_left_unwritten():
    x = np.ma.MaskedArray(np.arange(4.0).reshape(1, 1, 4), mask=[[[0, 1, 0, 0]]])
    for call in (lambda out: avgpool.average_pool(x, [2], out=out), lambda out: avgpool.AveragePool([2])(x, out)):
        with pytest.raises(AvgPoolError, match="AveragePool-22: `out` is given with a masked input"):
            call(np.zeros((1, 1, 3)))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(skipna=1), ["AveragePool-22", "`skipna`", "True or False"]),
        (dict(skipna=None), ["`skipna`", "None"]),
        (dict(min_count=0), ["AveragePool-22", "`min_count`", "0", ">= 1"]),
        (dict(min_count=2.0), ["`min_count`", "2.0"]),
        (dict(min_count=True), ["`min_count`", "True"]),
        (dict(skipna=True, min_count=-2, opset=19), ["AveragePool-19", "`min_count`", "-2"]),
    ],
)
def test_the_prepared_pool_refuses_bad_values(kwargs, words):
    with pytest.raises(AvgPoolError) as info:
        avgpool.AveragePool([2], **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_tensor_given_to_a_skipping_pool_skips_nan():
    torch = pytest.importorskip("torch")
    x = np.array([[[[np.nan, 1.0], [3.0, 5.0]]]], np.float32)
    pool = avgpool.AveragePool([2, 2], skipna=True)
    got = pool(torch.from_numpy(x))
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), pool(x))
    channels_last = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(pool(channels_last).numpy(), [[[[3.0]]]])


@pytest.mark.parametrize("skipna", [False, True])
def test_dask_takes_min_count_as_numpy_does(skipna):
    dask_array = pytest.importorskip("dask.array")
    import avgpool.dask

    x = np.random.default_rng(4).standard_normal((1, 2, 9, 8))
    x[x > 0.8] = np.nan
    kwargs = dict(pads=[2, 1, 2, 1], count_include_pad=1, skipna=skipna, min_count=4)
    expected = avgpool.average_pool(x, [3, 2], **kwargs)
    got = avgpool.dask.average_pool(dask_array.from_array(x, chunks=(1, 1, 4, 3)), [3, 2], **kwargs).compute()
    assert got.tobytes() == expected.tobytes()
    with pytest.raises(AvgPoolError, match="`min_count`"):
        avgpool.dask.average_pool(dask_array.from_array(x), [3, 2], min_count=0)
