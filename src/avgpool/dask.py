"""Average pooling of Dask arrays: lazy, chunk by chunk, and bit for bit the numpy result.

``avgpool.dask.average_pool(x, ...)`` takes a ``dask.array.Array`` and the keyword attributes
of :func:`avgpool.average_pool`, and returns a lazy ``dask.array.Array``: every attribute,
dtype and shape is validated (with the same :class:`avgpool.AvgPoolError` messages) when the
graph is built, and nothing is computed until asked.

>>> import numpy as np, dask.array as da, avgpool, avgpool.dask
>>> x = np.arange(2 * 3 * 10 * 10, dtype=np.float32).reshape(2, 3, 10, 10)
>>> lazy = avgpool.dask.average_pool(da.from_array(x, chunks=(1, 2, 4, 3)), [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
>>> lazy.chunks[2:]  # along the pooled axes, derived from the input's chunks
((2, 2, 1), (2, 1, 2))
>>> bool((lazy.compute() == avgpool.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])).all())
True

The graph (:func:`_pooled`, in dask's task API) has one task per output tile and, before it,
one cheap task per input chunk that its neighbours' tiles read from, which cuts their thin halo
pieces out of it (each input chunk is read once), and one task that loads the kernels while the
first chunks are read (:func:`_load`): output chunks follow the input
chunks along the pooled axes (each output goes with the input chunk that holds its window's
centre) and equal them along N and C; no axis is rechunked whole, nothing is padded. Each tile
is computed by :mod:`avgpool._core.tiles` exactly as the whole array would be, so the result does not
depend on the chunking. Float32 with kernels of 5 and more decides per slab (N x C plane) whether
its exact integer sums apply from the values of the whole slab: that needs one extra reading of
the input (a reduction to two numbers per slab) before the tiles are computed.

Needs the ``dask`` extra: ``pip install 'avgpool[dask]'``; ``import avgpool`` does not import it.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask._task_spec import convert_legacy_graph
from dask.array.core import concatenate3
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.task_spec import DataNode, List, Task, TaskRef

from ._core import quantized_pools, tiles, tuning
from ._core.quantization import Geometry, global_scale
from ._core.shape import AxisGeometry
from ._core.spec import Layout, PoolSpec
from ._ops import onnx as onnx_dialect
from ._ops import qlinear as qlinear_dialect
from ._ops._args import check_missing_options
from .errors import AvgPoolError, error_context

__all__ = ["average_pool", "pool_spec", "qlinear_average_pool"]


def average_pool(
    x: Any,
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    dilations: Sequence[int] | None = None,
    opset: int = 22,
    layout: str = "NCX",
    skipna: bool = False,
    min_count: int = 1,
) -> da.Array:
    """ONNX AveragePool of a Dask array (any chunking), lazily: the same attributes, results and
    errors as :func:`avgpool.average_pool` on the computed array, bit for bit; ``skipna`` and
    ``min_count`` too (docs/semantics.md 1.6)."""
    from ._ops import onnx as api

    x = _as_dask(x)
    version = onnx_dialect.op_version(opset)
    with error_context(onnx_dialect.operator_label(version)):
        args = (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
        _, spec, layout_ = api.validated_call_arguments(_shape_only(x), version, args)
        check_missing_options(skipna, min_count)
        if skipna:
            return _skipping_nan(x, spec, layout_, int(min_count))
        return pool_spec(x, spec, layout_)  # the output shape: its errors are labelled too


def _skipping_nan(x: da.Array, spec: PoolSpec, layout: Layout, min_count: int) -> da.Array:
    """:func:`avgpool.average_pool`'s ``skipna=True``, lazily, in the same elementwise steps as the
    numpy path (``_ops.onnx._present_means``): the same bits."""
    from ._ops import onnx as api
    from ._ops.block_mean import round_to

    present = ~da.isnan(x)
    sums = pool_spec(da.where(present, x, np.zeros((), x.dtype)), spec, layout)
    share = pool_spec(present.astype(np.float32), spec, layout).astype(np.float64)
    inside, divisor = api._tap_counts(spec, tuple(x.shape), layout)
    counts = da.rint(share * divisor)
    counts = da.where(da.isnan(counts), 0.0, counts)  # no valid tap: 0 / 0 in the share
    missing = inside - counts
    scaled = sums.astype(np.float64) * (divisor / da.maximum(divisor - missing, 1))
    means = da.where(missing == 0, sums, scaled.map_blocks(round_to, x.dtype, dtype=x.dtype))
    return da.where(counts < min_count, np.nan, means).astype(x.dtype)


def pool_spec(x: da.Array, spec: PoolSpec, layout: Layout) -> da.Array:
    """A canonical spec (:class:`avgpool._core.spec.PoolSpec`, as a dialect validates and translates
    its attributes for ``x``'s shape) applied to a float Dask array of a dtype that dialect
    accepts, lazily: the chunked path of every dialect that translates into one (the CLI's
    OpenVINO and oneDNN); bit for bit what :func:`avgpool._core.engine.prepare` gives on the whole array."""
    x = _as_dask(x)
    get_tiling = functools.partial(_float_tiling, spec, x.shape, x.dtype, layout, tuning.current())
    t = get_tiling()
    flags = _exact_slabs(x, layout, t.headroom) if t.exact else None
    return _pooled(x, t, get_tiling, _float_call, flags)


def qlinear_average_pool(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    channels_last: bool | int = False,
) -> da.Array:
    """onnxruntime's QLinearAveragePool of a uint8/int8 Dask array, lazily: the same results
    and errors as :func:`avgpool.qlinear_average_pool` on the computed array, bit for bit."""
    x = _as_dask(x)
    with error_context(qlinear_dialect.LABEL):
        qlinear_dialect.check_dtype(x.dtype)
        geometry = qlinear_dialect.make_geometry(
            x.shape, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last
        )
        get_tiling = functools.partial(_qlinear_tiling, x.shape, x.dtype, geometry, tuning.current())
        t = get_tiling()
        params = qlinear_dialect.make_quant_params(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point)
        if geometry.global_path:
            global_scale(params, geometry.image_size)  # onnxruntime's range check, now
    # the tasks name their operator by its geometry (a spec and a few values, as the float tasks' spec)
    return _pooled(x, t, get_tiling, functools.partial(_qlinear_call, params), None)


def _as_dask(x: Any) -> da.Array:
    """``x`` as a dask array of native byte order (zarr v2 stores hold big-endian ones; the
    kernels read native numbers)."""
    if isinstance(x, np.ndarray):
        x = da.from_array(x)
    if not isinstance(x, da.Array):
        raise AvgPoolError(f"avgpool.dask takes a dask.array.Array (or a numpy array), got {type(x).__name__}")
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


def _shape_only(x: da.Array) -> np.ndarray:
    """An array of ``x``'s shape and dtype holding no data (one element, strides 0), for the
    validation that the numpy functions do; AvgPoolError where numpy has no such array (a dtype
    it cannot hold, as zarr's variable-length strings, or more bytes than it can address)."""
    try:
        return np.lib.stride_tricks.as_strided(
            np.zeros(1, x.dtype), shape=x.shape, strides=(0,) * x.ndim, writeable=False
        )
    except (TypeError, ValueError) as err:
        raise AvgPoolError(f"the input ({x.dtype}, shape {x.shape}) cannot be pooled as a numpy array: {err}") from None


# Each task names its operator by its spec (a few integers) and the tuning the graph was built
# under, and rebuilds the window plans on the worker, once per process: a task carrying them would
# ship the plans of the whole axes with every tile.
@functools.lru_cache(maxsize=16)
def _float_tiling(
    spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, tuned_by: tuning.Tuning
) -> tiles.Tiling:
    with tuning.using(tuned_by):
        return tiles.tiling(spec, shape, dtype, layout)


@functools.lru_cache(maxsize=16)
def _qlinear_tiling(
    shape: tuple[int, ...], dtype: np.dtype, geometry: Geometry, tuned_by: tuning.Tuning
) -> tiles.QLinearTiling:
    with tuning.using(tuned_by):
        return quantized_pools.qlinear_tiling(shape, dtype, geometry)


def _float_call(
    t: tiles.Tiling,
    region: np.ndarray,
    outputs: tiles.Ranges,
    exact: np.ndarray | None,
    starts: tuple[int, ...] | None,
    out: np.ndarray | None,
) -> np.ndarray:
    return t.pool(region, outputs, exact, starts, out)


def _qlinear_call(
    params: Any,
    t: tiles.QLinearTiling,
    region: np.ndarray,
    outputs: tiles.Ranges,
    _: None,
    starts: tuple[int, ...] | None,
    out: np.ndarray | None,
) -> np.ndarray:
    return t.pool(region, outputs, params, starts, out)


def _exact_of(stats: list, headroom: int) -> np.ndarray:
    """Whether each slab of a group of chunks allows the exact sums, from every chunk's
    :func:`avgpool._core.tiles.slab_bit_range`."""
    top = np.maximum.reduce([t for t, _ in stats])
    bottom = np.minimum.reduce([b for _, b in stats])
    return tiles.exact_allowed(top, bottom, headroom)


def _exact_slabs(x: da.Array, layout: Layout, headroom: int) -> da.Array:
    """Per slab (N x C in NCX, N in NXC), chunked like ``x``: whether the whole slab's values
    allow the exact sums (:func:`avgpool._core.tiles.exact_allowed`). Computed from a second reading
    of the input (:func:`_second_reading`), so that the tiles need not wait with every chunk held:
    one task per chunk reduces it to two numbers per slab, one per group of slabs combines
    them (dask's generic reductions took five times as many tasks, which cost more than the
    pooling on 256 x 256 chunks)."""
    graph, renamed = _second_reading(x)
    kept = 2 if layout is Layout.NCX else 1
    name = f"avgpool-exact-{tokenize(x, layout, headroom)}"
    groups: dict = {}
    for block in itertools.product(*(range(len(c)) for c in x.chunks)):
        key, chunk = (f"{name}-chunk", *block), (x.name, *block)
        graph[key] = Task(key, tiles.slab_bit_range, TaskRef(renamed.get(chunk, chunk)), layout)
        groups.setdefault(block[:kept], []).append(TaskRef(key))
    for group, refs in groups.items():
        graph[(name, *group)] = Task((name, *group), _exact_of, List(*refs), headroom)
    hlg = HighLevelGraph.from_collections(name, graph, dependencies=[x])
    return da.Array(hlg, name, x.chunks[:kept], meta=np.empty((0,) * kept, bool))


def _second_reading(x: da.Array) -> tuple[dict, dict]:
    """The tasks that compute ``x``, copied under keys of their own so that they run a second
    time, and the new key of each key copied; the references between copied tasks are renamed
    alike. What the graph holds as data keeps its key, and the copy reads it there: a value in
    the graph (da.from_array's chunks, which a copy would send to the scheduler twice), or data
    on a cluster (a persisted array's chunks, a scattered block), whose keys exist only there, as
    futures, and are no task of the graph (tests/test_dask_cluster.py). Not dask's ``clone``: it
    renames the graph's keys but not each task's own ``key``, nor an alias's target (dask
    2026.8), and dask's fusion of linear chains then fails on any input with layers of its own
    ("Cannot fuse tasks with multiple outputs": a rechunked or sliced array, a 2-D xarray
    DataArray reshaped to 4-D; tests/test_dask.py, tests/test_xarray.py)."""
    # (the private convert_legacy_graph: dask has no public way to read a graph's values, which
    # may be legacy tuples, as nodes; it leaves futures out, as the data they stand for is no task)
    graph = convert_legacy_graph(dict(x.__dask_graph__()))
    suffix = "-avgpool-again-" + tokenize(x.name)
    renamed = {
        key: (key[0] + suffix, *key[1:]) if isinstance(key, tuple) else key + suffix
        for key, node in graph.items()
        if not isinstance(node, DataNode)
    }
    return {new: graph[key].substitute(renamed, key=new) for key, new in renamed.items()}, renamed


def output_chunks(geometry: AxisGeometry, input_chunks: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """The output ranges of one pooled axis, one per input chunk that holds the centre of some
    window (clamped to the input), in order, each with that chunk's index: the output's chunks
    follow the input's."""
    if geometry.out == 0:
        return []
    bounds = np.cumsum(input_chunks)
    centre = np.arange(geometry.out, dtype=np.int64) * geometry.stride - geometry.pad_begin + (geometry.extent - 1) // 2
    centre = np.clip(centre, 0, max(0, geometry.length - 1))
    chunk = np.searchsorted(bounds, centre, side="right")
    starts = np.flatnonzero(np.diff(chunk, prepend=-1))
    stops = np.append(starts[1:], geometry.out)
    return [(int(a), int(b), int(chunk[a])) for a, b in zip(starts, stops)]


def _pieces(chunks: tuple[int, ...], start: int, stop: int) -> list[tuple[int, slice]]:
    """The input chunks that ``[start, stop)`` overlaps along one axis, each with its slice."""
    pieces, offset = [], 0
    for index, size in enumerate(chunks):
        lo, hi = max(start, offset), min(stop, offset + size)
        if hi > lo:
            pieces.append((index, slice(lo - offset, hi - offset)))
        offset += size
    return pieces or [(0, slice(0, 0))]


def _cut(block: np.ndarray, indices: tuple[tuple[slice, ...], ...], load_key: str) -> tuple[np.ndarray, ...]:
    """The pieces of an input chunk that its neighbours' tiles read, copied (a view would keep
    the whole chunk in memory): one task per chunk, not one per piece (dask's scheduling then
    cost more than the pooling on 256 x 256 chunks). While :func:`_load` runs in this process,
    the chunks cut (read ahead of their tiles, which wait for it) are counted, and past the
    tuning's ``dask_read_ahead_bytes`` the task waits for the kernels, holding its thread: that
    bounds the memory of chunks read ahead."""
    pieces = tuple(np.array(block[index]) for index in indices)
    loading = _LOADING.get(load_key)
    if loading is not None:
        loading[1] += block.nbytes
        if loading[1] > loading[2]:
            loading[0].wait()
    return pieces


#: The loads in progress in this process: per load task's key, its event (set once done), the
#: bytes of the chunks cut since it began, and how many may be (Tuning.dask_read_ahead_bytes).
_LOADING: dict[str, list] = {}


@dataclass(frozen=True)
class _Tile:
    """What a tile task knows besides its data: its outputs (a range per pooled axis), per array
    axis the input range of each piece it reads, and per pooled axis its home chunk's range (or
    None). One object, which dask does not search for keys (nested lists cost it 0.1 s per
    1000 tasks)."""

    outputs: tiles.Ranges
    spans: tuple
    homes: tuple


def _parts(t: Any, tile: _Tile) -> list[tuple[tiles.Ranges, tuple[int, ...] | None]]:
    """The pool calls of a tile: per call its outputs, and the start of its home chunk along each
    pooled axis where the call reads that chunk as it is, else None (it reads its input range
    from the pieces put together). A large tile is pooled whole from its own input chunk (its
    home along each pooled axis, held whole among the pieces), straight into the tile's output:
    right where the chunk holds a window's taps, and the few outputs along the chunk's edges,
    whose windows reach into the neighbours, again from their pieces (no copy of the chunk, nor
    of the outputs: a 16 MiB copy per 2048 x 2048 float32 tile cost more than its pooling). One
    call of the whole tile from its pieces put together where that does not apply, or the tile
    is small."""
    outputs, spans, homes = tile.outputs, tile.spans, tile.homes
    small = math.prod(span[-1][1] - span[0][0] for span in spans) < t.tuned_by.dask_split_min_elements
    if small or any(home is None for home in homes):
        return [(outputs, None)]
    inner = tuple(t.inner_outputs(i, start, stop, homes[i]) for i, (start, stop) in enumerate(outputs))
    if any(a == b for a, b in inner):
        return [(outputs, None)]
    # the edges peeled one axis at a time: along axis i, the outputs before and after the inner
    # ones, inner along the axes before i, whole along the axes after it (2 x ndim at most, each
    # edge one strip)
    parts = [(outputs, tuple(home[0] for home in homes))]
    for i, (start, stop) in enumerate(outputs):
        for edge in ((start, inner[i][0]), (inner[i][1], stop)):
            if edge[1] > edge[0]:
                parts.append((inner[:i] + (edge,) + outputs[i + 1 :], None))
    return parts


def _load(key: str, tiling: Callable, tile: _Tile, chunk: tuple[int, ...], read_ahead: int) -> None:
    """Prepares the first pool call of a large tile (its home chunk of shape ``chunk``, or its
    pieces put together), so that a worker loads numba and the kernels in a task of their own,
    on one thread while the others read chunks (as the first tiles, the threads would all wait
    for it: 0.5-0.8 s at the start of a job; the chunks read meanwhile are bounded, see :func:`_cut`)."""
    _LOADING[key] = loading = [threading.Event(), 0, read_ahead]
    try:
        t = tiling()
        outputs, starts = _parts(t, tile)[0]
        shape = list(chunk)
        for i, axis in enumerate(t.spatial_axes):
            span = tile.spans[axis]
            shape[axis] = tile.homes[i][1] - tile.homes[i][0] if starts is not None else span[-1][1] - span[0][0]
        t.prepare(outputs, tuple(shape), starts)
    finally:
        if _LOADING.get(key) is loading:  # (the same graph may be computed twice at once)
            del _LOADING[key]
        loading[0].set()


def _run_tile(tiling: Callable, call: Callable, tile: _Tile, pieces: list, extra: Any, _loaded: None) -> np.ndarray:
    """One output tile from the pieces of input it reads, in the calls :func:`_parts` gives
    (after :func:`_load`)."""
    t = tiling()
    (outputs, starts), *edges = _parts(t, tile)
    spans, spatial = tile.spans, t.spatial_axes
    if starts is None:  # the tile is one piece of work: put together
        return call(t, concatenate3(pieces), outputs, extra, None, None)
    home = [None] * len(spans)
    for i, axis in enumerate(spatial):
        home[axis] = tile.homes[i]
    region = _select(
        pieces,
        [next(j for j, span in enumerate(spans[axis]) if home[axis] in (None, span)) for axis in range(len(spans))],
    )
    out = call(t, region, outputs, extra, starts, None)
    index = [slice(None)] * out.ndim
    wanted = [None] * len(spans)
    for sub_outputs, _ in edges:  # overwrite what the home chunk alone cannot give
        for i, axis in enumerate(spatial):
            wanted[axis] = t.input_range(i, *sub_outputs[i])
            index[axis] = slice(sub_outputs[i][0] - outputs[i][0], sub_outputs[i][1] - outputs[i][0])
        call(t, _gather(pieces, spans, wanted), sub_outputs, extra, None, out[tuple(index)])
    return out


def _select(pieces: list, chosen: list[int]) -> np.ndarray:
    """The one piece at the chosen index of every axis of the nested ``pieces``."""
    piece = pieces
    for index in chosen:
        piece = piece[index]
    return piece


def _gather(pieces: list, spans: list, wanted: list) -> np.ndarray:
    """The input range ``wanted[axis]`` (None: all) put together from the nested ``pieces``."""

    def nest(level: Any, axis: int, index: tuple) -> Any:
        if axis == len(spans):
            return level[index]
        items = []
        for piece, (lo, hi) in zip(level, spans[axis]):
            a, b = wanted[axis] if wanted[axis] is not None else (lo, hi)
            if min(b, hi) > max(a, lo):
                items.append(nest(piece, axis + 1, index + (slice(max(a, lo) - lo, min(b, hi) - lo),)))
        return items

    return concatenate3(nest(pieces, 0, ()))


def _pooled(x: da.Array, tiling: Any, get_tiling: Callable, call: Callable, extra: da.Array | None) -> da.Array:
    """The graph: per output tile, the pieces of input chunks its windows read, and the tile."""
    spatial = tiling.spatial_axes
    out_ranges: list[list[tuple[int, int, int]]] = [[(0, n, 0)] for n in x.shape]  # placeholders for N and C
    chunks = list(x.chunks)
    for i, axis in enumerate(spatial):
        out_ranges[axis] = output_chunks(tiling.axes[i], x.chunks[axis])
        chunks[axis] = tuple(b - a for a, b, _ in out_ranges[axis]) or (0,)
    token = tokenize(x, tiling.out_shape, get_tiling, call, extra)
    name, cut_name = f"avgpool-{token}", f"avgpool-cut-{token}"
    if any(len(out_ranges[axis]) == 0 for axis in spatial) or 0 in x.shape:
        return da.empty(tiling.out_shape, dtype=x.dtype, chunks=tuple(chunks))
    offsets = [np.concatenate([[0], np.cumsum(c)]).tolist() for c in x.chunks]
    graph: dict = {}
    cuts: dict = {}  # input chunk key -> the pieces cut from it, in order
    load_key, largest = f"avgpool-load-{token}", (-1, None, None)
    for block in itertools.product(*(range(len(c)) for c in chunks)):
        outputs = tuple(out_ranges[axis][block[axis]][:2] for axis in spatial)
        per_axis, spans, homes = _tile_pieces(x, tiling, out_ranges, offsets, block, outputs)
        nested = _nest(per_axis, _piece_refs(x, per_axis, cuts, cut_name))
        extra_ref = None
        if extra is not None:
            extra_ref = TaskRef(
                (extra.name, block[0], block[1]) if tiling.layout is Layout.NCX else (extra.name, block[0])
            )
        tile = _Tile(outputs, spans, homes)
        key = (name, *block)
        graph[key] = Task(key, _run_tile, get_tiling, call, tile, nested, extra_ref, TaskRef(load_key))
        size = math.prod(b - a for a, b in outputs)
        if size > largest[0]:
            largest = (size, tile, tuple(x.chunks[axis][block[axis]] for axis in range(x.ndim)))
    graph[load_key] = Task(load_key, _load, load_key, get_tiling, *largest[1:], tiling.tuned_by.dask_read_ahead_bytes)
    for source, indices in cuts.items():
        key = (cut_name, *source[1:])
        graph[key] = Task(key, _cut, TaskRef(source), tuple(indices), load_key)
    dependencies = [x] if extra is None else [x, extra]
    hlg = HighLevelGraph.from_collections(name, graph, dependencies=dependencies)
    return da.Array(hlg, name, tuple(chunks), meta=np.empty((0,) * x.ndim, x.dtype))


def _tile_pieces(
    x: da.Array, tiling: Any, out_ranges: list, offsets: list, block: tuple[int, ...], outputs: tiles.Ranges
) -> tuple[list, tuple, tuple]:
    """What the tile of output chunk ``block`` reads: per axis the input chunks and the slice of
    each (:func:`_pieces`), their input ranges (spans), and per pooled axis the range of its home
    chunk where the tile reads that chunk whole (else None)."""
    spatial = tiling.spatial_axes
    per_axis, homes = [], []
    for axis in range(x.ndim):
        if axis in spatial:
            i = spatial.index(axis)
            per_axis.append(_pieces(x.chunks[axis], *tiling.input_range(i, *outputs[i])))
            home = out_ranges[axis][block[axis]][2]
            whole = any(j == home and s.stop - s.start == x.chunks[axis][j] for j, s in per_axis[-1])
            homes.append((offsets[axis][home], offsets[axis][home + 1]) if whole else None)
        else:
            size = x.chunks[axis][block[axis]]
            per_axis.append([(block[axis], slice(0, size))])
    spans = tuple(
        tuple((offsets[axis][j] + s.start, offsets[axis][j] + s.stop) for j, s in per_axis[axis])
        for axis in range(x.ndim)
    )
    return per_axis, spans, tuple(homes)


def _piece_refs(x: da.Array, per_axis: list, cuts: dict, cut_name: str) -> dict:
    """Per combination of the chunks a tile reads (one per axis), the reference to its piece: the
    chunk itself where the tile reads all of it, else its piece of the chunk's cut, taken inside
    the tile's task (no task of its own), whose slice is added to ``cuts``."""
    refs = {}
    for combo in itertools.product(*per_axis):
        source = (x.name, *(index for index, _ in combo))
        index = tuple(s for _, s in combo)
        whole = all(s.start == 0 and s.stop == x.chunks[axis][i] for axis, (i, s) in enumerate(combo))
        chunk = tuple(i for i, _ in combo)
        if whole:
            refs[chunk] = TaskRef(source)
        else:
            pieces = cuts.setdefault(source, [])
            refs[chunk] = Task(None, operator.getitem, TaskRef((cut_name, *chunk)), len(pieces))
            pieces.append(index)
    return refs


def _nest(per_axis: list, refs: dict, prefix: tuple = ()) -> Any:
    """The pieces' references as nested lists, one level per axis (dask's concatenate3 layout)."""
    level = len(prefix)
    if level == len(per_axis):
        return refs[prefix]
    return List(*(_nest(per_axis, refs, prefix + (index,)) for index, _ in per_axis[level]))
