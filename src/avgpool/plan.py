"""Per-axis window tables for one (spec, input spatial shape), cached.

Windows are boxes, so both the sum and the divisor factorise per axis (semantics 1.2): an N-D
pool is a sequence of 1-D passes, each described by one of these tables.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

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


def _tap_range(geometry: AxisGeometry, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output: the first tap index j0 and the count of taps lying in [low, high)."""
    g = geometry
    start = np.arange(g.out, dtype=np.int64) * g.stride - g.pad_begin
    d = g.dilation
    j0 = np.maximum(0, -((start - low) // d))  # ceil((low - start) / d), at least 0
    j1 = np.minimum(g.kernel - 1, (high - 1 - start) // d)  # last tap index inside
    return j0, np.maximum(0, j1 - j0 + 1)


def _axis_plan(geometry: AxisGeometry, divisor_rule: Divisor, any_pad: bool) -> AxisPlan:
    g = geometry
    j0, count = _tap_range(g, 0, g.length)
    first = np.arange(g.out, dtype=np.int64) * g.stride - g.pad_begin + j0 * g.dilation
    first = np.where(count > 0, first, 0)
    full = divisor_rule is Divisor.FULL_KERNEL or (divisor_rule is Divisor.FULL_KERNEL_IF_PADDED and any_pad)
    if full:
        divisor = np.full(g.out, float(g.kernel))
    elif divisor_rule is Divisor.PADDED_TAPS:
        divisor = _tap_range(g, -g.pad_begin, g.length + g.pad_end)[1].astype(np.float64)
    else:
        divisor = count.astype(np.float64)
    for table in (first, count, divisor):
        table.setflags(write=False)
    return AxisPlan(g, first, count, divisor)


@functools.lru_cache(maxsize=512)
def make_plan(spec: PoolSpec, spatial_shape: tuple[int, ...]) -> tuple[AxisPlan, ...]:
    """The window tables of every spatial axis; cached because real models call the same node
    shape again and again."""
    geometry = resolve(spec, spatial_shape)
    any_pad = any(g.pad_begin or g.pad_end for g in geometry)
    return tuple(_axis_plan(g, spec.divisor, any_pad) for g in geometry)
