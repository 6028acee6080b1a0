"""Property tests: average_pool against the independent float64 reference, all attributes at once,
over edge arrays (NaN, +-Inf, huge dynamic range, byte-swapped, non-contiguous, size 0 and 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import FLOAT_DTYPES, assert_close_to_exact
from hypothesis import given, note, settings
from hypothesis import strategies as st
from reference import reference_pool

import avgpool
from avgpool._core import engine, tables, tuning

OPSETS = [1, 7, 10, 11, 19, 22]


def block_sums_from(taps: int):
    """Make the engine take the block-partial-sum path from ``taps`` taps on, whatever the
    measured crossovers (tuning's block_sums_min_kernel, contiguous_block_sums_min_kernel) are, so
    that path is tested cheaply."""
    return tuning.tuned(block_sums_min_kernel=taps, contiguous_block_sums_min_kernel=taps)


def in_bands():
    """Pool every slab in bands of one output of the first axis (the path of slabs too big for
    the memory budgets, tuning's group_scratch_bytes and overlapping_group_scratch_bytes;
    band_scratch_bytes 1 makes bands of one output)."""
    return tuning.tuned(group_scratch_bytes=1, overlapping_group_scratch_bytes=1, band_scratch_bytes=1)


@st.composite
def configurations(draw):
    opset = draw(st.sampled_from(OPSETS))
    ndim = draw(st.integers(1, 3))
    small = ndim == 3  # the reference is a Python loop: keep 3-D cases small
    spatial = tuple(draw(st.integers(0 if not small else 1, 4 if small else 7)) for _ in range(ndim))
    kernel = [draw(st.integers(1, 3 if small else 4)) for _ in range(ndim)]
    strides = [draw(st.integers(1, 3)) for _ in range(ndim)]
    dilations = [draw(st.integers(1, 3)) for _ in range(ndim)] if opset >= 19 and draw(st.booleans()) else None
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = None
    if auto_pad == "NOTSET" and draw(st.booleans()):
        pads = [draw(st.integers(0, k + 1)) for k in kernel] + [draw(st.integers(0, k + 1)) for k in kernel]
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, auto_pad=auto_pad, dilations=dilations, opset=opset)
    if opset >= 10:
        attrs["ceil_mode"] = draw(st.booleans())
    if opset >= 7:
        attrs["count_include_pad"] = draw(st.booleans())
    dtype = draw(st.sampled_from(FLOAT_DTYPES if opset >= 22 else FLOAT_DTYPES[:3]))
    batch, channels = draw(st.integers(0, 2)), draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["NCX", "NXC"]))
    return attrs, dtype, (batch, channels) + spatial, layout


POOL_SIZE = 64


@st.composite
def edge_arrays(draw, shape, dtype):
    """Values from a pool mixing ordinary numbers, NaN, +-Inf, and huge and tiny magnitudes.

    Arrays of up to POOL_SIZE values are drawn element by element; a bigger one takes its values
    from a pool of POOL_SIZE drawn ones, at places chosen by a drawn seed (hypothesis draws about
    15,000 values a second: element by element, the large-kernel tests' arrays of up to 1,728
    values took most of this file's time)."""
    size = math.prod(shape)
    big = float(np.finfo(np.float32).max) / 4 if dtype in (np.float32, np.float64) else 3e4
    special = st.sampled_from([math.nan, math.inf, -math.inf, big, -big, 1e-30, 0.0, -0.0])
    ordinary = st.floats(-100, 100, allow_nan=False, width=16)
    element = st.one_of(ordinary, ordinary, ordinary, special) if draw(st.booleans()) else ordinary
    values = draw(st.lists(element, min_size=min(size, POOL_SIZE), max_size=min(size, POOL_SIZE)))
    if size > POOL_SIZE:
        values = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).choice(values, size)
    with np.errstate(over="ignore"):
        return np.array(values, dtype=np.float64).astype(dtype).reshape(shape)


def _reference_of(x, attrs, layout, absolute=False):
    n = len(attrs["kernel_shape"])
    flat = attrs["pads"] or [0] * (2 * n)
    opset = attrs["opset"]
    same = attrs["auto_pad"].startswith("SAME")
    rounding = "ceil_drop" if attrs.get("ceil_mode") and not same else "floor"
    data = np.abs(x.astype(np.float64)) if absolute else x
    return reference_pool(
        data,
        attrs["kernel_shape"],
        attrs["strides"],
        attrs["dilations"] or [1] * n,
        list(zip(flat[:n], flat[n:])),
        attrs["auto_pad"].lower().replace("notset", "explicit"),
        rounding,
        "padded" if attrs.get("count_include_pad") and opset >= 7 else "valid",
        layout,
    )


def _arrange(draw, x, layout):
    """Present the same values as a byte-swapped, non-contiguous or plain array."""
    form = draw(st.sampled_from(["plain", "byteswapped", "strided", "fortran"]))
    if form == "byteswapped" and x.dtype.itemsize > 1 and x.dtype.kind == "f":
        return x.astype(x.dtype.newbyteorder(">" if np.little_endian else "<")), form
    if form == "strided":
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2], form
    if form == "fortran":
        return np.asfortranarray(x), form
    return x, "plain"


@given(st.data())
def test_average_pool_matches_reference(data):
    attrs, dtype, ncx_shape, layout = data.draw(configurations())
    shape = ncx_shape if layout == "NCX" else (ncx_shape[0],) + ncx_shape[2:] + (ncx_shape[1],)
    x = data.draw(edge_arrays(shape, dtype))
    presented, form = _arrange(data.draw, x, layout)
    note(f"attrs={attrs} layout={layout} dtype={dtype} shape={shape} form={form}\nx={x!r}")
    try:
        exact = _reference_of(x, attrs, layout)
    except ValueError:  # the reference found a negative output length
        try:
            avgpool.average_pool(presented, layout=layout, **attrs)
        except avgpool.AvgPoolError as err:
            assert "no output" in str(err)
            return
        raise AssertionError("avgpool accepted a configuration with a negative output length")
    got = avgpool.average_pool(presented, layout=layout, **attrs)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    assert got.shape == avgpool.output_shape(
        shape,
        attrs["kernel_shape"],
        strides=attrs["strides"],
        pads=attrs["pads"],
        auto_pad=attrs["auto_pad"],
        ceil_mode=attrs.get("ceil_mode", False),
        dilations=attrs["dilations"],
        opset=attrs["opset"],
        layout=layout,
    )
    abs_average = _reference_of(x, attrs, layout, absolute=True)
    taps = math.prod(attrs["kernel_shape"])
    assert_close_to_exact(got, exact, abs_average, taps, context=f"{attrs} {layout} {dtype}")


@settings(max_examples=60)
@given(st.data())
def test_banded_slabs_match_reference(data):
    """The same properties with every slab pooled in bands (one output row of the first axis
    at a time), with direct and block sums along the later axes."""
    attrs, dtype, ncx_shape, layout = data.draw(configurations())
    shape = ncx_shape if layout == "NCX" else (ncx_shape[0],) + ncx_shape[2:] + (ncx_shape[1],)
    x = data.draw(edge_arrays(shape, dtype))
    note(f"attrs={attrs} layout={layout} dtype={dtype} shape={shape}\nx={x!r}")
    try:
        exact = _reference_of(x, attrs, layout)
    except ValueError:
        return
    with in_bands(), block_sums_from(data.draw(st.sampled_from([2, 3, 99]))):
        got = avgpool.average_pool(x, layout=layout, **attrs)
    abs_average = _reference_of(x, attrs, layout, absolute=True)
    assert_close_to_exact(got, exact, abs_average, math.prod(attrs["kernel_shape"]), context=f"{attrs} {layout}")


def test_banded_path_is_taken():
    """in_bands() really cuts slabs into bands (else the test above tests the grouped path)."""
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    spec = onnx_dialect.make_spec(22, (2, 9, 9, 3), [3, 3], pads=[1] * 4)
    with in_bands():
        prepared = engine.prepare(spec, (2, 9, 9, 3), np.dtype(np.float32), Layout.NXC)
        tables = prepared.kernel_args[0]
        assert (tables.group, tables.band) == (1, 1)
    tables = engine.prepare(spec, (2, 9, 9, 3), np.dtype(np.float32), Layout.NXC).kernel_args[0]
    assert tables.band == 9  # small slabs: whole slabs, no bands


@pytest.mark.parametrize(
    "kernel, stride, dilation, overlap",
    [
        (2, 2, 1, False),
        (4, 4, 1, False),
        (3, 4, 1, False),
        (3, 2, 1, True),
        (3, 1, 1, True),
        (2, 2, 2, True),
        (2, 3, 2, False),
        (1, 1, 1, False),
    ],
)
def test_overlapping_windows_get_the_cache_sized_groups(kernel, stride, dilation, overlap):
    """Slabs of overlapping windows are grouped within the smaller budget, the others within the
    bigger one (tuning's overlapping_group_scratch_bytes, group_scratch_bytes)."""
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    shape = (1, 16, 32, 32)  # one piece: the group is every slab unless the budget is smaller
    spec = onnx_dialect.make_spec(22, shape, [kernel, kernel], strides=[stride, stride], dilations=[dilation, dilation])
    with tuning.tuned(group_scratch_bytes=1 << 40, overlapping_group_scratch_bytes=1):
        group = engine.prepare(spec, shape, np.dtype(np.float32), Layout.NCX).kernel_args[0].group
    assert group == (1 if overlap else 16)


@given(st.integers(0, 40), st.integers(1, 9), st.sampled_from([np.float32, np.float64]))
def test_huge_value_leaves_no_error_in_other_windows(position, kernel, dtype):
    """A 1e30 must not leave its rounding error in windows that do not contain it."""
    rng = np.random.default_rng(position * 31 + kernel)
    x = rng.uniform(-1, 1, (1, 1, 48)).astype(dtype)
    x[0, 0, position] = 1e30
    pads = [(kernel // 2, kernel // 2)]
    got = avgpool.average_pool(x, [kernel], pads=[kernel // 2, kernel // 2])[0, 0]
    exact = reference_pool(x, [kernel], [1], [1], pads)[0, 0]
    abs_average = reference_pool(np.abs(x), [kernel], [1], [1], pads)[0, 0]
    far = np.abs(np.arange(got.size) - position) > kernel
    # the bound uses only each window's own values: a leak of 1e30's rounding error would break it
    assert_close_to_exact(got[far], exact[far], abs_average[far], kernel)


@st.composite
def large_kernel_configurations(draw):
    """Kernels of 5 to 12 (test_large_kernels_match_reference runs them through both paths)."""
    ndim = draw(st.integers(1, 2))
    spatial = tuple(draw(st.integers(1, 60 if ndim == 1 else 24)) for _ in range(ndim))
    kernel = [draw(st.integers(5, 12)) for _ in range(ndim)]
    attrs = dict(
        kernel_shape=kernel,
        strides=[draw(st.integers(1, 2)) for _ in range(ndim)],
        dilations=[draw(st.integers(1, 3)) for _ in range(ndim)],
        opset=22,
        auto_pad=draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])),
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        pads=None,
    )
    if attrs["auto_pad"] == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k)) for k in kernel] * 2
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    layout = draw(st.sampled_from(["NCX", "NXC"]))
    return attrs, dtype, (1, draw(st.integers(1, 3))) + spatial, layout


@pytest.mark.parametrize("path", ["block sums", "direct sums"])
@given(data=st.data())
def test_large_kernels_match_reference(path, data):
    """Kernels of 5 to 12 through each path: block partial sums, or direct sums (six taps at a
    time into the accumulator at stride 1, then three)."""
    attrs, dtype, ncx_shape, layout = data.draw(large_kernel_configurations())
    shape = ncx_shape if layout == "NCX" else (ncx_shape[0],) + ncx_shape[2:] + (ncx_shape[1],)
    x = data.draw(edge_arrays(shape, dtype))
    note(f"attrs={attrs} layout={layout} dtype={dtype} shape={shape}\nx={x!r}")
    try:
        exact = _reference_of(x, attrs, layout)
    except ValueError:
        return
    with block_sums_from(5 if path == "block sums" else 1 << 30):
        got = avgpool.average_pool(x, layout=layout, **attrs)
    abs_average = _reference_of(x, attrs, layout, absolute=True)
    assert_close_to_exact(got, exact, abs_average, math.prod(attrs["kernel_shape"]), context=f"{attrs} {layout}")


def test_large_kernel_configurations_do_take_the_block_path():
    """The property test above is only worth its name if the engine really chooses block sums."""
    from avgpool._ops import onnx as onnx_dialect

    k = max(tuning.DEFAULT.block_sums_min_kernel, tuning.DEFAULT.contiguous_block_sums_min_kernel)
    spec = onnx_dialect.make_spec(22, (1, 1, 40, 40), [k, k], pads=[k // 2] * 4)
    assert (tables.kernel_tables(spec, (40, 40), 1).axes[:, 5] == k).all()
    rows_only = tuning.DEFAULT.block_sums_min_kernel
    if rows_only < tuning.DEFAULT.contiguous_block_sums_min_kernel:  # between the crossovers: rows only
        spec = onnx_dialect.make_spec(22, (1, 1, 40, 40), [rows_only] * 2, pads=[rows_only // 2] * 4)
        assert tables.kernel_tables(spec, (40, 40), 1).axes[:, 5].tolist() == [rows_only, 0]
    x = np.random.default_rng(1).standard_normal((1, 2, 40, 40))
    x[0, 0, 5, 5], x[0, 1, 30, 2] = np.inf, np.nan
    got = avgpool.average_pool(x, [k, k], pads=[k // 2] * 4)
    pads = [(k // 2, k // 2)] * 2
    exact = reference_pool(x, [k, k], [1, 1], [1, 1], pads)
    assert_close_to_exact(got, exact, reference_pool(np.abs(x), [k, k], [1, 1], [1, 1], pads), k * k)


@settings(max_examples=60)
@given(st.data())
def test_side_by_side_windows_match_reference(data):
    """Windows of 4 or 8 taps at the same stride along the contiguous axis (audio k4 s4) are
    summed in pairs; with padding, ceil_mode and edge values the clipped windows at the ends go
    the usual way."""
    k = data.draw(st.sampled_from([4, 8]))
    ndim = data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3))] * (ndim - 1) + [k]
    spatial = tuple(data.draw(st.integers(n, n + 4)) for n in kernel[:-1]) + (data.draw(st.integers(k, 70)),)
    pads = [data.draw(st.integers(0, n - 1)) for n in kernel] * 2 if data.draw(st.booleans()) else None
    attrs = dict(
        kernel_shape=kernel,
        strides=[1] * (ndim - 1) + [k],
        pads=pads,
        auto_pad="NOTSET",
        dilations=None,
        ceil_mode=data.draw(st.booleans()),
        count_include_pad=data.draw(st.booleans()),
        opset=22,
    )
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES))
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))) + spatial
    x = data.draw(edge_arrays(shape, dtype))
    note(f"attrs={attrs} dtype={dtype} shape={shape}\nx={x!r}")
    got = avgpool.average_pool(x, **attrs)
    exact = _reference_of(x, attrs, "NCX")
    assert_close_to_exact(
        got, exact, _reference_of(x, attrs, "NCX", absolute=True), math.prod(kernel), context=f"{attrs} {dtype}"
    )


def test_side_by_side_windows_are_summed_in_pairs():
    """The pairwise path is really taken: in float64, 1 + e + e + e (e = 2**-53) summed left to
    right rounds to 1 at every step, while (1 + e) + (e + e) gives 1 + 2**-52, the exact sum
    rounded. Both in a long row (one loop over all rows) and in rows with clipped windows."""
    e = 2.0**-53
    for shape, pads in (((2, 3, 64), [0, 0]), ((1, 1, 30), [2, 3])):
        x = np.tile([1.0, e, e, e], math.prod(shape) // 4 + 2)[: math.prod(shape)].reshape(shape)
        got = avgpool.average_pool(x, [4], strides=[4], pads=pads)
        interior = got[..., 1:-1] if pads[0] else got
        assert (interior == (1.0 + 2.0**-52) / 4).all(), interior


@settings(max_examples=40)
@given(st.data())
def test_transposed_block_sums_match_reference(data):
    """NCX planes with at least TILE_ROWS rows take the block pass along the last axis on
    transposed tiles of rows (the rows left over take the plain one)."""
    from avgpool.kernels.separable import TILE_ROWS

    k = [data.draw(st.integers(1, 3)), data.draw(st.integers(5, 12))]
    dilation = data.draw(st.integers(1, 2))
    rows = data.draw(st.integers(TILE_ROWS, 3 * TILE_ROWS + 5))
    length = data.draw(st.integers(dilation * (k[1] - 1) + 1, 48))
    shape = (1, data.draw(st.integers(1, 2)), rows, length)
    attrs = dict(
        kernel_shape=k,
        strides=[1, data.draw(st.integers(1, 3))],
        ceil_mode=data.draw(st.booleans()),
        count_include_pad=data.draw(st.booleans()),
        dilations=[1, dilation],
        pads=[0, data.draw(st.integers(0, k[1])), 0, data.draw(st.integers(0, k[1]))],
        auto_pad="NOTSET",
        opset=22,
    )
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)
    for value in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1e300]), max_size=3)):
        x[(0,) + tuple(int(rng.integers(0, n)) for n in shape[1:])] = value
    note(f"attrs={attrs} shape={shape}")
    exact = _reference_of(x, attrs, "NCX")
    with block_sums_from(5):
        got = avgpool.average_pool(x, **attrs)
    assert_close_to_exact(got, exact, _reference_of(x, attrs, "NCX", absolute=True), k[0] * k[1], context=str(attrs))


@settings(max_examples=40)
@given(st.data())
def test_streaming_block_sums_match_reference(data):
    """Planes at least twice the kernel take the streaming block pass (dilation 1, rows > 1)."""
    k = [data.draw(st.integers(5, 9)), data.draw(st.integers(5, 9))]
    shape = (1, data.draw(st.integers(18, 26)), data.draw(st.integers(18, 26)), 2)  # NXC: rows of 2 channels
    attrs = dict(
        kernel_shape=k,
        strides=[data.draw(st.integers(1, 2)), 1],
        ceil_mode=data.draw(st.booleans()),
        count_include_pad=data.draw(st.booleans()),
        pads=[data.draw(st.integers(0, 9)) for _ in range(4)],
        auto_pad="NOTSET",
        dilations=None,
        opset=22,
    )
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)
    for value in data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1e300]), max_size=3)):
        x[(0,) + tuple(int(rng.integers(0, n)) for n in shape[1:])] = value
    note(f"attrs={attrs}")
    exact = _reference_of(x, attrs, "NXC")
    with block_sums_from(5):
        got = avgpool.average_pool(x, layout="NXC", **attrs)
    assert_close_to_exact(got, exact, _reference_of(x, attrs, "NXC", absolute=True), k[0] * k[1], context=str(attrs))


def exact_running_from(taps: int):
    """Make the engine sum float32 windows exactly in int64 running sums from ``taps`` taps on
    (tuning's exact_running_min_kernel), so that path is tested on small kernels."""
    return tuning.tuned(exact_running_min_kernel=taps)


@st.composite
def running_configurations(draw):
    """Everything the int64 running sums take: dilation 1, any pads, strides, rounding, divisor;
    NCX with a stride along its last axis goes to the float64 kernels, which is checked too."""
    ndim = draw(st.integers(1, 3))
    spatial = tuple(draw(st.integers(1, 5 if ndim == 3 else 24)) for _ in range(ndim))
    kernel = [draw(st.integers(1, 4 if ndim == 3 else 9)) for _ in range(ndim)]
    attrs = dict(
        kernel_shape=kernel,
        strides=[draw(st.integers(1, 3)) for _ in range(ndim)],
        dilations=None,
        opset=22,
        auto_pad=draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])),
        ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()),
        pads=None,
    )
    if attrs["auto_pad"] == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k + 1)) for k in kernel] + [draw(st.integers(0, k + 1)) for k in kernel]
    layout = draw(st.sampled_from(["NCX", "NXC"]))
    return attrs, (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + spatial, layout


@given(data=st.data())
def test_exact_running_sums_match_reference(data):
    """float32 through the int64 running sums: the values of a slab decide whether it is summed
    exactly (ordinary numbers) or by the float64 kernels (NaN, Inf, a range over ~2**30)."""
    attrs, ncx_shape, layout = data.draw(running_configurations())
    shape = ncx_shape if layout == "NCX" else (ncx_shape[0],) + ncx_shape[2:] + (ncx_shape[1],)
    if data.draw(st.booleans()):
        x = data.draw(edge_arrays(shape, np.float32))
    else:  # ordinary values over a wide but summable range, and zeros
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 12, shape) * (rng.random(shape) > 0.1)
        x = x.astype(np.float32)
    note(f"attrs={attrs} layout={layout} shape={shape}\nx={x!r}")
    try:
        exact = _reference_of(x, attrs, layout)
    except ValueError:
        return
    with exact_running_from(1):
        got = avgpool.average_pool(x, layout=layout, **attrs)
    abs_average = _reference_of(x, attrs, layout, absolute=True)
    assert_close_to_exact(got, exact, abs_average, math.prod(attrs["kernel_shape"]), context=f"{attrs} {layout}")


def test_exact_running_sums_are_exact_where_float64_sums_round():
    """Windows of 2**15, -2**15 and values of either sign in multiples of 2**-35: each value is an
    integer of 51 bits in those units (the most the exact sums take), a float64 sum of 49 of them
    needs 57 bits and rounds, the int64 running sum does not, so every output is the exact
    average rounded once; the float64 kernels miss some by more than two float32 ulps (where the
    small values cancel, 36 in this data)."""
    from helpers import ulp

    rng = np.random.default_rng(7)
    shape = (2, 3, 40, 40)
    small = rng.integers(1 << 22, 1 << 23, shape) * 2.0**-34 * np.where(rng.random(shape) < 0.5, 1, -1)
    big = np.where(rng.random(shape) < 0.5, 2.0**15, -(2.0**15))
    x = np.where(rng.random(shape) < 0.3, big, small).astype(np.float32)
    pads = [(3, 3), (3, 3)]
    exact = reference_pool(x, [7, 7], [1, 1], [1, 1], pads)
    one_ulp = ulp(exact, np.dtype(np.float32))
    with exact_running_from(7):
        got = avgpool.average_pool(x, [7, 7], pads=[3, 3, 3, 3])
    assert (np.abs(got - exact) <= one_ulp * (0.5 + 2.0**-26)).all()  # rounded once, from float64
    with exact_running_from(1 << 30):  # the data is hard: float64 sums do miss
        rounded = avgpool.average_pool(x, [7, 7], pads=[3, 3, 3, 3])
    assert (np.abs(rounded - exact) > 2 * one_ulp).any()


def test_the_exact_path_starts_at_k5():
    """The running sums cost the same for every kernel, the float64 passes grow with it: from k5
    the running sums are faster with AVX-512 and with AVX2 alike (tuning.exact_running_min_kernel),
    a choice that depends on nothing but the windows, so a float32 window takes the same path, and
    gives the same bits, on every CPU."""
    from avgpool._core.shape import resolve
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    three, five = (
        resolve(onnx_dialect.make_spec(22, (1, 2, 32, 32), [k, k], pads=[k // 2] * 4), (32, 32)) for k in (3, 5)
    )
    assert not tables.uses_running(three, Layout.NCX) and tables.uses_running(five, Layout.NCX)
    with tuning.tuned(exact_running_min_kernel=3):  # a chosen value wins
        assert tables.uses_running(three, Layout.NCX)


def test_exact_running_path_is_taken_and_decided_per_slab():
    """The benchmark's large kernels take the int64 kernel, and a NaN in one slab sends only that
    slab to the float64 kernels: the other slab's result is the one it has when pooled alone."""
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    k = 5
    spec = onnx_dialect.make_spec(22, (1, 16, 64, 64), [k, k], pads=[k // 2] * 4)
    assert engine.prepare(spec, (1, 16, 64, 64), np.dtype(np.float32), Layout.NCX).kernel.__name__ == "pool_slabs_exact"
    x = np.random.default_rng(3).standard_normal((1, 2, 64, 64)).astype(np.float32)
    alone = avgpool.average_pool(x[:, 1:], [k, k], pads=[k // 2] * 4)
    x[0, 0, 10, 10] = np.nan
    got = avgpool.average_pool(x, [k, k], pads=[k // 2] * 4)
    assert np.array_equal(got[:, 1:], alone)
    assert np.isnan(got[0, 0, 10 - k // 2 : 11 + k // 2, 10 - k // 2 : 11 + k // 2]).all()
    assert np.isnan(got[0, 0]).sum() == k * k


def test_exact_planes_at_the_extreme_exponents_scale_exactly():
    """The same planes scaled by 2**-100 (units of about 2**-150, below float32's smallest
    normal) and by 2**100 (units of about 2**50) are pooled exactly both ways: the results are
    each other's exactly, times 2**200, and the exact averages rounded."""
    from helpers import ulp

    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect
    from avgpool.kernels import running

    k = 9
    shape = (1, 3, 40, 48)
    spec = onnx_dialect.make_spec(22, shape, [k, k], pads=[k // 2] * 4)
    assert engine.prepare(spec, shape, np.dtype(np.float32), Layout.NCX).kernel.__name__ == "pool_slabs_exact"
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    tiny, big = x * np.float32(2.0**-100), x * np.float32(2.0**100)
    for plane_values in (tiny, big):
        q = running.fixed_point_exponent(plane_values.view(np.uint32).ravel(), 0, plane_values.size, 40)
        assert q != running.NOT_EXACT
    got_tiny = avgpool.average_pool(tiny, [k, k], pads=[k // 2] * 4)
    got_big = avgpool.average_pool(big, [k, k], pads=[k // 2] * 4)
    assert np.array_equal(got_tiny.astype(np.float64) * 2.0**200, got_big.astype(np.float64))
    exact = reference_pool(big.astype(np.float64), [k, k], [1, 1], [1, 1], [(k // 2, k // 2)] * 2)
    # rounded once from float64, whose products err by a few 2**-53 (a tiny share of an ulp)
    assert (np.abs(got_big - exact) <= ulp(exact, np.dtype(np.float32)) * (0.5 + 2.0**-26)).all()


@pytest.mark.parametrize("q", [-149, -126, -100, -35, 0, 23, 76])
def test_fixed_point_conversion_is_exact_below_2_to_51_units(q):
    """The kernels turn a float32 into its integer in units of ``2**q`` by adding
    ``1.5 * 2**(52 + q)`` in float64 and subtracting the bits (``running._fixed``): exact for
    every multiple of ``2**q`` below ``2**(q + 51)`` in magnitude, of either sign, at every
    ``q`` a float32 can have; the headroom never lets a value take more bits."""
    from avgpool._core.shape import resolve
    from avgpool._ops import onnx as onnx_dialect
    from avgpool.kernels import running

    top = (2**23 - 1) << 28  # 23 significant bits (a float32 holds it), just below 2**51
    ints = [0, 1, -1, 3, 2**24 - 1, -(2**24 - 1), 12345 << 20, top, -top]
    bias = running._bias_of(2.0**q)
    for n in ints:
        value = np.float32(n * 2.0**q)
        assert float(value) == n * 2.0**q  # the test's values are float32s
        assert running._fixed(value, bias) == n, (n, q)
    spec = onnx_dialect.make_spec(22, (1, 1, 4096), [1])  # one tap: the most headroom
    assert tables.headroom(resolve(spec, (4096,))) == tables.VALUE_BITS_MAX == 51


@pytest.mark.parametrize(
    "values, headroom, fits",
    [
        ([1.0, 2.0**-20], 46, True),  # 2**0 < 2**1, multiples of 2**-43: 44 bits
        ([1.0, 2.0**-20], 43, False),
        ([0.0, -0.0, 3.0], 24, True),  # zeros take no bits: 3 is 3 * 2**22 units of 2**-22 (< 2**24)
        ([0.0, -0.0, 3.0], 23, False),
        ([np.inf, 1.0], 60, False),
        ([np.nan], 60, False),
        ([0.0, 0.0], 0, True),
        ([1e-45, 1e-40], 40, True),  # subnormals: multiples of 2**-149
    ],
)
def test_fixed_point_exponent(values, headroom, fits):
    from avgpool.kernels.running import NOT_EXACT, fixed_point_exponent

    bits = np.asarray(values, np.float32).view(np.uint32)
    q = fixed_point_exponent(bits, 0, bits.size, headroom)
    assert (q != NOT_EXACT) == fits
    if fits:
        ints = bits.view(np.float32).astype(np.float64) * 2.0**-q
        assert (ints == np.round(ints)).all() and (np.abs(ints) < 2.0**headroom).all()


def _window_sums(x: np.ndarray, kernel: tuple[int, ...], pads: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact float64 sums and valid-tap counts of every stride-1 window of a small-integer ``x``
    (padded by ``pads`` on every side)."""
    from numpy.lib.stride_tricks import sliding_window_view

    spatial = tuple(range(2, x.ndim))
    width = [(0, 0), (0, 0), *[(pads, pads)] * len(kernel)]
    padded = np.pad(x.astype(np.float64), width)
    ones = np.pad(np.ones(x.shape), width)
    last = tuple(range(-len(kernel), 0))
    sums = sliding_window_view(padded, kernel, axis=spatial).sum(axis=last)
    counts = sliding_window_view(ones, kernel, axis=spatial).sum(axis=last)
    return sums, counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("kernel, pads", [((3, 3), 0), ((3, 3), 1), ((2, 2), 1), ((3, 3, 3), 1), ((7, 7), 0)])
def test_windows_summing_to_zero_average_to_zero(dtype, kernel, pads):
    # each axis scaled by its own rounded reciprocal inside the sum: 2% of the 3 x 3 windows of
    # small integers that sum to exactly 0 gave ~1e-17 (tables.divisor_scales)
    rng = np.random.default_rng(len(kernel) * 10 + pads)
    x = rng.integers(-3, 4, (2, 4) + (max(9, 3 * max(kernel)),) * len(kernel)).astype(dtype)
    y = avgpool.average_pool(x, list(kernel), pads=[pads] * 2 * len(kernel))
    sums, _ = _window_sums(x, kernel, pads)
    assert (sums == 0).sum() > 20
    assert np.all(y[sums == 0] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("kernel, pads", [((3, 3), 0), ((3, 3), 1), ((2, 2), 1), ((3, 3, 3), 1), ((7, 7), 0)])
def test_windows_of_small_integers_are_their_sum_divided_once(dtype, kernel, pads):
    # the exact sum, its divisor as the kernel's reference times a dyadic edge ratio, one
    # rounding to float64 and one to the dtype: float32(sum / count) in every window
    rng = np.random.default_rng(len(kernel) * 10 + pads + 1)
    x = rng.integers(-50, 51, (2, 4) + (9,) * len(kernel)).astype(dtype)
    y = avgpool.average_pool(x, list(kernel), pads=[pads] * 2 * len(kernel))
    sums, counts = _window_sums(x, kernel, pads)
    np.testing.assert_array_equal(y, (sums / counts).astype(dtype))


def test_a_float16_average_halfway_between_neighbours_rounds_to_even():
    # exact mean 2563/8192, halfway between two float16 values: 0.31298828125 (even), which
    # OpenVINO's plugin gives; the per-axis reciprocals gave 0.312744140625
    rows = [
        [-1.2568359375, -0.1612548828125, -0.447021484375, -0.10986328125],
        [1.0458984375, 0.99365234375, -0.14013671875, 1.123046875],
        [-0.7666015625, 0.355712890625, 1.779296875, -0.57763671875],
    ]
    x = np.array(rows, np.float16).reshape(1, 1, 3, 4)
    assert float(avgpool.average_pool(x, [3, 3])[0, 0, 0, 1]) == 0.31298828125
    y = avgpool.openvino.avg_pool(x, [3, 3], exclude_pad=True)
    assert float(y[0, 0, 0, 1]) == 0.31298828125


@pytest.mark.parametrize(
    "x, kernel, pads, expected",
    [
        (np.full((1, 1, 1, 2), 1e308), [3, 1], [1, 0, 1, 0], [1e308, 1e308]),
        (np.array([[[[1e308, -1e308, 1e308, -1e308]]]]), [3, 3], [1] * 4, [0.0, 1e308 / 3, -1e308 / 3, 0.0]),
        (np.full((1, 1, 2, 1, 2), -7e307), [7, 1, 3], [3, 0, 1, 3, 0, 1], [-7e307] * 4),
    ],
)
def test_edge_windows_near_the_float64_maximum_stay_finite(x, kernel, pads, expected):
    # a leading axis's edge factor kernel / divisor above 1 took partial sums past the maximum
    # (inf, or inf - inf = NaN) where sum / count is finite; the factors are at most 1
    y = avgpool.average_pool(x, kernel, pads=pads)
    np.testing.assert_allclose(y.ravel(), expected, rtol=1e-15)
