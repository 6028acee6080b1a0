"""OpenVINO AvgPool-1, -14 and -16: ``avg_pool`` and ``output_shape``, faithful to the OpenVINO runtime.

>>> import numpy as np, avgpool.openvino
>>> avgpool.openvino.avg_pool(np.arange(4.0).reshape(1, 1, 4), [2], strides=[2], exclude_pad=True)
array([[[0.5, 2.5]]])

The operator lives in :mod:`avgpool._ops.openvino`; this is its public name.
"""

from ._ops.openvino import avg_pool, output_shape

__all__ = ["avg_pool", "output_shape"]
