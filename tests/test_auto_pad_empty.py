"""auto_pad "" is NOTSET everywhere (semantics 3.5): the Python functions, the prepared pool, shape
inference, QLinearAveragePool, the ONNX evaluator ops, ``avgpool run`` and every CLI command.

ONNX models in the wild and onnxruntime's own tests write the default auto_pad as an empty
string; onnxruntime, OpenVINO and onnx.reference all read it as NOTSET.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import avgpool
import avgpool.onnx as avgpool_onnx
from avgpool._ops.onnx import VERSIONS
from avgpool.cli import main
from avgpool.qlinear import qlinear_average_pool

# Explicit pads and ceil_mode where the opset has it, so that NOTSET is told apart from VALID/SAME.
ATTRIBUTES = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}


def _attributes(opset: int) -> dict:
    extra = {"ceil_mode": 1} if opset >= 10 else {}
    if opset >= 7:
        extra["count_include_pad"] = 1
    return {**ATTRIBUTES, **extra}


def _x(dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(17).standard_normal((2, 3, 7, 6)).astype(dtype)


@pytest.mark.parametrize("opset", VERSIONS)
def test_python_functions_read_empty_auto_pad_as_notset(opset):
    x, attributes = _x(), _attributes(opset)
    notset = avgpool.average_pool(x, opset=opset, **attributes)
    np.testing.assert_array_equal(avgpool.average_pool(x, opset=opset, auto_pad="", **attributes), notset)
    np.testing.assert_array_equal(avgpool.AveragePool(opset=opset, auto_pad="", **attributes)(x), notset)
    shape_attributes = {k: v for k, v in attributes.items() if k != "count_include_pad"}
    assert avgpool.output_shape(x.shape, opset=opset, auto_pad="", **shape_attributes) == notset.shape


def test_empty_auto_pad_with_pads_is_not_an_auto_pad():
    """ "" is NOTSET, so non-zero pads with it are allowed (they would be refused with SAME/VALID)."""
    x = _x()
    with pytest.raises(avgpool.AvgPoolError, match="explicit pads cannot be used"):
        avgpool.average_pool(x, [3, 3], pads=[1, 1, 1, 1], auto_pad="VALID")
    assert avgpool.average_pool(x, [3, 3], pads=[1, 1, 1, 1], auto_pad="").shape == (2, 3, 7, 6)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_reads_empty_auto_pad_as_notset(channels_last):
    q = np.random.default_rng(3).integers(0, 256, (2, 7, 6, 3), dtype=np.uint8)
    args = (q, 0.1, 128, 0.2, 100, [3, 2])
    kwargs = {
        "strides": [2, 1],
        "pads": [1, 0, 1, 1],
        "ceil_mode": 1,
        "count_include_pad": 1,
        "channels_last": channels_last,
    }
    np.testing.assert_array_equal(
        qlinear_average_pool(*args, auto_pad="", **kwargs), qlinear_average_pool(*args, auto_pad="NOTSET", **kwargs)
    )


# ---------------------------------------------------------------- ONNX models, against onnxruntime

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _average_pool_model(opset: int, shape: tuple[int, ...]):
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], auto_pad="", **_attributes(opset))
    assert node.attribute[0].name == "auto_pad" and node.attribute[0].s == b""  # really written, not left out
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _qlinear_model(shape: tuple[int, ...]):
    from onnx import TensorProto, helper

    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        auto_pad="",
        kernel_shape=[3, 2],
        strides=[2, 1],
        pads=[1, 0, 1, 1],
        ceil_mode=1,
        count_include_pad=1,
    )
    inits = [
        helper.make_tensor("xs", TensorProto.FLOAT, [], [0.1]),
        helper.make_tensor("xz", TensorProto.UINT8, [], [128]),
        helper.make_tensor("ys", TensorProto.FLOAT, [], [0.2]),
        helper.make_tensor("yz", TensorProto.UINT8, [], [100]),
    ]
    graph = helper.make_graph(
        [node],
        "q",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        initializer=inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)], ir_version=8
    )


# onnxruntime has no AveragePool-1 kernel: opset 1 is compared with avgpool's NOTSET result only.
@pytest.mark.parametrize("opset", VERSIONS)
def test_evaluator_runs_empty_auto_pad_like_onnxruntime(opset):
    x = _x()
    model = _average_pool_model(opset, x.shape)
    got = avgpool_onnx.make_evaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, avgpool.average_pool(x, opset=opset, **_attributes(opset)))
    if opset >= 7:
        (expected,) = avgpool_onnx.onnxruntime_outputs(model, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_evaluator_runs_empty_auto_pad_qlinear_like_onnxruntime():
    x = np.random.default_rng(5).integers(0, 256, (2, 3, 7, 6), dtype=np.uint8)
    model = _qlinear_model(x.shape)
    got = avgpool_onnx.make_evaluator(model).run(None, {"x": x})[0]
    (expected,) = avgpool_onnx.onnxruntime_outputs(model, {"x": x})
    np.testing.assert_array_equal(got, expected)


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main([str(a) for a in argv], stdout=out), out.getvalue()


@pytest.mark.parametrize("opset", [7, 11, 22])
def test_cli_run_checks_a_model_with_empty_auto_pad(tmp_path, opset):
    path = tmp_path / "model.onnx"
    onnx.save(_average_pool_model(opset, (1, 3, 7, 6)), path)
    code, text = _run(["run", path, "--check", "--output-dir", tmp_path / "out"])
    assert code == 0, text
    assert "[ok" in text


def test_cli_run_checks_a_qlinear_model_with_empty_auto_pad(tmp_path):
    path = tmp_path / "q.onnx"
    onnx.save(_qlinear_model((1, 3, 7, 6)), path)
    code, text = _run(["run", path, "--check"])
    assert code == 0, text
    assert "[ok" in text


# ---------------------------------------------------------------- every CLI command, every dialect


@pytest.mark.parametrize("dialect", ["onnx", "openvino", "onednn", "qlinear", "pytorch"])
def test_cli_shape_and_explain_read_empty_auto_pad_as_notset(dialect):
    flags = ["-k", "3,3", "-s", "2,2", "-p", "1,1,1,1", "--dialect", dialect, "--layout", "NCX"]
    for command in (["shape"], ["explain", "--no-compare"]):
        assert _run([*command, "1x3x7x6", *flags, "--auto-pad", ""]) == _run([*command, "1x3x7x6", *flags])


@pytest.mark.parametrize("dialect", ["onnx", "openvino", "onednn", "qlinear"])
def test_cli_pool_reads_empty_auto_pad_as_notset(tmp_path, dialect):
    x = _x(np.uint8 if dialect == "qlinear" else np.float32)
    np.save(tmp_path / "x.npy", x)
    flags = ["-k", "3,3", "-s", "2,2", "-p", "1,1,1,1", "--dialect", dialect, "--layout", "NCX", "-q"]
    assert _run(["pool", tmp_path / "x.npy", tmp_path / "empty.npy", *flags, "--auto-pad", ""])[0] == 0
    assert _run(["pool", tmp_path / "x.npy", tmp_path / "notset.npy", *flags])[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "empty.npy"), np.load(tmp_path / "notset.npy"))
