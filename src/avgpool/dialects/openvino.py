"""OpenVINO AvgPool-1, -14 and -16: attributes -> canonical spec (docs/semantics.md 5.3).

Validation follows what the OpenVINO runtime (2026.4, shape inference and CPU plugin) accepts and
refuses, so that a model valid in one is valid in the other; the messages name the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ..attributes import MAX_ATTRIBUTE_VALUE, as_choice, as_flag, as_int_tuple, check_dilated_extents, spatial_axes_text
from ..errors import AvgPoolError
from ..shape import same_pads
from ..spec import Divisor, PadMode, PoolSpec, Rounding

#: The AvgPool versions of OpenVINO's opsets (opset 1 to 13 use AvgPool-1, 14 and 15 AvgPool-14).
VERSIONS = (1, 14, 16)

_AUTO_PAD = {
    "explicit": PadMode.EXPLICIT,
    "same_upper": PadMode.SAME_UPPER,
    "same_lower": PadMode.SAME_LOWER,
    "valid": PadMode.VALID,
}
_ROUNDING = {"floor": Rounding.FLOOR, "ceil": Rounding.CEIL, "ceil_torch": Rounding.CEIL_DROP}
_ROUNDING_SINCE = {"floor": 1, "ceil": 1, "ceil_torch": 14}
DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16))
DTYPES_TEXT = "float16, float32, float64 or bfloat16"


def label(version: int) -> str:
    return f"OpenVINO AvgPool-{version}"


def check_version(version: Any) -> int:
    valid = isinstance(version, (int, np.integer)) and not isinstance(version, (bool, np.bool_))
    if not valid or int(version) not in VERSIONS:
        raise AvgPoolError(
            f"OpenVINO AvgPool: `version` is {version!r}: it must be one of {', '.join(map(str, VERSIONS))}"
        )
    return int(version)


def _enum_name(name: str, value: Any, choices: Sequence[str]) -> str:
    # OpenVINO parses enum attributes in any letter case (its own Python API sends "CEIL_TORCH").
    if isinstance(value, str) and value.lower() in choices:
        return value.lower()
    return as_choice(name, value, choices)


def make_spec(
    version: int,
    input_shape: tuple[int, ...],
    kernel: Any,
    *,
    exclude_pad: Any,
    strides: Any = None,
    pads_begin: Any = None,
    pads_end: Any = None,
    rounding_type: Any = "floor",
    auto_pad: Any = "explicit",
    dilations: Any = None,
) -> PoolSpec:
    """Validate OpenVINO AvgPool attributes for an NCX input shape and translate them."""
    _check_input(input_shape)
    n = len(input_shape) - 2
    axes_text = spatial_axes_text(input_shape)
    kernel_ = as_int_tuple("kernel", kernel, n, axes_text, minimum=1)
    strides_ = (1,) * n if strides is None else as_int_tuple("strides", strides, n, axes_text, minimum=1)
    if dilations is not None and version < 16:
        raise AvgPoolError(f"`dilations` does not exist before AvgPool-16; this is AvgPool-{version}")
    dilations_ = (1,) * n if dilations is None else as_int_tuple("dilations", dilations, n, axes_text, minimum=1)
    check_dilated_extents("kernel", kernel_, dilations_)
    mode = _AUTO_PAD[_enum_name("auto_pad", auto_pad, tuple(_AUTO_PAD))]
    # pads are ignored unless auto_pad is explicit, and OpenVINO then accepts any value, even negative
    pad_minimum = 0 if mode is PadMode.EXPLICIT else -MAX_ATTRIBUTE_VALUE
    begins = (
        (0,) * n if pads_begin is None else as_int_tuple("pads_begin", pads_begin, n, axes_text, minimum=pad_minimum)
    )
    ends = (0,) * n if pads_end is None else as_int_tuple("pads_end", pads_end, n, axes_text, minimum=pad_minimum)
    rounding_name = _enum_name("rounding_type", rounding_type, tuple(_ROUNDING))
    if version < _ROUNDING_SINCE[rounding_name]:
        raise AvgPoolError(
            f"`rounding_type` {rounding_type!r} does not exist before "
            f"AvgPool-{_ROUNDING_SINCE[rounding_name]}; this is AvgPool-{version}"
        )
    exclude = as_flag("exclude_pad", exclude_pad)
    _check_windows(input_shape[2:], kernel_, strides_, dilations_, mode, begins, ends, exclude)
    return PoolSpec(
        kernel=kernel_,
        strides=strides_,
        dilations=dilations_,
        pads=tuple(zip(begins, ends)) if mode is PadMode.EXPLICIT else ((0, 0),) * n,
        pad_mode=mode,
        rounding=_ROUNDING[rounding_name],
        divisor=Divisor.VALID_TAPS if exclude else Divisor.FULL_KERNEL_IF_PADDED,
    )


def _check_input(input_shape: tuple[int, ...]) -> None:
    """The input shapes OpenVINO accepts: rank 3 to 5, N and C positive."""
    rank = len(input_shape)
    if rank not in (3, 4, 5):
        raise AvgPoolError(
            f"the input has rank {rank} (shape {tuple(input_shape)}): it must be 3, 4 or 5 (N x C x D1 ...)"
        )
    if input_shape[0] == 0 or input_shape[1] == 0:
        raise AvgPoolError(
            f"the input {tuple(input_shape)} has a batch or channel size of 0: OpenVINO requires both to be positive"
        )


def _check_windows(
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    mode: PadMode,
    begins: tuple[int, ...],
    ends: tuple[int, ...],
    exclude: bool,
) -> None:
    """The windows OpenVINO refuses: with exclude_pad, an explicit pad as long as a dilated
    kernel (a window of padding only); in any mode, a dilated kernel longer than the padded input."""
    n = len(spatial)
    extents = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))
    if mode is PadMode.EXPLICIT:
        pads = tuple(zip(begins, ends))
        if exclude:
            for axis, (extent, (begin, end)) in enumerate(zip(extents, pads)):
                if begin >= extent or end >= extent:
                    raise AvgPoolError(
                        f"`pads_begin` {begins} / `pads_end` {ends} with `exclude_pad` true: axis {axis} has a pad "
                        f"of at least its dilated kernel extent {extent}, which OpenVINO refuses "
                        "(a window of padding only)"
                    )
    elif mode is PadMode.VALID:
        pads = ((0, 0),) * n
    else:
        pads = tuple(
            same_pads(length, s, extent, mode is PadMode.SAME_UPPER)
            for length, s, extent in zip(spatial, strides, extents)
        )
    for axis, (length, extent, (begin, end)) in enumerate(zip(spatial, extents, pads)):
        if extent > length + begin + end:
            raise AvgPoolError(
                f"`kernel` {kernel} (dilated extent {extent} on axis {axis}) is larger than the padded input "
                f"{length} + {begin} + {end}: OpenVINO refuses it, whatever rounding_type says"
            )
