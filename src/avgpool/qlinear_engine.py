"""Run QLinearAveragePool: onnxruntime geometry -> window tables (from :mod:`avgpool.plan`) -> kernel.

The tables, output shape and thread split are prepared once per (attributes, input shape, dtype)
and cached: a call then costs a dtype check, the scalar inputs, one allocation and the kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from .dialects import qlinear as dialect
from .kernels import qlinear_kernels as kernels
from .plan import make_plan
from .shape import infer_output_shape
from .spec import Layout

#: Below this many operations (input reads plus tap additions) a call runs on one thread: a numba
#: thread launch costs a few microseconds.
PARALLEL_WORK = 1 << 18
_CHUNKS_PER_THREAD = 2

_EMPTY, _GENERAL_NCX, _GENERAL_NXC, _GLOBAL_NCX, _GLOBAL_NXC = range(5)


@dataclass(frozen=True, eq=False)
class Prepared:
    """One (attributes, input shape, dtype): what a call needs besides the data and the scalars."""

    geometry: dialect.Geometry
    out_shape: tuple[int, ...]
    kind: int
    x_view: tuple[int, ...]  # the input reshaped for the kernel
    out_view: tuple[int, ...]  # the output reshaped for the kernel
    work: int
    tables: tuple[Any, ...]  # window tables for the general path


def _chunks(work: int, items: int) -> int:
    if work < PARALLEL_WORK:
        return 1
    return max(1, min(items, numba.get_num_threads() * _CHUNKS_PER_THREAD))


def _row_tables(plans: tuple, spatial: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every output row (all spatial axes but the last, row-major): its valid input rows in
    row-major order (CSR ``row_ptr``/``row_idx``) and its factor of the divisor."""
    idx = np.zeros((1, 1), np.int64)
    valid = np.ones((1, 1), bool)
    factor = np.ones(1, np.int64)
    for plan, length in zip(plans, spatial):
        width = max(1, int(plan.count.max(initial=0)))
        taps = np.arange(width, dtype=np.int64)
        axis_idx = plan.first[:, None] + taps[None, :]  # (O_a, width)
        axis_valid = taps[None, :] < plan.count[:, None]
        rows, k_prev = idx.shape
        idx = (idx[:, None, :, None] * length + axis_idx[None, :, None, :]).reshape(rows * len(plan.first), -1)
        valid = (valid[:, None, :, None] & axis_valid[None, :, None, :]).reshape(rows * len(plan.first), -1)
        factor = (factor[:, None] * plan.divisor.astype(np.int64)[None, :]).reshape(-1)
    row_ptr = np.zeros(idx.shape[0] + 1, np.int64)
    np.cumsum(valid.sum(axis=1), out=row_ptr[1:])
    return row_ptr, np.ascontiguousarray(idx[valid]), factor


def _general_tables(geometry: dialect.Geometry, spatial: tuple[int, ...]) -> tuple[Any, ...]:
    plans = make_plan(geometry.spec, spatial)
    row_ptr, row_idx, row_factor = _row_tables(plans[:-1], spatial[:-1])
    last = plans[-1]
    kernel = geometry.spec.kernel[-1]
    first = np.ascontiguousarray(last.first, dtype=np.int64)
    count = np.ascontiguousarray(last.count, dtype=np.int64)
    # onnxruntime divides by the int64 tap count (or prod(kernel_shape)) converted to float32
    div = (row_factor[:, None] * last.divisor.astype(np.int64)[None, :]).astype(np.float32).reshape(-1)
    full = np.flatnonzero(count == kernel)
    full_lo, full_hi = (int(full[0]), int(full[-1]) + 1) if full.size else (0, 0)
    pad = geometry.spec.pads[-1][0]
    ow = len(first)
    return row_ptr, row_idx, first, count, div, ow, full_lo, full_hi, kernel, geometry.spec.strides[-1], pad


@functools.lru_cache(maxsize=256)
def prepare_cached(shape: tuple[int, ...], dtype: np.dtype, *attributes: Any) -> Prepared:
    """:func:`prepare` for hashable attribute values (ints, tuples of ints, strings, bools)."""
    return prepare(shape, dtype, *attributes)


def prepare(shape: tuple[int, ...], dtype: np.dtype, kernel_shape: Any, strides: Any, pads: Any, auto_pad: Any,
            ceil_mode: Any, count_include_pad: Any, channels_last: Any) -> Prepared:
    dialect.check_dtype(dtype)
    geometry = dialect.make_geometry(shape, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad,
                                     channels_last)
    out_shape = infer_output_shape(geometry.spec, shape, geometry.layout)
    nxc = geometry.layout is Layout.NXC
    spatial = shape[1:-1] if nxc else shape[2:]
    batch, channels = shape[0], (shape[-1] if nxc else shape[1])
    size = int(np.prod(shape))
    if int(np.prod(out_shape)) == 0:
        return Prepared(geometry, out_shape, _EMPTY, (), (), 0, ())
    if geometry.global_path:
        n = geometry.image_size
        if nxc:
            return Prepared(geometry, out_shape, _GLOBAL_NXC, (batch, n, channels), (batch, channels), size, ())
        return Prepared(geometry, out_shape, _GLOBAL_NCX, (batch * channels * n,), (batch * channels,), size, ())
    tables = _general_tables(geometry, spatial)
    rows_in, width = int(np.prod(spatial[:-1])), spatial[-1]
    rows_out, ow = int(np.prod(out_shape[1:-2] if nxc else out_shape[2:-1])), (out_shape[-2] if nxc else out_shape[-1])
    taps = int(tables[0][-1]) * int(tables[3].sum())  # sum over windows of the taps, per plane
    if nxc:
        work = size + batch * channels * taps
        return Prepared(geometry, out_shape, _GENERAL_NXC, (batch, rows_in, width, channels),
                        (batch, rows_out, ow, channels), work, tables)
    work = size + batch * channels * taps
    return Prepared(geometry, out_shape, _GENERAL_NCX, (batch * channels, rows_in, width),
                    (batch * channels, rows_out * ow), work, tables)


def run(prepared: Prepared, x: np.ndarray, params: dialect.QuantParams) -> np.ndarray:
    """Pool a C-contiguous uint8/int8 array with validated scalars."""
    out = np.empty(prepared.out_shape, x.dtype)
    kind = prepared.kind
    if kind == _EMPTY:
        return out
    xv = x.reshape(prepared.x_view)
    ov = out.reshape(prepared.out_view)
    if kind == _GENERAL_NCX or kind == _GENERAL_NXC:
        yzp, qmin, qmax = params.y_zero_point, params.qmin, params.qmax
        t = prepared.tables
        if kind == _GENERAL_NCX:
            kernels.pool_ncx(xv, ov, _chunks(prepared.work, ov.shape[0] * (ov.shape[1] // t[5])), *t,
                             params.x_scale, params.x_zero_point, params.y_scale, yzp, qmin, qmax)
        else:
            kernels.pool_nxc(xv, ov, _chunks(prepared.work, ov.shape[0] * ov.shape[1] * ov.shape[2]), *t[:5],
                             params.x_scale, params.x_zero_point, params.y_scale, yzp, qmin, qmax)
        return out
    n = prepared.geometry.image_size
    scale = dialect.global_scale(params, n)
    yzp = params.y_zero_point
    lo, hi = np.float32(params.qmin - yzp), np.float32(params.qmax - yzp)
    bias = -params.x_zero_point * n
    chunks = _chunks(prepared.work, ov.shape[0])
    if kind == _GLOBAL_NCX:
        kernels.global_ncx(xv, ov, chunks, bias, scale, lo, hi, yzp)
    else:
        kernels.global_nxc(xv, ov, chunks, bias, scale, lo, hi, yzp)
    return out
