"""PyTorch's average pooling, in one place: ``avg_pool1d/2d/3d`` and ``adaptive_avg_pool1d/2d/3d``
with torch's signatures, shapes, ceil rule, divisor rules and refusals, on torch tensors (CPU, any
float dtype, contiguous or channels-last, with gradients) and numpy arrays alike.

torch's rules, as its CPU kernels apply them (aten/src/ATen/native/Pool.h, AveragePool2d.cpp,
AdaptiveAveragePooling.cpp):

- output length ``(L + 2p - k + (s - 1 if ceil_mode)) // s + 1``, and with ``ceil_mode`` a last
  window that would start in the end padding is dropped: the engine's ``Rounding.CEIL_DROP``;
- ``count_include_pad`` divides by the taps inside ``[-p, L + p)`` (a ceil window hanging past
  the end padding counts only the padding), the engine's ``Divisor.PADDED_TAPS``; otherwise by
  the taps inside the input; ``divisor_override`` replaces the divisor by one number;
- padding at most half the kernel, a window within the padded input, positive sizes;
- adaptive window ``i`` of ``O`` over ``L`` covers ``[floor(i L / O), ceil((i + 1) L / O))``.

Sums are float64 and rounded once to the input's dtype (avgpool's contract): torch sums float32
in float32 and float16/bfloat16 in float32, so its results are within its accumulation's error
of these. Where ``O`` divides ``L`` the adaptive windows are the pool of kernel = stride = ``L / O``
and are computed as :func:`avgpool.average_pool` computes it, bit for bit; other adaptive
windows go by per-window tables (:mod:`avgpool._core.adaptive`).

Gradients: with a tensor that requires grad, the result has a ``grad_fn`` whose backward is the
exact adjoint, computed by avgpool's kernels (:func:`_adjoint`), never by torch's pooling; the
adjoint's own backward is the forward pool, so double backward works too.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core import adaptive, adjoint, engine
from .._core.outputs import check_output_fits, dtype_name
from .._core.pools import PreparedPool
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError, AvgPoolTypeError, labelled
from . import _tensors
from ._args import MAX_ATTRIBUTE_VALUE
from ._dtypes import FloatDtypes
from .block_mean import round_to

_FLOATS = FloatDtypes("float16", "float32", "float64", "bfloat16")
_FLOATS_TEXT = "float16, float32, float64 or bfloat16"
#: torch's dtypes that Tensor.numpy() reads as they are (filled on the first tensor: torch's own objects)
_TORCH_NATIVE: frozenset = frozenset()


# ------------------------------------------------------------------------------ the functions


def avg_pool1d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Any:
    """``torch.nn.functional.avg_pool1d``, exactly: ``input`` is C x L or N x C x L.

    >>> import numpy as np, avgpool.torch
    >>> x = np.arange(1.0, 6.0).reshape(1, 5)  # C x L
    >>> avgpool.torch.avg_pool1d(x, 3, stride=2, padding=1)
    array([[1., 3., 3.]])
    >>> avgpool.torch.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=False)
    array([[1.5, 3. , 4.5]])
    """
    return _pool(1, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Any:
    """``torch.nn.functional.avg_pool2d``, exactly: ``input`` is C x H x W or N x C x H x W.

    >>> import numpy as np, avgpool.torch
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> avgpool.torch.avg_pool2d(x, 2, divisor_override=3)
    array([[[[ 3.3333333,  6.       ],
             [14.       , 16.666666 ]]]], dtype=float32)
    """
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _pool(2, "avg_pool2d", input, *args)


def avg_pool3d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Any:
    """``torch.nn.functional.avg_pool3d``, exactly: ``input`` is C x D x H x W or N x C x D x H x W
    (float16 and bfloat16 too, which torch's CPU build refuses here)."""
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _pool(3, "avg_pool3d", input, *args)


def adaptive_avg_pool1d(input: Any, output_size: Any) -> Any:
    """``torch.nn.functional.adaptive_avg_pool1d``: window ``i`` of ``O`` covers
    ``[floor(i L / O), ceil((i + 1) L / O))``.

    >>> import numpy as np, avgpool.torch
    >>> avgpool.torch.adaptive_avg_pool1d(np.arange(5.0).reshape(1, 5), 3)
    array([[0.5, 2. , 3.5]])
    """
    return _adaptive(1, "adaptive_avg_pool1d", input, output_size)


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Any:
    """``torch.nn.functional.adaptive_avg_pool2d``; a ``None`` entry of ``output_size`` keeps
    that axis's size."""
    return _adaptive(2, "adaptive_avg_pool2d", input, output_size)


def adaptive_avg_pool3d(input: Any, output_size: Any) -> Any:
    """``torch.nn.functional.adaptive_avg_pool3d``; a ``None`` entry of ``output_size`` keeps
    that axis's size."""
    return _adaptive(3, "adaptive_avg_pool3d", input, output_size)


# ------------------------------------------------------------------------------ the arguments


def _as_int(value: Any) -> int | None:
    """``value`` as torch reads an int argument, or None: a Python or numpy int, or any object
    with ``__index__`` (a one-element integer tensor, as torch takes it), never a bool (nor a
    bool tensor) or a float."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or "bool" in str(getattr(value, "dtype", "")):
        return None
    if isinstance(value, (numbers.Integral, np.integer)):
        return int(value)
    if getattr(type(value), "__index__", None) is None:
        return None
    try:
        return operator.index(value)
    except TypeError:  # a float tensor or a many-element array: not an int
        return None


def _in_range(name: str, values: tuple[Any, ...], shown: Any) -> None:
    if any(v is not None and abs(v) > MAX_ATTRIBUTE_VALUE for v in values):
        raise AvgPoolError(f"`{name}` is {shown!r}: every value must be at most {MAX_ATTRIBUTE_VALUE} in size")


def _sizes(name: str, value: Any, n: int, *, exact: bool = False, none: bool = False) -> tuple[Any, ...]:
    """An int or a sequence of 1 (unless ``exact``) or ``n`` ints (``None`` entries where
    ``none``), as torch reads ``kernel_size``, ``stride``, ``padding`` and ``output_size``.

    A value of the wrong Python type (a str, float, bool, None, dict or set; a float among the
    entries) is an AvgPoolTypeError, as torch's is a TypeError (tests/test_torch.py
    BAD_TYPES); a wrong count or a value beyond MAX_ATTRIBUTE_VALUE an AvgPoolError."""
    single = _as_int(value)
    if single is not None:
        _in_range(name, (single,), value)
        return (single,) * n
    text = f"an int or a tuple of {'ints or None' if none else 'ints'}"
    sequence = isinstance(value, Sequence) and not isinstance(value, (str, bytes))
    if not sequence and getattr(value, "ndim", None) != 1:  # a 1-D numpy array or tensor of ints is read too
        raise AvgPoolTypeError(f"`{name}` must be {text}, got {value!r} ({type(value).__name__})")
    items = tuple(None if none and v is None else _as_int(v) for v in value)
    for v, item in zip(value, items):
        if item is None and not (none and v is None):
            raise AvgPoolTypeError(
                f"`{name}` must be {text}, got {value!r} "
                f"(a {type(value).__name__} with an entry of type {type(v).__name__})"
            )
    _in_range(name, items, value)
    if len(items) == n or (len(items) == 1 and not exact):
        return items * (n // len(items))
    counts = "one int" if n == 1 else f"a single int or a tuple of {n} ints"
    raise AvgPoolError(f"`{name}` is {value!r}: it must be {counts}")


def _flag(name: str, value: Any) -> bool:
    """A bool argument: a Python or numpy bool (torch takes Python bools only); anything else, 0
    and 1 too, is an AvgPoolTypeError, as torch's is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise AvgPoolTypeError(f"`{name}` must be a bool, got {value!r} ({type(value).__name__})")
    return bool(value)


def _divisor(value: Any) -> int | None:
    """``divisor_override``: None or a non-zero int (negative allowed, as torch allows it)."""
    if value is None:
        return None
    divisor = _as_int(value)
    if divisor is None:
        raise AvgPoolTypeError(f"`divisor_override` must be an int or None, got {value!r} ({type(value).__name__})")
    if divisor == 0:
        raise AvgPoolError("`divisor_override` is 0: the divisor must not be zero")
    _in_range("divisor_override", (divisor,), value)
    return divisor


def _check_rank(name: str, shape: tuple[int, ...], n: int, adaptive_: bool) -> None:
    if len(shape) not in (n + 1, n + 2):
        raise AvgPoolError(
            f"the input has shape {shape}: it must have {n + 1} (unbatched) or {n + 2} (batched) dimensions"
        )
    must = shape[-n:] if adaptive_ else shape[-n - 1 :]  # the batch may be empty; adaptive pools take C = 0
    if 0 in must:
        which = "spatial" if adaptive_ else "non-batch"
        raise AvgPoolError(f"the input has shape {shape}: its {which} dimensions must not be empty")


def _input(x: Any, n: int) -> tuple[Any, np.ndarray, Any, bool]:
    """(the original input, the numpy array batched, the function back to the input's kind,
    whether it was unbatched)."""
    torch = sys.modules.get("torch")
    if torch is not None and type(x) is torch.Tensor and x.is_cpu and x.dtype in (_TORCH_NATIVE or _native(torch)):
        array, back = x.detach().numpy() if x.requires_grad else x.numpy(), _tensors.to_torch
    elif type(x) is np.ndarray:
        array, back = x, None
    elif _tensors.is_foreign(x):
        array, back = _tensors.as_numpy(x, grad=True)
    else:
        if not (hasattr(x, "__array__") or hasattr(x, "__array_interface__")):  # a list, a number, None
            raise AvgPoolTypeError(
                f"`input` must be a torch.Tensor or an array (numpy, or with __dlpack__), got {type(x).__name__}"
            )
        _tensors_refuse_masked(x)
        try:
            array = np.asarray(x)
        except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
            raise AvgPoolError(f"the input cannot be read as an array: {err}") from None
        back = None
    if array.dtype not in _FLOATS:
        if array.dtype.newbyteorder("=") not in _FLOATS:
            kind = "an integer" if array.dtype.kind in "iub" else f"a {dtype_name(array.dtype)}"
            raise AvgPoolError(
                f"the input is {kind} array (dtype {dtype_name(array.dtype)}): it must be {_FLOATS_TEXT}"
                + (" (torch's integer division is not an average)" if array.dtype.kind in "iub" else "")
            )
        array = array.astype(array.dtype.newbyteorder("="))
    return x, array, back, array.ndim == n + 1


def _native(torch: Any) -> frozenset:
    global _TORCH_NATIVE
    _TORCH_NATIVE = frozenset((torch.float16, torch.float32, torch.float64))
    return _TORCH_NATIVE


def _tensors_refuse_masked(x: Any) -> None:
    from ._args import refuse_masked

    refuse_masked(x, "the input")


def _layout(array: np.ndarray) -> tuple[np.ndarray, Layout]:
    """A batched array in channels-last memory is pooled as the channels-last array it is."""
    if _tensors.channels_last(array):
        return array.transpose(_tensors.TO_LAST[array.ndim]), Layout.NXC
    return array, Layout.NCX


# ------------------------------------------------------------------------------ the plans


@dataclass(frozen=True, eq=False)
class Plan:
    """One call's pools: the forward pool of the input and the adjoint pool of its gradient,
    with the divisors the adjoint divides by first (None: one divisor, in the adjoint's scales)."""

    forward: PreparedPool
    adjoint_axes: tuple[adaptive.AxisWindows, ...]
    divisors: tuple[np.ndarray, ...] | None  # per-axis divisors of the forward windows, or None
    in_shape: tuple[int, ...]  # the input's shape as the pools see it (layout applied)
    layout: Layout
    # where every input position lies in at most one window: per axis, each position's window
    # (index into the outputs) and whether it has one; and each window's divisor factor per axis
    gathers: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None
    window_divisors: tuple[np.ndarray, ...] = ()

    @functools.cached_property
    def adjoint(self) -> PreparedPool:
        dtype = np.float64 if self.divisors is not None else self.forward.dtype
        return adaptive.prepare_windows(self.adjoint_axes, self.forward.out_shape, np.dtype(dtype), self.layout)

    @functools.cached_property
    def adjoint_sum(self) -> PreparedPool:
        """The adjoint's windows with divisor 1 in float64: each input position's plain sum."""
        ones = tuple(adaptive.AxisWindows(w.length, w.first, w.count, (1.0,) * w.out) for w in self.adjoint_axes)
        return adaptive.prepare_windows(ones, self.forward.out_shape, np.dtype(np.float64), self.layout)


def _out_length(length: int, k: int, s: int, p: int, ceil: bool) -> int:
    out = (length + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and out > 0 and (out - 1) * s >= length + p:
        out -= 1
    return out


@functools.lru_cache(maxsize=512)
def _pool_plan(
    n: int,
    shape: tuple[int, ...],
    dtype: np.dtype,
    layout: Layout,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    ceil: bool,
    include_pad: bool,
    override: int | None,
) -> Plan:
    spatial = shape[2:] if layout is Layout.NCX else shape[1:-1]
    for name, values in (("kernel_size", kernel), ("stride", stride)):
        if any(v <= 0 for v in values):
            raise AvgPoolError(f"`{name}` is {values}: every value must be positive")
    if any(p < 0 for p in padding):
        raise AvgPoolError(f"`padding` is {padding}: every value must be non-negative")
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise AvgPoolError(
                f"`padding` {padding} with `kernel_size` {kernel}: padding must be at most half the kernel"
            )
    if n == 3 and any(k > L for k, L in zip(kernel, spatial)):  # torch's avg_pool3d: the unpadded input
        raise AvgPoolError(
            f"`kernel_size` {kernel} is larger than the input's spatial shape {spatial} (avg_pool3d checks the "
            "kernel against the input without its padding)"
        )
    outs = tuple(_out_length(L, k, s, p, ceil) for L, k, s, p in zip(spatial, kernel, stride, padding))
    if min(outs) < 1:
        raise AvgPoolError(
            f"`kernel_size` {kernel} with `padding` {padding} on the spatial shape {spatial} gives the output "
            f"{outs}: the kernel must fit in the padded input"
        )
    spec = PoolSpec(
        kernel=kernel,
        strides=stride,
        dilations=(1,) * n,
        pads=tuple((p, p) for p in padding),
        pad_mode=PadMode.EXPLICIT,
        rounding=Rounding.CEIL_DROP if ceil else Rounding.FLOOR,
        divisor=Divisor.PADDED_TAPS if include_pad else Divisor.VALID_TAPS,
    )
    if override is None:
        forward = engine.prepare(spec, shape, dtype, layout)
    else:
        forward = adaptive.prepare_with_divisor(spec, shape, dtype, layout, override)
    axes = adaptive.plan_axes(spec, spatial)
    divisors = None if override is not None else tuple(np.asarray(w.divisor) for w in axes)
    return _plan(forward, axes, divisors, override, shape, layout)


def _plan(
    forward: PreparedPool,
    axes: tuple[adaptive.AxisWindows, ...],
    divisors: tuple[np.ndarray, ...] | None,
    override: int | None,
    shape: tuple[int, ...],
    layout: Layout,
) -> Plan:
    """The plan of a forward pool and its windows: the adjoint's windows, each input position's
    windows, divided by one divisor in the adjoint's own scales where every window has it (the
    adjoint then pools the gradient as it is), else by each window's divisor first."""
    adjoint_axes = [adaptive.adjoint_axis(w) for w in axes]
    gathers = None
    if all(max(w.count, default=0) <= 1 for w in adjoint_axes):
        gathers = tuple((np.asarray(w.first, np.intp), np.asarray(w.count) > 0) for w in adjoint_axes)
    if override is not None:
        window_divisors = tuple(
            np.full(w.out, float(override) if a == len(axes) - 1 else 1.0) for a, w in enumerate(axes)
        )
    else:
        window_divisors = tuple(np.asarray(w.divisor, np.float64) for w in axes)
    uniform = override if override is not None else None
    if divisors is not None and all(np.all(d == d[0]) for d in divisors if d.size):
        uniform = math.prod(float(d[0]) for d in divisors if d.size)
    if uniform is not None:
        last = adjoint_axes[-1]
        adjoint_axes[-1] = adaptive.AxisWindows(last.length, last.first, last.count, (float(uniform),) * last.out)
        divisors = None
    return Plan(forward, tuple(adjoint_axes), divisors, shape, layout, gathers, window_divisors)


@functools.lru_cache(maxsize=512)
def _adaptive_plan(n: int, shape: tuple[int, ...], dtype: np.dtype, layout: Layout, outs: tuple[int, ...]) -> Plan:
    spatial = shape[2:] if layout is Layout.NCX else shape[1:-1]
    forward = adaptive.prepare_adaptive(shape, dtype, layout, outs)
    spec = adaptive.adaptive_spec(spatial, outs)
    if spec is not None:
        axes = adaptive.plan_axes(spec, spatial)
    else:
        axes = tuple(adaptive.adaptive_axis(L, o) for L, o in zip(spatial, outs))
    divisors = tuple(np.asarray(w.divisor) for w in axes)
    return _plan(forward, axes, divisors, None, shape, layout)


# ------------------------------------------------------------------------------ the calls


def _plain(values: tuple) -> bool:
    """Whether the arguments can key the call memo: None, bools, ints and tuples of ints (a list
    cannot be hashed; a float or a bool among sizes must be refused, not found equal to an int)."""
    for v in values:
        kind = type(v)
        if kind is tuple:
            if not all(type(e) is int for e in v):
                return False
        elif not (v is None or kind is int or kind is bool):
            return False
    return True


#: Calls validated before (by input shape, strides, dtype and arguments with their types): the
#: plan, so that a repeated call costs its pool and a few microseconds (the arguments' checks
#: cost ~6 us of a 1x1x4x4 call). Cleared when it holds _CALLS_HELD calls.
_CALLS: dict[tuple, Plan] = {}
_CALLS_HELD = 1024


def _remember(key: tuple | None, plan: Plan) -> None:
    if key is not None:
        if len(_CALLS) >= _CALLS_HELD:
            _CALLS.clear()
        _CALLS[key] = plan


def _pooled(plan: Plan, array: np.ndarray, unbatched: bool) -> np.ndarray:
    batched = array[None] if unbatched else array
    return batched.transpose(_tensors.TO_LAST[batched.ndim]) if plan.layout is Layout.NXC else batched


def _pool(
    n: int,
    name: str,
    input: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
) -> Any:
    try:
        return _pool_call(n, name, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    except AvgPoolError as err:
        raise labelled(name, err) from None


def _pool_call(
    n: int,
    name: str,
    input: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: Any,
    count_include_pad: Any,
    divisor_override: Any,
) -> Any:
    x, array, back, unbatched = _input(input, n)
    arguments = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    key = None
    if _plain(arguments):
        key = (name, array.shape, array.strides, array.dtype, *arguments, *map(type, arguments))
        plan = _CALLS.get(key)
        if plan is not None:
            return _run(plan, x, _pooled(plan, array, unbatched), back, unbatched)
    _check_rank(name, array.shape, n, False)
    kernel = _sizes("kernel_size", kernel_size, n, exact=n == 1)
    empty_stride = stride is None or (hasattr(stride, "__len__") and len(stride) == 0)
    strides = kernel if empty_stride else _sizes("stride", stride, n, exact=n == 1)
    pads = _sizes("padding", padding, n, exact=n == 1)
    ceil = _flag("ceil_mode", ceil_mode)
    include_pad = _flag("count_include_pad", count_include_pad)
    divisor_override = _divisor(divisor_override)
    batched = array[None] if unbatched else array
    pooled, layout = _layout(batched)
    plan = _pool_plan(n, pooled.shape, pooled.dtype, layout, kernel, strides, pads, ceil, include_pad, divisor_override)
    _remember(key, plan)
    return _run(plan, x, pooled, back, unbatched)


def _adaptive(n: int, name: str, input: Any, output_size: Any) -> Any:
    try:
        return _adaptive_call(n, name, input, output_size)
    except AvgPoolError as err:
        raise labelled(name, err) from None


def _adaptive_call(n: int, name: str, input: Any, output_size: Any) -> Any:
    x, array, back, unbatched = _input(input, n)
    key = None
    if _plain((output_size,)):
        key = (name, array.shape, array.strides, array.dtype, output_size, type(output_size))
        plan = _CALLS.get(key)
        if plan is not None:
            return _run(plan, x, _pooled(plan, array, unbatched), back, unbatched)
    _check_rank(name, array.shape, n, True)
    sizes = _sizes("output_size", output_size, n, exact=n == 1, none=n > 1)
    spatial = array.shape[-n:]
    outs = tuple(L if o is None else o for L, o in zip(spatial, sizes))
    if any(o < 0 for o in outs):
        raise AvgPoolError(f"`output_size` is {output_size!r}: every size must be >= 0")
    # before any window is listed: an output_size in the billions is refused, not built (its
    # windows are Python tuples, ~200 bytes per output along each axis); test_bad_values
    check_output_fits(array.shape[:-n] + outs, array.dtype, array.shape, table_bytes=200, check="`output_size`")
    batched = array[None] if unbatched else array
    pooled, layout = _layout(batched)
    plan = _adaptive_plan(n, pooled.shape, pooled.dtype, layout, outs)
    _remember(key, plan)
    return _run(plan, x, pooled, back, unbatched)


def _run(plan: Plan, x: Any, pooled: np.ndarray, back: Any, unbatched: bool) -> Any:
    if back is not None and getattr(x, "requires_grad", False):
        import torch

        if torch.is_grad_enabled():
            return _autograd().forward_function.apply(x, plan, unbatched)
    result = _finish(plan, plan.forward(pooled), unbatched)
    return result if back is None else back(result)


def _finish(plan: Plan, result: np.ndarray, unbatched: bool) -> np.ndarray:
    if plan.layout is Layout.NXC:
        result = result.transpose(_tensors.TO_FIRST[result.ndim])
    return result[0] if unbatched else result


def _as_pooled(plan: Plan, array: np.ndarray, unbatched: bool) -> np.ndarray:
    """An array of the caller's shape (batched or not, channels first) as the plan's pools see it."""
    return _pooled(plan, array, unbatched)


def _adjoint(plan: Plan, grad: np.ndarray) -> np.ndarray:
    """The exact adjoint of the forward pool on ``grad`` (shaped as the forward's output, as the
    pools see it): each input position receives the sum of ``grad / divisor`` over the windows
    that hold it. float64 gradients go by :mod:`.._core.adjoint` (double-double sums: float64
    sums of float64 terms lose ulps where they cancel). Other dtypes: with one divisor for every
    window, the adjoint pool sums ``grad`` and divides once (float64 sums, one rounding);
    otherwise ``grad`` is divided by each window's divisor in float64 first and those quotients
    are summed in float64 and rounded once to the dtype."""
    if plan.gathers is not None:  # each input position in at most one window: a gather
        return _gathered(plan, grad)
    if plan.forward.dtype == np.float64:  # float64 sums in the kernels lose ulps where terms cancel
        spatial_axes = plan.layout.spatial_axes(grad.ndim)
        terms = math.prod(max(w.count, default=0) for w in plan.adjoint_axes)
        grad = np.ascontiguousarray(grad)
        result = adjoint.split_adjoint(grad, plan.adjoint_sum, plan.window_divisors, spatial_axes, terms)
        if result is None:  # a scale beyond float64's range, or results too small for the split's error
            result = adjoint.exact_adjoint(grad, plan.adjoint_axes, plan.window_divisors, spatial_axes)
        return result
    if plan.divisors is None:
        return plan.adjoint(np.ascontiguousarray(grad))
    divisor = plan.divisors[0]
    for d in plan.divisors[1:]:
        divisor = np.multiply.outer(divisor, d)
    shape = (1, 1, *divisor.shape) if plan.layout is Layout.NCX else (1, *divisor.shape, 1)
    scaled = np.ascontiguousarray(grad, dtype=np.float64) / divisor.reshape(shape)
    return round_to(plan.adjoint(scaled), plan.forward.dtype)


def _with_ones(shape: tuple[int, ...], spatial_axes: tuple[int, ...]) -> list[int]:
    """``shape`` with a 1 after each spatial axis (the axes a tile's copies broadcast along)."""
    out = []
    for axis, size in enumerate(shape):
        out.append(size)
        if axis in spatial_axes:
            out.append(1)
    return out


def _gathered(plan: Plan, grad: np.ndarray) -> np.ndarray:
    """The adjoint where every input position lies in at most one window (kernel <= stride: most
    adaptive pools, 2x2 s2): each position receives its window's ``grad / divisor``, one
    quotient rounded once (float64 division, then to the dtype), gathered axis by axis, and 0
    where it is in no window."""
    spatial_axes = plan.layout.spatial_axes(grad.ndim)
    divisor = np.ones((), np.float64)
    for axis_windows in plan.window_divisors:
        divisor = np.multiply.outer(divisor, axis_windows)
    shape = [1] * grad.ndim
    for array_axis, length in zip(spatial_axes, divisor.shape):
        shape[array_axis] = length
    quotients = round_to(grad.astype(np.float64) / divisor.reshape(shape), plan.forward.dtype)
    tiles = [len(index) // max(1, q) for index, q in zip((g[0] for g in plan.gathers), divisor.shape)]
    exact_tiles = all(
        t > 0 and np.array_equal(index, np.arange(index.size) // t) and inside.all()
        for t, (index, inside) in zip(tiles, plan.gathers)
    )
    if exact_tiles:  # windows that tile each axis (kernel = stride = L / O): one broadcast copy
        expanded, target = [], []
        for axis, size in enumerate(quotients.shape):
            expanded.append(size)
            target.append(size)
            if axis in spatial_axes:
                t = tiles[spatial_axes.index(axis)]
                expanded.append(t)
                target[-1] = size * t
        view = quotients.reshape(_with_ones(quotients.shape, spatial_axes))
        return np.ascontiguousarray(np.broadcast_to(view, expanded)).reshape(target)
    result = quotients
    for array_axis, (index, inside) in zip(spatial_axes, plan.gathers):
        result = np.take(result, index, axis=array_axis)
        if not inside.all():
            shape = [1] * grad.ndim
            shape[array_axis] = inside.size
            result = np.where(inside.reshape(shape), result, np.zeros((), result.dtype))
    return np.ascontiguousarray(result)


@functools.cache
def _autograd() -> Any:
    """The two torch.autograd.Functions, made on the first call with a tensor that requires grad
    (torch imported only then): the pool, whose backward is the adjoint, and the adjoint, whose
    backward is the pool (double backward)."""
    import torch

    def pooled_numpy(t: Any) -> np.ndarray:
        array, _ = _tensors.as_numpy(t, "the gradient", grad=True)
        return array

    class Pool(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, plan: Plan, unbatched: bool) -> Any:
            ctx.plan, ctx.unbatched = plan, unbatched
            result = plan.forward(_as_pooled(plan, pooled_numpy(x), unbatched))
            return _tensors.to_torch(_finish(plan, result, unbatched))

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return Adjoint.apply(grad, ctx.plan, ctx.unbatched), None, None

    class Adjoint(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, grad: Any, plan: Plan, unbatched: bool) -> Any:
            ctx.plan, ctx.unbatched = plan, unbatched
            array = pooled_numpy(grad)
            if array.dtype != plan.forward.dtype:
                raise AvgPoolError(f"the gradient has dtype {array.dtype}, the pool {plan.forward.dtype}")
            result = _adjoint(plan, _as_pooled(plan, array, unbatched))
            return _tensors.to_torch(_finish(plan, result, unbatched))

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return Pool.apply(grad, ctx.plan, ctx.unbatched), None, None

    class Functions:
        forward_function = Pool
        adjoint_function = Adjoint

    return Functions
