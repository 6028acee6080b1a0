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

import ml_dtypes
import numpy as np

from ..errors import AvgPoolError, labelled

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
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
    torch = _torch_tensor(x)
    if torch is not None:
        return _from_torch(torch, x, name, grad), _to_torch
    return _from_dlpack(x, name)


def _from_torch(torch: Any, x: Any, name: str, grad: bool) -> np.ndarray:
    if x.device.type != "cpu":
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
    if x.is_conj() or x.is_neg():
        x = x.resolve_conj().resolve_neg()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(_BFLOAT16)
    try:
        return x.numpy()
    except (TypeError, RuntimeError) as err:
        raise AvgPoolError(f"{name} is a torch tensor of dtype {x.dtype}, which numpy cannot read: {err}") from None


def _to_torch(result: Any) -> Any:
    import torch  # a tensor came in: torch is imported

    if not isinstance(result, np.ndarray):
        return result
    if not result.flags.writeable or any(s < 0 for s in result.strides):
        result = result.copy()  # torch.from_numpy warns about read-only memory, refuses negative strides
    if result.dtype == _BFLOAT16:
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
        raise AvgPoolError(f"{name} ({type(x).__name__}) cannot be read through DLPack: {err}") from None
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is None:
        return array, lambda result: result
    xp = namespace()

    def back(result: Any) -> Any:
        return xp.from_dlpack(result) if isinstance(result, np.ndarray) else result

    return array, back


def channels_last(x: Any) -> bool:
    """Whether ``x`` is a 4-D or 5-D torch tensor (or array) in channels-last memory: its
    channel axis moved last is C-contiguous, and it is not itself C-contiguous."""
    strides = getattr(x, "strides", None)
    if strides is None or x.ndim not in (4, 5):
        return False
    if x.flags.c_contiguous:
        return False
    return np.moveaxis(x, 1, -1).flags.c_contiguous


def call(
    function: Callable[..., Any],
    label: str,
    x: Any,
    out: Any,
    kwargs: dict[str, Any],
    layout: tuple[str, str, str] | None = None,
) -> Any:
    """``function(array, out=..., **kwargs)`` on the memory of the tensor ``x`` (and of a tensor
    ``out``), its result as ``x``'s kind. ``layout``: the function's layout keyword and its
    channels-first and channels-last values; a channels-last input with the channels-first value
    is pooled as the channels-last array it is. Errors are labelled with ``label``."""
    try:
        array, back = as_numpy(x)
        target = None
        if out is not None and is_foreign(out):
            target, _ = as_numpy(out, "`out`")
        moved = layout is not None and kwargs.get(layout[0], layout[1]) == layout[1] and channels_last(array)
        if moved:
            kwargs = {**kwargs, layout[0]: layout[2]}
            array = np.moveaxis(array, 1, -1)
            target = None if target is None else np.moveaxis(target, 1, -1)
        result = function(array, out=target if target is not None else out, **kwargs)
    except AvgPoolError as err:
        raise labelled(label, err) from None
    if out is not None:
        return out
    if moved:
        result = np.moveaxis(result, -1, 1)
    converted = back(result)
    if layout is None and _torch_tensor(x) is not None and channels_last(array):
        torch = sys.modules["torch"]
        form = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        converted = converted.contiguous(memory_format=form)
    return converted
