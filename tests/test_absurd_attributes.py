"""Attribute values far beyond any model's (kernels and pads in the billions, dilated extents past
int64, outputs with a zero axis and a huge one): each call answers quickly with the definition's
values, or is refused with an AvgPoolError naming the attribute, never hangs or fails in numpy."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool
from avgpool._core import memo, tables
from avgpool._core.shape import AxisGeometry


def test_a_kernel_longer_than_the_axis_is_one_block_per_residue_class():
    # the block sums stepped through every one of a block's ``kernel`` taps: k = 2**40 on 10
    # values took hours, k = 10**8 1.2 s
    for length, kernel, dilation, expected in [(10, 10**8, 1, 10), (10, 2**40, 3, 4), (100, 30, 1, 30)]:
        out = 1
        g = AxisGeometry(length, kernel, 1, dilation, kernel, kernel, out)
        assert tables.block_size(g, 10**12, 1) == expected


def _old_block_size(geometry, taps, inner):
    """The rule before: blocks of the kernel, however short the axis."""
    block = _new_block_size(geometry, taps, inner)
    return geometry.kernel if block else 0


_new_block_size = tables.block_size


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.float32])
def test_one_block_per_class_gives_the_bits_of_blocks_of_the_kernel(monkeypatch, dtype):
    rng = np.random.default_rng(5)
    calls = []
    for _ in range(30):
        length = int(rng.integers(1, 30))
        kernel, dilation = int(rng.integers(25, 90)), int(rng.integers(1, 4))
        extent = (kernel - 1) * dilation + 1
        pad = int(rng.integers(extent // 2, extent))
        x = rng.standard_normal((2, 3, length)).astype(dtype)
        x[0, 0, 0] = np.nan  # the float32 path too
        attributes = dict(pads=[pad, pad], dilations=[dilation], count_include_pad=int(rng.integers(0, 2)))
        calls.append((x, [kernel], attributes))
    memo.clear_all()
    new = [avgpool.average_pool(x, k, **a) for x, k, a in calls]
    monkeypatch.setattr(tables, "block_size", _old_block_size)
    memo.clear_all()
    try:
        old = [avgpool.average_pool(x, k, **a) for x, k, a in calls]
    finally:
        monkeypatch.undo()
        memo.clear_all()
    for a, b in zip(new, old):
        assert a.tobytes() == b.tobytes()


def test_a_kernel_of_a_hundred_million_on_ten_values_is_their_mean():
    x = np.random.default_rng(1).random((1, 2, 10))
    y = avgpool.average_pool(x, [10**8], pads=[5 * 10**7] * 2)
    assert y.shape == (1, 2, 11)  # 10 + 2 * 5e7 - 1e8 + 1
    np.testing.assert_allclose(y, np.broadcast_to(x.mean(axis=-1, keepdims=True), y.shape), rtol=1e-15)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: avgpool.average_pool(x, [306184047], dilations=[60247241209], auto_pad="SAME_UPPER"),
        lambda x: avgpool.average_pool(x, [2**40], dilations=[2**25], auto_pad="SAME_UPPER"),
        lambda x: avgpool.average_pool(x, [3], dilations=[2**40], pads=[2**40, 2**40]),
        lambda x: avgpool.openvino.avg_pool(
            x,
            [2**40],
            strides=[1],
            pads_begin=[0],
            pads_end=[0],
            dilations=[2**25],
            auto_pad="same_upper",
            exclude_pad=True,
            version=16,
        ),
    ],
)
def test_a_dilated_extent_past_the_supported_values_is_refused(call):
    # each value within 2**40, the extent (k - 1) * d + 1 not: [306184047] dilated by 60247241209
    # gave NaN in 9 of 10 windows (int64 wrapped), [2**40] by 2**25 an OverflowError from numpy
    x = np.arange(1, 11, dtype=np.float64).reshape(1, 1, 10)
    with pytest.raises(
        avgpool.AvgPoolError,
        match=r"(AveragePool-22|AvgPool-16): `kernel(_shape)?` .* `dilations` .*"
        r"dilated extent of axis 0.* is larger than the supported 1099511627776",
    ):
        call(x)


def test_the_largest_supported_dilated_extent_still_pools():
    x = np.arange(1, 11, dtype=np.float64).reshape(1, 1, 10)
    d = 2**40 - 1  # kernel 2: extent 2**40, the largest supported
    y = avgpool.average_pool(x, [2], dilations=[d], pads=[d - 3, 0])
    # window i: taps i - (d - 3) (in the padding) and i + 3
    np.testing.assert_array_equal(y, x[..., 3:])


@pytest.mark.parametrize(
    "call",
    [
        lambda: avgpool.average_pool(np.zeros((0, 1, 10, 10), np.float32), [1, 1], pads=[10**6] * 4),
        lambda: avgpool.average_pool(np.zeros((1, 4, 4, 0), np.float32), [1, 1], pads=[10**6] * 4, layout="NXC"),
        lambda: avgpool.onednn.avg_pool(
            np.zeros((0, 4, 4, 2), np.float32),
            [1, 1],
            strides=[1, 1],
            pads_begin=[10**6] * 2,
            pads_end=[10**6] * 2,
            exclude_pad=False,
        ),
        lambda: avgpool.average_pool(np.zeros((0, 1, 10)), [1], pads=[10**9] * 2),
        lambda: avgpool.AveragePool([1], pads=[10**9] * 2)(np.zeros((0, 1, 10), np.float16)),
        lambda: avgpool.qlinear_average_pool(np.zeros((0, 1, 10), np.uint8), 0.1, 0, 0.1, 0, [2], pads=[1, 1]),
    ],
)
def test_an_empty_output_with_a_huge_axis_builds_no_tables(call):
    # 15-45 s each (window tables built tile by tile for nothing), or refused for tables never built
    y = call()
    assert y.size == 0 and max(y.shape) >= 10


def test_an_output_numpy_cannot_make_is_refused_even_when_empty():
    x = np.zeros((0, 1, 4, 4, 4), np.float32)
    with pytest.raises(
        avgpool.AvgPoolError, match="AveragePool-22: .* empty output of shape 0x1x2000004x2000004x2000004, which numpy"
    ):
        avgpool.average_pool(x, [1, 1, 1], pads=[10**6] * 6)


@pytest.mark.parametrize("name", ["x_scale", "y_scale"])
@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_a_scale_beyond_float64_is_refused_as_not_finite(name, value):
    scalars = dict(x_scale=0.1, y_scale=0.2)
    scalars[name] = value
    x = np.zeros((1, 1, 4, 4), np.uint8)
    with pytest.raises(avgpool.AvgPoolError, match=f"QLinearAveragePool: `{name}` is -?1000.*: it must be finite"):
        avgpool.qlinear_average_pool(x, scalars["x_scale"], 0, scalars["y_scale"], 0, [2, 2])


def _masked(dtype):
    data = np.arange(16).reshape(1, 1, 4, 4).astype(dtype)
    return np.ma.array(data, mask=np.eye(4, dtype=bool)[None, None])


@pytest.mark.parametrize(
    "call, label",
    [
        (lambda: avgpool.QLinearAveragePool(0.1, 0, 0.1, 0, [2, 2])(_masked(np.uint8)), "QLinearAveragePool"),
        (
            lambda: avgpool.openvino.avg_pool(
                _masked(np.float32), [2, 2], strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True
            ),
            "OpenVINO AvgPool-16",
        ),
        (lambda: avgpool.qlinear_average_pool(_masked(np.uint8), 0.1, 0, 0.1, 0, [2, 2]), "QLinearAveragePool"),
    ],
)
def test_a_masked_array_with_masked_values_is_refused(call, label):
    # numpy drops the mask when it makes an array: the masked values were pooled as data
    with pytest.raises(avgpool.AvgPoolError, match=f"{label}: .*masked array with 4 masked values"):
        call()


def test_a_masked_array_without_masked_values_is_its_data():
    # average_pool and AveragePool take masked arrays (masked values are missing: tests/test_skipna.py)
    x = np.random.default_rng(2).random((1, 2, 5, 5))
    for y in (avgpool.average_pool(np.ma.array(x), [2, 2]), avgpool.AveragePool([2, 2])(np.ma.array(x))):
        assert isinstance(y, np.ma.MaskedArray) and not np.ma.getmaskarray(y).any()
        assert np.ma.getdata(y).tobytes() == avgpool.average_pool(x, [2, 2]).tobytes()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kernel={"z": 3}), "`kernel` names dim 'z', which the DataArray does not have"),
        (dict(kernel={"y": 3}, pads={"y": 1}), "`pads` of dim 'y' is 1: it must be a pair"),
        (dict(kernel=[3, 3]), "`kernel` is \\[3, 3\\]: it must map"),
        (dict(kernel={"y": 3}, strides={"x": 2}), "`strides` names dim 'x', which `kernel` does not pool"),
        (dict(kernel={"y": 3}, opset=11), "`kernel` names|AveragePool-11"),
    ],
)
def test_avgpool_xarray_names_the_operator_in_its_own_checks(kwargs, message):
    xr = pytest.importorskip("xarray")
    import avgpool.xarray

    a = xr.DataArray(np.zeros((4, 4)), dims=("y", "x"))
    if "opset" in kwargs:  # the label follows the opset
        with pytest.raises(avgpool.AvgPoolError, match="^AveragePool-11: `pads` of dim"):
            avgpool.xarray.average_pool(a, {"y": 3}, pads={"y": 1}, opset=11)
        return
    with pytest.raises(avgpool.AvgPoolError, match=f"^AveragePool-22: {message}"):
        avgpool.xarray.average_pool(a, **kwargs)


def test_an_output_beyond_an_address_space_limit_is_refused_not_a_memory_error():
    # under `ulimit -v` (or a container's memory limit) the machine's memory was the bound, and
    # numpy's np.empty failed with a raw MemoryError
    import resource
    import subprocess
    import sys

    code = (
        "import numpy as np, avgpool\n"
        "try:\n"
        "    avgpool.average_pool(np.zeros((1, 1, 10, 10), np.float32), [1, 1], pads=[20000] * 4)\n"
        "except avgpool.AvgPoolError as err:\n"
        "    print(err)\n"
    )
    limit = 3 * 2**30

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert run.returncode == 0, run.stderr
    assert "1x1x40010x40010 (5.96 GiB of float32" in run.stdout
    assert "more than the memory this process may use (3 GiB)" in run.stdout
