"""avgpool.onednn: the documented formula on worked examples, NXC against NCX, the float64
reference, and every rejection checked for its message. (No oneDNN runtime is installed here.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_close_to_exact
from reference import reference_pool

import avgpool.onednn
from avgpool import AvgPoolError

DTYPES = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
AUTO_PAD_FOR_REFERENCE = {"None": "explicit", "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}


def _nxc(x_ncx: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x_ncx, 1, -1))


# The doc's formula, dst = sum(src over the window) / DENOM, worked by hand on a 1 x 1 x 3 x 4 image
# (given in NXC, the default), kernel 2 x 2, stride 2, one pixel of padding all round.
IMAGE = np.arange(1.0, 13.0, dtype=np.float32).reshape(1, 3, 4, 1)  # rows [1..4], [5..8], [9..12]
PADDED = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1])


def test_doc_formula_denominator_is_the_kernel_without_exclude_pad():
    got = avgpool.onednn.avg_pool(IMAGE, [2, 2], exclude_pad=False, **PADDED)
    assert got.shape == (1, 2, 3, 1)
    np.testing.assert_allclose(
        got[0, :, :, 0], [[1 / 4, (2 + 3) / 4, 4 / 4], [(5 + 9) / 4, (6 + 7 + 10 + 11) / 4, (8 + 12) / 4]], rtol=1e-7
    )


def test_doc_formula_denominator_is_the_overlap_with_exclude_pad():
    got = avgpool.onednn.avg_pool(IMAGE, [2, 2], exclude_pad=True, **PADDED)
    np.testing.assert_allclose(
        got[0, :, :, 0], [[1, (2 + 3) / 2, 4], [(5 + 9) / 2, (6 + 7 + 10 + 11) / 4, (8 + 12) / 2]], rtol=1e-7
    )


def test_ceil_rounding_keeps_the_window_starting_in_the_end_padding():
    """No drop rule (semantics 2.3): length 4, kernel 3, stride 2, pads 1/1 -> 3 windows."""
    x = np.array([[[1.0], [2.0], [3.0], [4.0]]], dtype=np.float32)
    attributes = dict(strides=[2], pads_begin=[1], pads_end=[1], exclude_pad=True)
    assert avgpool.onednn.output_shape(x.shape, [3], rounding_type="ceil", **attributes) == (1, 3, 1)
    np.testing.assert_allclose(
        avgpool.onednn.avg_pool(x, [3], rounding_type="ceil", **attributes)[0, :, 0], [1.5, 3, 4]
    )
    assert avgpool.onednn.avg_pool(x, [3], **attributes).shape == (1, 2, 1)


@pytest.mark.parametrize(
    ("auto_pad", "expected"),
    [
        ("SAME_UPPER", [1.5, 3.5, 5]),  # pads 0 / 1 (the odd pixel at the end)
        ("SAME_LOWER", [1, 2.5, 4.5]),  # pads 1 / 0
        ("VALID", [1.5, 3.5]),
    ],
)
def test_auto_pad_overwrites_the_explicit_pads(auto_pad, expected):
    x = np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 5, 1)
    for pads in ([0], [1]):
        got = avgpool.onednn.avg_pool(
            x, [2], strides=[2], pads_begin=pads, pads_end=pads, exclude_pad=True, auto_pad=auto_pad
        )
        np.testing.assert_allclose(got[0, :, 0], expected)
        assert avgpool.onednn.output_shape(
            x.shape, [2], strides=[2], pads_begin=pads, pads_end=pads, exclude_pad=True, auto_pad=auto_pad
        ) == (1, len(expected), 1)


def test_same_upper_with_ceil_keeps_the_extra_window_when_it_holds_input():
    """SAME pads first, then the rounding on the padded length (oneDNN's shape inference)."""
    x = np.arange(1.0, 8.0, dtype=np.float32).reshape(1, 1, 7)
    common = dict(strides=[3], pads_begin=[0], pads_end=[0], exclude_pad=True, data_format="NCX", auto_pad="SAME_UPPER")
    assert avgpool.onednn.output_shape(x.shape, [2], rounding_type="ceil", **common) == (1, 1, 3)
    np.testing.assert_allclose(avgpool.onednn.avg_pool(x, [2], rounding_type="ceil", **common)[0, 0], [1.5, 4.5, 7])


def _random_case(rng: np.random.Generator):
    """A random valid configuration: (NCX shape, attributes without data_format)."""
    while True:
        n = int(rng.integers(1, 4))
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *(int(v) for v in rng.integers(1, 8, n)))
        exclude_pad = bool(rng.random() < 0.6)
        attributes = dict(
            kernel=[int(v) for v in rng.integers(1, 5, n)],
            strides=[int(v) for v in rng.integers(1, 4, n)],
            pads_begin=[int(v) for v in rng.integers(0, 3, n)],
            pads_end=[int(v) for v in rng.integers(0, 3, n)],
            exclude_pad=exclude_pad,
            rounding_type=str(rng.choice(["floor", "ceil"])) if exclude_pad else "floor",
            auto_pad=str(rng.choice(["None", "None", "SAME_UPPER", "SAME_LOWER", "VALID"])),
        )
        try:
            avgpool.onednn.output_shape(shape, data_format="NCX", **attributes)
        except AvgPoolError:
            continue
        return shape, attributes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nxc_equals_ncx_transposed(dtype):
    rng = np.random.default_rng(11)
    for _ in range(60):
        shape, attributes = _random_case(rng)
        x = rng.standard_normal(shape).astype(dtype)
        ncx = avgpool.onednn.avg_pool(x, data_format="NCX", **attributes)
        nxc = avgpool.onednn.avg_pool(_nxc(x), **attributes)
        assert nxc.dtype == ncx.dtype == dtype
        assert avgpool.onednn.output_shape(_nxc(x).shape, **attributes) == nxc.shape
        np.testing.assert_array_equal(nxc, _nxc(ncx), err_msg=str(attributes))


def test_matches_the_float64_reference():
    rng = np.random.default_rng(12)
    for case in range(60):
        shape, attributes = _random_case(rng)
        dtype = DTYPES[case % len(DTYPES)]
        data_format = "NXC" if case % 2 else "NCX"
        x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3)).astype(dtype)
        if case % 5 == 0:
            x.flat[int(rng.integers(x.size))] = np.inf
        if data_format == "NXC":
            x = _nxc(x)
        got = avgpool.onednn.avg_pool(x, data_format=data_format, **attributes)
        n = len(attributes["kernel"])
        exact = reference_pool(
            x,
            attributes["kernel"],
            attributes["strides"],
            [1] * n,
            list(zip(attributes["pads_begin"], attributes["pads_end"])),
            AUTO_PAD_FOR_REFERENCE[attributes["auto_pad"]],
            attributes["rounding_type"],
            "valid" if attributes["exclude_pad"] else "full",
            data_format,
        )
        finite = x.astype(np.float64)[np.isfinite(x.astype(np.float64))]
        scale = np.full(exact.shape, np.max(np.abs(finite), initial=0.0))
        assert_close_to_exact(got, exact, scale, int(np.prod(attributes["kernel"])), str(attributes))


def test_batch_and_channels_of_zero_give_empty_outputs():
    for shape in ((0, 4, 4, 3), (1, 4, 4, 0)):
        got = avgpool.onednn.avg_pool(
            np.zeros(shape, np.float32), [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True
        )
        assert got.shape == shape[:1] + (2, 2) + shape[-1:]


def test_out_is_filled_in_place():
    x = np.arange(16.0, dtype=np.float32).reshape(1, 4, 4, 1)
    out = np.empty((1, 2, 2, 1), np.float32)
    got = avgpool.onednn.avg_pool(
        x, [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=False, out=out
    )
    assert got is out
    np.testing.assert_array_equal(out[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]])


X = np.zeros((1, 4, 4, 2), np.float32)
OK = dict(strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0])
LABEL = "oneDNN AvgPool: "


def _call(x=X, kernel=(2, 2), **changes):
    attributes = dict(OK, exclude_pad=True)
    attributes.update(changes)
    return avgpool.onednn.avg_pool(x, list(kernel), **attributes)


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (
            lambda: _call(rounding_type="ceil", exclude_pad=False),
            ["`rounding_type` 'ceil'", "`exclude_pad` false", "unsupported"],
        ),
        (lambda: _call(pads_begin=[2, 0]), ["`pads_begin`/`pads_end` (2, 0)", "axis 0", "`exclude_pad`", "kernel (2)"]),
        (lambda: _call(pads_end=[0, 3]), ["`pads_begin`/`pads_end` (0, 3)", "axis 1"]),
        (
            lambda: _call(x=np.zeros((1, 0, 4, 1), np.float32), pads_begin=[1, 0], pads_end=[1, 0]),
            ["axis 0 has length 0", "`exclude_pad`"],
        ),
        (
            lambda: _call(
                x=np.zeros((1, 5, 1), np.float32),
                kernel=[1],
                strides=[3],
                pads_begin=[0],
                pads_end=[0],
                rounding_type="ceil",
            ),
            ["`rounding_type` 'ceil'", "axis 0", "past the input"],
        ),
        (
            lambda: _call(
                x=np.zeros((1, 5, 1), np.float32),
                kernel=[1],
                strides=[3],
                pads_begin=[0],
                pads_end=[0],
                rounding_type="ceil",
                auto_pad="SAME_UPPER",
            ),
            ["`rounding_type` 'ceil'", "past the input"],
        ),
        (lambda: _call(x=np.zeros((1, 4), np.float32), kernel=[2]), ["rank 2", "3, 4 or 5"]),
        (
            lambda: avgpool.onednn.output_shape(
                (1, 2, 2, 2, 2, 1), [1] * 4, strides=[1] * 4, pads_begin=[0] * 4, pads_end=[0] * 4, exclude_pad=True
            ),
            ["rank 6"],
        ),
        (
            lambda: avgpool.onednn.output_shape("1x4x4x1", [2, 2], exclude_pad=True, **OK),
            ["`input_shape`", "'1x4x4x1'"],
        ),
        (lambda: avgpool.onednn.output_shape((1, 4, 4, 1.0), [2, 2], exclude_pad=True, **OK), ["`input_shape`", "1.0"]),
        (
            lambda: avgpool.onednn.output_shape((1, -4, 4, 1), [2, 2], exclude_pad=True, **OK),
            ["`input_shape`", "non-negative"],
        ),
        (lambda: _call(auto_pad="same_upper"), ["`auto_pad`", "'same_upper'", "'SAME_UPPER'"]),
        (lambda: _call(auto_pad="NOTSET"), ["`auto_pad`", "'NOTSET'"]),
        (lambda: _call(rounding_type="ceil_torch"), ["`rounding_type`", "'ceil_torch'"]),
        (lambda: _call(data_format="NHWC"), ["`data_format`", "'NHWC'"]),
        (lambda: _call(exclude_pad=None), ["`exclude_pad`", "None"]),
        (lambda: _call(kernel=[2]), ["`kernel`", "2 spatial axes"]),
        (lambda: _call(strides=[1, 0]), ["`strides`", "positive"]),
        (lambda: _call(pads_end=[0, -1], exclude_pad=False), ["`pads_end`", ">= 0"]),
        (lambda: _call(x=X.astype(np.float64)), ["float64", "float32, bfloat16 or float16"]),
    ],
)
def test_every_rejection_names_the_dialect_and_the_attribute(call, fragments):
    with pytest.raises(AvgPoolError) as raised:
        call()
    assert str(raised.value).startswith(LABEL)
    for fragment in fragments:
        assert fragment in str(raised.value)
