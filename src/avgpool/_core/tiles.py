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

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from . import pools, tuning
from .outputs import check_output_fits, out_target
from .plan import AxisPlan, any_pad, axis_plan
from .quantization import Geometry, QuantParams
from .shape import AxisGeometry, infer_output_shape, resolve, spatial_shape_of
from .spec import Layout, PoolSpec
from .tables import block_sizes, headroom, is_global, running_plan_for, tables_from_plans, uses_running

Ranges = tuple[tuple[int, int], ...]
#: Plans and prepared pools of tiles a Tiling keeps (the tiles of one shape share them).
_SHARED_ENTRIES = 256
#: Other cuts of at most this many outputs (a chunk's edges, the tiles along the input's border)
#: are recognised by their plan, a key of 24 bytes per output.
_KEYED_CUT = 4096


def cut_plan(
    plan: AxisPlan, start: int, align: int = 1, min_length: int = 1, region: tuple[int, int] | None = None
) -> tuple[AxisPlan, int]:
    """Outputs ``start..start + n`` of one axis over the input they read, from ``plan``, their
    windows in the whole axis's coordinates (:func:`avgpool._core.plan.axis_plan` of that range):
    their plan in the tile's coordinates and the first input index of the tile's region (a
    multiple of ``align`` below the first tap read; the region ends after the last tap read, and
    holds at least ``min_length`` values where the axis has them), or the given ``region``
    (:meth:`Tiling.inner_outputs`: a window reaching out of it keeps the taps inside it, a value
    that its caller overwrites). Windows with no valid tap read nothing (a tile of only such
    windows reads values that are never summed)."""
    g = plan.geometry
    first, count = plan.first, plan.count
    if region is not None:
        lo, hi = region
        first, count = _clamped(first, count, g.dilation, lo, hi)
        valid = count > 0
    else:
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
    out = len(count)
    pad_begin = g.pad_begin + lo - start * g.stride
    geometry = AxisGeometry(
        hi - lo, g.kernel, g.stride, g.dilation, pad_begin, (out - 1) * g.stride + g.extent - (hi - lo) - pad_begin, out
    )
    return AxisPlan(geometry, np.where(valid, first - lo, 0), count, plan.divisor), lo


def _clamped(first: np.ndarray, count: np.ndarray, dilation: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The taps ``first + j * dilation`` (``j < count``) of each window that lie in ``[lo, hi)``:
    their first and count (unchanged where the window lies inside)."""
    if not count.size or (
        int(first[count > 0].min(initial=lo)) >= lo
        and int((first + (count - 1) * dilation)[count > 0].max(initial=lo)) < hi
    ):
        return first, count
    skip = np.maximum(0, -((first - lo) // dilation))  # taps before lo
    last = np.minimum(count - 1, (hi - 1 - first) // dilation)  # the last tap before hi
    kept = np.where(count > 0, np.maximum(0, last - skip + 1), 0)
    return np.where(kept > 0, first + skip * dilation, lo), kept


class _SharedPlans:
    """The plans and prepared pools that the tiles of one whole operator share (a dict
    ``_shared`` on the tiling): a tile whose windows all lie inside the input has the plan of
    every tile of its shape relative to its region, made once (a 64K-output tile's tables cost
    30 times its kernel)."""

    axes: tuple[AxisGeometry, ...]
    _shared: dict

    def _keyed_cut(
        self,
        axis: int,
        start: int,
        stop: int,
        region: tuple[int, int] | None,
        divisor: Any,
        align: int,
        min_length: int,
    ) -> tuple[AxisPlan, int, tuple | None]:
        """:func:`cut_plan` of outputs ``start..stop`` along ``axis`` (its region ``region``, or
        aligned down to ``align`` and at least ``min_length`` long), its region's start, and for a
        tile whose windows all lie inside the input (and a chunk's edges) a key that every tile
        with the same plan shares (else None)."""
        g = self.axes[axis]
        lo, hi = start * g.stride - g.pad_begin, (stop - 1) * g.stride - g.pad_begin + g.extent
        key = None
        if 0 <= lo and hi <= g.length and hi - lo >= min_length:  # every window whole: its divisor is the kernel
            first, last = region if region is not None else (lo - lo % align, hi)
            key = ("plan", axis, stop - start, lo - first, last - first)
            found = self._shared.get(key)
            if found is not None:
                return found, first, key
        plan, lo = cut_plan(axis_plan(g, divisor, any_pad(self.axes), start, stop), start, align, min_length, region)
        if key is not None:
            self._remember(key, plan)
        elif stop - start <= _KEYED_CUT:  # a chunk's edges: the tiles of one shape have the same ones
            key = ("edge", axis, plan.geometry, plan.first.tobytes(), plan.count.tobytes(), plan.divisor.tobytes())
        return plan, lo, key

    def _remember(self, key: tuple, value: Any) -> None:
        if len(self._shared) >= _SHARED_ENTRIES:
            self._shared.clear()
        self._shared[key] = value


def _inside(plan: AxisPlan, start: int, region: tuple[int, int]) -> tuple[int, int]:
    """The longest run of the windows of ``plan`` (outputs from ``start``) that have taps, all
    inside ``region``: windows move one way as outputs grow, so those are one run."""
    last = plan.first + (plan.count - 1) * plan.geometry.dilation
    inside = np.flatnonzero((plan.count > 0) & (plan.first >= region[0]) & (last < region[1]))
    if not inside.size or inside[-1] - inside[0] + 1 != inside.size:
        return start, start
    return start + int(inside[0]), start + int(inside[-1]) + 1


@dataclass(frozen=True, eq=False)
class Tiling(_SharedPlans):
    """One float operator on one whole input (spec, shape, dtype, layout): what its tiles share.
    It holds no window tables: each tile makes its own, so that a tile of a very long axis
    costs memory in proportion to the tile."""

    spec: PoolSpec
    shape: tuple[int, ...]
    dtype: np.dtype
    layout: Layout
    out_shape: tuple[int, ...]
    axes: tuple[AxisGeometry, ...]  # every spatial axis, its pads resolved
    blocks: tuple[int, ...]  # block partial sums per axis (0: direct sums), as the whole input has them
    global_window: bool
    exact: bool  # float32 windows go by the exact running sums where a slab's values allow
    headroom: int  # the exact sums' bit budget (tables.headroom)
    # plans and prepared pools shared by tiles with the same plan (keyed by their shape relative
    # to their region where all windows lie inside the input, else by the plan itself), made once:
    # a 64K-output tile's tables cost 30 times its kernel
    _shared: dict = field(default_factory=dict, repr=False)
    # the tuning current when the tiling was made: its tiles are prepared under it, whenever and
    # in whichever thread they are first pooled
    tuned_by: tuning.Tuning = field(default_factory=tuning.current, repr=False)

    @property
    def spatial_axes(self) -> tuple[int, ...]:
        """The array axes of the spatial dimensions."""
        return self.layout.spatial_axes(len(self.shape))

    def input_range(self, axis: int, start: int, stop: int) -> tuple[int, int]:
        """The input indices ``[a, b)`` along spatial ``axis`` that outputs ``start..stop`` read."""
        plan, lo, _ = self._cut(axis, start, stop)
        return lo, lo + plan.geometry.length

    def inner_outputs(self, axis: int, start: int, stop: int, region: tuple[int, int]) -> tuple[int, int]:
        """The outputs of ``start..stop`` along ``axis`` that can be pooled from ``region`` of the
        input (an input chunk: no copy), summed as the whole array sums them: those whose taps it
        holds, if it starts on a block boundary and holds two values at least, like every tile's
        region (see :meth:`_cut`). An empty range where none can."""
        g = self.axes[axis]
        lo, hi = region
        if lo % max(1, self.blocks[axis] * g.dilation) or hi - lo < min(2, g.length):
            return start, start
        return _inside(axis_plan(g, self.spec.divisor, False, start, stop), start, region)

    def _cut(
        self, axis: int, start: int, stop: int, region: tuple[int, int] | None = None
    ) -> tuple[AxisPlan, int, tuple | None]:
        """The tile's plan along ``axis``, its region's start, and for a tile whose windows all
        lie inside the input a key that every tile with the same plan shares (else None). The
        region is the one :meth:`input_range` gives, or ``region`` (see :meth:`inner_outputs`)."""
        # Regions start at a block boundary of the whole axis (the same blocks), and hold two
        # values at least: the kernels sum a window's taps in an order that depends on whether
        # the rows they sum along an axis are single values (the later axes' lengths times the
        # channels are 1), so a tile must have single-value rows exactly where the whole has.
        align = max(1, self.blocks[axis] * self.axes[axis].dilation)
        return self._keyed_cut(axis, start, stop, region, self.spec.divisor, align, 2)

    def pool(
        self,
        x: np.ndarray,
        outputs: Ranges,
        exact_slabs: np.ndarray | None = None,
        starts: tuple[int, ...] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Outputs ``outputs`` (a ``(start, stop)`` per spatial axis) of the whole operator, from
        ``x``: the input region :meth:`input_range` gives along each spatial axis, with any part
        of the batch and channel axes; or a region starting at ``starts`` (one per spatial axis):
        right where it holds the taps (:meth:`inner_outputs`), elsewhere a window's taps inside
        it (values to overwrite). ``exact_slabs`` (float32 with :attr:`exact` only): per
        slab of ``x`` (N x C in NCX, N in NXC), whether the values of the whole slab allow the
        exact sums (:func:`exact_allowed`); None when ``x`` holds whole slabs, which then decide
        for themselves. ``out``: an array of the outputs' shape to write them into (one that is
        not C-contiguous gets them through a copy)."""
        if self.layout is Layout.NXC and x.shape[-1] == 1 and self.shape[-1] > 1:
            # one channel of many: pooled as two (see _cut), the copy's outputs dropped
            result = self.pool(np.concatenate([x, x], axis=-1), outputs, exact_slabs, starts)[..., :1]
            if out is None:
                return result
            out[...] = result
            return out
        exact, plain = self.prepare(outputs, x.shape, starts)
        x = np.ascontiguousarray(x)
        if exact is None:
            return plain(x, out)
        if exact_slabs is None:
            return exact(x, out)
        exact_slabs = np.asarray(exact_slabs, bool).reshape(-1)
        if exact_slabs.all():  # each slab of the tile passes the check too: its values are some of the slab's
            return exact(x, out)
        if not exact_slabs.any():
            return plain(x, out)
        result = exact(x, out)
        chosen = ~exact_slabs
        self._slabs_view(result)[chosen] = self._slabs_view(plain(x))[chosen]
        return result

    def prepare(
        self, outputs: Ranges, shape: tuple[int, ...], starts: tuple[int, ...] | None = None
    ) -> tuple[Any, Any]:
        """What :meth:`pool` calls for an input of ``shape`` (its kernels loaded), without data:
        the pool by the exact sums (None unless :attr:`exact`) and the one by the float64 sums."""
        if self.layout is Layout.NXC and shape[-1] == 1 and self.shape[-1] > 1:
            shape = (*shape[:-1], 2)  # as pool() takes it
        regions = None
        if starts is not None:
            regions = tuple((a, a + n) for a, n in zip(starts, spatial_shape_of(shape, self.layout)))
        return self._prepared(outputs, shape, regions)

    def _prepared(self, outputs: Ranges, shape: tuple[int, ...], regions: Ranges | None = None) -> tuple[Any, Any]:
        """The tile's pools: by the exact sums (None unless :attr:`exact`) and by the float64 ones."""
        cuts = [self._cut(axis, start, stop, regions and regions[axis]) for axis, (start, stop) in enumerate(outputs)]
        key = ("pools", tuple(c[2] for c in cuts), shape) if all(c[2] is not None for c in cuts) else None
        found = self._shared.get(key) if key is not None else None
        if found is not None:
            return found
        plans = tuple(c[0] for c in cuts)
        expected = tuple(p.geometry.length for p in plans)
        if spatial_shape_of(shape, self.layout) != expected:
            raise ValueError(
                f"tile input has spatial shape {spatial_shape_of(shape, self.layout)}, "
                f"expected {expected} for outputs {outputs}"
            )
        channels = 1 if self.layout is Layout.NCX else shape[-1]
        out_shape = list(shape)
        for array_axis, p in zip(self.spatial_axes, plans):
            out_shape[array_axis] = p.geometry.out
        out_shape = tuple(out_shape)
        with tuning.using(self.tuned_by):
            tables = tables_from_plans(plans, channels, self.blocks, self.global_window)
            plain = pools.prepare_tables(out_shape, shape, self.dtype, self.layout, tables, None)
            exact = None
            if self.exact:
                running = running_plan_for(tuple(p.geometry for p in plans), channels, self.layout, tables)
                exact = pools.prepare_tables(out_shape, shape, self.dtype, self.layout, tables, running)
        if key is not None:
            self._remember(key, (exact, plain))
        return exact, plain

    def _slabs_view(self, array: np.ndarray) -> np.ndarray:
        """``array`` with its slabs along the first axis."""
        lead = 2 if self.layout is Layout.NCX else 1
        return array.reshape(-1, *array.shape[lead:])


def tiling(spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout) -> Tiling:
    """The :class:`Tiling` of a validated spec on a whole input of ``shape``."""
    dtype = np.dtype(dtype)
    out_shape = infer_output_shape(spec, shape, layout)
    check_output_fits(out_shape, dtype, shape)
    geometry = resolve(spec, spatial_shape_of(shape, layout))
    channels = 1 if layout is Layout.NCX else shape[-1]
    blocks = block_sizes(geometry, channels)
    first_windows = tuple(axis_plan(g, spec.divisor, any_pad(geometry), 0, min(1, g.out)) for g in geometry)
    global_window = all(g.out > 0 for g in geometry) and is_global(first_windows)
    exact = dtype == np.float32 and uses_running(geometry, layout)
    return Tiling(
        spec, tuple(shape), dtype, layout, out_shape, geometry, blocks, global_window, exact, headroom(geometry)
    )


def slab_bit_range(x: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Per slab of float32 ``x`` (N x C in NCX, N in NXC): the bits of the largest magnitude
    (NaN's if it holds one) and of the smallest nonzero one minus one — what the exact
    kernel's check (:func:`.kernels.running.fixed_point_exponent`) reduces a slab to; combine
    the tiles of a slab with max and min. (A slab of zeros gives Inf's bits minus one where the
    kernel's wraps to 2**32 - 1: the same decision, as its largest magnitude is 0.)"""
    magnitude = np.abs(np.asarray(x, np.float32))  # the bits of non-negative floats order as the floats
    axes = tuple(range(2, x.ndim)) if layout is Layout.NCX else tuple(range(1, x.ndim))
    top = magnitude.max(axis=axes, initial=0).view(np.uint32)
    smallest = magnitude.min(axis=axes, where=magnitude > 0, initial=np.inf)
    return top, smallest.view(np.uint32) - np.uint32(1)


def exact_allowed(top: np.ndarray, bottom: np.ndarray, headroom: int) -> np.ndarray:
    """Whether slabs whose :func:`slab_bit_range` is (top, bottom) go by the exact sums: the
    kernel's check, on the whole slab's reduction."""
    top = np.asarray(top, np.int64)
    low = (np.asarray(bottom, np.uint32).astype(np.int64) + 1) & 0xFFFFFFFF
    q = np.maximum(low >> 23, 1) - 150
    finite = top < 0x7F800000
    in_range = (top == 0) | (np.maximum(top >> 23, 1) - 126 - q <= headroom)
    return finite & in_range


@dataclass(frozen=True)
class QuantizedEngine:
    """What :class:`QLinearTiling` prepares and runs its tiles with: the quantized engine's
    functions (:data:`avgpool._core.quantized_pools.ENGINE`), handed in so that the engine, which
    tiles long inputs, and the tiling import in one direction only."""

    prepare: Callable[..., pools.PreparedPool]  # (shape, dtype, geometry[, plans]): a tile of whole planes, or by plans
    kernel_args: Callable[..., tuple]  # (prepared, params)
    run: Callable[..., np.ndarray]  # (prepared, x, kernel_args)
    run_into: Callable[..., np.ndarray]  # (prepared, x, kernel_args, out)


@dataclass(frozen=True, eq=False)
class QLinearTiling(_SharedPlans):
    """One QLinearAveragePool operator on one whole input: what its tiles share (as a
    :class:`Tiling`, the plans and prepared pools of tiles of one shape, made once)."""

    geometry: Geometry  # the dialect's, for the whole input (avgpool._ops.qlinear.make_geometry)
    shape: tuple[int, ...]
    dtype: np.dtype
    out_shape: tuple[int, ...]
    axes: tuple[AxisGeometry, ...]  # onnxruntime's geometry, canonical (explicit pads, floor rounding)
    engine: QuantizedEngine = field(repr=False)
    _shared: dict = field(default_factory=dict, repr=False)
    tuned_by: tuning.Tuning = field(default_factory=tuning.current, repr=False)  # as Tiling.tuned_by

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
            return 0, self.axes[axis].length
        plan, lo, _ = self._cut(axis, start, stop)
        return lo, lo + plan.geometry.length

    def inner_outputs(self, axis: int, start: int, stop: int, region: tuple[int, int]) -> tuple[int, int]:
        """The outputs of ``start..stop`` along ``axis`` whose taps ``region`` holds (none for
        the global path, which reads whole planes)."""
        if self.geometry.global_path:
            return start, start
        return _inside(axis_plan(self.axes[axis], self.geometry.spec.divisor, False, start, stop), start, region)

    def _cut(
        self, axis: int, start: int, stop: int, region: tuple[int, int] | None = None
    ) -> tuple[AxisPlan, int, tuple | None]:
        return self._keyed_cut(axis, start, stop, region, self.geometry.spec.divisor, 1, 1)

    def prepare(
        self, outputs: Ranges, shape: tuple[int, ...], starts: tuple[int, ...] | None = None
    ) -> pools.PreparedPool:
        """What :meth:`pool` runs for an input of ``shape``, without data (tiles of one shape
        share it, and with it its kernel arguments per quantisation values)."""
        if self.geometry.global_path:  # one window per plane: the tile is whole planes
            key = ("global", shape)
            found = self._shared.get(key)
            if found is None:
                with tuning.using(self.tuned_by):
                    found = self.engine.prepare(shape, self.dtype, self.geometry)
                self._remember(key, found)
            return found
        lengths = spatial_shape_of(shape, self.layout)
        cuts = [
            self._cut(axis, start, stop, None if starts is None else (starts[axis], starts[axis] + n))
            for axis, ((start, stop), n) in enumerate(zip(outputs, lengths))
        ]
        key = ("pools", tuple(c[2] for c in cuts), shape) if all(c[2] is not None for c in cuts) else None
        found = self._shared.get(key) if key is not None else None
        if found is None:
            with tuning.using(self.tuned_by):
                found = self.engine.prepare(shape, self.dtype, self.geometry, tuple(c[0] for c in cuts))
            if key is not None:
                self._remember(key, found)
        return found

    def pool(
        self,
        x: np.ndarray,
        outputs: Ranges,
        params: QuantParams,
        starts: tuple[int, ...] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Outputs ``outputs`` of the whole operator from ``x``, the region :meth:`input_range`
        gives (any part of the batch and channel axes), or a region starting at ``starts``
        (:meth:`inner_outputs`), into ``out`` if given."""
        x = np.ascontiguousarray(x)
        prepared = self.prepare(outputs, x.shape, starts)
        if out is None:
            return self.engine.run(prepared, x, self.engine.kernel_args(prepared, params))
        return self.engine.run_into(prepared, x, self.engine.kernel_args(prepared, params), out)


def tile_regions(tiling: Tiling | QLinearTiling, ndim: int, step: int) -> Iterator[tuple[Ranges, tuple, tuple]]:
    """The tiles of a whole operator's output, ``step`` outputs along each spatial axis: per
    tile its output ranges, the index of the input region it reads and that of its outputs."""
    spatial = tiling.spatial_axes
    take, put = [slice(None)] * ndim, [slice(None)] * ndim
    ranges = [[(a, min(a + step, n)) for a in range(0, n, step)] for n in (tiling.out_shape[a] for a in spatial)]
    for outputs in itertools.product(*ranges):
        for i, (axis, (start, stop)) in enumerate(zip(spatial, outputs)):
            take[axis] = slice(*tiling.input_range(i, start, stop))
            put[axis] = slice(start, stop)
        yield outputs, tuple(take), tuple(put)


@dataclass(frozen=True, eq=False)
class TiledPool:
    """The whole operator pooled tile by tile (:func:`avgpool._core.engine.prepare` for inputs with a
    very long axis): the window tables of a tile take memory in proportion to the tile, where
    the whole axis's would take 48 bytes per output (3.4 GiB more than a 1 x 1 x 32M input and
    its output). The same interface as :class:`avgpool._core.pools.PreparedPool`."""

    tiling: Tiling
    tile_outputs: int  # outputs per tile along each axis
    #: It prepares a pool per tile shape on its calls, so the call memos do not keep it: weighed
    #: when kept, it would count none of them (tests/test_memo.py::test_the_memo_holds_no_large_tables).
    grows_when_called: ClassVar[bool] = True

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.tiling.out_shape

    @property
    def dtype(self) -> np.dtype:
        return self.tiling.dtype

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(self.out_shape, self.dtype)
        target, copy = out_target(out, x, self.out_shape, self.dtype)
        exact = self._exact_slabs(x) if self.tiling.exact else None
        for outputs, take, put in tile_regions(self.tiling, x.ndim, self.tile_outputs):
            target[put] = self.tiling.pool(x[take], outputs, exact)
        if copy:
            out[...] = target
        return out

    def _exact_slabs(self, x: np.ndarray) -> np.ndarray:
        """The exact sums' check on every whole slab, reduced piece by piece along the longest
        spatial axis (a whole-input temporary would double the memory)."""
        axis = max(self.tiling.spatial_axes, key=lambda a: x.shape[a])
        index = [slice(None)] * x.ndim
        top = bottom = None
        for start in range(0, max(1, x.shape[axis]), _CHECK_PIECE):
            index[axis] = slice(start, start + _CHECK_PIECE)
            piece_top, piece_bottom = slab_bit_range(x[tuple(index)], self.tiling.layout)
            top = piece_top if top is None else np.maximum(top, piece_top)
            bottom = piece_bottom if bottom is None else np.minimum(bottom, piece_bottom)
        return exact_allowed(top, bottom, self.tiling.headroom)


#: Positions along an axis reduced at a time by :meth:`TiledPool._exact_slabs`.
_CHECK_PIECE = 1 << 16


def tiled_pool(spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, tile_outputs: int) -> TiledPool:
    """A :class:`TiledPool` whose tiles take at most ``tile_outputs`` outputs along each axis."""
    return TiledPool(tiling(spec, shape, dtype, layout), tile_outputs)
