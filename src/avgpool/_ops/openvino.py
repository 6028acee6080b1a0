"""OpenVINO AvgPool-1, -14 and -16 in one place: the attribute rules (docs/semantics.md 5.3),
the windows with no valid tap as the CPU plugin computes them, :func:`avg_pool` and
:func:`output_shape`; and AdaptiveAvgPool-8, :func:`adaptive_avg_pool`.

Validation follows what the OpenVINO runtime (2026.4, shape inference and CPU plugin) accepts and
refuses, so that a model valid in one is valid in the other; the messages name the rule.

Windows with no valid tap: under the valid-taps divisor the plugin's oneDNN kernels do not count
the taps inside the input: per axis they take ``k - (taps before 0) - (taps at or past L)`` with
each term extrapolated from the window's ends (oneDNN ``ref_pooling.cpp``; the jit kernels agree).
Inside the input that is the tap count, but for a window starting at or past the end (a ``ceil``
window) it is 0 or negative, so the window is ``0 / 0 = NaN`` or ``0 / negative = -0.0``
(``+0.0`` when two axes are negative): :func:`empty_window_factors` and
:func:`write_empty_windows` (docs/semantics.md 5.3)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import adaptive, engine
from .._core.memo import call_prepared
from .._core.plan import make_plan
from .._core.shape import infer_output_shape, same_pads
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError, error_context
from ._args import (
    MAX_ATTRIBUTE_VALUE,
    as_choice,
    as_flag,
    as_input_array,
    as_input_shape,
    as_int_tuple,
    check_dilated_extents,
    spatial_axes_text,
)
from ._dtypes import FloatDtypes
from ._remember import CallMemo, Miss
from ._tensors import call as tensor_call
from ._tensors import is_foreign

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
DTYPES = FloatDtypes("float16", "float32", "float64", "bfloat16")
DTYPES_TEXT = "float16, float32, float64 or bfloat16"


def operator_label(version: int) -> str:
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


def _kernel_factor(first_tap_position: np.ndarray, kernel: int, dilation: int, length: int) -> np.ndarray:
    """oneDNN's per-axis divisor factor for windows whose first tap is at ``first_tap_position``."""
    last = first_tap_position + (kernel - 1) * dilation
    before = np.where(first_tap_position < 0, (-first_tap_position - 1) // dilation + 1, 0)
    after = np.where(last >= length, (last - length) // dilation + 1, 0)
    return kernel - before - after


def empty_window_factors(spec: PoolSpec, input_shape: tuple[int, ...]) -> list[np.ndarray] | None:
    """oneDNN's per-axis divisor factors of ``spec``'s windows on an NCX input of ``input_shape``,
    or None where no window's is negative (then the engine's output is already the plugin's)."""
    plans = make_plan(spec, tuple(input_shape[2:]))
    any_pad = any(p.geometry.pad_begin or p.geometry.pad_end for p in plans)
    if spec.divisor is Divisor.FULL_KERNEL or (spec.divisor is Divisor.FULL_KERNEL_IF_PADDED and any_pad):
        return None  # a full-kernel divisor gives 0 / k = +0, as the engine does
    factors = []
    for p in plans:
        g = p.geometry
        starts = np.arange(g.out, dtype=np.int64) * g.stride - g.pad_begin
        factors.append(_kernel_factor(starts, g.kernel, g.dilation, g.length))
    if not any((f < 0).any() for f in factors):
        return None  # the usual case: no window starts past the end by a whole dilation step
    return factors


def write_empty_windows(out: np.ndarray, factors: list[np.ndarray] | None) -> bool:
    """Overwrite, in an NCX output (or a block of one) whose spatial outputs have these per-axis
    factors, the windows whose product of factors is negative with their signed zero; whether
    there was any (``factors`` None: :func:`empty_window_factors` found none)."""
    if factors is None:
        return False
    grids = np.meshgrid(*factors, indexing="ij", sparse=True)
    nonzero = functools.reduce(np.logical_and, [g != 0 for g in grids])
    negatives = functools.reduce(np.add, [(g < 0).astype(np.int64) for g in grids])
    signed = nonzero & (negatives > 0)
    if not signed.any():
        return False
    zeros = np.where(negatives % 2 == 1, -0.0, 0.0)
    out[..., signed] = np.broadcast_to(zeros, signed.shape)[signed].astype(out.dtype)
    return True


def avg_pool(
    x: Any,
    kernel: Sequence[int],
    *,
    exclude_pad: bool,
    strides: Sequence[int] | None = None,
    pads_begin: Sequence[int] | None = None,
    pads_end: Sequence[int] | None = None,
    rounding_type: str = "floor",
    auto_pad: str = "explicit",
    dilations: Sequence[int] | None = None,
    version: int = 16,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """OpenVINO AvgPool-1, -14 or -16 (``version``), as the OpenVINO runtime computes it.

    >>> import numpy as np, avgpool.openvino
    >>> x = np.array([[[1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    >>> avgpool.openvino.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1],
    ...                           rounding_type="ceil", exclude_pad=False)
    array([[[1.       , 3.       , 1.3333334]]], dtype=float32)

    ``x`` is N x C x D1 [x D2 [x D3]] (rank 3 to 5, N and C positive), float16, float32, float64 or
    bfloat16. ``rounding_type`` is ``floor``, ``ceil`` (no drop rule: a last window may start in the
    end padding) or, from AvgPool-14, ``ceil_torch`` (PyTorch's ceil_mode); ``dilations`` exist from
    AvgPool-16. ``auto_pad`` is ``explicit``, ``same_upper``, ``same_lower`` or ``valid``; the pads
    are ignored unless it is ``explicit``, and ``same_*`` applies ``rounding_type`` to the padded
    length. Spellings are accepted in any letter case, as OpenVINO accepts them.

    The divisor: with ``exclude_pad`` the taps inside the input; without it the whole kernel as soon
    as any axis has a non-zero pad (also for a ceil window hanging past the end padding), else the
    taps inside the input. A window with no tap inside the input is NaN (0/0), except a ``ceil``
    window starting past the input's end, which OpenVINO's CPU kernels divide by a negative count:
    ``-0.0`` (see :mod:`avgpool._ops.openvino`). Sums are accumulated in float64 and rounded once.

    Raises :class:`avgpool.AvgPoolError` where OpenVINO refuses the model: a dilated kernel longer
    than the padded input (even with ceil), a batch or channel size of 0, with ``exclude_pad`` an
    explicit pad as long as the dilated kernel, an attribute the version does not have, or any
    invalid value.
    """
    args = (kernel, strides, pads_begin, pads_end, dilations, exclude_pad, rounding_type, auto_pad, version)
    found = _recall(x, *args)
    if type(found) is not Miss:  # validated before: the prepared pool, and the empty windows to overwrite
        prepared, label, empty_windows = found
        result = call_prepared(prepared, label, x, out)
        write_empty_windows(result, empty_windows)
        return result
    if type(x) is not np.ndarray and is_foreign(x):  # a tensor: the call on its memory
        kwargs = dict(
            kernel=kernel,
            exclude_pad=exclude_pad,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            dilations=dilations,
            version=version,
        )
        return tensor_call(avg_pool, operator_label(check_version(version)), x, out, kwargs)
    version = check_version(version)
    label = operator_label(version)
    with error_context(label):
        array = as_input_array(x, DTYPES, DTYPES_TEXT, min_rank=0)
        spec = make_spec(
            version,
            array.shape,
            kernel,
            exclude_pad=exclude_pad,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            dilations=dilations,
        )
        prepared = engine.prepare(spec, array.shape, array.dtype, Layout.NCX)
        empty_windows = empty_window_factors(spec, array.shape)
        _MEMO.keep(found.key, x, array, args, (prepared, label, empty_windows))
        result = prepared(array, out)
        write_empty_windows(result, empty_windows)
        return result


#: Calls of :func:`avg_pool` validated before: (prepared pool, operator label, the per-axis
#: factors of the windows whose divisor OpenVINO makes negative, or None: finding them costs ten
#: times the call) each.
_MEMO = CallMemo(
    ("kernel", "strides", "pads_begin", "pads_end", "dilations"),
    ("exclude_pad", "rounding_type", "auto_pad", "version"),
    optional=("strides", "pads_begin", "pads_end", "dilations"),
    defaults={name: avg_pool.__kwdefaults__[name] for name in ("rounding_type", "auto_pad", "version")},
)
_recall = _MEMO.recall


def output_shape(
    input_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    exclude_pad: bool,
    strides: Sequence[int] | None = None,
    pads_begin: Sequence[int] | None = None,
    pads_end: Sequence[int] | None = None,
    rounding_type: str = "floor",
    auto_pad: str = "explicit",
    dilations: Sequence[int] | None = None,
    version: int = 16,
) -> tuple[int, ...]:
    """The output shape of OpenVINO AvgPool for an input shape, without data (same rules as ``avg_pool``).

    >>> import avgpool.openvino
    >>> avgpool.openvino.output_shape((1, 3, 32, 32), [5, 5], strides=[3, 3], pads_begin=[1, 1],
    ...                               pads_end=[1, 1], exclude_pad=True)
    (1, 3, 10, 10)
    >>> avgpool.openvino.output_shape((1, 1, 5), [1], strides=[3], auto_pad="same_upper",
    ...                               rounding_type="ceil", exclude_pad=True)
    (1, 1, 3)
    """
    version = check_version(version)
    with error_context(operator_label(version)):
        shape = as_input_shape(input_shape)
        spec = make_spec(
            version,
            shape,
            kernel,
            exclude_pad=exclude_pad,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            dilations=dilations,
        )
        return infer_output_shape(spec, shape, Layout.NCX)


#: AdaptiveAvgPool-8's operator label.
ADAPTIVE_LABEL = "AdaptiveAvgPool-8"


def adaptive_avg_pool(x: Any, output_shape: Sequence[int], *, out: np.ndarray | None = None) -> np.ndarray:
    """OpenVINO AdaptiveAvgPool-8 (``opset8.adaptive_avg_pool``): each spatial axis of length
    ``L`` pooled to ``O = output_shape[i]`` windows, window ``j`` covering
    ``[floor(j L / O), ceil((j + 1) L / O))`` and divided by its own size.

    >>> import numpy as np, avgpool.openvino
    >>> avgpool.openvino.adaptive_avg_pool(np.arange(5.0).reshape(1, 1, 5), [3])
    array([[[0.5, 2. , 3.5]]])

    ``x`` is N x C x D1 [x D2 [x D3]] (rank 3 to 5), float16, float32, float64 or bfloat16;
    ``output_shape`` holds one non-negative size per spatial axis (0 gives an empty axis, as
    OpenVINO does). Where every size divides its axis the windows are AvgPool's with kernel =
    stride = L / O, bit for bit :func:`avgpool.average_pool`'s; sums are float64 and rounded
    once, so float32 inputs whose sums overflow float32 in OpenVINO (inf) give the exact average.
    An empty spatial axis pooled to a non-empty one gives NaN (0/0; the CPU plugin returns what
    its output memory held). OpenVINO also runs integer tensors; this function refuses them, as
    :func:`avg_pool` does (an integer average would be rounded or truncated).

    Raises :class:`avgpool.AvgPoolError` where OpenVINO refuses the model (a rank other than 3 to
    5, ``output_shape`` of another length than the spatial axes, a negative size) or the dtype.
    """
    if type(x) is not np.ndarray and is_foreign(x):  # a tensor: the call on its memory
        return tensor_call(adaptive_avg_pool, ADAPTIVE_LABEL, x, out, {"output_shape": output_shape})
    with error_context(ADAPTIVE_LABEL):
        array = as_input_array(x, DTYPES, DTYPES_TEXT, min_rank=3, max_rank=5)
        outs = as_int_tuple("output_shape", output_shape, array.ndim - 2, spatial_axes_text(array.shape), minimum=0)
        prepared = adaptive.prepare_adaptive(array.shape, array.dtype, Layout.NCX, outs)
        return prepared(array, out)
