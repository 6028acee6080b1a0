"""A jax Array on the CPU (another library's ``__dlpack__`` array) comes back from every public
function and prepared object as a jax Array of its dtype (bfloat16 too, which numpy's DLPack
does not read), with the numpy call's bits, its input read without a copy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import avgpool
import avgpool.onednn
import avgpool.openvino
import avgpool.torch
from avgpool._ops import _tensors

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

X = np.random.default_rng(0).standard_normal((2, 3, 7, 7))
X[0, 0, 0, 0], X[1, 2, 3, 3] = np.nan, np.inf
Q = np.random.default_rng(1).integers(0, 256, (2, 3, 6, 6), dtype=np.uint8)

#: name -> call; each takes a batched 4-D float array (unbatched for the torch functions' 3-D rows)
FLOAT_CALLS = {
    "average_pool": lambda x: avgpool.average_pool(x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True),
    "AveragePool": avgpool.AveragePool([2, 2], strides=[2, 2], count_include_pad=1, pads=[1, 1, 0, 0]),
    "openvino.avg_pool": lambda x: avgpool.openvino.avg_pool(x, [2, 2], strides=[2, 2], exclude_pad=True),
    "openvino.adaptive_avg_pool": lambda x: avgpool.openvino.adaptive_avg_pool(x, [3, 5]),
    "onednn.avg_pool": lambda x: avgpool.onednn.avg_pool(
        x, [2, 2], strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True, data_format="NCX"
    ),
    "torch.avg_pool2d": lambda x: avgpool.torch.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=4),
    "torch.avg_pool2d unbatched": lambda x: avgpool.torch.avg_pool2d(x[0], 2),
    "torch.avg_pool1d": lambda x: avgpool.torch.avg_pool1d(x[:, 0], 3, 2, 1, count_include_pad=False),
    "torch.avg_pool3d": lambda x: avgpool.torch.avg_pool3d(x[None], 2),
    "torch.adaptive_avg_pool1d": lambda x: avgpool.torch.adaptive_avg_pool1d(x[:, 0], 3),
    "torch.adaptive_avg_pool2d": lambda x: avgpool.torch.adaptive_avg_pool2d(x, (4, None)),
    "torch.adaptive_avg_pool3d": lambda x: avgpool.torch.adaptive_avg_pool3d(x[None], (1, 3, 2)),
}
QUANTIZED_CALLS = {
    "qlinear_average_pool": lambda q: avgpool.qlinear_average_pool(q, 0.1, 128, 0.2, 100, [2, 2], strides=[2, 2]),
    "QLinearAveragePool": avgpool.QLinearAveragePool(0.1, 128, 0.2, 100, [3, 3], pads=[1, 1, 1, 1]),
    "qlinear_global_average_pool": lambda q: avgpool.qlinear_global_average_pool(q, 0.1, 128, 0.2, 100),
}
DTYPES = ["float32", "float16", "bfloat16", "float64"]


def jax_array(values, dtype):
    with jax.enable_x64(dtype == "float64"):  # jax makes float64 float32 unless x64 is on
        return jnp.asarray(values, dtype=getattr(jnp, dtype))


def numpy_of(a):
    return np.asarray(a)  # a jax Array's own memory, as numpy reads it (bfloat16 as ml_dtypes')


@pytest.mark.parametrize("name", list(FLOAT_CALLS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_float_calls(name, dtype):
    call = FLOAT_CALLS[name]
    if name.startswith("onednn") and dtype == "float64":
        return  # oneDNN has no f64 pooling: refused for numpy too
    x = jax_array(X, dtype)
    with jax.enable_x64(dtype == "float64"):
        y = call(x)
        assert isinstance(y, jax.Array), f"{name}: {type(y)}"
        assert y.dtype == x.dtype, name
        expected = call(numpy_of(x))
        assert type(expected) is np.ndarray and expected.dtype == np.dtype(
            ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
        )
        assert np.array_equal(numpy_of(y), expected, equal_nan=True), name


@pytest.mark.parametrize("name", list(QUANTIZED_CALLS))
@pytest.mark.parametrize("signed", [False, True])
def test_quantized_calls(name, signed):
    call = QUANTIZED_CALLS[name]
    values = (Q.astype(np.int16) - 128).astype(np.int8) if signed else Q
    if signed:  # zero points in int8's range
        calls = {
            "qlinear_average_pool": lambda q: avgpool.qlinear_average_pool(q, 0.1, 0, 0.2, 1, [2, 2]),
            "QLinearAveragePool": avgpool.QLinearAveragePool(0.1, -3, 0.2, 4, [3, 3], pads=[1, 1, 1, 1]),
            "qlinear_global_average_pool": lambda q: avgpool.qlinear_global_average_pool(q, 0.1, 5, 0.2, -7),
        }
        call = calls[name]
    q = jnp.asarray(values)
    y = call(q)
    assert isinstance(y, jax.Array) and y.dtype == q.dtype, name
    assert np.array_equal(numpy_of(y), call(values)), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_input_is_not_copied(dtype):
    x = jax_array(X, dtype)
    array, _ = _tensors.as_numpy(x)
    assert array.ctypes.data == x.unsafe_buffer_pointer()
    assert str(array.dtype) == dtype


def test_an_out_array_of_jax_is_refused():
    x = jnp.asarray(X, dtype=jnp.float32)
    out = jnp.zeros((2, 3, 3, 3), jnp.float32)
    with pytest.raises(avgpool.AvgPoolError, match="`out` is read-only"):
        avgpool.average_pool(x, [2, 2], strides=[2, 2], out=out)
    assert not np.asarray(out).any()  # jax's arrays are immutable: nothing was written
