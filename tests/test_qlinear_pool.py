"""avgpool.QLinearAveragePool, the prepared QLinearAveragePool: the function's results bit for
bit (the function is checked against onnxruntime in test_qlinear.py), its errors, and its
memory of shapes and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from test_qlinear import random_attrs, random_scalars, random_x

import avgpool
from avgpool import AvgPoolError


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_same_bits_as_the_function(dtype):
    """200 random configurations, each pool called on three inputs of two shapes (the second
    shape twice: remembered), strided views among them, into a new array and into ``out``."""
    rng = np.random.default_rng(20261126 + np.dtype(dtype).num)
    compared = 0
    for _ in range(200):
        attrs = random_attrs(rng, int(rng.choice([1, 2, 3])))
        scalars = random_scalars(rng, dtype)
        pool = avgpool.QLinearAveragePool(*scalars, **attrs)
        for _ in range(2):
            spatial = [int(rng.integers(k, k + 6)) for k in attrs["kernel_shape"]]
            x = random_x(rng, dtype, spatial, attrs.get("channels_last"))
            for data in (x, x[::-1], x):
                try:
                    expected = avgpool.qlinear_average_pool(data, *scalars, **attrs)
                except AvgPoolError as err:
                    with pytest.raises(AvgPoolError) as info:
                        pool(data)
                    assert str(info.value) == str(err)
                    continue
                got = pool(data)
                assert got.dtype == expected.dtype and np.array_equal(got, expected), (attrs, scalars, x.shape)
                out = np.full_like(expected, 7)
                assert pool(data, out=out) is out and np.array_equal(out, expected)
                compared += 1
    assert compared > 300


def test_arguments_are_kept_as_given():
    """Lists and arrays given to the pool are copied: editing them later changes nothing."""
    kernel, scale = [2, 2], np.array([0.5], np.float32)
    pool = avgpool.QLinearAveragePool(scale, 1, 0.25, 2, kernel)
    x = np.arange(36, dtype=np.uint8).reshape(1, 1, 6, 6)
    expected = avgpool.qlinear_average_pool(x, 0.5, 1, 0.25, 2, [2, 2])
    kernel[:], scale[0] = [3, 3], 4.0
    np.testing.assert_array_equal(pool(x), expected)
    np.testing.assert_array_equal(pool(x[:, :, :5]), avgpool.qlinear_average_pool(x[:, :, :5], 0.5, 1, 0.25, 2, [2, 2]))
    assert "kernel_shape=[2, 2]" in repr(pool)


def test_same_shape_other_dtype():
    """Inputs of one shape and two dtypes: each its own validation and kernel arguments."""
    pool = avgpool.QLinearAveragePool(0.1, None, 0.2, None, [3], pads=[1, 1])
    values = np.array([[[-100, -50, 0, 50, 100, 120]]])
    for dtype in (np.uint8, np.int8, np.uint8):
        x = np.abs(values).astype(dtype) if dtype == np.uint8 else values.astype(dtype)
        np.testing.assert_array_equal(pool(x), avgpool.qlinear_average_pool(x, 0.1, None, 0.2, None, [3], pads=[1, 1]))
        assert pool(x).dtype == dtype


@pytest.mark.parametrize(
    "zero_point",
    [np.int8(5), np.array([5], np.int8), [np.int8(5)], (np.int8(5),), [np.int64(5)], np.array(5, np.int64)],
)
def test_a_zero_point_of_another_dtype_is_refused_however_it_is_wrapped(zero_point):
    x = np.zeros((1, 1, 4), np.uint8)
    for position in ("x_zero_point", "y_zero_point"):
        scalars = {**dict(x_scale=1.0, x_zero_point=0, y_scale=1.0, y_zero_point=0), position: zero_point}
        with pytest.raises(AvgPoolError, match=f"`{position}` has dtype int(8|64): it must have X's dtype uint8"):
            avgpool.qlinear_average_pool(x, **scalars, kernel_shape=[2])
        with pytest.raises(AvgPoolError, match=f"`{position}` has dtype"):
            avgpool.QLinearAveragePool(**scalars, kernel_shape=[2])(x)


@pytest.mark.parametrize(
    "scalars, attrs, x, message",
    [
        ((0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2]), np.zeros((1, 1, 4, 4), np.float32), "`X` has dtype float32"),
        ((0.1, 300, 0.1, 0), dict(kernel_shape=[2, 2]), np.zeros((1, 1, 4, 4), np.uint8), "`x_zero_point` is 300"),
        ((0.1, 0, 0.0, 0), dict(kernel_shape=[2, 2]), np.zeros((1, 1, 4, 4), np.uint8), "`y_scale` is 0"),
        ((0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], strides=[0, 1]), np.zeros((1, 1, 4, 4), np.uint8), "`strides`"),
        ((0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], pads=[2, 0, 0, 0]), np.zeros((1, 1, 4, 4), np.uint8), "`pads`"),
    ],
)
def test_refusals_are_the_function_s(scalars, attrs, x, message):
    with pytest.raises(AvgPoolError) as expected:
        avgpool.qlinear_average_pool(x, *scalars, **attrs)
    with pytest.raises(AvgPoolError) as got:
        avgpool.QLinearAveragePool(*scalars, **attrs)(x)
    assert str(got.value) == str(expected.value)
    assert str(got.value).startswith("QLinearAveragePool: ") and message in str(got.value)


def test_bad_out_named_on_a_remembered_shape():
    pool = avgpool.QLinearAveragePool(0.1, 0, 0.1, 0, [2, 2])
    x = np.zeros((1, 1, 4, 4), np.uint8)
    pool(x)
    with pytest.raises(AvgPoolError, match=r"^QLinearAveragePool: `out` has shape \(3,\)"):
        pool(x, out=np.empty(3, np.uint8))
    with pytest.raises(AvgPoolError, match=r"^QLinearAveragePool: `out` has dtype int8"):
        pool(x, out=np.empty((1, 1, 3, 3), np.int8))


def test_threads_share_one_pool():
    """Four threads calling one pool with two shapes at once all get the function's bits."""
    import threading

    pool = avgpool.QLinearAveragePool(0.1, 3, 0.2, 5, [2, 2], strides=[2, 2])
    inputs = [np.arange(n * n, dtype=np.uint8).reshape(1, 1, n, n) for n in (8, 10)]
    expected = [avgpool.qlinear_average_pool(x, 0.1, 3, 0.2, 5, [2, 2], strides=[2, 2]) for x in inputs]
    wrong = []

    def work(offset):
        for i in range(200):
            k = (i + offset) % 2
            if not np.array_equal(pool(inputs[k]), expected[k]):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
