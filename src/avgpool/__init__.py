"""avgpool: average pooling exactly as ONNX, ONNX Runtime, OpenVINO and oneDNN define it.

>>> import numpy as np, avgpool
>>> avgpool.average_pool(np.array([[[1.0, 2.0, 3.0, 4.0]]]), [3], strides=[3], ceil_mode=True)
array([[[2., 4.]]])
"""

from . import onednn, openvino
from .api import AveragePool, average_pool, output_shape
from .errors import AvgPoolError
from .first_calls import cache_location, warmup
from .qlinear import qlinear_average_pool

__all__ = [
    "AveragePool", "AvgPoolError", "average_pool", "cache_location", "onednn", "openvino", "output_shape",
    "qlinear_average_pool", "warmup",
]
__version__ = "0.1.0"
