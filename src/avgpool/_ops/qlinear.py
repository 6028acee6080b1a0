"""onnxruntime's com.microsoft QLinearAveragePool and QLinearGlobalAveragePool in one place: the
attribute and quantisation rules (docs/semantics.md 5.2), :func:`qlinear_average_pool`,
:func:`qlinear_global_average_pool`, :class:`QLinearAveragePool` and :func:`prepare`.

onnxruntime's CPU kernel is the operator's only definition, so the rules reproduce its geometry
exactly rather than ONNX AveragePool's (the differences are listed in :func:`ort_axis`), and
translate it into a canonical :class:`~avgpool._core.spec.PoolSpec` with explicit pads, floor
rounding and the divisor rule, which the shared shape inference and window plans then handle
unchanged; the quantized engine (:mod:`avgpool._core.quantized_pools`) computes."""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import caches, quantized_pools
from .._core.memo import Memo, Unhashable, ints, kept
from .._core.pools import PreparedPool
from .._core.quantization import GLOBAL_MAX_IMAGE, Geometry, QuantParams
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError, error_context, labelled
from ._args import as_flag, as_int_tuple, refuse_masked, spatial_axes_text
from ._remember import CallMemo, Miss
from ._tensors import call as tensor_call
from ._tensors import is_foreign
from .onnx import auto_pad_name

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


_DTYPES = frozenset(DTYPES)
_NOTSET = "NOTSET"  # auto_pad's default, the object itself (the memo key leaves it out)


#: The calls of :func:`qlinear_average_pool` validated before: (prepared pool, kernel arguments)
#: each, remembered with their quantisation scalars (avgpool._ops._remember).
_MEMO = CallMemo(
    ("kernel_shape", "strides", "pads"),
    (
        "x_scale",
        "x_zero_point",
        "y_scale",
        "y_zero_point",
        "auto_pad",
        "ceil_mode",
        "count_include_pad",
        "channels_last",
    ),
    optional=("strides", "pads"),
    defaults={"auto_pad": _NOTSET, "ceil_mode": False, "count_include_pad": False, "channels_last": False},
    size=1024,
)
_recall = _MEMO.recall
_PARAMS: dict = {}  # (x_scale, x_zp, y_scale, y_zp, dtype) of plain Python numbers -> QuantParams
_PARAMS_CACHE = 256
_run = quantized_pools.run
_ndarray = np.ndarray


def _freeze(value: Any) -> Any:
    """A cache key for an attribute value that is also the value itself: a plain scalar, or a
    sequence of ints as a tuple (:func:`.memo.ints`); anything else raises Unhashable."""
    kind = type(value)
    if kind is int or kind is bool or kind is str:
        return value
    return ints(value)


def _params(dtype: np.dtype, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any) -> QuantParams:
    """Validated scales and zero points, remembered when they are plain Python floats and ints."""
    if (
        type(x_scale) is float
        and type(y_scale) is float
        and (x_zero_point is None or type(x_zero_point) is int)
        and (y_zero_point is None or type(y_zero_point) is int)
    ):
        key = (x_scale, x_zero_point, y_scale, y_zero_point, dtype)
        found = _PARAMS.get(key)
        if found is None:
            found = make_quant_params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)
            if len(_PARAMS) >= _PARAMS_CACHE:
                _PARAMS.clear()
            _PARAMS[key] = found
        return found
    return make_quant_params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)


def qlinear_average_pool(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = _NOTSET,
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    channels_last: bool | int = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """onnxruntime's com.microsoft QLinearAveragePool, bit for bit.

    >>> import numpy as np
    >>> from avgpool.qlinear import qlinear_average_pool
    >>> x = np.array([[[10, 20, 30, 40]]], dtype=np.uint8)
    >>> qlinear_average_pool(x, 1.0, 0, 1.0, 0, [3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)
    array([[[10, 30, 13]]], dtype=uint8)
    >>> y = np.empty((1, 1, 4), np.uint8)  # out=: written and returned, as average_pool's
    >>> qlinear_average_pool(x, 1.0, 0, 1.0, 0, [3], pads=[1, 1], out=y) is y, y
    (True, array([[[15, 20, 30, 35]]], dtype=uint8))

    ``x`` is uint8 or int8, N x C x D1 ... Dn (or N x D1 ... Dn x C with ``channels_last``), any
    n >= 1 (onnxruntime stops at 3); the output has its dtype. ``x_scale`` and ``y_scale`` are
    float32 scalars (or 1-element 1-D arrays; other real numbers are converted to float32);
    ``x_zero_point`` and ``y_zero_point`` are scalars of ``x``'s dtype (a Python int in range is
    accepted) or ``None`` for 0. ``pads`` is ONNX's flat ``[begin_1 .. begin_n, end_1 .. end_n]``.
    There is no ``dilations``: the operator has none.

    The arithmetic is onnxruntime's CPU kernel (docs/semantics.md 5.2). General path: dequantize each
    tap ``x_scale * float32(x - x_zero_point)``, sum in float32 in row-major tap order, divide by
    the number of valid taps (``prod(kernel_shape)`` with ``count_include_pad``, which then also
    counts a ceil window's overhang), then ``rint(avg / y_scale + y_zero_point)`` in float32
    (round half to even). When the kernel covers the whole input and no pad is in effect,
    onnxruntime uses an integer path instead, and so does this function:
    ``float32(sum(x) - x_zero_point * n) * (x_scale / (y_scale * n))`` rounded half to even; it
    can differ from the general path in the last bit, and onnxruntime refuses it unless
    ``2**-32 <= x_scale / (y_scale * n) < 256`` and ``n < 2**24``: so does this function.
    The geometry is onnxruntime's, including its quirks (truncating floor division, SAME padding
    that can be negative when a kernel is shorter than its stride); pads must be smaller than the
    kernel, as onnxruntime requires.

    Saturation: where onnxruntime converts a float outside the int32 range to int (undefined
    behaviour in C++; x86 builds then give the dtype's minimum, ARM builds saturate), this
    function saturates: values above the dtype's range give its maximum, below give its
    minimum, and NaN (only reachable when dequantized values overflow float32) gives the minimum.
    ``y_scale`` must be finite and non-zero and ``x_scale`` finite.

    ``out``, as for :func:`avgpool.average_pool`: a writeable array of the output's shape and
    ``x``'s dtype that the result is written into and returned; any ndarray subclass (an
    ``np.memmap``, ``np.lib.format.open_memmap``'s result) is returned itself, and one that is
    not C-contiguous or shares memory with ``x`` (``x`` itself, pooling in place) gets the
    result copied in once it is computed.

    Raises :class:`avgpool.AvgPoolError` for any invalid attribute, dtype, shape, scalar input or
    ``out``.
    """
    found = _recall(
        x,
        kernel_shape,
        strides,
        pads,
        x_scale,
        x_zero_point,
        y_scale,
        y_zero_point,
        auto_pad,
        ceil_mode,
        count_include_pad,
        channels_last,
    )
    if type(found) is Miss:
        if type(x) is not _ndarray and is_foreign(x):  # a tensor: the call on its memory
            kwargs = dict(
                x_scale=x_scale,
                x_zero_point=x_zero_point,
                y_scale=y_scale,
                y_zero_point=y_zero_point,
                kernel_shape=kernel_shape,
                strides=strides,
                pads=pads,
                auto_pad=auto_pad,
                ceil_mode=ceil_mode,
                count_include_pad=count_include_pad,
                channels_last=channels_last,
            )
            return tensor_call(qlinear_average_pool, LABEL, x, out, kwargs, _LAYOUTS)
        return _validated_call(
            x,
            out,
            found.key,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
    prepared, kernel_args = found
    return _finish(prepared, x, kernel_args, out)


#: The label of :func:`qlinear_global_average_pool`'s errors.
GLOBAL_LABEL = "QLinearGlobalAveragePool"


def qlinear_global_average_pool(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    *,
    channels_last: bool | int = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """onnxruntime's com.microsoft QLinearGlobalAveragePool (what its quantizer makes of a
    GlobalAveragePool), bit for bit: the average of each image's channel over every spatial axis.

    >>> import numpy as np
    >>> from avgpool.qlinear import qlinear_global_average_pool
    >>> x = np.array([[[[10, 20], [30, 41]]]], dtype=np.uint8)
    >>> qlinear_global_average_pool(x, 0.5, 0, 0.25, 3)
    array([[[[53]]]], dtype=uint8)

    onnxruntime computes it as its QLinearAveragePool computes a kernel covering the whole input
    without pads (one function, ``ComputeQLinearGlobalAvgPool``), so this is
    :func:`qlinear_average_pool` with ``kernel_shape`` the spatial shape: its integer path, its
    scalars, its refusals (``2**-32 <= x_scale / (y_scale * n) < 256``), its ``out``. ``x`` is
    N x C x D1 ... Dn (N x D1 ... Dn x C with ``channels_last``), n >= 1 and no spatial axis empty;
    the output keeps every axis, each spatial one of length 1.

    Raises :class:`avgpool.AvgPoolError` for any invalid input, scalar or ``out``.
    """
    if type(x) is not _ndarray and is_foreign(x):  # a tensor: the call on its memory
        kwargs = dict(
            x_scale=x_scale,
            x_zero_point=x_zero_point,
            y_scale=y_scale,
            y_zero_point=y_zero_point,
            channels_last=channels_last,
        )
        return tensor_call(qlinear_global_average_pool, GLOBAL_LABEL, x, out, kwargs, _LAYOUTS)
    try:
        array = x if type(x) is _ndarray else _as_array(x)
        if array.ndim < 3:
            raise AvgPoolError(f"`X` has shape {array.shape}: it must have at least 3 axes (N, C and a spatial one)")
        spatial = array.shape[1:-1] if as_flag("channels_last", channels_last) else array.shape[2:]
        if 0 in spatial:
            raise AvgPoolError(
                f"`X` has shape {array.shape}: a spatial axis is empty (an average of no values; "
                "onnxruntime refuses it as out of its computation range)"
            )
        return qlinear_average_pool(
            array, x_scale, x_zero_point, y_scale, y_zero_point, spatial, channels_last=channels_last, out=out
        )
    except AvgPoolError as err:
        raise AvgPoolError(f"{GLOBAL_LABEL}: {str(err).removeprefix(LABEL + ': ')}") from None


def _validated_call(
    x: Any,
    out: Any,
    key: tuple | None,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> np.ndarray:
    """A call not remembered: validated, prepared (:func:`_prepared_call`) and remembered under
    ``key`` when it has one; every error names the operator."""
    with error_context(LABEL):
        array, prepared, kernel_args = _prepared_call(
            x,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
        args = (
            kernel_shape,
            strides,
            pads,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
        _MEMO.keep(key, x, array, args, (prepared, kernel_args))
        return _finish(prepared, array, kernel_args, out)


def _prepared_call(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> tuple[np.ndarray, PreparedPool, tuple]:
    """``x`` as an array, and its validated pool and kernel arguments (:func:`prepare`)."""
    array = x if type(x) is np.ndarray else _as_array(x)
    if array.dtype not in _DTYPES:
        check_dtype(array.dtype)
    prepared = prepare(
        array.shape, array.dtype, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last
    )
    params = _params(array.dtype, x_scale, x_zero_point, y_scale, y_zero_point)
    return array, prepared, quantized_pools.kernel_args(prepared, params)


def _finish(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple, out: Any) -> np.ndarray:
    """Run a validated call: into a new array, or into ``out`` (:func:`_into`: its errors, the
    only ones left, name the operator). The common case, a serial kernel and a plain C-contiguous
    ``out`` apart from ``x``, is quantized_pools.run_into's inlined: its checks and three calls
    were ~0.8 us of the prepared pool's ~3.3 us on 1x7x7x544 NHWC (bench_qlinear.py, `engine`)."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if out is None:
        return _run(prepared, x, kernel_args)
    call, n_items, pieces, x_view, out_view, out_shape, x_how, out_how, _, dtype = prepared.plan
    if (
        pieces == 1
        and call is not None
        and type(out) is _ndarray
        and out.base is None
        and x.base is None
        and out is not x
        and out.shape == out_shape
        and out.dtype is dtype
    ):
        flags = out.flags
        if flags.writeable and flags.c_contiguous:
            call(
                x if x_how == 0 else x.ravel() if x_how == 1 else x.reshape(x_view),
                out if out_how == 0 else out.ravel() if out_how == 1 else out.reshape(out_view),
                0,
                n_items,
                kernel_args[0],
            )
            return out
    return _into(prepared, x, kernel_args, out)


class QLinearAveragePool:
    """QLinearAveragePool with its scalars and attributes fixed, as an onnxruntime session holds
    them: validated per input shape and dtype once, then each call costs the kernel and a few
    checks. Results are :func:`qlinear_average_pool`'s, bit for bit.

    >>> import numpy as np, avgpool
    >>> pool = avgpool.QLinearAveragePool(0.5, 128, 0.25, 128, [2, 2], strides=[2, 2])
    >>> pool(np.array([[[[128, 130], [132, 134]]]], dtype=np.uint8))
    array([[[[134]]]], dtype=uint8)

    ``x_scale``, ``x_zero_point``, ``y_scale`` and ``y_zero_point`` are read as
    :func:`qlinear_average_pool` reads them (arrays are copied here: changing them later changes
    nothing); ``x_zero_point`` and ``y_zero_point`` must suit the dtype of each input called with.
    ``out``: as for the function. Raises :class:`avgpool.AvgPoolError` as the function does, on
    the first call with each input shape and dtype.
    """

    def __init__(
        self,
        x_scale: Any,
        x_zero_point: Any,
        y_scale: Any,
        y_zero_point: Any,
        kernel_shape: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        auto_pad: str = "NOTSET",
        ceil_mode: bool | int = False,
        count_include_pad: bool | int = False,
        channels_last: bool | int = False,
    ) -> None:
        self._arguments = tuple(
            kept(value)
            for value in (
                x_scale,
                x_zero_point,
                y_scale,
                y_zero_point,
                kernel_shape,
                strides,
                pads,
                auto_pad,
                ceil_mode,
                count_include_pad,
                channels_last,
            )
        )
        # (shape, dtype) -> (prepared pool, kernel arguments), bounded as AveragePool's: the
        # latest is always kept, however large its tables
        self._prepared = Memo(512, caches.held_bytes, caches.CACHE_BYTES, entry_bytes=sys.maxsize)
        self._find = self._prepared.find

    def __call__(self, x: Any, out: np.ndarray | None = None) -> np.ndarray:
        if type(x) is _ndarray:
            entry = self._find((x.shape, x.dtype))
            if entry is not None:  # this shape and dtype were validated before
                prepared, kernel_args = entry[0]
                return _finish(prepared, x, kernel_args, out)
        if is_foreign(x):  # a tensor: the call on its memory, a channels-last one by a channels-last twin
            return tensor_call(self._in_layout, LABEL, x, out, {"channels_last": self._arguments[-1]}, _LAYOUTS)
        with error_context(LABEL):
            array, prepared, kernel_args = _prepared_call(x, *self._arguments)
            self._prepared.put((array.shape, array.dtype), (prepared, kernel_args))
            return _finish(prepared, array, kernel_args, out)

    def _in_layout(self, x: np.ndarray, out: Any, channels_last: Any) -> np.ndarray:
        """This pool, or its twin of the other layout (a channels-last tensor given to a
        channels-first pool)."""
        if channels_last is self._arguments[-1]:
            return self(x, out)
        twin = self.__dict__.get("_twin")
        if twin is None:
            keywords = dict(zip(_KEYWORDS, self._arguments[5:-1]))
            twin = self._twin = QLinearAveragePool(*self._arguments[:5], **keywords, channels_last=channels_last)
        return twin(x, out)

    def __repr__(self) -> str:
        names = (
            "x_scale",
            "x_zero_point",
            "y_scale",
            "y_zero_point",
            "kernel_shape",
            "strides",
            "pads",
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "channels_last",
        )
        return f"QLinearAveragePool({', '.join(f'{n}={v!r}' for n, v in zip(names, self._arguments))})"


#: QLinearAveragePool's keyword attributes before channels_last, in its order.
_KEYWORDS = ("strides", "pads", "auto_pad", "ceil_mode", "count_include_pad")
#: How a tensor call names the layouts (argument, channels first, channels last).
_LAYOUTS = ("channels_last", False, True)


def _into(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple, out: Any) -> np.ndarray:
    """A remembered call into ``out`` (:func:`.quantized_pools.run_into`), whose errors, all
    about ``out``, name the operator as the first call's do."""
    try:
        return quantized_pools.run_into(prepared, x, kernel_args, out)
    except AvgPoolError as err:
        raise labelled(LABEL, err) from None


def prepare(
    shape: tuple[int, ...],
    dtype: np.dtype,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> PreparedPool:
    """Validate the dtype and the attributes for an input shape (the dialect's geometry) and
    build the kernel's tables (:func:`avgpool._core.quantized_pools.prepare`), cached as the float
    engine's pools are (:class:`avgpool._core.caches.BoundedCache`: by count and bytes, under the
    current :mod:`.tuning`) when every attribute value is hashable (ints, tuples of ints,
    strings, bools: lists are frozen to tuples)."""
    attributes = (kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last)
    try:
        frozen = tuple(_freeze(value) for value in attributes)
    except Unhashable:
        return _prepare(shape, dtype, *attributes)
    return _prepare_cached(shape, dtype, *frozen)


def _prepare(shape: tuple[int, ...], dtype: np.dtype, *attributes: Any) -> PreparedPool:
    check_dtype(dtype)
    return quantized_pools.prepare(shape, dtype, make_geometry(shape, *attributes))


_prepare_cached = caches.BoundedCache(_prepare)


def forget() -> None:
    """Forget the remembered calls (for tests that change the engine's tuning constants)."""
    _MEMO.forget()


def _as_array(x: Any) -> np.ndarray:
    refuse_masked(x, "`X`")
    try:
        return np.asarray(x)
    except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
        raise AvgPoolError(f"`X` cannot be read as an array: {err}") from None
