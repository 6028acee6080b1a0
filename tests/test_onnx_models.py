"""avgpool inside onnx's ReferenceEvaluator, on the "light" models shipped with the onnx package.

Inputs are what onnx's backend test runner feeds these models (``generate_dummy_data`` with
``random=False``: ``arange(n).reshape(shape) / n`` in float32); the expected outputs are the stored
``light_*_output_0.pb`` files (onnxruntime's), with the runner's tolerances. onnx.reference itself
misses two of them for reasons outside pooling (seen with onnx 1.23.2): its BatchNormalization-9
takes the schema's default momentum as training mode and normalises densenet121 with the batch's
statistics, and its Softmax on an opset-9 model takes the axis of Softmax-13 (-1) instead of
flattening from axis 1 (squeezenet). Those two operators run here as the spec defines them, beside
the vectorised MaxPool, whatever the onnx version: every model checks avgpool's pooling against the
stored output, and none depends on when onnx fixes its own. One evaluator run per model, shared by
the tests (a few seconds in all: MaxPool, whose Python loops took most of it, runs vectorised here).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import avgpool  # noqa: E402
import avgpool.onnx as avgpool_onnx  # noqa: E402
from avgpool.onnx import node_kwargs  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# (model, rtol of onnx's backend test list (onnx/backend/test/case/model/__init__.py), the operator
# other than pooling that onnx.reference 1.23.2 gets wrong in it and that runs as the spec's here)
MODELS = [
    ("densenet121", 2e-3, "BatchNormalization"),
    ("inception_v1", 1e-3, None),
    ("inception_v2", 1e-3, None),
    ("resnet50", 1e-3, None),
    ("shufflenet", 1e-3, None),
    ("squeezenet", 1e-3, "Softmax"),
]
POOL_OPS = ("AveragePool", "GlobalAveragePool")


def _path(name: str, suffix: str = ".onnx") -> str:
    return os.path.join(LIGHT, f"light_{name}{suffix}")


def runner_inputs(model) -> dict[str, np.ndarray]:
    """onnx.backend.test.runner.Runner.generate_dummy_data(x, random=False) for every non-initializer input."""
    return {spec.name: avgpool_onnx.generate_input(spec, kind="ramp") for spec in avgpool_onnx.model_inputs(model)}


from onnx.reference.ops.op_max_pool import MaxPool as _ReferenceMaxPool  # noqa: E402


class MaxPool(_ReferenceMaxPool):
    """onnx.reference's MaxPool, vectorised where these models call it (4-D input, explicit pads,
    no auto_pad, ceil_mode, dilations or indices), else the reference itself. A maximum does not
    round: the bits are the reference's (test_fast_max_pool_is_the_reference_bit_for_bit), in a
    fraction of its time (its Python loops took 20 of inception_v1's 22 s)."""

    def _run(
        self,
        x,
        auto_pad=None,
        ceil_mode=None,
        dilations=None,
        kernel_shape=None,
        pads=None,
        storage_order=None,
        strides=None,
    ):
        kwargs = dict(
            auto_pad=auto_pad,
            ceil_mode=ceil_mode,
            dilations=dilations,
            kernel_shape=kernel_shape,
            pads=pads,
            storage_order=storage_order,
            strides=strides,
        )
        if (
            x.ndim != 4
            or len(self.onnx_node.output) != 1
            or ceil_mode
            or auto_pad not in (None, "NOTSET")
            or any(d != 1 for d in dilations or ())
            or np.isnan(x).any()
        ):
            return super()._run(x, **kwargs)
        top, left, bottom, right = pads or (0, 0, 0, 0)
        sh, sw = strides or (1, 1)
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
        windows = np.lib.stride_tricks.sliding_window_view(padded, tuple(kernel_shape), axis=(2, 3))
        return (windows[:, :, ::sh, ::sw].max(axis=(-2, -1)).astype(x.dtype),)


from onnx.reference.op_run import OpRun  # noqa: E402


def _attribute(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


class BatchNormalization(OpRun):
    """BatchNormalization in inference (one output, no training_mode), as the spec defines it:
    ``scale * (x - mean) / sqrt(var + epsilon) + bias`` with the given statistics. onnx.reference
    1.23.2's BatchNormalization-9 fills in the schema's default momentum (0.9) and then, seeing a
    momentum, normalises with the batch's own mean and variance (densenet121's first one is off
    by 97%). The attributes are read from the node itself, not from a schema's defaults."""

    def _run(self, x, scale, bias, mean, var, **_):
        node = self.onnx_node
        assert len(node.output) == 1 and not _attribute(node, "training_mode", 0), "inference only"
        assert _attribute(node, "is_test", 1), "inference only"
        epsilon = np.float32(_attribute(node, "epsilon", 1e-5)).astype(x.dtype)
        shape = (-1,) + (1,) * (x.ndim - 2)
        s, b, m, v = (a.astype(x.dtype).reshape(shape) for a in (scale, bias, mean, var))
        return ((s * (x - m) / np.sqrt(v + epsilon) + b).astype(x.dtype),)


class Softmax(OpRun):
    """Softmax as its version defines it: before opset 13 the input is flattened to 2-D at
    ``axis`` (default 1) and normalised over the trailing block; from 13 over ``axis`` (default
    -1). onnx.reference 1.23.2 takes Softmax-13's axis in an opset-9 model: squeezenet's
    1 x 1000 x 1 x 1 input came out as all ones."""

    def _run(self, x, **_):
        opset = self.run_params["opsets"].get("", self.run_params["opsets"].get("ai.onnx"))
        if opset >= 13:
            axes = (_attribute(self.onnx_node, "axis", -1),)
            flat = x
        else:
            axis = _attribute(self.onnx_node, "axis", 1) % x.ndim
            flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
            axes = (1,)
        e = np.exp(flat - flat.max(axis=axes, keepdims=True))
        return ((e / e.sum(axis=axes, keepdims=True)).reshape(x.shape).astype(x.dtype),)


_RUNS: dict[str, tuple] = {}


def evaluate(name: str):
    """(model, feeds, every intermediate result) of one evaluator run with avgpool's ops, cached."""
    if name not in _RUNS:
        path = _path(name)
        if not os.path.exists(path):
            pytest.skip(f"{path} is not shipped with this onnx")
        model = onnx.load(path)
        feeds = runner_inputs(model)
        evaluator = avgpool_onnx.make_evaluator(model, new_ops=[MaxPool, BatchNormalization, Softmax])
        assert sum(type(n).__module__ == "avgpool.onnx" for n in evaluator.rt_nodes_) == sum(
            n.op_type in POOL_OPS for n in model.graph.node
        )
        _RUNS[name] = (model, feeds, evaluator.run(None, feeds, intermediate=True))
    return _RUNS[name]


@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((1, 3, 11, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        ((2, 3, 11, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0])),
        ((1, 4, 12, 10), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])),
        ((1, 2, 9, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ((1, 2, 9, 13), dict(kernel_shape=[2, 3], strides=[3, 2], pads=[1, 0, 0, 2])),
    ],
)
def test_fast_max_pool_is_the_reference_bit_for_bit(shape, attributes):
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x.flat[::7] = -np.inf  # windows of -inf alone, beside the padding's
    fast = onnx.reference.ReferenceEvaluator(model, new_ops=[MaxPool]).run(None, {"x": x})[0]
    assert type(onnx.reference.ReferenceEvaluator(model, new_ops=[MaxPool]).rt_nodes_[0]) is MaxPool
    reference = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert fast.dtype == reference.dtype and fast.tobytes() == reference.tobytes()


@pytest.mark.parametrize("name, rtol", [m[:2] for m in MODELS], ids=[m[0] for m in MODELS])
def test_light_model_matches_stored_output(name, rtol):
    model, _, results = evaluate(name)
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(_path(name, "_output_0.pb")))
    last = model.graph.node[-1]
    if last.op_type != "Softmax":
        np.testing.assert_allclose(results[model.graph.output[0].name], expected, rtol=rtol, atol=1e-7)
        return
    # A final Softmax is compared in logit space, with the tolerance relative to the logits:
    # squeezenet's logits (its GlobalAveragePool's outputs) are about 9.5e9 on the runner's
    # input, where a float32 ulp is 1024 and exp(-1024) is 0, so one ulp between two channels
    # (which BLAS builds of the upstream Conv give differently per CPU) turns the stored uniform
    # 0.001 into 1/32 or 0; the logits themselves agree to far better than rtol.
    logits = results[last.input[0]].astype(np.float64).reshape(expected.shape)
    stored = np.log(expected.astype(np.float64))
    np.testing.assert_allclose(
        logits - logits.max(), stored - stored.max(), rtol=0, atol=rtol * np.abs(logits).max() + 1e-6
    )


@pytest.mark.parametrize("name", [m[0] for m in MODELS if m[2]])
def test_stored_outputs_are_onnxruntimes(name):
    """Where onnx.reference's own operator misses the stored output, onnxruntime (whose pooling the
    next test compares with) reproduces it: the stored data is right, and so is the operator run
    here in onnx.reference's place."""
    model, feeds, _ = evaluate(name)
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(_path(name, "_output_0.pb")))
    (got,) = avgpool_onnx.onnxruntime_outputs(model, feeds, [model.graph.output[0].name])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


def _single_node_model(node, x: np.ndarray, opset: int):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("name", [m[0] for m in MODELS])
def test_pooling_nodes_match_onnxruntime(name):
    model, _, results = evaluate(name)
    opset = avgpool_onnx.model_opset(model)
    nodes = [n for n in model.graph.node if n.op_type in POOL_OPS]
    assert nodes, f"{name} has no pooling node"
    for node in nodes:
        x, y = results[node.input[0]], results[node.output[0]]
        (expected,) = avgpool_onnx.onnxruntime_outputs(_single_node_model(node, x, opset), {node.input[0]: x})
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} {node.name} {node.op_type}")
        if node.op_type == "AveragePool":  # and it is exactly avgpool.average_pool
            np.testing.assert_array_equal(y, avgpool.average_pool(x, opset=opset, **node_kwargs(node)))


def test_reference_ops_are_bound_to_an_opset():
    ops = {op.__name__: op for op in avgpool_onnx.reference_ops(opset=7)}
    assert ops["AveragePool"].opset == 7 and ops["QLinearAveragePool"].op_domain == "com.microsoft"
    assert avgpool_onnx.reference_ops(opset=7) is avgpool_onnx.reference_ops(opset=7)
    with pytest.raises(avgpool.AvgPoolError, match="opset"):
        avgpool_onnx.reference_ops(opset=0)


@pytest.mark.parametrize(
    "opset, attributes, right",
    [
        (1, dict(kernel_shape=[3], pads=[1, 1]), [1.5, 2, 3, 4, 4.5]),  # onnx.reference: [1, 2, 3, 4, 3]
        (7, dict(kernel_shape=[3], pads=[1, 1], count_include_pad=1), [1, 2, 3, 4, 3]),
        (
            19,
            dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"),
            [2, 2, 3, 4, 4],
        ),  # onnx.reference: [2, 3, 4, 4, 0]
        (19, dict(kernel_shape=[3], dilations=[2], auto_pad="VALID"), [3]),  # onnx.reference: [3, 0, 0]
        (22, dict(kernel_shape=[3], strides=[3], ceil_mode=1), [2, 4.5]),  # onnx.reference shifts the windows
    ],
)
def test_evaluator_with_model_opset(opset, attributes, right):
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    y = avgpool_onnx.make_evaluator(model).run(None, {"x": np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)})[0]
    np.testing.assert_array_equal(y.reshape(-1), np.array(right, dtype=np.float32))


def test_qlinear_average_pool_node_matches_onnxruntime():
    from onnx import TensorProto, helper

    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=1,
    )
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [0.1]),
        helper.make_tensor("xz", TensorProto.UINT8, [], [95]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [0.2]),
        helper.make_tensor("yz", TensorProto.UINT8, [], [115]),
    ]
    graph = helper.make_graph(
        [node],
        "q",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 3, 9, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)], ir_version=8
    )
    x = np.random.default_rng(0).integers(0, 256, size=(2, 3, 9, 8), dtype=np.uint8)
    got = avgpool_onnx.make_evaluator(model).run(None, {"x": x})[0]
    (expected,) = avgpool_onnx.onnxruntime_outputs(model, {"x": x})
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_global_average_pool_is_average_pool_over_everything(dtype):
    from onnx import helper

    ops = {op.__name__: op for op in avgpool_onnx.reference_ops(opset=22)}
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    op = ops["GlobalAveragePool"](node, {"opsets": {"": 22}, "new_ops": {}, "log": lambda *a: None})
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 7)).astype(dtype)
    x[0, 1, 2, 3], x[1, 2, 0, 0], x[1, 2, 4, 6] = np.nan, np.inf, -np.inf
    x[1, 0] = 1e4 if dtype == np.float16 else 1e30
    x[1, 0, 0, 0] = 1
    x[0, 2, 0, :5] = [1e20, 1, -1e20, 1, 0] if dtype != np.float16 else [1e4, 1, -1e4, 1, 0]  # bits a sum can lose
    (y,) = op.run(x)
    assert y.dtype == x.dtype and y.shape == (2, 3, 1, 1)
    np.testing.assert_array_equal(y, avgpool.average_pool(x, [5, 7]))  # the very numbers, every dtype


def _quantized_model(path):
    """A small float model quantized by onnxruntime's own quantizer (QOperator format): its
    AveragePool and GlobalAveragePool nodes become com.microsoft QLinearAveragePool and
    QLinearGlobalAveragePool."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3, "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node(
            "AveragePool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1
        ),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("p2", "g")]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
        outputs,
        initializer=weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), path / "f.onnx")

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.random((1, 3, 20, 20), dtype=np.float32)} for _ in range(3)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(path / "f.onnx"), str(path / "q.onnx"), Calibration(), quant_format=QuantFormat.QOperator)
    return onnx.load(str(path / "q.onnx"))


def test_a_model_quantized_by_onnxruntime_runs_and_matches_it_exactly(tmp_path):
    model = _quantized_model(tmp_path)
    ops = {(node.domain, node.op_type) for node in model.graph.node}
    assert {("com.microsoft", "QLinearAveragePool"), ("com.microsoft", "QLinearGlobalAveragePool")} <= ops
    feeds = {"x": np.random.default_rng(1).random((1, 3, 20, 20), dtype=np.float32)}
    got = avgpool_onnx.make_evaluator(model).run(None, feeds)
    expected = avgpool_onnx.onnxruntime_outputs(model, feeds)
    for y, e in zip(got, expected):
        np.testing.assert_array_equal(y, e)
