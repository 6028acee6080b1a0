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

The graph (:func:`_pooled`) has one task per output tile and, before it, one cheap task per
piece of an input chunk that a tile reads (its halo included): output chunks follow the input
chunks along the pooled axes (each output goes with the input chunk that holds its window's
centre) and equal them along N and C; no axis is rechunked whole, nothing is padded. Each tile
is computed by :mod:`avgpool.tiles` exactly as the whole array would be, so the result does not
depend on the chunking. Float32 with kernels of 5 and more decides per slab (N x C plane) whether
its exact integer sums apply from the values of the whole slab: that needs one extra reading of
the input (a reduction to two numbers per slab) before the tiles are computed.

Needs the ``dask`` extra: ``pip install 'avgpool[dask]'``; ``import avgpool`` does not import it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import dask.array as da
from dask.array.core import concatenate3
from dask.base import tokenize
from dask.graph_manipulation import clone
from dask.highlevelgraph import HighLevelGraph

from . import tiles
from .dialects import onnx as onnx_dialect
from .dialects import qlinear as qlinear_dialect
from .errors import AvgPoolError, error_context
from .shape import AxisGeometry
from .spec import Layout, PoolSpec

__all__ = ["average_pool", "qlinear_average_pool"]


def average_pool(x: Any, kernel_shape: Sequence[int], *, strides: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, auto_pad: str = "NOTSET", ceil_mode: bool | int = False,
                 count_include_pad: bool | int = False, dilations: Sequence[int] | None = None, opset: int = 22,
                 layout: str = "NCX") -> da.Array:
    """ONNX AveragePool of a Dask array (any chunking), lazily: the same attributes, results and
    errors as :func:`avgpool.average_pool` on the computed array, bit for bit."""
    from . import api

    x = _as_dask(x)
    version = onnx_dialect.op_version(opset)
    with error_context(onnx_dialect.label(version)):
        _, spec, layout_ = api._validated(_shape_only(x), version, kernel_shape=kernel_shape, strides=strides,
                                          pads=pads, auto_pad=auto_pad, ceil_mode=ceil_mode,
                                          count_include_pad=count_include_pad, dilations=dilations, opset=opset,
                                          layout=layout)
        t = _float_tiling(spec, x.shape, x.dtype, layout_)  # the output shape: errors here too
    if not t.exact:
        return _pooled(x, t, functools.partial(_float_tile, spec, x.shape, x.dtype, layout_), None)
    flags = _exact_slabs(x, layout_, t.headroom)
    return _pooled(x, t, functools.partial(_float_tile, spec, x.shape, x.dtype, layout_), flags)


def qlinear_average_pool(x: Any, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any,
                         kernel_shape: Sequence[int], *, strides: Sequence[int] | None = None,
                         pads: Sequence[int] | None = None, auto_pad: str = "NOTSET", ceil_mode: bool | int = False,
                         count_include_pad: bool | int = False, channels_last: bool | int = False) -> da.Array:
    """onnxruntime's QLinearAveragePool of a uint8/int8 Dask array, lazily: the same results
    and errors as :func:`avgpool.qlinear_average_pool` on the computed array, bit for bit."""
    x = _as_dask(x)
    with error_context(qlinear_dialect.LABEL):
        qlinear_dialect.check_dtype(x.dtype)
        t = tiles.qlinear_tiling(x.shape, x.dtype, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad,
                                 channels_last)
        params = qlinear_dialect.make_quant_params(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point)
        if t.geometry.global_path:
            qlinear_dialect.global_scale(params, t.geometry.image_size)  # onnxruntime's range check, now
    # validated: the same values in hashable form, which the tasks name their operator by
    attributes = (tuple(map(int, kernel_shape)), _ints(strides), _ints(pads), str(auto_pad), bool(ceil_mode),
                  bool(count_include_pad), bool(channels_last))
    return _pooled(x, t, functools.partial(_qlinear_tile, x.shape, x.dtype, attributes, params), None)


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
    validation that the numpy functions do."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, x.dtype), shape=x.shape, strides=(0,) * x.ndim,
                                           writeable=False)


def _ints(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(map(int, values))


# Each task names its operator by its spec (a few integers) and rebuilds the window plans on the
# worker, once per process: a task carrying them would ship the plans of the whole axes with every tile.
_float_tiling = functools.lru_cache(maxsize=16)(tiles.tiling)
_qlinear_tiling = functools.lru_cache(maxsize=16)(tiles.qlinear_tiling)


def _float_tile(spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, region: np.ndarray,
                outputs: tiles.Ranges, exact: np.ndarray | None) -> np.ndarray:
    return _float_tiling(spec, shape, dtype, layout).pool(region, outputs, exact)


def _qlinear_tile(shape: tuple[int, ...], dtype: np.dtype, attributes: tuple, params: Any, region: np.ndarray,
                  outputs: tiles.Ranges, _: None) -> np.ndarray:
    return _qlinear_tiling(shape, dtype, *attributes).pool(region, outputs, params)


def _magnitude(block: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(block).view(np.uint32) & np.uint32(0x7FFFFFFF)


def _magnitude_less_one(block: np.ndarray) -> np.ndarray:
    return _magnitude(block) - np.uint32(1)  # zero wraps to the largest value: ignored by min


def _exact_slabs(x: da.Array, layout: Layout, headroom: int) -> da.Array:
    """Per slab (N x C in NCX, N in NXC), chunked like ``x``: whether the whole slab's values
    allow the exact sums (:func:`avgpool.tiles.exact_allowed`). Computed from a second reading
    of the input (a clone of its graph), so that the tiles need not wait with every chunk held."""
    source = clone(x, assume_layers=False)
    axes = tuple(range(2, x.ndim)) if layout is Layout.NCX else tuple(range(1, x.ndim))
    bits = np.empty((0,) * x.ndim, np.uint32)
    top = source.map_blocks(_magnitude, dtype=np.uint32, meta=bits).max(axis=axes)
    bottom = source.map_blocks(_magnitude_less_one, dtype=np.uint32, meta=bits).min(axis=axes)
    return da.map_blocks(tiles.exact_allowed, top, bottom, headroom, dtype=bool, meta=np.empty((0,) * top.ndim, bool))


def output_chunks(geometry: AxisGeometry, input_chunks: tuple[int, ...]) -> list[tuple[int, int]]:
    """The output ranges of one pooled axis, one per input chunk that holds the centre of some
    window (clamped to the input), in order: the output's chunks follow the input's."""
    if geometry.out == 0:
        return []
    bounds = np.cumsum(input_chunks)
    centre = np.arange(geometry.out, dtype=np.int64) * geometry.stride - geometry.pad_begin + (geometry.extent - 1) // 2
    centre = np.clip(centre, 0, max(0, geometry.length - 1))
    chunk = np.searchsorted(bounds, centre, side="right")
    starts = np.flatnonzero(np.diff(chunk, prepend=-1))
    stops = np.append(starts[1:], geometry.out)
    return [(int(a), int(b)) for a, b in zip(starts, stops)]


def _pieces(chunks: tuple[int, ...], start: int, stop: int) -> list[tuple[int, slice]]:
    """The input chunks that ``[start, stop)`` overlaps along one axis, each with its slice."""
    pieces, offset = [], 0
    for index, size in enumerate(chunks):
        lo, hi = max(start, offset), min(stop, offset + size)
        if hi > lo:
            pieces.append((index, slice(lo - offset, hi - offset)))
        offset += size
    return pieces or [(0, slice(0, 0))]


def _cut(block: np.ndarray, index: tuple[slice, ...]) -> np.ndarray:
    """A piece of an input chunk, copied: a view would keep the whole chunk in memory."""
    return np.array(block[index])


def _run_tile(pool: Callable, outputs: tiles.Ranges, pieces: list, extra: Any) -> np.ndarray:
    return pool(concatenate3(pieces), outputs, extra)


def _pooled(x: da.Array, tiling: Any, pool: Callable, extra: da.Array | None) -> da.Array:
    """The graph: per output tile, the pieces of input chunks its windows read, and the tile."""
    spatial = tiling.spatial_axes
    out_ranges: list[list[tuple[int, int]]] = [[(0, n)] for n in x.shape]  # placeholders for N and C
    chunks = list(x.chunks)
    for i, axis in enumerate(spatial):
        out_ranges[axis] = output_chunks(tiling.axes[i], x.chunks[axis])
        chunks[axis] = tuple(b - a for a, b in out_ranges[axis]) or (0,)
    token = tokenize(x, tiling.out_shape, pool, extra)
    name, cut_name = f"avgpool-{token}", f"avgpool-cut-{token}"
    if any(len(r) == 0 for r in (out_ranges[axis] for axis in spatial)) or 0 in x.shape:
        return da.empty(tiling.out_shape, dtype=x.dtype, chunks=tuple(chunks))
    graph: dict = {}
    for block in itertools.product(*(range(len(c)) for c in chunks)):
        outputs = tuple(out_ranges[axis][block[axis]] for axis in spatial)
        per_axis = []
        for axis in range(x.ndim):
            if axis in spatial:
                i = spatial.index(axis)
                per_axis.append(_pieces(x.chunks[axis], *tiling.input_range(i, *outputs[i])))
            else:
                size = x.chunks[axis][block[axis]]
                per_axis.append([(block[axis], slice(0, size))])
        keys = {}
        for combo in itertools.product(*per_axis):
            source = (x.name, *(index for index, _ in combo))
            index = tuple(s for _, s in combo)
            whole = all(s.start == 0 and s.stop == x.chunks[axis][i] for axis, (i, s) in enumerate(combo))
            chunk = tuple(i for i, _ in combo)
            if whole:
                keys[chunk] = source
            else:
                key = (cut_name, *block, *chunk)
                graph[key] = (_cut, source, index)
                keys[chunk] = key
        nested = _nest(per_axis, keys)
        extra_key = None
        if extra is not None:
            extra_key = (extra.name, block[0], block[1]) if tiling.layout is Layout.NCX else (extra.name, block[0])
        graph[(name, *block)] = (_run_tile, pool, outputs, nested, extra_key)
    dependencies = [x] if extra is None else [x, extra]
    hlg = HighLevelGraph.from_collections(name, graph, dependencies=dependencies)
    return da.Array(hlg, name, tuple(chunks), meta=np.empty((0,) * x.ndim, x.dtype))


def _nest(per_axis: list, keys: dict, prefix: tuple = ()) -> Any:
    """The pieces' keys as nested lists, one level per axis (dask's concatenate3 layout)."""
    level = len(prefix)
    if level == len(per_axis):
        return keys[prefix]
    return [_nest(per_axis, keys, prefix + (index,)) for index, _ in per_axis[level]]
