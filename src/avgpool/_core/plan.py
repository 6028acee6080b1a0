"""Per-axis window tables for one (spec, input spatial shape), cached.

Windows are boxes, so both the sum and the divisor factorise per axis (semantics 1.2): an N-D
pool is a sequence of 1-D passes, each described by one of these tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .caches import BoundedCache
from .shape import AxisGeometry, resolve
from .spec import Divisor, PoolSpec


@dataclass(frozen=True, eq=False)
class AxisPlan:
    """The windows of one axis: for output ``o`` the valid taps are
    ``first[o] + j * dilation`` for ``j < count[o]``; the window's factor of the divisor is
    ``divisor[o]`` (0 where no tap is valid under the valid-taps rule: 0/0 gives NaN)."""

    geometry: AxisGeometry
    first: np.ndarray  # int64, index into the input of the first valid tap
    count: np.ndarray  # int64, number of valid taps
    divisor: np.ndarray  # float64, this axis's factor of the divisor


def _tap_range(geometry: AxisGeometry, low: int, high: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output ``start..stop``: the first tap index j0 and the count of taps lying in [low, high)."""
    g = geometry
    begin = np.arange(start, stop, dtype=np.int64) * g.stride - g.pad_begin
    d = g.dilation
    j0 = np.maximum(0, -((begin - low) // d))  # ceil((low - begin) / d), at least 0
    j1 = np.minimum(g.kernel - 1, (high - 1 - begin) // d)  # last tap index inside
    return j0, np.maximum(0, j1 - j0 + 1)


def axis_plan(
    geometry: AxisGeometry, divisor_rule: Divisor, any_pad: bool, start: int = 0, stop: int | None = None
) -> AxisPlan:
    """The windows of outputs ``start..stop`` of one axis (all by default): a tile of a long axis
    needs only its own (:mod:`avgpool._core.tiles`)."""
    g = geometry
    stop = g.out if stop is None else stop
    j0, count = _tap_range(g, 0, g.length, start, stop)
    first = np.arange(start, stop, dtype=np.int64) * g.stride - g.pad_begin + j0 * g.dilation
    first = np.where(count > 0, first, 0)
    full = divisor_rule is Divisor.FULL_KERNEL or (divisor_rule is Divisor.FULL_KERNEL_IF_PADDED and any_pad)
    if full:
        divisor = np.full(stop - start, float(g.kernel))
    elif divisor_rule is Divisor.PADDED_TAPS:
        divisor = _tap_range(g, -g.pad_begin, g.length + g.pad_end, start, stop)[1].astype(np.float64)
    else:
        divisor = count.astype(np.float64)
    for table in (first, count, divisor):
        table.setflags(write=False)
    return AxisPlan(g, first, count, divisor)


def total_taps(geometry: AxisGeometry, piece: int = 1 << 20) -> int:
    """The valid taps of all windows of an axis: ``kernel`` for each window wholly inside the
    input, the others counted ``piece`` at a time among those that reach into it (padding
    however absurd costs nothing: windows wholly in it hold no tap)."""
    g = geometry
    touching = (max(0, (g.pad_begin - g.extent) // g.stride + 1), min(g.out, -(-(g.length + g.pad_begin) // g.stride)))
    inner = (
        max(touching[0], -(-g.pad_begin // g.stride)),
        min(touching[1], (g.length + g.pad_begin - g.extent) // g.stride + 1),
    )
    if inner[1] <= inner[0]:
        inner = (touching[0], touching[0])
    edges = [(touching[0], inner[0]), (inner[1], max(inner[1], touching[1]))]
    counted = sum(
        int(_tap_range(g, 0, g.length, a, min(a + piece, stop))[1].sum())
        for start, stop in edges
        for a in range(start, stop, piece)
    )
    return (inner[1] - inner[0]) * g.kernel + counted


def any_pad(geometry: tuple[AxisGeometry, ...]) -> bool:
    """Whether some axis is padded (OpenVINO's exclude_pad=false divisor depends on it)."""
    return any(g.pad_begin or g.pad_end for g in geometry)


@BoundedCache
def make_plan(spec: PoolSpec, spatial_shape: tuple[int, ...]) -> tuple[AxisPlan, ...]:
    """The window tables of every spatial axis; cached because real models call the same node
    shape again and again; bounded by bytes too, or the plans of a few very long axes would stay
    held after their calls (tests/test_memory_bounds.py)."""
    geometry = resolve(spec, spatial_shape)
    return tuple(axis_plan(g, spec.divisor, any_pad(geometry)) for g in geometry)
