"""com.microsoft QLinearGlobalAveragePool (what onnxruntime's quantizer makes of GlobalAveragePool):
bit for bit onnxruntime's, both layouts and dtypes, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool
from avgpool import AvgPoolError

ort = pytest.importorskip("onnxruntime")


def onnxruntime_global(x, x_scale, x_zero_point, y_scale, y_zero_point, channels_last):
    from onnx import TensorProto, helper

    kind = TensorProto.UINT8 if x.dtype == np.uint8 else TensorProto.INT8
    node = helper.make_node(
        "QLinearGlobalAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        channels_last=channels_last,
    )
    scalars = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [x_scale]),
        helper.make_tensor("xz", kind, [], [x_zero_point]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [y_scale]),
        helper.make_tensor("yz", kind, [], [y_zero_point]),
    ]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", kind, list(x.shape))],
        [helper.make_tensor_value_info("y", kind, None)],
        initializer=scalars,
    )
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("seed", range(4))
def test_random_inputs_bit_for_bit_as_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    for i in range(25):
        dtype = (np.uint8, np.int8)[i % 2]
        channels_last = int(rng.integers(0, 2))
        spatial_axes = int(rng.integers(1, 4))
        spatial = [int(v) for v in rng.integers(1, 30 if spatial_axes == 1 else 9, spatial_axes)]
        batch, channels = int(rng.integers(1, 4)), int(rng.integers(1, 40))
        shape = [batch, *spatial, channels] if channels_last else [batch, channels, *spatial]
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        scales = [float(np.float32(rng.uniform(0.001, 0.2))) for _ in range(2)]
        zero_points = [int(v) for v in rng.integers(info.min, info.max + 1, 2)]
        expected = onnxruntime_global(x, scales[0], zero_points[0], scales[1], zero_points[1], channels_last)
        got = avgpool.qlinear_global_average_pool(
            x, scales[0], zero_points[0], scales[1], zero_points[1], channels_last=channels_last
        )
        assert got.shape == expected.shape and got.dtype == x.dtype
        np.testing.assert_array_equal(got, expected)


def test_channels_last_as_numpy_values():
    x = np.random.default_rng(2).integers(0, 256, (1, 3, 3, 5)).astype(np.uint8)
    expected = onnxruntime_global(x, 0.1, 7, 0.2, 9, 1)
    for flag in (True, 1, np.True_, np.int64(1)):
        np.testing.assert_array_equal(
            avgpool.qlinear_global_average_pool(x, 0.1, 7, 0.2, 9, channels_last=flag), expected
        )


def test_out_and_the_doctest_value():
    x = np.array([[[[10, 20], [30, 41]]]], dtype=np.uint8)
    out = np.empty((1, 1, 1, 1), np.uint8)
    assert avgpool.qlinear_global_average_pool(x, 0.5, 0, 0.25, 3, out=out) is out
    assert out.item() == onnxruntime_global(x, 0.5, 0, 0.25, 3, 0).item() == 53


@pytest.mark.parametrize(
    "x, scalars, message",
    [
        (np.zeros((2, 3), np.uint8), (0.1, 0, 0.1, 0), "it must have at least 3 axes"),
        (np.zeros((1, 2, 0), np.uint8), (0.1, 0, 0.1, 0), "a spatial axis is empty"),
        (np.zeros((1, 2, 3), np.float32), (0.1, 0, 0.1, 0), "`X` has dtype float32"),
        (np.zeros((1, 2, 3), np.uint8), (1000.0, 0, 0.1, 0), "2**-32 <= x_scale / (y_scale * 3) < 256"),
        (np.zeros((1, 2, 3), np.uint8), (0.1, np.int8(0), 0.1, 0), "`x_zero_point` has dtype int8"),
        (
            np.zeros((1, 2, 3), np.uint8),
            (0.1, 0, 0.1, 0, np.array([1, 0])),
            "`channels_last` must be 0, 1, False or True",
        ),
        (np.zeros((1, 2, 3), np.uint8), (0.1, 0, 0.1, 0, 2), "`channels_last` must be 0, 1, False or True, got 2"),
    ],
)
def test_refusals_name_the_operator(x, scalars, message):
    with pytest.raises(AvgPoolError) as err:
        avgpool.qlinear_global_average_pool(x, *scalars[:4], channels_last=scalars[4] if len(scalars) > 4 else 0)
    assert str(err.value).startswith("QLinearGlobalAveragePool: ") and message in str(err.value)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_the_evaluators_node_is_onnxruntimes(channels_last):
    from onnx import TensorProto, helper

    import avgpool.onnx as avgpool_onnx

    node = helper.make_node(
        "QLinearGlobalAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        channels_last=channels_last,
    )
    scalars = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [0.05]),
        helper.make_tensor("xz", TensorProto.INT8, [], [-3]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [0.04]),
        helper.make_tensor("yz", TensorProto.INT8, [], [9]),
    ]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 5, 6, 7])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, None)],
        initializer=scalars,
    )
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    x = np.random.default_rng(5).integers(-128, 128, (2, 5, 6, 7)).astype(np.int8)
    (got,) = avgpool_onnx.make_evaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, onnxruntime_global(x, 0.05, -3, 0.04, 9, channels_last))
