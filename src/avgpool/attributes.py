"""Normalisation of attribute values as the ecosystems write them (ints, sequences, 0/1 flags).

Every helper names the attribute in its error; the dialect adds its own label around it.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import AvgPoolError

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
