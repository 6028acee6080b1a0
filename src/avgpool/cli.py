"""The ``avgpool`` command: ``demo``, ``shape``, ``explain``, ``pool`` and ``run``.

>>> main(["shape", "1x3x32x32", "-k", "3,3", "-s", "2,2", "--ceil-mode"])
1x3x16x16
0

Errors in the user's input (attributes, files, shapes) print one line on stderr and exit with 2,
never a traceback; ``run --check`` exits with 1 when onnxruntime disagrees beyond the tolerance.
Ctrl-C prints one line and exits with 130 with every output file as it was, or, once the output is
in place, lets the command end normally (:class:`avgpool.interrupts.Interrupts`).
"""

from __future__ import annotations

import os
import sys
import time
from io import BytesIO
from typing import TYPE_CHECKING, Any

from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Sequence
    from typing import TextIO

    import numpy as np

    from .dialect_registry import Settings

# Nothing else is imported here: the console script imports this module before main() can handle
# Ctrl-C, so numpy, argparse and the rest of avgpool are imported inside the functions (after
# main() has installed its handler, tests/test_interrupts.py).

#: Inputs at least this large show a progress line without --progress.
PROGRESS_BYTES = 256 * 2**20
#: Default batch size: as many samples (along N) as fit in this many input bytes.
BATCH_BYTES = 32 * 2**20


class UsageError(Exception):
    """Flags that do not fit together (exit code 2)."""


def _ints(text: str) -> list[int]:
    import argparse

    try:
        return [int(part) for part in text.replace("x", ",").split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _bool(text: str) -> bool:
    import argparse

    folded = text.strip().lower()
    if folded in ("1", "true", "yes", "on"):
        return True
    if folded in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _chunks(text: str) -> str | tuple[int | str, ...]:
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
            raise argparse.ArgumentTypeError(f"expected auto or comma-separated chunk lengths (positive, -1 for a "
                                             f"whole axis, or auto), got {text!r}")
        chunks.append(value)
    return tuple(chunks)


def _auto_pad(text: str) -> str:
    import argparse

    from .dialect_registry import AUTO_PAD_SPELLINGS, normalise_auto_pad

    if text.lower() not in AUTO_PAD_SPELLINGS:
        raise argparse.ArgumentTypeError(f"expected one of NOTSET/explicit/None/'', SAME_UPPER, SAME_LOWER, VALID, "
                                         f"got {text!r}")
    return normalise_auto_pad(text)


def _format(array: np.ndarray) -> str:
    import numpy as np

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


# ---------------------------------------------------------------- demo


def run_demo(out: TextIO | None = None) -> int:
    """Compute the worked examples of the ONNX AveragePool pages; 0 when every one matches."""
    import numpy as np

    from . import api
    from .examples import EXAMPLES, EXPLAIN_EXAMPLE

    out = out or sys.stdout
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
    print(file=out)
    print(f"== avgpool explain {' '.join(EXPLAIN_EXAMPLE.argv)}", file=out)
    print(f"   ({EXPLAIN_EXAMPLE.notes})", file=out)
    command_explain(build_parser().parse_args(["explain", *EXPLAIN_EXAMPLE.argv]), out)
    print("more: avgpool pool IN.npy|IN.png OUT.npy|OUT.png -k 3,3 ... (any dialect), "
          "avgpool run MODEL.onnx --check (see avgpool COMMAND --help)", file=out)
    return 1 if failures else 0


# ---------------------------------------------------------------- attribute flags and settings


def _add_attribute_flags(parser: argparse.ArgumentParser, dialects: Sequence[str], *, quantized: bool = True) -> None:
    from .dialect_registry import ROUNDINGS

    group = parser.add_argument_group("pooling attributes (one set of flags for every dialect)")
    group.add_argument("--dialect", default="onnx", choices=list(dialects),
                       help="whose rules to follow (default onnx)")
    group.add_argument("--kernel", "-k", type=_ints, required=True, help="kernel_shape / kernel, e.g. 3,3")
    group.add_argument("--strides", "-s", type=_ints, help="strides (default 1 per axis)")
    group.add_argument("--dilations", "-d", type=_ints, help="dilations (ONNX opset >= 19, OpenVINO AvgPool-16)")
    group.add_argument("--pads", "-p", type=_ints, help="ONNX pads: all begins then all ends, e.g. 1,1,1,1")
    group.add_argument("--pads-begin", type=_ints, help="pads at the start of each axis (OpenVINO/oneDNN spelling)")
    group.add_argument("--pads-end", type=_ints, help="pads at the end of each axis")
    group.add_argument("--auto-pad", type=_auto_pad, default="NOTSET", metavar="MODE",
                       help="NOTSET (explicit, None, or '' as ONNX models write it), SAME_UPPER, SAME_LOWER or VALID, "
                            "in any dialect's spelling")
    group.add_argument("--ceil-mode", action="store_true", help="ceil_mode=1 (ONNX) / rounding_type=ceil")
    group.add_argument("--rounding-type", choices=ROUNDINGS,
                       help="floor, ceil or ceil_torch (OpenVINO-14 and later); overrides --ceil-mode")
    group.add_argument("--count-include-pad", action="store_true",
                       help="count pads in the divisor: count_include_pad=1, exclude_pad=false")
    group.add_argument("--exclude-pad", type=_bool, metavar="BOOL",
                       help="OpenVINO/oneDNN spelling: --exclude-pad false is --count-include-pad")
    group.add_argument("--opset", type=int, default=22, help="ONNX opset (default 22)")
    group.add_argument("--version", type=int, default=16, help="OpenVINO AvgPool version: 1, 14 or 16 (default 16)")
    group.add_argument("--layout", choices=["NCX", "NXC"],
                       help="NCX (N x C x D1..) or NXC (N x D1.. x C, channels last); default NCX, "
                            "oneDNN's default NXC")
    if quantized:
        q = parser.add_argument_group("QLinearAveragePool (--dialect qlinear)")
        q.add_argument("--x-scale", type=float, default=1.0, help="input scale (default 1)")
        q.add_argument("--x-zero-point", type=int, default=0, help="input zero point (default 0)")
        q.add_argument("--y-scale", type=float, default=1.0, help="output scale (default 1)")
        q.add_argument("--y-zero-point", type=int, default=0, help="output zero point (default 0)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The flags as one dialect-neutral :class:`Settings`."""
    from .dialect_registry import DIALECTS, Settings

    if args.pads is not None and (args.pads_begin is not None or args.pads_end is not None):
        raise UsageError("give either --pads (ONNX's flat list) or --pads-begin/--pads-end, not both")
    begin, end = args.pads_begin, args.pads_end
    if args.pads is not None:
        if len(args.pads) % 2:
            raise UsageError(f"--pads has {len(args.pads)} values {args.pads}: it needs all begins then all ends, "
                             "2 values per spatial axis")
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
    quantized = {name: getattr(args, name) for name in ("x_scale", "x_zero_point", "y_scale", "y_zero_point")
                 if hasattr(args, name)}
    return Settings(kernel=tuple(args.kernel), strides=args.strides and tuple(args.strides),
                    dilations=args.dilations and tuple(args.dilations),
                    pads_begin=begin and tuple(begin), pads_end=end and tuple(end), auto_pad=args.auto_pad,
                    rounding=rounding, include_pad=include_pad, opset=args.opset, version=args.version,
                    channels_last=channels_last, **quantized)


def _spatial(input_shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    if len(input_shape) < 3 or any(n < 0 for n in input_shape):
        raise UsageError(f"the input shape {'x'.join(map(str, input_shape))} needs at least 3 non-negative sizes "
                         "(N x C x D1 ...)")
    return tuple(input_shape[1:-1] if channels_last else input_shape[2:])


def _output_shape(input_shape: Sequence[int], spatial_out: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    shape = list(input_shape)
    start = 1 if channels_last else 2
    shape[start:start + len(spatial_out)] = spatial_out
    return tuple(shape)


def _dialect_label(name: str, settings: Settings) -> str:
    from .dialect_registry import DIALECTS

    if name == "onnx":
        from .dialects import onnx as onnx_dialect

        return f"ONNX AveragePool-{onnx_dialect.op_version(settings.opset)} (opset {settings.opset})"
    if name == "openvino":
        return f"OpenVINO AvgPool-{settings.version}"
    return DIALECTS[name].title


# ---------------------------------------------------------------- shape, explain


def command_shape(args: argparse.Namespace, stdout: TextIO) -> int:
    from .dialect_registry import DIALECTS
    from .shape import infer_output_shape

    settings = settings_from_args(args)
    _spatial(args.input_shape, settings.channels_last)  # a usage error before any dialect reads the shape
    input_shape = tuple(args.input_shape)
    spec = DIALECTS[args.dialect].input_spec(settings, input_shape)
    print("x".join(map(str, infer_output_shape(spec, input_shape, settings.layout))), file=stdout)
    return 0


def command_explain(args: argparse.Namespace, stdout: TextIO) -> int:
    from . import explain, io
    from .dialect_registry import DIALECTS

    settings = settings_from_args(args)
    spatial = _spatial(args.input_shape, settings.channels_last)
    spec = DIALECTS[args.dialect].input_spec(settings, tuple(args.input_shape))
    axes = explain.describe(spec, spatial)
    output_shape = _output_shape(args.input_shape, [a.geometry.out for a in axes], settings.channels_last)
    label = _dialect_label(args.dialect, settings)
    text = explain.explain_text(settings, label, spec, args.input_shape, spatial, output_shape,
                                max_windows=args.max_windows, diagram_width=args.width, compare=not args.no_compare)
    # every picture is made before anything is printed or written, so that a refusal is the only output
    title = f"{label}, input {'x'.join(map(str, args.input_shape))}: {settings.describe()}"
    pictures = {}
    if args.svg:
        pictures[args.svg] = explain.svg(axes, max_windows=args.max_windows, title=title).encode("utf-8")
    if args.png:
        buffer = BytesIO()
        explain.png(axes, buffer, max_windows=args.max_windows, title=title)
        pictures[args.png] = buffer.getvalue()
    stdout.write(text)
    for number, (path, data) in enumerate(pictures.items(), 1):
        with io.replacing(path, commit=INTERRUPTS.committing(last=number == len(pictures))) as fp:
            fp.write(data)
        print(f"wrote {path}", file=stdout)
    return 0


# ---------------------------------------------------------------- pool


class Progress:
    """A progress line on stderr: rewritten in place on a terminal, a few plain lines otherwise."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last_step = -1

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        step = done * 10 // max(self.total, 1)
        if not self.tty and step == self.last_step and done < self.total:
            return
        self.last_step = step
        elapsed = time.perf_counter() - self.start
        left = elapsed / done * (self.total - done) if done else 0.0
        line = (f"avgpool: pooled {done}/{self.total} of N ({100 * done // max(self.total, 1)}%), {elapsed:.1f} s, "
                f"~{left:.1f} s left")
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _prepare(block: Any, args: argparse.Namespace, image_input: bool, channels_last: bool,
             quantized: bool) -> np.ndarray:
    import numpy as np

    array = np.asarray(block)
    if image_input and channels_last:
        array = array.transpose(0, 2, 3, 1)
    if args.dtype:
        array = array.astype(args.dtype)
    elif image_input and not quantized:
        array = array.astype(np.float32)
    return np.ascontiguousarray(array) if image_input else array


def _refuse_overwriting(read: Sequence[str], output: str) -> None:
    """avgpool never writes over a file it reads (same path, a link to it or a hard link): the
    result of a failed or interrupted command would otherwise be the only copy left."""
    for path in read:
        if os.path.exists(path) and os.path.exists(output) and os.path.samefile(path, output):
            raise UsageError(f"{output} is the input file {path}: write the result to another file")


def _pooled(x: Any, batch: int, compute: Any, progress: Progress) -> Iterator[np.ndarray]:
    """The output batch by batch along N (one batch when N is 0); progress is reported when the
    consumer asks for the next batch, that is once the previous one is written."""
    n = x.shape[0]
    for start in range(0, max(n, 1), batch):
        INTERRUPTS.check()
        yield compute(x[start:start + batch])
        progress.update(min(start + batch, n))


def _gathered(shape: tuple[int, ...], first: np.ndarray, rest: Iterator[np.ndarray]) -> np.ndarray:
    import numpy as np

    if first.shape[0] == shape[0]:
        return first
    y = np.empty(shape, dtype=first.dtype)
    y[:len(first)] = first
    start = len(first)
    for block in rest:
        y[start:start + len(block)] = block
        start += len(block)
    return y


def command_pool(args: argparse.Namespace, stdout: TextIO) -> int:
    import itertools

    from . import io
    from .dialect_registry import DIALECTS

    settings = settings_from_args(args)
    if io.is_zarr(args.input) or io.is_zarr(args.output):
        from .cli_chunked import pool_chunked

        return pool_chunked(args, settings, stdout)
    if args.chunks is not None:
        raise UsageError("--chunks chooses the tiles of a zarr store's work: the input or the output must be one")
    dialect = DIALECTS[args.dialect]
    out_kind = io.check_suffix(args.output, writing=True)  # before any work
    if args.output_key is not None:
        io.check_member_name(args.output, args.output_key)
    _refuse_overwriting([args.input], args.output)
    tensor = io.read_tensor(args.input, key=args.key)
    x = tensor.array
    if x.ndim < 3:
        raise UsageError(f"{args.input} holds an array of shape {x.shape}: pooling needs N x C x D1 ... "
                         "(at least 3 dimensions)")
    image_input = tensor.kind == "image"
    n = x.shape[0]
    per_sample = max(1, x.nbytes // max(n, 1))
    batch = args.batch_size or max(1, BATCH_BYTES // per_sample)
    progress = Progress(n, args.progress or (x.nbytes >= PROGRESS_BYTES and not args.quiet))
    started = time.perf_counter()

    def compute(block: Any) -> np.ndarray:
        return dialect.call(_prepare(block, args, image_input, settings.channels_last, dialect.quantized), settings)

    pooled = _pooled(x, batch, compute, progress)
    first = next(pooled)
    shape = (n,) + first.shape[1:]
    commit = INTERRUPTS.committing(last=True)
    if out_kind == "npy":  # streamed: an output larger than memory is never held whole
        with io.replacing(args.output, commit=commit) as fp:
            io.write_npy_batches(fp, shape, first.dtype, itertools.chain([first], pooled))
    else:
        y = _gathered(shape, first, pooled)
        result = y.transpose(0, 3, 1, 2) if out_kind == "image" and settings.channels_last and y.ndim == 4 else y
        io.write_tensor(args.output, result, key=args.output_key or io.safe_member_name(tensor.key or "y"),
                        commit=commit)
    progress.close()
    seconds = time.perf_counter() - started
    if not args.quiet:
        print(f"{args.input} {'x'.join(map(str, x.shape))} {x.dtype} -> {_dialect_label(args.dialect, settings)} "
              f"({settings.describe()}) -> {args.output} {'x'.join(map(str, shape))} {first.dtype} in {seconds:.2f} s",
              file=stdout)
    return 0


# ---------------------------------------------------------------- run


def _output_files(directory: str, names: Sequence[str]) -> dict[str, str]:
    """DIR/NAME.npy per output, NAME made a plain file name. Names that would share a file (also
    when they differ only in case, for case-insensitive file systems) get _2, _3 ...; names that
    needed no change are served first, so they keep their file."""
    from .io import safe_member_name

    taken: set[str] = set()
    files = {}
    for name in sorted(names, key=lambda name: safe_member_name(name, empty="output") != name):
        stem = candidate = safe_member_name(name, empty="output")
        number = 1
        while candidate.lower() in taken:
            number += 1
            candidate = f"{stem}_{number}"
        taken.add(candidate.lower())
        files[name] = os.path.join(directory, candidate + ".npy")
    return {name: files[name] for name in names}


def command_run(args: argparse.Namespace, stdout: TextIO) -> int:
    import numpy as np

    from . import io
    from . import onnx as avgpool_onnx
    from .dialect_registry import DialectUnavailable
    from .errors import AvgPoolError

    if not os.path.isfile(args.model):
        raise UsageError(f"{args.model}: no such file")
    try:
        model = avgpool_onnx.load_model(args.model)
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds for a bad file
        raise UsageError(f"{args.model} is not a valid ONNX model: {err}") from None
    specs = {spec.name: spec for spec in avgpool_onnx.model_inputs(model)}
    given: dict[str, str] = {}
    for item in args.input or ():
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--input {item!r}: expected NAME=PATH")
        if name not in specs:
            raise UsageError(f"--input {name!r}: the model has no such input; its inputs are {sorted(specs)}")
        given[name] = path
    opset = args.opset or avgpool_onnx.model_opset(model) or 22
    evaluator = avgpool_onnx.make_evaluator(model, opset=opset)
    names = list(evaluator.output_names)
    files = _output_files(args.output_dir, names) if args.output_dir else {}
    for file in files.values():  # before any work
        _refuse_overwriting([args.model, *given.values()], file)
    feeds: dict[str, np.ndarray] = {}
    for name, path in given.items():
        feeds[name] = np.asarray(io.read_tensor(path).array)
        problem = specs[name].mismatch(feeds[name])
        if problem:
            raise UsageError(f"--input {name}={path}: the array {problem}")
    for i, (name, spec) in enumerate(specs.items()):
        if name not in feeds:
            feeds[name] = avgpool_onnx.generate_input(spec, seed=args.seed + i, kind=args.generate)
            print(f"input {name}: generated {args.generate} {'x'.join(map(str, spec.shape))} {spec.dtype}", file=stdout)
    started = time.perf_counter()
    try:
        outputs = evaluator.run(None, feeds)
    except (AvgPoolError, DialectUnavailable):
        raise
    except Exception as err:  # noqa: BLE001 - any node's failure is reported, not traced
        print(f"avgpool run: the model failed in the reference evaluator: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    print(f"ran {args.model} (opset {opset}) with avgpool's pooling ops in {seconds:.2f} s", file=stdout)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for number, (name, value) in enumerate(zip(names, outputs), 1):
        value = np.asarray(value)
        stats = ""
        if value.size and value.dtype.kind in "fiub":
            stats = f" min {np.nanmin(value):.6g} max {np.nanmax(value):.6g}"
        line = f"output {name}: {'x'.join(map(str, value.shape))} {value.dtype}{stats}"
        if args.output_dir:
            last = number == len(names) and not args.check
            io.write_tensor(files[name], value, commit=INTERRUPTS.committing(last=last))
            line += f" -> {files[name]}"
        print(line, file=stdout)
    if not args.check:
        return 0
    expected = avgpool_onnx.onnxruntime_outputs(model, feeds, names)
    worst_ok = True
    for name, got, ref in zip(names, outputs, expected):
        abs_diff, rel_diff = avgpool_onnx.differences(ref, got)
        ok = np.shape(got) == np.shape(ref) and bool(np.allclose(got, ref, rtol=args.rtol, atol=args.atol,
                                                                equal_nan=True))
        worst_ok &= ok
        print(f"check {name} against onnxruntime: max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g} "
              f"[{'ok' if ok else 'DIFFERENT'} at rtol {args.rtol:g}, atol {args.atol:g}]", file=stdout)
    return 0 if worst_ok else 1


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from .dialect_registry import DIALECTS, POOL_DIALECTS

    _Formatter = argparse.RawDescriptionHelpFormatter  # the examples in the descriptions keep their lines
    parser = argparse.ArgumentParser(
        prog="avgpool", formatter_class=_Formatter,
        description="Average pooling exactly as ONNX, ONNX Runtime, OpenVINO and oneDNN define it.",
        epilog="examples:\n"
               "  avgpool demo\n"
               "  avgpool shape 1x3x32x32 -k 3,3 -s 2,2 --ceil-mode\n"
               "  avgpool explain 1x1x4 -k 3 -s 3 --ceil-mode\n"
               "  avgpool pool photo.png small.png -k 2,2 -s 2,2\n"
               "  avgpool run model.onnx --output-dir out --check\n"
               "  avgpool warmup\n"
               "run 'avgpool COMMAND --help' for each command's flags")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("demo", help="compute the worked examples of the ONNX spec and compare with the published "
                                     "outputs",
                        formatter_class=_Formatter,
                        description="Compute every worked example of the ONNX AveragePool pages and show input, "
                                    "attributes, avgpool's output and the published output side by side; then "
                                    "explain one case of semantics.md section 7.",
                        epilog="example:\n  avgpool demo")

    shape = commands.add_parser("shape", help="output shape for an input shape, in any dialect",
                                formatter_class=_Formatter,
                                description="Shape inference alone: the output shape of the pooling.",
                                epilog="examples:\n"
                                       "  avgpool shape 1x3x32x32 -k 3,3 -s 2,2 --ceil-mode\n"
                                       "  avgpool shape 1x1x5 -k 1 -s 3 --auto-pad same_upper --rounding-type ceil "
                                       "--dialect openvino")
    shape.add_argument("input_shape", type=_ints, help="input shape, e.g. 1x3x32x32 or 1,3,32,32")
    _add_attribute_flags(shape, list(DIALECTS), quantized=False)

    explain = commands.add_parser(
        "explain", help="every window, its taps and divisor; where the dialects differ",
        formatter_class=_Formatter,
        description="For an input shape and attributes: the output shape, the resolved pads and, per axis, every "
                    "window (first tap, how many taps fall in the input, in the padding, past the padding) with "
                    "its divisor; then what ONNX, OpenVINO, oneDNN, PyTorch and QLinearAveragePool give for the "
                    "same configuration.",
        epilog="examples:\n"
               "  avgpool explain 1x1x4 -k 3 -s 3 --ceil-mode\n"
               "  avgpool explain 1x1x4 -k 3 -s 2 -p 1,1 --ceil-mode --count-include-pad --svg windows.svg\n"
               "  avgpool explain 1x1x5 -k 2 -d 2 --auto-pad SAME_UPPER\n"
               "  avgpool explain 1x1x4 -k 3 -s 2 --pads-begin 1 --pads-end 1 --rounding-type ceil "
               "--exclude-pad false --dialect openvino")
    explain.add_argument("input_shape", type=_ints, help="input shape, e.g. 1x1x4 or 1,3,32,32")
    _add_attribute_flags(explain, list(DIALECTS), quantized=False)
    out = explain.add_argument_group("output")
    out.add_argument("--max-windows", type=int, default=64, help="windows listed per axis (0: all; default 64)")
    out.add_argument("--width", type=int, default=80, help="widest text diagram drawn, in columns (default 80)")
    out.add_argument("--no-compare", action="store_true", help="leave out the comparison with other dialects")
    out.add_argument("--svg", metavar="PATH", help="also write the diagram as SVG")
    out.add_argument("--png", metavar="PATH", help="also write the diagram as PNG (needs Pillow)")

    pool = commands.add_parser(
        "pool", help="pool a tensor (.npy/.npz/zarr) or an image (PNG/JPEG) into .npy/.npz/zarr/PNG",
        formatter_class=_Formatter,
        description="Read a tensor from .npy or .npz (never with pickle) or an image (PNG or JPEG, read as "
                    "1 x C x H x W, pixel values unchanged, float32 for the float dialects and uint8 for qlinear), "
                    "pool it with any dialect and write .npy, .npz or an image. Image output: N must be 1 and C 1 "
                    "to 4; values are rounded half to even, clipped to 0..255 (NaN -> 0) and stored as 8 bits. "
                    "Work is done batch by batch along N (a large .npy is memory-mapped, a .npy output is written "
                    "batch by batch), with a progress line on stderr for large inputs or with --progress. An "
                    "existing output file is replaced only once the new one is complete.\n\n"
                    "Zarr stores (needs avgpool[dask]): INPUT or OUTPUT is a zarr store when it ends in .zarr or "
                    "is an existing directory; an input store is a zarr array, or a group with --key naming the "
                    "array. Then the work goes chunk by chunk with avgpool.dask, bit for bit the result above and "
                    "never the whole array in memory: the input is read in its own chunks or those --chunks gives "
                    "(e.g. 1,1,2048,2048, -1 for a whole axis, or auto; a .npy input is cut into them too), the "
                    "output chunks follow the input's, and a zarr output (zarr format 3) is written into a "
                    "temporary directory beside it and swapped in only when complete: an existing output store "
                    "(which must be a zarr array) is kept on any error or Ctrl-C. A progress bar goes to stderr "
                    "when it is a terminal or with --progress. ONNX and qlinear pool any zarr store; openvino and "
                    "onednn only where their windows and divisors are some ONNX AveragePool's on that input (else "
                    "exit 2). A .npz or image output from a zarr input is held in memory whole.",
        epilog="examples:\n"
               "  avgpool pool photo.png small.png -k 2,2 -s 2,2\n"
               "  avgpool pool scan.zarr small.zarr -k 4,4 -s 4,4 --chunks 1,1,2048,2048 --progress\n"
               "  avgpool pool scans.zarr y.npy --key scan/raw -k 3,3 -p 1,1,1,1\n"
               "  avgpool pool x.npy y.npy -k 3,3 -p 1,1,1,1 --count-include-pad --opset 11\n"
               "  avgpool pool x.npz y.npz --key images -k 2,2 -s 2,2 --dialect openvino --rounding-type ceil\n"
               "  avgpool pool x.npy y.npy -k 2,2 -s 2,2 --dialect onednn --layout NCX\n"
               "  avgpool pool q.npy y.npy -k 2,2 --dialect qlinear --x-scale 0.1 --y-scale 0.1 --x-zero-point 128")
    pool.add_argument("input", help="input file: .npy, .npz, .png, .jpg or .jpeg, or a zarr store (DIR.zarr)")
    pool.add_argument("output", help="output file: .npy, .npz, .png, .jpg or .jpeg, or a zarr store (DIR.zarr)")
    _add_attribute_flags(pool, list(POOL_DIALECTS))
    files = pool.add_argument_group("files and progress")
    files.add_argument("--key", help="the array to read from an .npz holding several, or from a zarr group")
    files.add_argument("--output-key", help="the array name in an .npz output (default: the input's key, or y)")
    files.add_argument("--dtype", choices=["float16", "float32", "float64", "uint8", "int8"],
                       help="convert the input to this dtype first")
    files.add_argument("--batch-size", type=int, help="samples along N per step (default: about 32 MB of input; "
                                                      "files only)")
    files.add_argument("--chunks", type=_chunks, metavar="C1,C2,...|auto",
                       help="with a zarr store: the chunks the input is read and pooled in, one length per axis "
                            "(-1: the whole axis) or auto; default: the input store's own chunks (auto for a file)")
    files.add_argument("--progress", action="store_true", help="show a progress line on stderr")
    files.add_argument("--quiet", "-q", action="store_true", help="no summary line, no automatic progress")

    run = commands.add_parser(
        "run", help="run an ONNX model with onnx's ReferenceEvaluator and avgpool's pooling ops",
        formatter_class=_Formatter,
        description="Run an ONNX model in onnx.reference.ReferenceEvaluator with avgpool's AveragePool, "
                    "GlobalAveragePool and com.microsoft QLinearAveragePool (bound to the model's opset). "
                    "Inputs come from .npy/.npz files or are generated (shapes from the model, symbolic "
                    "dimensions set to 1); outputs go to NAME.npy files in --output-dir. --check runs the "
                    "model in onnxruntime too and prints the max abs / rel differences (exit 1 beyond tolerance).",
        epilog="examples:\n"
               "  avgpool run model.onnx\n"
               "  avgpool run model.onnx --input data_0=x.npy --output-dir out\n"
               "  avgpool run model.onnx --generate ramp --check --rtol 1e-3")
    run.add_argument("model", help="the .onnx file")
    run.add_argument("--input", "-i", action="append", metavar="NAME=PATH", help="an input from .npy/.npz (repeatable)")
    run.add_argument("--generate", choices=["random", "ramp"], default="random",
                     help="data for inputs not given: seeded random in [0, 1) (default), or onnx's backend-test "
                          "ramp arange(n)/n")
    run.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    run.add_argument("--output-dir", "-o", help="write every output to DIR/NAME.npy")
    run.add_argument("--opset", type=int, help="bind the pooling ops to this opset (default: the model's)")
    run.add_argument("--check", action="store_true", help="compare with onnxruntime (if installed)")
    run.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --check (default 1e-4)")
    run.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance of --check (default 1e-6)")

    from .first_calls import KINDS

    warmup = commands.add_parser(
        "warmup", help="load or compile the kernels ahead of the first call (container images, CI)",
        formatter_class=_Formatter,
        description="Make each kind of first call once, so that later processes start warm: where the package "
                    "ships precompiled kernels for this CPU this only loads them; elsewhere it compiles them "
                    "(up to a minute per dtype) into the cache folder it prints (NUMBA_CACHE_DIR chooses it).",
        epilog="examples:\n"
               "  avgpool warmup\n"
               "  avgpool warmup float32 qlinear-uint8\n"
               "  NUMBA_CACHE_DIR=/opt/cache avgpool warmup    # e.g. in a Dockerfile\n"
               f"kinds: {', '.join(KINDS)}")
    warmup.add_argument("kinds", nargs="*", metavar="KIND", help="kinds to warm up (default: all)")
    return parser


def command_warmup(args: argparse.Namespace, stdout: TextIO) -> int:
    """Warm up the chosen kinds, a line each, then where compiled kernels are kept."""
    from .first_calls import cache_location, warmup
    from .kernels import jit

    warmup(args.kinds or None, report=lambda kind, seconds: print(f"{kind:26s} {seconds:6.2f} s", file=stdout,
                                                                         flush=True))
    levels = jit.shipped_levels()
    print(f"precompiled kernels: {levels[0] if levels else 'none for this CPU, numba and Python'}", file=stdout)
    print(f"kernels compiled here are kept in: {cache_location() or 'no writable folder (set NUMBA_CACHE_DIR)'}",
          file=stdout)
    return 0


_COMMANDS = ("demo", "shape", "explain", "pool", "run", "warmup")


def _command(args: argparse.Namespace, stdout: TextIO) -> int:
    commands = {"shape": command_shape, "explain": command_explain, "pool": command_pool, "run": command_run,
                "warmup": command_warmup}
    return run_demo(stdout) if args.command == "demo" else commands[args.command](args, stdout)


def _failure(prefix: str, err: Exception) -> int:
    """Exit code 2 and one line for an error in the user's input or files; other errors go on."""
    from .dialect_registry import DialectUnavailable
    from .errors import AvgPoolError
    from .io import FileFormatError

    if isinstance(err, (AvgPoolError, FileFormatError, UsageError, DialectUnavailable, ImportError)):
        message = str(err)
    elif isinstance(err, MemoryError):  # e.g. absurd pads: an output of terabytes
        message = f"not enough memory: {err or 'MemoryError'}"
    elif isinstance(err, OSError):
        message = f"{err.filename}: " if err.filename else ""
        message += f"{err.strerror or err}"
    else:
        raise err
    print(f"{prefix}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run one command and return its exit code. Without ``argv`` this is the program itself (the
    console script, ``python -m avgpool``): the command line is ``sys.argv``, and SIGINT stays
    ignored once this returns, until the process has exited (:class:`avgpool.interrupts.Interrupts`)."""
    with INTERRUPTS.handling(program=argv is None) as handled:
        words = sys.argv[1:] if argv is None else list(argv)
        prefix = f"avgpool {words[0]}" if words and words[0] in _COMMANDS else "avgpool"
        code: int | None = None
        try:
            try:
                if handled:
                    INTERRUPTS.start()
                args = build_parser().parse_args(argv)
                code = _command(args, stdout or sys.stdout)
            finally:
                if handled:
                    INTERRUPTS.stop()
        except KeyboardInterrupt:  # the outputs are already cleaned up (io.replacing)
            code = None
        except Exception as err:  # noqa: BLE001 - _failure reports the user's errors and raises the others
            # an import can turn a KeyboardInterrupt into an ImportError
            code = None if handled and INTERRUPTS.requested else _failure(prefix, err)
        if code is None or (handled and INTERRUPTS.requested):
            print(f"{prefix}: interrupted", file=sys.stderr)
            return 130
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
