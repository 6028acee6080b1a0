"""onnx's own AveragePool backend node tests and the PyTorch-converted AvgPool data it ships."""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import avgpool  # noqa: E402
from avgpool.onnx import node_kwargs  # noqa: E402


@functools.lru_cache(maxsize=1)
def _node_cases():
    """onnx's AveragePool and GlobalAveragePool node cases, made by importing their two modules
    (importing a case module makes its cases; collect_testcases imports every operator's, which
    took 14 s of each test worker's start on the 2-core machine, against 3.6 s for these two)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in ("averagepool", "globalaveragepool"):
            importlib.import_module(f"{node.__name__}.{module}")
    return [c for c in node._NodeTestCases if "averagepool" in c.name.lower()]


def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _run_node(model, inputs):
    node = model.graph.node[0]
    kwargs = node_kwargs(node)
    x = inputs[0]
    if node.op_type == "GlobalAveragePool":
        kwargs = {"kernel_shape": list(x.shape[2:])}
    return avgpool.average_pool(x, opset=_opset(model), **kwargs)


CASE_NAMES = [c.name for c in _node_cases()]


def test_the_onnx_package_has_averagepool_cases():
    assert len(CASE_NAMES) >= 20


@pytest.mark.parametrize("name", CASE_NAMES)
def test_onnx_backend_node_case(name):
    case = next(c for c in _node_cases() if c.name == name)
    assert case.data_sets, name
    for inputs, outputs in case.data_sets:
        y = _run_node(case.model, inputs)
        # the onnx runner's tolerance: its hand-written expectations are rounded (semantics 7)
        np.testing.assert_allclose(y, outputs[0], rtol=case.rtol, atol=case.atol)


PYTORCH_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "pytorch-converted"
PYTORCH_CASES = sorted(p.name for p in PYTORCH_DIR.glob("test_AvgPool*"))


def _load_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def test_the_onnx_package_ships_pytorch_avgpool_data():
    assert len(PYTORCH_CASES) >= 6


def _run_graph(model, x: np.ndarray) -> np.ndarray:
    """The converted 1-D models wrap the pool in Unsqueeze/Squeeze (opset 6, axes as attribute)."""
    values = {model.graph.input[0].name: x}
    for node in model.graph.node:
        data = values[node.input[0]]
        kwargs = node_kwargs(node)
        if node.op_type == "AveragePool":
            result = avgpool.average_pool(data, opset=_opset(model), **kwargs)
        elif node.op_type == "Unsqueeze":
            result = np.expand_dims(data, tuple(kwargs["axes"]))
        elif node.op_type == "Squeeze":
            result = np.squeeze(data, tuple(kwargs["axes"]))
        else:
            raise AssertionError(f"unexpected operator {node.op_type}")
        values[node.output[0]] = result
    return values[model.graph.output[0].name]


@pytest.mark.parametrize("name", PYTORCH_CASES)
def test_pytorch_converted_avgpool(name):
    model = onnx.load(str(PYTORCH_DIR / name / "model.onnx"))
    assert sum(n.op_type == "AveragePool" for n in model.graph.node) == 1, name
    sets = sorted((PYTORCH_DIR / name).glob("test_data_set_*"))
    assert sets
    for data_set in sets:
        x = _load_tensor(data_set / "input_0.pb")
        expected = _load_tensor(data_set / "output_0.pb")
        y = _run_graph(model, x)
        assert y.shape == expected.shape
        np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-7)
