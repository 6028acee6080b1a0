"""The flat tables the compiled kernels take, from the window plans of a (spec, shape): per-axis
geometry, window starts, tap counts, block splits and divisor scales (:class:`KernelTables`),
the small-plane masks, and the exact float32 path's running-sum plan (:class:`RunningPlan`);
which summation each axis gets (direct taps or block partial sums) is decided here, once for a
whole input and its tiles. Cached per (spec, shape)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels import columns
from ..kernels.arguments import RunningTables
from . import tuning
from .caches import BoundedCache
from .plan import AxisPlan, make_plan, total_taps
from .shape import AxisGeometry, resolve
from .spec import Layout, PoolSpec


@dataclass(frozen=True, eq=False)
class KernelTables:
    """The plan of every axis, in the flat arrays the compiled kernel takes.

    ``axes[i]``: axis ``i``'s row, in the columns :mod:`.kernels.columns` names (length,
    outputs, offset into the concatenated tables, dilation, stride, block size or 0 for direct
    sums, first and one-past-last output whose window lies wholly inside the input, and the
    axis's pad_begin where :func:`small_plane_kind` gives a kind, else -1).
    ``scales`` are the reciprocals of the divisors: a float64 divide per output costs more than
    the whole sum, and the extra rounding (2**-53 relative) is far below a float32 ulp; a zero
    divisor gives inf, and 0 * inf = NaN for an empty window.
    ``band_row_size`` and ``band_extra_size`` size the scratch when a slab is pooled in bands of
    outputs of the first axis (see :func:`band_and_scratch`).
    ``global_scale`` > 0 marks global pooling (one window per axis covering the whole input),
    which the kernel does as one plain sum per slab. ``windows_overlap``: some input value lies
    in more than one window along some axis (its slabs are grouped within the smaller budget).
    ``plane_masks``, ``plane_factors`` and ``plane_sums``: the tables of :mod:`.kernels.small_planes`
    where it is used (:func:`small_plane_tables`), else empty and 0.
    """

    axes: np.ndarray
    firsts: np.ndarray
    counts: np.ndarray
    splits: np.ndarray
    scales: np.ndarray
    scratch_size: int
    global_scale: float
    band_row_size: int  # intermediates per output of the first axis, pooling a slab in bands
    band_extra_size: int  # the prefix/suffix sums of one row of a later axis
    windows_overlap: bool
    plane_masks: np.ndarray
    plane_factors: np.ndarray
    plane_sums: int


def _interior(plan: AxisPlan) -> tuple[int, int]:
    """The range of outputs whose windows have every tap inside the input (an affine run)."""
    g = plan.geometry
    starts = np.arange(g.out, dtype=np.int64) * g.stride - g.pad_begin
    inside = np.nonzero((plan.count == g.kernel) & (plan.first == starts))[0]
    return (int(inside[0]), int(inside[-1]) + 1) if inside.size else (0, 0)


def _block_splits(plan: AxisPlan, block: int) -> np.ndarray:
    """Per output: the block suffix and block prefix positions whose sum is the window (-1: not
    used), and the block the window starts in. A window of at most ``block`` taps spans two
    blocks (suffix + prefix), or starts a block (a prefix), or is clipped by the end of the input
    (a suffix). An empty window takes its predecessor's block, so the blocks never decrease."""
    splits = np.full((plan.geometry.out, 3), -1, dtype=np.int64)
    if block == 0:
        return splits
    d = plan.geometry.dilation
    first, count = plan.first, plan.count
    last = first + (np.maximum(count, 1) - 1) * d
    two_blocks = (first // d) // block != (last // d) // block
    starts_block = (first // d) % block == 0
    present = count > 0
    splits[:, 0] = np.where(present & (two_blocks | ~starts_block), first, -1)
    splits[:, 1] = np.where(present & (two_blocks | starts_block), last, -1)
    starting_block = np.where(present, (first // d) // block, 0)
    splits[:, 2] = np.maximum.accumulate(starting_block) if starting_block.size else starting_block
    return splits


def block_size(geometry: AxisGeometry, taps: int, inner: int) -> int:
    """The block size of an axis's block partial sums (its kernel), or 0 for direct sums, for an
    axis whose windows hold ``taps`` valid taps in all. ``inner``: the values after the axis
    in a slab (1: the axis is contiguous)."""
    g = geometry
    t = tuning.current()
    crossover = t.block_sums_min_kernel if inner > 1 else t.contiguous_block_sums_min_kernel
    if g.kernel < crossover or taps <= 3 * g.length:
        return 0
    # a kernel longer than a residue class of the axis: one block holds the whole class, the same
    # sums and splits as blocks of ``kernel`` (one of them partly filled), without stepping
    # ``kernel`` times through a block of a few values (tests/test_absurd_attributes.py)
    return min(g.kernel, -(-g.length // g.dilation))


def block_sizes(geometry: tuple[AxisGeometry, ...], channels: int) -> tuple[int, ...]:
    """:func:`block_size` of every axis of a slab with ``channels`` values per position: the one
    rule for a whole input and its tiles (avgpool._core.tiles), whose sums must be the same."""
    lengths = [g.length for g in geometry]
    return tuple(
        block_size(g, total_taps(g), channels * math.prod(lengths[axis + 1 :])) for axis, g in enumerate(geometry)
    )


def is_global(plans: tuple[AxisPlan, ...]) -> bool:
    """One window per axis covering the whole input: pooled as one plain sum per slab. (The
    plans of the first output of each axis are enough.)"""
    return all(
        p.geometry.out == 1 and p.geometry.length > 0 and p.count[0] == p.geometry.length and p.first[0] == 0
        for p in plans
    )


@BoundedCache
def kernel_tables(spec: PoolSpec, spatial_shape: tuple[int, ...], channels: int) -> KernelTables:
    """Cached per (spec, shape): repeated calls on the same node shape pay only the kernel."""
    # the plans are an intermediate, cached here with the tables (and bounded with them): not
    # in make_plan's own cache, which is bounded by count only
    plans = getattr(make_plan, "__wrapped__", make_plan)(spec, spatial_shape)
    blocks = block_sizes(tuple(p.geometry for p in plans), channels)
    return tables_from_plans(plans, channels, blocks, is_global(plans))


def fuses_passes(plans: tuple[AxisPlan, ...], channels: int, blocks: tuple[int, ...], global_window: bool) -> bool:
    """Whether the two passes over a channels-last plane run as one (kernels.separable._fused_rows):
    windows of at most three taps along each axis (the sums the passes spell out term by term),
    not overlapping along the second axis (each column's sum is then needed by one window
    only), and channels enough for vector loops. Serial, fused against two passes, 2x2 s2:
    1x56x56x128 37 vs 62 us, 1x112x112x16 19 vs 32, 1x112x112x8 16.7 vs 17.4, 1x112x112x3 17.7
    vs 13.7 (the fused loops are then too short)."""
    if len(plans) != 2 or channels < tuning.current().fused_min_channels or global_window or any(blocks):
        return False
    return all(int(p.count.max(initial=0)) <= 3 for p in plans) and not _windows_overlap(plans[1].geometry)


def _windows_overlap(g: AxisGeometry) -> bool:
    """Whether some input value lies in more than one window along this axis."""
    return g.stride < g.extent


def tables_from_plans(
    plans: tuple[AxisPlan, ...], channels: int, blocks: tuple[int, ...], global_window: bool
) -> KernelTables:
    """The kernel's tables for window plans whose summation choices (block sizes, global sum)
    are given: by the plans themselves, or for a tile (:mod:`avgpool._core.tiles`) by the whole
    operator's plans, so that each window is summed as the whole array would sum it."""
    lengths = [p.geometry.length for p in plans]
    outs = [p.geometry.out for p in plans]
    offsets = np.cumsum([0] + outs)
    scratch = band_row = band_extra = channels
    axes = np.full((len(plans), columns.AXIS_COLUMNS), -1, np.int64)
    splits = []
    for axis, (p, block) in enumerate(zip(plans, blocks)):
        g = p.geometry
        inner = channels * math.prod(lengths[axis + 1 :])
        outer = math.prod(outs[:axis])
        scratch = max(scratch, outer * g.out * inner, g.length * inner)
        band_row = max(band_row, math.prod(outs[1 : axis + 1]) * inner)
        if axis > 0:
            band_extra = max(band_extra, g.length * inner)
        row = axes[axis]
        row[columns.LENGTH], row[columns.OUTPUTS], row[columns.OFFSET] = g.length, g.out, offsets[axis]
        row[columns.DILATION], row[columns.STRIDE], row[columns.BLOCK] = g.dilation, g.stride, block
        row[columns.INNER_LO], row[columns.INNER_HI] = _interior(p)
        splits.append(_block_splits(p, block))
    scales = divisor_scales(plans)
    plane_masks, plane_factors, plane_sums = np.empty(0, np.uint8), np.empty(0), 0
    kind = small_plane_kind(plans, channels, blocks, global_window)
    if kind is not None:
        axes[:, columns.PLANE_PAD] = [p.geometry.pad_begin for p in plans]
        plane_masks, plane_factors, plane_sums = small_plane_tables(plans, scales, kind)
    axes[0, columns.FUSED] = int(kind is None and fuses_passes(plans, channels, blocks, global_window))
    return KernelTables(
        axes=axes,
        firsts=np.concatenate([p.first for p in plans]).astype(np.int64),
        counts=np.concatenate([p.count for p in plans]).astype(np.int64),
        splits=np.concatenate(splits),
        scales=_cache_aligned(scales),
        scratch_size=scratch,
        global_scale=1.0 / math.prod(float(p.divisor[0]) for p in plans) if global_window else 0.0,
        band_row_size=band_row,
        band_extra_size=band_extra,
        windows_overlap=any(_windows_overlap(p.geometry) for p in plans),
        plane_masks=plane_masks,
        plane_factors=plane_factors,
        plane_sums=plane_sums,
    )


#: How :mod:`.kernels.small_planes` pools a plane (:func:`small_plane_kind`): its per-position masks,
#: its flat loops, or its stride-2 rows.
MASKS, FLAT, STRIDE_TWO = "masks", "flat", "stride two"


def small_plane_kind(
    plans: tuple[AxisPlan, ...], channels: int, blocks: tuple[int, ...], global_window: bool
) -> str | None:
    """How the slabs are pooled by :mod:`.kernels.small_planes`, or None (the separable passes):
    2-D NCX planes without dilation, and either every axis at stride 1 with as many outputs as
    inputs and windows of 3 taps centred on their output (pad_begin 1) or of 1 (so that only a
    window's first and last tap can fall outside the plane), by the flat loops where
    :func:`_flat` takes the rows, else by the masks in planes of at most
    Tuning.small_plane_values values; or every axis at stride 2 (:func:`_stride_two`) in rows of
    at least Tuning.stride_two_min_columns outputs, planes of at most Tuning.stride_two_max_values
    values. (The finite bits are those of the separable passes: this only picks the faster
    loops.)"""
    if len(plans) != 2 or channels != 1 or global_window or any(blocks):
        return None
    values = math.prod(p.geometry.length for p in plans)
    if all(p.geometry.stride == 2 for p in plans):
        tune = tuning.current()
        fits = 0 < values <= tune.stride_two_max_values and plans[1].geometry.out >= tune.stride_two_min_columns
        return STRIDE_TWO if fits and _stride_two(plans) else None
    if not all(
        g.stride == 1 and g.dilation == 1 and g.out == g.length and g.kernel in (1, 3) and g.pad_begin == g.kernel // 2
        for g in (p.geometry for p in plans)
    ):
        return None
    return FLAT if _flat(plans) else MASKS if 0 < values <= tuning.current().small_plane_values else None


def _flat(plans: tuple[AxisPlan, ...]) -> bool:
    """Whether planes of "same" windows at stride 1 go by the flat loops of
    :mod:`.kernels.small_planes` (no masks): rows of at least Tuning.flat_plane_min_width values
    (and 2: a row's first and last window are summed apart), planes of at most
    Tuning.flat_plane_values, and along each axis one divisor for all the windows between the
    first and the last (which is how their scales are given)."""
    tune = tuning.current()
    height, width = (p.geometry.length for p in plans)
    return (
        width >= max(2, tune.flat_plane_min_width)
        and 0 < height * width <= tune.flat_plane_values
        and all((p.divisor[1:-1] == p.divisor[1]).all() for p in plans if p.divisor.size > 2)
    )


def _stride_two(plans: tuple[AxisPlan, ...]) -> bool:
    """The stride-2 planes of :mod:`.kernels.small_planes`: rows of at most LANES values (up to
    LANES / 2 outputs), along each axis windows of 3 taps from pad_begin 1 or of 2 from pad_begin
    0 or 1, every window holding a tap and a window of 3 its middle one (only a window's first
    and last tap can fall outside the plane)."""
    from ..kernels.small_planes import LANES

    g = plans[1].geometry
    if g.length > LANES or g.out > LANES // 2:
        return False
    for p in plans:
        g = p.geometry
        if g.dilation != 1 or (g.kernel, g.pad_begin) not in ((3, 1), (2, 1), (2, 0)) or not (p.count > 0).all():
            return False
        if g.kernel == 3 and 2 * (g.out - 1) >= g.length:  # the last window's middle tap
            return False
    return True


def small_plane_tables(
    plans: tuple[AxisPlan, ...], scales: np.ndarray, kind: str
) -> tuple[np.ndarray, np.ndarray, int]:
    """The masks, factors and sums size (float64 values) of :mod:`.kernels.small_planes` for
    planes of ``kind`` (:func:`small_plane_kind`), pooled a block of planes at a time (as many
    whole planes as Tuning.small_plane_block_values holds, at least one). ``scales``: the tables'
    scales, every axis's outputs in turn."""
    height, width = (p.geometry.length for p in plans)
    scales0, scales1 = scales[: plans[0].geometry.out], scales[plans[0].geometry.out :]
    if kind == STRIDE_TWO:  # one plane's rows and columns (the kernel's _pool_stride_two)
        from ..kernels.small_planes import LANES

        lanes = LANES // 2
        (up, down), (left, right) = (_valid_edges(p) for p in plans)
        columns = [np.pad(m, (0, lanes - m.size)) for m in (left, right)]
        kernels = np.array([p.geometry.kernel for p in plans])
        return (
            np.concatenate([kernels, up, down, *columns]).astype(np.uint8),
            np.concatenate([scales0, np.pad(scales1, (0, lanes - scales1.size), constant_values=1.0)]),
            0,
        )
    plane = height * width
    planes = max(1, tuning.current().small_plane_block_values // plane)
    sums = planes * plane + 2  # a block of planes and a value of margin at each end
    if kind == FLAT:  # each axis's scale at its first window, the windows between and its last
        edges = [0, min(1, height - 1), height - 1, height, height + min(1, width - 1), height + width - 1]
        return np.empty(0, np.uint8), np.ascontiguousarray(scales[edges]), sums
    # per position of a block: whether the first and last tap along each axis are valid (uint8,
    # four rows), and each axis's scale (float64, two rows)
    row, column = np.arange(plane) // width, np.arange(plane) % width
    masks = [m[row] for m in _valid_edges(plans[0])] + [m[column] for m in _valid_edges(plans[1])]
    factors = [scales0[row], scales1[column]]
    return (
        np.ascontiguousarray(np.tile(np.stack(masks).astype(np.uint8), (1, planes)).ravel()),
        np.ascontiguousarray(np.tile(np.stack(factors), (1, planes)).ravel()),
        sums,
    )


def _valid_edges(plan: AxisPlan) -> tuple[np.ndarray, np.ndarray]:
    """Per output along the axis: whether its window's first and its last tap are valid taps."""
    g = plan.geometry
    first_tap = np.arange(g.out) * g.stride - g.pad_begin
    last_tap = first_tap + g.kernel - 1
    taps = plan.count > 0
    return (plan.first == first_tap) & taps, (plan.first + plan.count - 1 == last_tap) & taps


def band_and_scratch(t: KernelTables, group: int) -> tuple[int, int]:
    """Outputs of the first axis per band, and the scratch size per buffer. A slab whose
    intermediates overflow the cache budget alone (group 1) goes in bands (direct sums along
    the first axis only: the block sums there sweep the whole axis)."""
    n0 = int(t.axes[0, columns.OUTPUTS])
    if group > 1 or t.axes.shape[0] < 2 or t.axes[0, columns.BLOCK] > 0:
        return max(1, n0), t.scratch_size
    band = max(1, tuning.current().band_scratch_bytes // (16 * max(1, t.band_row_size)))
    if band >= n0:
        return max(1, n0), t.scratch_size
    return band, max(band * t.band_row_size, t.band_extra_size)


def _cache_aligned(values: np.ndarray) -> np.ndarray:
    """A contiguous copy of ``values`` that starts a 64-byte cache line. numpy aligns to 16
    bytes, and the kernels read the scale tables as vectors beside the outputs: aligned, the
    1x16x256x256 k31 planes' scaling took 0.085 ms instead of 0.100."""
    spare = np.empty(values.size + 64 // values.itemsize, values.dtype)
    skip = (-spare.ctypes.data % 64) // values.itemsize
    aligned = spare[skip : skip + values.size]
    aligned[...] = values.ravel()
    return aligned


def divisor_scales(plans: tuple[AxisPlan, ...]) -> np.ndarray:
    """The factors each axis's sums are multiplied by, every axis's outputs in turn: their
    product over the axes is 1 / the window's divisor, and the one rounding of a reciprocal
    comes after every sum. Every axis but the last multiplies by kernel / (divisor * P), P the
    power of two from the kernel up: a power of two in the interior, exact (kernel / divisor
    times one: 1.5 / 4 for a 3-tap window's 2-tap edge, exact too where that ratio is), and at
    most 1, so no partial sum outgrows the taps' own (float64 near its maximum); the last axis
    by P / (those kernels times its divisor). Scaled by its own reciprocal, each axis would
    round inside the sum: a window summing to 0 would not give 0, nor small integers their
    sum / count (tests/test_properties.py). The kernels multiply by the first axis's factor
    first (separable passes, small planes, the exact sums' row factors); a tile's factors are
    the whole axis's (they depend on the kernel only), so tiles keep the whole input's bits.
    A divisor of 0 (no valid tap) gives an infinite factor: 0 * inf, NaN, as 0 / 0."""
    *before, last = plans
    kernels = [float(p.geometry.kernel) for p in before]
    powers = [float(1 << (p.geometry.kernel - 1).bit_length()) for p in before]
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = [k / (p.divisor.astype(np.float64) * q) for k, q, p in zip(kernels, powers, before)]
        factors.append(math.prod(powers) / (math.prod(kernels) * last.divisor.astype(np.float64)))
    return np.concatenate(factors)


# The exact int64 running sums of :mod:`.kernels.running` for one (spec, shape), in the named
# tuple the kernel takes (RunningTables):
# ``passes[j]`` (the columns PASS_* of :mod:`.kernels.columns`) = (axis, runs per slab, values per
# row, pad_begin, kernel, padded line length, clipped; the last four are 0 but for the contiguous
# axis of NCX), in NCX the contiguous last axis first (the kernel reads its line geometry from
# ``passes[0]``). ``clipped``: that line would be more than twice the input and output along the
# axis (a huge kernel with few outputs), so the kernel sums the windows clipped to the input from
# prefix sums instead, in a line of ``2 * length + 1`` (a 1-D line, clipped or long, is streamed
# in chunks: no line).
# ``row_factors`` are the divisor scales of the axes before the last running axis (the last
# spatial axis of NXC, the one before it of NCX; one per output row of the axes before it); those
# after it are the contiguous axis's of NCX, which the kernel reads from the tables' scales (NXC
# has none: its rows are channels). ``headroom``: how many bits a value may take as an integer so
# that no sum of the pool overflows an int64.
# ``int_size``: the running sums the kernel holds while it sweeps a slab, one row along each axis
# (NCX: but the last two), the product of the later axes' lengths and the channels: ``2 * slab /
# length of the first axis`` bytes and less, or, past Tuning.exact_held_bytes, of the boxes
# ``box_outputs`` gives (:func:`running_boxes`), never a copy of the slab. ``group``: slabs checked
# and pooled together (their input fits in Tuning.exact_group_bytes, so the sums read it from
# cache after the check).
RunningPlan = RunningTables


def running_plan(
    spec: PoolSpec, spatial_shape: tuple[int, ...], channels: int, layout: Layout, tables: KernelTables
) -> RunningPlan | None:
    """The exact running-sum plan, or None where it does not pay or does not apply: kernels
    under Tuning.exact_running_min_kernel, dilations, global pooling, and NCX strides along the
    contiguous axis. The divisor scales are those of ``tables`` (the same spec and shape)."""
    geometry = resolve(spec, spatial_shape)  # the plans' geometry, without caching plans
    return running_plan_for(geometry, channels, layout, tables) if uses_running(geometry, layout) else None


def uses_running(geometry: tuple[AxisGeometry, ...], layout: Layout) -> bool:
    """Whether float32 windows of this geometry go by the exact running sums (where a slab's
    values allow): see :func:`running_plan`."""
    return not (
        max(g.kernel for g in geometry) < tuning.current().exact_running_min_kernel
        or any(g.dilation != 1 for g in geometry)
        or all(g.out == 1 for g in geometry)
        or (layout is Layout.NCX and geometry[-1].stride != 1)
    )


#: The most bits a value may take as an integer of the exact running sums: the kernels convert
#: floats to int64 through float64 sums (:func:`.kernels.running._fixed`), exact up to 2**51.
VALUE_BITS_MAX = 51


def headroom(geometry: tuple[AxisGeometry, ...]) -> int:
    """How many bits a value may take as an integer so that no window sum overflows an int64,
    and at most :data:`VALUE_BITS_MAX`."""
    return min(VALUE_BITS_MAX, 62 - math.ceil(math.log2(math.prod(g.kernel for g in geometry))))


def running_plan_for(
    geometry: tuple[AxisGeometry, ...], channels: int, layout: Layout, tables: KernelTables
) -> RunningPlan:
    """The running-sum plan of windows with this geometry (a whole input's, or a tile's)."""
    ndim = len(geometry)
    ncx = layout is Layout.NCX
    current = [g.length for g in geometry]
    order = [ndim - 1, *range(ndim - 1)] if ncx else list(range(ndim))
    rows = []
    for axis in order:
        g = geometry[axis]
        runs = math.prod(current[:axis])
        inner = math.prod(current[axis + 1 :]) * channels
        contiguous = ncx and axis == ndim - 1
        line = max(g.pad_begin + g.length, g.out - 1 + g.kernel) if contiguous else 0  # pad_begin zeros on
        # windows clipped to the input hold at most ``length`` <= ``kernel`` values: within headroom
        # (a tile's windows may start after its first value, pad_begin < 0: clipped too)
        clipped = contiguous and (g.pad_begin < 0 or (g.kernel >= g.length and line > 2 * (g.length + g.out) + 64))
        if clipped:
            line = 2 * g.length + 1
        rows.append(
            (axis, runs, inner, g.pad_begin if contiguous else 0, g.kernel if contiguous else 0, line, int(clipped))
        )
        current[axis] = geometry[axis].out
    boxes = running_boxes(geometry, channels, ncx)
    final = order[-1]
    scales = [tables.scales[row[columns.OFFSET] : row[columns.OFFSET] + row[columns.OUTPUTS]] for row in tables.axes]
    group_bytes = tuning.current().exact_group_bytes
    row_factors = functools.reduce(np.multiply.outer, scales[:final], np.ones(1)).ravel()
    passes = np.asarray(rows, dtype=np.int64).reshape(-1, columns.PASS_COLUMNS)
    return RunningPlan(
        passes=passes,
        headroom=headroom(geometry),
        row_factors=np.ascontiguousarray(row_factors),
        int_size=_box_held(geometry, channels, ncx, boxes),
        box_outputs=np.asarray(boxes, dtype=np.int64),
        group=max(1, group_bytes // (math.prod(g.length for g in geometry) * channels * 4)),
    )


def _box_held(geometry: tuple[AxisGeometry, ...], channels: int, ncx: bool, boxes: tuple[int, ...]) -> int:
    """The int64s that the running sums of a box of ``boxes`` outputs (then channels) hold:
    one row per level (NCX: but the last two), each the product of the box's later lengths and
    channels. Along an axis it cuts, a box reads at most its windows' extent."""
    lengths = [
        g.length if per_box >= g.out else min(g.length, (per_box - 1) * g.stride + g.kernel)
        for g, per_box in zip(geometry, boxes)
    ]
    ndim = len(geometry)
    rows = [math.prod(lengths[axis + 1 :]) * boxes[-1] for axis in range(ndim)]
    if ndim == 2 and lengths[0] == 1:
        rows[0] = 0  # one row: the kernel reads it from the input
    return sum(rows[: max(0, ndim - 2)] if ncx else rows)


def running_boxes(geometry: tuple[AxisGeometry, ...], channels: int, ncx: bool) -> tuple[int, ...]:
    """Outputs per box along each spatial axis, then channels per box, that the exact kernel
    sweeps a slab in: the whole slab where its running sums take at most Tuning.exact_held_bytes, else
    boxes as big as that allows. Axis 0 is never cut (the sweep runs along it), nor NCX's
    contiguous axis (its line of column sums is as long as the axis, at most a tile's) or a 1-D
    or 2-D NCX slab's (their kernels hold a line). The fewest outer axes are cut, each to the
    same number of outputs, at least Tuning.exact_box_min_outputs where that fits: every cut axis has
    the input of about (kernel - stride) / that many outputs read again per box (1x32x256x64x64
    NXC k5 at 1 MiB: two axes cut to 40 outputs took 1.16 times one sweep, one cut to 26 0.97).
    NXC cuts its channels first where boxes of that many outputs along every axis would still
    hold too much (channels are read once whatever the box)."""
    whole = (*(g.out for g in geometry), channels)
    t = tuning.current()
    budget = t.exact_held_bytes // 8
    if _box_held(geometry, channels, ncx, whole) <= budget:
        return whole
    cuttable = range(1, len(geometry) - 1 if ncx else len(geometry))

    def boxes(cut: int, per_box: int, per_channels: int) -> tuple[int, ...]:
        """Axes ``1..cut`` of the cuttable ones in boxes of ``per_box`` outputs."""
        return (
            *(min(g.out, per_box) if axis in cuttable[:cut] else g.out for axis, g in enumerate(geometry)),
            per_channels,
        )

    def most_outputs(cut: int, per_channels: int) -> int:
        """The most outputs per box that fit the budget, cutting ``cut`` axes; at least 1."""
        low, high = 1, max(whole[:-1])
        while low < high:
            middle = (low + high + 1) // 2
            if _box_held(geometry, per_channels, ncx, boxes(cut, middle, per_channels)) <= budget:
                low = middle
            else:
                high = middle - 1
        return low

    fewest = t.exact_box_min_outputs
    per_channels = channels
    if not ncx and _box_held(geometry, channels, ncx, boxes(len(cuttable), fewest, channels)) > budget:
        per_channels = min(channels, max(1, budget // _box_held(geometry, 1, ncx, boxes(len(cuttable), fewest, 1))))
    for cut in range(1, len(cuttable)):
        per_box = most_outputs(cut, per_channels)
        if per_box >= fewest:
            return boxes(cut, per_box, per_channels)
    return boxes(len(cuttable), most_outputs(len(cuttable), per_channels), per_channels)
