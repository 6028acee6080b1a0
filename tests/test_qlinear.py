"""QLinearAveragePool against onnxruntime's com.microsoft kernel, bit for bit (docs/semantics.md 5.2).

onnxruntime sessions are cached per (dtype, rank, attributes) and reused for every input of that
configuration, so thousands of configurations run in a few seconds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from packaging.version import Version

from avgpool import AvgPoolError
from avgpool._core import quantized_pools, tuning
from avgpool._ops import qlinear
from avgpool.kernels import qlinear_kernels
from avgpool.qlinear import qlinear_average_pool

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

ort.set_default_logger_severity(4)
F32 = np.float32
# onnxruntime's own int32 wrap-around on the global integer path (test_global_path_int32_wraparound)
# was seen through 1.32 (constraints.txt pins 1.32.0): there onnxruntime is compared with; a later
# release is not assumed to keep an overflow, and avgpool is then checked on its own.
ORT_SEEN_WRAPPING = Version(ort.__version__).release[:2] <= (1, 32)


# --------------------------------------------------------------------------------------------- #
# onnxruntime as the oracle


class OrtRunner:
    """One InferenceSession per (dtype, rank, attributes, zero points given), reused."""

    def __init__(self) -> None:
        self.sessions: dict = {}

    def session(self, dtype: np.dtype, rank: int, attrs: dict, with_zp: bool):
        key = (
            np.dtype(dtype).str,
            rank,
            tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items())),
            with_zp,
        )
        if key not in self.sessions:
            elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
            names = ["x", "xs", "xz", "ys", "yz"] if with_zp else ["x", "xs", "xz", "ys"]
            node = helper.make_node("QLinearAveragePool", names, ["y"], domain="com.microsoft", **attrs)
            inputs = [
                helper.make_tensor_value_info("x", elem, [None] * rank),
                helper.make_tensor_value_info("xs", TensorProto.FLOAT, []),
                helper.make_tensor_value_info("ys", TensorProto.FLOAT, []),
            ]
            inputs.append(helper.make_tensor_value_info("xz", elem, []))
            if with_zp:
                inputs.append(helper.make_tensor_value_info("yz", elem, []))
            graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, None)])
            model = helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
            )
            model.ir_version = 9
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.log_severity_level = 4
            try:
                self.sessions[key] = ort.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            except Exception as err:  # noqa: BLE001 - onnxruntime refuses these attributes: remembered
                self.sessions[key] = err
        session = self.sessions[key]
        if isinstance(session, Exception):
            raise session
        return session

    def run(self, x, xs, xz, ys, yz, attrs, with_zp=True):
        # onnxruntime's type inference refuses a model whose optional zero point input is named ""
        # ("Input data type does not match the expected data type"); only a trailing y_zero_point
        # can be left out (4 inputs). Absent zero points mean 0: give it explicit zeros.
        session = self.session(x.dtype, x.ndim, attrs, with_zp)
        feed = {"x": x, "xs": np.array(xs, F32), "ys": np.array(ys, F32), "xz": np.array(xz or 0, x.dtype)}
        if with_zp:
            feed["yz"] = np.array(yz or 0, x.dtype)
        return session.run(None, feed)[0]


@pytest.fixture(scope="module")
def runner():
    return OrtRunner()


def ours(x, xs, xz, ys, yz, attrs):
    return qlinear_average_pool(x, xs, xz, ys, yz, **attrs)


def compare(runner, x, xs, xz, ys, yz, attrs):
    """Both raise, or both give the same array (shape, dtype, every value)."""
    try:
        got = ours(x, xs, xz, ys, yz, attrs)
    except AvgPoolError as err:
        got = err
    if not isinstance(got, Exception) and got.size == 0 and attrs.get("channels_last"):
        # onnxruntime divides by zero (SIGFPE, the process dies) on an empty channels-last
        # output: ask it for the channels-first twin instead
        first = {k: v for k, v in attrs.items() if k != "channels_last"}
        expected = runner.run(np.moveaxis(x, -1, 1), xs, xz, ys, yz, first)
        assert got.shape == np.moveaxis(expected, 1, -1).shape
        return got
    try:
        expected = runner.run(x, xs, xz, ys, yz, attrs)
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own exception types
        assert isinstance(got, Exception), f"onnxruntime refuses ({str(err)[-160:]}) but avgpool computed {got}"
        return err
    assert not isinstance(got, Exception), f"avgpool raised {got} but onnxruntime gives {expected}"
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.shape, expected.shape)
    bad = got != expected
    assert not bad.any(), (
        f"{int(bad.sum())} of {got.size} values differ: ours {got[bad][:8]} onnxruntime "
        f"{expected[bad][:8]}; x{x.shape} {x.dtype} xs={xs!r} xz={xz} ys={ys!r} yz={yz} {attrs}"
    )
    return got


# --------------------------------------------------------------------------------------------- #
# random configurations


def random_attrs(rng, nsp):
    kernel = [int(k) for k in rng.integers(1, 5, nsp)]
    attrs = {"kernel_shape": kernel}
    if rng.random() < 0.7:
        attrs["strides"] = [int(s) for s in rng.integers(1, 5, nsp)]
    mode = rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if mode != "NOTSET":
        attrs["auto_pad"] = str(mode)
    elif rng.random() < 0.6:  # asymmetric pads, each smaller than the kernel
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel] + [int(rng.integers(0, k)) for k in kernel]
    for flag in ("ceil_mode", "count_include_pad", "channels_last"):
        if rng.random() < 0.5:
            attrs[flag] = 1
    return attrs


def random_scalars(rng, dtype):
    info = np.iinfo(dtype)
    xs = float(F32(np.exp(rng.uniform(np.log(1e-3), np.log(10.0)))))
    ys = float(F32(xs * np.exp(rng.uniform(np.log(0.2), np.log(5.0)))))
    return xs, int(rng.integers(info.min, info.max + 1)), ys, int(rng.integers(info.min, info.max + 1))


def random_x(rng, dtype, spatial, channels_last, n=None, c=None):
    n = int(rng.integers(1, 3)) if n is None else n
    c = int(rng.choice([1, 2, 3, 5, 8, 17, 40])) if c is None else c
    shape = [n, *spatial, c] if channels_last else [n, c, *spatial]
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_random_configurations(runner, dtype):
    """1500 random configurations per dtype (1 to 3 spatial axes, both layouts, ceil_mode,
    count_include_pad, every auto_pad, asymmetric pads, some global), 2 inputs each."""
    rng = np.random.default_rng(20261122 + np.dtype(dtype).num)
    computed = refused = 0
    for _ in range(1500):
        nsp = int(rng.choice([1, 2, 2, 3]))
        attrs = random_attrs(rng, nsp)
        global_ = rng.random() < 0.15
        if global_:
            attrs.pop("pads", None)
            if attrs.get("auto_pad", "").startswith("SAME"):
                attrs["strides"] = list(attrs["kernel_shape"])
        for _ in range(2):
            spatial = (
                list(attrs["kernel_shape"])
                if global_
                else [int(rng.integers(max(1, k - 2), k + 9)) for k in attrs["kernel_shape"]]
            )
            x = random_x(rng, dtype, spatial, attrs.get("channels_last"))
            result = compare(runner, x, *random_scalars(rng, dtype), attrs)
            computed += not isinstance(result, Exception)
            refused += isinstance(result, Exception)
    assert computed > 2500 and refused < 200


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_global_path_random(runner, dtype, channels_last):
    """The integer path: kernel == input, no pads; scales spanning its range limit."""
    rng = np.random.default_rng(7 + channels_last + 2 * np.dtype(dtype).num)
    info = np.iinfo(dtype)
    for _ in range(150):
        nsp = int(rng.integers(1, 4))
        spatial = [int(k) for k in rng.integers(1, 9, nsp)]
        attrs = {"kernel_shape": spatial, "channels_last": channels_last}
        if rng.random() < 0.3:
            attrs["ceil_mode"] = 1
        if rng.random() < 0.3:
            attrs["count_include_pad"] = 1
        x = random_x(rng, dtype, spatial, channels_last, c=int(rng.choice([1, 3, 8, 16, 33, 100])))
        xs = float(F32(np.exp(rng.uniform(np.log(1e-4), np.log(10.0)))))
        ys = float(F32(np.exp(rng.uniform(np.log(1e-5), np.log(10.0)))))
        compare(
            runner,
            x,
            xs,
            int(rng.integers(info.min, info.max + 1)),
            ys,
            int(rng.integers(info.min, info.max + 1)),
            attrs,
        )


@pytest.mark.parametrize("threaded", [False, True])
def test_one_short_output_row_per_plane(runner, threaded):
    """Channels first, one output row of at most 8 outputs per plane (a window over most of a
    small plane with a pad, 1-D lines): planes are summed 16 at a time (kernels.qlinear_kernels
    ._planes_at_once), group edges between planes and between thread pieces; power-of-two and
    other divisors."""
    rng = np.random.default_rng(41)
    cases = [
        ([7, 7], None, [0, 0, 1, 1], [6, 6], 0),
        ([3, 3], [3, 3], [1, 1, 0, 0], [3, 4], 1),
        ([2, 2], [2, 2], [0, 0, 1, 1], [1, 3], 0),
        ([4], [3], [1, 2], [9], 0),
        ([2], [2], [0, 1], [15], 1),
        ([2, 2, 2], [2, 2, 2], [0, 0, 0, 1, 1, 1], [1, 2, 3], 0),
    ]
    with tuning.tuned(**({"qlinear_ncx_parallel_work": 1} if threaded else {})):
        qlinear.forget()
        for kernel, strides, pads, spatial, cip in cases:
            attrs = {"kernel_shape": kernel, "pads": pads, "count_include_pad": cip}
            if strides:
                attrs["strides"] = strides
            for dtype in (np.uint8, np.int8):
                for c in (1, 16, 37):
                    x = random_x(rng, dtype, spatial, 0, n=2, c=c)
                    compare(runner, x, *random_scalars(rng, dtype), attrs)
    qlinear.forget()


@pytest.mark.parametrize("threaded", [False, True])
def test_channels_first_through_the_channels_last_kernel(runner, threaded):
    """Channels first with short rows (kernels.qlinear_kernels.pool_ncx_through_nxc): blocks of
    planes transposed, pooled channels last and transposed back give pool_ncx's bits and
    onnxruntime's, for 1 to 3 spatial axes, any pads, strides, ceil_mode and count_include_pad,
    channel counts that do not fill the last block, several images, and thread pieces."""
    rng = np.random.default_rng(43 + threaded)
    knobs = {"qlinear_ncx_parallel_work": 1} if threaded else {"qlinear_ncx_parallel_work": 1 << 60}
    taken = 0
    for _ in range(60):
        nsp = int(rng.choice([1, 2, 2, 3]))
        attrs = random_attrs(rng, nsp)
        attrs.pop("channels_last", None)
        spatial = [int(rng.integers(max(1, k - 2), k + 9)) for k in attrs["kernel_shape"]]
        for dtype in (np.uint8, np.int8):
            x = random_x(rng, dtype, spatial, 0, n=int(rng.integers(1, 4)), c=int(rng.choice([16, 17, 40, 100])))
            scalars = random_scalars(rng, dtype)
            with tuning.tuned(qlinear_ncx_through_nxc_max_width=0, **knobs):
                try:
                    native = qlinear_average_pool(x, *scalars, **attrs)
                except AvgPoolError:
                    continue
            with tuning.tuned(**knobs):
                got = compare(runner, x, *scalars, attrs)
                prepared = qlinear.prepare(
                    x.shape,
                    x.dtype,
                    *(
                        qlinear._freeze(attrs.get(name, default))
                        for name, default in (
                            ("kernel_shape", None),
                            ("strides", None),
                            ("pads", None),
                            ("auto_pad", "NOTSET"),
                            ("ceil_mode", 0),
                            ("count_include_pad", 0),
                            ("channels_last", 0),
                        )
                    ),
                )
            assert np.array_equal(got, native)
            taken += prepared.quantized.kind == quantized_pools._NCX_THROUGH_NXC
            if prepared.quantized.kind == quantized_pools._NCX_THROUGH_NXC and x.shape[0] == 1 and x.shape[1] > 16:
                assert prepared.items == 2  # one image: the two halves of its channels
    assert taken > 60


@pytest.mark.parametrize("channels_last", [0, 1])
def test_larger_inputs_threaded(runner, channels_last):
    """Inputs big enough for several chunks (on numba threads), general and global paths."""
    rng = np.random.default_rng(11 + channels_last)
    with tuning.tuned(qlinear_parallel_work=1, qlinear_global_parallel_work=1, qlinear_global_ncx_parallel_work=1):
        qlinear.forget()
        cases = [
            ([2, 2], [2, 2], [0, 0, 0, 0], [32, 56, 56], 0),
            ([3, 3], [1, 1], [1, 1, 1, 1], [24, 28, 28], 0),
            ([3, 3], [2, 2], [1, 0, 1, 2], [16, 29, 31], 1),
            ([2, 2, 2], [2, 2, 2], [0] * 6, [8, 16, 16, 16], 0),
            ([7, 7], None, None, [256, 7, 7], 0),
        ]
        for kernel, strides, pads, shape, cip in cases:
            attrs = {"kernel_shape": kernel, "channels_last": channels_last, "count_include_pad": cip}
            if strides:
                attrs["strides"] = strides
            if pads:
                attrs["pads"] = pads
            for dtype in (np.uint8, np.int8):
                x = random_x(rng, dtype, shape[1:], channels_last, n=3, c=shape[0])
                compare(runner, x, *random_scalars(rng, dtype), attrs)
    qlinear.forget()


@pytest.mark.parametrize("dequant", [0, 1])
def test_channels_last_tap_sources_and_window_sizes(runner, dequant):
    """The channels-last kernel sums taps read from the input (dequantized where read) or from a
    ring of dequantized rows (chosen where windows overlap); here each source is forced for every
    window: tap counts 1 to 25 (padded to 4 or 9, or 4 at a time into an accumulator first), inner
    windows summed together (stride 1: one run of lanes; stride > 1: several windows per call),
    clipped windows, ceil_mode overhangs, negative SAME pads (k < s), 1 to 3 spatial axes, and
    outputs cut into many pieces across threads (a row shared by two pieces: the ring holds part
    of a row), ring pixels padded apart (512 and 1024 channels). Bit-exact with onnxruntime from
    either source."""
    sources = {"dequant_reuse": 0 if dequant else 10**9, "dequant_row": 0}
    rng = np.random.default_rng(31 + dequant)
    cases = [  # kernel, strides, pads or auto_pad, spatial, channels
        ([1, 1], [1, 1], None, [5, 6], 3),
        ([1, 2], [1, 1], None, [4, 7], 17),
        ([2, 2], [2, 2], None, [7, 9], 64),
        ([2, 3], [1, 2], [1, 1, 0, 2], [6, 9], 5),
        ([3, 3], [1, 1], [1, 1, 1, 1], [8, 11], 40),
        ([3, 3], [2, 2], [1, 0, 1, 2], [9, 10], 16),
        ([3, 3], [3, 3], None, [9, 12], 8),
        ([3, 4], [1, 1], [2, 1, 0, 3], [7, 9], 3),
        ([5, 5], [1, 2], [2, 2, 2, 2], [9, 13], 33),
        ([4, 4], [3, 1], [1, 3, 2, 0], [10, 8], 1),
        ([1, 2], [2, 5], "SAME_UPPER", [5, 9], 7),
        ([3], [1], [1, 2], [20], 9),
        ([2, 2, 3], [1, 2, 1], [1, 0, 1, 0, 1, 2], [4, 5, 6], 6),
        ([2, 1, 2], [2, 1, 3], None, [5, 3, 7], 2),
        # 512 and 1024 channels: the ring's pixels are padded apart (4 KiB aliasing), windows summed one by one
        ([3, 3], [1, 1], [1, 1, 1, 1], [4, 5], 512),
        ([2, 3], [2, 1], [0, 1, 1, 0], [5, 4], 1024),
    ]
    try:
        for many_pieces in (False, True):
            pieces = {"qlinear_parallel_work": 1, "qlinear_many_pieces_work": 1} if many_pieces else {}
            # many pieces: as many as the threads take, so that rows are cut between them
            with tuning.tuned(**sources, **pieces):
                qlinear.forget()
                for kernel, strides, pads, spatial, channels in cases:
                    for ceil_mode, cip in ((0, 0), (1, 1), (1, 0)):
                        attrs = {
                            "kernel_shape": kernel,
                            "strides": strides,
                            "channels_last": 1,
                            "ceil_mode": ceil_mode,
                            "count_include_pad": cip,
                        }
                        if isinstance(pads, str):
                            attrs["auto_pad"] = pads
                        elif pads:
                            attrs["pads"] = pads
                        for dtype in (np.uint8, np.int8):
                            x = random_x(rng, dtype, spatial, 1, n=2, c=channels)
                            scalars = random_scalars(rng, dtype)
                            got = compare(runner, x, *scalars, attrs)
                            assert not isinstance(got, Exception), (kernel, strides, pads, spatial)
                            prepared = qlinear.prepare(
                                x.shape,
                                x.dtype,
                                kernel,
                                strides,
                                None if isinstance(pads, str) else pads,
                                pads if isinstance(pads, str) else "NOTSET",
                                ceil_mode,
                                cip,
                                1,
                            )
                            assert prepared.quantized.kind == quantized_pools._GENERAL_NXC
                            assert prepared.quantized.tables[0][qlinear_kernels.DEQUANT] == dequant
    finally:
        qlinear.forget()


# --------------------------------------------------------------------------------------------- #
# docs/semantics.md 5.2 examples and the arithmetic details


def test_semantics_example_ceil_overhang_counted(runner):
    x = np.array([[[10, 20, 30, 40]]], np.uint8)
    attrs = dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)
    got = compare(runner, x, 1.0, 0, 1.0, 0, attrs)
    assert got.tolist() == [[[10, 30, 13]]]  # 40 / 3 = 13.3: the window past the end pad counts
    x8 = np.array([[[10, 20, 30, 40]]], np.int8)
    assert compare(runner, x8, 1.0, None, 1.0, None, attrs).tolist() == [[[10, 30, 13]]]


def test_semantics_example_global_path_differs_from_general(runner):
    x = np.array([[[206, 62]]], np.uint8)
    global_ = compare(runner, x, 0.1, 95, 0.2, 115, dict(kernel_shape=[2]))
    assert global_.tolist() == [[[135]]]
    # the same window on the general float path (a pad turns the integer path off): 134
    general = compare(runner, x, 0.1, 95, 0.2, 115, dict(kernel_shape=[2], pads=[0, 1]))
    assert general.tolist() == [[[134, 98]]]
    nhwc = compare(runner, x.reshape(1, 2, 1), 0.1, 95, 0.2, 115, dict(kernel_shape=[2], channels_last=1))
    assert nhwc.tolist() == [[[135]]]


def test_round_half_to_even(runner):
    x = np.array([[[1, 2, 3, 4, 5, 6, 0, 5]]], np.uint8)  # pair averages 1.5 3.5 5.5 2.5
    got = compare(runner, x, 1.0, 0, 1.0, 0, dict(kernel_shape=[2], strides=[2]))
    assert got.tolist() == [[[2, 4, 6, 2]]]


def test_onnxruntime_same_padding_with_kernel_below_stride(runner):
    """onnxruntime's SAME pad can be negative (k < s): every window shifts right (semantics 3.1
    says the float op follows the spec; QLinearAveragePool follows onnxruntime)."""
    x = np.arange(1, 8, dtype=np.uint8).reshape(1, 1, 7)
    assert compare(runner, x, 1.0, 0, 1.0, 0, dict(kernel_shape=[1], strides=[4], auto_pad="SAME_UPPER")).tolist() == [
        [[2, 6]]
    ]
    assert compare(runner, x, 1.0, 0, 1.0, 0, dict(kernel_shape=[1], strides=[4], auto_pad="SAME_LOWER")).tolist() == [
        [[1, 5]]
    ]


def test_onnxruntime_truncating_floor(runner):
    """Floor mode divides with C++ truncation: L + pads - k in (-s, 0) still gives one clipped
    window, and in (-2s, -s] an empty axis instead of an error."""
    x = np.array([[[7]]], np.uint8)
    assert compare(runner, x, 1.0, 0, 1.0, 0, dict(kernel_shape=[2], strides=[2])).tolist() == [[[7]]]
    assert compare(runner, x, 1.0, 0, 1.0, 0, dict(kernel_shape=[4], strides=[2])).shape == (1, 1, 0)
    with pytest.raises(AvgPoolError, match="spatial axis 0 has no output"):
        ours(x, 1.0, 0, 1.0, 0, dict(kernel_shape=[4], strides=[1]))


def test_optional_zero_points_and_scalar_forms(runner):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (2, 3, 9, 8)).astype(np.uint8)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    expected = compare(runner, x, 0.3, None, 0.7, None, attrs)
    # onnxruntime with y_zero_point really absent (a 4-input node)
    assert np.array_equal(runner.run(x, 0.3, 0, 0.7, None, attrs, with_zp=False), expected)
    x8 = x.view(np.int8)
    assert np.array_equal(
        runner.run(x8, 0.3, 0, 0.7, None, attrs, with_zp=False), ours(x8, 0.3, None, 0.7, None, attrs)
    )
    assert np.array_equal(expected, ours(x, 0.3, 0, 0.7, 0, attrs))
    for xs, xz, ys, yz in [
        (F32(0.3), np.uint8(0), F32(0.7), np.uint8(0)),
        (np.array([0.3], F32), np.array([0], np.uint8), np.array(0.7, F32), np.array(0, np.uint8)),
        ([0.3], None, (0.7,), None),
        (np.float64(0.3), 0, 0.7, None),
    ]:
        assert np.array_equal(ours(x, xs, xz, ys, yz, attrs), expected)


def test_any_strides_and_non_contiguous_input(runner):
    rng = np.random.default_rng(4)
    base = rng.integers(-128, 128, (2, 9, 12, 5)).astype(np.int8)
    view = base[:, ::2, 1:, :].transpose(0, 3, 1, 2)  # N x C x H x W, not contiguous
    attrs = dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 2], count_include_pad=1)
    expected = compare(runner, np.ascontiguousarray(view), 0.05, -3, 0.04, 9, attrs)
    assert np.array_equal(ours(view, 0.05, -3, 0.04, 9, attrs), expected)
    nhwc = base[:, ::2, 1:, :]
    assert np.array_equal(ours(nhwc, 0.05, -3, 0.04, 9, {**attrs, "channels_last": 1}), np.moveaxis(expected, 1, -1))


def _sum_orders(windows, orders, xs, xz):
    """float32 sequential sums of the dequantized windows (M, T) in each tap order."""
    deq = (F32(xs) * (windows.astype(F32) - F32(xz))).astype(F32)
    sums = []
    for order in orders:
        acc = np.zeros(len(windows), F32)
        for t in order:
            acc = (acc + deq[:, t]).astype(F32)
        sums.append(acc)
    return sums


def _crafted_windows(rng, taps_shape, xs, xz, count):
    """Windows whose float32 sum in row-major tap order quantizes differently from column-major
    order and from summing the rows first, each with its own y_scale placing a .5 between them."""
    taps = int(np.prod(taps_shape))
    idx = np.arange(taps).reshape(taps_shape)
    col_major = idx.transpose(tuple(reversed(range(idx.ndim)))).ravel()
    windows = rng.integers(0, 256, (40000, taps)).astype(np.uint8)
    row, col = _sum_orders(windows, [range(taps), col_major], xs, xz)
    row_first = np.zeros(len(windows), F32)  # sum each row (last axis) first, then the rows
    deq = (F32(xs) * (windows.astype(F32) - F32(xz))).astype(F32).reshape(len(windows), -1, taps_shape[-1])
    for r in range(deq.shape[1]):
        part = np.zeros(len(windows), F32)
        for t in range(deq.shape[2]):
            part = (part + deq[:, r, t]).astype(F32)
        row_first = (row_first + part).astype(F32)
    v_row, v_col, v_rf = (s / F32(taps) for s in (row, col, row_first))
    keep = (v_row != v_col) & (np.abs(v_row) > 1)
    target = np.floor(np.abs(v_row.astype(np.float64)) / 0.9) + 0.5
    ys = ((v_row.astype(np.float64) + v_col) / 2 / (np.sign(v_row) * target)).astype(F32)
    q = [np.rint((v / ys).astype(F32)) for v in (v_row, v_col, v_rf)]
    keep &= (q[0] != q[1]) & (np.abs(q[0]) < 120)
    chosen = np.flatnonzero(keep)[:count]
    return windows[chosen].reshape((-1, *taps_shape)), ys[chosen], int((q[0] != q[2])[chosen].sum())


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("taps_shape", [(3, 3), (2, 3, 2)])
def test_tap_order_is_row_major(runner, taps_shape, channels_last):
    """onnxruntime sums the dequantized taps in float32 in row-major order over the spatial axes,
    per channel, in both layouts: crafted windows where another order rounds differently."""
    rng = np.random.default_rng(sum(taps_shape) + channels_last)
    xs, xz = 0.7371, 3
    windows, yss, differs_from_row_first = _crafted_windows(rng, taps_shape, xs, xz, 60)
    assert len(windows) >= 40
    if len(taps_shape) == 3:
        assert differs_from_row_first > 0
    nsp = len(taps_shape)
    attrs = {"kernel_shape": list(taps_shape), "channels_last": channels_last}
    for window, ys in zip(windows, yss):
        spatial = [n + 1 for n in taps_shape]  # one more per axis: not the global path
        x = np.zeros((1, 2, *spatial), np.uint8)
        x[(0, 0, *[slice(0, n) for n in taps_shape])] = window
        x[0, 1] = rng.integers(0, 256, spatial)
        if channels_last:
            x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
        got = compare(runner, x, xs, xz, float(ys), 0, attrs)
        first = got[(0, 0) + (0,) * nsp] if not channels_last else got[(0,) + (0,) * nsp + (0,)]
        assert first == _reference_general(window.reshape(-1), xs, xz, ys, 0, len(window.reshape(-1)), np.uint8)


def _reference_general(values, xs, xz, ys, yz, divisor, dtype):
    """onnxruntime's general-path arithmetic for one window, in float32, taps in the given order."""
    acc = F32(0)
    for v in values:
        acc = F32(acc + F32(F32(xs) * F32(int(v) - xz)))
    q = F32(F32(F32(acc / F32(divisor)) / F32(ys)) + F32(yz))
    info = np.iinfo(dtype)
    return int(np.clip(np.rint(q), info.min, info.max)) if np.isfinite(q) else info.min


def test_global_path_int32_wraparound(runner):
    """The integer path sums in int32 lanes (semantics 5.2, as onnxruntime's global kernel does):
    2916 * 2916 values of 255 overflow and wrap to a negative sum, which quantizes to 0; with a pad
    the float path gives 255. avgpool's answer is checked against the wrapped sum worked out here,
    whatever the onnxruntime version; that onnxruntime gives the same 0 is asserted only for the
    releases where it was seen (through 1.32, ORT_SEEN_WRAPPING): a later one summing in 64 bits
    would no longer be the arithmetic avgpool documents, and this test would not follow it."""
    side = 2916
    n = side * side

    def quantized(value):  # the int32 lane's sum of n values, times x_scale 1 over n * y_scale 2**-8
        wrapped = (n * value + 2**31) % 2**32 - 2**31
        return int(np.clip(np.rint(wrapped / n / 2.0**-8), 0, 255)), wrapped

    assert quantized(255) == (0, n * 255 - 2**32)  # wraps negative: uint8's minimum
    assert quantized(1) == (255, n)  # no wrap: 256, clipped

    def check(x, *args):
        return compare(runner, x, *args) if ORT_SEEN_WRAPPING else ours(x, *args)

    x = np.full((1, 1, side, side), 255, np.uint8)
    assert check(x, 1.0, 0, 2.0**-8, 0, dict(kernel_shape=[side, side])).tolist() == [[[[quantized(255)[0]]]]]
    assert ours(x, 1.0, 0, 2.0**-8, 0, dict(kernel_shape=[side, side], pads=[0, 0, 0, 1])).tolist() == [[[[255, 255]]]]
    nhwc = np.full((1, side, side, 2), 255, np.uint8)
    nhwc[..., 1] = 1
    got = check(nhwc, 1.0, 0, 2.0**-8, 0, dict(kernel_shape=[side, side], channels_last=1))
    assert got.tolist() == [[[[quantized(255)[0], quantized(1)[0]]]]]


def test_saturation_where_onnxruntime_is_undefined():
    """A quotient outside int32 saturates to the dtype's range (onnxruntime's int cast is undefined
    there: x86 builds give the minimum whatever the sign); NaN (dequantized values overflowing
    float32 to inf - inf) gives the minimum."""
    x = np.array([[[0, 255, 128, 100]]], np.uint8)
    assert ours(x, 1.0, 128, 1e-30, 0, dict(kernel_shape=[1])).tolist() == [[[0, 255, 0, 0]]]
    assert ours(x.view(np.int8), 1.0, 0, 1e-30, 0, dict(kernel_shape=[1])).tolist() == [[[0, -128, -128, 127]]]
    assert ours(x, 3e38, 0, 1.0, 0, dict(kernel_shape=[2], strides=[2])).tolist() == [[[255, 255]]]
    y = np.array([[[255, 0]]], np.uint8)  # windows [255] -> +inf, [255, 0] -> inf - inf = NaN
    assert ours(y, 3e38, 128, 1.0, 7, dict(kernel_shape=[2], pads=[1, 0])).tolist() == [[[255, 0]]]


def _reference_nd(x, xs, xz, ys, yz, kernel, strides, pads, cip):
    """onnxruntime's general path for any number of spatial axes (NCX, explicit pads, floor)."""
    n = len(kernel)
    spatial = x.shape[2:]
    outs = [(spatial[a] + pads[a] + pads[a + n] - kernel[a]) // strides[a] + 1 for a in range(n)]
    y = np.empty(x.shape[:2] + tuple(outs), x.dtype)
    for b, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*[range(k) for k in outs]):
            ranges = []
            for a in range(n):
                start = o[a] * strides[a] - pads[a]
                ranges.append(range(max(start, 0), min(start + kernel[a], spatial[a])))
            taps = [x[(b, c, *t)] for t in itertools.product(*ranges)]
            divisor = math.prod(kernel) if cip else math.prod(len(r) for r in ranges)
            y[(b, c, *o)] = _reference_general(taps, xs, xz, ys, yz, divisor, x.dtype)
    return y


@pytest.mark.parametrize("channels_last", [0, 1])
def test_four_spatial_axes(runner, channels_last):
    """onnxruntime stops at 3 spatial axes; avgpool goes on with the same arithmetic. The
    reference is first checked against onnxruntime in 3-D."""
    rng = np.random.default_rng(5 + channels_last)
    x3 = rng.integers(0, 256, (1, 2, 5, 4, 6)).astype(np.uint8)
    attrs3 = dict(kernel_shape=[2, 3, 2], strides=[2, 1, 3], pads=[1, 0, 1, 0, 2, 1])
    expected3 = compare(runner, x3, 0.37, 9, 0.29, 4, attrs3)
    assert np.array_equal(_reference_nd(x3, 0.37, 9, 0.29, 4, [2, 3, 2], [2, 1, 3], attrs3["pads"], 0), expected3)
    x = rng.integers(-128, 128, (2, 3, 4, 5, 3, 6)).astype(np.int8)
    for kernel, strides, pads, cip in [
        ([2, 2, 2, 3], [1, 2, 1, 2], [1, 0, 1, 2, 0, 1, 0, 1], 0),
        ([3, 1, 2, 2], [2, 1, 1, 3], [2, 0, 1, 0, 1, 0, 0, 1], 1),
    ]:
        expected = _reference_nd(x, 0.11, -7, 0.05, 3, kernel, strides, pads, cip)
        attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, count_include_pad=cip)
        if channels_last:
            got = ours(np.moveaxis(x, 1, -1), 0.11, -7, 0.05, 3, {**attrs, "channels_last": 1})
            assert np.array_equal(got, np.moveaxis(expected, 1, -1))
        else:
            assert np.array_equal(ours(x, 0.11, -7, 0.05, 3, attrs), expected)


def test_empty_batch_and_output_shapes(runner):
    x = np.zeros((0, 3, 5, 5), np.uint8)
    assert compare(runner, x, 0.1, 1, 0.1, 1, dict(kernel_shape=[2, 2])).shape == (0, 3, 4, 4)
    assert ours(np.zeros((0, 5, 5, 3), np.int8), 0.1, 1, 0.1, 1, dict(kernel_shape=[5, 5], channels_last=1)).shape == (
        0,
        1,
        1,
        3,
    )


def test_repeated_calls_use_caches_correctly():
    x = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    a = ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=[2, 2]))
    b = ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=(2, 2)))
    c = ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=np.array([2, 2])))
    assert np.array_equal(a, b) and np.array_equal(a, c)
    # a float kernel is refused even after the int one is cached (2.0 == 2 as a dict key)
    with pytest.raises(AvgPoolError, match="`kernel_shape` must be an integer"):
        ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=[2.0, 2.0]))
    with pytest.raises(AvgPoolError, match="`x_zero_point` must be an integer"):
        ours(x, 0.5, 1.0, 0.25, 2, dict(kernel_shape=[2, 2]))
    d = ours(x, 0.5, 1, 0.5, 2, dict(kernel_shape=[2, 2]))  # other scalars, same geometry
    assert not np.array_equal(a, d)


def test_nodes_called_in_turn_with_their_own_objects_skip_the_key(monkeypatch):
    """A model runner calls node after node with each node's own objects: after each node's
    first call, none builds a key, and each gets its own result."""
    rng = np.random.default_rng(5)
    nodes = [
        ((0.5, 1, 0.25, 2), [2, 2], [2, 2], (1, 16, 8, 8), 0),
        ((0.1, 3, 0.2, 5), [3, 3], [1, 1], (1, 8, 8, 8), 1),
        ((0.5, 1, 0.25, 2), [2, 2], [2, 2], (1, 16, 8, 8), 0),
    ]  # the first one's call again, by value
    inputs = [rng.integers(0, 256, shape).astype(np.uint8) for *_, shape, _ in nodes]
    expected = []
    for x, (scalars, kernel, strides, _, cl) in zip(inputs, nodes):
        qlinear.forget()
        expected.append(qlinear_average_pool(x, *scalars, list(kernel), strides=list(strides), channels_last=cl))
    qlinear.forget()
    keys = []
    find = qlinear._MEMO.by_key.find
    monkeypatch.setattr(qlinear._MEMO.by_key, "find", lambda key: keys.append(key) or find(key))
    for round_ in range(3):
        for x, (scalars, kernel, strides, _, cl), want in zip(inputs, nodes, expected):
            assert np.array_equal(qlinear_average_pool(x, *scalars, kernel, strides=strides, channels_last=cl), want)
        assert len(keys) == (3 if round_ == 0 else 1 if round_ == 1 else 0)  # node 3 is kept when it repeats
        keys.clear()


def test_the_last_call_is_repeated_only_with_unchanged_arguments(runner):
    """A call repeated with the very same argument objects skips the memo's key; a list edited in
    place since, or a scalar given as an array (mutable), goes through validation again."""
    qlinear.forget()
    x = np.arange(36, dtype=np.uint8).reshape(1, 1, 6, 6)
    kernel, strides, pads = [2, 2], [1, 1], [0, 0, 0, 0]
    first = ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    assert qlinear._MEMO.by_identity.get(id(kernel))[0] is kernel
    assert np.array_equal(ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads)), first)
    y = x[:, :, ::-1, :].copy()  # another input of the same shape: the new data is pooled
    compare(runner, y, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    kernel[:] = [3, 3]  # edited in place: a new geometry
    assert ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads)).shape == (1, 1, 4, 4)
    kernel[:] = [True, True]  # equal to [1, 1] as values, but refused
    with pytest.raises(AvgPoolError, match="`kernel_shape` must be an integer"):
        ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    kernel[:] = [2, 2]
    pads[2:] = [1, 1]
    compare(runner, x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    assert qlinear._MEMO.by_identity.get(id(kernel))[0] is kernel
    kernel[1] = 2.0  # equal to the item remembered, edited in place since: refused
    with pytest.raises(AvgPoolError, match="`kernel_shape` must be an integer"):
        ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    kernel[1] = 2
    strides.append(1)  # longer: refused
    with pytest.raises(AvgPoolError, match="strides"):
        ours(x, 0.5, 1, 0.25, 2, dict(kernel_shape=kernel, strides=strides, pads=pads))
    strides.pop()
    x_scale = np.array([0.5], F32)  # an array scalar: mutable, never repeated by identity
    a = ours(x, x_scale, 1, 0.25, 2, dict(kernel_shape=kernel))
    x_scale[0] = 0.25
    b = ours(x, x_scale, 1, 0.25, 2, dict(kernel_shape=kernel))
    assert np.array_equal(b, ours(x, 0.25, 1, 0.25, 2, dict(kernel_shape=kernel))) and not np.array_equal(a, b)
    qlinear.forget()


# --------------------------------------------------------------------------------------------- #
# every refusal names the attribute


X = np.zeros((1, 2, 4, 4), np.uint8)
OK = dict(kernel_shape=[2, 2])


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((X.astype(np.float32), 0.1, 0, 0.1, 0), OK, "`X` has dtype float32: it must be uint8 or int8"),
        ((X.astype(np.uint16), 0.1, 0, 0.1, 0), OK, "`X` has dtype uint16"),
        ((np.array([[1, 2], [3]], dtype=object), 0.1, 0, 0.1, 0), OK, "`X` has dtype object"),
        ((np.zeros((2, 4), np.uint8), 0.1, 0, 0.1, 0), dict(kernel_shape=[2]), "`X` has rank 2"),
        ((np.zeros((1, 0, 4, 4), np.uint8), 0.1, 0, 0.1, 0), OK, "only the batch size N may be 0"),
        ((np.zeros((1, 2, 0, 4), np.uint8), 0.1, 0, 0.1, 0), OK, "only the batch size N may be 0"),
        (
            (X, 0.1, 0, 0.1, 0),
            dict(kernel_shape=[2]),
            "`kernel_shape` has 1 values (2,) but the input (1, 2, 4, 4) has 2",
        ),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 0]), "`kernel_shape` is (2, 0): every value must be positive"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], strides=[1]), "`strides` has 1 values"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], strides=[1, 0]), "`strides` is (1, 0)"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], pads=[1, 1]), "`pads` has 2 values"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], pads=[0, 0, -1, 0]), "`pads` is (0, 0, -1, 0)"),
        (
            (X, 0.1, 0, 0.1, 0),
            dict(kernel_shape=[2, 2], pads=[0, 2, 0, 0]),
            "`pads` is (0, 2, 0, 0): on spatial axis 1 a pad is not smaller than the kernel size 2",
        ),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], auto_pad="same_upper"), "`auto_pad` is 'same_upper'"),
        (
            (X, 0.1, 0, 0.1, 0),
            dict(kernel_shape=[2, 2], auto_pad="VALID", pads=[1, 0, 0, 0]),
            "explicit pads cannot be used with auto_pad",
        ),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], ceil_mode=2), "`ceil_mode` must be 0, 1"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], count_include_pad="yes"), "`count_include_pad` must be 0, 1"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[2, 2], channels_last=None), "`channels_last` must be 0, 1"),
        ((X, 0.1, 0, 0.1, 0), dict(kernel_shape=[6, 2]), "spatial axis 0 has no output (-1)"),
        ((X, np.array([0.1, 0.2], F32), 0, 0.1, 0), OK, "`x_scale` has shape (2,): it must be a scalar"),
        ((X, 0.1, 0, np.ones((1, 1), F32), 0), OK, "`y_scale` has shape (1, 1)"),
        ((X, 0.1, 0, [0.1, 0.2], 0), OK, "`y_scale` has 2 values"),
        ((X, "0.1", 0, 0.1, 0), OK, "`x_scale` must be a real number"),
        ((X, True, 0, 0.1, 0), OK, "`x_scale` must be a real number"),
        ((X, math.nan, 0, 0.1, 0), OK, "`x_scale` is nan: it must be finite"),
        ((X, 0.1, 0, math.inf, 0), OK, "`y_scale` is inf: it must be finite"),
        ((X, 0.1, 0, 1e39, 0), OK, "`y_scale` is 1e+39, as float32 inf: it must be finite"),
        ((X, 0.1, 0, 0.0, 0), OK, "`y_scale` is 0: it must be non-zero"),
        ((X, 0.1, np.int8(0), 0.1, 0), OK, "`x_zero_point` has dtype int8: it must have X's dtype uint8"),
        ((X, 0.1, 0, 0.1, np.array([0], np.int32)), OK, "`y_zero_point` has dtype int32"),
        ((X, 0.1, np.zeros(2, np.uint8), 0.1, 0), OK, "`x_zero_point` has shape (2,)"),
        ((X, 0.1, 300, 0.1, 0), OK, "`x_zero_point` is 300: it does not fit X's dtype uint8 ([0, 255])"),
        ((X.view(np.int8), 0.1, 0, 0.1, 128), OK, "`y_zero_point` is 128: it does not fit X's dtype int8"),
        ((X, 0.1, 0.5, 0.1, 0), OK, "`x_zero_point` must be an integer of X's dtype uint8"),
        ((X, 0.1, 0, 0.1, False), OK, "`y_zero_point` must be an integer"),
        (
            (X, 1.0, 0, 1e-4, 0),
            dict(kernel_shape=[4, 4]),
            "needs 2**-32 <= x_scale / (y_scale * 16) < 256; with `x_scale` 1.0 and `y_scale` 9.999999747378752e-05 "
            "it is 625.0",
        ),
        ((X, 1e-12, 0, 1.0, 0), dict(kernel_shape=[4, 4], channels_last=0), "integer global-average path"),
        ((X, 0.1, 0, -0.1, 0), dict(kernel_shape=[4, 4]), "it is -0.0625"),
    ],
)
def test_refusals_name_the_attribute(args, kwargs, message):
    with pytest.raises(AvgPoolError) as info:
        qlinear_average_pool(*args, **kwargs)
    text = str(info.value)
    assert text.startswith("QLinearAveragePool: "), text
    assert message in text, text


def test_global_window_too_large():
    x = np.zeros((1, 1, 4096, 4096), np.uint8)
    with pytest.raises(
        AvgPoolError,
        match=r"QLinearAveragePool: `kernel_shape` \(4096, 4096\) covers the whole "
        r"input.*windows of 16777216 \(2\*\*24\) elements or more",
    ):
        qlinear_average_pool(x, 1.0, 0, 1.0, 0, [4096, 4096])


def test_refusals_match_onnxruntime(runner):
    """What avgpool refuses for onnxruntime's reasons, onnxruntime refuses too."""
    for x, xs, ys, attrs in [
        (X, 0.1, 0.1, dict(kernel_shape=[2, 2], pads=[0, 2, 0, 0])),
        (X, 1.0, 1e-4, dict(kernel_shape=[4, 4])),
        (X, 1e-12, 1.0, dict(kernel_shape=[4, 4])),
        (X, 0.1, -0.1, dict(kernel_shape=[4, 4])),
        (X, 0.1, 0.1, dict(kernel_shape=[6, 2])),
        (np.zeros((1, 0, 4, 4), np.uint8), 0.1, 0.1, OK),
    ]:
        with pytest.raises(AvgPoolError):
            ours(x, xs, 0, ys, 0, attrs)
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own exception types
            runner.run(x, xs, 0, ys, 0, attrs)


def test_no_dilations_attribute():
    with pytest.raises(TypeError, match="dilations"):
        qlinear_average_pool(X, 0.1, 0, 0.1, 0, [2, 2], dilations=[1, 1])


def test_unreadable_input():
    class Bad:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("no data")

    with pytest.raises(AvgPoolError, match="QLinearAveragePool: `X` cannot be read as an array: no data"):
        qlinear_average_pool(Bad(), 0.1, 0, 0.1, 0, [2, 2])
