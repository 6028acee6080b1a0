"""avgpool.xarray: pooling by dim name is avgpool.average_pool on the N x C x spatial layout, bit for
bit, in any dim order, lazily for Dask; coordinates become window means, the rest is kept or dropped."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

xr = pytest.importorskip("xarray")
da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import avgpool  # noqa: E402
import avgpool.xarray  # noqa: E402

NAMES = ("a", "b", "c", "y", "x", "z")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def random_case(rng: np.random.Generator) -> tuple[xr.DataArray, dict, dict]:
    """A DataArray with 1-3 pooled and 0-3 other dims in a random order, and random attributes:
    the xarray call's keywords (per dim) and the numpy call's (per spatial axis, in kernel order)."""
    pooled_count, other_count = int(rng.integers(1, 4)), int(rng.integers(0, 4))
    names = [str(n) for n in rng.permutation(NAMES)[: pooled_count + other_count]]
    pooled = names[:pooled_count]
    sizes = {n: int(rng.integers(1, 9 if n in pooled else 4)) for n in names}
    dims = tuple(rng.permutation(names).tolist())
    dtype = rng.choice([np.float16, np.float32, np.float64])
    arr = xr.DataArray(rng.standard_normal([sizes[d] for d in dims]).astype(dtype), dims=dims)
    kernel = [int(rng.integers(1, 6)) for _ in pooled]
    strides = [int(rng.integers(1, 4)) for _ in pooled]
    dilations = [int(rng.integers(1, 3)) for _ in pooled]
    pads = [(int(rng.integers(0, k)), int(rng.integers(0, k))) for k in kernel]
    auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "VALID"]))
    flags = {"ceil_mode": bool(rng.integers(0, 2)), "count_include_pad": bool(rng.integers(0, 2)), "auto_pad": auto_pad}
    keywords = {
        "kernel": dict(zip(pooled, kernel)),
        "strides": dict(zip(pooled, strides)),
        "dilations": dict(zip(pooled, dilations)),
        **flags,
    }
    numpy_keywords = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, **flags}
    if auto_pad == "NOTSET":
        # a dim left out of pads is (0, 0): leave out the unpadded ones
        keywords["pads"] = {d: p for d, p in zip(pooled, pads) if p != (0, 0)}
        numpy_keywords["pads"] = [p[0] for p in pads] + [p[1] for p in pads]
    return arr, keywords, numpy_keywords


def numpy_reference(arr: xr.DataArray, pooled: list, numpy_keywords: dict) -> np.ndarray:
    """avgpool.average_pool on (all other dims merged into N) x 1 x (pooled dims), moved back:
    another N x C split than avgpool.xarray's, and the same bits, as every N x C plane is pooled alike
    (NaN skipped: avgpool.xarray's default for float data, as xarray's)."""
    others = [d for d in arr.dims if d not in pooled]
    moved = arr.transpose(*others, *pooled).values
    leading = moved.shape[: len(others)]
    out = avgpool.average_pool(
        moved.reshape(math.prod(leading), 1, *moved.shape[len(others) :]), **numpy_keywords, skipna=True
    )
    out = out.reshape(leading + out.shape[2:])
    return np.moveaxis(out, range(out.ndim), [arr.dims.index(d) for d in (*others, *pooled)])


def test_values_bit_for_bit_in_any_dim_order():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(80):
        arr, keywords, numpy_keywords = random_case(rng)
        pooled = list(keywords["kernel"])
        try:
            expected = numpy_reference(arr, pooled, numpy_keywords)
        except avgpool.AvgPoolError:
            with pytest.raises(avgpool.AvgPoolError):
                avgpool.xarray.average_pool(arr, **keywords)
            continue
        result = avgpool.xarray.average_pool(arr, **keywords)
        assert result.dims == arr.dims
        assert same_bits(result.values, expected), (arr.dims, arr.dtype, keywords)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("other_count", [0, 1, 2, 3])
def test_the_documented_layout(other_count):
    """The N x C split of the module docstring, called directly."""
    rng = np.random.default_rng(other_count)
    shape = (2, 3, 2)[:other_count] + (9, 7)
    x = rng.standard_normal(shape).astype(np.float32)
    arr = xr.DataArray(x, dims=("a", "b", "c")[:other_count] + ("y", "x"))
    ncx = x.reshape(*{0: (1, 1), 1: (2, 1), 2: (2, 3), 3: (6, 2)}[other_count], 9, 7)
    expected = avgpool.average_pool(ncx, [3, 5], strides=[2, 1], pads=[1, 2, 1, 2]).reshape(shape[:-2] + (5, 7))
    result = avgpool.xarray.average_pool(arr, {"y": 3, "x": 5}, strides={"y": 2}, pads={"y": (1, 1), "x": (2, 2)})
    assert same_bits(result.values, expected)


def recorded(x: np.ndarray, chunks: tuple, calls: list) -> da.Array:
    """``x`` as a dask array whose every chunk, when computed, is recorded in ``calls``."""

    def record(block: np.ndarray) -> np.ndarray:
        calls.append(block.shape)
        return block

    return da.from_array(x, chunks=chunks).map_blocks(record, dtype=x.dtype, meta=np.empty((0,) * x.ndim, x.dtype))


def random_chunks(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    cuts = sorted(set(rng.integers(1, n, size=2).tolist())) if n > 1 else []
    return tuple(np.diff([0, *cuts, n]).tolist())


@pytest.mark.parametrize("seed", [1, 2])
def test_dask_stays_lazy_and_gives_the_same_bits(seed):
    rng = np.random.default_rng(seed)
    dims, shape = ("x", "a", "y", "b", "c"), (11, 2, 3, 3, 2)
    x = rng.standard_normal(shape).astype(np.float32)
    calls: list = []
    coords = {
        "x": np.arange(11.0) * 0.5,
        "a": [10, 20],
        "t": ("b", recorded(np.arange(3.0), (2, 1), calls)),
        "u": (("y", "x"), recorded(np.ones((3, 11)), (2, 5), calls)),
    }
    source = recorded(x, tuple(random_chunks(rng, n) for n in shape), calls)
    lazy_arr = xr.DataArray(source, dims=dims, coords=coords, name="v")
    keywords = {"kernel": {"y": 2, "x": 3}, "strides": {"x": 2}, "pads": {"x": (1, 1)}, "ceil_mode": True}
    lazy = avgpool.xarray.average_pool(lazy_arr, **keywords)
    assert calls == []  # building computed nothing
    assert isinstance(lazy.data, da.Array) and isinstance(lazy.coords["t"].data, da.Array)
    assert isinstance(lazy.coords["u"].data, da.Array)  # pooled, lazily
    expected = avgpool.xarray.average_pool(xr.DataArray(x, dims=dims, coords=coords, name="v"), **keywords)
    assert same_bits(lazy.values, expected.values)
    assert calls
    xr.testing.assert_identical(lazy.compute(), expected.compute())
    calls.clear()
    lazy_ds = avgpool.xarray.average_pool(lazy_arr.to_dataset(), **keywords)
    assert calls == [] and isinstance(lazy_ds["v"].data, da.Array)
    xr.testing.assert_identical(lazy_ds.compute(), expected.to_dataset())
    assert calls


def test_dask_keeps_the_chunks_of_the_pooled_dims():
    """Stride 1 and 'same' pads: each output chunk goes with its input chunk, none is merged."""
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 12, 10))
    chunks = ((1, 1), (2, 1), (1, 3), (5, 4, 3), (3, 3, 4))
    arr = xr.DataArray(da.from_array(x, chunks=chunks), dims=("a", "b", "c", "y", "x"))
    keywords = {"kernel": {"x": 3, "y": 3}, "pads": {"y": (1, 1), "x": (1, 1)}}
    lazy = avgpool.xarray.average_pool(arr, **keywords)
    assert lazy.chunks[3:] == chunks[3:]
    expected = avgpool.xarray.average_pool(xr.DataArray(x, dims=arr.dims), **keywords)
    assert same_bits(lazy.values, expected.values)


def direct_window_means(
    coord: np.ndarray, kernel: int, stride: int, pads: tuple[int, int], dilation: int, count: int
) -> np.ndarray:
    """The mean of the coordinate over each window's taps inside the axis, in float64; NaN for none."""
    means = []
    for j in range(count):
        taps = [j * stride - pads[0] + m * dilation for m in range(kernel)]
        valid = [float(coord[t]) for t in taps if 0 <= t < len(coord)]
        means.append(sum(valid) / len(valid) if valid else np.nan)
    return np.array(means)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_coordinates(ceil_mode):
    rng = np.random.default_rng(4)
    x_coord = np.cumsum(rng.random(7)).astype(np.float32)
    y_coord = np.array([3, 5, 6, 10, 11, 15], np.int64)
    arr = xr.DataArray(
        rng.standard_normal((2, 6, 7)),
        dims=("time", "y", "x"),
        name="temperature",
        attrs={"units": "K"},
        coords={
            "time": np.array(["2024-01-01", "2024-01-02"], "datetime64[ns]"),
            "x": ("x", x_coord, {"units": "m"}),
            "y": y_coord,
            "lat": (("y", "x"), rng.random((6, 7))),
            "label": ("x", list("abcdefg")),
            "station": ("time", ["p", "q"]),
            "level": 850,
        },
    )
    kernel, strides, pads, dilations = {"y": 2, "x": 3}, {"y": 1, "x": 2}, {"y": (3, 3), "x": (1, 2)}, {"x": 2}
    with pytest.warns(avgpool.xarray.CoordinateDroppedWarning, match=r"'label' \(dtype <U1\)"):
        result = avgpool.xarray.average_pool(
            arr, kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode, count_include_pad=True
        )
    assert result.name == "temperature" and result.attrs == {"units": "K"} and result.dims == arr.dims
    assert set(result.coords) == {"time", "x", "y", "station", "level", "lat"}
    for name in ("time", "station", "level"):
        xr.testing.assert_identical(result.coords[name], arr.coords[name])
    x_means = direct_window_means(x_coord, 3, 2, (1, 2), 2, result.sizes["x"])
    y_means = direct_window_means(y_coord, 2, 1, (3, 3), 1, result.sizes["y"])
    np.testing.assert_allclose(result.x.values, x_means, rtol=1e-15)
    np.testing.assert_allclose(result.y.values, y_means, rtol=1e-15)
    assert np.isnan(y_means).sum() >= 3 and result.y.dtype == result.x.dtype == np.float64
    assert result.x.attrs == {"units": "m"}
    assert result.indexes["y"].equals(result.y.to_index())  # still an index
    lat = arr.lat.values
    y_rows = np.stack([direct_window_means(lat[:, i], 2, 1, (3, 3), 1, result.sizes["y"]) for i in range(7)], 1)
    lat_means = np.stack([direct_window_means(row, 3, 2, (1, 2), 2, result.sizes["x"]) for row in y_rows])
    np.testing.assert_allclose(result.lat.values, lat_means, rtol=1e-15)


def test_a_multiindex_along_a_pooled_dim_is_dropped_whole_with_a_warning():
    arr = xr.DataArray(np.ones((3, 4)), dims=("y", "x"), coords={"y": ["p", "q", "r"], "x": [0, 1, 2, 3]})
    arr = arr.stack(yx=("y", "x"))
    with pytest.warns(avgpool.xarray.CoordinateDroppedWarning, match="'yx' \\(of a MultiIndex\\), 'y'.*, 'x'"):
        result = avgpool.xarray.average_pool(arr, {"yx": 2})
    assert dict(result.sizes) == {"yx": 11} and not result.coords


def test_dataset():
    rng = np.random.default_rng(5)
    ds = xr.Dataset(
        {
            "full": (("x", "b", "y"), rng.standard_normal((8, 2, 6)).astype(np.float32)),
            "other": (("y", "x"), rng.standard_normal((6, 8)), {"note": "kept"}),
            "partial": (("x",), rng.standard_normal(8)),
            "unrelated": (("b",), [1.0, 2.0]),
        },
        coords={"x": np.arange(8.0), "b": ["u", "v"], "c2": (("x", "y"), np.zeros((8, 6)))},
        attrs={"title": "t"},
    )
    keywords = {"strides": {"x": 2}, "pads": {"y": (1, 1)}}
    result = avgpool.xarray.average_pool(ds, {"x": 3, "y": 3}, **keywords)
    assert list(result.data_vars) == ["full", "other", "unrelated"] and result.attrs == {"title": "t"}
    for name in ("full", "other"):
        expected = avgpool.xarray.average_pool(ds[name], {"x": 3, "y": 3}, **keywords)
        xr.testing.assert_identical(result[name], expected)
    assert result["other"].attrs == {"note": "kept"}
    xr.testing.assert_identical(result["unrelated"], ds["unrelated"])
    assert set(result.coords) == {"x", "b", "c2"} and result.c2.dims == ("x", "y")
    np.testing.assert_array_equal(result.x.values, [1.0, 3.0, 5.0])


def test_accessor():
    arr = xr.DataArray(np.arange(20.0).reshape(4, 5), dims=("y", "x"), coords={"x": np.arange(5.0)})
    xr.testing.assert_identical(
        arr.avgpool.average_pool(kernel={"x": 2}, ceil_mode=True),
        avgpool.xarray.average_pool(arr, {"x": 2}, ceil_mode=True),
    )
    ds = arr.to_dataset(name="v")
    xr.testing.assert_identical(ds.avgpool.average_pool(kernel={"y": 3}), avgpool.xarray.average_pool(ds, {"y": 3}))


def test_a_dask_backed_image_with_a_large_kernel():
    # a plain 2-D (y, x) image on dask, float32, a kernel of 5 x 5 (the exact running sums, which
    # read the input a second time): the same bits as the numpy-backed array
    arr = xr.DataArray(np.random.default_rng(1).random((16, 16), dtype=np.float32), dims=("y", "x"))
    expected = arr.avgpool.average_pool(kernel={"y": 5, "x": 5})
    xr.testing.assert_identical(
        arr.chunk({"y": 8, "x": 8}).avgpool.average_pool(kernel={"y": 5, "x": 5}).compute(), expected
    )


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"kernel": {"z": 3}}, r"`kernel` names dim 'z', which the DataArray does not have \(its dims: \('y', 'x'\)\)"),
        ({"kernel": {"x": 3}, "strides": {"w": 2}}, r"`strides` names dim 'w', which the DataArray does not have"),
        ({"kernel": {"x": 3}, "pads": {"y": (1, 1)}}, r"`pads` names dim 'y', which `kernel` does not pool"),
        ({"kernel": {"x": 3}, "pads": {"x": 1}}, r"`pads` of dim 'x' is 1: it must be a pair"),
        ({"kernel": {}}, r"`kernel` is \{\}"),
        ({"kernel": {"x": 0}}, r"`kernel_shape` is \(0,\): every value must be positive.*dims \('x',\)"),
        ({"kernel": {"y": 2, "x": 3}, "dilations": {"x": 2}, "opset": 11}, r"`dilations` does not exist before"),
        ({"kernel": {"x": 3}, "pads": {"x": (1, 1)}, "auto_pad": "VALID"}, r"explicit pads cannot be used"),
    ],
)
def test_errors(keywords, message):
    arr = xr.DataArray(np.ones((4, 5), np.float32), dims=("y", "x"))
    with pytest.raises(avgpool.AvgPoolError, match=message):
        avgpool.xarray.average_pool(arr, **keywords)


def test_dataset_refuses_a_bad_kernel_with_nothing_to_pool():
    ds = xr.Dataset({"v": ("y", np.ones(3))}, coords={"x": ["p", "q"]})
    with pytest.raises(avgpool.AvgPoolError, match="`kernel_shape` is"):
        ds.avgpool.average_pool(kernel={"x": 0})
    with pytest.raises(avgpool.AvgPoolError, match="the Dataset does not have"):
        ds.avgpool.average_pool(kernel={"t": 2})


def test_refusals_of_the_numpy_function_pass_through():
    with pytest.raises(avgpool.AvgPoolError, match="dtype"):
        avgpool.xarray.average_pool(xr.DataArray(np.ones(4, np.int32), dims="x"), {"x": 2})
    with pytest.raises(avgpool.AvgPoolError, match="pools a DataArray or a Dataset"):
        avgpool.xarray.average_pool(np.ones((1, 1, 4)), {"x": 2})


# --- coordinates of every dtype that coarsen(...).mean() averages


def ticks_of(values: np.ndarray) -> list[int | None]:
    """datetime64 or timedelta64 values as Python ints of their unit, None for NaT."""
    return [None if np.isnat(v) else int(t) for v, t in zip(values, values.view(np.int64))]


def exact_window_means(
    ticks: list[int | None], kernel: int, stride: int, pads: tuple[int, int], dilation: int, count: int
) -> list[int | None]:
    """Each window's mean over its taps inside the axis as the nearest integer, a tie to the even
    one (Python's round of a Fraction); None for a window with no taps inside or with a NaT tap."""
    means = []
    for j in range(count):
        taps = [j * stride - pads[0] + m * dilation for m in range(kernel)]
        valid = [ticks[t] for t in taps if 0 <= t < len(ticks)]
        means.append(None if not valid or None in valid else round(Fraction(sum(valid), len(valid))))
    return means


def test_the_issue_example_keeps_its_time_axis_as_coarsen_does():
    t = pd.date_range("2020-01-01", periods=6, freq="D")
    arr = xr.DataArray(
        np.arange(12.0).reshape(6, 2), dims=("time", "x"), coords={"time": t, "x": [10.0, 20.0]}, attrs={"units": "K"}
    )
    arr.time.attrs["long_name"] = "time"
    result = avgpool.xarray.average_pool(arr, kernel={"time": 2}, strides={"time": 2})
    expected = arr.coarsen(time=2).mean(keep_attrs=True)
    xr.testing.assert_identical(result, expected)
    assert result.time.dtype == arr.time.dtype and result.time.attrs == {"long_name": "time"}
    assert "time" in result.indexes


# (kernel, stride, pads, dilation, ceil_mode): non-overlapping, sliding and padded windows
GEOMETRIES = [(2, 2, (0, 0), 1, False), (3, 1, (1, 1), 1, False), (4, 3, (2, 3), 2, True), (7, 5, (3, 0), 1, True)]


@pytest.mark.parametrize("unit", ["ns", "us", "s", "D"])
def test_datetime_means_are_exact_and_rounded_half_to_even(unit):
    rng = np.random.default_rng(len(unit))
    start = {"ns": 1_700_000_000 * 10**9, "us": 1_700_000_000 * 10**6, "s": 1_700_000_000, "D": 19_000}[unit]
    spread = {"ns": 10**15, "us": 10**12, "s": 10**9, "D": 1000}[unit]
    values = (start + np.sort(rng.integers(0, spread, 40))).astype(f"datetime64[{unit}]")
    arr = xr.DataArray(np.zeros(40), dims="t", coords={"t": values})
    # xarray holds a day or an hour in seconds; the mean keeps the unit the coordinate has
    assert arr.t.dtype == np.dtype(f"datetime64[{'s' if unit == 'D' else unit}]")
    inexact = ties = 0
    for kernel, stride, pads, dilation, ceil_mode in GEOMETRIES:
        result = avgpool.xarray.average_pool(
            arr, {"t": kernel}, strides={"t": stride}, pads={"t": pads}, dilations={"t": dilation}, ceil_mode=ceil_mode
        )
        assert result.t.dtype == arr.t.dtype
        ticks = ticks_of(arr.t.values)
        assert ticks_of(result.t.values) == exact_window_means(ticks, kernel, stride, pads, dilation, result.sizes["t"])
        for j in range(result.sizes["t"]):
            valid = [ticks[t] for t in (j * stride - pads[0] + m * dilation for m in range(kernel)) if 0 <= t < 40]
            inexact += sum(valid) % len(valid) != 0
            ties += 2 * (sum(valid) % len(valid)) == len(valid)
    assert inexact > 5 and (ties > 3 or unit == "D")  # a day is 86400 s: an even sum of seconds


def test_datetime_means_round_ties_to_even_before_and_after_the_epoch():
    seconds = np.array([-3, -2, -1, 0, 1, 2, 3, 4]).astype("datetime64[s]")
    arr = xr.DataArray(np.zeros(8), dims="t", coords={"t": seconds})
    result = avgpool.xarray.average_pool(arr, {"t": 2})
    # -2.5 -1.5 -0.5 0.5 1.5 2.5 3.5
    assert result.t.values.view(np.int64).tolist() == [-2, -2, 0, 0, 2, 2, 4]


def test_datetime_means_are_exact_where_int64_sums_would_overflow():
    # a span past 2**63 ns (the last value is the largest int64, a date, not NaT): Python-int sums
    values = np.array([-(2**62) - 7, 2**62 + 1, 2**62 + 2, 2**63 - 2, 2**63 - 1], np.int64).view("datetime64[ns]")
    arr = xr.DataArray(np.zeros(5), dims="t", coords={"t": values})
    result = avgpool.xarray.average_pool(arr, {"t": 3}, pads={"t": (1, 1)})
    assert ticks_of(result.t.values) == exact_window_means(ticks_of(values), 3, 1, (1, 1), 1, 5)


def test_nat_propagates_to_the_windows_that_hold_it():
    values = np.array(["2020-01-01", "NaT", "2020-01-03", "2020-01-04", "2020-01-05", "2020-01-06"], "datetime64[ns]")
    arr = xr.DataArray(np.zeros(6), dims="t", coords={"t": values})
    result = avgpool.xarray.average_pool(arr, {"t": 2}, pads={"t": (0, 3)}, strides={"t": 2}, ceil_mode=True)
    expected = np.array(["NaT", "2020-01-03T12", "2020-01-05T12", "NaT"], "datetime64[ns]")
    np.testing.assert_array_equal(result.t.values, expected)  # the last window is all padding
    empty = xr.DataArray(np.zeros(0), dims="t", coords={"t": np.array([], "datetime64[s]")})
    pooled = avgpool.xarray.average_pool(empty, {"t": 2}, pads={"t": (1, 1)})
    assert pooled.t.dtype == np.dtype("datetime64[s]") and np.isnat(pooled.t.values).all() and pooled.sizes["t"] == 1


@pytest.mark.parametrize("unit", ["ns", "ms", "s"])
def test_timedelta_means(unit):
    rng = np.random.default_rng(11)
    ticks = np.cumsum(rng.integers(1, 10**6, 15))
    arr = xr.DataArray(np.zeros(15), dims="lead", coords={"lead": ticks.astype(f"timedelta64[{unit}]")})
    result = avgpool.xarray.average_pool(arr, {"lead": 4}, pads={"lead": (2, 1)}, dilations={"lead": 2})
    assert result.lead.dtype == np.dtype(f"timedelta64[{unit}]")
    expected = exact_window_means(ticks_of(arr.lead.values), 4, 1, (2, 1), 2, result.sizes["lead"])
    assert ticks_of(result.lead.values) == expected


def test_bool_integer_and_complex_coordinates_are_averaged_as_coarsen_does():
    coords = {
        "i": ("x", np.array([3, 8, -2, 7, 1, 0], np.int64)),
        "u": ("x", np.array([255, 254, 0, 1, 9, 9], np.uint8)),
        "b": ("x", np.array([True, False, True, True, False, False])),
        "c": ("x", np.arange(6) + 1j * np.arange(6.0) ** 2),
    }
    arr = xr.DataArray(np.zeros(6), dims="x", coords=coords)
    result = avgpool.xarray.average_pool(arr, {"x": 2}, strides={"x": 2})
    xr.testing.assert_identical(result, arr.coarsen(x=2).mean())
    assert [result[n].dtype for n in coords] == [np.float64] * 3 + [np.complex128]
    # sliding and padded: the taps inside the axis only
    sliding = avgpool.xarray.average_pool(arr, {"x": 3}, pads={"x": (2, 2)}, count_include_pad=True)
    np.testing.assert_array_equal(sliding.i.values, direct_window_means(coords["i"][1], 3, 1, (2, 2), 1, 8))


def test_non_index_coordinates_along_pooled_dims():
    rng = np.random.default_rng(12)
    lat = np.linspace(-30.0, 30.0, 6)
    lon = rng.uniform(0, 360, (6, 8))
    stamps = (1_600_000_000 + rng.integers(0, 10**6, (6, 8))).astype("datetime64[s]")
    arr = xr.DataArray(
        rng.standard_normal((2, 6, 8)),
        dims=("band", "y", "x"),
        coords={"lat": ("y", lat, {"units": "degrees_north"}), "lon": (("y", "x"), lon), "scan": (("y", "x"), stamps)},
    )
    both = avgpool.xarray.average_pool(arr, {"y": 2, "x": 2}, strides={"y": 2, "x": 2})
    expected = arr.coarsen(y=2, x=2).mean()
    for name in ("lat", "lon"):
        xr.testing.assert_allclose(both[name].variable, expected[name].variable, rtol=1e-15)
    assert both.lat.attrs == {"units": "degrees_north"}
    windows = stamps.view(np.int64).reshape(3, 2, 4, 2).transpose(0, 2, 1, 3).reshape(3, 4, 4).tolist()
    assert both.scan.values.view(np.int64).tolist() == [[round(Fraction(sum(w), 4)) for w in row] for row in windows]
    # only y pooled: lon and scan keep x; sliding windows with padding average the valid taps
    only_y = avgpool.xarray.average_pool(arr, {"y": 3}, pads={"y": (1, 1)})
    assert only_y.lon.dims == ("y", "x") and only_y.sizes == {"band": 2, "y": 6, "x": 8}
    lon_means = np.stack([direct_window_means(lon[:, i], 3, 1, (1, 1), 1, 6) for i in range(8)], 1)
    np.testing.assert_allclose(only_y.lon.values, lon_means, rtol=1e-15)
    np.testing.assert_allclose(only_y.lat.values, direct_window_means(lat, 3, 1, (1, 1), 1, 6), rtol=1e-15)
    scan_means = [exact_window_means(ticks_of(stamps[:, i]), 3, 1, (1, 1), 1, 6) for i in range(8)]
    assert np.array(only_y.scan.values.view(np.int64)).T.tolist() == scan_means
    # pooling x alone leaves lat (along y only) as it is
    xr.testing.assert_identical(avgpool.xarray.average_pool(arr, {"x": 2}).lat, arr.lat)


def test_coordinates_with_no_mean_are_dropped_with_a_warning_naming_them():
    arr = xr.DataArray(
        np.arange(8.0).reshape(2, 4),
        dims=("y", "x"),
        coords={
            "x": [0.0, 1.0, 2.0, 3.0],
            "label": ("x", list("abcd")),
            "thing": ("x", np.array([1, "a", None, 2.5], object)),
            "row": ("y", ["p", "q"]),
        },
        attrs={"units": "K"},
    )
    with pytest.warns(UserWarning, match=r"dropped the coordinates 'label' \(dtype <U1\), 'thing' \(dtype object\)"):
        result = avgpool.xarray.average_pool(arr, {"x": 2})
    assert set(result.coords) == {"x", "row"} and result.attrs == {"units": "K"}
    xr.testing.assert_identical(result.row, arr.row)
    assert issubclass(avgpool.xarray.CoordinateDroppedWarning, UserWarning)


def test_dask_backed_coordinates_stay_lazy():
    rng = np.random.default_rng(13)
    stamps = (1_600_000_000_000_000_000 + rng.integers(0, 10**12, (9, 5))).astype("datetime64[ns]")
    lon = rng.uniform(0, 360, (9, 5))
    calls: list = []
    coords = {
        "time": pd.date_range("2021-03-01", periods=9, freq="6h"),
        "scan": (("time", "x"), recorded(stamps, (4, 5), calls)),
        "lon": (("time", "x"), recorded(lon, (3, 2), calls)),
        "lead": ("time", recorded(np.arange(9).astype("timedelta64[s]"), (5,), calls)),
    }
    source = recorded(rng.standard_normal((9, 5)), (4, 2), calls)
    keywords = {"kernel": {"time": 3}, "strides": {"time": 2}, "pads": {"time": (1, 1)}}
    lazy = avgpool.xarray.average_pool(xr.DataArray(source, dims=("time", "x"), coords=coords), **keywords)
    assert calls == [] and all(isinstance(lazy[n].data, da.Array) for n in ("scan", "lon", "lead"))
    assert lazy.scan.chunks == ((5,), (5,))
    eager = xr.DataArray(rng.standard_normal((9, 5)), dims=("time", "x"), coords=coords).compute()
    expected = avgpool.xarray.average_pool(eager, **keywords)
    xr.testing.assert_identical(lazy.coords.to_dataset().compute(), expected.coords.to_dataset())
    assert calls
    assert lazy.lead.dtype == np.dtype("timedelta64[s]") and lazy.scan.dtype == np.dtype("datetime64[ns]")
