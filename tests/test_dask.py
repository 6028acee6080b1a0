"""avgpool.dask: lazy graphs whose result is avgpool's numpy result bit for bit, for any chunking."""

from __future__ import annotations

import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import avgpool  # noqa: E402
import avgpool.dask as avgpool_dask  # noqa: E402
from avgpool._core import tuning  # noqa: E402
from tests.test_tiles import float_case, qlinear_case, same_bits  # noqa: E402


def random_chunks(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    """Chunks of an axis of ``n``: one, all of size 1, or uneven random ones."""
    if n == 0:
        return (0,)
    kind = rng.integers(0, 4)
    if kind == 0:
        return (n,)
    if kind == 1 and n <= 12:
        return (1,) * n
    points = sorted(set(rng.integers(1, n, size=rng.integers(1, 4)).tolist())) if n > 1 else []
    bounds = [0, *points, n]
    return tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))


def chunked(x: np.ndarray, rng: np.random.Generator) -> da.Array:
    return da.from_array(x, chunks=tuple(random_chunks(rng, n) for n in x.shape))


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(params=["together", "split"])
def tile_split(request):
    """Tiles pooled from their pieces put together (small tiles), or their inner windows from the
    home chunk and the edges apart (Tuning.dask_split_min_elements, large tiles)."""
    if request.param == "split":
        with tuning.tuned(dask_split_min_elements=0):
            yield request.param
    else:
        yield request.param


def test_float_chunk_invariance_bit_for_bit(tile_split):
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(150):
        x, attrs = float_case(rng)
        try:
            whole = avgpool.average_pool(x, **attrs)
        except avgpool.AvgPoolError as err:
            with pytest.raises(avgpool.AvgPoolError) as raised:
                avgpool_dask.average_pool(chunked(x, rng), **attrs)
            assert str(raised.value) == str(err)
            continue
        for _ in range(2):
            lazy = avgpool_dask.average_pool(chunked(x, rng), **attrs)
            assert lazy.shape == whole.shape and lazy.dtype == whole.dtype
            assert same_bits(lazy.compute(), whole), (x.dtype, x.shape, attrs, lazy.chunks)
        checked += 1
    assert checked > 100


def test_bfloat16():
    import ml_dtypes

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 17, 13)).astype(ml_dtypes.bfloat16)
    whole = avgpool.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    lazy = avgpool_dask.average_pool(da.from_array(x, chunks=(1, 2, 5, 4)), [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert same_bits(lazy.compute(), whole)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_chunk_invariance_bit_for_bit(channels_last, tile_split):
    rng = np.random.default_rng(5 + channels_last)
    checked = 0
    for _ in range(60):
        x, attrs, quant = qlinear_case(rng, channels_last)
        try:
            whole = avgpool.qlinear_average_pool(x, *quant, **attrs)
        except avgpool.AvgPoolError as err:
            with pytest.raises(avgpool.AvgPoolError) as raised:
                avgpool_dask.qlinear_average_pool(chunked(x, rng), *quant, **attrs)
            assert str(raised.value) == str(err)
            continue
        lazy = avgpool_dask.qlinear_average_pool(chunked(x, rng), *quant, **attrs)
        assert same_bits(lazy.compute(), whole), (x.dtype, x.shape, attrs, lazy.chunks)
        checked += 1
    assert checked > 40


def test_building_the_graph_computes_nothing():
    calls = []

    def source(block):
        calls.append(block.shape)
        return block

    x = da.from_array(np.ones((1, 2, 40, 40), np.float32), chunks=(1, 1, 10, 10))
    x = x.map_blocks(source, meta=np.empty((0, 0, 0, 0), np.float32))
    lazy = avgpool_dask.average_pool(x, [7, 7], strides=[1, 1], pads=[3, 3, 3, 3])  # float32 k7: the exact check
    assert calls == []
    lazy.compute()
    assert calls  # the same graph does compute when asked


def test_errors_at_graph_building_name_the_attribute():
    x = da.ones((1, 1, 8, 8), chunks=4, dtype=np.float32)
    with pytest.raises(avgpool.AvgPoolError, match=r"AveragePool-22: .*strides"):
        avgpool_dask.average_pool(x, [3, 3], strides=[0, 1])
    with pytest.raises(avgpool.AvgPoolError, match=r"int32"):
        avgpool_dask.average_pool(x.astype(np.int32), [3, 3])
    with pytest.raises(avgpool.AvgPoolError, match=r"QLinearAveragePool: .*dtype float32"):
        avgpool_dask.qlinear_average_pool(x, 1.0, 0, 1.0, 0, [3, 3])
    with pytest.raises(avgpool.AvgPoolError, match=r"dask.array"):
        avgpool_dask.average_pool([[1.0]], [1])
    # kernels and pads in the billions: refused at once (building such a graph never finished)
    start = time.perf_counter()
    with pytest.raises(avgpool.AvgPoolError, match=r"AveragePool-22: .*output of shape 1x1x4294967305x4294967305"):
        avgpool_dask.average_pool(x, [2**32, 2**32], pads=[2**32] * 4)
    with pytest.raises(avgpool.AvgPoolError, match=r"QLinearAveragePool: .*must fit in memory"):
        avgpool_dask.qlinear_average_pool(x.astype(np.uint8), 1.0, 0, 1.0, 0, [2**31, 2**31], pads=[2**31 - 1] * 4)
    assert time.perf_counter() - start < 30  # a guard against the hang, not a speed claim (it takes ~1 ms)


def test_tasks_read_only_their_tile_and_halo():
    # 1 x 1 x 64 x 64 in 16 x 16 chunks, k3 s2 p1: each tile reads its chunk and one row and one
    # column of its neighbours, never a whole neighbouring chunk, nor a whole axis
    x = da.from_array(np.arange(64 * 64, dtype=np.float64).reshape(1, 1, 64, 64), chunks=(1, 1, 16, 16))
    lazy = avgpool_dask.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert lazy.chunks[2:] == ((8, 8, 8, 8), (8, 8, 8, 8))
    graph = dict(lazy.__dask_graph__())
    cuts = {key: task for key, task in graph.items() if isinstance(key, tuple) and "avgpool-cut" in key[0]}
    tiles = [key for key in graph if isinstance(key, tuple) and key[0] == lazy.name]
    assert len(tiles) == 16
    assert 0 < len(cuts) <= 16  # one task per input chunk that neighbours read from
    biggest = 0
    for task in cuts.values():
        indices = task.args[1] if hasattr(task, "args") else task[2]
        for index in getattr(indices, "value", indices):
            biggest = max(biggest, np.prod([s.stop - s.start for s in index]))
    assert 0 < biggest <= 16  # a row or column of 16 values, or a corner value
    # the largest input a tile reads: its chunk (16 x 16) plus one row and one column
    assert lazy.compute().shape == (1, 1, 32, 32)


def test_global_pooling_reads_whole_planes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 12, 10)).astype(np.float32)
    lazy = avgpool_dask.average_pool(da.from_array(x, chunks=(1, 3, 5, 4)), [12, 10])
    assert lazy.chunks == ((1, 1), (3, 1), (1,), (1,))
    assert same_bits(lazy.compute(), avgpool.average_pool(x, [12, 10]))


def test_empty_outputs_and_inputs():
    x = da.ones((0, 2, 8, 8), chunks=4, dtype=np.float32)
    assert avgpool_dask.average_pool(x, [3, 3]).compute().shape == (0, 2, 6, 6)
    y = da.ones((1, 2, 8, 8), chunks=4, dtype=np.float32)
    assert avgpool_dask.average_pool(y, [3, 3], strides=[9, 9]).shape == (1, 2, 1, 1)


def test_local_cluster_two_processes_same_bits():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 61, 47)).astype(np.float32)
    x[0, 1, 30, 20] = np.nan
    whole = avgpool.average_pool(x, [5, 5], strides=[2, 1], pads=[2, 2, 2, 2], count_include_pad=1)
    with (
        dask.config.set(scheduler=None),
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        lazy = avgpool_dask.average_pool(
            da.from_array(x, chunks=(1, 2, 16, 20)), [5, 5], strides=[2, 1], pads=[2, 2, 2, 2], count_include_pad=1
        )
        result = client.compute(lazy).result()
    assert same_bits(result, whole)


def test_big_endian_input():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 20, 20)).astype(">f4")
    whole = avgpool.average_pool(x, [5, 5], pads=[2, 2, 2, 2])
    lazy = avgpool_dask.average_pool(da.from_array(x, chunks=(1, 1, 7, 6)), [5, 5], pads=[2, 2, 2, 2])
    assert same_bits(lazy.compute(), whole)
    q = rng.integers(0, 255, (1, 2, 9, 9)).astype(np.uint8)
    assert same_bits(
        avgpool_dask.qlinear_average_pool(da.from_array(q, chunks=4), 0.1, 3, 0.2, 1, [3, 3]).compute(),
        avgpool.qlinear_average_pool(q, 0.1, 3, 0.2, 1, [3, 3]),
    )


def _float_args(x):
    from avgpool._ops import onnx as api
    from avgpool._ops import onnx as onnx_dialect

    _, spec, layout = api._validated(
        avgpool_dask._shape_only(x),
        onnx_dialect.op_version(22),
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        auto_pad="NOTSET",
        ceil_mode=0,
        count_include_pad=0,
        dilations=None,
        opset=22,
        layout="NCX",
    )
    return spec, x.shape, x.dtype, layout, tuning.current()


def test_tiles_split_into_their_home_chunk_and_edge_strips():
    # 1 x 1 x 60 x 60 in 20 x 20 chunks, k3 s2 p1: a tile inside the array pools all its outputs
    # from its own chunk as it is, then one strip along each leading edge again from its pieces
    x = da.ones((1, 1, 60, 60), chunks=(1, 1, 20, 20), dtype=np.float32)
    lazy = avgpool_dask.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    graph = dict(lazy.__dask_graph__())
    tile = graph[(lazy.name, 0, 0, 1, 1)].args[2]
    t = avgpool_dask._float_tiling(*_float_args(x))
    assert tile.outputs == ((10, 20), (10, 20)) and tile.homes == ((20, 40), (20, 40))
    assert avgpool_dask._parts(t, tile) == [(((10, 20), (10, 20)), None)]  # a small tile: put together
    with tuning.tuned(dask_split_min_elements=0):
        t = avgpool_dask._float_tiling(*_float_args(x))
    assert avgpool_dask._parts(t, tile) == [
        (((10, 20), (10, 20)), (20, 20)),
        (((10, 11), (10, 20)), None),
        (((11, 20), (10, 11)), None),
    ]
    corner = graph[(lazy.name, 0, 0, 0, 0)].args[2]
    assert avgpool_dask._parts(t, corner) == [(((0, 10), (0, 10)), (0, 0))]  # the padding is the array's
    assert lazy.compute().tobytes() == np.ones((1, 1, 30, 30), np.float32).tobytes()


def test_chunks_read_while_the_kernels_load_wait_past_the_bound(monkeypatch):
    # threads: the first tile's preparation (avgpool.dask._load) made slow, every chunk cut
    # meanwhile waits for it (dask_read_ahead_bytes 0): nothing deadlocks, and the result is the same
    parts, waited = avgpool_dask._parts, []

    def slow_parts(t, tile):
        if not waited:
            waited.append(tile)
            time.sleep(0.3)
        return parts(t, tile)

    monkeypatch.setattr(avgpool_dask, "_parts", slow_parts)
    x = np.random.default_rng(5).random((2, 3, 64, 64), dtype=np.float32)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    with tuning.tuned(dask_read_ahead_bytes=0, dask_split_min_elements=0):
        lazy = avgpool_dask.average_pool(da.from_array(x, chunks=(1, 1, 16, 16)), **attrs)
    with dask.config.set(scheduler="threads", num_workers=2):
        got = lazy.compute()
    assert waited and not avgpool_dask._LOADING
    assert same_bits(got, avgpool.average_pool(x, **attrs))


@pytest.mark.parametrize(
    ("dtype", "kernel", "stride", "reads"),
    [(np.float32, 3, 2, 1), (np.float64, 7, 1, 1), (np.float32, 7, 2, 1), (np.float32, 7, 1, 2)],
)
def test_each_input_chunk_is_read_once(dtype, kernel, stride, reads):
    # a tile's halo comes from its neighbours' chunks as read for their own tiles (thin pieces cut
    # from them), never from a second reading; float32 windows summed by the exact running sums
    # (kernels of 5 and more, stride 1 here) read the input once more for the exact check of the
    # whole slab (a reduction to two numbers per slab)
    counts: dict = {}

    def source(block, block_info=None):
        where = tuple(map(tuple, block_info[0]["array-location"]))
        counts[where] = counts.get(where, 0) + 1
        return block

    x = da.from_array(np.random.default_rng(4).random((1, 2, 48, 40)).astype(dtype), chunks=(1, 1, 16, 16))
    lazy = avgpool_dask.average_pool(
        x.map_blocks(source, dtype=dtype), [kernel, kernel], strides=[stride, stride], pads=[kernel // 2] * 4
    )
    graph = dict(lazy.__dask_graph__())
    assert all(not isinstance(task, tuple) for task in graph.values())  # dask's task API, no legacy tuples
    assert same_bits(
        lazy.compute(),
        avgpool.average_pool(x.compute(), [kernel, kernel], strides=[stride, stride], pads=[kernel // 2] * 4),
    )
    assert len(counts) == 2 * 3 * 3 and set(counts.values()) == {reads}


@pytest.mark.parametrize(
    "make",
    [
        lambda x: da.from_array(x, chunks=(1, 1, 2, 2)).rechunk((1, 1, 4, 4)),
        lambda x: da.from_array(np.pad(x, ((0, 0), (0, 0), (0, 0), (0, 2))), chunks=(1, 1, 4, 4))[..., :8],
        lambda x: da.from_array(x[0, 0], chunks=(4, 4))[None, None],
    ],
    ids=["rechunked", "sliced", "reshaped"],
)
def test_inputs_with_layers_of_their_own_take_the_exact_path_too(make):
    # the exact path (float32, kernels of 5 and more) reads the input a second time under new keys;
    # dask's clone left the tasks' own keys at their old names there, and dask's fusion of linear
    # chains then failed on any input with a layer of its own ("Cannot fuse tasks with multiple outputs")
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    for kernel in ([3, 3], [5, 5]):
        assert same_bits(avgpool_dask.average_pool(make(x), kernel).compute(), avgpool.average_pool(x, kernel))


def test_an_input_numpy_cannot_hold_is_refused_clearly():
    huge = da.zeros((10**6,) * 4, chunks=(1, 1, 1024, 1024), dtype=np.float32)  # more bytes than numpy addresses
    with pytest.raises(avgpool.AvgPoolError, match=r"^AveragePool-22: the input \(float32, shape \(1000000,"):
        avgpool_dask.average_pool(huge, [2, 2])
    strings = da.from_array(np.array([[["a", "b", "c"]]], dtype=np.dtypes.StringDType()), chunks=1)
    with pytest.raises(avgpool.AvgPoolError, match=r"^AveragePool-22: the input \(StringDType\(\)"):
        avgpool_dask.average_pool(strings, [2])
