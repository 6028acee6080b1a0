"""PyTorch's average pooling, exactly: ``torch.nn.functional``'s ``avg_pool1d/2d/3d`` and
``adaptive_avg_pool1d/2d/3d`` with torch's signatures, shapes and rules, exact averages (float64
sums rounded once), and gradients by avgpool's own kernels. Imports without torch; numpy arrays
in give numpy arrays out, CPU tensors give tensors (same dtype, channels-last kept).

>>> import numpy as np, avgpool.torch
>>> avgpool.torch.adaptive_avg_pool2d(np.arange(16.0).reshape(1, 1, 4, 4), (2, None)).shape
(1, 1, 2, 4)

The operator lives in :mod:`avgpool._ops.torch`; this is its public name (docs/torch.md).
"""

from ._ops.torch import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
)

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
]
