"""onnxruntime's com.microsoft QLinearAveragePool and QLinearGlobalAveragePool (uint8/int8), bit
for bit as onnxruntime computes them.

>>> import numpy as np, avgpool.qlinear
>>> x = np.array([[[[0, 2], [4, 6]]]], np.uint8)
>>> avgpool.qlinear.qlinear_global_average_pool(x, 1.0, 0, 1.0, 0)
array([[[[3]]]], dtype=uint8)

The operators live in :mod:`avgpool._ops.qlinear`; this is their public name.
"""

from ._ops.qlinear import QLinearAveragePool, qlinear_average_pool, qlinear_global_average_pool

__all__ = ["QLinearAveragePool", "qlinear_average_pool", "qlinear_global_average_pool"]
