"""Run QLinearAveragePool: onnxruntime geometry -> window tables (from :mod:`avgpool._core.plan`) -> kernel.

The geometry (:class:`avgpool._core.quantization.Geometry`) comes validated from the dialect
(:func:`avgpool._ops.qlinear.make_geometry`): this module translates no attribute. What
depends only on (geometry, input shape, dtype) is :func:`prepare`'s
:class:`~avgpool._core.pools.PreparedPool`, the engine's one prepared-call type (cached by the caller:
:func:`avgpool._ops.qlinear.prepare`), and the kernel's arguments for each set of scales and
zero points are cached in it (:func:`kernel_args`; one tuple, so that helper threads recognise
the job): a repeated call costs a dtype check, two dictionary lookups, one allocation and the
kernel.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import tuning, workers
from .outputs import check_output_fits, out_target
from .plan import make_plan
from .pools import PreparedPool
from .quantization import Geometry, QuantParams, global_scale
from .shape import infer_output_shape, resolve, spatial_shape_of
from .spec import Layout
from .tiles import QLinearTiling, QuantizedEngine, tile_regions

_ARGS_CACHE = 64


class QuantizedPath(enum.Enum):
    """Which kernel a prepared QLinearAveragePool runs (:func:`_kernel`), or none."""

    EMPTY = "an empty output"
    GENERAL_NCX = "channels first"
    GENERAL_NXC = "channels last"
    GLOBAL_NCX = "global, channels first"
    GLOBAL_NXC = "global, channels last"
    NCX_THROUGH_NXC = "channels first with short rows, through the channels-last kernel"
    TILED = "tile by tile (a very long axis)"


# module names for the members: read on every call, where a class attribute costs more
_EMPTY, _GENERAL_NCX, _GENERAL_NXC, _GLOBAL_NCX, _GLOBAL_NXC, _NCX_THROUGH_NXC, _TILED = QuantizedPath
_KERNELS: dict[QuantizedPath, Any] = {}


def _kernel(path: QuantizedPath, tables: tuple) -> Any:
    """The compiled kernel of a path (None for an empty output or tiles); the kernels module is
    imported on first use, so that importing avgpool stays fast. The channels-last kernels come
    in two, by the ``DEQUANT`` word of the header ``tables[0]``: a call compiles only its own."""
    from ..kernels import qlinear_kernels as k

    if path is _GENERAL_NXC:
        return k.pool_nxc_kernel(bool(tables[0][k.DEQUANT]))
    if path is _NCX_THROUGH_NXC:
        return k.pool_ncx_through_nxc_kernel(bool(tables[0][k.DEQUANT]))
    if not _KERNELS:
        _KERNELS.update({_GENERAL_NCX: k.pool_ncx, _GLOBAL_NCX: k.global_ncx, _GLOBAL_NXC: k.global_nxc})
    return _KERNELS.get(path)


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class QuantizedTables:
    """What a prepared QLinearAveragePool (a :class:`~avgpool._core.pools.PreparedPool`'s ``quantized``)
    makes its kernel arguments from, per set of quantisation values."""

    geometry: Geometry
    kind: QuantizedPath  # which kernel
    tables: tuple[np.ndarray, ...]  # general path: tab's header and window tables, and the divisors
    args: dict = field(default_factory=dict)  # quantisation values -> kernel arguments


def _prepared(
    geometry: Geometry,
    out_shape: tuple[int, ...],
    kind: QuantizedPath,
    x_view: tuple[int, ...],
    out_view: tuple[int, ...],
    items: int,
    pieces: int,
    tables: tuple,
    *,
    in_shape: tuple[int, ...],
    dtype: np.dtype,
) -> PreparedPool:
    """The prepared pool of one (attributes, input shape, dtype): the kernel of ``kind`` over
    ``items`` (output rows, positions or planes) in ``pieces``, the input reshaped to ``x_view``
    and the output allocated as ``out_view`` for it."""
    return PreparedPool(
        out_shape,
        dtype,
        items,
        _kernel(kind, tables),
        (),
        pieces,
        False,
        (in_shape, x_view, out_view),
        QuantizedTables(geometry, kind, tables),
    )


def kernel_args(prepared: PreparedPool, params: QuantParams) -> tuple[np.ndarray, ...]:
    """The kernel's arguments after the bounds for these quantisation values (cached in the pool;
    the global path's range check happens here)."""
    cache = prepared.quantized.args
    found = cache.get(params)
    if found is None:
        found = _make_scalars(prepared, params)
        if len(cache) >= _ARGS_CACHE:
            cache.clear()
        cache[params] = found
    return found


def _make_scalars(prepared: PreparedPool, params: QuantParams) -> tuple[np.ndarray, ...]:
    """The kernel's ``tab`` for these quantisation values (see :mod:`.kernels.qlinear_kernels`),
    in a 1-tuple (none for an empty output). Writable: numba types a read-only array argument
    more slowly; never written: it is the engine's own."""
    from ..kernels import qlinear_kernels as k

    q = prepared.quantized
    if q.kind in (_GLOBAL_NCX, _GLOBAL_NXC):
        n = q.geometry.image_size
        scale = global_scale(params, n)
        yzp = params.y_zero_point
        tab = np.zeros(5, np.int64)
        tab[[k.BIAS, k.GLOBAL_Y_ZP, k.CHANNELS]] = [-params.x_zero_point * n, yzp, prepared.views[1][-1]]
        tab.view(np.float32)[[k.SCALE, k.LOW, k.HIGH]] = [scale, params.qmin - yzp, params.qmax - yzp]
        return (tab,)
    if q.kind == _EMPTY:
        return ()
    if q.kind == _TILED:  # each tile's pool makes its own from the values
        return (params,)
    header, div = q.tables
    words = len(header) + (2 + len(div) + 1) // 2
    tab = np.zeros(words, np.int64)
    tab[: len(header)] = header
    tab[[k.X_ZP, k.Y_ZP, k.QMIN, k.QMAX, k.FLOATS]] = [
        params.x_zero_point,
        params.y_zero_point,
        params.qmin,
        params.qmax,
        len(header),
    ]
    floats = tab.view(np.float32)[2 * len(header) :]
    floats[[k.X_SCALE, k.Y_SCALE]] = [params.x_scale, params.y_scale]
    floats[k.DIV : k.DIV + len(div)] = div
    return (tab,)


def _pieces(work: int, items: int, parallel_from: int | None = None) -> int:
    t = tuning.current()
    return workers.pieces_for(
        items, work, t.qlinear_parallel_work if parallel_from is None else parallel_from, t.qlinear_many_pieces_work
    )


def _row_tables(plans: tuple, spatial: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every output row (all spatial axes but the last, row-major): its valid input rows in
    row-major order (CSR ``row_ptr``/``row_idx``) and its factor of the divisor."""
    idx = np.zeros((1, 1), np.int64)
    valid = np.ones((1, 1), bool)
    factor = np.ones(1, np.int64)
    for plan, length in zip(plans, spatial):
        width = max(1, int(plan.count.max(initial=0)))
        taps = np.arange(width, dtype=np.int64)
        axis_idx = plan.first[:, None] + taps[None, :]  # (O_a, width): the valid taps, in order
        axis_valid = taps[None, :] < plan.count[:, None]
        rows, outs = idx.shape[0], len(plan.first)
        idx = (idx[:, None, :, None] * length + axis_idx[None, :, None, :]).reshape(rows * outs, -1)
        valid = (valid[:, None, :, None] & axis_valid[None, :, None, :]).reshape(rows * outs, -1)
        factor = (factor[:, None] * plan.divisor.astype(np.int64)[None, :]).reshape(-1)
    row_ptr = np.zeros(idx.shape[0] + 1, np.int64)
    np.cumsum(valid.sum(axis=1), out=row_ptr[1:])
    return row_ptr, idx[valid], factor


def _general_tables(
    plans: tuple, spatial: tuple[int, ...], out_spatial: tuple[int, ...], channels: int, nxc: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The start of the general kernels' ``tab`` (header and window tables; the quantisation
    values are filled in per call by :func:`_make_scalars`) and the divisors, for the window
    plans of an input (or of a tile, :mod:`avgpool._core.tiles`)."""
    from ..kernels import qlinear_kernels as k

    row_ptr, row_idx, row_factor = _row_tables(plans[:-1], spatial[:-1])
    last = plans[-1]
    kernel = last.geometry.kernel
    stride = last.geometry.stride
    count = last.count.astype(np.int64)
    ow = len(count)
    # onnxruntime divides by the int64 tap count (or prod(kernel_shape)) converted to float32
    div = (row_factor[:, None] * last.divisor.astype(np.int64)[None, :]).astype(np.float32)
    full = np.flatnonzero(count == kernel)  # windows wholly inside the last axis: a contiguous run
    full_lo, full_hi = (int(full[0]), int(full[-1]) + 1) if full.size else (0, 0)
    # channels last: inner windows summed together share one divisor (always so)
    inner = div[:, full_lo:full_hi]
    same_divisor = bool(np.all(inner == inner[:, :1])) if inner.size else True
    chunk = min(max(1, k.CHUNK_LANES // max(1, channels)), max(1, full_hi - full_lo)) if same_divisor else 1
    div = div.reshape(-1)
    as_int = div.astype(np.int64)
    # channels first, all powers of two: multiply by the inverses (channels last divides in the loop
    # that adds, where a division costs next to nothing)
    pow2 = not nxc and bool(np.all((as_int & (as_int - 1)) == 0))
    if pow2:
        div = (np.float32(1.0) / div).astype(np.float32)
    rows_per_window = np.diff(row_ptr)
    most_rows = int(rows_per_window.max(initial=0))
    most_taps = most_rows * max(kernel, int(count.max(initial=0)))
    # channels last: dequantize each input row once where an input value is a tap of several windows
    taps = int(row_ptr[-1]) * int(count.sum())
    t = tuning.current()
    dequant = nxc and taps >= t.dequant_reuse * int(np.prod(spatial)) and spatial[-1] * channels >= t.dequant_row
    header = np.zeros(k.HEADER, np.int64)
    header[
        [
            k.OW,
            k.FULL_LO,
            k.FULL_HI,
            k.KERNEL,
            k.STRIDE,
            k.PAD,
            k.POW2,
            k.DEQUANT,
            k.MOST_ROWS,
            k.MOST_TAPS,
            k.CHUNK,
            k.ROWS_IN,
            k.WIDTH,
            k.ROWS_OUT,
        ]
    ] = [
        ow,
        full_lo,
        full_hi,
        kernel,
        stride,
        last.geometry.pad_begin,
        pow2,
        dequant,
        most_rows,
        most_taps,
        chunk,
        int(np.prod(spatial[:-1])),
        spatial[-1],
        int(np.prod(out_spatial[:-1])),
    ]
    tables = (row_ptr, row_idx, last.first.astype(np.int64), count)
    starts = np.cumsum([k.HEADER] + [len(t) for t in tables[:-1]])
    header[[k.ROW_PTR, k.ROW_IDX, k.FIRST, k.COUNT]] = starts
    return _frozen(np.concatenate((header, *tables))), _frozen(div)


def _taps(table: np.ndarray) -> int:
    """The taps of every window of one plane, from the start of a general kernel's ``tab``."""
    from ..kernels import qlinear_kernels as k

    row_taps = int(table[table[k.ROW_PTR] + table[k.ROWS_OUT]])
    return row_taps * int(table[table[k.COUNT] : table[k.COUNT] + table[k.OW]].sum())


def prepare(shape: tuple[int, ...], dtype: np.dtype, geometry: Geometry, plans: tuple | None = None) -> PreparedPool:
    """The kernel's tables for an input of ``shape`` and ``dtype`` (uint8 or int8) under a
    geometry its dialect made for that shape (or for a shape of the same spatial axes); with
    ``plans``, for a tile whose windows are those (cut from the whole operator's by
    :mod:`avgpool._core.tiles`): the general path."""
    dtype = np.dtype(dtype)
    if plans is not None:
        return _tile(shape, dtype, geometry, plans)
    out_shape = infer_output_shape(geometry.spec, shape, geometry.layout)
    check_output_fits(out_shape, dtype, shape)
    nxc = geometry.layout is Layout.NXC
    spatial = shape[1:-1] if nxc else shape[2:]
    batch, channels = shape[0], (shape[-1] if nxc else shape[1])
    size = int(np.prod(shape))
    if int(np.prod(out_shape)) == 0:
        return _prepared(geometry, out_shape, _EMPTY, shape, out_shape, 0, 1, (), in_shape=shape, dtype=dtype)
    if geometry.global_path:
        n = geometry.image_size
        t = tuning.current()
        if nxc:
            return _prepared(
                geometry,
                out_shape,
                _GLOBAL_NXC,
                (batch, n, channels),
                (batch * channels,),
                batch,
                _pieces(size, batch, t.qlinear_global_parallel_work),
                (),
                in_shape=shape,
                dtype=dtype,
            )
        return _prepared(
            geometry,
            out_shape,
            _GLOBAL_NCX,
            (batch * channels * n,),
            (batch * channels,),
            batch * channels,
            _pieces(size, batch * channels, t.qlinear_global_ncx_parallel_work),
            (),
            in_shape=shape,
            dtype=dtype,
        )
    if max(out_shape[a] for a in geometry.layout.spatial_axes(len(shape))) > tuning.current().long_axis_outputs:
        return _tiled(shape, dtype, out_shape, geometry)
    return _general(shape, dtype, out_shape, geometry, make_plan(geometry.spec, spatial))


def _tiled(shape: tuple[int, ...], dtype: np.dtype, out_shape: tuple[int, ...], geometry: Geometry) -> PreparedPool:
    """An input with a very long axis, pooled tile by tile (:class:`avgpool._core.tiles.QLinearTiling`,
    whose tiles give the whole input's bits): the window tables of the whole axis would take
    ~80 bytes per output, a tile's take its own share (tests/test_memory_bounds.py). Its
    plan has no kernel and 0 pieces: :func:`run` and :func:`run_into` hand it to :func:`_pool_tiles`."""
    tiling = qlinear_tiling(shape, dtype, geometry)
    return _prepared(geometry, out_shape, _TILED, shape, out_shape, 1, 0, (tiling,), in_shape=shape, dtype=dtype)


def _pool_tiles(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple, target: np.ndarray) -> None:
    """A tiled pool's outputs into ``target``, tile after tile (:func:`avgpool._core.tiles.tile_regions`)."""
    (tiling,), (params,) = prepared.quantized.tables, kernel_args
    for outputs, take, put in tile_regions(tiling, x.ndim, tuning.current().tile_outputs):
        tiling.pool(x[take], outputs, params, out=target[put])


def _tile(shape: tuple[int, ...], dtype: np.dtype, geometry: Geometry, plans: tuple) -> PreparedPool:
    """The general path for a tile of ``shape`` whose windows are ``plans``."""
    out_shape = list(shape)
    for axis, plan in zip(geometry.layout.spatial_axes(len(shape)), plans):
        out_shape[axis] = plan.geometry.out
    out_shape = tuple(out_shape)
    if int(np.prod(out_shape)) == 0:
        return _prepared(geometry, out_shape, _EMPTY, shape, out_shape, 0, 1, (), in_shape=shape, dtype=dtype)
    return _general(shape, dtype, out_shape, geometry, plans)


def _general(
    shape: tuple[int, ...], dtype: np.dtype, out_shape: tuple[int, ...], geometry: Geometry, plans: tuple
) -> PreparedPool:
    nxc = geometry.layout is Layout.NXC
    spatial = shape[1:-1] if nxc else shape[2:]
    batch, channels = shape[0], (shape[-1] if nxc else shape[1])
    size = int(np.prod(shape))
    out_spatial = out_shape[1:-1] if nxc else out_shape[2:]
    rows_in, width = int(np.prod(spatial[:-1])), spatial[-1]
    rows_out, ow = int(np.prod(out_spatial[:-1])), out_spatial[-1]
    through = not nxc and _through_channels_last(channels, width, rows_out, ow)
    # channels first through channels last: a block of channels an item (_ncx_through_nxc)
    block = (channels if batch > 1 else min(channels, -(-channels // 32) * 16)) if through else channels
    tables = _general_tables(plans, spatial, out_spatial, block, nxc or through)
    work = size + batch * channels * _taps(tables[0])  # reads + tap additions
    if nxc:
        items = batch * rows_out * ow
        return _prepared(
            geometry,
            out_shape,
            _GENERAL_NXC,
            (batch, rows_in, width, channels),
            (batch, rows_out, ow, channels),
            items,
            _pieces(work, items),
            tables,
            in_shape=shape,
            dtype=dtype,
        )
    if through:
        return _ncx_through_nxc(shape, dtype, out_shape, geometry, tables, block, work)
    items = batch * channels * rows_out
    return _prepared(
        geometry,
        out_shape,
        _GENERAL_NCX,
        (batch * channels, rows_in, width),
        (batch * channels * rows_out * ow,),
        items,
        _pieces(work, items, tuning.current().qlinear_ncx_parallel_work),
        tables,
        in_shape=shape,
        dtype=dtype,
    )


def _through_channels_last(channels: int, width: int, rows_out: int, ow: int) -> bool:
    """Whether channels-first windows are pooled by the channels-last kernel, their planes
    transposed (:func:`_ncx_through_nxc`): rows short enough that pool_ncx's loops along them
    are mostly set-up, channels enough for pool_nxc's, and not the planes pool_ncx sums
    ``PLANES`` at a time (one output row of at most ``PLANES_MAX_OW``). The measurements are
    :attr:`avgpool._core.tuning.Tuning.qlinear_ncx_through_nxc_max_width`'s."""
    from ..kernels import qlinear_kernels as k

    t = tuning.current()
    return (
        width <= t.qlinear_ncx_through_nxc_max_width
        and channels >= t.qlinear_ncx_through_nxc_min_channels
        and not (rows_out == 1 and ow <= k.PLANES_MAX_OW)
    )


def _ncx_through_nxc(
    shape: tuple[int, ...],
    dtype: np.dtype,
    out_shape: tuple[int, ...],
    geometry: Geometry,
    tables: tuple[np.ndarray, np.ndarray],
    block: int,
    work: int,
) -> PreparedPool:
    """Channels first by the channels-last kernel (kernels.qlinear_kernels.pool_ncx_through_nxc),
    with channels-last ``tables`` made for ``block`` channels: items are (image, block of
    channels), one block an image when there are several images, two halves of the channels
    (multiples of 16) for one image, so that two threads share it."""
    from ..kernels import qlinear_kernels as k

    batch, channels = shape[0], shape[1]
    header, div = tables
    header = header.copy()
    header[k.BLOCK] = block
    header[k.NXC_KERNEL] = k.nxc_address(bool(header[k.DEQUANT]), dtype)
    items = batch * -(-channels // block)
    size, out_size = math.prod(shape[2:]), math.prod(out_shape[2:])
    return _prepared(
        geometry,
        out_shape,
        _NCX_THROUGH_NXC,
        (batch, channels, size),
        (batch, channels, out_size),
        items,
        _pieces(work, items, tuning.current().qlinear_ncx_parallel_work),
        (_frozen(header), div),
        in_shape=shape,
        dtype=dtype,
    )


def run(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple[np.ndarray, ...]) -> np.ndarray:
    """Pool a C-contiguous uint8/int8 array of the prepared shape.

    A tiny call costs ~2 us in all, and each attribute lookup, reshape (~0.2 us) or ravel (~0.1)
    counts: the input is reshaped, and the output allocated in the caller's shape and ravelled,
    only where the kernel's shapes differ, and a serial call goes straight to the kernel's entry
    point.
    """
    call, items, pieces, x_view, out_view, out_shape, x_how, out_how, kernel, dtype = prepared.plan
    if not pieces:
        result = np.empty(out_shape, x.dtype)
        _pool_tiles(prepared, x, kernel_args, result)
        return result
    if out_how == 1:
        result = np.empty(out_shape, x.dtype)
        out = result.ravel()
    else:
        result = out = np.empty(out_view, x.dtype)
    if kernel is not None:
        if x_how:
            x = x.ravel() if x_how == 1 else x.reshape(x_view)
        if pieces == 1:
            call(x, out, 0, items, kernel_args[0])
        else:
            workers.run_pieces(kernel, x, out, items, pieces, kernel_args)
    return result if out_how < 2 else out.reshape(out_shape)


def run_into(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple[np.ndarray, ...], out: Any) -> np.ndarray:
    """:func:`run` writing into ``out`` and returning it: an array of the output's shape and
    ``x``'s dtype, writeable (else :class:`~avgpool.errors.AvgPoolError`, naming what is
    wrong), of any layout and ndarray subclass (an ``np.memmap``, ``open_memmap``'s result), and
    ``x`` itself or sharing its memory: the kernels then write a new array, copied into ``out``
    once the input has been read, as they do where ``out`` is not C-contiguous.

    The common case (a plain C-contiguous ``out`` of the right shape and dtype, apart from ``x``)
    is told in one test: :func:`.outputs.out_target` and its overlap test cost ~0.6 us, most of a
    small call's overhead (bench_qlinear.py's prepared column).
    """
    call, items, pieces, x_view, out_view, out_shape, x_how, out_how, kernel, dtype = prepared.plan
    flags = out.flags if type(out) is np.ndarray else None
    if (
        flags is not None
        and out.shape == out_shape
        and out.dtype is dtype
        and flags.writeable
        and flags.c_contiguous
        and ((out.base is None and x.base is None and out is not x) or not np.may_share_memory(out, x))
    ):
        # two arrays that each own their memory cannot overlap: the common case skips the bounds test
        target, copy = out, False
    else:
        target, copy = out_target(out, x, out_shape, x.dtype)
    if kernel is not None:
        if x_how:
            x = x.ravel() if x_how == 1 else x.reshape(x_view)
        flat = target if out_how == 0 else target.ravel() if out_how == 1 else target.reshape(out_view)
        if pieces == 1:
            call(x, flat, 0, items, kernel_args[0])
        else:
            workers.run_pieces(kernel, x, flat, items, pieces, kernel_args)
    elif not pieces:
        _pool_tiles(prepared, x, kernel_args, target)
    if copy:
        out[...] = target
    return out


#: The functions a :class:`~avgpool._core.tiles.QLinearTiling` prepares and runs its tiles with.
ENGINE = QuantizedEngine(prepare, kernel_args, run, run_into)


def qlinear_tiling(shape: tuple[int, ...], dtype: np.dtype, geometry: Geometry) -> QLinearTiling:
    """The :class:`~avgpool._core.tiles.QLinearTiling` of a whole input of ``shape`` and ``dtype``
    (uint8 or int8, checked by the caller) under the geometry its dialect made for that shape."""
    out_shape = infer_output_shape(geometry.spec, shape, geometry.layout)
    check_output_fits(out_shape, dtype, shape)
    axes = resolve(geometry.spec, spatial_shape_of(shape, geometry.layout))
    return QLinearTiling(geometry, tuple(shape), np.dtype(dtype), out_shape, axes, ENGINE)
