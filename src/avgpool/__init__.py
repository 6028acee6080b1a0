"""avgpool: average pooling exactly as ONNX, ONNX Runtime, OpenVINO and oneDNN define it.

>>> import numpy as np, avgpool
>>> avgpool.average_pool(np.array([[[1.0, 2.0, 3.0, 4.0]]]), [3], strides=[3], ceil_mode=True)
array([[[2., 4.]]])

The names below are loaded on first use (PEP 562): ``import avgpool`` imports no numpy, so
that the command line (:mod:`avgpool.cli`) handles Ctrl-C from its first moment
(tests/test_interrupts.py), and a program that only needs one dialect loads only that one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import AvgPoolError, AvgPoolTypeError

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from . import onednn, openvino, torch
    from ._ops.block_mean import block_mean
    from ._ops.onnx import AveragePool, average_pool, output_shape
    from ._ops.qlinear import QLinearAveragePool, qlinear_average_pool, qlinear_global_average_pool
    from ._warmup import cache_location, warmup

# public name -> the module that defines it (None: the name is a submodule)
_LAZY = {
    "AveragePool": "_ops.onnx",
    "block_mean": "_ops.block_mean",
    "average_pool": "_ops.onnx",
    "output_shape": "_ops.onnx",
    "cache_location": "_warmup",
    "warmup": "_warmup",
    "QLinearAveragePool": "_ops.qlinear",
    "qlinear_average_pool": "_ops.qlinear",
    "qlinear_global_average_pool": "_ops.qlinear",
    "onednn": None,
    "openvino": None,
    "torch": None,
}

__all__ = [
    "AveragePool",
    "AvgPoolError",
    "AvgPoolTypeError",
    "average_pool",
    "block_mean",
    "cache_location",
    "onednn",
    "openvino",
    "output_shape",
    "QLinearAveragePool",
    "qlinear_average_pool",
    "qlinear_global_average_pool",
    "torch",
    "warmup",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'avgpool' has no attribute {name!r}")
    module = _LAZY[name]
    value = importlib.import_module(f".{name if module is None else module}", __name__)
    if module is not None:
        value = getattr(value, name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
