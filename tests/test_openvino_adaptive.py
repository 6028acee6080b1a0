"""avgpool.openvino.adaptive_avg_pool against OpenVINO's CPU plugin (opset8.adaptive_avg_pool):
shapes, values and refusals over random ranks, sizes and dtypes; where every size divides its
axis, bit for bit avgpool.average_pool."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import avgpool
import avgpool.openvino
from avgpool import AvgPoolError

ov = pytest.importorskip("openvino")
from openvino import opset1, opset8  # noqa: E402

_CORE = []


def openvino_run(x: np.ndarray, output_shape, shape_dtype=np.int64) -> np.ndarray:
    """One AdaptiveAvgPool-8 node compiled for CPU (f32 inference precision: the plugin's
    accumulation; 16-bit inputs are given to it widened to float32)."""
    if not _CORE:
        _CORE.append(ov.Core())
    parameter = opset1.parameter(list(x.shape), x.dtype)
    node = opset8.adaptive_avg_pool(parameter, opset1.constant(np.array(output_shape, shape_dtype)))
    compiled = _CORE[0].compile_model(ov.Model([node], [parameter]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(x)[0]


def exact(x: np.ndarray, outs) -> np.ndarray:
    """The exact adaptive averages (math.fsum per window), float64."""
    x64 = x.astype(np.float64)
    result = np.empty(x.shape[:2] + tuple(outs))
    for index in np.ndindex(*outs):
        slices = []
        for length, o, i in zip(x.shape[2:], outs, index):
            slices.append(slice((i * length) // o, -(-(i + 1) * length // o)))
        block = x64[(slice(None), slice(None), *slices)].reshape(x.shape[0], x.shape[1], -1)
        sums = np.array([[math.fsum(row.tolist()) for row in plane] for plane in block]).reshape(x.shape[:2])
        result[(slice(None), slice(None), *index)] = sums / block.shape[-1]
    return result


def test_random_against_the_cpu_plugin():
    rng = np.random.default_rng(8)
    for case in range(60):
        n = int(rng.integers(1, 4))
        lengths = tuple(int(v) for v in rng.integers(1, 11, n))
        outs = tuple(int(rng.integers(0, 2 * L + 1)) for L in lengths)
        if rng.random() < 0.3:
            outs = tuple(int(rng.choice([d for d in range(1, L + 1) if L % d == 0])) for L in lengths)
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *lengths)
        dtype = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16][case % 4]
        x = (rng.standard_normal(shape) * 10).astype(dtype)
        got = avgpool.openvino.adaptive_avg_pool(x, list(outs))
        assert got.dtype == x.dtype and got.shape == shape[:2] + outs
        theirs = openvino_run(x if dtype in (np.float32, np.float64) else x.astype(np.float32), outs)
        assert theirs.shape == got.shape
        reference = exact(x, outs)
        tolerance = 2.0 ** -(10 if dtype == np.float16 else 7 if dtype == ml_dtypes.bfloat16 else 23) * 4
        np.testing.assert_allclose(got.astype(np.float64), reference, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(theirs.astype(np.float64), reference, rtol=tolerance, atol=1e-5)
        if all(L % o == 0 for L, o in zip(lengths, outs) if o):
            if all(outs):
                kernel = [L // o for L, o in zip(lengths, outs)]
                assert np.array_equal(got, avgpool.average_pool(x, kernel, strides=kernel))


def test_exact_where_openvino_overflows():
    x = np.full((1, 1, 2, 2), 3e38, np.float32)
    assert np.isinf(openvino_run(x, [1, 1])).all()
    assert avgpool.openvino.adaptive_avg_pool(x, [1, 1]).item() == np.float32(3e38)


@pytest.mark.parametrize(
    "shape, output_shape, words",
    [
        ((2, 3, 7, 5), [3], "output_shape` has 1 values"),
        ((2, 3, 7, 5), [3, 2, 2], "output_shape` has 3 values"),
        ((7, 5), [3], "rank 2"),
        ((1, 1, 1, 2, 3, 4), [1, 1, 1, 1], "rank 6"),
        ((2, 3, 7, 5), [-1, 2], ">= 0"),
    ],
)
def test_refusals_are_openvino_s(shape, output_shape, words):
    x = np.zeros(shape, np.float32)
    with pytest.raises(RuntimeError):
        openvino_run(x, output_shape)
    with pytest.raises(AvgPoolError, match=f"AdaptiveAvgPool-8: .*{words}"):
        avgpool.openvino.adaptive_avg_pool(x, output_shape)


def test_integers_refused_and_empty_axes():
    with pytest.raises(AvgPoolError, match="dtype int32"):
        avgpool.openvino.adaptive_avg_pool(np.zeros((1, 1, 4), np.int32), [2])
    assert avgpool.openvino.adaptive_avg_pool(np.zeros((1, 2, 4, 4), np.float32), [0, 2]).shape == (1, 2, 0, 2)
    assert openvino_run(np.zeros((1, 2, 4, 4), np.float32), [0, 2]).shape == (1, 2, 0, 2)
    assert np.isnan(avgpool.openvino.adaptive_avg_pool(np.zeros((1, 1, 0, 4), np.float32), [2, 2])).all()
    assert avgpool.openvino.adaptive_avg_pool(np.zeros((0, 1, 4), np.float32), np.array([2], np.int32)).shape == (
        0,
        1,
        2,
    )
