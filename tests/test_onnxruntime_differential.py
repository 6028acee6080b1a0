"""avgpool against onnxruntime on random configurations where onnxruntime follows the spec.

semantics.md names where it does not, and those are kept out of the draw:
SAME padding with dilations or with kernel < stride (3.1), pads >= kernel (rejected by
onnxruntime, 5.1), more than 3 spatial axes. A window with no valid tap is NaN in avgpool and 0
in onnxruntime (4.5): that divergence is asserted, not skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import avgpool  # noqa: E402

OPSETS = [7, 10, 11, 19, 22]


def _random_configuration(rng: np.random.Generator):
    opset = int(rng.choice(OPSETS))
    ndim = int(rng.integers(1, 4))
    spatial = [int(rng.integers(1, 12 if ndim < 3 else 7)) for _ in range(ndim)]
    kernel = [int(rng.integers(1, 5)) for _ in range(ndim)]
    strides = [int(rng.integers(1, 4)) for _ in range(ndim)]
    attrs = {"kernel_shape": kernel, "strides": strides}
    auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    if auto_pad.startswith("SAME"):
        attrs["strides"] = [min(s, k) for s, k in zip(strides, kernel)]  # k < s: onnxruntime shifts windows
    elif auto_pad == "NOTSET" and rng.random() < 0.7:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel] + [int(rng.integers(0, k)) for k in kernel]
    if opset >= 19 and not auto_pad.startswith("SAME") and rng.random() < 0.5:
        attrs["dilations"] = [int(rng.integers(1, 3)) for _ in range(ndim)]
    if opset >= 10 and rng.random() < 0.5:
        attrs["ceil_mode"] = 1
    if rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + spatial
    return opset, shape, attrs


def _onnxruntime_pool(x: np.ndarray, opset: int, attrs: dict) -> np.ndarray:
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = 3  # older shape inference warns about the ceil drop rule (semantics 2.2)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _valid_for_onnxruntime(shape, attrs) -> bool:
    try:
        out = avgpool.output_shape(shape, **{k: v for k, v in attrs.items() if k != "count_include_pad"})
    except avgpool.AvgPoolError:
        return False
    return all(n > 0 for n in out)


@pytest.mark.parametrize("seed", range(8))
def test_matches_onnxruntime_on_random_configurations(seed):
    rng = np.random.default_rng(seed)
    compared = 0
    while compared < 40:
        opset, shape, attrs = _random_configuration(rng)
        if not _valid_for_onnxruntime(shape, attrs):
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        ours = avgpool.average_pool(x, opset=opset, **attrs)
        theirs = _onnxruntime_pool(x, opset, attrs)
        context = f"opset={opset} shape={shape} attrs={attrs}"
        assert ours.shape == theirs.shape, context
        empty = np.isnan(ours)  # no tap inside the input: avgpool NaN (0/0), onnxruntime 0
        np.testing.assert_array_equal(theirs[empty], 0, err_msg=context)
        # onnxruntime sums in float32: its error, not ours, sets the tolerance
        np.testing.assert_allclose(ours[~empty], theirs[~empty], rtol=2e-6, atol=2e-6, err_msg=context)
        compared += 1


def test_onnxruntime_float32_sums_lose_what_avgpool_keeps():
    """semantics 7: [1e8, 1, -1e8, 1] gives 0.5; onnxruntime's float32 sums give something else."""
    x = np.array([[[1e8, 1, -1e8, 1]]], np.float32)
    assert avgpool.average_pool(x, [4]).item() == 0.5
    assert _onnxruntime_pool(x, 19, {"kernel_shape": [4]}).item() != 0.5
