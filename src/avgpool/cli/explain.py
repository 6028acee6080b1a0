"""``avgpool explain``: every window of a configuration, its taps and divisor, and where the
dialects differ, as text and optionally SVG or PNG (drawn by :mod:`avgpool.cli.windows`)."""

from __future__ import annotations

import os
from io import BytesIO
from typing import TYPE_CHECKING

from ..errors import error_context
from .flags import UsageError, add_attribute_flags, dialect_label, ints, output_shape, settings_from_args, spatial
from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from typing import TextIO


SUMMARY = "every window, its taps and divisor; where the dialects differ"
DESCRIPTION = (
    "For an input shape and attributes: the output shape, the resolved pads and, per axis, every window "
    "(first tap, how many taps fall in the input, in the padding, past the padding) with its divisor; then "
    "what ONNX, OpenVINO, oneDNN, PyTorch and QLinearAveragePool give for the same configuration."
)
EXAMPLES = [
    "avgpool explain 1x1x4 -k 3 -s 3 --ceil-mode",
    "avgpool explain 1x1x4 -k 3 -s 2 -p 1,1 --ceil-mode --count-include-pad --svg windows.svg",
    "avgpool explain 1x1x5 -k 2 -d 2 --auto-pad SAME_UPPER",
    "avgpool explain 1x1x4 -k 3 -s 2 --pads-begin 1 --pads-end 1 --rounding-type ceil --exclude-pad false "
    "--dialect openvino",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    from .settings import DIALECTS

    parser.add_argument("input_shape", type=ints, help="input shape, e.g. 1x1x4 or 1,3,32,32")
    add_attribute_flags(parser, list(DIALECTS), quantized=False)
    out = parser.add_argument_group("output")
    out.add_argument("--max-windows", type=int, default=64, help="windows listed per axis (0: all; default 64)")
    out.add_argument("--width", type=int, default=80, help="widest text diagram drawn, in columns (default 80)")
    out.add_argument("--no-compare", action="store_true", help="leave out the comparison with other dialects")
    out.add_argument("--svg", metavar="PATH", help="also write the diagram as SVG")
    out.add_argument("--png", metavar="PATH", help="also write the diagram as PNG (needs Pillow)")


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    from . import files, windows
    from .settings import DIALECTS

    settings = settings_from_args(args)
    spatial_shape = spatial(args.input_shape, settings.channels_last)
    label = dialect_label(args.dialect, settings)
    with error_context(label):
        spec = DIALECTS[args.dialect].input_spec(settings, tuple(args.input_shape))
        axes = windows.describe(spec, spatial_shape)
    out_shape = output_shape(args.input_shape, [a.geometry.out for a in axes], settings.channels_last)
    text = windows.explain_text(
        settings,
        label,
        spec,
        args.input_shape,
        spatial_shape,
        out_shape,
        max_windows=args.max_windows,
        diagram_width=args.width,
        compare=not args.no_compare,
    )
    # every picture is made before anything is printed or written, so that a refusal is the only output
    title = f"{label}, input {'x'.join(map(str, args.input_shape))}: {settings.describe()}"
    pictures = {}
    if args.svg and args.png and os.path.realpath(args.svg) == os.path.realpath(args.png):
        raise UsageError(f"--svg and --png name the same file {args.svg}: give each picture its own")
    if args.svg:
        pictures[args.svg] = windows.svg(axes, max_windows=args.max_windows, title=title).encode("utf-8")
    if args.png:
        buffer = BytesIO()
        windows.png(axes, buffer, max_windows=args.max_windows, title=title)
        pictures[args.png] = buffer.getvalue()
    stdout.write(text)
    for number, (path, data) in enumerate(pictures.items(), 1):
        with files.replacing(path, commit=INTERRUPTS.committing(last=number == len(pictures))) as fp:
            fp.write(data)
        print(f"wrote {path}", file=stdout)
    return 0
