"""avgpool against onnxruntime on random configurations where onnxruntime follows the spec.

semantics.md names where it does not, and those are kept out of the draw:
SAME padding with dilations or with kernel < stride (3.1), pads >= kernel (rejected by
onnxruntime, 5.1), more than 3 spatial axes. A window with no valid tap is NaN in avgpool (0/0,
checked against the float64 reference) and 0 in onnxruntime (4.5): kept in the draw, with
onnxruntime's 0 asserted only for the versions where it was seen.

What onnxruntime itself gives where it departs from the spec is an observation about one range of
its versions, not avgpool's contract: those asserts are conditional on the version, and next to
each the test checks avgpool's own guarantee against an exact reference, whatever the version.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from packaging.version import Version

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from reference import reference_average_pool  # noqa: E402

import avgpool  # noqa: E402

# The onnxruntime releases whose CPU AveragePool was looked at: through 1.32 (constraints.txt pins
# 1.32.0; pyproject accepts >= 1.20). Within them it sums each window in float32 and gives 0 for a
# window with no tap inside the input; a later release may do either differently, and then only
# the asserts about onnxruntime itself stand down, not those about avgpool.
ORT_SEEN = Version(ort.__version__).release[:2] <= (1, 32)

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
        # no tap inside the input: NaN (0/0) in the float64 reference, and in avgpool at exactly
        # those windows (x has no NaN of its own)
        empty = np.isnan(reference_average_pool(x.astype(np.float64), opset=opset, **attrs))
        np.testing.assert_array_equal(np.isnan(ours), empty, err_msg=context)
        if ORT_SEEN:  # onnxruntime <= 1.32 writes 0 there
            np.testing.assert_array_equal(theirs[empty], 0, err_msg=context)
        else:  # a later one: 0 or the spec's NaN, never a value from elsewhere
            assert np.all((theirs[empty] == 0) | np.isnan(theirs[empty])), context
        # onnxruntime sums in float32: its error, not ours, sets the tolerance
        np.testing.assert_allclose(ours[~empty], theirs[~empty], rtol=2e-6, atol=2e-6, err_msg=context)
        compared += 1


def test_onnxruntime_float32_sums_lose_what_avgpool_keeps():
    """semantics 7: [1e8, 1, -1e8, 1] averages to 0.5 exactly; avgpool rounds once, from the exact
    mean. onnxruntime's float32 running sum loses the 1s (1e8 + 1 == 1e8 in float32): the case
    exists to show that avgpool does not, so what onnxruntime gives is asserted only for the
    versions where the float32 sum was seen (ORT_SEEN); a later release summing exactly would
    change nothing about avgpool's answer, which is checked against the exact mean first."""
    x = np.array([[[1e8, 1, -1e8, 1]]], np.float32)
    exact = sum(Fraction(float(v)) for v in x.reshape(-1)) / 4
    assert exact == Fraction(1, 2)
    assert avgpool.average_pool(x, [4]).item() == np.float32(float(exact))
    theirs = _onnxruntime_pool(x, 19, {"kernel_shape": [4]}).item()
    if ORT_SEEN:
        assert theirs != float(exact)  # onnxruntime <= 1.32: the float32 sum, not the mean
