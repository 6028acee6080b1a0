"""Pools whose windows are given per axis rather than by a kernel, a stride and pads: adaptive
pooling's ``[floor(i L / O), ceil((i + 1) L / O))`` windows, the adjoint of a pool (each input
position's windows, for a gradient), and a pool whose divisor is one number (torch's
``divisor_override``). Each is made into the engine's own :class:`~.tables.KernelTables` and
prepared by :func:`~.pools.prepare_tables`, so the same compiled kernels sum them (float64
sums, rounded once to the input's dtype); nothing here compiles or edits a kernel.

Windows are boxes, so an N-D pool is still one 1-D table per axis (semantics 1.2). Given
windows are summed as direct taps (:mod:`..kernels.direct`), each window on its own: their
starts are not affine in the output index, so no interior run, block sums, small planes or
exact running sums apply (those read the kernel and stride of a geometry).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels import columns
from . import engine, tuning
from .caches import BoundedCache
from .outputs import check_output_fits
from .plan import AxisPlan, make_plan
from .pools import PreparedPool, prepare_tables
from .shape import AxisGeometry, infer_output_shape, spatial_shape_of
from .spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from .tables import (
    KernelTables,
    _cache_aligned,
    block_sizes,
    divisor_scales,
    is_global,
    running_plan,
    tables_from_plans,
)


@dataclass(frozen=True)
class AxisWindows:
    """The windows of one axis given as tuples: window ``o`` sums the input positions
    ``first[o] .. first[o] + count[o] - 1`` and divides by ``divisor[o]`` (its factor of the
    window's divisor: an N-D window's divisor is the product over the axes). Hashable, so
    that prepared pools are cached by them."""

    length: int
    first: tuple[int, ...]
    count: tuple[int, ...]
    divisor: tuple[float, ...]

    @property
    def out(self) -> int:
        return len(self.first)


def adaptive_axis(length: int, out: int) -> AxisWindows:
    """Adaptive average pooling's windows along one axis (torch's ``start_index``/``end_index``,
    OpenVINO's AdaptiveAvgPool-8): window ``i`` covers ``[floor(i L / O), ceil((i + 1) L / O))``,
    divided by its own size."""
    i = np.arange(out, dtype=np.int64)
    first = (i * length) // out
    end = -((-(i + 1) * length) // out)
    count = end - first
    return AxisWindows(length, tuple(first.tolist()), tuple(count.tolist()), tuple(count.astype(float).tolist()))


def adjoint_axis(windows: AxisWindows) -> AxisWindows:
    """The windows of the adjoint along one axis: input position ``i`` sums the outputs whose
    window holds it, ``o_lo(i) .. o_hi(i) - 1`` (a run, since the windows' starts and ends never
    decrease), each already divided by its divisor (divisor 1 here). An input in no window
    (counted 0) gets 0."""
    first = np.asarray(windows.first, dtype=np.int64)
    end = first + np.asarray(windows.count, dtype=np.int64)
    if windows.out > 1 and (np.any(np.diff(first) < 0) or np.any(np.diff(end) < 0)):
        raise ValueError("the adjoint needs windows whose starts and ends never decrease")
    i = np.arange(windows.length, dtype=np.int64)
    lo = np.searchsorted(end, i, side="right")
    hi = np.searchsorted(first, i, side="right")
    count = np.maximum(hi - lo, 0)
    lo = np.where(count > 0, lo, 0)
    return AxisWindows(windows.out, tuple(lo.tolist()), tuple(count.tolist()), (1.0,) * windows.length)


def plan_axes(spec: PoolSpec, spatial_shape: tuple[int, ...]) -> tuple[AxisWindows, ...]:
    """A spec's windows and divisors, as given windows (for :func:`adjoint_axis`)."""
    plans = getattr(make_plan, "__wrapped__", make_plan)(spec, spatial_shape)
    return tuple(
        AxisWindows(p.geometry.length, tuple(p.first.tolist()), tuple(p.count.tolist()), tuple(p.divisor.tolist()))
        for p in plans
    )


def _overlap(w: AxisWindows) -> bool:
    ends = [f + c for f, c in zip(w.first, w.count)]
    return any(w.first[o + 1] < ends[o] for o in range(w.out - 1))


def _tables(axes: tuple[AxisWindows, ...], channels: int) -> KernelTables:
    """The kernel's tables for given windows: direct sums along every axis, no interior run (its
    windows would need a stride), no block sums, small planes or fused passes."""
    outs = [w.out for w in axes]
    lengths = [w.length for w in axes]
    offsets = np.cumsum([0] + outs)
    scratch = band_row = band_extra = channels
    rows = np.full((len(axes), columns.AXIS_COLUMNS), -1, np.int64)
    plans = []
    for axis, w in enumerate(axes):
        inner = channels * math.prod(lengths[axis + 1 :])
        outer = math.prod(outs[:axis])
        scratch = max(scratch, outer * w.out * inner, w.length * inner)
        band_row = max(band_row, math.prod(outs[1 : axis + 1]) * inner)
        if axis > 0:
            band_extra = max(band_extra, w.length * inner)
        row = rows[axis]
        row[columns.LENGTH], row[columns.OUTPUTS], row[columns.OFFSET] = w.length, w.out, offsets[axis]
        row[columns.DILATION], row[columns.STRIDE], row[columns.BLOCK] = 1, 1, 0
        row[columns.INNER_LO], row[columns.INNER_HI] = 0, 0
        row[columns.PLANE_PAD] = -1
        kernel = max(w.count, default=1) or 1
        geometry = AxisGeometry(w.length, kernel, 1, 1, 0, 0, w.out)
        plans.append(
            AxisPlan(geometry, np.asarray(w.first, np.int64), np.asarray(w.count, np.int64), np.asarray(w.divisor))
        )
    rows[:, columns.FUSED] = 0
    fused_channels = tuning.current().fused_min_channels
    short = max(max(w.count, default=0) for w in axes) <= 3
    if len(axes) == 2 and channels >= fused_channels and short and not _overlap(axes[1]):
        rows[0, columns.FUSED] = 1  # kernels.separable._fused_rows reads firsts and counts as given
    scales = divisor_scales(tuple(plans))
    return KernelTables(
        axes=rows,
        firsts=np.concatenate([np.asarray(w.first, np.int64) for w in axes]),
        counts=np.concatenate([np.asarray(w.count, np.int64) for w in axes]),
        splits=np.full((sum(outs), 3), -1, np.int64),
        scales=_cache_aligned(scales),
        scratch_size=scratch,
        global_scale=0.0,
        band_row_size=band_row,
        band_extra_size=band_extra,
        windows_overlap=any(_overlap(w) for w in axes),
        plane_masks=np.empty(0, np.uint8),
        plane_factors=np.empty(0),
        plane_sums=0,
    )


def _out_shape(shape: tuple[int, ...], layout: Layout, outs: tuple[int, ...]) -> tuple[int, ...]:
    out = list(shape)
    for array_axis, n in zip(layout.spatial_axes(len(shape)), outs):
        out[array_axis] = n
    return tuple(out)


@BoundedCache
def prepare_windows(
    axes: tuple[AxisWindows, ...], shape: tuple[int, ...], dtype: np.dtype, layout: Layout
) -> PreparedPool:
    """A prepared pool of an input ``shape`` whose windows along each spatial axis are given, cached."""
    dtype = np.dtype(dtype)
    if tuple(w.length for w in axes) != spatial_shape_of(shape, layout):
        raise ValueError(f"windows of lengths {[w.length for w in axes]} for an input of shape {shape}")
    out_shape = _out_shape(shape, layout, tuple(w.out for w in axes))
    check_output_fits(out_shape, dtype, shape)
    if math.prod(out_shape) == 0:
        return PreparedPool(out_shape, dtype, 0, None, (), 1, False)
    channels = 1 if layout is Layout.NCX else shape[-1]
    return prepare_tables(out_shape, shape, dtype, layout, _tables(axes, channels), None)


@BoundedCache
def prepare_with_divisor(
    spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, divisor: int
) -> PreparedPool:
    """The pool of ``spec`` with every window divided by ``divisor`` instead of its own divisor
    (torch's ``divisor_override``): the spec's own plans, geometry and kernels, the divisor put
    on the last axis (the others' factors are then kernel / power of two, exact, and the one
    rounding of a reciprocal comes last, as for any divisor: tables.divisor_scales). Cached."""
    dtype = np.dtype(dtype)
    spatial = spatial_shape_of(shape, layout)
    out_shape = infer_output_shape(spec, shape, layout)
    check_output_fits(out_shape, dtype, shape)
    if math.prod(out_shape) == 0:
        return PreparedPool(out_shape, dtype, 0, None, (), 1, False)
    channels = 1 if layout is Layout.NCX else shape[-1]
    plans = getattr(make_plan, "__wrapped__", make_plan)(spec, spatial)
    last = len(plans) - 1
    plans = tuple(
        AxisPlan(p.geometry, p.first, p.count, np.full(p.geometry.out, float(divisor) if axis == last else 1.0))
        for axis, p in enumerate(plans)
    )
    blocks = block_sizes(tuple(p.geometry for p in plans), channels)
    tables = tables_from_plans(plans, channels, blocks, is_global(plans))
    running = running_plan(spec, spatial, channels, layout, tables) if dtype == np.float32 else None
    return prepare_tables(out_shape, shape, dtype, layout, tables, running)


def adaptive_spec(spatial_shape: tuple[int, ...], outs: tuple[int, ...]) -> PoolSpec | None:
    """The ordinary pool whose windows are the adaptive ones where every output size divides its
    (non-empty) axis: kernel = stride = L / O, no pads; else None."""
    if not all(length > 0 and o > 0 and length % o == 0 for length, o in zip(spatial_shape, outs)):
        return None
    kernel = tuple(length // o for length, o in zip(spatial_shape, outs))
    n = len(kernel)
    return PoolSpec(kernel, kernel, (1,) * n, ((0, 0),) * n, PadMode.EXPLICIT, Rounding.FLOOR, Divisor.VALID_TAPS)


def prepare_adaptive(shape: tuple[int, ...], dtype: np.dtype, layout: Layout, outs: tuple[int, ...]) -> PreparedPool:
    """Adaptive average pooling of an input ``shape`` to the spatial sizes ``outs`` (torch's
    adaptive_avg_pool, OpenVINO's AdaptiveAvgPool-8): where every size divides its axis, the
    ordinary pool of kernel = stride = L / O (:func:`adaptive_spec`: the bits of
    average_pool's), else the adaptive windows' tables. An empty axis pooled to a non-empty one
    has windows of no value: NaN (0/0)."""
    spatial = spatial_shape_of(shape, layout)
    spec = adaptive_spec(spatial, outs)
    if spec is not None:
        return engine.prepare(spec, shape, dtype, layout)
    return prepare_windows(tuple(adaptive_axis(length, o) for length, o in zip(spatial, outs)), shape, dtype, layout)
