"""avgpool.dask on a cluster of two worker processes, with inputs as a cluster holds them: persisted,
made of futures, or read from a zarr store. Every path gives avgpool's numpy result bit for bit."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

from dask.array.core import normalize_chunks  # noqa: E402

import avgpool  # noqa: E402
import avgpool.dask as avgpool_dask  # noqa: E402
import avgpool.xarray  # noqa: E402

SHAPE = (2, 3, 40, 36)  # in chunks of 16 x 12 (or so) along the pooled axes: tiles read halos


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def persisted(client, x: np.ndarray, chunks: tuple[int, ...], _) -> da.Array:
    """Chunks held on the workers: the graph holds futures only."""
    return client.persist(da.from_array(x, chunks=chunks))


def from_futures(client, x: np.ndarray, chunks: tuple[int, ...], _) -> da.Array:
    """Blocks scattered to the workers, one future each, put together (da.from_delayed, da.block)."""
    edges = [np.cumsum((0, *c)).tolist() for c in normalize_chunks(chunks, x.shape)]
    cells = list(itertools.product(*(range(len(e) - 1) for e in edges)))
    pieces = [x[tuple(slice(e[i], e[i + 1]) for e, i in zip(edges, cell))] for cell in cells]
    blocks = {
        cell: da.from_delayed(future, piece.shape, dtype=x.dtype)
        for cell, piece, future in zip(cells, pieces, client.scatter(pieces))
    }

    def nest(prefix: tuple) -> list | da.Array:
        if len(prefix) == x.ndim:
            return blocks[prefix]
        return [nest((*prefix, i)) for i in range(len(edges[len(prefix)]) - 1)]

    return da.block(nest(()))


def from_zarr(client, x: np.ndarray, chunks: tuple[int, ...], store) -> da.Array:
    """Chunks read from a zarr store by the workers (written by them too)."""
    da.to_zarr(da.from_array(x, chunks=chunks), str(store), compute=False).compute(scheduler=client)
    return da.from_zarr(str(store))


SOURCES = {"persisted": persisted, "futures": from_futures, "zarr": from_zarr}


def float_input(dtype, shape=SHAPE) -> np.ndarray:
    x = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    x.flat[100] = np.nan  # one slab the exact float32 sums do not apply to, the others they do
    return x


def quantized(shape=SHAPE) -> np.ndarray:
    return np.random.default_rng(8).integers(0, 256, shape).astype(np.uint8)


# per path: the input, its chunks, and the pooling (as avgpool_dask's and avgpool's function alike)
CASES: dict[str, tuple[Callable, tuple, Callable]] = {
    "float32-k3": (
        lambda: float_input(np.float32),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    ),
    "float32-k5-exact": (
        lambda: float_input(np.float32),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [5, 5], pads=[2, 2, 2, 2]),
    ),
    "float32-k7-exact-count-pad": (
        lambda: float_input(np.float32),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [7, 7], pads=[3, 3, 3, 3], count_include_pad=1),
    ),
    "float64-k5": (
        lambda: float_input(np.float64),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [5, 5], pads=[2, 2, 2, 2]),
    ),
    "float16-k5": (
        lambda: float_input(np.float16),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [5, 5], pads=[2, 2, 2, 2]),
    ),
    "float32-nxc-k5-exact": (
        lambda: float_input(np.float32, (2, 40, 36, 3)),
        (1, 16, 12, 2),
        lambda m, x: m.average_pool(x, [5, 5], pads=[2, 2, 2, 2], layout="NXC"),
    ),
    "float32-global": (
        lambda: float_input(np.float32),
        (1, 2, 16, 12),
        lambda m, x: m.average_pool(x, [40, 36]),
    ),
    "qlinear-k5": (
        quantized,
        (1, 2, 16, 12),
        lambda m, x: m.qlinear_average_pool(x, 0.05, 3, 0.04, 7, [5, 5], pads=[2, 2, 2, 2]),
    ),
    "qlinear-channels-last-k3": (
        lambda: quantized((2, 40, 36, 3)),
        (1, 16, 12, 2),
        lambda m, x: m.qlinear_average_pool(x, 0.05, 3, 0.04, 7, [3, 3], strides=[2, 2], channels_last=1),
    ),
}


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    uint = f"u{want.dtype.itemsize}"
    np.testing.assert_array_equal(got.view(uint), want.view(uint))


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("case", CASES)
def test_every_path_bit_for_bit(client, tmp_path, source, case):
    make, chunks, pool = CASES[case]
    lazy_input = SOURCES[source](client, make(), chunks, tmp_path / "x.zarr")
    lazy = pool(avgpool_dask, lazy_input)
    if "exact" in case:  # the path that reads the input a second time, for the exact check
        assert any(str(key[0]).startswith("avgpool-exact") for key in dict(lazy.__dask_graph__()))
    assert_same_bits(client.compute(lazy).result(), pool(avgpool, client.compute(lazy_input).result()))


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kernel", [3, 5])
def test_xarray_over_a_dask_backed_data_array(client, tmp_path, source, kernel):
    lazy_input = SOURCES[source](client, float_input(np.float32), (1, 2, 16, 12), tmp_path / "x.zarr")
    arr = xr.DataArray(lazy_input, dims=("time", "band", "y", "x"), coords={"x": np.arange(36.0)})
    attributes = dict(kernel={"y": kernel, "x": kernel}, pads={"x": (1, 1)})
    pooled = avgpool.xarray.average_pool(arr, **attributes)
    values = client.compute(lazy_input).result()
    # the dims besides the pooled ones in front, the last of them C: N x C x y x x as it is; NaN
    # skipped, avgpool.xarray's default for float data
    want = avgpool.average_pool(values, [kernel, kernel], pads=[0, 1, 0, 1], skipna=True)
    assert_same_bits(client.compute(pooled.data).result(), want)
    assert_same_bits(pooled.x.values, avgpool.xarray.average_pool(arr.copy(data=values), **attributes).x.values)


def test_the_reported_persisted_random_input(client):
    x = da.random.default_rng(11).standard_normal((1, 4, 500, 600), chunks=(1, 4, 250, 300), dtype=np.float32)
    xp = client.persist(x)
    values = client.compute(xp).result()
    for kernel in ([5, 5], [3, 3]):
        got = client.compute(avgpool_dask.average_pool(xp, kernel_shape=kernel)).result()
        assert_same_bits(got, avgpool.average_pool(values, kernel))
