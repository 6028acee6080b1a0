"""ONNX AveragePool, opsets 1 to 22, in one place: the attribute rules (attributes -> one
validated :class:`~avgpool._core.spec.PoolSpec`, docs/semantics.md 5.1), :func:`average_pool`,
:class:`AveragePool` (the operator with its attributes fixed) and :func:`output_shape`.

The engine below (:mod:`avgpool._core`) knows no attribute names; this module is the only code
that knows ONNX's."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import caches, engine
from .._core.memo import Memo, kept
from .._core.outputs import out_target
from .._core.shape import infer_output_shape, resolve, spatial_shape_of
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError, error_context, labelled
from ._args import (
    as_choice,
    as_flag,
    as_input_array,
    as_input_shape,
    as_int_tuple,
    check_dilated_extents,
    check_missing_options,
    is_masked,
    spatial_axes_text,
)
from ._dtypes import FloatDtypes
from ._remember import CallMemo, Miss
from ._tensors import call as tensor_call
from ._tensors import is_foreign
from .block_mean import round_to

#: average_pool's scalar defaults, the objects themselves (its memo key leaves them out when a call
#: passes these very objects)
_NOTSET, _OPSET, _NCX = "NOTSET", 22, "NCX"
_ONE = 1  # min_count's default: an identity test on the call's path (Python's 1 is one object)


def average_pool(
    x: Any,
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = _NOTSET,
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    dilations: Sequence[int] | None = None,
    opset: int = _OPSET,
    layout: str = _NCX,
    out: np.ndarray | None = None,
    skipna: bool = False,
    min_count: int = _ONE,
) -> np.ndarray:
    """ONNX AveragePool at any opset, exactly as the spec defines it.

    ``x`` is N x C x D1 ... Dn (``layout="NCX"``) or N x D1 ... Dn x C (``layout="NXC"``), any
    n >= 1, float16, float32, float64 or (opset 22) bfloat16, any strides and byte order.
    ``pads`` is ONNX's flat ``[begin_1 .. begin_n, end_1 .. end_n]``. Sums are accumulated in
    float64 and rounded once to the input's dtype, so a float32 result is the exact average
    within 1 ulp (float16 and bfloat16 likewise); NaN and Inf reach exactly the windows that hold
    them, and a window with no valid tap is NaN (0/0). Opsets between the versions (1, 7, 10, 11,
    19, 22) mean the latest version at or below them. The ceil_mode drop rule (a last window that
    would start in the end padding is dropped) applies at every opset >= 10.

    >>> import numpy as np, avgpool
    >>> x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)
    >>> avgpool.average_pool(x, [3], pads=[1, 1])
    array([[[1.5, 2. , 3. , 4. , 4.5]]], dtype=float32)
    >>> avgpool.average_pool(x, [3], pads=[1, 1], count_include_pad=1)
    array([[[1., 2., 3., 4., 3.]]], dtype=float32)

    Missing values (docs/semantics.md 1.6): with ``skipna=True`` a NaN tap is not data, left out of
    the sum and of the divisor's count of valid taps (with ``count_include_pad=1`` the counted
    pads still count); a window with fewer than ``min_count`` non-NaN taps inside the input is
    NaN. A numpy masked array's masked values are missing whatever ``skipna`` says, and the
    result is a masked array whose mask marks the windows with fewer than ``min_count`` values
    present. With ``skipna=False`` on an unmasked input, ``min_count`` changes nothing.

    >>> avgpool.average_pool(np.array([[[np.nan, 1.0, 3.0]]]), [2], skipna=True)
    array([[[1., 2.]]])

    Raises :class:`avgpool.AvgPoolError` for any invalid attribute, dtype or shape.
    """
    if skipna is not False or min_count is not _ONE:  # values that can be missing, or a bad value
        args = (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
        if is_foreign(x):
            return _tensor_call(x, out, skipna, min_count, *args)
        return _with_missing_values(x, out, skipna, min_count, *args)
    found = _recall(x, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
    if type(found) is Miss:
        if type(x) is not _ndarray:
            args = (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
            if is_foreign(x):  # a torch tensor, another __dlpack__ array: the numpy call on its memory
                return _tensor_call(x, out, skipna, min_count, *args)
            if is_masked(x):  # masked values are missing
                return _with_missing_values(x, out, skipna, min_count, *args)
        return _validated_call(
            x,
            out,
            found.key,
            kernel_shape,
            strides,
            pads,
            dilations,
            auto_pad,
            ceil_mode,
            count_include_pad,
            opset,
            layout,
        )
    prepared, label = found  # validated before: the prepared pool
    try:
        return prepared(x, out)
    except AvgPoolError as err:  # only `out` can be wrong here
        raise labelled(label, err) from None


def _tensor_call(x: Any, out: Any, *args: Any) -> Any:
    """:func:`average_pool` of a tensor (:func:`._tensors.call`): a channels-last one pooled as
    NXC on its own memory."""
    kwargs = dict(zip(_ARGUMENTS, args))
    return tensor_call(average_pool, lambda: _label_of(kwargs["opset"]), x, out, kwargs, _LAYOUTS)


#: average_pool's keyword arguments but ``out``, in the order :func:`_tensor_call` and
#: :func:`_with_missing_values` take them.
_ARGUMENTS = (
    "skipna",
    "min_count",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "auto_pad",
    "ceil_mode",
    "count_include_pad",
    "opset",
    "layout",
)


def _label_of(opset: Any) -> str:
    try:
        return operator_label(op_version(opset))
    except AvgPoolError:
        return "AveragePool"


def _with_missing_values(
    x: Any,
    out: Any,
    skipna: Any,
    min_count: Any,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    dilations: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    opset: Any,
    layout: Any,
) -> Any:
    """:func:`average_pool` where values can be missing (``skipna``, a masked input): the sums of
    the values present and their counts, from two pools of the same prepared geometry (docs/semantics.md 1.6)."""
    args = (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
    version = op_version(opset)
    with error_context(operator_label(version)):
        check_missing_options(skipna, min_count)
        masked = is_masked(x)
        if masked and out is not None:  # the result is a new masked array: `out` would be left unwritten
            raise AvgPoolError(
                "`out` is given with a masked input: the result is a new masked array "
                "(masked where a window has fewer than `min_count` values); call without `out`"
            )
        if not skipna and not masked:
            return _validated_call(x, out, None, *args)
        mask = np.ma.getmaskarray(x) if masked else None
        array, spec, layout_ = validated_call_arguments(np.ma.getdata(x) if masked else x, version, args)
        prepared = engine.prepare(spec, array.shape, array.dtype, layout_)
        inside, divisor = _tap_counts(spec, array.shape, layout_)
        present = array == array if skipna else np.ones(array.shape, bool)  # not NaN, in one pass
        if mask is not None:
            present &= ~mask
        with np.errstate(invalid="ignore", divide="ignore"):
            if present.all():
                result, counts = prepared(array, None), inside
            else:
                result, counts = _present_means(array, present, prepared, spec, layout_, inside, divisor)
        few = np.broadcast_to(counts < int(min_count), result.shape)
        if few.any():
            result = result.copy() if not result.flags.writeable else result
            result[few] = np.nan
        if masked:
            return np.ma.MaskedArray(result, mask=few.copy())
        if out is None:
            return result
        target, _ = out_target(out, array, result.shape, result.dtype)
        target[...] = result
        return out


def _present_means(
    array: np.ndarray,
    present: np.ndarray,
    prepared: Any,
    spec: PoolSpec,
    layout: Layout,
    inside: np.ndarray,
    divisor: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The means over the values present and the count of present taps inside the input: the
    pool of the data with its missing values as 0 (sum / divisor) scaled by divisor / (divisor -
    missing taps), the count from the pool of the present values' indicator (count / divisor,
    exact after rounding: at most 2**24 taps)."""
    zeroed = np.where(present, array, np.zeros((), array.dtype))
    sums = prepared(zeroed, None)
    indicator = engine.prepare(spec, present.shape, np.dtype(np.float32), layout)
    counts = indicator(present.astype(np.float32), None).astype(np.float64)
    counts *= divisor
    np.rint(counts, out=counts)
    np.copyto(counts, 0.0, where=counts != counts)  # a window with no tap inside: 0 / 0
    missing = inside - counts
    # in place, the arrays the output's size (what this costs over the two pools)
    scale = divisor - missing
    np.maximum(scale, 1, out=scale)
    np.divide(divisor, scale, out=scale)
    scale *= sums
    means = np.where(missing == 0, sums, round_to(scale, array.dtype))
    return means, counts


def _tap_counts(spec: PoolSpec, shape: tuple[int, ...], layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Per output window, shaped to broadcast against the output: its taps inside the input, and
    its divisor (docs/semantics.md 4.1 and 4.2); windows are boxes, so both are products over the
    axes (1.2)."""
    axes = resolve(spec, spatial_shape_of(shape, layout))
    inside = np.ones((), np.float64)
    divisor = np.ones((), np.float64)
    for g in axes:
        taps = np.arange(g.out)[:, None] * g.stride - g.pad_begin + np.arange(g.kernel)[None, :] * g.dilation
        valid = ((taps >= 0) & (taps < g.length)).sum(axis=1)
        padded = ((taps >= -g.pad_begin) & (taps < g.length + g.pad_end)).sum(axis=1)
        counted = padded if spec.divisor is Divisor.PADDED_TAPS else valid
        inside = np.multiply.outer(inside, valid)
        divisor = np.multiply.outer(divisor, counted)
    spatial = (1, 1, *inside.shape) if layout is Layout.NCX else (1, *inside.shape, 1)
    return inside.reshape(spatial), divisor.reshape(spatial)


def _validated_call(
    x: Any,
    out: Any,
    key: tuple | None,
    kernel_shape: Any,
    strides: Any,
    pads: Any,
    dilations: Any,
    auto_pad: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    opset: Any,
    layout: Any,
) -> np.ndarray:
    """A call not remembered: validated, its pool prepared (:func:`avgpool._core.engine.prepare`), and
    remembered under ``key`` when it has one and ``x`` is used as it is."""
    version = op_version(opset)
    label = operator_label(version)
    args = (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)
    with error_context(label):
        array, spec, layout_ = validated_call_arguments(x, version, args)
        prepared = engine.prepare(spec, array.shape, array.dtype, layout_)
        _MEMO.keep(key, x, array, args, (prepared, label))
        return prepared(array, out)


#: The calls of :func:`average_pool` validated before: (prepared pool, operator label) each.
_MEMO = CallMemo(
    ("kernel_shape", "strides", "pads", "dilations"),
    ("auto_pad", "ceil_mode", "count_include_pad", "opset", "layout"),
    optional=("strides", "pads", "dilations"),
    defaults={"auto_pad": _NOTSET, "ceil_mode": False, "count_include_pad": False, "opset": _OPSET, "layout": _NCX},
)
_recall = _MEMO.recall
_ndarray = np.ndarray


class AveragePool:
    """ONNX AveragePool with its attributes fixed: validated per input shape once, then each call
    costs the kernel and a few checks (the counterpart of an onnxruntime session with IOBinding).

    >>> import numpy as np, avgpool
    >>> pool = avgpool.AveragePool([2, 2], strides=[2, 2])
    >>> pool(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    array([[[[ 2.5,  4.5],
             [10.5, 12.5]]]], dtype=float32)

    ``skipna`` and ``min_count`` mean what they mean in :func:`average_pool`, and a masked input
    gives a masked result (docs/semantics.md 1.6); such calls take :func:`average_pool`'s own path
    for missing values (``tests/test_skipna.py`` compares the two bit for bit).

    >>> avgpool.AveragePool([2], skipna=True)(np.array([[[np.nan, 1.0, 3.0]]]))
    array([[[1., 2.]]])
    """

    def __init__(
        self,
        kernel_shape: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        auto_pad: str = "NOTSET",
        ceil_mode: bool | int = False,
        count_include_pad: bool | int = False,
        dilations: Sequence[int] | None = None,
        opset: int = 22,
        layout: str = "NCX",
        skipna: bool = False,
        min_count: int = _ONE,
    ) -> None:
        self._attributes = dict(
            kernel_shape=kept(kernel_shape),
            strides=kept(strides),
            pads=kept(pads),
            auto_pad=auto_pad,
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            dilations=kept(dilations),
            opset=opset,
            layout=layout,
        )
        self._version = op_version(opset)
        with error_context(operator_label(self._version)):
            check_missing_options(skipna, min_count)
        #: with skipna (or a masked input) a call takes average_pool's missing-value path,
        #: :meth:`_missing_call`; min_count changes nothing otherwise (semantics 1.6)
        self._skipna, self._min_count = bool(skipna), int(min_count)
        # per (shape, dtype), bounded by count and bytes like the function's memo, so that a pool
        # fed thousands of shapes keeps only the latest; but the latest is always kept, however
        # large its tables (its caller holds the pool to call it again)
        self._prepared = Memo(512, caches.held_bytes, caches.CACHE_BYTES, entry_bytes=sys.maxsize)
        # with skipna a call never finds a prepared pool: the first test of the call's path costs
        # nothing more where no value can be missing (benchmarks/call_overhead.py)
        self._find = _never_found if self._skipna else self._prepared.find

    def __call__(self, x: Any, out: np.ndarray | None = None) -> np.ndarray:
        if type(x) is _ndarray:
            found = self._find((x.shape, x.dtype))
            if found is not None:  # this exact shape and dtype were validated before
                prepared = found[0]
                try:
                    return prepared(x, out)
                except AvgPoolError as err:  # only `out` can be wrong here
                    raise labelled(operator_label(self._version), err) from None
        if is_foreign(x):  # a tensor: the call on its memory, a channels-last one by an NXC twin
            layout = self._attributes["layout"]
            return tensor_call(self._in_layout, operator_label(self._version), x, out, {"layout": layout}, _LAYOUTS)
        if self._skipna or is_masked(x):
            return self._missing_call(x, out)
        with error_context(operator_label(self._version)):
            array, spec, layout = _validated(x, self._version, **self._attributes)
            prepared = engine.prepare(spec, array.shape, array.dtype, layout)
            if array is x:
                self._prepared.put((array.shape, array.dtype), prepared)
            return prepared(array, out)

    def _missing_call(self, x: Any, out: Any) -> Any:
        """A call where values can be missing: :func:`_with_missing_values` with this pool's
        attributes, the one implementation of docs/semantics.md 1.6."""
        a = self._attributes
        names = ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode", "count_include_pad")
        args = (*(a[n] for n in names), a["opset"], a["layout"])
        return _with_missing_values(x, out, self._skipna, self._min_count, *args)

    def _in_layout(self, x: np.ndarray, out: Any, layout: Any) -> np.ndarray:
        """This pool, or its twin of the other layout (a channels-last tensor given to an NCX pool)."""
        if layout == self._attributes["layout"]:
            return self(x, out)
        twin = self.__dict__.get("_twin")
        if twin is None:
            twin = AveragePool(**{**self._attributes, "layout": layout}, skipna=self._skipna, min_count=self._min_count)
            self._twin = twin
        return twin(x, out)


def _never_found(key: Any) -> None:
    """The memo lookup of a pool with ``skipna``: its calls all take the missing-value path."""
    return None


#: How a tensor call names average_pool's layouts (argument, channels first, channels last).
_LAYOUTS = ("layout", "NCX", "NXC")


def validated_call_arguments(x: Any, version: int, args: tuple) -> tuple[np.ndarray, PoolSpec, Layout]:
    """:func:`_validated` of ``average_pool``'s arguments after ``x`` in its order: ``(kernel_shape,
    strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout)``."""
    kernel_shape, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset, layout = args
    return _validated(
        x,
        version,
        kernel_shape=kernel_shape,
        strides=strides,
        pads=pads,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        dilations=dilations,
        opset=opset,
        layout=layout,
    )


def _validated(
    x: Any,
    version: int,
    *,
    kernel_shape,
    strides,
    pads,
    auto_pad,
    ceil_mode,
    count_include_pad,
    dilations,
    opset,
    layout,
):
    allowed, allowed_text = dtypes(version)
    array = as_input_array(x, allowed, allowed_text, min_rank=3)
    spec = make_spec(
        version,
        array.shape,
        kernel_shape,
        strides=strides,
        pads=pads,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        dilations=dilations,
    )
    return array, spec, parse_layout(layout)


def output_shape(
    input_shape: Sequence[int],
    kernel_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool | int = False,
    dilations: Sequence[int] | None = None,
    opset: int = 22,
    layout: str = "NCX",
) -> tuple[int, ...]:
    """The output shape of ONNX AveragePool for an input shape, without data.

    >>> import avgpool
    >>> avgpool.output_shape((1, 1, 4, 4), [3, 3], strides=[2, 2], ceil_mode=True)
    (1, 1, 2, 2)
    >>> avgpool.output_shape((1, 1, 2, 2), [3, 3], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=True)
    (1, 1, 1, 1)
    """
    version = op_version(opset)
    with error_context(operator_label(version)):
        shape = _as_shape(input_shape)
        layout_ = parse_layout(layout)
        spec = make_spec(
            version,
            shape,
            kernel_shape,
            strides=strides,
            pads=pads,
            auto_pad=auto_pad,
            ceil_mode=ceil_mode,
            dilations=dilations,
        )
        return infer_output_shape(spec, shape, layout_)


def _as_shape(input_shape: Any) -> tuple[int, ...]:
    shape = as_input_shape(input_shape)
    if len(shape) < 3:
        raise AvgPoolError(f"`input_shape` is {shape}: it needs at least 3 sizes (N x C x D1 ...)")
    return shape


#: The opsets at which AveragePool changed; any other opset means the latest at or below it.
VERSIONS = (1, 7, 10, 11, 19, 22)
#: The newest opset checked to still use AveragePool-22 (onnx 1.23).
NEWEST_KNOWN_OPSET = 28

_AUTO_PAD = {
    "NOTSET": PadMode.EXPLICIT,
    "SAME_UPPER": PadMode.SAME_UPPER,
    "SAME_LOWER": PadMode.SAME_LOWER,
    "VALID": PadMode.VALID,
}
_FLOAT_TYPES = FloatDtypes("float16", "float32", "float64")
_FLOAT_TYPES_22 = FloatDtypes("float16", "float32", "float64", "bfloat16")


def op_version(opset: Any) -> int:
    """The AveragePool version an opset uses (opset 13 -> 11)."""
    valid = isinstance(opset, (int, np.integer)) and not isinstance(opset, (bool, np.bool_))
    if not valid or not 1 <= int(opset) <= NEWEST_KNOWN_OPSET:
        raise AvgPoolError(f"AveragePool: `opset` is {opset!r}: it must be an integer from 1 to {NEWEST_KNOWN_OPSET}")
    opset = int(opset)
    return max(v for v in VERSIONS if v <= opset)


def operator_label(version: int) -> str:
    return f"AveragePool-{version}"


def dtypes(version: int) -> tuple[FloatDtypes, str]:
    """The input dtypes of a version, and how to say them."""
    if version >= 22:
        return _FLOAT_TYPES_22, "float16, float32, float64 or bfloat16"
    return _FLOAT_TYPES, f"float16, float32 or float64 (bfloat16 needs opset 22, this is opset {version}'s AveragePool)"


def parse_layout(layout: Any) -> Layout:
    if isinstance(layout, Layout):
        return layout
    return Layout(as_choice("layout", layout, ("NCX", "NXC")))


def auto_pad_name(auto_pad: Any) -> str:
    """auto_pad in ONNX's spelling, validated. The empty string is NOTSET: onnxruntime, OpenVINO
    and onnx.reference accept it, and exported models write the default that way (semantics 3.5)."""
    if isinstance(auto_pad, str) and auto_pad == "":
        return "NOTSET"
    return as_choice("auto_pad", auto_pad, tuple(_AUTO_PAD))


def _absent_before(name: str, since: int, version: int) -> AvgPoolError:
    return AvgPoolError(
        f"`{name}` does not exist before AveragePool-{since} (opset {since}); this is AveragePool-{version}"
    )


def make_spec(
    version: int,
    input_shape: tuple[int, ...],
    kernel_shape: Any,
    *,
    strides: Any = None,
    pads: Any = None,
    auto_pad: Any = "NOTSET",
    ceil_mode: Any = False,
    count_include_pad: Any = False,
    dilations: Any = None,
) -> PoolSpec:
    """Validate ONNX attributes for an input shape and translate them."""
    n = len(input_shape) - 2
    axes_text = spatial_axes_text(input_shape)
    kernel = as_int_tuple("kernel_shape", kernel_shape, n, axes_text, minimum=1)
    strides_ = (1,) * n if strides is None else as_int_tuple("strides", strides, n, axes_text, minimum=1)
    if dilations is not None and version < 19:
        raise _absent_before("dilations", 19, version)
    dilations_ = (1,) * n if dilations is None else as_int_tuple("dilations", dilations, n, axes_text, minimum=1)
    check_dilated_extents("kernel_shape", kernel, dilations_)
    flat_pads = (
        (0,) * (2 * n)
        if pads is None
        else as_int_tuple(
            "pads", pads, 2 * n, f"{axes_text} (pads need 2 values per axis: all begins, then all ends)", minimum=0
        )
    )
    mode = _AUTO_PAD[auto_pad_name(auto_pad)]
    if mode is not PadMode.EXPLICIT and any(flat_pads):
        raise AvgPoolError(
            f"`pads` is {flat_pads} with `auto_pad` {auto_pad!r}: explicit pads cannot be used with auto_pad"
        )
    ceil = as_flag("ceil_mode", ceil_mode)
    if ceil and version < 10:
        raise _absent_before("ceil_mode", 10, version)
    include_pad = as_flag("count_include_pad", count_include_pad)
    if include_pad and version < 7:
        raise _absent_before("count_include_pad", 7, version)
    # SAME gives ceil(L / s) outputs whatever ceil_mode says (semantics 3.1): floor after the pads.
    rounding = Rounding.CEIL_DROP if ceil and mode not in (PadMode.SAME_UPPER, PadMode.SAME_LOWER) else Rounding.FLOOR
    return PoolSpec(
        kernel=kernel,
        strides=strides_,
        dilations=dilations_,
        pads=tuple(zip(flat_pads[:n], flat_pads[n:])),
        pad_mode=mode,
        rounding=rounding,
        divisor=Divisor.PADDED_TAPS if include_pad else Divisor.VALID_TAPS,
    )
