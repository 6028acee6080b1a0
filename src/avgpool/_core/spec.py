"""The canonical pooling spec: what every dialect's attributes are translated into.

Nothing after this point sees attribute names, opsets, flat ONNX pads lists or auto_pad strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class PadMode(enum.Enum):
    """How the pads are obtained: given, or computed from the input length."""

    EXPLICIT = "explicit"
    SAME_UPPER = "same_upper"  # odd total pad: the extra pixel goes at the end
    SAME_LOWER = "same_lower"  # odd total pad: the extra pixel goes at the beginning
    VALID = "valid"  # no padding


class Rounding(enum.Enum):
    """How the output length is rounded (docs/semantics.md section 2)."""

    FLOOR = "floor"
    CEIL = "ceil"  # OpenVINO/oneDNN "ceil": no drop rule
    CEIL_DROP = "ceil_drop"  # ONNX ceil_mode (opset >= 10), OpenVINO ceil_torch, PyTorch


class Divisor(enum.Enum):
    """What each window's sum is divided by (docs/semantics.md section 4), per axis."""

    VALID_TAPS = "valid_taps"  # taps inside [0, L)
    PADDED_TAPS = "padded_taps"  # taps inside [-pad_begin, L + pad_end): ONNX count_include_pad=1
    FULL_KERNEL = "full_kernel"  # the kernel size: oneDNN exclude_pad=false, QLinear count_include_pad
    FULL_KERNEL_IF_PADDED = "full_kernel_if_padded"  # OpenVINO exclude_pad=false: full if any pad > 0


class Layout(enum.Enum):
    """Where the channel axis is: N x C x D1.. (NCX) or N x D1.. x C (NXC)."""

    NCX = "NCX"
    NXC = "NXC"

    def spatial_axes(self, rank: int) -> tuple[int, ...]:
        """The array axes holding the spatial dimensions, in order."""
        return tuple(range(2, rank)) if self is Layout.NCX else tuple(range(1, rank - 1))


@dataclass(frozen=True)
class PoolSpec:
    """A validated, dialect-free description of one pooling operation.

    ``pads`` holds (begin, end) per axis; with any pad mode but EXPLICIT it is all zeros and the
    real pads are resolved from the input length by :mod:`avgpool._core.shape`.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    pad_mode: PadMode
    rounding: Rounding
    divisor: Divisor

    @property
    def ndim(self) -> int:
        """The number of spatial axes."""
        return len(self.kernel)
