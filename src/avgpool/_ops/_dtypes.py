"""The float dtypes the operators take, bfloat16 among them, known without importing ml_dtypes.

numpy's bfloat16 is ml_dtypes', and importing ml_dtypes takes 0.6-0.9 s on the 2-core machine
(``python -X importtime -c "import ml_dtypes"``: it registers a dozen dtypes and their casts
and ufuncs with numpy), which was most of a warm first call. An array can only have that dtype
once ml_dtypes is imported, so a dtype is tested against it through ``sys.modules``: a call
whose input is not bfloat16 never imports it (tests/test_import.py).

>>> import numpy as np
>>> np.dtype(np.float32) in FloatDtypes("float32", "bfloat16")
True
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def bfloat16() -> np.dtype:
    """numpy's bfloat16 dtype (imports ml_dtypes)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16 (in native byte order), without importing it."""
    module = sys.modules.get("ml_dtypes")
    return module is not None and dtype == module.bfloat16


def as_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, where the name "bfloat16" imports ml_dtypes first (numpy knows the name
    only then)."""
    if isinstance(dtype, str) and dtype.strip() == "bfloat16":
        return bfloat16()
    return np.dtype(dtype)


class FloatDtypes:
    """A set of float dtypes by name, bfloat16 possibly among them: ``dtype in`` it tests
    without importing ml_dtypes."""

    def __init__(self, *names: str) -> None:
        self._plain = frozenset(np.dtype(name) for name in names if name != "bfloat16")
        self._bfloat16 = "bfloat16" in names

    def __contains__(self, dtype: Any) -> bool:
        return dtype in self._plain or (self._bfloat16 and is_bfloat16(dtype))
