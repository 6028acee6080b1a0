"""kernels/small_planes.py: small NCX planes with 3 x 3 "same" windows at stride 1, or windows of 2
or 3 taps at stride 2, give the results of the separable passes, on values chosen to expose any
change of summation order (signed zeros, NaN, infinities, magnitudes far apart, NaNs of distinct
payloads): the same bits wherever the result is not NaN, NaN in the same windows. Which NaN a
window holding two gives is the order LLVM picks for its additions (README, "Semantics"): it
differs between builds and between groups of planes in the separable passes themselves, so it
is not compared. The paths are chosen exactly where tables.small_planes says."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import avgpool
from avgpool._core import tables, tuning
from avgpool._ops.onnx import _validated

SHAPES = [
    (7, 7),
    (12, 12),
    (14, 14),
    (3, 5),
    (1, 9),
    (9, 1),
    (2, 2),
    (1, 1),
    (11, 13),
    (6, 6),
    (28, 30),
    (2, 40),
    (40, 8),
]  # rows of 7 values or more by the flat loops, narrower by the masks
KERNELS = [(3, 3), (3, 3), (3, 1), (1, 3), (1, 1), (2, 3)]  # (2, 3): the separable passes, both ways


def _hard_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Values whose sums round differently in another order, with -0.0, NaN and +-Inf."""
    spread = min(30, ml_dtypes.finfo(dtype).maxexp // 3)  # no overflow in float16
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))
    u = rng.random(shape)
    x[u < 0.15] = -0.0
    x[(u > 0.15) & (u < 0.17)] = np.nan
    x[(u > 0.17) & (u < 0.18)] = np.inf
    x[(u > 0.18) & (u < 0.19)] = -np.inf
    return x.astype(dtype)


def _same_results(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bits wherever ``a`` is not NaN, and NaN where it is."""
    nan = np.isnan(a.astype(np.float64))
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and np.array_equal(nan, np.isnan(b.astype(np.float64)))
        and a[~nan].tobytes() == b[~nan].tobytes()
    )


def _attributes(rng: np.random.Generator, k0: int, k1: int) -> dict:
    mode = rng.integers(3)
    count_include_pad = int(rng.integers(2))
    if mode < 2:
        return dict(
            kernel_shape=[k0, k1], auto_pad=("SAME_UPPER", "SAME_LOWER")[mode], count_include_pad=count_include_pad
        )
    begins = [int(rng.integers(k)) for k in (k0, k1)]  # any split of k - 1 pads keeps the size
    return dict(
        kernel_shape=[k0, k1],
        pads=[*begins, k0 - 1 - begins[0], k1 - 1 - begins[1]],
        count_include_pad=count_include_pad,
    )


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16], ids=["float32", "float64", "float16", "bfloat16"]
)
def test_small_planes_give_the_results_of_the_separable_passes(dtype):
    rng = np.random.default_rng(7)
    cases = 0
    for shape in SHAPES:
        for k0, k1 in KERNELS:
            x = _hard_values(rng, (2, int(rng.integers(1, 40)), *shape), np.dtype(dtype))
            attrs = _attributes(rng, min(k0, shape[0] + 2), min(k1, shape[1] + 2))
            small = avgpool.average_pool(x, **attrs)
            with tuning.tuned(small_plane_values=0):
                separable = avgpool.average_pool(x, **attrs)
            assert _same_results(small, separable), (shape, attrs)
            cases += 1
    assert cases == len(SHAPES) * len(KERNELS)


def _with_payloads(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """``x`` with NaNs of distinct payloads (signs, quiet and signalling) beside its infinities:
    which NaN of a window comes out shows the order of its additions."""
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    payloads = (
        [0x7FC00001, 0xFFC00002, 0x7FA00003, 0xFFC00004]
        if x.dtype == np.float32
        else [0x7FF8000000000001, 0xFFF8000000000002, 0x7FF4000000000003, 0xFFF8000000000004]
    )
    u = rng.random(x.shape)
    for k, payload in enumerate(payloads):
        bits[(u >= 0.03 * k) & (u < 0.03 * k + 0.03)] = payload
    return x


STRIDE_TWO = [  # (plane, kernel, pads): the stride-2 windows the kernel takes
    ((14, 14), (2, 2), (0, 0, 0, 0)),  # DenseNet's transitions
    ((14, 14), (3, 3), (1, 1, 1, 1)),  # ShuffleNet: windows of 3 taps tiling the rows
    ((6, 10), (3, 3), (1, 1, 0, 0)),
    ((7, 7), (3, 3), (1, 1, 1, 1)),
    ((7, 7), (2, 2), (0, 0, 1, 1)),
    ((15, 13), (3, 2), (1, 0, 1, 1)),
    ((12, 16), (2, 2), (1, 0, 1, 0)),
    ((12, 15), (2, 3), (0, 1, 1, 1)),
    ((9, 5), (3, 3), (1, 1, 0, 0)),
    ((1, 3), (2, 2), (1, 1, 0, 0)),
    ((2, 16), (2, 2), (0, 1, 0, 0)),
    ((13, 1), (2, 2), (1, 0, 0, 1)),
]


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16], ids=["float32", "float64", "float16", "bfloat16"]
)
@pytest.mark.parametrize(("plane", "kernel", "pads"), STRIDE_TWO)
def test_stride_two_gives_the_results_of_the_separable_passes(dtype, plane, kernel, pads):
    rng = np.random.default_rng(sum(plane) * 10 + kernel[0])
    for count_include_pad in (0, 1):
        for channels in (1, 7, 300):  # one plane, and groups the separable passes loop over as one
            x = _hard_values(rng, (2, channels, *plane), np.dtype(dtype))
            if dtype in (np.float32, np.float64):
                x = _with_payloads(rng, x)
            attrs = dict(
                kernel_shape=list(kernel), strides=[2, 2], pads=list(pads), count_include_pad=count_include_pad
            )
            _, spec, _ = _validated(
                x, 22, opset=22, layout="NCX", auto_pad="NOTSET", ceil_mode=0, dilations=None, **attrs
            )
            with tuning.tuned(stride_two_min_columns=1):  # the rows however few their outputs
                assert (tables.kernel_tables(spec, plane, 1).axes[:, 8] >= 0).all()
                small = avgpool.average_pool(x, **attrs)
            with tuning.tuned(stride_two_min_columns=9):
                separable = avgpool.average_pool(x, **attrs)
            assert _same_results(small, separable), (channels, attrs)


def test_threads_split_small_planes_anywhere():
    # 1x1024x7x7 is shared between threads: every piece boundary falls inside a block of planes
    rng = np.random.default_rng(3)
    x = _hard_values(rng, (3, 700, 7, 7), np.dtype(np.float32))
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    pooled = avgpool.average_pool(x, **attrs)
    one_plane_at_a_time = np.stack([avgpool.average_pool(x[:, c : c + 1], **attrs)[:, 0] for c in range(700)], axis=1)
    assert np.array_equal(pooled.view(np.uint32), one_plane_at_a_time.view(np.uint32))


@pytest.mark.parametrize(
    ("shape", "attrs", "expected"),
    [
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
        ((1, 8, 12, 12), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER"), True),
        ((1, 8, 9, 16), dict(kernel_shape=[1, 3], pads=[0, 1, 0, 1]), True),
        ((1, 8, 9, 16), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 1]), False),  # 2 taps: no middle tap
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[0, 0, 2, 2]), False),  # windows that start at their output
        ((1, 8, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
        ((1, 8, 15, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),  # the flat loops
        ((1, 8, 40, 6), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), False),  # 240 values, rows too short for them
        ((1, 2, 256, 256), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
        ((1, 2, 257, 256), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), False),  # a plane past the L2 cache
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3]), False),  # the output is smaller than the input
        ((1, 8, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), True),
        ((1, 8, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 2]), True),
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), True),
        ((1, 8, 7, 7), dict(kernel_shape=[2, 2], pads=[0, 0, 1, 1], strides=[2, 2]), True),
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2]), False),  # 3 taps from pad_begin 0
        ((1, 8, 7, 17), dict(kernel_shape=[2, 2], strides=[2, 2]), False),  # rows over 16 values
        ((1, 8, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 1]), False),  # mixed strides
        ((1, 8, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2]), False),
        ((1, 8, 4, 4), dict(kernel_shape=[3, 3], pads=[1, 1, 2, 2], strides=[2, 2]), False),  # a middle tap in the pad
        ((1, 8, 7, 7), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), True),
        ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[2, 2]), False),
        ((1, 8, 7, 7), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]), False),
        ((1, 8, 7), dict(kernel_shape=[3], pads=[1, 1]), False),  # 1-D
        ((1, 8, 0, 7), dict(kernel_shape=[1, 3], pads=[0, 1, 0, 1]), False),  # empty planes
    ],
)
def test_which_inputs_take_the_small_plane_kernel(shape, attrs, expected):
    defaults = dict(strides=None, pads=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None)
    _, spec, _ = _validated(np.zeros(shape, np.float32), 22, opset=22, layout="NCX", **{**defaults, **attrs})
    with tuning.tuned(stride_two_min_columns=1):  # the stride-2 rows' geometry alone
        found = tables.kernel_tables(spec, shape[2:], 1)
    assert bool((found.axes[:, 8] >= 0).all()) is expected


@pytest.mark.parametrize(
    ("plane", "kernel", "pads", "expected"),
    [
        ((14, 14), (3, 3), [1, 1, 1, 1], True),  # ShuffleNet, 7 outputs a row
        ((14, 14), (2, 2), [0, 0, 0, 0], True),  # DenseNet
        ((5, 5), (3, 3), [1, 1, 1, 1], True),  # 3 outputs a row: the fewest that pay
        ((4, 4), (3, 3), [1, 1, 1, 1], False),  # 2: the separable passes are as fast
        ((4, 4), (2, 2), [0, 0, 0, 0], False),
        ((64, 16), (2, 2), [0, 0, 0, 0], True),  # 1024 values
        ((66, 16), (2, 2), [0, 0, 0, 0], False),  # a plane past what one thread should take alone
    ],
)
def test_stride_two_rows_where_they_are_faster(plane, kernel, pads, expected):
    # the same choice on every CPU: the loads and stores through lane masks, slow with AVX2, are
    # only the last plane's and the last row's (tuning.stride_two_min_columns has the timings)
    _, spec, _ = _validated(
        np.zeros((1, 8, *plane), np.float32),
        22,
        opset=22,
        layout="NCX",
        strides=[2, 2],
        pads=pads,
        auto_pad="NOTSET",
        ceil_mode=0,
        count_include_pad=0,
        dilations=None,
        kernel_shape=list(kernel),
    )
    assert bool((tables.kernel_tables(spec, plane, 1).axes[:, 8] >= 0).all()) is expected


def _beside_a_guard_page(shape: tuple[int, ...], dtype: np.dtype, after: bool) -> tuple[np.ndarray, object]:
    """An array that ends just before (``after``) or starts just after a page no access is allowed
    to: reading a byte past it kills the process. Returns the array and the mapping it lives in
    (the array keeps the mapping open)."""
    import ctypes
    import mmap

    page, nbytes = mmap.PAGESIZE, int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = -(-nbytes // page)
    mapping = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    guard = base + pages * page if after else base
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(guard), ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    offset = pages * page - nbytes if after else page
    array = np.frombuffer(mapping, np.uint8, nbytes, offset).view(dtype).reshape(shape)
    return array, mapping


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("plane", "kernel", "pads"), STRIDE_TWO)
def test_stride_two_rows_read_and_write_nothing_outside_the_arrays(dtype, plane, kernel, pads):
    # rows are loaded 16 values at a time and stored 8 at a time, except where that would reach
    # past the input or the call's outputs: an input between pages no access is allowed to, an
    # output followed by values that must stay as they are
    rng = np.random.default_rng(sum(plane))
    attrs = dict(kernel_shape=list(kernel), strides=[2, 2], pads=list(pads))
    shape = (1, 3, *plane)
    x = _hard_values(rng, shape, np.dtype(dtype))
    with tuning.tuned(stride_two_min_columns=1):
        expected = avgpool.average_pool(x, **attrs)
        for after in (True, False):
            guarded, mapping = _beside_a_guard_page(shape, dtype, after)
            guarded[...] = x
            room = np.full(expected.size + 8, 7.0, dtype)
            out = room[: expected.size].reshape(expected.shape)
            assert avgpool.average_pool(guarded, **attrs, out=out) is out
            assert _same_results(out, expected) and (room[expected.size :] == 7.0).all()


def test_threads_split_stride_two_planes_anywhere():
    rng = np.random.default_rng(5)
    x = _hard_values(rng, (2, 301, 14, 14), np.dtype(np.float32))
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    with tuning.tuned(parallel_min_elements=1, many_pieces_elements=1, pieces_per_thread=7):
        pooled = avgpool.average_pool(x, **attrs)
    one_plane_at_a_time = np.stack([avgpool.average_pool(x[:, c : c + 1], **attrs)[:, 0] for c in range(301)], axis=1)
    assert _same_results(pooled, one_plane_at_a_time)


@pytest.mark.parametrize(
    ("plane", "flat"),
    [((7, 7), True), ((1, 9), True), ((28, 28), True), ((6, 6), False), ((14, 6), False), ((9, 1), False)],
)
def test_rows_of_seven_values_or_more_take_the_flat_loops(plane, flat):
    _, spec, _ = _validated(
        np.zeros((1, 8, *plane), np.float32),
        22,
        opset=22,
        layout="NCX",
        strides=None,
        pads=[1, 1, 1, 1],
        auto_pad="NOTSET",
        ceil_mode=0,
        count_include_pad=0,
        dilations=None,
        kernel_shape=[3, 3],
    )
    found = tables.kernel_tables(spec, plane, 1)
    assert (found.axes[:, 8] >= 0).all() and (found.plane_masks.size == 0) is flat
    assert found.plane_sums >= found.plane_factors.size // 2 + 2  # a block of planes at least


@pytest.mark.parametrize("min_width", [1, 2, 3])
def test_flat_loops_on_the_narrowest_rows_they_may_take(min_width):
    rng = np.random.default_rng(min_width)
    for plane in [(5, 1), (1, 2), (4, 2), (3, 3), (2, 5)]:
        x = _hard_values(rng, (2, 5, *plane), np.dtype(np.float32))
        attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=min_width % 2)
        with tuning.tuned(flat_plane_min_width=min_width):
            flat = avgpool.average_pool(x, **attrs)
        with tuning.tuned(small_plane_values=0, flat_plane_values=0):
            separable = avgpool.average_pool(x, **attrs)
        assert _same_results(flat, separable), (plane, min_width)
