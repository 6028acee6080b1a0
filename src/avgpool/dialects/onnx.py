"""ONNX AveragePool, opsets 1 to 22: attributes -> canonical spec (docs/semantics.md 5.1)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..attributes import as_choice, as_flag, as_int_tuple, check_dilated_extents, spatial_axes_text
from ..errors import AvgPoolError
from ..spec import Divisor, Layout, PadMode, PoolSpec, Rounding

#: The opsets at which AveragePool changed; any other opset means the latest at or below it.
VERSIONS = (1, 7, 10, 11, 19, 22)
#: The newest opset checked to still use AveragePool-22 (onnx 1.23).
NEWEST_KNOWN_OPSET = 28

_AUTO_PAD = {
    "NOTSET": PadMode.EXPLICIT,
    "SAME_UPPER": PadMode.SAME_UPPER,
    "SAME_LOWER": PadMode.SAME_LOWER,
    "VALID": PadMode.VALID,
}
_FLOAT_TYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def op_version(opset: Any) -> int:
    """The AveragePool version an opset uses (opset 13 -> 11)."""
    valid = isinstance(opset, (int, np.integer)) and not isinstance(opset, (bool, np.bool_))
    if not valid or not 1 <= int(opset) <= NEWEST_KNOWN_OPSET:
        raise AvgPoolError(f"AveragePool: `opset` is {opset!r}: it must be an integer from 1 to {NEWEST_KNOWN_OPSET}")
    opset = int(opset)
    return max(v for v in VERSIONS if v <= opset)


def label(version: int) -> str:
    return f"AveragePool-{version}"


def dtypes(version: int) -> tuple[tuple[np.dtype, ...], str]:
    """The input dtypes of a version, and how to say them."""
    if version >= 22:
        return _FLOAT_TYPES + (_BFLOAT16,), "float16, float32, float64 or bfloat16"
    return _FLOAT_TYPES, f"float16, float32 or float64 (bfloat16 needs opset 22, this is opset {version}'s AveragePool)"


def parse_layout(layout: Any) -> Layout:
    if isinstance(layout, Layout):
        return layout
    return Layout(as_choice("layout", layout, ("NCX", "NXC")))


def auto_pad_name(auto_pad: Any) -> str:
    """auto_pad in ONNX's spelling, validated. The empty string is NOTSET: onnxruntime, OpenVINO
    and onnx.reference accept it, and exported models write the default that way (semantics 3.5)."""
    if isinstance(auto_pad, str) and auto_pad == "":
        return "NOTSET"
    return as_choice("auto_pad", auto_pad, tuple(_AUTO_PAD))


def _absent_before(name: str, since: int, version: int) -> AvgPoolError:
    return AvgPoolError(
        f"`{name}` does not exist before AveragePool-{since} (opset {since}); this is AveragePool-{version}"
    )


def make_spec(
    version: int,
    input_shape: tuple[int, ...],
    kernel_shape: Any,
    *,
    strides: Any = None,
    pads: Any = None,
    auto_pad: Any = "NOTSET",
    ceil_mode: Any = False,
    count_include_pad: Any = False,
    dilations: Any = None,
) -> PoolSpec:
    """Validate ONNX attributes for an input shape and translate them."""
    n = len(input_shape) - 2
    axes_text = spatial_axes_text(input_shape)
    kernel = as_int_tuple("kernel_shape", kernel_shape, n, axes_text, minimum=1)
    strides_ = (1,) * n if strides is None else as_int_tuple("strides", strides, n, axes_text, minimum=1)
    if dilations is not None and version < 19:
        raise _absent_before("dilations", 19, version)
    dilations_ = (1,) * n if dilations is None else as_int_tuple("dilations", dilations, n, axes_text, minimum=1)
    check_dilated_extents("kernel_shape", kernel, dilations_)
    flat_pads = (
        (0,) * (2 * n)
        if pads is None
        else as_int_tuple(
            "pads", pads, 2 * n, f"{axes_text} (pads need 2 values per axis: all begins, then all ends)", minimum=0
        )
    )
    mode = _AUTO_PAD[auto_pad_name(auto_pad)]
    if mode is not PadMode.EXPLICIT and any(flat_pads):
        raise AvgPoolError(
            f"`pads` is {flat_pads} with `auto_pad` {auto_pad!r}: explicit pads cannot be used with auto_pad"
        )
    ceil = as_flag("ceil_mode", ceil_mode)
    if ceil and version < 10:
        raise _absent_before("ceil_mode", 10, version)
    include_pad = as_flag("count_include_pad", count_include_pad)
    if include_pad and version < 7:
        raise _absent_before("count_include_pad", 7, version)
    # SAME gives ceil(L / s) outputs whatever ceil_mode says (semantics 3.1): floor after the pads.
    rounding = Rounding.CEIL_DROP if ceil and mode not in (PadMode.SAME_UPPER, PadMode.SAME_LOWER) else Rounding.FLOOR
    return PoolSpec(
        kernel=kernel,
        strides=strides_,
        dilations=dilations_,
        pads=tuple(zip(flat_pads[:n], flat_pads[n:])),
        pad_mode=mode,
        rounding=rounding,
        divisor=Divisor.PADDED_TAPS if include_pad else Divisor.VALID_TAPS,
    )
