"""The exact float32 path sweeps a slab whose running sums would take more than
tuning's exact_held_bytes in boxes of its later axes' outputs (NXC: and of its channels), each
reading the input its windows cover (tables.running_boxes, kernels/running.py). The boxes sum
the same integers, so every output has the same bits as in one sweep, whatever the boxes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tiles import float_case, float_tiling, pool_float_in_tiles, same_bits

import avgpool
from avgpool._core import tables, tuning
from avgpool._core.spec import Layout
from avgpool._ops import onnx as onnx_dialect

ONE_SWEEP = 1 << 60


def exact_boxes(held_bytes: int, min_outputs: int = 16):
    """Every float32 pool on the exact path (from kernels of one tap), in boxes whose running
    sums take at most ``held_bytes`` (8: a box of one output, or one channel, wherever a cut
    can)."""
    return tuning.tuned(exact_running_min_kernel=1, exact_held_bytes=held_bytes, exact_box_min_outputs=min_outputs)


@st.composite
def few_row_cases(draw):
    """Slabs of a short first axis (where boxes are cut) and any later axes, windows, pads,
    rounding and divisor; a NaN sends its slab to the float64 kernels."""
    ndim = draw(st.integers(1, 4))
    spatial = [draw(st.integers(1, 4))] + [draw(st.integers(1, 13 if ndim < 4 else 6)) for _ in range(ndim - 1)]
    kernel = [draw(st.integers(1, 6)) for _ in range(ndim)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs = dict(
        kernel_shape=kernel,
        strides=[draw(st.integers(1, 3)) for _ in range(ndim)],
        auto_pad=auto_pad,
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        pads=[draw(st.integers(0, k + 1)) for k in kernel * 2] if auto_pad == "NOTSET" else None,
        layout=draw(st.sampled_from(["NCX", "NXC"])),
    )
    n = draw(st.integers(1, 2))
    shape = (
        [n, draw(st.integers(1, 3)), *spatial] if attrs["layout"] == "NCX" else [n, *spatial, draw(st.integers(1, 9))]
    )
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(shape).astype(np.float32)
    if draw(st.booleans()):
        x.reshape(-1)[draw(st.integers(0, x.size - 1))] = np.nan
    return x, attrs


@settings(max_examples=150, deadline=None)
@given(case=few_row_cases(), held_bytes=st.sampled_from([8, 64, 400]), min_outputs=st.sampled_from([1, 2, 16]))
def test_boxes_give_the_one_sweep_bits(case, held_bytes, min_outputs):
    x, attrs = case
    with exact_boxes(ONE_SWEEP):
        try:
            whole = avgpool.average_pool(x, **attrs)
        except avgpool.AvgPoolError:
            return
    with exact_boxes(held_bytes, min_outputs):
        boxed = avgpool.average_pool(x, **attrs)
    assert same_bits(boxed, whole), (x.shape, attrs)


@pytest.mark.parametrize(
    "shape, kernel, pads, strides, layout",
    [
        ((1, 2, 3, 11, 6, 21), [5, 5, 3, 7], [2, 2, 1, 3, 2, 2, 1, 3], [1, 3, 1, 1], "NCX"),  # two NCX axes cut
        ((1, 2, 5, 7, 9, 4), [3, 5, 5, 3], [1, 2, 2, 1, 1, 2, 2, 1], [1, 1, 2, 1], "NXC"),  # every axis and channel
        ((2, 1, 33, 150), [5, 5], [2, 2, 2, 2], [1, 1], "NXC"),  # one row: the channels cut, read from the input
        ((2, 2, 13, 9, 5), [5, 7, 3], [3, 0, 1, 1, 6, 2], [2, 3, 1], "NXC"),  # windows past the input: empty ones
        ((3, 40, 300), [5], [2, 2], [1], "NXC"),  # 1-D: channels only
    ],
)
@pytest.mark.parametrize("held_bytes", [8, 800])
def test_boxes_cut_along_several_axes_give_the_one_sweep_bits(shape, kernel, pads, strides, layout, held_bytes):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for ceil_mode in (False, True):
        attrs = dict(pads=pads, strides=strides, layout=layout, ceil_mode=ceil_mode, count_include_pad=ceil_mode)
        with exact_boxes(ONE_SWEEP):
            whole = avgpool.average_pool(x, kernel, **attrs)
        with exact_boxes(held_bytes):
            whole_box = [*whole.shape[2:], 1] if layout == "NCX" else [*whole.shape[1:]]
            assert (_plan_of(x, kernel, attrs).box_outputs < whole_box).any()
            assert same_bits(avgpool.average_pool(x, kernel, **attrs), whole)


def _plan_of(x: np.ndarray, kernel: list[int], attrs: dict) -> tables.RunningPlan:
    ncx = attrs["layout"] == "NCX"
    spatial = x.shape[2:] if ncx else x.shape[1:-1]
    channels = 1 if ncx else x.shape[-1]
    spec = onnx_dialect.make_spec(
        22,
        x.shape if ncx else (x.shape[0], channels, *spatial),
        kernel,
        pads=attrs["pads"],
        strides=attrs["strides"],
        ceil_mode=attrs["ceil_mode"],
        count_include_pad=attrs["count_include_pad"],
    )
    return tables.running_plan(
        spec, spatial, channels, Layout[attrs["layout"]], tables.kernel_tables(spec, spatial, channels)
    )


def test_tiles_in_boxes_give_the_whole_bits():
    """avgpool._core.tiles plans each tile's running sums on its own geometry (its windows may start
    inside its input): boxed, the tiles still give the whole array's bits."""
    rng = np.random.default_rng(17)
    checked = 0
    with exact_boxes(64, 1):
        for _ in range(60):
            x, attrs = float_case(rng)
            x = x.astype(np.float32)
            try:
                whole = avgpool.average_pool(x, **attrs)
            except avgpool.AvgPoolError:
                continue
            assert same_bits(pool_float_in_tiles(x, float_tiling(x, attrs), rng), whole), (x.shape, attrs)
            checked += 1
    assert checked > 40


def _plan(shape: tuple[int, ...], kernel: list[int], layout: str) -> tuple[tables.RunningPlan, list[int]]:
    ncx = layout == "NCX"
    spatial = shape[2:] if ncx else shape[1:-1]
    channels = 1 if ncx else shape[-1]
    spec = onnx_dialect.make_spec(
        22, shape if ncx else (shape[0], shape[-1], *spatial), kernel, pads=[k // 2 for k in kernel] * 2
    )
    plan = tables.running_plan(spec, spatial, channels, Layout[layout], tables.kernel_tables(spec, spatial, channels))
    return plan, [g.out for g in tables.resolve(spec, spatial)] + [channels]


def test_boxes_are_cut_only_where_the_rows_are_big():
    budget = tuning.DEFAULT.exact_held_bytes // 8
    # ordinary slabs: one sweep, holding a row of the later axes per level as before
    for shape, kernel, layout in [
        ((8, 112, 112, 64), [5, 5], "NXC"),
        ((1, 16, 256, 256), [7, 7], "NCX"),
        ((1, 1, 128, 512, 512), [5, 5, 5], "NCX"),
        ((1, 512, 1024, 64), [5, 5], "NXC"),
    ]:
        plan, whole = _plan(shape, kernel, layout)
        assert plan.box_outputs.tolist() == whole
    # two rows of 2**17 x 64: boxes of the second axis's outputs, every channel, within the budget
    plan, whole = _plan((1, 2, 1 << 17, 64), [5, 5], "NXC")
    boxes = plan.box_outputs.tolist()
    assert boxes[0] == whole[0] and boxes[2] == 64 and 1000 < boxes[1] < whole[1]
    assert budget / 2 < plan.int_size <= budget
    # many channels over few positions: the channels are cut (no input read twice)
    plan, whole = _plan((1, 2, 5, 1 << 20), [5, 5], "NXC")
    assert plan.box_outputs.tolist()[:2] == whole[:2] and plan.box_outputs[2] < whole[2]
    assert plan.int_size <= budget
    # 3-D NCX of a short first axis: its second axis is cut, never the contiguous one
    plan, whole = _plan((1, 1, 2, 2048, 4096), [5, 5, 5], "NCX")
    assert plan.box_outputs[1] < whole[1] and plan.box_outputs.tolist()[2:] == whole[2:]
    assert plan.int_size <= budget


@pytest.mark.parametrize("threads", [False, True])
def test_slabs_the_exact_path_leaves_to_float64_give_their_own_bits(threads):
    """The exact kernel marks the slabs whose values it cannot sum (NaN, Inf, too wide a range)
    and the float64 kernels pool them after it (pools.FloatFallback): in runs of neighbours, or
    all at once shared between threads. Each slab gets the bits it gets pooled alone, and the
    windows of a NaN or an Inf exactly what the definition gives."""
    rng = np.random.default_rng(7)
    shape = (2, 24, 128, 128) if threads else (1, 12, 20, 20)
    x = rng.standard_normal(shape).astype(np.float32)
    spoilt = {1: np.nan, 2: np.inf, 3: 1e30, 7: np.nan, 8: -np.inf, 11: np.nan}  # 3: a range too wide
    for plane, value in spoilt.items():
        x[0, plane, 5, 5] = value
    pool = avgpool.AveragePool([5, 5], pads=[2, 2, 2, 2])
    whole = pool(x)
    for c in range(shape[1]):
        alone = pool(np.ascontiguousarray(x[:1, c : c + 1]))
        assert same_bits(whole[:1, c : c + 1], alone), c
    expected = onnx_dialect.average_pool(x.astype(np.float64), [5, 5], pads=[2, 2, 2, 2]).astype(np.float32)
    assert np.array_equal(np.isnan(whole), np.isnan(expected))
    finite = np.isfinite(expected)
    assert np.array_equal(whole[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)])
    assert np.allclose(whole[finite], expected[finite], rtol=1e-6, atol=1e-6)
    everywhere = x.copy()
    everywhere[:, :, 0, 0] = np.nan  # every slab to the float64 kernels
    assert same_bits(pool(everywhere)[:, 3:4], pool(np.ascontiguousarray(everywhere[:, 3:4])))
