"""OpenVINO AvgPool-1, -14 and -16: ``avg_pool`` and ``output_shape``, faithful to the OpenVINO runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import caches, engine
from .dialects import openvino as openvino_dialect
from .empty_windows import empty_window_factors, write_empty_windows
from .errors import error_context
from .inputs import as_input_array, as_input_shape
from .memo import Memo, call_key, call_prepared
from .shape import infer_output_shape
from .spec import Layout


def avg_pool(
    x: Any,
    kernel: Sequence[int],
    *,
    exclude_pad: bool,
    strides: Sequence[int] | None = None,
    pads_begin: Sequence[int] | None = None,
    pads_end: Sequence[int] | None = None,
    rounding_type: str = "floor",
    auto_pad: str = "explicit",
    dilations: Sequence[int] | None = None,
    version: int = 16,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """OpenVINO AvgPool-1, -14 or -16 (``version``), as the OpenVINO runtime computes it.

    >>> import numpy as np, avgpool.openvino
    >>> x = np.array([[[1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    >>> avgpool.openvino.avg_pool(x, [3], strides=[2], pads_begin=[1], pads_end=[1],
    ...                           rounding_type="ceil", exclude_pad=False)
    array([[[1.       , 3.       , 1.3333334]]], dtype=float32)

    ``x`` is N x C x D1 [x D2 [x D3]] (rank 3 to 5, N and C positive), float16, float32, float64 or
    bfloat16. ``rounding_type`` is ``floor``, ``ceil`` (no drop rule: a last window may start in the
    end padding) or, from AvgPool-14, ``ceil_torch`` (PyTorch's ceil_mode); ``dilations`` exist from
    AvgPool-16. ``auto_pad`` is ``explicit``, ``same_upper``, ``same_lower`` or ``valid``; the pads
    are ignored unless it is ``explicit``, and ``same_*`` applies ``rounding_type`` to the padded
    length. Spellings are accepted in any letter case, as OpenVINO accepts them.

    The divisor: with ``exclude_pad`` the taps inside the input; without it the whole kernel as soon
    as any axis has a non-zero pad (also for a ceil window hanging past the end padding), else the
    taps inside the input. A window with no tap inside the input is NaN (0/0), except a ``ceil``
    window starting past the input's end, which OpenVINO's CPU kernels divide by a negative count:
    ``-0.0`` (see :mod:`avgpool.empty_windows`). Sums are accumulated in float64 and rounded once.

    Raises :class:`avgpool.AvgPoolError` where OpenVINO refuses the model: a dilated kernel longer
    than the padded input (even with ceil), a batch or channel size of 0, with ``exclude_pad`` an
    explicit pad as long as the dilated kernel, an attribute the version does not have, or any
    invalid value.
    """
    key = call_key(
        x, (kernel, strides, pads_begin, pads_end, dilations), (exclude_pad, rounding_type, auto_pad, version)
    )
    found = _CALLS.get(key)
    if found is not None:  # validated before: the prepared pool, and the empty windows to overwrite
        prepared, label, empty_windows = found
        result = call_prepared(prepared, label, x, out)
        write_empty_windows(result, empty_windows)
        return result
    version = openvino_dialect.check_version(version)
    label = openvino_dialect.label(version)
    with error_context(label):
        array = as_input_array(x, openvino_dialect.DTYPES, openvino_dialect.DTYPES_TEXT, min_rank=0)
        spec = openvino_dialect.make_spec(
            version,
            array.shape,
            kernel,
            exclude_pad=exclude_pad,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            dilations=dilations,
        )
        prepared = engine.prepare(spec, array.shape, array.dtype, Layout.NCX)
        empty_windows = empty_window_factors(spec, array.shape)
        if key is not None and array is x:
            _CALLS.put(key, (prepared, label, empty_windows))
        result = prepared(array, out)
        write_empty_windows(result, empty_windows)
        return result


#: Calls of :func:`avg_pool` validated before: key -> (prepared pool, operator label, the
#: per-axis factors of the windows whose divisor OpenVINO makes negative, or None: finding them
#: costs ten times the call).
_CALLS = Memo(512, caches.held_bytes, caches.CACHE_BYTES, caches.CACHE_ENTRY_BYTES)


def output_shape(
    input_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    exclude_pad: bool,
    strides: Sequence[int] | None = None,
    pads_begin: Sequence[int] | None = None,
    pads_end: Sequence[int] | None = None,
    rounding_type: str = "floor",
    auto_pad: str = "explicit",
    dilations: Sequence[int] | None = None,
    version: int = 16,
) -> tuple[int, ...]:
    """The output shape of OpenVINO AvgPool for an input shape, without data (same rules as ``avg_pool``).

    >>> import avgpool.openvino
    >>> avgpool.openvino.output_shape((1, 3, 32, 32), [5, 5], strides=[3, 3], pads_begin=[1, 1],
    ...                               pads_end=[1, 1], exclude_pad=True)
    (1, 3, 10, 10)
    >>> avgpool.openvino.output_shape((1, 1, 5), [1], strides=[3], auto_pad="same_upper",
    ...                               rounding_type="ceil", exclude_pad=True)
    (1, 1, 3)
    """
    version = openvino_dialect.check_version(version)
    with error_context(openvino_dialect.label(version)):
        shape = as_input_shape(input_shape)
        spec = openvino_dialect.make_spec(
            version,
            shape,
            kernel,
            exclude_pad=exclude_pad,
            strides=strides,
            pads_begin=pads_begin,
            pads_end=pads_end,
            rounding_type=rounding_type,
            auto_pad=auto_pad,
            dilations=dilations,
        )
        return infer_output_shape(spec, shape, Layout.NCX)
