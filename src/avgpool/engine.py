"""Run a canonical spec on an array: plan, kernel, output.

The only place that joins the plan to a kernel; dialects call this and nothing below it.
"""

from __future__ import annotations

import numpy as np

from .inputs import check_out
from .kernels import numpy_passes
from .plan import make_plan
from .shape import infer_output_shape, spatial_shape_of
from .spec import Layout, PoolSpec


def pool(x: np.ndarray, spec: PoolSpec, layout: Layout, out: np.ndarray | None = None) -> np.ndarray:
    """Average-pool a validated float array (native byte order, any strides) with ``spec``."""
    shape = infer_output_shape(spec, x.shape, layout)
    if out is None:
        out = np.empty(shape, dtype=x.dtype)
    else:
        check_out(out, shape, x.dtype)
    if out.size == 0:
        return out
    plans = make_plan(spec, spatial_shape_of(x.shape, layout))
    axes = layout.spatial_axes(x.ndim)
    passes = [(axis, p.first, p.count, p.divisor, p.geometry.kernel, p.geometry.dilation) for axis, p in zip(axes, plans)]
    averages = numpy_passes.pool(x, passes)
    with np.errstate(over="ignore", invalid="ignore"):
        out[...] = averages.astype(x.dtype)  # one rounding from float64 to the output dtype
    return out
