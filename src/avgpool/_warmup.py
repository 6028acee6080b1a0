"""Load or compile avgpool's kernels ahead of the first real call.

Each *kind* is one small call that reaches one compiled entry kernel (a dtype, a layout, the exact
float32 path, the threaded path, a QLinearAveragePool kernel); :data:`KINDS` lists them all, and
``benchmarks/cold_start.py`` times each in a fresh process. Where a previous process compiled
them (see :mod:`avgpool.kernels.jit`), warming up only loads them.

>>> import avgpool
>>> sorted(avgpool.warmup(["float64"]))
['float64']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

#: Elements of the input of a "-threads" kind: enough for the engines to share it between threads.
_THREADED = (2, 16, 128, 128)


def _float(
    dtype: str, shape: tuple[int, ...] = (1, 3, 16, 16), kernel: int = 2, layout: str = "NCX", *, nan: bool = False
) -> Callable[[], None]:
    def call() -> None:
        from ._ops import onnx as api
        from ._ops._dtypes import as_dtype

        x = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape).astype(as_dtype(dtype))
        if nan:  # values the exact float32 path cannot take: its float64 fallback
            x.flat[0] = np.nan
        x.setflags(write=False)  # as a memory-mapped input is: the same compiled kernels serve writable ones
        axes = len(shape) - 2
        api.average_pool(x, [kernel] * axes, layout=layout, pads=[kernel // 2] * (2 * axes), opset=22)

    return call


def _qlinear(
    dtype: str, shape: tuple[int, ...] = (1, 3, 16, 16), *, channels_last: bool = False, global_pool: bool = False
) -> Callable[[], None]:
    def call() -> None:
        from ._ops.qlinear import qlinear_average_pool

        x = (np.arange(int(np.prod(shape))) % 200 - (100 if dtype == "int8" else 0)).astype(dtype).reshape(shape)
        spatial = shape[1:-1] if channels_last else shape[2:]
        kernel = list(spatial) if global_pool else [2] * len(spatial)
        qlinear_average_pool(x, 0.1, 3, 0.2, 5, kernel, channels_last=channels_last)

    return call


def _openvino() -> None:
    from ._ops import openvino

    x = np.ones((1, 2, 8, 8), np.float32)
    openvino.avg_pool(x, [3, 3], exclude_pad=True, pads_begin=[1, 1], pads_end=[1, 1], version=16)


def _onednn() -> None:
    from ._ops import onednn

    x = np.ones((1, 8, 8, 2), np.float32)
    onednn.avg_pool(x, [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True)


#: Every kind of first call: one per compiled entry kernel and argument types a call can reach.
KINDS: dict[str, Callable[[], None]] = {
    "float32": _float("float32"),
    "float32-nxc": _float("float32", (1, 16, 16, 3), layout="NXC"),
    "float32-exact": _float("float32", kernel=5),
    "float32-threads": _float("float32", _THREADED),
    "float32-exact-threads": _float("float32", _THREADED, kernel=5),
    "float32-exact-nan": _float("float32", kernel=5, nan=True),
    "float64": _float("float64"),
    "float64-threads": _float("float64", _THREADED),
    "float16": _float("float16"),
    "float16-threads": _float("float16", _THREADED),
    "bfloat16": _float("bfloat16"),
    "openvino": _openvino,
    "onednn": _onednn,
    "qlinear-uint8": _qlinear("uint8"),
    "qlinear-int8": _qlinear("int8"),
    "qlinear-uint8-nxc": _qlinear("uint8", (1, 16, 16, 3), channels_last=True),
    "qlinear-int8-nxc": _qlinear("int8", (1, 16, 16, 3), channels_last=True),
    "qlinear-uint8-global": _qlinear("uint8", global_pool=True),
    "qlinear-int8-global": _qlinear("int8", global_pool=True),
    "qlinear-uint8-global-nxc": _qlinear("uint8", (1, 16, 16, 3), channels_last=True, global_pool=True),
    "qlinear-int8-global-nxc": _qlinear("int8", (1, 16, 16, 3), channels_last=True, global_pool=True),
    "qlinear-global-threads": _qlinear("uint8", _THREADED, global_pool=True),
    "qlinear-int8-global-threads": _qlinear("int8", _THREADED, global_pool=True),
    "qlinear-global-nxc-threads": _qlinear("uint8", (2, 128, 128, 16), channels_last=True, global_pool=True),
    "qlinear-threads": _qlinear("uint8", _THREADED),
    "qlinear-int8-threads": _qlinear("int8", _THREADED),
    "qlinear-nxc-threads": _qlinear("uint8", (2, 128, 128, 16), channels_last=True),
    "qlinear-int8-nxc-threads": _qlinear("int8", (2, 128, 128, 16), channels_last=True),
    # channels first with short rows, through the channels-last kernel (quantized_pools._ncx_through_nxc)
    "qlinear-uint8-short-rows": _qlinear("uint8", (1, 32, 8, 8)),
    "qlinear-int8-short-rows": _qlinear("int8", (1, 32, 8, 8)),
    "qlinear-short-rows-threads": _qlinear("uint8", (1, 256, 16, 16)),
    "qlinear-int8-short-rows-threads": _qlinear("int8", (1, 256, 16, 16)),
}


def warmup(
    kinds: Iterable[str] | None = None, *, report: Callable[[str, float], None] | None = None
) -> dict[str, float]:
    """Load (or, where nothing is cached for this machine, compile) the kernels of
    ``kinds`` (default: every one of :data:`KINDS`); the seconds each took. ``report(kind,
    seconds)`` is called after each. :func:`avgpool.cache_location` says where compiled kernels
    are kept."""
    from .errors import AvgPoolError

    chosen = list(KINDS) if kinds is None else list(kinds)
    unknown = [kind for kind in chosen if kind not in KINDS]
    if unknown:
        raise AvgPoolError(
            f"`kinds` names unknown kind(s) {', '.join(map(repr, unknown))}: choose from {', '.join(KINDS)}"
        )
    seconds = {}
    for kind in chosen:
        start = time.perf_counter()
        KINDS[kind]()
        seconds[kind] = time.perf_counter() - start
        if report is not None:
            report(kind, seconds[kind])
    return seconds


def cache_location() -> str | None:
    """The folder where kernels compiled on this machine are kept (numba's own choice:
    ``NUMBA_CACHE_DIR``, the package's ``__pycache__`` or the user's cache folder), or None when
    none is writable (then each process compiles them again)."""
    from .kernels import jit

    return jit.cache_location()
