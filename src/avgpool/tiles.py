"""Pool a tile: a range of output windows of the whole operator, from the input region they read.

The entry point of chunked backends (:mod:`avgpool.dask`): the output is cut into tiles, and
each task pools one tile from the region of the input its windows read (halo included). For
the result to be the whole array's bit for bit, whatever the tiling, every window is summed
exactly as a call on the whole array sums it:

- a tile's window tables are the whole operator's, cut to the tile (:func:`cut_plan`): the same
  taps and the same divisors (the tile's own padding rules would count other taps);
- what the engine decides from the whole input is decided from it: block partial sums (a tile's
  region starts at a block boundary of the whole axis, so its blocks are the same blocks), the
  one plain sum of global pooling, the use of float32's exact running sums;
- float32's exact running sums are used for a slab only if the values of the whole slab allow
  (the caller gathers :func:`slab_bit_range` over all of a slab's tiles): a tile alone could
  pass the check where its slab failed, and the exact sums and the float64 ones can differ in
  the last bit.

QLinearAveragePool tiles go the same way (:func:`qlinear_tile`): onnxruntime's window
geometry cut to the tile, its divisors, and its integer global path only where the whole
input takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import engine, qlinear_engine
from .dialects import qlinear as qlinear_dialect
from .plan import AxisPlan, make_plan
from .shape import AxisGeometry, infer_output_shape, resolve, spatial_shape_of
from .spec import Layout, PoolSpec

Ranges = tuple[tuple[int, int], ...]


def cut_plan(plan: AxisPlan, start: int, stop: int, align: int = 1, min_length: int = 1) -> tuple[AxisPlan, int]:
    """The windows of outputs ``start..stop`` of one axis over the input they read: their plan
    in the tile's coordinates and the first input index of the tile's region (a multiple of
    ``align`` below the first tap read; the region ends after the last tap read, and holds at
    least ``min_length`` values where the axis has them). Windows with no valid tap read nothing
    (a tile of only such windows reads values that are never summed)."""
    g = plan.geometry
    first, count = plan.first[start:stop], plan.count[start:stop]
    valid = count > 0
    if valid.any():
        lo = int(first[valid].min())
        hi = int((first + (count - 1) * g.dilation)[valid].max()) + 1
    else:
        lo = min(max(0, start * g.stride - g.pad_begin), max(0, g.length - 1))
        hi = min(lo + 1, g.length)
    if hi - lo < min_length:
        hi = min(g.length, lo + min_length)
        lo = max(0, min(lo, hi - min_length))
    lo -= lo % align
    out = stop - start
    pad_begin = g.pad_begin + lo - start * g.stride
    geometry = AxisGeometry(hi - lo, g.kernel, g.stride, g.dilation, pad_begin,
                            (out - 1) * g.stride + g.extent - (hi - lo) - pad_begin, out)
    local = np.where(valid, first - lo, 0)
    return AxisPlan(geometry, local, count.copy(), plan.divisor[start:stop].copy()), lo


@dataclass(frozen=True, eq=False)
class Tiling:
    """One float operator on one whole input (spec, shape, dtype, layout): what its tiles share."""

    spec: PoolSpec
    shape: tuple[int, ...]
    dtype: np.dtype
    layout: Layout
    out_shape: tuple[int, ...]
    plans: tuple[AxisPlan, ...]
    blocks: tuple[int, ...]  # block partial sums per axis (0: direct sums), as the whole input has them
    global_window: bool
    exact: bool  # float32 windows go by the exact running sums where a slab's values allow
    headroom: int  # the exact sums' bit budget (engine.headroom)

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        """The array axes of the spatial dimensions."""
        return self.layout.spatial_axes(len(self.shape))

    def input_range(self, axis: int, start: int, stop: int) -> tuple[int, int]:
        """The input indices ``[a, b)`` along spatial ``axis`` that outputs ``start..stop`` read."""
        plan, lo = self._cut(axis, start, stop)
        return lo, lo + plan.geometry.length

    def _cut(self, axis: int, start: int, stop: int) -> tuple[AxisPlan, int]:
        # Regions start at a block boundary of the whole axis (the same blocks), and hold two
        # values at least: the kernels sum a window's taps in an order that depends on whether
        # the rows they sum along an axis are single values (the later axes' lengths times the
        # channels are 1), so a tile must have single-value rows exactly where the whole has.
        plan = self.plans[axis]
        return cut_plan(plan, start, stop, max(1, self.blocks[axis] * plan.geometry.dilation), 2)

    def pool(self, x: np.ndarray, outputs: Ranges, exact_slabs: np.ndarray | None = None) -> np.ndarray:
        """Outputs ``outputs`` (a ``(start, stop)`` per spatial axis) of the whole operator, from
        ``x``: the input region :meth:`input_range` gives along each spatial axis, with any part
        of the batch and channel axes. ``exact_slabs`` (float32 with :attr:`exact` only): per
        slab of ``x`` (N x C in NCX, N in NXC), whether the values of the whole slab allow the
        exact sums (:func:`exact_allowed`); None when ``x`` holds whole slabs, which then decide
        for themselves."""
        plans = tuple(self._cut(axis, start, stop)[0] for axis, (start, stop) in enumerate(outputs))
        if self.layout is Layout.NXC and x.shape[-1] == 1 and self.shape[-1] > 1:
            # one channel of many: pooled as two (see _cut), the copy's outputs dropped
            return self.pool(np.concatenate([x, x], axis=-1), outputs, exact_slabs)[..., :1]
        expected = tuple(p.geometry.length for p in plans)
        if spatial_shape_of(x.shape, self.layout) != expected:
            raise ValueError(f"tile input has spatial shape {spatial_shape_of(x.shape, self.layout)}, "
                             f"expected {expected} for outputs {outputs}")
        channels = 1 if self.layout is Layout.NCX else x.shape[-1]
        tables = engine.tables_from_plans(plans, channels, self.blocks, self.global_window)
        out_shape = list(x.shape)
        for array_axis, p in zip(self.spatial_axes, plans):
            out_shape[array_axis] = p.geometry.out
        out_shape = tuple(out_shape)
        x = np.ascontiguousarray(x)
        if not (self.exact and self.dtype == np.float32):
            return engine.prepare_tables(out_shape, x.shape, self.dtype, self.layout, tables, None)(x)
        running = engine.running_plan_for(tuple(p.geometry for p in plans), channels, self.layout, tables)
        exact = engine.prepare_tables(out_shape, x.shape, self.dtype, self.layout, tables, running)
        if exact_slabs is None:
            return exact(x)
        exact_slabs = np.asarray(exact_slabs, bool).reshape(-1)
        if exact_slabs.all():  # each slab of the tile passes the check too: its values are some of the slab's
            return exact(x)
        plain = engine.prepare_tables(out_shape, x.shape, self.dtype, self.layout, tables, None)
        if not exact_slabs.any():
            return plain(x)
        result = exact(x)
        slabs_first = self._slabs_view
        chosen = ~exact_slabs
        slabs_first(result)[chosen] = slabs_first(plain(x))[chosen]
        return result

    def _slabs_view(self, array: np.ndarray) -> np.ndarray:
        """``array`` with its slabs along the first axis."""
        lead = 2 if self.layout is Layout.NCX else 1
        return array.reshape(-1, *array.shape[lead:])


def tiling(spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout) -> Tiling:
    """The :class:`Tiling` of a validated spec on a whole input of ``shape``."""
    dtype = np.dtype(dtype)
    spatial = spatial_shape_of(shape, layout)
    plans = make_plan(spec, spatial)
    channels = 1 if layout is Layout.NCX else shape[-1]
    geometry = resolve(spec, spatial)
    exact = dtype == np.float32 and engine.uses_running(geometry, layout)
    return Tiling(spec, tuple(shape), dtype, layout, infer_output_shape(spec, shape, layout), plans,
                  engine.block_sizes(plans, channels), engine.is_global(plans), exact, engine.headroom(geometry))


def slab_bit_range(x: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Per slab of float32 ``x`` (N x C in NCX, N in NXC): the largest magnitude's bits and the
    smallest nonzero magnitude's bits minus one (zero wraps to the largest uint32) — what the
    exact kernel's check (:func:`.kernels.running.fixed_point_exponent`) reduces a slab to;
    combine the tiles of a slab with max and min."""
    magnitude = np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)
    axes = tuple(range(2, x.ndim)) if layout is Layout.NCX else tuple(range(1, x.ndim))
    return magnitude.max(axis=axes, initial=0), (magnitude - np.uint32(1)).min(axis=axes, initial=0xFFFFFFFF)


def exact_allowed(top: np.ndarray, bottom: np.ndarray, headroom: int) -> np.ndarray:
    """Whether slabs whose :func:`slab_bit_range` is (top, bottom) go by the exact sums: the
    kernel's check, on the whole slab's reduction."""
    top = np.asarray(top, np.int64)
    low = (np.asarray(bottom, np.uint32).astype(np.int64) + 1) & 0xFFFFFFFF
    q = np.maximum(low >> 23, 1) - 150
    finite = top < 0x7F800000
    in_range = (top == 0) | (np.maximum(top >> 23, 1) - 126 - q <= headroom)
    return finite & in_range


@dataclass(frozen=True, eq=False)
class QLinearTiling:
    """One QLinearAveragePool operator on one whole input: what its tiles share."""

    geometry: qlinear_dialect.Geometry
    attributes: tuple  # (kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last)
    shape: tuple[int, ...]
    dtype: np.dtype
    out_shape: tuple[int, ...]
    plans: tuple[AxisPlan, ...]

    @property
    def layout(self) -> Layout:
        return self.geometry.layout

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        return self.layout.spatial_axes(len(self.shape))

    def input_range(self, axis: int, start: int, stop: int) -> tuple[int, int]:
        """The input indices ``[a, b)`` along spatial ``axis`` that outputs ``start..stop`` read
        (the global path reads the whole axis)."""
        if self.geometry.global_path:
            return 0, self.plans[axis].geometry.length
        plan, lo = cut_plan(self.plans[axis], start, stop)
        return lo, lo + plan.geometry.length

    def pool(self, x: np.ndarray, outputs: Ranges, params: qlinear_dialect.QuantParams) -> np.ndarray:
        """Outputs ``outputs`` of the whole operator from ``x``, the region :meth:`input_range`
        gives (any part of the batch and channel axes)."""
        x = np.ascontiguousarray(x)
        if self.geometry.global_path:  # one window per plane: the tile is whole planes
            prepared = qlinear_engine.prepare(x.shape, self.dtype, *self.attributes)
            return qlinear_engine.run(prepared, x, prepared.kernel_args(params))
        cut = tuple(cut_plan(p, a, b) for p, (a, b) in zip(self.plans, outputs))
        plans = tuple(p for p, _ in cut)
        prepared = qlinear_engine.prepare_plans(x.shape, self.dtype, self.geometry, plans)
        return qlinear_engine.run(prepared, x, prepared.kernel_args(params))


def qlinear_tiling(shape: tuple[int, ...], dtype: np.dtype, *attributes: Any) -> QLinearTiling:
    """The :class:`QLinearTiling` of validated attributes on a whole input of ``shape``."""
    prepared = qlinear_engine.prepare(tuple(shape), np.dtype(dtype), *attributes)
    geometry = prepared.geometry
    spatial = spatial_shape_of(shape, geometry.layout)
    return QLinearTiling(geometry, attributes, tuple(shape), np.dtype(dtype), prepared.out_shape,
                         make_plan(geometry.spec, spatial))

