"""oneDNN Graph AvgPool in one place: the attribute rules (docs/semantics.md 5.4), :func:`avg_pool`
and :func:`output_shape` (data_format NXC by default, as in oneDNN).

Spellings are oneDNN's own, compared exactly as its shape inference compares them ("None",
"SAME_UPPER", "SAME_LOWER", "VALID"; "floor", "ceil"; "NXC", "NCX"): oneDNN silently treats an
unknown spelling as its default, avgpool refuses it instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import engine
from .._core.memo import call_prepared
from .._core.shape import infer_output_shape, output_length, resolved_pads
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError, error_context
from ._args import as_choice, as_flag, as_input_array, as_input_shape, as_int_tuple, spatial_axes_text
from ._dtypes import FloatDtypes
from ._remember import CallMemo, Miss
from ._tensors import call as tensor_call
from ._tensors import is_foreign

LABEL = "oneDNN AvgPool"

_AUTO_PAD = {
    "None": PadMode.EXPLICIT,
    "SAME_UPPER": PadMode.SAME_UPPER,
    "SAME_LOWER": PadMode.SAME_LOWER,
    "VALID": PadMode.VALID,
}
_ROUNDING = {"floor": Rounding.FLOOR, "ceil": Rounding.CEIL}
DTYPES = FloatDtypes("float32", "bfloat16", "float16")
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


def avg_pool(
    x: Any,
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    exclude_pad: bool,
    rounding_type: str = "floor",
    auto_pad: str = "None",
    data_format: str = "NXC",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """oneDNN Graph AvgPool, on N x D1.. x C (``data_format="NXC"``, the default) or N x C x D1..
    (``"NCX"``) data, both computed in place without a transposed copy.

    >>> import numpy as np, avgpool.onednn
    >>> x = np.arange(1, 7, dtype=np.float32).reshape(1, 6, 1)  # N x W x C
    >>> avgpool.onednn.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1], exclude_pad=False)[..., 0]
    array([[1., 3., 5.]], dtype=float32)
    >>> avgpool.onednn.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1], exclude_pad=True)[..., 0]
    array([[1.5, 3. , 5. ]], dtype=float32)

    Rank 3 to 5; float32, bfloat16 or float16, accumulated in float64 and rounded once.
    ``exclude_pad`` divides by the taps inside the input, otherwise by the whole kernel.
    ``rounding_type`` is ``floor`` or ``ceil`` (no drop rule; oneDNN documents ``ceil`` with
    ``exclude_pad`` false as unsupported, so it raises). ``auto_pad`` is ``None`` (use the pads),
    ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``, which overwrite the pads. Like oneDNN's pooling
    primitive, exclude-padding geometries with a window outside the input (a pad as long as the
    kernel, a ceil window starting past the end) raise :class:`avgpool.AvgPoolError`, as does any
    invalid value.
    """
    args = (kernel, strides, pads_begin, pads_end, exclude_pad, rounding_type, auto_pad, data_format)
    found = _recall(x, *args)
    if type(found) is not Miss:  # validated before: the prepared pool
        return call_prepared(found, LABEL, x, out)
    if type(x) is not np.ndarray and is_foreign(x):  # a tensor: the call on its memory
        kwargs = dict(
            kernel=kernel,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            exclude_pad=exclude_pad,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            data_format=data_format,
        )
        return tensor_call(avg_pool, LABEL, x, out, kwargs, ("data_format", "NCX", "NXC"))
    with error_context(LABEL):
        array = as_input_array(x, DTYPES, DTYPES_TEXT, min_rank=0)
        layout = parse_layout(data_format)
        spec = make_spec(
            array.shape,
            layout,
            kernel,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            exclude_pad=exclude_pad,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
        )
        prepared = engine.prepare(spec, array.shape, array.dtype, layout)
        _MEMO.keep(found.key, x, array, args, prepared)
        return prepared(array, out)


#: Calls of :func:`avg_pool` validated before: the prepared pool of each.
_MEMO = CallMemo(
    ("kernel", "strides", "pads_begin", "pads_end"),
    ("exclude_pad", "rounding_type", "auto_pad", "data_format"),
    defaults={name: avg_pool.__kwdefaults__[name] for name in ("rounding_type", "auto_pad", "data_format")},
)
_recall = _MEMO.recall


def output_shape(
    input_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    exclude_pad: bool,
    rounding_type: str = "floor",
    auto_pad: str = "None",
    data_format: str = "NXC",
) -> tuple[int, ...]:
    """The output shape of oneDNN Graph AvgPool for an input shape, without data (same rules as ``avg_pool``).

    >>> import avgpool.onednn
    >>> avgpool.onednn.output_shape((1, 5, 5, 8), [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0],
    ...                             exclude_pad=True, rounding_type="ceil")
    (1, 3, 3, 8)
    """
    with error_context(LABEL):
        shape = as_input_shape(input_shape)
        layout = parse_layout(data_format)
        spec = make_spec(
            shape,
            layout,
            kernel,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            exclude_pad=exclude_pad,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
        )
        return infer_output_shape(spec, shape, layout)
