"""A slow, obviously-correct average pool, written from docs/semantics.md alone.

It loops over every output window, takes the kernel taps that fall inside the input (a tap is
inside when it is inside on every axis), sums them exactly (math.fsum; IEEE addition when a tap is
NaN or Inf) and divides in float64. It shares no
code with the fast path (no spec, shape or plan module), so that a geometry bug there cannot hide
here. Tests compare the two; it is not for production use.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np


def _axis_windows(length: int, k: int, s: int, d: int, pb: int, pe: int, auto_pad: str, rounding: str):
    """(pb, pe, number of outputs) for one axis, straight from semantics sections 2 and 3."""
    dk = (k - 1) * d + 1
    if auto_pad in ("same_upper", "same_lower"):
        n_out = math.ceil(length / s)
        total = max(0, (n_out - 1) * s + dk - length)
        if auto_pad == "same_upper":
            pb, pe = total // 2, total - total // 2
        else:
            pe, pb = total // 2, total - total // 2
    elif auto_pad == "valid":
        pb, pe = 0, 0
    span = length + pb + pe - dk
    if rounding == "floor":
        n_out = math.floor(span / s) + 1
    else:
        n_out = math.ceil(span / s) + 1
        if rounding == "ceil_drop" and (n_out - 1) * s >= length + pb:
            n_out -= 1
    if n_out < 0:
        raise ValueError("negative output length")
    return pb, pe, n_out


def reference_pool(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    auto_pad: str = "explicit",
    rounding: str = "floor",
    divisor: str = "valid",
    layout: str = "NCX",
) -> np.ndarray:
    """Average-pool in float64. ``divisor``: "valid" (taps in the input), "padded" (taps in the
    padded input), "full" (the kernel size), "full_if_padded" (full when any pad is non-zero,
    else valid). ``rounding``: "floor", "ceil" or "ceil_drop". Returns float64."""
    data = np.asarray(x).astype(np.float64)
    if layout == "NXC":
        data = np.moveaxis(data, -1, 1)
    batch, channels, *spatial = data.shape
    axes = [
        _axis_windows(spatial[i], kernel[i], strides[i], dilations[i], pads[i][0], pads[i][1], auto_pad, rounding)
        for i in range(len(spatial))
    ]
    any_pad = any(pb or pe for pb, pe, _ in axes)
    # A tap is inside the input (or the padded input) when it is on every axis: per axis, each
    # output's taps inside the input and its number of taps inside the padded input.
    windows = []
    for i, (pb, pe, n_out) in enumerate(axes):
        positions = [[j * strides[i] - pb + t * dilations[i] for t in range(kernel[i])] for j in range(n_out)]
        windows.append(
            [
                ([p for p in taps if 0 <= p < spatial[i]], sum(-pb <= p < spatial[i] + pe for p in taps))
                for taps in positions
            ]
        )
    rows = data.reshape(batch * channels, *spatial)
    result = np.empty((batch * channels,) + tuple(n for _, _, n in axes))
    for out_index in itertools.product(*(range(n) for _, _, n in axes)):
        inside = [windows[i][j][0] for i, j in enumerate(out_index)]
        taps_inside = math.prod(map(len, inside))
        if divisor == "padded":
            count = math.prod(windows[i][j][1] for i, j in enumerate(out_index))
        elif divisor == "full" or (divisor == "full_if_padded" and any_pad):
            count = math.prod(kernel)
        else:
            count = taps_inside
        # every row's taps inside the input, in row-major tap order
        taps = rows[np.ix_(range(batch * channels), *inside)].reshape(batch * channels, taps_inside)
        for row, values in enumerate(taps.tolist()):
            total = math.fsum(values) if all(map(math.isfinite, values)) else sum(values)
            result[(row,) + out_index] = total / count if count else math.nan
    result = result.reshape((batch, channels) + result.shape[1:])
    return np.moveaxis(result, 1, -1) if layout == "NXC" else result


def reference_average_pool(
    x: np.ndarray,
    kernel_shape: Sequence[int],
    *,
    strides=None,
    pads=None,
    auto_pad="NOTSET",
    ceil_mode=False,
    count_include_pad=False,
    dilations=None,
    opset=22,
    layout="NCX",
) -> np.ndarray:
    """ONNX AveragePool by :func:`reference_pool`, rounded once to the input's dtype."""
    n = len(kernel_shape)
    flat = list(pads) if pads is not None else [0] * (2 * n)
    same = auto_pad in ("SAME_UPPER", "SAME_LOWER")
    rounding = "ceil_drop" if ceil_mode and opset >= 10 and not same else "floor"
    divisor = "padded" if count_include_pad and opset >= 7 else "valid"
    result = reference_pool(
        np.asarray(x),
        kernel_shape,
        strides or [1] * n,
        dilations or [1] * n,
        list(zip(flat[:n], flat[n:])),
        auto_pad.lower().replace("notset", "explicit"),
        rounding,
        divisor,
        layout,
    )
    with np.errstate(over="ignore", invalid="ignore"):
        return result.astype(np.asarray(x).dtype.newbyteorder("="))
