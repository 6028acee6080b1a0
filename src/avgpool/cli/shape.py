"""``avgpool shape``: shape inference alone, the output shape of the pooling in any dialect."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import error_context
from .flags import add_attribute_flags, dialect_label, ints, settings_from_args, spatial

if TYPE_CHECKING:
    import argparse
    from typing import TextIO


SUMMARY = "output shape for an input shape, in any dialect"
DESCRIPTION = "Shape inference alone: the output shape of the pooling."
EXAMPLES = [
    "avgpool shape 1x3x32x32 -k 3,3 -s 2,2 --ceil-mode",
    "avgpool shape 1x1x5 -k 1 -s 3 --auto-pad same_upper --rounding-type ceil --dialect openvino",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    from .settings import DIALECTS

    parser.add_argument("input_shape", type=ints, help="input shape, e.g. 1x3x32x32 or 1,3,32,32")
    add_attribute_flags(parser, list(DIALECTS), quantized=False)


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    from .._core.shape import infer_output_shape
    from .settings import DIALECTS

    settings = settings_from_args(args)
    spatial(args.input_shape, settings.channels_last)  # a usage error before any dialect reads the shape
    input_shape = tuple(args.input_shape)
    with error_context(dialect_label(args.dialect, settings)):
        spec = DIALECTS[args.dialect].input_spec(settings, input_shape)
    print("x".join(map(str, infer_output_shape(spec, input_shape, settings.layout))), file=stdout)
    return 0
