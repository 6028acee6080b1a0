"""The tables and sizes an entry kernel takes, as named tuples built once per prepared pool
(:func:`avgpool.pools.prepare_tables`): ``kernel(x, out, first item, stop item, tables, ...)``
rather than a score of positional arguments. numba passes a named tuple of arrays and integers as
one argument and resolves its fields by name when it compiles: a field read costs what reading
an argument did. Each field keeps the Python type it is built with (int, float, bool, int64 and
float64 arrays), so that every pool's tuple has one type and the kernels one signature."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SlabTables(NamedTuple):
    """What :func:`.separable.entry_kernel` kernels pool slabs by (:class:`avgpool.tables.KernelTables`'s
    arrays, and how many slabs go together)."""

    group: int  # slabs pooled together: consecutive slabs are more outer rows of each pass
    band: int  # outputs of the first axis per band, where a slab alone overflows its budget
    axes: np.ndarray  # one row per spatial axis, in the columns of .columns
    firsts: np.ndarray  # each window's first tap, the axes' tables concatenated
    counts: np.ndarray  # each window's valid taps
    splits: np.ndarray  # the block partial sums' splits (block sums only)
    scales: np.ndarray  # each window's divisor reciprocal
    channels: int  # values per position (NXC; 1 for NCX)
    scratch_size: int  # float64 values of each ping-pong buffer per slab
    global_scale: float  # > 0: one window covering every axis, scaled by this
    plane_masks: np.ndarray  # .small_planes' tables (empty where it is not used)
    plane_factors: np.ndarray
    plane_sums: int  # float64 values of .small_planes' sums (a block of planes, a value of margin each side)
    parts: int  # items per slab (threads sharing few slabs): ranges of first-axis outputs, or of channels
    passes: np.ndarray  # each axis's pass kernel, its machine-code address (.separable.set_pass_addresses)


class RunningTables(NamedTuple):
    """What :func:`.running.pool_slabs_exact` sums in int64 by (:class:`avgpool.tables.RunningPlan`)."""

    passes: np.ndarray  # one row per running-sum pass, in the columns PASS_* of .columns
    headroom: int  # bits a value may take as an integer
    row_factors: np.ndarray  # the divisor scales of the axes before the last running axis
    int_size: int  # int64 running sums held
    box_outputs: np.ndarray  # outputs per box along each axis, then channels
    group: int  # slabs checked and pooled together
