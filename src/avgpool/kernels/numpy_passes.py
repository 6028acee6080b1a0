"""Separable pooling with numpy: one 1-D pass per spatial axis, float64 accumulation.

Each pass loops over the kernel taps (never over output elements) and adds each tap's strided
slice to the window sums, so a NaN or Inf only reaches windows that contain it.
"""

from __future__ import annotations

import numpy as np


def pool_axis(data: np.ndarray, axis: int, first: np.ndarray, count: np.ndarray, divisor: np.ndarray,
              kernel: int, dilation: int) -> np.ndarray:
    """Sum the valid taps of every window along ``axis`` in float64 and divide by ``divisor``."""
    moved = np.moveaxis(data, axis, 0)
    sums = np.zeros((len(first),) + moved.shape[1:], dtype=np.float64)
    for tap in range(kernel):
        outputs = np.nonzero(count > tap)[0]
        if outputs.size:
            sums[outputs] += moved[first[outputs] + tap * dilation]
    sums /= divisor.reshape((-1,) + (1,) * (sums.ndim - 1))
    return np.moveaxis(sums, 0, axis)


def pool(data: np.ndarray, passes: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int]]) -> np.ndarray:
    """Apply the 1-D passes in turn; returns the float64 averages."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        result = data
        for axis, first, count, divisor, kernel, dilation in passes:
            result = pool_axis(result, axis, first, count, divisor, kernel, dilation)
    return np.asarray(result, dtype=np.float64)
