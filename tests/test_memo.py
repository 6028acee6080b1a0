"""The plain functions remember validated calls: same results and errors as validating each time,
for arrays that share a shape but not strides, dtype or byte order."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool
from avgpool._core import caches, memo
from avgpool._ops import onednn, openvino
from avgpool._ops import onnx as api


def _fresh(function, *args, **kwargs):
    """The result of a call validated from scratch (every memo and last call forgotten first)."""
    memo.clear_all()
    return function(*args, **kwargs)


def test_same_shape_other_strides_dtype_and_byte_order_get_their_own_results():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 3, 9, 10))
    variants = [
        base.astype(np.float32),
        base.astype(np.float64),
        np.asfortranarray(base.astype(np.float32)),
        base.astype(">f4"),
        np.ascontiguousarray(base.astype(np.float32)[:, :, ::-1]),
        base.astype(np.float16),
        np.transpose(base.astype(np.float32).transpose(0, 1, 3, 2), (0, 1, 3, 2)),
    ]
    attributes = dict(strides=[2, 1], pads=[1, 1, 1, 1], ceil_mode=True)
    for x in variants * 2:  # the second round is answered from the memo
        remembered = avgpool.average_pool(x, [3, 3], **attributes)
        assert remembered.dtype == x.dtype.newbyteorder("=")
        np.testing.assert_array_equal(remembered, _fresh(avgpool.average_pool, x, [3, 3], **attributes))
        np.testing.assert_array_equal(remembered, avgpool.AveragePool([3, 3], **attributes)(x))


@pytest.mark.parametrize(
    "bad",
    [
        dict(kernel_shape=[2.0, 2.0]),
        dict(kernel_shape=[2, 2], ceil_mode=2.5),
        dict(kernel_shape=[2, 2], opset=22.0),
        dict(kernel_shape=[True, 2]),
        dict(kernel_shape=[2, 2], layout="nhwc"),
        dict(kernel_shape=[2, 2], ceil_mode=0.0),
        dict(kernel_shape=[2, 2], count_include_pad=None),
    ],
)
# remembered with its scalars given, and with every scalar the default (a shorter key)
@pytest.mark.parametrize("scalars", [dict(ceil_mode=1, opset=22), dict()])
def test_a_value_equal_to_a_remembered_one_but_invalid_is_still_refused(bad, scalars):
    x = np.ones((1, 1, 4, 4), np.float32)
    for _ in range(2):
        avgpool.average_pool(x, [2, 2], **scalars)  # remembered: kernel (2, 2), ints
    with pytest.raises(avgpool.AvgPoolError):
        avgpool.average_pool(x, **bad)


def test_calls_with_the_default_scalars_and_with_others_get_their_own_results():
    # a call whose scalars are the defaults themselves is remembered without them; one that
    # passes any other value (equal or not) is remembered with them, and they never meet
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 5)).astype(np.float32)
    calls = [
        dict(),
        dict(ceil_mode=True),
        dict(count_include_pad=1),
        dict(auto_pad="SAME_UPPER"),
        dict(ceil_mode=0, count_include_pad=False, opset=22, layout="NCX"),
        dict(opset=7),
        dict(layout="NXC"),
    ]
    for kwargs in calls * 2:  # the second round is answered from the memo
        pads = None if "auto_pad" in kwargs else [1, 0, 1, 0]
        remembered = avgpool.average_pool(x, [2, 2], strides=[2, 2], pads=pads, **kwargs)
        expected = _fresh(avgpool.average_pool, x, [2, 2], strides=[2, 2], pads=pads, **kwargs)
        assert remembered.shape == expected.shape
        np.testing.assert_array_equal(remembered, expected)


def test_a_bad_out_is_labelled_on_the_remembered_path_too():
    x = np.ones((1, 1, 4, 4), np.float32)
    avgpool.average_pool(x, [2, 2], opset=19)
    with pytest.raises(avgpool.AvgPoolError, match=r"^AveragePool-19: `out` has shape"):
        avgpool.average_pool(x, [2, 2], opset=19, out=np.empty((1, 1, 2, 2), np.float32))
    with pytest.raises(avgpool.AvgPoolError, match=r"^AveragePool-19: `out` has shape"):
        avgpool.average_pool(x, [2, 2], opset=19, out=np.empty((1, 1, 2, 2), np.float32))


def test_the_dialect_functions_remember_their_calls_too():
    x = np.arange(2 * 3 * 7 * 7, dtype=np.float32).reshape(2, 3, 7, 7)
    kwargs = dict(strides=[2, 2], pads_begin=[3, 3], pads_end=[3, 3], exclude_pad=False, rounding_type="ceil")
    first = _fresh(openvino.avg_pool, x, [3, 3], **kwargs)  # windows starting past the end: -0.0 / NaN rules
    np.testing.assert_array_equal(openvino.avg_pool(x, [3, 3], **kwargs), first)
    assert len(openvino._MEMO.by_key) == 1
    nxc = np.moveaxis(x, 1, -1)
    kwargs = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], exclude_pad=True)
    first = _fresh(onednn.avg_pool, nxc, [3, 3], **kwargs)
    np.testing.assert_array_equal(onednn.avg_pool(nxc, [3, 3], **kwargs), first)
    assert len(onednn._MEMO.by_key) == 1
    np.testing.assert_array_equal(_fresh(onednn.avg_pool, nxc, [3, 3], **kwargs), first)


def test_the_memo_is_bounded():
    x = np.ones((1, 1, 8, 8), np.float32)
    for size in range(1, 8):
        for stride in range(1, 100):
            avgpool.average_pool(x[..., :size], [1, 1], strides=[stride, 1])
    assert len(api._MEMO.by_key) <= 512


def test_the_memo_holds_no_large_tables():
    """A remembered call keeps its prepared pool, window tables included: a long 1-D line's tables
    (48 bytes per output) are not kept beyond the engine's byte budget."""

    x = np.ones((1, 1, 1 << 20), np.float32)
    before = len(api._MEMO.by_key)
    avgpool.average_pool(x, [2], strides=[1])  # ~1M outputs: ~48 MiB of tables
    assert len(api._MEMO.by_key) == before
    assert api._MEMO.by_key._bytes <= caches.CACHE_BYTES


def test_a_prepared_pool_keeps_a_bounded_number_of_shapes():
    pool = avgpool.AveragePool([2, 2])
    for width in range(2, 1200):
        pool(np.ones((1, 1, 2, width), np.float32))
    assert len(pool._prepared) <= 512
    big = np.ones((1, 1, 1 << 20), np.float32)  # ~48 MiB of tables: beyond the budget, kept alone
    one_d = avgpool.AveragePool([2])
    one_d(big)
    assert len(one_d._prepared) == 1


def test_a_prepared_pool_fed_thousands_of_shapes_stays_small(tmp_path):
    """One AveragePool called on 1500 distinct shapes (a service fed variable-length inputs),
    measured in a fresh interpreter with tracemalloc: what it keeps stays within the engine's
    byte budget and its own count (each shape's tables were kept before)."""
    import json
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import gc, json, tracemalloc
        import numpy as np, avgpool
        pool = avgpool.AveragePool([3], strides=[1], pads=[1, 1])
        pool(np.ones((1, 1, 10), np.float32))  # kernels loaded
        tracemalloc.start()
        for length in range(1000, 2500):
            pool(np.ones((1, 1, length), np.float32))
        gc.collect()
        print(json.dumps({"held": tracemalloc.get_traced_memory()[0], "shapes": len(pool._prepared)}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["shapes"] <= 512
    # its own budget, the engine caches' budget, and change; 1500 shapes' tables take ~120 MiB
    assert report["held"] < 2 * caches.CACHE_BYTES + 16 * 2**20, report


def test_the_last_call_is_repeated_only_while_its_argument_objects_hold_the_same_values():
    # a model runner passes a node's own attribute lists on every call: the same objects, which
    # the function then checks by identity (and a list's length and items) instead of a key
    x = np.random.default_rng(1).standard_normal((1, 2, 7, 9)).astype(np.float32)
    kernel, pads = [3, 3], [1, 1, 1, 1]
    first = avgpool.average_pool(x, kernel, pads=pads)
    assert api._MEMO.by_identity.get(id(kernel))[0] is kernel
    np.testing.assert_array_equal(avgpool.average_pool(x, kernel, pads=pads), first)
    kernel[1] = 2  # changed in place: not the call remembered
    np.testing.assert_array_equal(
        avgpool.average_pool(x, kernel, pads=pads), _fresh(avgpool.average_pool, x, [3, 2], pads=[1, 1, 1, 1])
    )
    kernel[1] = 3.0  # equal to 3, but a float kernel size is refused
    with pytest.raises(avgpool.AvgPoolError, match="kernel_shape"):
        avgpool.average_pool(x, kernel, pads=pads)
    kernel[1] = 3
    for _ in range(2):  # remembered again as the last call
        np.testing.assert_array_equal(avgpool.average_pool(x, kernel, pads=pads), first)
    assert api._MEMO.by_identity.get(id(kernel))[2] is pads
    pads.append(0)  # a value more (same object, same first items): refused, not the call remembered
    with pytest.raises(avgpool.AvgPoolError, match="pads"):
        avgpool.average_pool(x, kernel, pads=pads)
    pads.pop()
    np.testing.assert_array_equal(avgpool.average_pool(x, kernel, pads=pads), first)
    for other in (x.astype(np.float64), x[:, :, :, :8], np.asfortranarray(x), x.astype(">f4")):
        np.testing.assert_array_equal(
            avgpool.average_pool(other, kernel, pads=pads),
            _fresh(avgpool.average_pool, other, [3, 3], pads=[1, 1, 1, 1]),
        )
    out = np.empty((1, 2, 7, 8), np.float32)
    avgpool.average_pool(x, kernel, pads=pads)
    with pytest.raises(avgpool.AvgPoolError, match=r"^AveragePool-22: `out` has shape"):
        avgpool.average_pool(x, kernel, pads=pads, out=out)


def test_calls_that_build_their_lists_afresh_are_not_kept_as_the_last_call(monkeypatch):
    # average_pool(x, [2, 2]) in a loop: a new list each time, which the identity test of the
    # last call can never match, so keeping each (a copy of every list) would only cost time
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32)
    kept = []
    put = api._MEMO.by_identity.put
    monkeypatch.setattr(api._MEMO.by_identity, "put", lambda key, value: kept.append(value[0]) or put(key, value))
    memo.clear_all()
    results = [avgpool.average_pool(x, [2, 2], strides=[2, 2]) for _ in range(5)]
    assert len(kept) == 1  # the validated call only
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
    kernel, strides = [2, 2], [2, 2]  # the same objects again and again: kept on the second call
    for _ in range(3):
        np.testing.assert_array_equal(avgpool.average_pool(x, kernel, strides=strides), results[0])
    assert len(kept) == 2 and kept[1] is kernel and api._MEMO.by_identity.get(id(kernel))[0] is kernel


def test_nodes_called_in_turn_with_their_own_lists_skip_the_key(monkeypatch):
    # a model runner calls node after node, each with its own attribute lists: after each
    # node's first (validated) call, none builds or looks up a key, and each gets its own result
    rng = np.random.default_rng(4)
    nodes = [
        ([3, 3], [1, 1], [1, 1, 1, 1], (1, 4, 9, 9)),
        ([2, 2], [2, 2], None, (1, 4, 9, 9)),
        ([3, 3], [2, 2], [1, 1, 1, 1], (2, 3, 8, 7)),
        ([2, 2], [2, 2], None, (1, 4, 9, 9)),
    ]
    inputs = [rng.standard_normal(shape).astype(np.float32) for *_, shape in nodes]
    expected = [
        _fresh(avgpool.average_pool, x, list(k), strides=list(s), pads=None if p is None else list(p))
        for x, (k, s, p, _) in zip(inputs, nodes)
    ]
    memo.clear_all()
    lookups = []
    find = api._MEMO.by_key.find
    monkeypatch.setattr(api._MEMO.by_key, "find", lambda key: lookups.append(key) or find(key))
    for round_ in range(3):
        for x, (kernel, strides, pads, _), want in zip(inputs, nodes, expected):
            np.testing.assert_array_equal(avgpool.average_pool(x, kernel, strides=strides, pads=pads), want)
        if round_ == 0:
            # the last node repeats the second one's call by value: found by key, kept when it repeats
            assert len(lookups) == 4
            lookups.clear()
    assert len(lookups) == 1  # the fourth node's second call, found by key again, is then kept
    assert all(api._MEMO.by_identity.get(id(kernel))[0] is kernel for kernel, *_ in nodes)


def test_calls_kept_by_identity_are_bounded():
    x = np.ones((1, 1, 6, 6), np.float32)
    for _ in range(300):
        kernel, strides = [2, 2], [1, 1]
        for _ in range(2):
            avgpool.average_pool(x, kernel, strides=strides)
    assert len(api._MEMO.by_identity) <= 64


def test_openvino_empty_windows_are_written_on_the_remembered_path_too():
    # OpenVINO's CPU kernels give -0.0 for a ceil window starting past the end (a negative
    # divisor): the remembered call must overwrite it as the validated one does
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)
    memo.clear_all()
    for _ in range(3):
        y = openvino.avg_pool(x, [1], strides=[3], rounding_type="ceil", exclude_pad=True)
        np.testing.assert_array_equal(y, np.array([[[1.0, 4.0, 0.0]]], np.float32))
        assert np.signbit(y[0, 0, 2])
    assert len(openvino._MEMO.by_key) == 1


_ONEDNN = dict(strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0])


@pytest.mark.parametrize(
    "call",
    [
        lambda x: avgpool.average_pool(x, [2, 2], ceil_mode=np.array(True)),
        lambda x: avgpool.average_pool(x, [2, 2], opset=np.array(22)),
        lambda x: avgpool.average_pool(x, [2, 2], auto_pad=["NOTSET"]),
        lambda x: avgpool.average_pool(x, [2, 2], layout=["NCX"]),
        lambda x: openvino.avg_pool(x, [2, 2], exclude_pad=np.array(True)),
        lambda x: openvino.avg_pool(x, [2, 2], exclude_pad=True, version=np.array(16)),
        lambda x: openvino.avg_pool(x, [2, 2], exclude_pad=True, rounding_type=["floor"]),
        lambda x: onednn.avg_pool(x, [2, 2], **_ONEDNN, exclude_pad=np.array(True)),
        lambda x: onednn.avg_pool(x, [2, 2], **_ONEDNN, exclude_pad=True, data_format=["NXC"]),
        lambda x: avgpool.qlinear_average_pool(x.astype(np.uint8), 1.0, 0, 1.0, 0, [2, 2], ceil_mode=np.array(True)),
    ],
)
def test_a_scalar_with_no_key_is_validated_and_refused_as_invalid(call):
    # an array or a list where a scalar belongs cannot be hashed into the key: the call is
    # validated as any other, and refused with the dialect's message (never a TypeError)
    x = np.ones((1, 1, 4, 4), np.float32)
    with pytest.raises(avgpool.AvgPoolError, match="got array|is array|is \\['"):
        call(x)


@pytest.mark.parametrize(
    "valid, invalid",
    [
        (dict(x_scale=(1.0,)), dict(x_scale=(True,))),
        (dict(x_zero_point=(5,)), dict(x_zero_point=(5.0,))),
        (dict(y_zero_point=(1,)), dict(y_zero_point=(True,))),
    ],
)
def test_a_one_item_tuple_equal_to_a_remembered_one_but_invalid_is_still_refused(valid, invalid):
    # (True,) == (1,) == (1.0,): a tuple compares its items whatever their types, so calls with
    # tuples are never remembered by value
    x = np.array([[[10, 20, 30, 40]]], np.uint8)
    scalars = dict(x_scale=1.0, x_zero_point=0, y_scale=1.0, y_zero_point=0)
    for _ in range(3):
        avgpool.qlinear_average_pool(x, **{**scalars, **valid}, kernel_shape=[2])
    with pytest.raises(avgpool.AvgPoolError, match="must be"):
        avgpool.qlinear_average_pool(x, **{**scalars, **invalid}, kernel_shape=[2])


def test_a_prepared_pool_keeps_copies_of_its_lists():
    # editing the caller's lists later changes nothing, for shapes seen before and new ones
    kernel, strides = [2], [2]
    pool = avgpool.AveragePool(kernel, strides=strides, pads=[0, 0])
    x1, x2 = np.arange(8, dtype=np.float32).reshape(1, 1, 8), np.arange(6, dtype=np.float32).reshape(1, 1, 6)
    expected1, expected2 = pool(x1).copy(), avgpool.average_pool(x2, [2], strides=[2])
    kernel[0], strides[0] = True, 1
    np.testing.assert_array_equal(pool(x1), expected1)
    np.testing.assert_array_equal(pool(x2), expected2)


def test_qlinear_calls_with_the_default_scalars_and_with_others_get_their_own_results():
    # as average_pool's: a call whose scalars are the defaults themselves is remembered without them
    x = np.random.default_rng(4).integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    calls = [
        dict(),
        dict(ceil_mode=True),
        dict(count_include_pad=1),
        dict(auto_pad="SAME_UPPER"),
        dict(ceil_mode=0, count_include_pad=False, auto_pad="NOTSET", channels_last=0),
        dict(channels_last=1),
    ]
    for kwargs in calls * 2:  # the second round is answered from the memo
        pads = None if "auto_pad" in kwargs and kwargs["auto_pad"] != "NOTSET" else [1, 0, 1, 0]
        remembered = avgpool.qlinear_average_pool(x, 0.1, 3, 0.2, 5, [2, 2], strides=[2, 2], pads=pads, **kwargs)
        expected = _fresh(avgpool.qlinear_average_pool, x, 0.1, 3, 0.2, 5, [2, 2], strides=[2, 2], pads=pads, **kwargs)
        assert remembered.shape == expected.shape
        np.testing.assert_array_equal(remembered, expected)


@pytest.mark.parametrize("module", ["openvino", "onednn"])
def test_every_operator_remembers_calls_by_identity_too(monkeypatch, module):
    # one mechanism for every operator (avgpool._ops._remember): the OpenVINO and oneDNN
    # functions, called again with the very same objects, skip the key as average_pool does
    ops = {"openvino": openvino, "onednn": onednn}[module]
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 6)).astype(np.float32)
    kernel, strides, begin, end = [2, 2], [1, 1], [0, 0], [0, 0]
    call = lambda: ops.avg_pool(x, kernel, strides=strides, pads_begin=begin, pads_end=end, exclude_pad=True)  # noqa: E731
    memo.clear_all()
    first = call()
    lookups = []
    find = ops._MEMO.by_key.find
    monkeypatch.setattr(ops._MEMO.by_key, "find", lambda key: lookups.append(key) or find(key))
    for _ in range(3):
        np.testing.assert_array_equal(call(), first)
    assert lookups == []
    assert ops._MEMO.by_identity.get(id(kernel))[0] is kernel
