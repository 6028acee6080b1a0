"""oneDNN Graph AvgPool: ``avg_pool`` and ``output_shape`` (data_format NXC by default, as in oneDNN)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import caches, engine
from .dialects import onednn as onednn_dialect
from .errors import error_context
from .inputs import as_input_array, as_input_shape
from .memo import Memo, call_key, call_prepared
from .shape import infer_output_shape


def avg_pool(
    x: Any,
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    exclude_pad: bool,
    rounding_type: str = "floor",
    auto_pad: str = "None",
    data_format: str = "NXC",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """oneDNN Graph AvgPool, on N x D1.. x C (``data_format="NXC"``, the default) or N x C x D1..
    (``"NCX"``) data, both computed in place without a transposed copy.

    >>> import numpy as np, avgpool.onednn
    >>> x = np.arange(1, 7, dtype=np.float32).reshape(1, 6, 1)  # N x W x C
    >>> avgpool.onednn.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1], exclude_pad=False)[..., 0]
    array([[1., 3., 5.]], dtype=float32)
    >>> avgpool.onednn.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1], exclude_pad=True)[..., 0]
    array([[1.5, 3. , 5. ]], dtype=float32)

    Rank 3 to 5; float32, bfloat16 or float16, accumulated in float64 and rounded once.
    ``exclude_pad`` divides by the taps inside the input, otherwise by the whole kernel.
    ``rounding_type`` is ``floor`` or ``ceil`` (no drop rule; oneDNN documents ``ceil`` with
    ``exclude_pad`` false as unsupported, so it raises). ``auto_pad`` is ``None`` (use the pads),
    ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``, which overwrite the pads. Like oneDNN's pooling
    primitive, exclude-padding geometries with a window outside the input (a pad as long as the
    kernel, a ceil window starting past the end) raise :class:`avgpool.AvgPoolError`, as does any
    invalid value.
    """
    key = call_key(x, (kernel, strides, pads_begin, pads_end), (exclude_pad, rounding_type, auto_pad, data_format))
    found = _CALLS.get(key)
    if found is not None:  # validated before: the prepared pool
        return call_prepared(found, onednn_dialect.LABEL, x, out)
    with error_context(onednn_dialect.LABEL):
        array = as_input_array(x, onednn_dialect.DTYPES, onednn_dialect.DTYPES_TEXT, min_rank=0)
        layout = onednn_dialect.parse_layout(data_format)
        spec = onednn_dialect.make_spec(
            array.shape,
            layout,
            kernel,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            exclude_pad=exclude_pad,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
        )
        prepared = engine.prepare(spec, array.shape, array.dtype, layout)
        if key is not None and array is x:
            _CALLS.put(key, prepared)
        return prepared(array, out)


#: Calls of :func:`avg_pool` validated before: key -> prepared pool.
_CALLS = Memo(512, caches.held_bytes, caches.CACHE_BYTES, caches.CACHE_ENTRY_BYTES)


def output_shape(
    input_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    exclude_pad: bool,
    rounding_type: str = "floor",
    auto_pad: str = "None",
    data_format: str = "NXC",
) -> tuple[int, ...]:
    """The output shape of oneDNN Graph AvgPool for an input shape, without data (same rules as ``avg_pool``).

    >>> import avgpool.onednn
    >>> avgpool.onednn.output_shape((1, 5, 5, 8), [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0],
    ...                             exclude_pad=True, rounding_type="ceil")
    (1, 3, 3, 8)
    """
    with error_context(onednn_dialect.LABEL):
        shape = as_input_shape(input_shape)
        layout = onednn_dialect.parse_layout(data_format)
        spec = onednn_dialect.make_spec(
            shape,
            layout,
            kernel,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            exclude_pad=exclude_pad,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
        )
        return infer_output_shape(spec, shape, layout)
