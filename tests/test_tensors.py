"""Tensors in, tensors out, for every public function and prepared object: a CPU torch.Tensor
gives a torch.Tensor of its dtype and memory format, the numpy call's bits, with no copy of the
input where its layout allows; other __dlpack__ arrays come back as their own type; CUDA-like
devices and tensors that require grad are refused with what to do."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool
import avgpool.onednn
import avgpool.openvino
import avgpool.torch
from avgpool._ops import _tensors

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((2, 8, 9, 9)).astype(np.float32)
Q = np.random.default_rng(1).integers(0, 256, (2, 8, 6, 6), dtype=np.uint8)

#: name -> (call, input, which dtypes it takes)
FLOAT_CALLS = {
    "average_pool": lambda x: avgpool.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True),
    "average_pool skipna": lambda x: avgpool.average_pool(x, [2, 2], skipna=True),
    "AveragePool": avgpool.AveragePool([2, 2], strides=[2, 2], count_include_pad=1, pads=[1, 1, 0, 0]),
    "openvino.avg_pool": lambda x: avgpool.openvino.avg_pool(x, [2, 2], strides=[2, 2], exclude_pad=True),
    "onednn.avg_pool": lambda x: avgpool.onednn.avg_pool(
        x, [2, 2], strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True, data_format="NCX"
    ),
    "torch.avg_pool2d": lambda x: avgpool.torch.avg_pool2d(x, 3, 2, 1),
    "torch.adaptive_avg_pool2d": lambda x: avgpool.torch.adaptive_avg_pool2d(x, (4, 7)),
}
QUANTIZED_CALLS = {
    "qlinear_average_pool": lambda q: avgpool.qlinear_average_pool(q, 0.1, 128, 0.2, 100, [2, 2], strides=[2, 2]),
    "QLinearAveragePool": avgpool.QLinearAveragePool(0.1, 128, 0.2, 100, [3, 3], pads=[1, 1, 1, 1]),
    "qlinear_global_average_pool": lambda q: avgpool.qlinear_global_average_pool(q, 0.1, 128, 0.2, 100),
}


def as_tensor(x, dtype=None, channels_last=False):
    t = torch.from_numpy(x)
    if dtype is not None:
        t = t.to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def numpy_of(t):
    return t.view(torch.int16).numpy().view(np.dtype("bfloat16")) if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("name", list(FLOAT_CALLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_float_calls(name, dtype, channels_last):
    call = FLOAT_CALLS[name]
    if name.startswith("onednn") and dtype == torch.float64:
        return
    t = as_tensor(X, dtype, channels_last)
    before = t.clone()
    y = call(t)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype, name
    assert y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format), name
    expected = call(numpy_of(t))  # the numpy call on the same memory: the same bits
    assert type(expected) is np.ndarray
    assert np.array_equal(numpy_of(y), expected, equal_nan=True), name
    assert torch.equal(t, before), "the input is never modified"


@pytest.mark.parametrize("name", list(QUANTIZED_CALLS))
@pytest.mark.parametrize("channels_last", [False, True])
def test_quantized_calls(name, channels_last):
    call = QUANTIZED_CALLS[name]
    t = as_tensor(Q, None, channels_last)
    y = call(t)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.uint8
    assert np.array_equal(y.numpy(), call(Q))
    if channels_last and name != "qlinear_global_average_pool":
        assert y.is_contiguous(memory_format=torch.channels_last)
    s8 = as_tensor(Q.astype(np.int16).__sub__(128).astype(np.int8), None, channels_last)
    if name == "qlinear_average_pool":
        y8 = avgpool.qlinear_average_pool(s8, 0.1, 0, 0.2, 1, [2, 2])
        assert y8.dtype == torch.int8
        assert np.array_equal(y8.numpy(), avgpool.qlinear_average_pool(s8.numpy(), 0.1, 0, 0.2, 1, [2, 2]))


def test_the_input_is_not_copied():
    t = torch.from_numpy(X)
    array, _ = _tensors.as_numpy(t)
    assert np.shares_memory(array, X)
    b = t.to(torch.bfloat16)
    array, _ = _tensors.as_numpy(b)
    assert array.dtype == np.dtype("bfloat16") and array.ctypes.data == b.data_ptr()
    c = t.contiguous(memory_format=torch.channels_last)
    array, _ = _tensors.as_numpy(c)
    assert array.ctypes.data == c.data_ptr() and _tensors.channels_last(array)


def test_out_tensor():
    t = torch.from_numpy(X)
    out = torch.empty(2, 8, 8, 8)
    assert avgpool.average_pool(t, [2, 2], out=out) is out
    assert np.array_equal(out.numpy(), avgpool.average_pool(X, [2, 2]))
    pool = avgpool.AveragePool([2, 2])
    out2 = torch.empty(2, 8, 8, 8)
    assert pool(t, out2) is out2 and torch.equal(out, out2)


def test_requires_grad_is_refused_outside_avgpool_torch():
    t = torch.from_numpy(X.copy()).requires_grad_()
    for call in (*FLOAT_CALLS.values(),):
        if call in (FLOAT_CALLS["torch.avg_pool2d"], FLOAT_CALLS["torch.adaptive_avg_pool2d"]):
            assert call(t).grad_fn is not None
            continue
        with pytest.raises(avgpool.AvgPoolError, match="requires grad: use avgpool.torch.*detach"):
            call(t)


def test_other_devices_are_refused():
    t = torch.zeros((1, 1, 4, 4), device="meta")
    for call in FLOAT_CALLS.values():
        with pytest.raises(avgpool.AvgPoolError, match="only CPU memory"):
            call(t)


class Namespace:
    """An Array API namespace's one function used here: from_dlpack, giving a Wrapped array."""

    @staticmethod
    def from_dlpack(x):
        return Wrapped(np.from_dlpack(x))


class Wrapped:
    """Another library's array: only __dlpack__, __dlpack_device__ and __array_namespace__."""

    def __init__(self, data):
        self.data = data

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    def __array_namespace__(self, api_version=None):
        return Namespace


def test_dlpack_arrays_come_back_as_their_own_type():
    y = avgpool.average_pool(Wrapped(X), [2, 2])
    assert isinstance(y, Wrapped) and np.array_equal(y.data, avgpool.average_pool(X, [2, 2]))
    y = avgpool.torch.adaptive_avg_pool2d(Wrapped(X), 3)
    assert isinstance(y, Wrapped) and np.array_equal(y.data, avgpool.torch.adaptive_avg_pool2d(X, 3))
    y = avgpool.QLinearAveragePool(0.1, 128, 0.2, 100, [2, 2])(Wrapped(Q))
    assert isinstance(y, Wrapped)


def test_numpy_in_numpy_out():
    for call in FLOAT_CALLS.values():
        assert type(call(X)) is np.ndarray
