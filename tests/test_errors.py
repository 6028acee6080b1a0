"""Every invalid attribute, dtype or shape raises AvgPoolError naming the dialect and the attribute."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool

X = np.zeros((1, 3, 8, 8), np.float32)


def _prepared_twice(out):
    """The second call of a prepared pool takes its fast path, which checks only `out`."""
    pool = avgpool.AveragePool([2, 2])
    pool(X)
    return pool(X, out=out)


def _function_repeated(out):
    """The same call again with the very same objects takes average_pool's fastest path (its
    _LAST), which checks only `out`."""
    kernel = [2, 2]
    for _ in range(3):
        avgpool.average_pool(X, kernel)
    return avgpool.average_pool(X, kernel, out=out)


# (description, call, words the message must contain)
CASES = [
    ("scalar kernel", lambda: avgpool.average_pool(X, 3), ["AveragePool-22", "`kernel_shape`", "sequence"]),
    ("kernel string", lambda: avgpool.average_pool(X, "33"), ["`kernel_shape`", "sequence"]),
    ("kernel 2-D array", lambda: avgpool.average_pool(X, np.ones((2, 1), int)), ["`kernel_shape`", "1-D"]),
    ("kernel wrong length", lambda: avgpool.average_pool(X, [3]), ["`kernel_shape`", "1 values", "2 spatial axes"]),
    ("kernel zero", lambda: avgpool.average_pool(X, [0, 3]), ["`kernel_shape`", "(0, 3)", "positive"]),
    ("kernel float", lambda: avgpool.average_pool(X, [2.0, 2]), ["`kernel_shape`", "integer", "2.0"]),
    ("kernel bool", lambda: avgpool.average_pool(X, [True, 2]), ["`kernel_shape`", "integer"]),
    ("kernel huge", lambda: avgpool.average_pool(X, [2**50, 2]), ["`kernel_shape`", "larger than"]),
    (
        "strides wrong length",
        lambda: avgpool.average_pool(X, [2, 2], strides=[1, 1, 1]),
        ["AveragePool-22: `strides` has 3 values (1, 1, 1) but the input (1, 3, 8, 8) has 2 spatial axes"],
    ),
    ("strides zero", lambda: avgpool.average_pool(X, [2, 2], strides=[0, 1]), ["`strides`", "positive"]),
    ("dilations negative", lambda: avgpool.average_pool(X, [2, 2], dilations=[-1, 1]), ["`dilations`", "positive"]),
    ("pads negative", lambda: avgpool.average_pool(X, [2, 2], pads=[0, -1, 0, 0]), ["`pads`", ">= 0"]),
    ("pads half", lambda: avgpool.average_pool(X, [2, 2], pads=[1, 1]), ["`pads`", "2 values", "begins"]),
    (
        "auto_pad lower case",
        lambda: avgpool.average_pool(X, [2, 2], auto_pad="same_upper"),
        ["`auto_pad`", "'same_upper'", "SAME_UPPER"],
    ),
    (
        "auto_pad with pads",
        lambda: avgpool.average_pool(X, [2, 2], pads=[1, 1, 1, 1], auto_pad="VALID"),
        ["`pads`", "auto_pad", "cannot be used"],
    ),
    ("ceil_mode 2", lambda: avgpool.average_pool(X, [2, 2], ceil_mode=2), ["`ceil_mode`", "2"]),
    (
        "count_include_pad str",
        lambda: avgpool.average_pool(X, [2, 2], count_include_pad="yes"),
        ["`count_include_pad`", "'yes'"],
    ),
    (
        "ceil before 10",
        lambda: avgpool.average_pool(X, [2, 2], ceil_mode=1, opset=9),
        ["AveragePool-7", "`ceil_mode`", "opset 10"],
    ),
    (
        "cip at opset 1",
        lambda: avgpool.average_pool(X, [2, 2], count_include_pad=1, opset=1),
        ["AveragePool-1", "`count_include_pad`", "opset 7"],
    ),
    (
        "dilations before 19",
        lambda: avgpool.average_pool(X, [2, 2], dilations=[1, 1], opset=18),
        ["AveragePool-11", "`dilations`", "opset 19"],
    ),
    ("opset 0", lambda: avgpool.average_pool(X, [2, 2], opset=0), ["AveragePool", "`opset`", "0"]),
    ("opset too new", lambda: avgpool.average_pool(X, [2, 2], opset=99), ["`opset`", "99"]),
    ("opset bool", lambda: avgpool.average_pool(X, [2, 2], opset=True), ["`opset`", "True"]),
    ("layout", lambda: avgpool.average_pool(X, [2, 2], layout="NHWC"), ["`layout`", "'NHWC'", "NXC"]),
    (
        "int input",
        lambda: avgpool.average_pool(np.zeros((1, 1, 4), np.int32), [2]),
        ["AveragePool-22", "dtype int32", "float32"],
    ),
    ("object input", lambda: avgpool.average_pool(np.array([[[None]]]), [1]), ["dtype object"]),
    ("ragged input", lambda: avgpool.average_pool([[[1.0], [1.0, 2.0]]], [1]), ["cannot be read as an array"]),
    (
        "bfloat16 before 22",
        lambda: avgpool.average_pool(
            np.zeros((1, 1, 4), "bfloat16" if False else __import__("ml_dtypes").bfloat16), [2], opset=19
        ),
        ["AveragePool-19", "bfloat16", "opset 22"],
    ),
    ("rank 2", lambda: avgpool.average_pool(np.zeros((3, 4), np.float32), [2]), ["rank 2", "at least 3"]),
    (
        "negative output",
        lambda: avgpool.average_pool(np.zeros((1, 1, 2), np.float32), [5]),
        ["spatial axis 0", "input length 2", "extent 5"],
    ),
    (
        "out wrong shape",
        lambda: avgpool.average_pool(X, [2, 2], out=np.empty((1, 3, 8, 8), np.float32)),
        ["`out`", "(1, 3, 7, 7)"],
    ),
    (
        "out wrong dtype",
        lambda: avgpool.average_pool(X, [2, 2], out=np.empty((1, 3, 7, 7), np.float64)),
        ["`out`", "float64", "float32"],
    ),
    ("out not array", lambda: avgpool.average_pool(X, [2, 2], out=[0]), ["`out`", "numpy array"]),
    (
        "out read-only",
        lambda: avgpool.average_pool(X, [2, 2], out=np.broadcast_to(np.float32(0), (1, 3, 7, 7))),
        ["`out`", "read-only"],
    ),
    (
        "prepared pool, wrong out",
        lambda: _prepared_twice(out=np.empty((1, 3, 8, 8), np.float32)),
        ["AveragePool-22: `out`", "(1, 3, 7, 7)"],
    ),
    (
        "the same call again, wrong out",
        lambda: _function_repeated(out=np.empty((1, 3, 8, 8), np.float32)),
        ["AveragePool-22: `out`", "(1, 3, 7, 7)"],
    ),
    # kernels and pads in the billions: refused at once, before tables of tens of GB are built
    (
        "output beyond memory",
        lambda: avgpool.average_pool(X, [2**32, 2**32], pads=[2**32] * 4),
        ["AveragePool-22", "output of shape 1x3x4294967305x4294967305", "must fit in memory"],
    ),
    (
        "output beyond memory, 1-D",
        lambda: avgpool.average_pool(X[0], [2**32], pads=[2**32] * 2),
        ["AveragePool-22", "3x8x4294967305", "window tables", "must fit in memory"],
    ),
    (
        "qlinear output beyond memory",
        lambda: avgpool.qlinear_average_pool(
            X.astype(np.uint8), 1.0, 0, 1.0, 0, [2**31, 2**31], pads=[2**31 - 1] * 4, count_include_pad=1
        ),
        ["QLinearAveragePool", "1x3x2147483655x2147483655", "must fit in memory"],
    ),
    (
        "openvino output beyond memory",
        lambda: avgpool.openvino.avg_pool(
            X, [2**31, 2**31], pads_begin=[2**31] * 2, pads_end=[2**31] * 2, exclude_pad=False
        ),
        ["AvgPool-16", "must fit in memory"],
    ),
    (
        "empty output numpy cannot make",
        lambda: avgpool.average_pool(np.zeros((0, 1, 4, 4, 4), np.float32), [1, 1, 1], pads=[10**6] * 6),
        ["AveragePool-22", "empty output of shape 0x1x2000004x2000004x2000004, which numpy cannot make"],
    ),
    (
        "dilated extent beyond the supported values",
        lambda: avgpool.average_pool(X, [2**20, 2], dilations=[2**21, 1]),
        ["AveragePool-22", "`kernel_shape` (1048576, 2) with `dilations` (2097152, 1)", "larger than the supported"],
    ),
    (
        "masked array with masked values",
        lambda: avgpool.openvino.avg_pool(np.ma.array(X, mask=X == 0), [2, 2], exclude_pad=True),
        ["AvgPool-16", "the input is a masked array with 192 masked values"],
    ),
    (
        "skipna not a bool",
        lambda: avgpool.average_pool(X, [2, 2], skipna=1),
        ["AveragePool-22", "`skipna`", "True or False"],
    ),
    (
        "min_count below 1",
        lambda: avgpool.average_pool(X, [2, 2], min_count=0),
        ["AveragePool-22", "`min_count`", ">= 1"],
    ),
    (
        "min_count of a prepared pool below 1",
        lambda: avgpool.AveragePool([2, 2], min_count=0),
        ["AveragePool-22", "`min_count`", ">= 1"],
    ),
    (
        "out with a masked input",
        lambda: avgpool.AveragePool([2, 2])(np.ma.array(X, mask=X == 0), np.empty((1, 3, 7, 7))),
        ["AveragePool-22", "`out` is given with a masked input"],
    ),
    ("shape not sequence", lambda: avgpool.output_shape(5, [2, 2]), ["`input_shape`", "sequence"]),
    ("shape too short", lambda: avgpool.output_shape((1, 8), [2]), ["`input_shape`", "at least 3"]),
    ("shape negative", lambda: avgpool.output_shape((1, 1, -8), [2]), ["`input_shape`", "non-negative"]),
    ("shape with a float", lambda: avgpool.output_shape((1, 1, 8.5), [2]), ["`input_shape`", "integers", "8.5"]),
]


@pytest.mark.parametrize("description, call, words", CASES, ids=[c[0] for c in CASES])
def test_invalid_input_raises_avgpool_error(description, call, words):
    with pytest.raises(avgpool.AvgPoolError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{description}: {word!r} not in {message!r}"
    assert isinstance(info.value, ValueError)


CORE_MODULES = [
    "avgpool._ops.onnx",
    "avgpool._ops._args",
    "avgpool._core.outputs",
    "avgpool._core.shape",
    "avgpool.errors",
]


def test_every_raise_site_in_the_core_is_hit_by_a_case():
    """Trace the CASES above and check that every ``raise`` line of the core modules ran."""
    import importlib
    import inspect
    import sys

    files, raise_lines = {}, set()
    for name in CORE_MODULES:
        module = importlib.import_module(name)
        path = inspect.getsourcefile(module)
        files[path] = name
        for number, line in enumerate(inspect.getsource(module).splitlines(), start=1):
            if line.strip().startswith("raise") and "pragma: no cover" not in line and line.strip() != "raise":
                raise_lines.add((path, number))
    ran = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename not in files:
            return None
        if event == "line":
            ran.add((frame.f_code.co_filename, frame.f_lineno))
        return tracer

    sys.settrace(tracer)
    try:
        for _, call, _ in CASES:
            try:
                call()
            except avgpool.AvgPoolError:
                pass
    finally:
        sys.settrace(None)
    missed = sorted((files[path], line) for path, line in raise_lines - ran)
    assert len(raise_lines) >= 20
    assert not missed, f"raise sites no case reaches: {missed}"
