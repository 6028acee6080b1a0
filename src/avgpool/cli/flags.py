"""The flags several commands share: the pooling attributes (``shape``, ``explain``, ``pool``),
their value types, the dialect-neutral :class:`Settings` they make, and :class:`UsageError` for
flags that do not fit together.

argparse and the rest of avgpool are imported inside the functions, as everywhere in the command
line (:mod:`avgpool.cli`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from types import ModuleType

    from .settings import Settings


class UsageError(Exception):
    """Flags that do not fit together (exit code 2)."""


def ints(text: str) -> list[int]:
    import argparse

    if not text.strip():
        return []
    try:
        # every part a number: "3,,3" or "1x3x32x" is a typo, not 3,3 or 1x3x32
        return [int(part) for part in text.replace("x", ",").split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def boolean(text: str) -> bool:
    import argparse

    folded = text.strip().lower()
    if folded in ("1", "true", "yes", "on"):
        return True
    if folded in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def chunk_lengths(text: str) -> str | tuple[int | str, ...]:
    """``auto``, or one chunk length per axis: a positive integer, -1 (the whole axis) or auto."""
    import argparse

    if text.strip().lower() == "auto":
        return "auto"
    chunks: list[int | str] = []
    for part in text.replace("x", ",").split(","):
        part = part.strip().lower()
        if part == "auto":
            chunks.append(part)
            continue
        try:
            value = int(part)
        except ValueError:
            value = 0
        if value < 1 and value != -1:
            raise argparse.ArgumentTypeError(
                f"expected auto or comma-separated chunk lengths (positive, -1 for a whole axis, or auto), got {text!r}"
            )
        chunks.append(value)
    return tuple(chunks)


def auto_pad_mode(text: str) -> str:
    import argparse

    from .settings import AUTO_PAD_SPELLINGS, normalise_auto_pad

    if text.lower() not in AUTO_PAD_SPELLINGS:
        raise argparse.ArgumentTypeError(
            f"expected one of NOTSET/explicit/None/'', SAME_UPPER, SAME_LOWER, VALID, got {text!r}"
        )
    return normalise_auto_pad(text)


def add_command(commands: argparse._SubParsersAction, name: str, command: ModuleType) -> argparse.ArgumentParser:
    """The parser of the command ``name``, from what its module says: ``SUMMARY`` (one line, in
    ``avgpool --help``), ``DESCRIPTION``, ``EXAMPLES`` (after the flags, each kept on its own
    line) and ``add_flags(parser)``."""
    import argparse

    examples = command.EXAMPLES
    epilog = ("examples:\n" if len(examples) > 1 else "example:\n") + "\n".join(f"  {line}" for line in examples)
    parser = commands.add_parser(
        name,
        help=command.SUMMARY,
        description=command.DESCRIPTION,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_flags(parser)
    return parser


def add_attribute_flags(parser: argparse.ArgumentParser, dialects: Sequence[str], *, quantized: bool = True) -> None:
    from .settings import ROUNDINGS

    group = parser.add_argument_group("pooling attributes (one set of flags for every dialect)")
    group.add_argument("--dialect", default="onnx", choices=list(dialects), help="whose rules to follow (default onnx)")
    group.add_argument("--kernel", "-k", type=ints, required=True, help="kernel_shape / kernel, e.g. 3,3")
    group.add_argument("--strides", "-s", type=ints, help="strides (default 1 per axis)")
    group.add_argument("--dilations", "-d", type=ints, help="dilations (ONNX opset >= 19, OpenVINO AvgPool-16)")
    group.add_argument("--pads", "-p", type=ints, help="ONNX pads: all begins then all ends, e.g. 1,1,1,1")
    group.add_argument("--pads-begin", type=ints, help="pads at the start of each axis (OpenVINO/oneDNN spelling)")
    group.add_argument("--pads-end", type=ints, help="pads at the end of each axis")
    group.add_argument(
        "--auto-pad",
        type=auto_pad_mode,
        default="NOTSET",
        metavar="MODE",
        help="NOTSET (explicit, None, or '' as ONNX models write it), SAME_UPPER, SAME_LOWER or VALID, "
        "in any dialect's spelling",
    )
    group.add_argument("--ceil-mode", action="store_true", help="ceil_mode=1 (ONNX) / rounding_type=ceil")
    group.add_argument(
        "--rounding-type",
        choices=ROUNDINGS,
        help="floor, ceil or ceil_torch (OpenVINO-14 and later); overrides --ceil-mode",
    )
    group.add_argument(
        "--count-include-pad",
        action="store_true",
        help="count pads in the divisor: count_include_pad=1, exclude_pad=false",
    )
    group.add_argument(
        "--exclude-pad",
        type=boolean,
        metavar="BOOL",
        help="OpenVINO/oneDNN spelling: --exclude-pad false is --count-include-pad",
    )
    group.add_argument("--opset", type=int, default=22, help="ONNX opset (default 22)")
    group.add_argument("--version", type=int, default=16, help="OpenVINO AvgPool version: 1, 14 or 16 (default 16)")
    group.add_argument(
        "--layout",
        choices=["NCX", "NXC"],
        help="NCX (N x C x D1..) or NXC (N x D1.. x C, channels last); default NCX, oneDNN's default NXC",
    )
    if quantized:
        q = parser.add_argument_group("QLinearAveragePool (--dialect qlinear)")
        q.add_argument("--x-scale", type=float, help="input scale (default 1)")
        q.add_argument("--x-zero-point", type=int, help="input zero point (default 0)")
        q.add_argument("--y-scale", type=float, help="output scale (default 1)")
        q.add_argument("--y-zero-point", type=int, help="output zero point (default 0)")


#: The quantized flags' values when not given (None: the flag was not typed).
_QUANTIZED_DEFAULTS = {"x_scale": 1.0, "x_zero_point": 0, "y_scale": 1.0, "y_zero_point": 0}


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The flags as one dialect-neutral :class:`Settings`."""
    from .settings import DIALECTS, Settings

    if args.pads is not None and (args.pads_begin is not None or args.pads_end is not None):
        raise UsageError("give either --pads (ONNX's flat list) or --pads-begin/--pads-end, not both")
    begin, end = args.pads_begin, args.pads_end
    for flag, values in (("--pads-begin", begin), ("--pads-end", end)):
        # checked here: the ONNX dialect would name the flat `pads` it is joined into, values never typed
        if values is not None and len(values) != len(args.kernel):
            raise UsageError(
                f"{flag} has {len(values)} value{'s' * (len(values) != 1)} {values} but --kernel has "
                f"{len(args.kernel)}: one value per spatial axis"
            )
    if args.pads is not None:
        if len(args.pads) % 2:
            raise UsageError(
                f"--pads has {len(args.pads)} values {args.pads}: it needs all begins then all ends, "
                "2 values per spatial axis"
            )
        half = len(args.pads) // 2
        begin, end = args.pads[:half], args.pads[half:]
    rounding = args.rounding_type or ("ceil" if args.ceil_mode else "floor")
    if args.ceil_mode and rounding == "floor":
        raise UsageError("--ceil-mode contradicts --rounding-type floor")
    include_pad = args.count_include_pad or args.exclude_pad is False
    if args.count_include_pad and args.exclude_pad:
        raise UsageError("--count-include-pad contradicts --exclude-pad true")
    dialect = DIALECTS[args.dialect]
    channels_last = dialect.default_channels_last if args.layout is None else args.layout == "NXC"
    given = {name: getattr(args, name) for name in _QUANTIZED_DEFAULTS if getattr(args, name, None) is not None}
    if given and not dialect.quantized:
        flag = "--" + next(iter(given)).replace("_", "-")
        raise UsageError(f"{flag} is a QLinearAveragePool flag, and --dialect is {args.dialect}: add --dialect qlinear")
    quantized = {name: given.get(name, default) for name, default in _QUANTIZED_DEFAULTS.items() if hasattr(args, name)}
    return Settings(
        kernel=tuple(args.kernel),
        strides=args.strides and tuple(args.strides),
        dilations=args.dilations and tuple(args.dilations),
        pads_begin=begin and tuple(begin),
        pads_end=end and tuple(end),
        auto_pad=args.auto_pad,
        rounding=rounding,
        include_pad=include_pad,
        opset=args.opset,
        version=args.version,
        channels_last=channels_last,
        **quantized,
    )


def spatial(input_shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    """The spatial sizes of an input shape given on the command line, or a UsageError."""
    if len(input_shape) < 3 or any(n < 0 for n in input_shape):
        raise UsageError(
            f"the input shape {'x'.join(map(str, input_shape))} needs at least 3 non-negative sizes (N x C x D1 ...)"
        )
    return tuple(input_shape[1:-1] if channels_last else input_shape[2:])


def output_shape(input_shape: Sequence[int], spatial_out: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    shape = list(input_shape)
    start = 1 if channels_last else 2
    shape[start : start + len(spatial_out)] = spatial_out
    return tuple(shape)


def dialect_label(name: str, settings: Settings) -> str:
    """The operator the flags name, as the commands print it: e.g. ONNX AveragePool-19 (opset 22)."""
    from .settings import DIALECTS

    if name == "onnx":
        from .._ops import onnx as onnx_dialect

        return f"ONNX AveragePool-{onnx_dialect.op_version(settings.opset)} (opset {settings.opset})"
    if name == "openvino":
        return f"OpenVINO AvgPool-{settings.version}"
    return DIALECTS[name].title


def refuse_overwriting(read: Sequence[str], output: str) -> None:
    """avgpool never writes over a file it reads (same path, a link to it or a hard link): the
    result of a failed or interrupted command would otherwise be the only copy left."""
    for path in read:
        if os.path.exists(path) and os.path.exists(output) and os.path.samefile(path, output):
            raise UsageError(f"{output} is the input file {path}: write the result to another file")
