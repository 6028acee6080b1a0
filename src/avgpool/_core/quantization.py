"""What the QLinearAveragePool engine computes with, once its dialect has validated a call.

:class:`Geometry` (the canonical spec and onnxruntime's choice of path for one input shape) and
:class:`QuantParams` (the scalar quantisation inputs) are made by the dialect
(:mod:`avgpool._ops.qlinear`, which re-exports them) and read by the engine
(:mod:`avgpool._core.quantized_pools`) and its tiles (:mod:`avgpool._core.tiles`). :func:`global_scale` is
the integer global path's arithmetic: its combined scale and onnxruntime's range check on it,
which depend on the scales and so happen as the kernel's arguments are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import AvgPoolError
from .spec import Layout, PoolSpec

#: onnxruntime's integer global path refuses a combined scale outside [2**-32, 256) ...
GLOBAL_SCALE_MIN = np.float32(2.0**-32)
GLOBAL_SCALE_MAX = np.float32(256.0)
#: ... and an image of 2**24 elements or more (MLAS CheckQLinearGlobalAveragePoolScaleAndSize).
GLOBAL_MAX_IMAGE = 1 << 24


@dataclass(frozen=True)
class Geometry:
    """Everything about one (attributes, input shape) pair that does not depend on the data."""

    spec: PoolSpec  # canonical: explicit pads, floor rounding, VALID_TAPS or FULL_KERNEL
    layout: Layout
    global_path: bool  # onnxruntime's integer path: the kernel covers the input, no pads
    image_size: int  # prod(kernel_shape): the element count of a global-path window


class QuantParams(NamedTuple):
    """The scalar quantisation inputs, validated: scales as float32, zero points as ints."""

    x_scale: np.float32
    x_zero_point: int
    y_scale: np.float32
    y_zero_point: int
    qmin: int
    qmax: int


def global_scale(params: QuantParams, image_size: int) -> np.float32:
    """The integer global path's combined scale ``x_scale / (y_scale * n)`` in float32, range-checked
    as onnxruntime does."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # the range check below says it
        scale = params.x_scale / (params.y_scale * np.float32(image_size))
    if not GLOBAL_SCALE_MIN <= scale < GLOBAL_SCALE_MAX:
        raise AvgPoolError(
            f"`kernel_shape` covers the whole input, so onnxruntime takes its integer global-average path, which "
            f"needs 2**-32 <= x_scale / (y_scale * {image_size}) < 256; with `x_scale` {float(params.x_scale)!r} "
            f"and `y_scale` {float(params.y_scale)!r} it is {float(scale)!r}"
        )
    return scale
