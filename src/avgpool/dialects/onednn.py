"""oneDNN Graph AvgPool: attributes -> canonical spec (docs/semantics.md 5.4).

Spellings are oneDNN's own, compared exactly as its shape inference compares them ("None",
"SAME_UPPER", "SAME_LOWER", "VALID"; "floor", "ceil"; "NXC", "NCX"): oneDNN silently treats an
unknown spelling as its default, avgpool refuses it instead.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..attributes import as_choice, as_flag, as_int_tuple, spatial_axes_text
from ..errors import AvgPoolError
from ..shape import output_length, resolved_pads
from ..spec import Divisor, Layout, PadMode, PoolSpec, Rounding

LABEL = "oneDNN AvgPool"

_AUTO_PAD = {
    "None": PadMode.EXPLICIT,
    "SAME_UPPER": PadMode.SAME_UPPER,
    "SAME_LOWER": PadMode.SAME_LOWER,
    "VALID": PadMode.VALID,
}
_ROUNDING = {"floor": Rounding.FLOOR, "ceil": Rounding.CEIL}
DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
DTYPES_TEXT = "float32, bfloat16 or float16"


def parse_layout(data_format: Any) -> Layout:
    return Layout(as_choice("data_format", data_format, ("NXC", "NCX")))


def make_spec(
    input_shape: tuple[int, ...],
    layout: Layout,
    kernel: Any,
    *,
    strides: Any,
    pads_begin: Any,
    pads_end: Any,
    exclude_pad: Any,
    rounding_type: Any = "floor",
    auto_pad: Any = "None",
) -> PoolSpec:
    """Validate oneDNN Graph AvgPool attributes for an input shape and translate them."""
    rank = len(input_shape)
    if rank not in (3, 4, 5):
        raise AvgPoolError(
            f"the input has rank {rank} (shape {tuple(input_shape)}): oneDNN pooling takes rank 3, 4 or 5"
        )
    n = rank - 2
    spatial = tuple(input_shape[a] for a in layout.spatial_axes(rank))
    axes_text = spatial_axes_text(input_shape)
    kernel_ = as_int_tuple("kernel", kernel, n, axes_text, minimum=1)
    strides_ = as_int_tuple("strides", strides, n, axes_text, minimum=1)
    begins = as_int_tuple("pads_begin", pads_begin, n, axes_text, minimum=0)
    ends = as_int_tuple("pads_end", pads_end, n, axes_text, minimum=0)
    exclude = as_flag("exclude_pad", exclude_pad)
    rounding = _ROUNDING[as_choice("rounding_type", rounding_type, tuple(_ROUNDING))]
    mode = _AUTO_PAD[as_choice("auto_pad", auto_pad, tuple(_AUTO_PAD))]
    if rounding is Rounding.CEIL and not exclude:
        raise AvgPoolError("`rounding_type` 'ceil' with `exclude_pad` false is documented as unsupported by oneDNN")
    spec = PoolSpec(
        kernel=kernel_,
        strides=strides_,
        dilations=(1,) * n,
        pads=tuple(zip(begins, ends)) if mode is PadMode.EXPLICIT else ((0, 0),) * n,  # auto_pad overwrites them
        pad_mode=mode,
        rounding=rounding,
        divisor=Divisor.VALID_TAPS if exclude else Divisor.FULL_KERNEL,
    )
    if exclude:
        _check_no_window_of_padding_only(spec, spatial)
    return spec


def _check_no_window_of_padding_only(spec: PoolSpec, spatial: tuple[int, ...]) -> None:
    """oneDNN's pooling primitive refuses exclude-padding geometries with a window outside the input
    (its 0 / 0 ambiguity): a pad as long as the kernel, or a ceil window starting past the end (the
    end pad it is given then reaches the kernel's length)."""
    for axis, length in enumerate(spatial):
        k, s = spec.kernel[axis], spec.strides[axis]
        begin, end = resolved_pads(spec, axis, length)
        if begin >= k or end >= k:
            raise AvgPoolError(
                f"`pads_begin`/`pads_end` ({begin}, {end}) on axis {axis} with `exclude_pad` true: "
                f"oneDNN refuses a pad as long as the kernel ({k}), a window of padding only"
            )
        if length == 0:
            raise AvgPoolError(
                f"spatial axis {axis} has length 0 with `exclude_pad` true: oneDNN refuses it "
                f"(every window is padding only)"
            )
        out = output_length(length + begin + end, k, s, length + begin, spec.rounding)
        if out > 0 and (out - 1) * s - begin >= length:
            raise AvgPoolError(
                f"`rounding_type` 'ceil' on axis {axis} (length {length}, kernel {k}, stride {s}, pads "
                f"{begin} + {end}) gives a last window starting past the input with `exclude_pad` "
                f"true, which oneDNN refuses"
            )
