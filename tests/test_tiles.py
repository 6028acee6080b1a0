"""avgpool._core.tiles: any tiling of the output, each tile pooled from the input region it reads,
gives the whole-array call's result bit for bit (the entry point of avgpool.dask)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import avgpool
from avgpool._core import quantized_pools, tiles, tuning
from avgpool._core.spec import Layout
from avgpool._ops import onnx as api
from avgpool._ops import onnx as onnx_dialect
from avgpool._ops import qlinear as qlinear_dialect


def random_cuts(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    """``0..n`` cut into up to five ranges at random points (pieces of one are common)."""
    points = sorted(set(rng.integers(1, n, size=rng.integers(0, min(n, 4) + 1)).tolist())) if n > 1 else []
    bounds = [0, *points, n]
    return list(zip(bounds[:-1], bounds[1:]))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def pool_in_tiles(tiling, x: np.ndarray, rng: np.random.Generator, pool_tile) -> np.ndarray:
    """The whole output, tile by tile, over random cuts of every axis (batch and channels too)."""
    out = np.full(tiling.out_shape, 77, x.dtype)
    spatial = tiling.spatial_axes
    channel_axis = 1 if tiling.layout is Layout.NCX else x.ndim - 1
    cuts = {axis: random_cuts(rng, tiling.out_shape[axis]) for axis in spatial}
    cuts[0] = random_cuts(rng, x.shape[0])
    cuts[channel_axis] = random_cuts(rng, x.shape[channel_axis])
    for ranges in itertools.product(*(cuts[axis] for axis in range(x.ndim))):
        outputs = tuple(ranges[axis] for axis in spatial)
        take, put = list(map(lambda r: slice(*r), ranges)), list(map(lambda r: slice(*r), ranges))
        for i, axis in enumerate(spatial):
            take[axis] = slice(*tiling.input_range(i, *outputs[i]))
        out[tuple(put)] = pool_tile(x[tuple(take)], outputs, ranges)
    return out


def float_case(rng: np.random.Generator):
    ndim = int(rng.integers(1, 4))
    spatial = [int(rng.integers(1, 30 if ndim < 3 else 10)) for _ in range(ndim)]
    kernel = [int(rng.integers(1, 8)) if rng.random() < 0.7 else int(rng.integers(8, 30)) for _ in range(ndim)]
    mode = str(rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs = dict(
        kernel_shape=kernel,
        strides=[int(rng.integers(1, 4)) for _ in range(ndim)],
        dilations=[1 if rng.random() < 0.7 else 2 for _ in range(ndim)],
        auto_pad=mode,
        ceil_mode=int(rng.integers(0, 2)),
        count_include_pad=int(rng.integers(0, 2)),
        pads=[int(rng.integers(0, k + 2)) for k in kernel] * 2 if mode == "NOTSET" else None,
        layout=str(rng.choice(["NCX", "NXC"])),
    )
    dtype = str(rng.choice(["float32", "float32", "float64", "float16"]))
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    shape = [n, c, *spatial] if attrs["layout"] == "NCX" else [n, *spatial, c]
    magnitude = 10.0 ** rng.uniform(-3, 3, size=shape) if rng.random() < 0.3 else 1.0
    x = (rng.standard_normal(shape) * magnitude).astype(dtype)
    if rng.random() < 0.3:  # NaN and Inf decide a float32 slab's path, and reach only their windows
        x.reshape(-1)[rng.integers(0, x.size, 2)] = rng.choice([np.nan, np.inf, -np.inf], 2)
    return x, attrs


def float_tiling(x: np.ndarray, attrs: dict) -> tiles.Tiling:
    defaults = dict(
        strides=None,
        pads=None,
        auto_pad="NOTSET",
        ceil_mode=0,
        count_include_pad=0,
        dilations=None,
        opset=22,
        layout="NCX",
    )
    array, spec, layout = api._validated(x, onnx_dialect.op_version(22), **{**defaults, **attrs})
    return tiles.tiling(spec, x.shape, x.dtype, layout)


def pool_float_in_tiles(x: np.ndarray, t: tiles.Tiling, rng: np.random.Generator) -> np.ndarray:
    exact = tiles.exact_allowed(*tiles.slab_bit_range(x, t.layout), t.headroom) if t.exact else None

    def pool_tile(region, outputs, ranges):
        slabs = (
            None
            if exact is None
            else exact[slice(*ranges[0]), slice(*ranges[1])]
            if t.layout is Layout.NCX
            else exact[slice(*ranges[0])]
        )
        return t.pool(region, outputs, slabs)

    return pool_in_tiles(t, x, rng, pool_tile)


def test_float_tiles_are_the_whole_bit_for_bit():
    rng = np.random.default_rng(20261125)
    checked = 0
    for _ in range(160):
        x, attrs = float_case(rng)
        try:
            whole = avgpool.average_pool(x, **attrs)
        except avgpool.AvgPoolError:
            continue
        t = float_tiling(x, attrs)
        assert t.out_shape == whole.shape
        tiled = pool_float_in_tiles(x, t, rng)
        assert same_bits(tiled, whole), (x.dtype, x.shape, attrs)
        checked += 1
    assert checked > 120


def window_where_paths_differ() -> np.ndarray:
    """A 1 x 1 x 5 x 10 float32 slab of ones whose first window (5 x 5 with 2 rows of padding on
    top: its first 3 rows, 15 taps ``1 + d * 2**-24``, the ``d`` summing to 75) has a mean of
    exactly a float32 midpoint, 1 + 2.5 ulp, which the exact sums round to even (1 + 2 ulp) and
    the float64 passes, whose rows are scaled by 5/3 before the rows' sum, to 1 + 3 ulp; the ``d``
    came from a search over random ones (interior windows, scaled once, give both paths the same
    bits). Pooled with strides (5, 1), so that the exact path applies."""
    delta = [[0, 0, 6, 4, 12], [12, 0, 4, 8, 12], [4, 2, 8, -1, 4]]
    x = np.ones((1, 1, 5, 10), np.float32)
    x[0, 0, :3, :5] = 1.0 + np.asarray(delta, np.float64) * 2.0**-24
    return x


ATTRS = dict(kernel_shape=[5, 5], strides=[5, 1], pads=[2, 0, 0, 0])


def test_a_slab_the_exact_check_refuses_is_float64_in_every_tile():
    clean = window_where_paths_differ()
    x = clean.copy()
    x[0, 0, 0, 9] = np.nan  # only in the last window, but the whole slab goes by the float64 sums
    whole = avgpool.average_pool(x, **ATTRS)
    assert whole[0, 0, 0, 0] != avgpool.average_pool(clean, **ATTRS)[0, 0, 0, 0]  # the paths differ here
    t = float_tiling(x, ATTRS)
    assert t.exact
    exact = tiles.exact_allowed(*tiles.slab_bit_range(x, t.layout), t.headroom)
    assert exact.tolist() == [[False]]
    rows, (a, b) = slice(*t.input_range(0, 0, 1)), t.input_range(1, 0, 1)
    assert b <= 9  # the first window's tile does not hold the NaN
    assert same_bits(t.pool(x[..., rows, a:b], ((0, 1), (0, 1)), exact), whole[..., :1])
    # deciding from the tile's own values (not the slab's) would give the other neighbour
    assert not same_bits(t.pool(x[..., rows, a:b], ((0, 1), (0, 1)), None), whole[..., :1])


def test_mixed_slabs_take_each_its_own_path():
    clean = window_where_paths_differ()[0, 0]
    with_nan = clean.copy()
    with_nan[0, 9] = np.nan
    x = np.stack([with_nan, clean, with_nan])[None]  # 1 x 3 x 5 x 10
    whole = avgpool.average_pool(x, **ATTRS)
    t = float_tiling(x, ATTRS)
    exact = tiles.exact_allowed(*tiles.slab_bit_range(x, t.layout), t.headroom)
    assert exact.tolist() == [[False, True, False]]
    rows, (a, b) = slice(*t.input_range(0, 0, 1)), t.input_range(1, 0, 2)
    tile = t.pool(x[..., rows, a:b], ((0, 1), (0, 2)), exact)
    assert same_bits(tile, whole[..., :2])
    assert tile[0, 0, 0, 0] != tile[0, 1, 0, 0]


def test_exact_allowed_mirrors_the_kernel_check():
    from avgpool.kernels import running

    rng = np.random.default_rng(7)
    outcomes = set()
    for _ in range(300):
        spread = int(rng.choice([4, 30, 60]))
        values = (rng.standard_normal(16) * 2.0 ** rng.integers(-spread, spread, 16)).astype(np.float32)
        values[rng.random(16) < 0.2] = 0
        if rng.random() < 0.1:
            values[3] = rng.choice([np.nan, np.inf])
        x = values.reshape(1, 1, 16)
        t = float_tiling(x, dict(kernel_shape=[5]))
        expected = running.fixed_point_exponent(x.view(np.uint32).ravel(), 0, 16, t.headroom)
        allowed = tiles.exact_allowed(*tiles.slab_bit_range(x, t.layout), t.headroom)
        assert bool(allowed[0, 0]) == (expected != running.NOT_EXACT)
        outcomes.add(bool(allowed[0, 0]))
    assert outcomes == {True, False}


def qlinear_case(rng: np.random.Generator, channels_last: int):
    """A random QLinearAveragePool input, its attributes (hashable values) and quantisation values."""
    ndim = int(rng.integers(1, 4))
    spatial = [int(rng.integers(1, 25 if ndim < 3 else 9)) for _ in range(ndim)]
    kernel = tuple(spatial) if rng.random() < 0.15 else tuple(int(rng.integers(1, 7)) for _ in range(ndim))
    mode = str(rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = tuple(int(rng.integers(0, k)) for k in kernel) * 2 if mode == "NOTSET" and rng.random() < 0.6 else None
    dtype = rng.choice([np.uint8, np.int8])
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    shape = [n, *spatial, c] if channels_last else [n, c, *spatial]
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, size=shape).astype(dtype)
    attrs = dict(
        kernel_shape=kernel,
        strides=tuple(int(rng.integers(1, 4)) for _ in range(ndim)),
        pads=pads,
        auto_pad=mode,
        ceil_mode=int(rng.integers(0, 2)),
        count_include_pad=int(rng.integers(0, 2)),
        channels_last=channels_last,
    )
    quant = (
        np.float32(rng.uniform(0.01, 0.2)),
        dtype(rng.integers(0, 5)),
        np.float32(rng.uniform(0.01, 0.2)),
        dtype(rng.integers(0, 10)),
    )
    return x, attrs, quant


@pytest.mark.parametrize("seed", [0, 1])
def test_qlinear_tiles_are_the_whole_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(60):
        x, attrs, quant = qlinear_case(rng, int(rng.integers(0, 2)))
        attributes = (
            attrs["kernel_shape"],
            attrs["strides"],
            attrs["pads"],
            attrs["auto_pad"],
            attrs["ceil_mode"],
            attrs["count_include_pad"],
            attrs["channels_last"],
        )
        try:
            whole = avgpool.qlinear_average_pool(x, *quant, **attrs)
        except avgpool.AvgPoolError:
            continue
        t = quantized_pools.qlinear_tiling(x.shape, x.dtype, qlinear_dialect.make_geometry(x.shape, *attributes))
        params = qlinear_dialect.make_quant_params(x.dtype, *quant)
        tiled = pool_in_tiles(t, x, rng, lambda region, outputs, ranges: t.pool(region, outputs, params))
        assert same_bits(tiled, whole), (x.dtype, x.shape, attributes)
        checked += 1
    assert checked > 40


@pytest.fixture
def small_tiles():
    """engine.prepare tiles every axis of more than 8 outputs, in tiles of 5."""
    with tuning.tuned(long_axis_outputs=8, tile_outputs=5):
        yield


def test_long_axes_pooled_tile_by_tile_give_the_same_bits(small_tiles):
    from avgpool._core import engine

    rng = np.random.default_rng(42)
    checked = 0
    for _ in range(60):
        x, attrs = float_case(rng)
        try:
            prepared = engine.prepare(*_spec_of(x, attrs))
        except avgpool.AvgPoolError:
            continue
        if not isinstance(prepared, tiles.TiledPool):
            continue
        tiled = prepared(x)
        with tuning.tuned(long_axis_outputs=1 << 40):
            whole = engine.prepare.__wrapped__(*_spec_of(x, attrs))(x)
        assert same_bits(tiled, whole), (x.dtype, x.shape, attrs)
        out = np.full_like(whole, 5)
        assert prepared(x, out) is out and same_bits(out, whole)
        checked += 1
    assert checked > 15


def _spec_of(x: np.ndarray, attrs: dict) -> tuple:
    t = float_tiling(x, attrs)
    return t.spec, x.shape, x.dtype, t.layout


def test_tiled_pool_takes_the_outs_numpy_users_pass(small_tiles, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 3, 300)).astype(np.float32)
    x[1, 2, 150] = np.nan  # that slab goes by the float64 sums, in every tile
    expected = avgpool.average_pool(x.astype(np.float64), [9], pads=[4, 4]).astype(np.float32)
    got = avgpool.average_pool(x, [9], pads=[4, 4])
    np.testing.assert_array_max_ulp(got, expected, maxulp=1)
    mapped = np.lib.format.open_memmap(tmp_path / "y.npy", mode="w+", dtype=np.float32, shape=got.shape)
    assert avgpool.average_pool(x, [9], pads=[4, 4], out=mapped) is mapped
    assert same_bits(np.asarray(mapped), got)
    shared = x.copy()
    assert same_bits(avgpool.average_pool(shared, [9], pads=[4, 4], out=shared), got)  # out is the input
    with pytest.raises(avgpool.AvgPoolError, match="out"):
        avgpool.average_pool(x, [9], pads=[4, 4], out=np.empty((2, 3, 299), np.float32))


def test_total_taps_counts_every_window():
    from avgpool._core.plan import axis_plan, total_taps
    from avgpool._core.shape import AxisGeometry

    rng = np.random.default_rng(9)
    for _ in range(400):
        length, kernel, stride, dilation = (
            int(rng.integers(1, 40)),
            int(rng.integers(1, 12)),
            int(rng.integers(1, 5)),
            int(rng.integers(1, 4)),
        )
        pad_begin, pad_end = int(rng.integers(-3, 30)), int(rng.integers(0, 30))
        extent = (kernel - 1) * dilation + 1
        out = (length + pad_begin + pad_end - extent) // stride + 1
        if out <= 0:
            continue
        g = AxisGeometry(length, kernel, stride, dilation, pad_begin, pad_end, out)
        expected = int(axis_plan(g, avgpool._core.spec.Divisor.VALID_TAPS, True).count.sum())
        assert total_taps(g, piece=int(rng.integers(1, 8))) == expected, g


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_tiles_of_one_shape_share_their_tables(channels_last):
    # the tiles inside the input have one plan per shape (made once, as the float tiles'); those
    # along the border their own: every tile still gives the whole call's bits
    rng = np.random.default_rng(31 + channels_last)
    shape = (1, 50, 47, 3) if channels_last else (1, 3, 50, 47)
    x = rng.integers(0, 256, size=shape).astype(np.uint8)
    attributes = ((3, 3), (2, 2), (1, 1, 1, 1), "NOTSET", 0, 1, channels_last)
    quant = (np.float32(0.05), np.uint8(3), np.float32(0.07), np.uint8(9))
    whole = avgpool.qlinear_average_pool(
        x,
        *quant,
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
        channels_last=channels_last,
    )
    t = quantized_pools.qlinear_tiling(x.shape, x.dtype, qlinear_dialect.make_geometry(x.shape, *attributes))
    params = qlinear_dialect.make_quant_params(x.dtype, *quant)
    out = np.full(t.out_shape, 77, np.uint8)
    spatial = t.spatial_axes
    ranges = [[(a, min(a + 5, t.out_shape[axis])) for a in range(0, t.out_shape[axis], 5)] for axis in spatial]
    prepared = {}
    for outputs in itertools.product(*ranges):
        take, put = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for i, axis in enumerate(spatial):
            take[axis] = slice(*t.input_range(i, *outputs[i]))
            put[axis] = slice(*outputs[i])
        region = x[tuple(take)]
        out[tuple(put)] = t.pool(region, outputs, params)
        prepared.setdefault(id(t.prepare(outputs, region.shape)), outputs)
    assert same_bits(out, whole)
    assert t.prepare(((5, 10), (5, 10)), (1, 3, 11, 11) if not channels_last else (1, 11, 11, 3)) is t.prepare(
        ((10, 15), (15, 20)), (1, 3, 11, 11) if not channels_last else (1, 11, 11, 3)
    )
    assert len(prepared) < len(list(itertools.product(*ranges))) / 2  # 25 tiles: 9 kinds at most


@pytest.mark.parametrize("seed", [0, 1])
def test_qlinear_long_axes_pooled_tile_by_tile_give_the_same_bits(seed, small_tiles):
    """qlinear_average_pool on an axis of more than ``long_axis_outputs`` outputs goes tile by
    tile (quantized_pools._tiled: the whole axis's tables took 1.4 GB for a 16 MiB input): the
    function, the prepared pool and out= give the untiled bits."""
    from avgpool._core import memo, quantized_pools

    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(60):
        x, attrs, quant = qlinear_case(rng, int(rng.integers(0, 2)))
        memo.clear_all()
        try:
            tiled = avgpool.qlinear_average_pool(x, *quant, **attrs)
        except avgpool.AvgPoolError:
            continue
        geometry = qlinear_dialect.make_geometry(x.shape, *(attrs[k] for k in _QLINEAR_ORDER))
        if quantized_pools.prepare(x.shape, x.dtype, geometry).quantized.kind != quantized_pools._TILED:
            continue
        pool = avgpool.QLinearAveragePool(*quant, **attrs)
        out = np.full_like(tiled, 5)
        assert pool(x, out) is out
        with tuning.tuned(long_axis_outputs=1 << 40):
            memo.clear_all()
            whole = avgpool.qlinear_average_pool(x, *quant, **attrs)
        memo.clear_all()
        assert same_bits(tiled, whole) and same_bits(out, whole), (x.dtype, x.shape, attrs)
        checked += 1
    assert checked > 15


_QLINEAR_ORDER = ("kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad", "channels_last")
