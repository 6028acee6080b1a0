"""Windows with no valid tap, as the OpenVINO CPU plugin's oneDNN kernels compute them.

Under the valid-taps divisor those kernels do not count the taps inside the input: per axis they
take ``k - (taps before 0) - (taps at or past L)`` with each term extrapolated from the window's
ends (oneDNN ``ref_pooling.cpp``; the jit kernels agree). Inside the input that is the tap count,
but for a window starting at or past the end (a ``ceil`` window) it is 0 or negative, so the window
is ``0 / 0 = NaN`` or ``0 / negative = -0.0`` (``+0.0`` when two axes are negative). Measured on
OpenVINO 2026.4: ``[1..5]``, k=1, s=3, ceil -> ``[1, 4, -0.]``; ``[1..4]``, k=1, s=2, ceil ->
``[1, 3, nan]``. Everything else about such a window (its sum is 0) is already what the engine does.
"""

from __future__ import annotations

import functools

import numpy as np

from .plan import make_plan
from .spec import Divisor, PoolSpec


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
