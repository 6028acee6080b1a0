"""OpenVINO AvgPool-1, -14 and -16 (``avg_pool``, ``output_shape``) and AdaptiveAvgPool-8
(``adaptive_avg_pool``), faithful to the OpenVINO runtime.

>>> import numpy as np, avgpool.openvino
>>> avgpool.openvino.avg_pool(np.arange(4.0).reshape(1, 1, 4), [2], strides=[2], exclude_pad=True)
array([[[0.5, 2.5]]])

The operator lives in :mod:`avgpool._ops.openvino`; this is its public name.
"""

from ._ops.openvino import adaptive_avg_pool, avg_pool, output_shape

__all__ = ["adaptive_avg_pool", "avg_pool", "output_shape"]
