"""Run QLinearAveragePool: onnxruntime geometry -> window tables (from :mod:`avgpool.plan`) -> kernel.

Everything that depends only on (attributes, input shape, dtype) is prepared once and cached
(:func:`prepare_cached`), and so are the kernel's arguments for each set of scales and zero
points (:meth:`Prepared.kernel_args`; one tuple, so that helper threads recognise the job): a
repeated call costs a dtype check, two dictionary lookups, one allocation and the kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import threads
from .dialects import qlinear as dialect
from .plan import make_plan
from .shape import infer_output_shape
from .spec import Layout

#: Below this many operations (input reads plus tap additions) a call runs on one thread
#: (measured with helpers spinning: 1x56x56x128 2x2 s2 NHWC, ~1.2M operations, 60 -> 35 us).
PARALLEL_WORK = 1 << 19
#: Below this many operations each thread takes one piece (threads.pieces_for).
MANY_PIECES_WORK = 1 << 23
_ARGS_CACHE = 64

_EMPTY, _GENERAL_NCX, _GENERAL_NXC, _GLOBAL_NCX, _GLOBAL_NXC = range(5)
_KERNEL_NAMES = {_GENERAL_NCX: "pool_ncx", _GENERAL_NXC: "pool_nxc", _GLOBAL_NCX: "global_ncx",
                 _GLOBAL_NXC: "global_nxc"}


def _kernel(kind: int) -> Any:
    """The compiled kernel of a path; imported on first use, so that importing avgpool stays fast."""
    if kind not in _KERNEL_NAMES:
        return None
    from .kernels import qlinear_kernels

    return getattr(qlinear_kernels, _KERNEL_NAMES[kind])


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Prepared:
    """One (attributes, input shape, dtype): what a call needs besides the data and the scalars."""

    geometry: dialect.Geometry
    out_shape: tuple[int, ...]
    kind: int
    x_view: tuple[int, ...]  # the input reshaped for the kernel
    out_view: tuple[int, ...]  # the output allocated in this shape for the kernel
    items: int  # the kernel's work items (output rows, positions or planes)
    pieces: int  # 1: serial; more: that many pieces shared by the threads
    tables: tuple[np.ndarray, ...]  # window tables of the general path
    _args: dict = field(default_factory=dict)  # quantisation values -> kernel arguments
    kernel: Any = None  # the kernel function (None: empty output), set from ``kind``

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernel", _kernel(self.kind))

    def kernel_args(self, params: dialect.QuantParams) -> tuple[np.ndarray, ...]:
        """The kernel's arguments after the bounds: the window tables and the (float32, int64)
        scalar arrays for these quantisation values (cached; the global path's range check
        happens here)."""
        found = self._args.get(params)
        if found is None:
            found = (*self.tables, *_make_scalars(self, params))
            if len(self._args) >= _ARGS_CACHE:
                self._args.clear()
            self._args[params] = found
        return found


def _make_scalars(prepared: Prepared, params: dialect.QuantParams) -> tuple[np.ndarray, np.ndarray]:
    if prepared.kind in (_GLOBAL_NCX, _GLOBAL_NXC):
        n = prepared.geometry.image_size
        scale = dialect.global_scale(params, n)
        yzp = params.y_zero_point
        fq = np.array([scale, params.qmin - yzp, params.qmax - yzp], np.float32)
        iq = np.array([-params.x_zero_point * n, yzp], np.int64)
    else:
        fq = np.array([params.x_scale, params.y_scale], np.float32)
        iq = np.array([params.x_zero_point, params.y_zero_point, params.qmin, params.qmax], np.int64)
    return _frozen(fq), _frozen(iq)


def _pieces(work: int, items: int) -> int:
    return threads.pieces_for(items, work, PARALLEL_WORK, MANY_PIECES_WORK)


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


def _general_tables(geometry: dialect.Geometry, spatial: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    plans = make_plan(geometry.spec, spatial)
    row_ptr, row_idx, row_factor = _row_tables(plans[:-1], spatial[:-1])
    last = plans[-1]
    kernel = geometry.spec.kernel[-1]
    count = last.count.astype(np.int64)
    # onnxruntime divides by the int64 tap count (or prod(kernel_shape)) converted to float32
    div = (row_factor[:, None] * last.divisor.astype(np.int64)[None, :]).astype(np.float32).reshape(-1)
    full = np.flatnonzero(count == kernel)  # windows wholly inside the last axis: a contiguous run
    full_lo, full_hi = (int(full[0]), int(full[-1]) + 1) if full.size else (0, 0)
    as_int = div.astype(np.int64)
    pow2 = bool(np.all((as_int & (as_int - 1)) == 0))  # all powers of two: multiply by the inverses
    if pow2:
        div = (np.float32(1.0) / div).astype(np.float32)
    geo = np.array([len(count), full_lo, full_hi, kernel, geometry.spec.strides[-1], geometry.spec.pads[-1][0],
                    int(pow2)], np.int64)
    return tuple(_frozen(a) for a in (row_ptr, row_idx, last.first.astype(np.int64), count, div, geo))


@functools.lru_cache(maxsize=256)
def prepare_cached(shape: tuple[int, ...], dtype: np.dtype, *attributes: Any) -> Prepared:
    """:func:`prepare` for hashable attribute values (ints, tuples of ints, strings, bools)."""
    return prepare(shape, dtype, *attributes)


def prepare(shape: tuple[int, ...], dtype: np.dtype, kernel_shape: Any, strides: Any, pads: Any, auto_pad: Any,
            ceil_mode: Any, count_include_pad: Any, channels_last: Any) -> Prepared:
    """Validate the attributes for an input shape and build the kernel's tables."""
    dialect.check_dtype(dtype)
    geometry = dialect.make_geometry(shape, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad,
                                     channels_last)
    out_shape = infer_output_shape(geometry.spec, shape, geometry.layout)
    nxc = geometry.layout is Layout.NXC
    spatial = shape[1:-1] if nxc else shape[2:]
    batch, channels = shape[0], (shape[-1] if nxc else shape[1])
    size = int(np.prod(shape))
    if int(np.prod(out_shape)) == 0:
        return Prepared(geometry, out_shape, _EMPTY, (), out_shape, 0, 1, ())
    if geometry.global_path:
        n = geometry.image_size
        if nxc:
            return Prepared(geometry, out_shape, _GLOBAL_NXC, (batch, n, channels), (batch, channels), batch,
                            _pieces(size, batch), ())
        return Prepared(geometry, out_shape, _GLOBAL_NCX, (batch * channels * n,), (batch * channels,),
                        batch * channels, _pieces(size, batch * channels), ())
    tables = _general_tables(geometry, spatial)
    rows_in, width = int(np.prod(spatial[:-1])), spatial[-1]
    out_spatial = out_shape[1:-1] if nxc else out_shape[2:]
    rows_out, ow = int(np.prod(out_spatial[:-1])), out_spatial[-1]
    work = size + batch * channels * int(tables[0][-1]) * int(tables[3].sum())  # reads + tap additions
    if nxc:
        items = batch * rows_out * ow
        return Prepared(geometry, out_shape, _GENERAL_NXC, (batch, rows_in, width, channels),
                        (batch, rows_out, ow, channels), items, _pieces(work, items), tables)
    items = batch * channels * rows_out
    return Prepared(geometry, out_shape, _GENERAL_NCX, (batch * channels, rows_in, width),
                    (batch * channels, rows_out * ow), items, _pieces(work, items), tables)


def run(prepared: Prepared, x: np.ndarray, kernel_args: tuple[np.ndarray, ...]) -> np.ndarray:
    """Pool a C-contiguous uint8/int8 array of the prepared shape."""
    out = np.empty(prepared.out_view, x.dtype)
    kernel = prepared.kernel
    if kernel is not None:
        threads.run_pieces(kernel, x.reshape(prepared.x_view), out, prepared.items, prepared.pieces,
                           kernel_args)
    return out.reshape(prepared.out_shape)
