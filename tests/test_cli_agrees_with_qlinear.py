"""`avgpool shape` and `avgpool explain --dialect qlinear` show what `qlinear_average_pool`
computes: the same output shape or the same refusal, and windows whose taps and divisor are the
function's (onnxruntime's geometry, including its truncating output length and the negative SAME
pads of a kernel shorter than its stride). Before, the CLI translated QLinear a second time and
disagreed: `avgpool shape 1x1x2 -k 3 -s 2 --dialect qlinear` printed 1x1x0, the function returns
(1, 1, 1)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import avgpool
from avgpool.cli import main
from avgpool.cli import windows as explain
from avgpool.cli.settings import Settings, qlinear_spec


def _configs(count: int):
    rng = np.random.default_rng(2026)
    for _ in range(count):
        length = int(rng.integers(1, 12))
        kernel = int(rng.integers(1, 6))
        stride = int(rng.integers(1, 7))
        auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        pads = [int(rng.integers(0, kernel + 1)), int(rng.integers(0, kernel + 1))] if auto_pad == "NOTSET" else None
        yield length, kernel, stride, pads, auto_pad, bool(rng.integers(0, 2)), bool(rng.integers(0, 2))


def _cli_shape(length, kernel, stride, pads, auto_pad, ceil, include_pad):
    args = [
        "shape",
        f"1x1x{length}",
        "-k",
        str(kernel),
        "-s",
        str(stride),
        "--dialect",
        "qlinear",
        "--auto-pad",
        auto_pad,
    ]
    if pads is not None:
        args += ["-p", f"{pads[0]},{pads[1]}"]
    if ceil:
        args.append("--ceil-mode")
    if include_pad:
        args.append("--count-include-pad")
    out = io.StringIO()
    code = main(args, stdout=out)
    return out.getvalue().strip() if code == 0 else None


@pytest.mark.parametrize("config", list(_configs(300)))
def test_shape_and_explain_show_what_the_function_computes(config):
    length, kernel, stride, pads, auto_pad, ceil, include_pad = config
    x = np.full((1, 1, length), 100, np.uint8)
    try:
        y = avgpool.qlinear_average_pool(
            x,
            1.0,
            0,
            1.0,
            0,
            [kernel],
            strides=[stride],
            pads=pads,
            auto_pad=auto_pad,
            ceil_mode=ceil,
            count_include_pad=include_pad,
        )
    except avgpool.AvgPoolError:
        assert _cli_shape(*config) is None  # refused by both
        return
    assert _cli_shape(*config) == "x".join(map(str, y.shape))
    if y.size == 0:
        return
    settings = Settings(
        kernel=(kernel,),
        strides=(stride,),
        pads_begin=None if pads is None else (pads[0],),
        pads_end=None if pads is None else (pads[1],),
        auto_pad=auto_pad,
        rounding="ceil" if ceil else "floor",
        include_pad=include_pad,
    )
    (axis,) = explain.describe(qlinear_spec(settings, (length,)), (length,))
    windows = list(axis.windows)
    assert len(windows) == y.shape[-1]
    # every input value 100: each output is 100 x (taps in the input) / divisor, rounded
    expected = [np.rint(np.float32(100.0) * w.in_input / np.float32(w.divisor)) if w.divisor else None for w in windows]
    for got, want in zip(y[0, 0].tolist(), expected):
        if want is not None:
            assert got == min(255, want)
    # a single non-zero input value reaches exactly the windows that explain says hold it
    for position in range(length):
        one = np.zeros((1, 1, length), np.uint8)
        one[0, 0, position] = 200
        reached = avgpool.qlinear_average_pool(
            one,
            1.0,
            0,
            1.0,
            0,
            [kernel],
            strides=[stride],
            pads=pads,
            auto_pad=auto_pad,
            ceil_mode=ceil,
            count_include_pad=include_pad,
        )[0, 0]
        holds = [position in w.taps and w.divisor > 0 for w in windows]
        assert [bool(v) for v in reached] == holds, (position, [(w.first_tap, len(w.taps)) for w in windows])
