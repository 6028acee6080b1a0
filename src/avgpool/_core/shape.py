"""Shape inference: pure integer arithmetic from the canonical spec (docs/semantics.md sections 2, 3)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AvgPoolError
from .spec import Layout, PadMode, PoolSpec, Rounding


@dataclass(frozen=True)
class AxisGeometry:
    """One spatial axis with its pads resolved: everything a window table needs."""

    length: int
    kernel: int
    stride: int
    dilation: int
    pad_begin: int
    pad_end: int
    out: int

    @property
    def extent(self) -> int:
        """The dilated kernel extent ``(k - 1) * d + 1``."""
        return (self.kernel - 1) * self.dilation + 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def same_pads(length: int, stride: int, extent: int, upper: bool) -> tuple[int, int]:
    """SAME padding: ``ceil(L / s)`` outputs, total pad from the DILATED extent (semantics 3.1)."""
    total = max(0, (_ceil_div(length, stride) - 1) * stride + extent - length)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def output_length(padded_length: int, extent: int, stride: int, pad_begin_plus_length: int, rounding: Rounding) -> int:
    """The output length for a padded length (semantics 2.1 to 2.3); may be negative."""
    span = padded_length - extent
    if rounding is Rounding.FLOOR:
        return span // stride + 1
    out = _ceil_div(span, stride) + 1
    if rounding is Rounding.CEIL_DROP and out > 0 and (out - 1) * stride >= pad_begin_plus_length:
        out -= 1  # the last window would start in the end padding
    return out


def resolved_pads(spec: PoolSpec, axis: int, length: int) -> tuple[int, int]:
    """The (begin, end) pads of one axis: given, none (VALID), or SAME's from the dilated extent."""
    if spec.pad_mode is PadMode.EXPLICIT:
        return spec.pads[axis]
    if spec.pad_mode is PadMode.VALID:
        return 0, 0
    extent = (spec.kernel[axis] - 1) * spec.dilations[axis] + 1
    return same_pads(length, spec.strides[axis], extent, spec.pad_mode is PadMode.SAME_UPPER)


def resolve_axis(spec: PoolSpec, axis: int, length: int) -> AxisGeometry:
    """Resolve one axis: pads from the pad mode, then the output length."""
    kernel, stride, dilation = spec.kernel[axis], spec.strides[axis], spec.dilations[axis]
    extent = (kernel - 1) * dilation + 1
    pad_begin, pad_end = resolved_pads(spec, axis, length)
    out = output_length(length + pad_begin + pad_end, extent, stride, length + pad_begin, spec.rounding)
    if out < 0:
        raise AvgPoolError(
            f"spatial axis {axis} has no output ({out}): the input length {length} plus pads "
            f"{pad_begin} + {pad_end} is shorter than the dilated kernel extent {extent}"
        )
    return AxisGeometry(length, kernel, stride, dilation, pad_begin, pad_end, out)


def resolve(spec: PoolSpec, spatial_shape: tuple[int, ...]) -> tuple[AxisGeometry, ...]:
    """Resolve every spatial axis of an input."""
    return tuple(resolve_axis(spec, axis, length) for axis, length in enumerate(spatial_shape))


def spatial_shape_of(input_shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The spatial part of an input shape."""
    return tuple(input_shape[a] for a in layout.spatial_axes(len(input_shape)))


def infer_output_shape(spec: PoolSpec, input_shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The full output shape: batch and channels kept, spatial lengths from the geometry."""
    geometry = resolve(spec, spatial_shape_of(input_shape, layout))
    shape = list(input_shape)
    for array_axis, axis in zip(layout.spatial_axes(len(input_shape)), geometry):
        shape[array_axis] = axis.out
    return tuple(shape)
