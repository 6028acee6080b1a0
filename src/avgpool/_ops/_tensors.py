"""Tensors in, tensors out: the one place where a ``torch.Tensor`` or another ``__dlpack__`` object
becomes a numpy array on the same memory, and the result becomes an object of the input's kind.

Every public operator sends an input that is not a numpy array here, on the path its memo
missed (``type(x) is not np.ndarray``: a numpy call never reaches this module), and calls itself
again with the array: the numpy call's validation, memo and kernels, unchanged. No copy where
the layout allows: ``Tensor.numpy()`` and ``torch.from_numpy`` share memory, bfloat16 goes as
its bit pattern (a view as int16, then as ml_dtypes.bfloat16), and a channels-last tensor is
pooled as the channels-last array it is (``layout="NXC"`` on the moved view, where the operator
has a layout argument) and given back channels-last.

torch is never imported here: a tensor is recognised through ``sys.modules`` (whoever made one
imported torch), so avgpool imports and runs without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import AvgPoolError, labelled
from ._dtypes import bfloat16, is_bfloat16

_KDLCPU = 1  # DLPack's device type of CPU memory


def is_foreign(x: Any) -> bool:
    """Whether ``x`` is an array of another library that comes back as its own type: a torch
    tensor, or any other object with ``__dlpack__`` (not a numpy array or subclass)."""
    return not isinstance(x, np.ndarray) and hasattr(type(x), "__dlpack__")


def _torch_tensor(x: Any) -> Any:
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def as_numpy(x: Any, name: str = "the input", *, grad: bool = False) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """``x`` as a numpy array on its memory, and the function that turns a result into ``x``'s
    kind. A tensor on another device than the CPU, or one that requires grad (unless ``grad``:
    avgpool.torch's own functions, which give gradients), is an AvgPoolError naming ``name``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _from_torch(torch, x, name, grad), to_torch
    return _from_dlpack(x, name)


def _from_torch(torch: Any, x: Any, name: str, grad: bool) -> np.ndarray:
    # each test here is a tenth of a microsecond or less: x.is_cpu rather than x.device.type (0.3 us)
    if not x.is_cpu:
        raise AvgPoolError(
            f"{name} is a torch tensor on {x.device}: only CPU memory is supported (move it with .cpu())"
        )
    if x.requires_grad:
        if not grad:
            raise AvgPoolError(
                f"{name} is a torch tensor that requires grad: use avgpool.torch's functions for gradients, "
                "or detach it (x.detach()) to pool its values without them"
            )
        x = x.detach()
    if x.dtype is torch.bfloat16:
        return x.view(torch.int16).numpy().view(bfloat16())
    try:
        return x.numpy()  # a conjugate or negative view (complex only) is refused here too
    except (TypeError, RuntimeError) as err:
        raise AvgPoolError(f"{name} is a torch tensor of dtype {x.dtype}, which numpy cannot read: {err}") from None


def to_torch(result: Any) -> Any:
    torch = sys.modules["torch"]  # a tensor came in: torch is imported
    if type(result) is not np.ndarray:
        return result
    if not result.flags.writeable:
        result = result.copy()  # torch.from_numpy warns about read-only memory
    if is_bfloat16(result.dtype):
        return torch.from_numpy(result.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(result)


def _from_dlpack(x: Any, name: str) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    device = getattr(x, "__dlpack_device__", None)
    if device is not None:
        try:
            kind = device()[0]
        except Exception:  # noqa: BLE001 - a device we cannot ask about is not CPU memory we know
            kind = None
        if kind != _KDLCPU:
            raise AvgPoolError(f"{name} ({type(x).__name__}) is on DLPack device {kind}: only CPU memory is supported")
    try:
        array = np.from_dlpack(x)
    except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
        array = _through_array_protocol(x)
        if array is None:
            raise AvgPoolError(f"{name} ({type(x).__name__}) cannot be read through DLPack: {err}") from None
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is None:
        return array, lambda result: result
    xp = namespace()

    def back(result: Any) -> Any:
        if not isinstance(result, np.ndarray):
            return result
        if is_bfloat16(result.dtype):  # numpy's DLPack has no bfloat16: the namespace's asarray copies it
            return xp.asarray(result)
        # numpy exports no read-only array through DLPack (it cannot say so to an old consumer)
        return xp.from_dlpack(result if result.flags.writeable else result.copy())

    return array, back


def _through_array_protocol(x: Any) -> np.ndarray | None:
    """A DLPack array of a dtype numpy's DLPack does not read (bfloat16: a jax Array) through
    ``__array__``, which jax answers with its own memory (read-only, no copy); None if that
    does not give a bfloat16 array either (tests/test_jax.py)."""
    if not hasattr(type(x), "__array__"):
        return None
    try:
        array = np.asarray(x)
    except Exception:  # noqa: BLE001 - the DLPack error is the one reported
        return None
    return array if is_bfloat16(array.dtype) else None


#: The axes of a 4-D or 5-D array with its channel axis moved last, and back.
TO_LAST = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
TO_FIRST = {4: (0, 3, 1, 2), 5: (0, 4, 1, 2, 3)}


def channels_last(x: np.ndarray) -> bool:
    """Whether ``x`` is a 4-D or 5-D array in channels-last memory (a channels-last tensor's):
    its channel axis moved last is C-contiguous, and it is not itself C-contiguous."""
    if x.ndim not in TO_LAST or x.flags.c_contiguous:
        return False
    return x.transpose(TO_LAST[x.ndim]).flags.c_contiguous


def call(
    function: Callable[..., Any],
    label: str | Callable[[], str],
    x: Any,
    out: Any,
    kwargs: dict[str, Any],
    layout: tuple[str, Any, Any] | None = None,
) -> Any:
    """``function(array, out=..., **kwargs)`` on the memory of the tensor ``x`` (and of a tensor
    ``out``), its result as ``x``'s kind. ``layout``: the function's layout keyword and its
    channels-first and channels-last values; a channels-last input with the channels-first value
    is pooled as the channels-last array it is (no copy), and its result given back
    channels-last; without ``layout`` such a result is made channels-last after (a copy of the
    output). Errors are labelled with ``label`` (or what it returns: made only for an error)."""
    moved = 0
    torch = sys.modules.get("torch")
    tensor = torch is not None and isinstance(x, torch.Tensor)
    try:
        if tensor and x.is_cpu and not x.requires_grad and x.dtype is not torch.bfloat16:
            array, back = x.numpy(), to_torch  # the common tensor, without as_numpy's calls (~0.3 us)
        else:
            array, back = as_numpy(x)
        if out is None or type(out) is np.ndarray:
            target = out
        elif tensor and type(out) is torch.Tensor and out.is_cpu and not out.requires_grad and out.dtype is x.dtype:
            target = out.numpy() if out.dtype is not torch.bfloat16 else as_numpy(out, "`out`")[0]
        else:
            target = as_numpy(out, "`out`")[0] if is_foreign(out) else out
        if layout is not None and channels_last(array) and kwargs.get(layout[0], layout[1]) == layout[1]:
            moved = array.ndim
            kwargs = {**kwargs, layout[0]: layout[2]}
            array = array.transpose(TO_LAST[moved])
            if target is not None:
                target = target.transpose(TO_LAST[moved])
        result = function(array, out=target, **kwargs)
    except AvgPoolError as err:
        raise labelled(label if isinstance(label, str) else label(), err) from None
    if out is not None:
        return out
    if moved:
        return back(result.transpose(TO_FIRST[moved]))
    if tensor and type(result) is np.ndarray and result.flags.writeable and not is_bfloat16(result.dtype):
        converted = torch.from_numpy(result)
    else:
        converted = back(result)
    if layout is None and tensor and channels_last(array):
        torch = sys.modules["torch"]
        form = torch.channels_last if array.ndim == 4 else torch.channels_last_3d
        converted = converted.contiguous(memory_format=form)
    return converted
