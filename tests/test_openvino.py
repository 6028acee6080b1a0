"""avgpool.openvino against the real OpenVINO runtime (CPU plugin, f32 inference), the spec's
examples and the float64 reference; every rejection checked for its message."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_close_to_exact
from reference import reference_pool

import avgpool.openvino
from avgpool import AvgPoolError

ov = pytest.importorskip("openvino")
from openvino import opset1, opset14, opset16  # noqa: E402

OPSETS = {1: opset1, 14: opset14, 16: opset16}
ROUNDING_FOR_REFERENCE = {"floor": "floor", "ceil": "ceil", "ceil_torch": "ceil_drop"}


def openvino_run(
    x: np.ndarray,
    kernel,
    *,
    exclude_pad,
    strides=None,
    pads_begin=None,
    pads_end=None,
    rounding_type="floor",
    auto_pad="explicit",
    dilations=None,
    version=16,
) -> np.ndarray:
    """Build one AvgPool node with OpenVINO's own Python API, compile it for CPU in f32 and run it."""
    n = len(kernel)
    parameter = opset1.parameter(list(x.shape), np.float32)
    attributes = dict(rounding_type=rounding_type, auto_pad=auto_pad)
    if version == 16:
        # the CPU plugin crashes on an AvgPool-16 built without dilations
        attributes["dilations"] = list(dilations) if dilations is not None else [1] * n
    node = OPSETS[version].avg_pool(
        parameter,
        list(strides) if strides is not None else [1] * n,
        list(pads_begin) if pads_begin is not None else [0] * n,
        list(pads_end) if pads_end is not None else [0] * n,
        list(kernel),
        exclude_pad,
        **attributes,
    )
    model = ov.Model([node], [parameter])
    compiled = _core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(x)[0]


_CORE = []


def _core():
    if not _CORE:
        _CORE.append(ov.Core())
    return _CORE[0]


def _random_config(rng: np.random.Generator) -> tuple[tuple[int, ...], dict]:
    """Attributes over every version, mostly valid, with the values OpenVINO refuses mixed in."""
    version = int(rng.choice([1, 14, 16]))
    n = int(rng.integers(1, 4))

    def ints(low, high, rare=None):
        values = [int(v) for v in rng.integers(low, high + 1, n)]
        if rare is not None and rng.random() < 0.04:
            values[int(rng.integers(n))] = rare
        return values

    batch = 0 if rng.random() < 0.03 else int(rng.integers(1, 3))
    channels = 0 if rng.random() < 0.03 else int(rng.integers(1, 3))
    shape = (batch, channels, *ints(1, 7))
    config = dict(
        version=version,
        kernel=ints(1, 4, rare=0),
        exclude_pad=bool(rng.random() < 0.5),
        rounding_type=str(rng.choice(["floor", "ceil", "ceil_torch"])),
    )
    if rng.random() < 0.9:
        config["strides"] = ints(1, 4, rare=0)
    auto_pad = str(rng.choice(["explicit", "explicit", "same_upper", "same_lower", "valid"]))
    config["auto_pad"] = auto_pad.upper() if rng.random() < 0.15 else auto_pad
    if rng.random() < 0.85:
        config["pads_begin"], config["pads_end"] = ints(0, 3, rare=-1), ints(0, 3, rare=-1)
    if version == 16 and rng.random() < 0.8:
        config["dilations"] = ints(1, 3, rare=0)
    return shape, config


def _negative_explicit_pads(config: dict) -> bool:
    pads = config.get("pads_begin", []) + config.get("pads_end", [])
    return config.get("auto_pad", "explicit").lower() == "explicit" and min(pads, default=0) < 0


def _random_data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.integers(-8, 9, shape).astype(np.float32)
    if x.size and rng.random() < 0.25:
        x.flat[int(rng.integers(x.size))] = np.nan
    if x.size and rng.random() < 0.15:
        x.flat[int(rng.integers(x.size))] = rng.choice([np.inf, -np.inf])
    return x


CHUNKS, PER_CHUNK = 12, 50


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_matches_the_openvino_runtime(chunk):
    """Values (NaN and the sign of zero included), shapes and rejections agree with OpenVINO."""
    rng = np.random.default_rng(20260 + chunk)
    for _ in range(PER_CHUNK):
        shape, config = _random_config(rng)
        x = _random_data(rng, shape)
        if _negative_explicit_pads(config):
            # Out of the spec's range ("integer values starting from 0"); OpenVINO 2026.4 still runs a
            # few of them (exclude_pad false, pads_begin + pads_end >= 0, and whatever its oneDNN
            # primitive allows for the stride and rounding): avgpool refuses them all.
            with pytest.raises(AvgPoolError):
                avgpool.openvino.avg_pool(x, **config)
            continue
        try:
            expected = openvino_run(x, **config)
        except Exception as err:  # noqa: BLE001 - any refusal by OpenVINO, at build or compile time
            with pytest.raises(AvgPoolError):
                avgpool.openvino.avg_pool(x, **config)
            with pytest.raises(AvgPoolError):
                avgpool.openvino.output_shape(shape, **config)
            assert str(err)
            continue
        got = avgpool.openvino.avg_pool(x, **config)
        context = f"shape {shape} {config}"
        assert got.shape == expected.shape, context
        assert avgpool.openvino.output_shape(shape, **config) == expected.shape, context
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=context)
        zeros = (got == 0) & (expected == 0)
        assert np.array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros])), context


def test_the_random_configurations_exercise_both_outcomes():
    """The generator must keep a healthy mix of accepted and refused models."""
    rng = np.random.default_rng(20260)
    outcomes = []
    for _ in range(200):
        shape, config = _random_config(rng)
        try:
            avgpool.openvino.output_shape(shape, **config)
            outcomes.append(True)
        except AvgPoolError:
            outcomes.append(False)
    assert 0.4 < np.mean(outcomes) < 0.85


# The five <layer type="AvgPool"> examples of the AvgPool-1 spec. The first two declare a 32 x 32
# output, but same_upper with stride 2 gives ceil(32 / 2) = 16 (OpenVINO computes 16 too): the
# spec's example is wrong there, and the test checks the runtime's 16.
SPEC_EXAMPLES = [
    (
        dict(
            auto_pad="same_upper", exclude_pad=True, kernel=[2, 2], pads_begin=[0, 0], pads_end=[1, 1], strides=[2, 2]
        ),
        16,
    ),
    (
        dict(
            auto_pad="same_upper", exclude_pad=False, kernel=[5, 5], pads_begin=[0, 0], pads_end=[1, 1], strides=[2, 2]
        ),
        16,
    ),
    (
        dict(auto_pad="explicit", exclude_pad=True, kernel=[5, 5], pads_begin=[1, 1], pads_end=[1, 1], strides=[3, 3]),
        10,
    ),
    (
        dict(auto_pad="explicit", exclude_pad=False, kernel=[5, 5], pads_begin=[1, 1], pads_end=[1, 1], strides=[2, 2]),
        15,
    ),
    (dict(auto_pad="valid", exclude_pad=True, kernel=[5, 5], pads_begin=[1, 1], pads_end=[1, 1], strides=[2, 2]), 14),
]


@pytest.mark.parametrize("version", [1, 14, 16])
@pytest.mark.parametrize(("attributes", "side"), SPEC_EXAMPLES)
def test_spec_layer_examples(attributes, side, version):
    x = np.random.default_rng(side).standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert avgpool.openvino.output_shape(x.shape, version=version, **attributes) == (1, 3, side, side)
    got = avgpool.openvino.avg_pool(x, version=version, **attributes)
    np.testing.assert_allclose(got, openvino_run(x, version=version, **attributes), rtol=2e-6, atol=1e-6)


def test_divisor_is_the_full_kernel_once_any_axis_is_padded():
    """semantics 4.3: the ceil window hanging past the end padding still divides by 3."""
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    for rounding_type in ("ceil", "ceil_torch"):
        got = avgpool.openvino.avg_pool(
            x, [3], strides=[2], pads_begin=[1], pads_end=[1], rounding_type=rounding_type, exclude_pad=False
        )
        np.testing.assert_allclose(got[0, 0], [1, 3, 4 / 3], rtol=1e-7)
    x2 = np.arange(1.0, 17.0).reshape(1, 1, 4, 4)  # padding on one axis makes the other's divisor full
    got = avgpool.openvino.avg_pool(x2, [2, 2], strides=[2, 2], pads_begin=[1, 0], pads_end=[0, 0], exclude_pad=False)
    np.testing.assert_array_equal(
        got[0, 0], [[(1 + 2) / 4, (3 + 4) / 4], [(5 + 6 + 9 + 10) / 4, (7 + 8 + 11 + 12) / 4]]
    )
    unpadded = avgpool.openvino.avg_pool(x2, [3, 3], strides=[2, 2], rounding_type="ceil", exclude_pad=False)
    np.testing.assert_array_equal(unpadded[0, 0], [[6, 7.5], [12, 13.5]])  # no pad: valid taps


def test_same_upper_with_ceil_gives_the_extra_window_of_semantics_5_3():
    x = np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 1, 5)
    for rounding_type, expected in (("floor", [1, 4]), ("ceil_torch", [1, 4]), ("ceil", [1, 4, -0.0])):
        got = avgpool.openvino.avg_pool(
            x, [1], strides=[3], auto_pad="same_upper", rounding_type=rounding_type, exclude_pad=True
        )
        np.testing.assert_array_equal(got[0, 0], expected)
        np.testing.assert_array_equal(np.signbit(got[0, 0]), np.signbit(expected))


@pytest.mark.parametrize(
    ("length", "kernel", "stride", "dilation", "last"),
    [
        (5, 1, 3, 1, -0.0),  # starts one past the end: oneDNN's count is -1
        (4, 1, 2, 1, np.nan),  # starts exactly at the end: count 0
        (4, 2, 7, 2, -0.0),  # a whole dilation step past the end
        (4, 2, 4, 2, np.nan),  # less than a dilation step past the end
    ],
)
def test_ceil_windows_past_the_end_as_the_cpu_plugin_divides_them(length, kernel, stride, dilation, last):
    x = np.arange(1.0, length + 1, dtype=np.float32).reshape(1, 1, length)
    attributes = dict(strides=[stride], dilations=[dilation], rounding_type="ceil")
    for exclude_pad in (True, False):
        got = avgpool.openvino.avg_pool(x, [kernel], exclude_pad=exclude_pad, **attributes)
        np.testing.assert_array_equal(got[0, 0, -1:], [last])
        assert np.signbit(got[0, 0, -1]) == np.signbit(last) or np.isnan(last)
        np.testing.assert_array_equal(got, openvino_run(x, [kernel], exclude_pad=exclude_pad, **attributes))


def test_two_axes_past_the_end_give_plus_zero():
    x = np.arange(1.0, 26.0, dtype=np.float32).reshape(1, 1, 5, 5)
    got = avgpool.openvino.avg_pool(x, [1, 1], strides=[3, 3], rounding_type="ceil", exclude_pad=True)
    assert got[0, 0, 2, 2] == 0 and not np.signbit(got[0, 0, 2, 2])
    assert got[0, 0, 0, 2] == 0 and np.signbit(got[0, 0, 0, 2])


def test_a_window_that_dilation_carries_over_the_input_is_nan():
    x = np.array([[[1.0, 2.0, 3.0]]], dtype=np.float32)
    attributes = dict(pads_begin=[1], pads_end=[1], dilations=[4])
    assert np.isnan(avgpool.openvino.avg_pool(x, [2], exclude_pad=True, **attributes)[0, 0, 0])
    assert avgpool.openvino.avg_pool(x, [2], exclude_pad=False, **attributes)[0, 0, 0] == 0
    assert np.isnan(openvino_run(x, [2], exclude_pad=True, **attributes)[0, 0, 0])


def test_an_empty_spatial_axis_inside_pads_is_defined():
    """OpenVINO accepts it but returns uninitialised memory; avgpool gives the divisor rule's answer."""
    x = np.zeros((1, 1, 0), np.float32)
    np.testing.assert_array_equal(
        avgpool.openvino.avg_pool(x, [2], pads_begin=[1], pads_end=[1], exclude_pad=False), [[[0.0]]]
    )
    assert np.isnan(avgpool.openvino.avg_pool(x, [2], pads_begin=[1], pads_end=[1], exclude_pad=True)).all()


def test_pads_are_ignored_unless_explicit_even_negative_or_too_long():
    x = np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 1, 5)
    for auto_pad in ("valid", "same_upper", "same_lower", "SAME_LOWER"):
        base = avgpool.openvino.avg_pool(x, [2], auto_pad=auto_pad, exclude_pad=True)
        for pads in ([-3], [9]):
            got = avgpool.openvino.avg_pool(x, [2], auto_pad=auto_pad, pads_begin=pads, pads_end=pads, exclude_pad=True)
            np.testing.assert_array_equal(got, base)
            np.testing.assert_array_equal(
                got, openvino_run(x, [2], auto_pad=auto_pad, pads_begin=pads, pads_end=pads, exclude_pad=True)
            )


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_dtypes_and_out(dtype):
    x = (np.arange(24, dtype=np.float64).reshape(1, 2, 3, 4) * 0.5).astype(dtype)
    got = avgpool.openvino.avg_pool(x, [2, 2], exclude_pad=True, version=1)
    assert got.dtype == np.dtype(dtype)
    out = np.empty(got.shape, dtype)
    assert avgpool.openvino.avg_pool(x, [2, 2], exclude_pad=True, out=out) is out
    np.testing.assert_array_equal(out, got)


REFERENCE_CASES = 60


def test_matches_the_float64_reference():
    """Accepted random configurations against reference_pool; the only allowed difference is a ceil
    window starting past the end, which the reference calls NaN and OpenVINO's kernels -0/+0."""
    rng = np.random.default_rng(7)
    checked = 0
    while checked < REFERENCE_CASES:
        shape, config = _random_config(rng)
        try:
            expected_shape = avgpool.openvino.output_shape(shape, **config)
        except AvgPoolError:
            continue
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4)
        if rng.random() < 0.3:
            x.flat[int(rng.integers(x.size))] = np.nan
        got = avgpool.openvino.avg_pool(x, **config)
        assert got.shape == expected_shape
        n = len(config["kernel"])
        auto_pad = config.get("auto_pad", "explicit").lower()
        explicit = auto_pad == "explicit"
        pads = (
            list(zip(config.get("pads_begin") or [0] * n, config.get("pads_end") or [0] * n))
            if explicit
            else [(0, 0)] * n
        )
        exact = reference_pool(
            x,
            config["kernel"],
            config.get("strides") or [1] * n,
            config.get("dilations") or [1] * n,
            pads,
            auto_pad,
            ROUNDING_FOR_REFERENCE[config["rounding_type"]],
            "valid" if config["exclude_pad"] else "full_if_padded",
        )
        past_the_end = np.isnan(exact) & (got == 0)
        assert config["rounding_type"] == "ceil" or not past_the_end.any()
        exact = np.where(past_the_end, 0.0, exact)
        taps = int(np.prod(config["kernel"]))
        assert_close_to_exact(
            got, exact, np.full(exact.shape, np.max(np.abs(x[np.isfinite(x)]), initial=0.0)), taps, str(config)
        )
        checked += 1


X = np.zeros((1, 1, 4, 4), np.float32)
LABEL = "OpenVINO AvgPool-16: "


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, version=15), ["`version` is 15", "1, 14, 16"]),
        (lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, version=True), ["`version` is True"]),
        (lambda: avgpool.openvino.output_shape("1x1x4", [2], exclude_pad=True), [LABEL, "`input_shape`", "'1x1x4'"]),
        (
            lambda: avgpool.openvino.output_shape((1, -1, 4), [2], exclude_pad=True),
            [LABEL, "`input_shape`", "non-negative"],
        ),
        (
            lambda: avgpool.openvino.output_shape((1, 1, 4, 4, 4, 4), [2] * 4, exclude_pad=True),
            [LABEL, "rank 6", "3, 4 or 5"],
        ),
        (lambda: avgpool.openvino.avg_pool(np.zeros((1, 4)), [2], exclude_pad=True), [LABEL, "rank 2"]),
        (lambda: avgpool.openvino.avg_pool(np.zeros((0, 1, 4)), [2], exclude_pad=True), [LABEL, "batch", "(0, 1, 4)"]),
        (
            lambda: avgpool.openvino.avg_pool(np.zeros((1, 0, 4)), [2], exclude_pad=True),
            [LABEL, "channel", "(1, 0, 4)"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, dilations=[1, 1], version=14),
            ["OpenVINO AvgPool-14: ", "`dilations`", "AvgPool-16"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, rounding_type="ceil_torch", version=1),
            ["OpenVINO AvgPool-1: ", "`rounding_type` 'ceil_torch'", "AvgPool-14"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, pads_begin=[0, 2], pads_end=[0, 0]),
            [LABEL, "`pads_begin` (0, 2)", "`exclude_pad`", "axis 1", "extent 2"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(
                X, [2, 2], exclude_pad=True, pads_begin=[0, 0], pads_end=[3, 0], dilations=[2, 1]
            ),
            [LABEL, "`pads_end` (3, 0)", "axis 0", "extent 3"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 3], exclude_pad=True, dilations=[1, 2], rounding_type="ceil"),
            [LABEL, "`kernel` (2, 3)", "extent 5", "axis 1", "4 + 0 + 0"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(
                X, [5, 1], exclude_pad=True, auto_pad="valid", pads_begin=[1, 1], pads_end=[1, 1]
            ),
            [LABEL, "`kernel` (5, 1)", "4 + 0 + 0"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, auto_pad="same"),
            [LABEL, "`auto_pad`", "'same'"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad=True, rounding_type="round"),
            [LABEL, "`rounding_type`", "'round'"],
        ),
        (lambda: avgpool.openvino.avg_pool(X, [2, 2], exclude_pad="yes"), [LABEL, "`exclude_pad`", "'yes'"]),
        (lambda: avgpool.openvino.avg_pool(X, [2], exclude_pad=True), [LABEL, "`kernel`", "2 spatial axes"]),
        (lambda: avgpool.openvino.avg_pool(X, [2, 0], exclude_pad=True), [LABEL, "`kernel`", "positive"]),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], strides=[0, 1], exclude_pad=True),
            [LABEL, "`strides`", "positive"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], dilations=[1, 0], exclude_pad=True),
            [LABEL, "`dilations`", "positive"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], pads_begin=[-1, 0], exclude_pad=False),
            [LABEL, "`pads_begin`", ">= 0"],
        ),
        (
            lambda: avgpool.openvino.avg_pool(X, [2, 2], pads_end=[0], auto_pad="valid", exclude_pad=False),
            [LABEL, "`pads_end`", "1 values"],
        ),
        (lambda: avgpool.openvino.avg_pool(X.astype(np.int32), [2, 2], exclude_pad=True), [LABEL, "int32", "float32"]),
    ],
)
def test_every_rejection_names_the_dialect_and_the_attribute(call, fragments):
    with pytest.raises(AvgPoolError) as raised:
        call()
    for fragment in fragments:
        assert fragment in str(raised.value)
