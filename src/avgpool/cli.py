"""The ``avgpool`` command: ``demo`` and ``shape`` (more subcommands come with the CLI issue)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from . import api
from .errors import AvgPoolError


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace("x", ",").split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _format(array: np.ndarray) -> str:
    return np.array2string(np.squeeze(array, axis=(0, 1)), precision=7, separator=" ", max_line_width=60)


def _side_by_side(*blocks: tuple[str, str]) -> str:
    columns = [[title] + text.splitlines() for title, text in blocks]
    widths = [max(map(len, col)) for col in columns]
    height = max(map(len, columns))
    lines = []
    for row in range(height):
        cells = [(col[row] if row < len(col) else "").ljust(width) for col, width in zip(columns, widths)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def run_demo(out=sys.stdout) -> int:
    """Compute the worked examples of the ONNX AveragePool pages; 0 when every one matches."""
    from .examples import EXAMPLES

    failures = 0
    for example in EXAMPLES:
        y = api.average_pool(example.x, opset=example.opset, **example.attributes)
        ok = y.shape == example.expected.shape and np.allclose(y, example.expected, rtol=1e-6, atol=0)
        failures += not ok
        attrs = ", ".join(f"{k}={v}" for k, v in example.attributes.items())
        print(f"== {example.name}  [{'match' if ok else 'MISMATCH'}]", file=out)
        print(f"   from the {example.source}; opset {example.opset}; {attrs}", file=out)
        if example.notes:
            print(f"   note: {example.notes}", file=out)
        print(_side_by_side((f"input {example.x.shape}", _format(example.x)),
                            (f"avgpool {y.shape}", _format(y)),
                            (f"expected {example.expected.shape}", _format(example.expected))), file=out)
        print(file=out)
    total = len(EXAMPLES)
    print(f"{total - failures} of {total} worked examples match the published outputs.", file=out)
    return 1 if failures else 0


def _add_onnx_attribute_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", "-k", type=_ints, required=True, help="kernel_shape, e.g. 3,3")
    parser.add_argument("--strides", "-s", type=_ints, help="strides (default 1 per axis)")
    parser.add_argument("--pads", "-p", type=_ints, help="ONNX pads: all begins then all ends, e.g. 1,1,1,1")
    parser.add_argument("--auto-pad", default="NOTSET", choices=["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    parser.add_argument("--ceil-mode", action="store_true", help="ceil_mode=1")
    parser.add_argument("--dilations", "-d", type=_ints, help="dilations (opset >= 19)")
    parser.add_argument("--opset", type=int, default=22, help="ONNX opset (default 22)")
    parser.add_argument("--layout", default="NCX", choices=["NCX", "NXC"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="avgpool", description="Average pooling exactly as ONNX, ONNX Runtime, OpenVINO and oneDNN define it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="compute the worked examples of the ONNX spec and compare with the published outputs",
                        description="Compute every worked example of the ONNX AveragePool pages and show input, "
                                    "attributes, avgpool's output and the published output side by side.")
    shape = commands.add_parser("shape", help="ONNX AveragePool output shape for an input shape",
                                description="Shape inference alone: the output shape of ONNX AveragePool.",
                                epilog="example: avgpool shape 1x3x32x32 -k 3,3 -s 2,2 --ceil-mode")
    shape.add_argument("input_shape", type=_ints, help="input shape, e.g. 1x3x32x32 or 1,3,32,32")
    _add_onnx_attribute_flags(shape)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo()
        if args.command == "shape":
            shape = api.output_shape(args.input_shape, args.kernel, strides=args.strides, pads=args.pads,
                                     auto_pad=args.auto_pad, ceil_mode=args.ceil_mode, dilations=args.dilations,
                                     opset=args.opset, layout=args.layout)
            print("x".join(map(str, shape)))
            return 0
    except AvgPoolError as err:
        print(f"avgpool: error: {err}", file=sys.stderr)
        return 2
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
