"""The documents' worked examples and docs/semantics.md section 7: the known wrong answers elsewhere."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from reference import reference_average_pool

import avgpool
from avgpool.cli.examples import EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_worked_examples(example):
    y = avgpool.average_pool(example.x, opset=example.opset, **example.attributes)
    assert y.shape == example.expected.shape
    np.testing.assert_allclose(y, example.expected, rtol=1e-6, atol=0)
    assert y.dtype == example.x.dtype


NAN = math.nan
# (input, attributes, right answer): docs/semantics.md section 7, row by row.
SECTION_7 = [
    ([1, 2, 3, 4], dict(kernel_shape=[3], strides=[3], ceil_mode=1), [2, 4]),
    ([NAN, 1, 2], dict(kernel_shape=[3]), [NAN]),
    ([1, 2, 3, 4, 5], dict(kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"), [2, 2, 3, 4, 4]),
    ([1, 2, 3, 4, 5, 6, 7], dict(kernel_shape=[1], strides=[4], auto_pad="SAME_UPPER"), [1, 5]),
    ([1, 2], dict(kernel_shape=[3], strides=[3], pads=[1, 1], ceil_mode=1, count_include_pad=1), [1]),
    ([1, 2, 3, 4, 5], dict(kernel_shape=[3], pads=[1, 1], opset=1), [1.5, 2, 3, 4, 4.5]),
    ([1e8, 1, -1e8, 1], dict(kernel_shape=[4]), [0.5]),
]


@pytest.mark.parametrize("values, attributes, right", SECTION_7, ids=[str(row[1]) for row in SECTION_7])
def test_section_7_rows(values, attributes, right):
    x = np.array(values, dtype=np.float32).reshape(1, 1, -1)
    y = avgpool.average_pool(x, **attributes)
    np.testing.assert_array_equal(y.reshape(-1), np.array(right, dtype=np.float32))
    np.testing.assert_array_equal(
        reference_average_pool(x, **attributes).reshape(-1), np.array(right, dtype=np.float32)
    )


@pytest.mark.parametrize("opset", [10, 11, 13, 19, 22])
def test_drop_rule_at_every_opset_from_10(opset):
    shape = avgpool.output_shape((1, 1, 2), [3], strides=[3], pads=[1, 1], ceil_mode=1, opset=opset)
    assert shape == (1, 1, 1)


def test_float16_accumulates_wider_than_float16():
    y = avgpool.average_pool(np.array([[[2048, 1, 1, 1]]], dtype=np.float16), [4])
    assert y.item() == 513 and y.dtype == np.float16


def test_bfloat16_is_accumulated_in_float32_or_wider():
    import ml_dtypes

    x = np.array([[[256] + [1] * 15]], dtype=ml_dtypes.bfloat16)  # bfloat16 sums would stall at 256
    y = avgpool.average_pool(x, [16])
    # the exact mean 271/16 = 16.9375 is 135.5 steps of bfloat16's 1/8 in [16, 32): a tie, rounded
    # once to even, 136/8 = 17 (worked out here, not taken from ml_dtypes' own cast); a bfloat16
    # running sum would give 256/16 = 16
    exact = Fraction(256 + 15, 16)
    steps = exact / Fraction(1, 8)
    assert 16 <= exact < 32 and steps == Fraction(271, 2)  # a tie between 135 and 136
    assert y.dtype == ml_dtypes.bfloat16 and float(y.item()) == 136 / 8


def test_valid_with_ceil_mode():
    x = np.arange(1, 8, dtype=np.float32).reshape(1, 1, 7)
    y = avgpool.average_pool(x, [3], strides=[3], auto_pad="VALID", ceil_mode=1)
    np.testing.assert_array_equal(y.reshape(-1), [2, 5, 7])


def test_ceil_without_full_window():
    # semantics 2.4: L=1, k=2, s=3, ceil -> one output
    assert avgpool.output_shape((1, 1, 1), [2], strides=[3], ceil_mode=1) == (1, 1, 1)
    np.testing.assert_array_equal(avgpool.average_pool(np.ones((1, 1, 1)), [2], strides=[3], ceil_mode=1), [[[1.0]]])


def test_empty_window_is_nan_and_padding_counts_zero():
    x = np.array([[[5.0]]])
    np.testing.assert_array_equal(avgpool.average_pool(x, [1], pads=[1, 1]), [[[NAN, 5.0, NAN]]])
    np.testing.assert_array_equal(avgpool.average_pool(x, [1], pads=[1, 1], count_include_pad=1), [[[0.0, 5.0, 0.0]]])


def test_zero_output_length_gives_an_empty_tensor():
    y = avgpool.average_pool(np.ones((1, 1, 2, 5), np.float32), [3, 1])
    assert y.shape == (1, 1, 0, 5) and y.dtype == np.float32


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4), (1, 1, 0, 4)])
def test_zero_sized_dimensions(shape):
    y = avgpool.average_pool(np.ones(shape, np.float32), [1, 2], pads=[0, 0, 0, 0])
    assert y.shape == shape[:3] + (3,)


def test_opsets_between_versions_mean_the_older_version():
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)
    for opset, ceil_allowed in [(9, False), (10, True), (13, True), (18, True)]:
        if ceil_allowed:
            avgpool.average_pool(x, [2], strides=[2], ceil_mode=1, opset=opset)
        else:
            with pytest.raises(avgpool.AvgPoolError, match="ceil_mode"):
                avgpool.average_pool(x, [2], strides=[2], ceil_mode=1, opset=opset)


def test_nxc_layout_equals_ncx_transposed():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], ceil_mode=1, count_include_pad=1)
    ncx = avgpool.average_pool(x, **attrs)
    nxc = avgpool.average_pool(np.moveaxis(x, 1, -1), layout="NXC", **attrs)
    np.testing.assert_array_equal(np.moveaxis(nxc, -1, 1), ncx)


def test_out_argument_is_filled_and_returned():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    out = np.full((1, 1, 2, 2), -1, np.float32)
    y = avgpool.average_pool(x, [2, 2], strides=[2, 2], out=out)
    assert y is out
    np.testing.assert_array_equal(out, avgpool.average_pool(x, [2, 2], strides=[2, 2]))


def test_out_overlapping_the_input_gets_the_right_values():
    """``out`` a view of the input's own memory (pooling in place): every window must see the
    input as it was, so the engine computes into a temporary first."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal(64).astype(np.float32)
    x = base.reshape(1, 1, 8, 8)
    expected = avgpool.average_pool(x.copy(), [3, 3], pads=[1, 1, 1, 1])
    pool = avgpool.AveragePool([3, 3], pads=[1, 1, 1, 1])
    y = pool(x, out=x)  # the very same array
    np.testing.assert_array_equal(y, expected)
    base2 = rng.standard_normal(65).astype(np.float32)
    x2, out2 = base2[:64].reshape(1, 1, 8, 8), base2[1:].reshape(1, 1, 8, 8)  # shifted views of one buffer
    expected2 = avgpool.average_pool(x2.copy(), [3, 3], pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(pool(x2, out=out2), expected2)
    x3 = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)  # owns its memory
    assert x3.flags.owndata
    expected3 = avgpool.average_pool(x3.copy(), [3, 3], pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(pool(x3, out=x3), expected3)
