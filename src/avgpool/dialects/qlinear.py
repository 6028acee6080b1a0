"""onnxruntime's com.microsoft QLinearAveragePool: attributes and quantisation inputs -> canonical
spec, with all of its validation (docs/semantics.md 5.2).

onnxruntime's CPU kernel is the operator's only definition, so this dialect reproduces its geometry
exactly rather than ONNX AveragePool's (the differences are listed in :func:`ort_axis`), and
translates it into a canonical :class:`~avgpool.spec.PoolSpec` with explicit pads, floor rounding
and the divisor rule, which the shared shape inference and window plans then handle unchanged.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ..attributes import as_flag, as_int_tuple, spatial_axes_text
from ..errors import AvgPoolError
from ..quantized import GLOBAL_MAX_IMAGE, Geometry, QuantParams, global_scale
from ..spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from .onnx import auto_pad_name

# Geometry, QuantParams and global_scale are the core's (avgpool.quantized: what the engine computes
# with), named from here too
__all__ = [
    "DTYPES",
    "LABEL",
    "Geometry",
    "QuantParams",
    "check_dtype",
    "global_scale",
    "make_geometry",
    "make_quant_params",
    "ort_axis",
    "parse_scale",
    "parse_zero_point",
]

LABEL = "QLinearAveragePool"

DTYPES = (np.dtype(np.uint8), np.dtype(np.int8))

_BOUNDS = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def check_dtype(dtype: np.dtype) -> None:
    if dtype not in DTYPES:
        name = "object" if dtype.kind == "O" else dtype.name
        raise AvgPoolError(f"`X` has dtype {name}: it must be uint8 or int8")


def _trunc_div(a: int, b: int) -> int:
    """C++ integer division (rounds toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ort_axis(
    length: int, kernel: int, stride: int, pads: tuple[int, int], auto_pad: str, ceil: bool
) -> tuple[int, int, int]:
    """onnxruntime's (pad_begin, pad_end, output length) for one axis (PoolAttributes,
    onnxruntime 1.31), with these differences from ONNX AveragePool (semantics 2, 3):

    - floor mode divides with C++ truncation: a window sum ``L + pb + pe - k`` in ``(-s, 0)``
      still gives one (clipped) output, where floor gives none;
    - SAME_* uses ``pad_needed = (ceil(L/s) - 1) * s + k - L`` without clamping at 0 and halves it
      with truncation, so with k < s the begin pad can be negative and every window shifts right;
    - ceil mode divides in float32 (exact below 2**24) and applies the drop rule.
    """
    if auto_pad == "VALID":
        pb = pe = 0
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        needed = ((length + stride - 1) // stride - 1) * stride + kernel - length
        pb = _trunc_div(needed, 2) if auto_pad == "SAME_UPPER" else _trunc_div(needed + 1, 2)
        pe = needed - pb
    else:
        pb, pe = pads
    numerator = length + pb + pe - kernel
    out = _trunc_div(numerator, stride) + 1
    if ceil:
        out = int(math.ceil(np.float32(numerator) / np.float32(stride))) + 1
        if (out - 1) * stride >= length + pb:
            out -= 1
    return pb, pe, out


def make_geometry(
    input_shape: tuple[int, ...],
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> Geometry:
    """Validate the attributes for an input shape and translate them (onnxruntime's geometry)."""
    layout = Layout.NXC if as_flag("channels_last", channels_last) else Layout.NCX
    spatial = _spatial(input_shape, layout)
    n = len(spatial)
    axes_text = spatial_axes_text(input_shape)
    kernel = as_int_tuple("kernel_shape", kernel_shape, n, axes_text, minimum=1)
    strides_ = (1,) * n if strides is None else as_int_tuple("strides", strides, n, axes_text, minimum=1)
    flat = (
        (0,) * (2 * n)
        if pads is None
        else as_int_tuple(
            "pads", pads, 2 * n, f"{axes_text} (pads need 2 values per axis: all begins, then all ends)", minimum=0
        )
    )
    mode = auto_pad_name(auto_pad)  # "" is NOTSET, as onnxruntime reads it
    if mode != "NOTSET" and any(flat):
        raise AvgPoolError(
            f"`pads` is {flat} with `auto_pad` {auto_pad!r}: explicit pads cannot be used with "
            "auto_pad (onnxruntime silently ignores them; avgpool follows the spec and refuses)"
        )
    for axis, k in enumerate(kernel):
        if flat[axis] >= k or flat[axis + n] >= k:
            raise AvgPoolError(
                f"`pads` is {flat}: on spatial axis {axis} a pad is not smaller than the kernel "
                f"size {k} (onnxruntime refuses pads >= kernel_shape)"
            )
    ceil = as_flag("ceil_mode", ceil_mode)
    include_pad = as_flag("count_include_pad", count_include_pad)
    canonical_pads, ort_pads_zero = _canonical_pads(spatial, kernel, strides_, flat, mode, ceil)
    spec = PoolSpec(
        kernel=kernel,
        strides=strides_,
        dilations=(1,) * n,
        pads=canonical_pads,
        pad_mode=PadMode.EXPLICIT,
        rounding=Rounding.FLOOR,
        divisor=Divisor.FULL_KERNEL if include_pad else Divisor.VALID_TAPS,
    )
    global_path = ort_pads_zero and kernel == spatial
    image_size = math.prod(kernel)
    if global_path and image_size >= GLOBAL_MAX_IMAGE:
        raise AvgPoolError(
            f"`kernel_shape` {kernel} covers the whole input, so onnxruntime takes its integer global-average "
            f"path, which refuses windows of {GLOBAL_MAX_IMAGE} (2**24) elements or more; this one has {image_size}"
        )
    return Geometry(spec, layout, global_path, image_size)


def _spatial(input_shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The spatial sizes of an input shape onnxruntime accepts: rank 3 or more, and only N may be 0."""
    if len(input_shape) < 3:
        raise AvgPoolError(
            f"`X` has rank {len(input_shape)} (shape {tuple(input_shape)}): it needs at least 3 "
            f"dimensions ({'N x D1 ... x C' if layout is Layout.NXC else 'N x C x D1 ...'})"
        )
    spatial = tuple(input_shape[a] for a in layout.spatial_axes(len(input_shape)))
    channels = input_shape[-1] if layout is Layout.NXC else input_shape[1]
    if channels == 0 or 0 in spatial:
        raise AvgPoolError(
            f"`X` has shape {tuple(input_shape)}: only the batch size N may be 0 "
            "(onnxruntime rejects empty channel or spatial axes)"
        )
    return spatial


def _canonical_pads(
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    flat: tuple[int, ...],
    mode: str,
    ceil: bool,
) -> tuple[tuple[tuple[int, int], ...], bool]:
    """Per axis, explicit (begin, end) pads under which floor rounding gives onnxruntime's windows
    (:func:`ort_axis`), and whether onnxruntime's own pads are all 0."""
    n = len(spatial)
    canonical_pads = []
    ort_pads_zero = True
    for axis in range(n):
        length = spatial[axis]
        pb, pe, out = ort_axis(length, kernel[axis], strides[axis], (flat[axis], flat[axis + n]), mode, ceil)
        if out < 0:
            raise AvgPoolError(
                f"spatial axis {axis} has no output ({out}): the input length {length} plus pads {pb} + {pe} is "
                f"shorter than the kernel {kernel[axis]} (stride {strides[axis]})"
            )
        ort_pads_zero = ort_pads_zero and pb == 0 and pe == 0
        # The end pad only decides how many windows there are (the divisor rules used here never
        # read it): choose it so that floor rounding gives exactly onnxruntime's output length.
        canonical_pads.append((pb, (out - 1) * strides[axis] + kernel[axis] - length - pb))
    return tuple(canonical_pads), ort_pads_zero


def _scalar(name: str, value: Any) -> Any:
    """The single element of a scalar or 1-element 1-D input (onnxruntime's IsScalarOr1ElementVector)."""
    if isinstance(value, np.ndarray):
        if value.ndim > 1 or value.size != 1:
            raise AvgPoolError(
                f"`{name}` has shape {value.shape}: it must be a scalar or a 1-D tensor of 1 element "
                "(per-tensor quantisation)"
            )
        return value.reshape(())[()]
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise AvgPoolError(
                f"`{name}` has {len(value)} values: it must be a scalar or a 1-D tensor of 1 element "
                "(per-tensor quantisation)"
            )
        return value[0]
    return value


def parse_scale(name: str, value: Any) -> np.float32:
    """A scale as onnxruntime reads it: one float32 (other real numbers are converted), finite."""
    if type(value) is not float:
        value = _scalar(name, value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
            raise AvgPoolError(f"`{name}` must be a real number (float32), got {value!r}")
    if type(value) is float and -3.4e38 < value < 3.4e38:
        scale = np.float32(value)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                scale = np.float32(value)
            except OverflowError:  # a Python int beyond float64
                scale = np.float32(math.inf if value > 0 else -math.inf)
    if not math.isfinite(scale):
        # a finite value beyond float32 (any int is finite, and math.isfinite overflows on 10**400)
        finite = isinstance(value, numbers.Integral) or math.isfinite(value)
        given = f"{value!r}, as float32 " if finite else ""
        raise AvgPoolError(
            f"`{name}` is {given}{float(scale)}: it must be finite (onnxruntime's float-to-int "
            "conversion of the result would be undefined)"
        )
    return scale


def parse_zero_point(name: str, value: Any, dtype: np.dtype) -> int:
    """A zero point: absent (0), a Python int in the dtype's range, or a tensor of X's dtype."""
    low, high = _BOUNDS[dtype]
    if type(value) is int and low <= value <= high:
        return value
    if value is None:
        return 0
    item = _scalar(name, value)  # a numpy scalar also when given in an array, a list or a tuple
    if isinstance(item, np.generic) and item.dtype != dtype:
        raise AvgPoolError(f"`{name}` has dtype {item.dtype}: it must have X's dtype {dtype.name}")
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (numbers.Integral, np.integer)):
        raise AvgPoolError(f"`{name}` must be an integer of X's dtype {dtype.name}, got {item!r}")
    if not low <= int(item) <= high:
        raise AvgPoolError(f"`{name}` is {int(item)}: it does not fit X's dtype {dtype.name} ([{low}, {high}])")
    return int(item)


def make_quant_params(dtype: np.dtype, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any) -> QuantParams:
    xs = parse_scale("x_scale", x_scale)
    ys = parse_scale("y_scale", y_scale)
    if ys == 0:
        raise AvgPoolError("`y_scale` is 0: it must be non-zero (the output is divided by it)")
    low, high = _BOUNDS[dtype]
    return QuantParams(
        xs,
        parse_zero_point("x_zero_point", x_zero_point, dtype),
        ys,
        parse_zero_point("y_zero_point", y_zero_point, dtype),
        low,
        high,
    )
