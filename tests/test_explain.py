"""``avgpool explain``: window tables on docs/semantics.md section 7, the dialect comparison, pictures."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import avgpool
import avgpool.openvino
from avgpool.cli import main
from avgpool.cli.settings import Settings, onnx_spec, pytorch_spec
from avgpool.cli.windows import compare_dialects, describe

ROW = re.compile(r"^\s+(\d+)\s+(-?\d+)\s+(\d+) /\s+(\d+) /\s+(\d+)\s+(\S+)")


def explain(argv: list[str]) -> str:
    out = io.StringIO()
    assert main(["explain", *argv], stdout=out) == 0
    return out.getvalue()


def windows(text: str) -> list[tuple[int, int, int, int, int, float]]:
    """(window, first tap, in input, in padding, past padding, divisor) from the printed table."""
    rows = []
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            *ints, divisor = match.groups()
            rows.append((*map(int, ints), float(divisor)))
    return rows


# docs/semantics.md section 7, row by row: flags, output length, and per window
# (first tap, taps in input, in padding, past padding, divisor).
SECTION_7 = [
    ("1x1x4 -k 3 -s 3 --ceil-mode", 2, [(0, 3, 0, 0, 3), (3, 1, 0, 2, 1)]),
    ("1x1x3 -k 3", 1, [(0, 3, 0, 0, 3)]),
    (
        "1x1x5 -k 2 -d 2 --auto-pad SAME_UPPER",
        5,
        [(-1, 1, 1, 0, 1), (0, 2, 0, 0, 2), (1, 2, 0, 0, 2), (2, 2, 0, 0, 2), (3, 1, 1, 0, 1)],
    ),
    ("1x1x7 -k 1 -s 4 --auto-pad SAME_UPPER", 2, [(0, 1, 0, 0, 1), (4, 1, 0, 0, 1)]),
    ("1x1x2 -k 3 -s 3 -p 1,1 --ceil-mode --count-include-pad", 1, [(-1, 2, 1, 0, 3)]),
    (
        "1x1x5 -k 3 -p 1,1 --opset 1",
        5,
        [(-1, 2, 1, 0, 2), (0, 3, 0, 0, 3), (1, 3, 0, 0, 3), (2, 3, 0, 0, 3), (3, 2, 1, 0, 2)],
    ),
    ("1x1x4 -k 4", 1, [(0, 4, 0, 0, 4)]),
]


@pytest.mark.parametrize("flags, out, expected", SECTION_7, ids=[row[0] for row in SECTION_7])
def test_section_7_windows_as_printed(flags, out, expected):
    text = explain(flags.split())
    assert f"output shape: 1x1x{out}\n" in text
    assert [row[1:] for row in windows(text)] == [tuple(map(float, w)) for w in expected]
    assert [row[0] for row in windows(text)] == list(range(out))


def test_section_7_row_values_follow_from_the_printed_windows():
    # the windows explain prints give the right answers of section 7 when summed and divided
    cases = [
        ([1, 2, 3, 4], SECTION_7[0][0], [2, 4]),
        ([1, 2, 3, 4, 5], SECTION_7[2][0], [2, 2, 3, 4, 4]),
        ([1, 2, 3, 4, 5, 6, 7], SECTION_7[3][0], [1, 5]),
        ([1, 2], SECTION_7[4][0], [1]),
        ([1, 2, 3, 4, 5], SECTION_7[5][0], [1.5, 2, 3, 4, 4.5]),
    ]
    for values, flags, right in cases:
        argv = flags.split()
        argv[0] = f"1x1x{len(values)}"
        settings_text = explain(argv)
        got = []
        for _, first, *_, divisor in windows(settings_text):
            kernel = int(argv[argv.index("-k") + 1])
            dilation = int(argv[argv.index("-d") + 1]) if "-d" in argv else 1
            taps = [first + j * dilation for j in range(kernel)]
            got.append(sum(values[t] for t in taps if 0 <= t < len(values)) / divisor)
        assert got == right, flags


CONFIGS = [
    dict(kernel=(3,), strides=(2,), pads_begin=(1,), pads_end=(1,), rounding="ceil", include_pad=True),
    dict(kernel=(3,), strides=(2,), pads_begin=(2,), pads_end=(0,), rounding="ceil"),
    dict(kernel=(2,), strides=(3,), dilations=(3,), auto_pad="SAME_LOWER"),
    dict(kernel=(4,), strides=(1,), dilations=(2,), pads_begin=(3,), pads_end=(1,), include_pad=True),
    dict(kernel=(5,), strides=(4,), auto_pad="VALID", rounding="ceil"),
    dict(kernel=(2,), strides=(5,), pads_begin=(2,), pads_end=(2,)),  # a window of padding only: 0/0
]


@pytest.mark.parametrize("length", [1, 4, 7, 10])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_windows_reproduce_average_pool(config, length):
    """The described windows are the ones the engine computes (sum of the taps in the input / divisor)."""
    settings = Settings(**config)
    x = np.random.default_rng(length).standard_normal(length)
    try:
        spec = onnx_spec(settings, (length,))
        (axis,) = describe(spec, (length,))
    except avgpool.AvgPoolError:
        return  # no output for this length: average_pool refuses it as well
    got = np.array(
        [sum(x[t] for t in w.taps if 0 <= t < length) / w.divisor if w.divisor else np.nan for w in axis.windows]
    )
    y = avgpool.average_pool(
        x.reshape(1, 1, -1),
        list(settings.kernel),
        strides=settings.strides,
        pads=settings.onnx_pads(),
        auto_pad=settings.auto_pad,
        ceil_mode=settings.ceil,
        count_include_pad=settings.include_pad,
        dilations=settings.dilations,
    )
    np.testing.assert_allclose(got, y.reshape(-1), rtol=1e-12, atol=1e-12)
    for w in axis.windows:
        assert w.in_input + w.in_padding + w.past_padding == settings.kernel[0]


def _row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(label))


def test_comparison_openvino_full_kernel_and_onednn_refusal():
    # semantics 4.3: [1,2,3,4] k3 s2 pads 1/1 ceil, pads counted: ONNX [1, 3, 2], OpenVINO [1, 3, 1.333]
    text = explain("1x1x4 -k 3 -s 2 -p 1,1 --ceil-mode --count-include-pad".split())
    assert "axis 0 window 2: divisor factor 3 instead of 2" in _row(text, "OpenVINO AvgPool-16 rounding_type=ceil:")
    assert "unsupported" in _row(text, "oneDNN")
    assert "same shape, same divisors" in _row(text, "PyTorch")
    assert "divisor factor 3 instead of 2" in _row(text, "onnxruntime QLinearAveragePool")
    x = np.array([[[1, 2, 3, 4]]], dtype=np.float32)
    ov = avgpool.openvino.avg_pool(
        x, [3], strides=[2], pads_begin=[1], pads_end=[1], rounding_type="ceil", exclude_pad=False
    )
    np.testing.assert_allclose(ov.reshape(-1), [1, 3, 4 / 3], rtol=1e-6)


def test_comparison_shapes_ceil_without_drop():
    # semantics 2.3 and 5.3: OpenVINO/oneDNN ceil keep a window that starts in the end padding
    text = explain("1x1x2 -k 3 -s 3 -p 1,1 --ceil-mode".split())
    assert "different output shape: [2] instead of [1]" in _row(text, "OpenVINO AvgPool-16 rounding_type=ceil:")
    assert "same shape" in _row(text, "OpenVINO AvgPool-16 rounding_type=ceil_torch")
    assert "oneDNN refuses" in _row(text, "oneDNN")  # its ceil window would start past the input
    text = explain("1x1x5 -k 1 -s 3 --auto-pad SAME_UPPER --ceil-mode".split())
    assert "different output shape: [3] instead of [2]" in _row(text, "OpenVINO AvgPool-16 rounding_type=ceil:")
    assert avgpool.openvino.output_shape(
        (1, 1, 5), [1], strides=[3], auto_pad="same_upper", rounding_type="ceil", exclude_pad=True
    ) == (1, 1, 3)


def test_explain_in_openvino_dialect_compares_back_to_onnx():
    text = explain(
        "1x1x4 -k 3 -s 2 --pads-begin 1 --pads-end 1 --rounding-type ceil --exclude-pad false "
        "--dialect openvino".split()
    )
    assert text.startswith("OpenVINO AvgPool-16 on input 1x1x4")
    assert [row[-1] for row in windows(text)] == [3.0, 3.0, 3.0]
    assert "divisor factor 2 instead of 3" in _row(text, "ONNX AveragePool")


@pytest.mark.parametrize(
    "length, kernel, stride, pad, ceil, include",
    [
        (4, 3, 2, 1, True, True),
        (5, 3, 2, 1, True, True),
        (6, 4, 3, 2, True, True),
        (7, 3, 3, 1, True, False),
        (2, 3, 3, 1, True, True),
        (9, 5, 2, 2, False, True),
    ],
)
def test_pytorch_row_is_torch(length, kernel, stride, pad, ceil, include):
    """The PyTorch row is what torch computes: the drop rule, and with count_include_pad the taps
    inside the padded extent (clipped at input + pad), read back from an all-ones input."""
    torch = pytest.importorskip("torch")
    settings = Settings(
        kernel=(kernel,),
        strides=(stride,),
        pads_begin=(pad,),
        pads_end=(pad,),
        rounding="ceil" if ceil else "floor",
        include_pad=include,
    )
    (axis,) = describe(pytorch_spec(settings, (length,)), (length,))
    y = (
        torch.nn.functional.avg_pool1d(
            torch.ones(1, 1, length, dtype=torch.float64),
            kernel,
            stride,
            pad,
            ceil_mode=ceil,
            count_include_pad=include,
        )
        .numpy()
        .reshape(-1)
    )
    assert len(y) == len(axis.windows)
    np.testing.assert_allclose([w.in_input / w.divisor for w in axis.windows], y, rtol=1e-12)


def test_pytorch_row_refuses_what_torch_refuses():
    outcomes = {o.label: o for o in compare_dialects(Settings(kernel=(2,), dilations=(2,)), (5,))}
    assert "no dilation" in outcomes["PyTorch avg_pool"].problem
    outcomes = {o.label: o for o in compare_dialects(Settings(kernel=(3,), pads_begin=(2,), pads_end=(2,)), (5,))}
    assert "kernel // 2" in outcomes["PyTorch avg_pool"].problem


def test_two_axes_and_elision():
    text = explain("1x3x6x40 -k 2,3 -s 2,1 -p 0,1,0,1 --max-windows 4 --width 20".split())
    assert "output shape: 1x3x3x40" in text
    assert "resolved pads: begin [0, 1], end [0, 1] (ONNX pads [0, 1, 0, 1])" in text
    assert "... 36 more windows (--max-windows 0 shows all)" in text
    assert "(diagram omitted: 42 columns; --width 42 draws it)" in text
    assert len(windows(text)) == 3 + 4


def test_explain_bad_attributes_exit_2(capsys):
    assert main(["explain", "1x1x4", "-k", "3,3"]) == 2
    assert "`kernel_shape` has 2 values" in capsys.readouterr().err
    assert main(["explain", "1x1x4", "-k", "3", "--dilations", "2", "--opset", "11"]) == 2
    assert "dilations" in capsys.readouterr().err
    assert main(["explain", "1x1", "-k", "3"]) == 2


def test_svg_and_png(tmp_path):
    svg_path, png_path = tmp_path / "w.svg", tmp_path / "w.png"
    text = explain(
        ["1x1x4", "-k", "3", "-s", "2", "-p", "1,1", "--ceil-mode", "--svg", str(svg_path), "--png", str(png_path)]
    )
    assert f"wrote {svg_path}" in text
    root = ET.parse(svg_path).getroot()
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) > 10
    colours = {r.get("fill") for r in rects}
    assert {"#2b6cb0", "#dd8a2b", "#b0b0b0"} <= colours  # taps in the input, in the padding, past it
    PIL = pytest.importorskip("PIL.Image")
    with PIL.open(png_path) as image:
        assert image.format == "PNG" and image.size[0] > 100
