"""The arguments every operator reads alike: attribute values as the ecosystems write them (ints,
sequences, 0/1 flags), the input tensor and a shape given without data.

Every helper names the argument in its error; the operator adds its own label around it.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Container, Sequence
from typing import Any

import numpy as np

from .._core.outputs import dtype_name
from ..errors import AvgPoolError

# Larger values cannot describe a real tensor and would overflow the int64 index arithmetic.
MAX_ATTRIBUTE_VALUE = 2**40


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_int(name: str, value: Any) -> int:
    """One integer attribute value (bools and floats are refused: ONNX attributes are ints)."""
    if not _is_int(value):
        raise AvgPoolError(f"`{name}` must be an integer, got {value!r}")
    return int(value)


def as_int_tuple(name: str, value: Any, count: int, axes_text: str, *, minimum: int) -> tuple[int, ...]:
    """A per-axis sequence of exactly ``count`` integers, each >= ``minimum``.

    A bare scalar is refused rather than broadcast: ONNX, OpenVINO and oneDNN all take lists.
    """
    if _is_int(value) or isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise AvgPoolError(f"`{name}` must be a sequence of integers, one per spatial axis, got {value!r}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise AvgPoolError(f"`{name}` must be a 1-D sequence of integers, got an array of shape {value.shape}")
    items = tuple(value)
    values = tuple(as_int(name, item) for item in items)
    if len(values) != count:
        raise AvgPoolError(f"`{name}` has {len(values)} values {values} but {axes_text}")
    for item in values:
        if item < minimum:
            rule = "positive" if minimum == 1 else f">= {minimum}"
            raise AvgPoolError(f"`{name}` is {values}: every value must be {rule}")
        if item > MAX_ATTRIBUTE_VALUE:
            raise AvgPoolError(f"`{name}` is {values}: {item} is larger than the supported {MAX_ATTRIBUTE_VALUE}")
    return values


def spatial_axes_text(input_shape: Sequence[int]) -> str:
    """How a message about a count of per-axis values names the input's spatial axes."""
    n = len(input_shape) - 2
    return f"the input {tuple(input_shape)} has {n} spatial {'axis' if n == 1 else 'axes'}"


def check_dilated_extents(kernel_name: str, kernel: tuple[int, ...], dilations: tuple[int, ...]) -> None:
    """Each axis's dilated kernel extent ``(k - 1) * d + 1`` within :data:`MAX_ATTRIBUTE_VALUE`
    too: each value is, their product need not be, and window positions past int64 wrapped in
    the window tables (NaN where the values are) or overflowed numpy."""
    for axis, (k, d) in enumerate(zip(kernel, dilations)):
        extent = (k - 1) * d + 1
        if extent > MAX_ATTRIBUTE_VALUE:
            raise AvgPoolError(
                f"`{kernel_name}` {kernel} with `dilations` {dilations}: the dilated extent of axis {axis}, "
                f"({k} - 1) * {d} + 1 = {extent}, is larger than the supported {MAX_ATTRIBUTE_VALUE}"
            )


def as_flag(name: str, value: Any) -> bool:
    """A boolean attribute: a bool, or 0/1 as ONNX writes it."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if _is_int(value) and int(value) in (0, 1):
        return bool(value)
    raise AvgPoolError(f"`{name}` must be 0, 1, False or True, got {value!r}")


def as_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of a fixed set of spellings, compared exactly as the dialect spells them."""
    if not isinstance(value, str) or value not in choices:
        raise AvgPoolError(f"`{name}` is {value!r}: it must be one of {', '.join(repr(c) for c in choices)}")
    return value


def is_masked(x: Any) -> bool:
    """Whether ``x`` is a numpy masked array (numpy.ma is not imported for it: if no one imported
    it, ``x`` cannot be one)."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(x, ma.MaskedArray)


def check_missing_options(skipna: Any, min_count: Any) -> None:
    """``skipna`` a bool, ``min_count`` an integer >= 1: the operators that take missing values
    (average_pool numpy and dask, block_mean) check them here."""
    if type(skipna) is not bool and not isinstance(skipna, np.bool_):
        raise AvgPoolError(f"`skipna` is {skipna!r}: it must be True or False")
    if isinstance(min_count, (bool, np.bool_)) or not isinstance(min_count, numbers.Integral) or min_count < 1:
        raise AvgPoolError(f"`min_count` is {min_count!r}: it must be an integer >= 1")


def refuse_masked(x: Any, name: str) -> None:
    """A numpy masked array with masked values: its data would be pooled as if none were (numpy
    drops the mask when it makes an array), a silent wrong answer where windows hold them."""
    if is_masked(x) and np.ma.is_masked(x):
        raise AvgPoolError(
            f"{name} is a masked array with {np.ma.count_masked(x)} masked values: pooling reads every value, "
            "so fill them first (e.g. x.filled(np.nan)) or pass x.data"
        )


def as_input_array(
    x: Any, allowed: Container[np.dtype], allowed_text: str, *, min_rank: int, max_rank: int | None = None
) -> np.ndarray:
    """The input as a numpy array of an allowed dtype and rank, in native byte order.

    Any strides are kept (no copy); a byte-swapped array is converted once, because the
    compiled kernels read native numbers.
    """
    refuse_masked(x, "the input")
    try:
        array = np.asarray(x)
    except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
        raise AvgPoolError(f"the input cannot be read as an array: {err}") from None
    if array.dtype.newbyteorder("=") not in allowed:
        raise AvgPoolError(
            f"the input has dtype {dtype_name(array.dtype) if array.dtype.kind != 'O' else 'object'}: "
            f"it must be {allowed_text}"
        )
    if array.ndim < min_rank or (max_rank is not None and array.ndim > max_rank):
        expected = f"at least {min_rank}" if max_rank is None else f"{min_rank} to {max_rank}"
        raise AvgPoolError(
            f"the input has rank {array.ndim} (shape {array.shape}): "
            f"it must have {expected} dimensions (N x C x D1 ...)"
        )
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def as_input_shape(input_shape: Any) -> tuple[int, ...]:
    """A shape given without data (the ``output_shape`` functions): a sequence of non-negative integers.

    The rank is the dialect's to check.
    """
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, (Sequence, np.ndarray)):
        raise AvgPoolError(f"`input_shape` must be a sequence of integers, got {input_shape!r}")
    shape = tuple(_shape_size(n) for n in input_shape)
    if any(n < 0 for n in shape):
        raise AvgPoolError(f"`input_shape` is {shape}: sizes must be non-negative")
    return shape


def _shape_size(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise AvgPoolError(f"`input_shape` must hold integers, got {value!r}")
    return int(value)
