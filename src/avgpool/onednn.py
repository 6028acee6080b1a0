"""oneDNN Graph AvgPool: ``avg_pool`` and ``output_shape`` (data_format NXC by default, as in oneDNN).

>>> import numpy as np, avgpool.onednn
>>> x = np.arange(4, dtype=np.float32).reshape(1, 4, 1)  # N, X, C
>>> avgpool.onednn.avg_pool(x, [2], strides=[2], pads_begin=[0], pads_end=[0], exclude_pad=True)
array([[[0.5],
        [2.5]]], dtype=float32)

The operator lives in :mod:`avgpool._ops.onednn`; this is its public name.
"""

from ._ops.onednn import avg_pool, output_shape

__all__ = ["avg_pool", "output_shape"]
