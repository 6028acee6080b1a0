"""Run a canonical spec on an array: the one entry point that joins a spec and an input shape to
a prepared pool (:func:`prepare`, cached): the whole input's tables and kernel
(:mod:`.tables`, :mod:`.pools`), or, for an axis with very many outputs, tiles
(:mod:`.tiles`) that sum each window as the whole input would. Dialects call this and
nothing below it.
"""

from __future__ import annotations

import math

import numpy as np

from . import tuning
from .caches import BoundedCache
from .outputs import check_output_fits
from .pools import PreparedPool, prepare_tables
from .shape import infer_output_shape, spatial_shape_of
from .spec import Layout, PoolSpec
from .tables import kernel_tables, running_plan


@BoundedCache
def prepare(spec: PoolSpec, shape: tuple[int, ...], dtype: np.dtype, layout: Layout) -> PreparedPool:
    """Shape inference, window tables, kernel choice and threading for one input shape, cached."""
    dtype = np.dtype(dtype)
    spatial_shape = spatial_shape_of(shape, layout)
    t = tuning.current()
    out_shape = infer_output_shape(spec, shape, layout)
    if math.prod(out_shape) == 0:
        # nothing to compute, however long an axis: no tables (a tiling would build them tile
        # by tile for nothing)
        check_output_fits(out_shape, dtype, shape)
        return PreparedPool(out_shape, dtype, 0, None, (), 1, False)
    if max(spatial_shape_of(out_shape, layout)) > t.long_axis_outputs:
        from .tiles import tiled_pool

        return tiled_pool(spec, shape, dtype, layout, t.tile_outputs)  # its tiling checks the output's size
    check_output_fits(out_shape, dtype, shape)
    channels = 1 if layout is Layout.NCX else shape[-1]
    tables = kernel_tables(spec, spatial_shape, channels)
    running = running_plan(spec, spatial_shape, channels, layout, tables) if dtype == np.float32 else None
    return prepare_tables(out_shape, shape, dtype, layout, tables, running)
