"""The public QLinearAveragePool entry point: ``qlinear_average_pool``, and :func:`prepare`: the
dialect's validation and geometry (:mod:`avgpool.dialects.qlinear`) handed to the engine
(:mod:`avgpool.qlinear_engine`), cached per attributes (:func:`prepare_cached`); and
:class:`QLinearAveragePool`, the operator with its scalars and attributes fixed."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import caches, qlinear_engine
from .attributes import as_flag
from .dialects import qlinear as dialect
from .errors import AvgPoolError, error_context
from .inputs import refuse_masked
from .memo import Memo, Unhashable, ints, kept, on_clear, plain, same_items
from .pools import PreparedPool

_DTYPES = frozenset(dialect.DTYPES)
_NOTSET = "NOTSET"  # auto_pad's default, the object itself (the memo key leaves it out)


#: every argument but the data -> (prepared pool, kernel arguments), bounded as average_pool's calls
_CALLS = Memo(1024, caches.held_bytes, caches.CACHE_BYTES, caches.CACHE_ENTRY_BYTES)
_FIND = _CALLS.find  # the entry (value, bytes) or None: the dictionary's own get
_PARAMS: dict = {}  # (x_scale, x_zp, y_scale, y_zp, dtype) of plain Python numbers -> QuantParams
_PARAMS_CACHE = 256
#: Calls remembered in _CALLS by the identity of their argument objects too, under
#: ``id(kernel_shape)``, with what they prepared: a model runner passes each node's own objects
#: on every call, node after node, and such a call skips building the key (~1 us). Kept as a
#: call is validated, or when it comes twice in a row through the key with the very same
#: objects (api._KNOWN's rules, caches.known_calls's bounds), and only when every scalar is immutable; a list
#: only with its items, compared by identity too (:func:`.memo.same_items`), so that a list
#: edited in place is noticed. (kernel_shape, strides, pads, x_scale, x_zero_point, y_scale,
#: y_zero_point, auto_pad, ceil_mode, count_include_pad, channels_last, x.shape, x.dtype, items
#: check, the pool, kernel arguments)
_KNOWN = caches.known_calls()
_FIND_KNOWN = _KNOWN.find
#: The last call found through the key: its pool and argument objects.
_REPEATED: tuple = (None,) * 8
_run = qlinear_engine.run
_ndarray = np.ndarray


def _freeze(value: Any) -> Any:
    """A cache key for an attribute value that is also the value itself: a plain scalar, or a
    sequence of ints as a tuple (:func:`.memo.ints`); anything else raises Unhashable."""
    kind = type(value)
    if kind is int or kind is bool or kind is str:
        return value
    return ints(value)


def _params(dtype: np.dtype, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any) -> dialect.QuantParams:
    """Validated scales and zero points, remembered when they are plain Python floats and ints."""
    if (
        type(x_scale) is float
        and type(y_scale) is float
        and (x_zero_point is None or type(x_zero_point) is int)
        and (y_zero_point is None or type(y_zero_point) is int)
    ):
        key = (x_scale, x_zero_point, y_scale, y_zero_point, dtype)
        found = _PARAMS.get(key)
        if found is None:
            found = dialect.make_quant_params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)
            if len(_PARAMS) >= _PARAMS_CACHE:
                _PARAMS.clear()
            _PARAMS[key] = found
        return found
    return dialect.make_quant_params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)


def qlinear_average_pool(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = _NOTSET,
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    channels_last: bool | int = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """onnxruntime's com.microsoft QLinearAveragePool, bit for bit.

    >>> import numpy as np
    >>> from avgpool.qlinear import qlinear_average_pool
    >>> x = np.array([[[10, 20, 30, 40]]], dtype=np.uint8)
    >>> qlinear_average_pool(x, 1.0, 0, 1.0, 0, [3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)
    array([[[10, 30, 13]]], dtype=uint8)
    >>> y = np.empty((1, 1, 4), np.uint8)  # out=: written and returned, as average_pool's
    >>> qlinear_average_pool(x, 1.0, 0, 1.0, 0, [3], pads=[1, 1], out=y) is y, y
    (True, array([[[15, 20, 30, 35]]], dtype=uint8))

    ``x`` is uint8 or int8, N x C x D1 ... Dn (or N x D1 ... Dn x C with ``channels_last``), any
    n >= 1 (onnxruntime stops at 3); the output has its dtype. ``x_scale`` and ``y_scale`` are
    float32 scalars (or 1-element 1-D arrays; other real numbers are converted to float32);
    ``x_zero_point`` and ``y_zero_point`` are scalars of ``x``'s dtype (a Python int in range is
    accepted) or ``None`` for 0. ``pads`` is ONNX's flat ``[begin_1 .. begin_n, end_1 .. end_n]``.
    There is no ``dilations``: the operator has none.

    The arithmetic is onnxruntime's CPU kernel (docs/semantics.md 5.2). General path: dequantize each
    tap ``x_scale * float32(x - x_zero_point)``, sum in float32 in row-major tap order, divide by
    the number of valid taps (``prod(kernel_shape)`` with ``count_include_pad``, which then also
    counts a ceil window's overhang), then ``rint(avg / y_scale + y_zero_point)`` in float32
    (round half to even). When the kernel covers the whole input and no pad is in effect,
    onnxruntime uses an integer path instead, and so does this function:
    ``float32(sum(x) - x_zero_point * n) * (x_scale / (y_scale * n))`` rounded half to even; it
    can differ from the general path in the last bit, and onnxruntime refuses it unless
    ``2**-32 <= x_scale / (y_scale * n) < 256`` and ``n < 2**24``: so does this function.
    The geometry is onnxruntime's, including its quirks (truncating floor division, SAME padding
    that can be negative when a kernel is shorter than its stride); pads must be smaller than the
    kernel, as onnxruntime requires.

    Saturation: where onnxruntime converts a float outside the int32 range to int (undefined
    behaviour in C++; x86 builds then give the dtype's minimum, ARM builds saturate), this
    function saturates: values above the dtype's range give its maximum, below give its
    minimum, and NaN (only reachable when dequantized values overflow float32) gives the minimum.
    ``y_scale`` must be finite and non-zero and ``x_scale`` finite.

    ``out``, as for :func:`avgpool.average_pool`: a writeable array of the output's shape and
    ``x``'s dtype that the result is written into and returned; any ndarray subclass (an
    ``np.memmap``, ``np.lib.format.open_memmap``'s result) is returned itself, and one that is
    not C-contiguous or shares memory with ``x`` (``x`` itself, pooling in place) gets the
    result copied in once it is computed.

    Raises :class:`avgpool.AvgPoolError` for any invalid attribute, dtype, shape, scalar input or
    ``out``.
    """
    known = _FIND_KNOWN(id(kernel_shape))
    if known is not None:
        # one unpacking, then tests of locals: indexing the tuple per test cost ~0.2 us
        ks, st, pd, xs, xz, ys, yz, ap, cm, cip, cl, shape, dtype, items, prepared, kernel_args = known[0]
        if (
            kernel_shape is ks
            and strides is st
            and pads is pd
            and x_scale is xs
            and x_zero_point is xz
            and y_scale is ys
            and y_zero_point is yz
            and auto_pad is ap
            and ceil_mode is cm
            and count_include_pad is cip
            and channels_last is cl
            and type(x) is _ndarray
            and x.shape == shape
            and x.dtype is dtype
            and items(kernel_shape, strides, pads)
        ):
            return _finish(prepared, x, kernel_args, out)
    if type(x) is not _ndarray:
        return _validated_call(
            x,
            out,
            None,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
    # repeated calls: one lookup keyed by everything that validation depends on, types included
    # (True == 1 == 1.0 as dictionary keys, but they validate differently)
    try:
        key = (
            x.shape,
            x.dtype,
            type(x_scale),
            x_scale,
            type(x_zero_point),
            x_zero_point,
            type(y_scale),
            y_scale,
            type(y_zero_point),
            y_zero_point,
            ints(kernel_shape),
            None if strides is None else ints(strides),
            None if pads is None else ints(pads),
        )
        if not (auto_pad is _NOTSET and ceil_mode is False and count_include_pad is False and channels_last is False):
            # as average_pool's key: the defaults themselves need no place in it (a shorter key to
            # build and hash for a call with lists written in it, which cannot be _KNOWN)
            key += (
                type(auto_pad),
                auto_pad,
                type(ceil_mode),
                ceil_mode,
                type(count_include_pad),
                count_include_pad,
                type(channels_last),
                channels_last,
            )
        entry = _FIND(key)
    except (Unhashable, TypeError):
        key = entry = None
    if entry is None:
        return _validated_call(
            x,
            out,
            key,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
    prepared, kernel_args = entry[0]
    global _REPEATED
    was, ks, st, pd, xs, xz, ys, yz = _REPEATED
    if (
        was is prepared
        and ks is kernel_shape
        and st is strides
        and pd is pads
        and xs is x_scale
        and xz is x_zero_point
        and ys is y_scale
        and yz is y_zero_point
    ):
        # the same call twice in a row through the key, with the same objects
        _remember(
            x,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
            prepared,
            kernel_args,
        )
    _REPEATED = (prepared, kernel_shape, strides, pads, x_scale, x_zero_point, y_scale, y_zero_point)
    return _finish(prepared, x, kernel_args, out)


#: The label of :func:`qlinear_global_average_pool`'s errors.
GLOBAL_LABEL = "QLinearGlobalAveragePool"


def qlinear_global_average_pool(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    *,
    channels_last: bool | int = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """onnxruntime's com.microsoft QLinearGlobalAveragePool (what its quantizer makes of a
    GlobalAveragePool), bit for bit: the average of each image's channel over every spatial axis.

    >>> import numpy as np
    >>> from avgpool.qlinear import qlinear_global_average_pool
    >>> x = np.array([[[[10, 20], [30, 41]]]], dtype=np.uint8)
    >>> qlinear_global_average_pool(x, 0.5, 0, 0.25, 3)
    array([[[[53]]]], dtype=uint8)

    onnxruntime computes it as its QLinearAveragePool computes a kernel covering the whole input
    without pads (one function, ``ComputeQLinearGlobalAvgPool``), so this is
    :func:`qlinear_average_pool` with ``kernel_shape`` the spatial shape: its integer path, its
    scalars, its refusals (``2**-32 <= x_scale / (y_scale * n) < 256``), its ``out``. ``x`` is
    N x C x D1 ... Dn (N x D1 ... Dn x C with ``channels_last``), n >= 1 and no spatial axis empty;
    the output keeps every axis, each spatial one of length 1.

    Raises :class:`avgpool.AvgPoolError` for any invalid input, scalar or ``out``.
    """
    try:
        array = x if type(x) is _ndarray else _as_array(x)
        if array.ndim < 3:
            raise AvgPoolError(f"`X` has shape {array.shape}: it must have at least 3 axes (N, C and a spatial one)")
        spatial = array.shape[1:-1] if as_flag("channels_last", channels_last) else array.shape[2:]
        if 0 in spatial:
            raise AvgPoolError(
                f"`X` has shape {array.shape}: a spatial axis is empty (an average of no values; "
                "onnxruntime refuses it as out of its computation range)"
            )
        return qlinear_average_pool(
            array, x_scale, x_zero_point, y_scale, y_zero_point, spatial, channels_last=channels_last, out=out
        )
    except AvgPoolError as err:
        raise AvgPoolError(f"{GLOBAL_LABEL}: {str(err).removeprefix(dialect.LABEL + ': ')}") from None


def _validated_call(
    x: Any,
    out: Any,
    key: tuple | None,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> np.ndarray:
    """A call not remembered: validated, prepared (:func:`_prepared_call`) and remembered under
    ``key`` when it has one; every error names the operator."""
    with error_context(dialect.LABEL):
        array, prepared, kernel_args = _prepared_call(
            x,
            x_scale,
            x_zero_point,
            y_scale,
            y_zero_point,
            kernel_shape,
            strides,
            pads,
            auto_pad,
            ceil_mode,
            count_include_pad,
            channels_last,
        )
        scalars = (x_scale, x_zero_point, y_scale, y_zero_point, auto_pad, ceil_mode, count_include_pad, channels_last)
        if key is not None and plain(scalars):
            _CALLS.put(key, (prepared, kernel_args))
            _remember(
                x,
                x_scale,
                x_zero_point,
                y_scale,
                y_zero_point,
                kernel_shape,
                strides,
                pads,
                auto_pad,
                ceil_mode,
                count_include_pad,
                channels_last,
                prepared,
                kernel_args,
            )
        return _finish(prepared, array, kernel_args, out)


def _prepared_call(
    x: Any,
    x_scale: Any,
    x_zero_point: Any,
    y_scale: Any,
    y_zero_point: Any,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> tuple[np.ndarray, PreparedPool, tuple]:
    """``x`` as an array, and its validated pool and kernel arguments (:func:`prepare_cached`)."""
    array = x if type(x) is np.ndarray else _as_array(x)
    if array.dtype not in _DTYPES:
        dialect.check_dtype(array.dtype)
    try:
        prepared = prepare_cached(
            array.shape,
            array.dtype,
            _freeze(kernel_shape),
            _freeze(strides),
            _freeze(pads),
            _freeze(auto_pad),
            _freeze(ceil_mode),
            _freeze(count_include_pad),
            _freeze(channels_last),
        )
    except Unhashable:
        prepared = prepare(
            array.shape, array.dtype, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last
        )
    params = _params(array.dtype, x_scale, x_zero_point, y_scale, y_zero_point)
    return array, prepared, qlinear_engine.kernel_args(prepared, params)


def _finish(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple, out: Any) -> np.ndarray:
    """Run a validated call: into a new array, or into ``out`` (:func:`_into`: its errors, the
    only ones left, name the operator). The common case, a serial kernel and a plain C-contiguous
    ``out`` apart from ``x``, is qlinear_engine.run_into's inlined: its checks and three calls
    were ~0.8 us of the prepared pool's ~3.3 us on 1x7x7x544 NHWC (bench_qlinear.py, `engine`)."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if out is None:
        return _run(prepared, x, kernel_args)
    call, n_items, pieces, x_view, out_view, out_shape, x_how, out_how, _, dtype = prepared.plan
    if (
        pieces == 1
        and call is not None
        and type(out) is _ndarray
        and out.base is None
        and x.base is None
        and out is not x
        and out.shape == out_shape
        and out.dtype is dtype
    ):
        flags = out.flags
        if flags.writeable and flags.c_contiguous:
            call(
                x if x_how == 0 else x.ravel() if x_how == 1 else x.reshape(x_view),
                out if out_how == 0 else out.ravel() if out_how == 1 else out.reshape(out_view),
                0,
                n_items,
                kernel_args[0],
            )
            return out
    return _into(prepared, x, kernel_args, out)


class QLinearAveragePool:
    """QLinearAveragePool with its scalars and attributes fixed, as an onnxruntime session holds
    them: validated per input shape and dtype once, then each call costs the kernel and a few
    checks. Results are :func:`qlinear_average_pool`'s, bit for bit.

    >>> import numpy as np, avgpool
    >>> pool = avgpool.QLinearAveragePool(0.5, 128, 0.25, 128, [2, 2], strides=[2, 2])
    >>> pool(np.array([[[[128, 130], [132, 134]]]], dtype=np.uint8))
    array([[[[134]]]], dtype=uint8)

    ``x_scale``, ``x_zero_point``, ``y_scale`` and ``y_zero_point`` are read as
    :func:`qlinear_average_pool` reads them (arrays are copied here: changing them later changes
    nothing); ``x_zero_point`` and ``y_zero_point`` must suit the dtype of each input called with.
    ``out``: as for the function. Raises :class:`avgpool.AvgPoolError` as the function does, on
    the first call with each input shape and dtype.
    """

    def __init__(
        self,
        x_scale: Any,
        x_zero_point: Any,
        y_scale: Any,
        y_zero_point: Any,
        kernel_shape: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        auto_pad: str = "NOTSET",
        ceil_mode: bool | int = False,
        count_include_pad: bool | int = False,
        channels_last: bool | int = False,
    ) -> None:
        self._arguments = tuple(
            kept(value)
            for value in (
                x_scale,
                x_zero_point,
                y_scale,
                y_zero_point,
                kernel_shape,
                strides,
                pads,
                auto_pad,
                ceil_mode,
                count_include_pad,
                channels_last,
            )
        )
        # (shape, dtype) -> (prepared pool, kernel arguments), bounded as AveragePool's: the
        # latest is always kept, however large its tables
        self._prepared = Memo(512, caches.held_bytes, caches.CACHE_BYTES, entry_bytes=sys.maxsize)
        self._find = self._prepared.find

    def __call__(self, x: Any, out: np.ndarray | None = None) -> np.ndarray:
        if type(x) is _ndarray:
            entry = self._find((x.shape, x.dtype))
            if entry is not None:  # this shape and dtype were validated before
                prepared, kernel_args = entry[0]
                return _finish(prepared, x, kernel_args, out)
        with error_context(dialect.LABEL):
            array, prepared, kernel_args = _prepared_call(x, *self._arguments)
            self._prepared.put((array.shape, array.dtype), (prepared, kernel_args))
            return _finish(prepared, array, kernel_args, out)

    def __repr__(self) -> str:
        names = (
            "x_scale",
            "x_zero_point",
            "y_scale",
            "y_zero_point",
            "kernel_shape",
            "strides",
            "pads",
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "channels_last",
        )
        return f"QLinearAveragePool({', '.join(f'{n}={v!r}' for n, v in zip(names, self._arguments))})"


def _into(prepared: PreparedPool, x: np.ndarray, kernel_args: tuple, out: Any) -> np.ndarray:
    """A remembered call into ``out`` (:func:`.qlinear_engine.run_into`), whose errors, all
    about ``out``, name the operator as the first call's do."""
    try:
        return qlinear_engine.run_into(prepared, x, kernel_args, out)
    except AvgPoolError as err:
        raise AvgPoolError(f"{dialect.LABEL}: {err}") from None


def _remember(x: np.ndarray, *args: Any) -> None:
    """Keep a call remembered in _CALLS in _KNOWN too (see there): its key shows its scalars are
    immutable (:func:`.memo.plain`) and its sequences lists or tuples of ints, or None."""
    kernel_shape, strides, pads = args[4:7]
    _KNOWN.put(
        id(kernel_shape),
        (
            kernel_shape,
            strides,
            pads,
            *args[:4],
            *args[7:11],
            x.shape,
            x.dtype,
            same_items((kernel_shape, strides, pads)),
            *args[11:],
        ),
    )


def prepare(
    shape: tuple[int, ...],
    dtype: np.dtype,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    channels_last: Any,
) -> PreparedPool:
    """Validate the dtype and the attributes for an input shape (the dialect's geometry) and
    build the kernel's tables (:func:`avgpool.qlinear_engine.prepare`)."""
    dialect.check_dtype(dtype)
    geometry = dialect.make_geometry(
        shape, kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad, channels_last
    )
    return qlinear_engine.prepare(shape, dtype, geometry)


@caches.BoundedCache
def prepare_cached(shape: tuple[int, ...], dtype: np.dtype, *attributes: Any) -> PreparedPool:
    """:func:`prepare` for hashable attribute values (ints, tuples of ints, strings, bools),
    cached as the float engine's pools are (:class:`avgpool.caches.BoundedCache`: by count and
    bytes, under the current :mod:`.tuning`, which the engine reads)."""
    return prepare(shape, dtype, *attributes)


@on_clear
def forget() -> None:
    """Forget the remembered calls (for tests that change the engine's tuning constants)."""
    global _REPEATED
    _REPEATED = (None,) * 8
    _KNOWN.clear()
    _CALLS.clear()


def _as_array(x: Any) -> np.ndarray:
    refuse_masked(x, "`X`")
    try:
        return np.asarray(x)
    except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
        raise AvgPoolError(f"`X` cannot be read as an array: {err}") from None
