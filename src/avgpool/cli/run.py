"""``avgpool run``: an ONNX model run in onnx's ReferenceEvaluator with avgpool's pooling ops,
inputs read or generated, outputs written, and optionally compared with onnxruntime."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .flags import UsageError, refuse_overwriting
from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import TextIO

    import numpy as np


SUMMARY = "run an ONNX model with onnx's ReferenceEvaluator and avgpool's pooling ops"
DESCRIPTION = (
    "Run an ONNX model in onnx.reference.ReferenceEvaluator with avgpool's AveragePool, GlobalAveragePool "
    "and com.microsoft QLinearAveragePool and QLinearGlobalAveragePool (bound to the model's opset; a "
    "model quantized by onnxruntime's quantizer runs). Inputs come from .npy/.npz files or "
    "are generated (shapes from the model, symbolic dimensions set to 1); outputs go to NAME.npy files in "
    "--output-dir. --check runs the model in onnxruntime too and prints the max abs / rel differences "
    "(exit 1 beyond tolerance)."
)
EXAMPLES = [
    "avgpool run model.onnx",
    "avgpool run model.onnx --input data_0=x.npy --output-dir out",
    "avgpool run model.onnx --generate ramp --check --rtol 1e-3",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument(
        "--input", "-i", action="append", metavar="NAME=PATH", help="an input from .npy/.npz (repeatable)"
    )
    parser.add_argument(
        "--generate",
        choices=["random", "ramp"],
        default="random",
        help="data for inputs not given: seeded random in [0, 1) (default), or onnx's backend-test ramp arange(n)/n",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    parser.add_argument("--output-dir", "-o", help="write every output to DIR/NAME.npy")
    parser.add_argument("--opset", type=int, help="bind the pooling ops to this opset (default: the model's)")
    parser.add_argument("--check", action="store_true", help="compare with onnxruntime (if installed)")
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --check (default 1e-4)")
    parser.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance of --check (default 1e-6)")


def _output_files(directory: str, names: Sequence[str]) -> dict[str, str]:
    """DIR/NAME.npy per output, NAME made a plain file name. Names that would share a file (also
    when they differ only in case, for case-insensitive file systems) get _2, _3 ...; names that
    needed no change are served first, so they keep their file."""
    from .files import safe_member_name

    files: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:  # first every name that needs no change and has its file to itself
        if safe_member_name(name, empty="output") == name and name.lower() not in taken:
            taken.add(name.lower())
            files[name] = name
    # then the others, those that needed no change first, on files no output has taken: with Y and
    # y_2 taken, y gets y_3, never a file named after another output
    for name in sorted(names, key=lambda name: safe_member_name(name, empty="output") != name):
        if name not in files:
            stem = candidate = safe_member_name(name, empty="output")
            number = 1
            while candidate.lower() in taken:
                number += 1
                candidate = f"{stem}_{number}"
            taken.add(candidate.lower())
            files[name] = candidate
    return {name: os.path.join(directory, files[name] + ".npy") for name in names}


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    from .. import onnx as avgpool_onnx
    from ..errors import AvgPoolError

    model = _load(args.model)
    try:
        specs = {spec.name: spec for spec in avgpool_onnx.model_inputs(model)}
    except ValueError as err:  # an input that is not a typed tensor: nothing a .npy file can feed
        raise UsageError(f"{args.model}: {err}") from None
    given = _given_inputs(args.input or (), specs)
    opset = args.opset if args.opset is not None else avgpool_onnx.model_opset(model) or 22
    try:
        evaluator = avgpool_onnx.make_evaluator(model, opset=opset)
    except AvgPoolError:
        raise
    except Exception as err:  # noqa: BLE001 - e.g. a node type the evaluator has no implementation of
        print(
            f"avgpool run: the reference evaluator cannot run this model: {type(err).__name__}: {err}", file=sys.stderr
        )
        return 1
    names = list(evaluator.output_names)
    if args.output_dir and os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        # found only when the outputs were written, after the model had run
        raise UsageError(f"--output-dir {args.output_dir} is a file, not a folder: name a folder for the outputs")
    files = _output_files(args.output_dir, names) if args.output_dir else {}
    for file in files.values():  # before any work
        refuse_overwriting([args.model, *given.values()], file)
    feeds = _feeds(specs, given, args.seed, args.generate, stdout)
    started = time.perf_counter()
    try:
        outputs = evaluator.run(None, feeds)
    except AvgPoolError:
        raise
    except Exception as err:  # noqa: BLE001 - any node's failure is reported, not traced
        print(f"avgpool run: the model failed in the reference evaluator: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    print(f"ran {args.model} (opset {opset}) with avgpool's pooling ops in {seconds:.2f} s", file=stdout)
    _write_outputs(args, names, outputs, files, stdout)
    return _check(args, model, feeds, names, outputs, stdout) if args.check else 0


def _load(path: str) -> Any:
    """The ONNX model in the file, or a UsageError."""
    from .. import onnx as avgpool_onnx

    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    try:
        return avgpool_onnx.load_model(path)
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds for a bad file
        raise UsageError(f"{path} is not a valid ONNX model: {err}") from None


def _given_inputs(items: Sequence[str], specs: dict) -> dict[str, str]:
    """The --input flags (NAME=PATH) as name -> path, each naming an input of the model."""
    given: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--input {item!r}: expected NAME=PATH")
        if name not in specs:
            raise UsageError(f"--input {name!r}: the model has no such input; its inputs are {sorted(specs)}")
        given[name] = path
    return given


def _feeds(specs: dict, given: dict[str, str], seed: int, kind: str, stdout: TextIO) -> dict[str, np.ndarray]:
    """Every input of the model: read from its file, checked against the model's input, or
    generated (a line each)."""
    import numpy as np

    from .. import onnx as avgpool_onnx
    from .files import read_tensor

    feeds: dict[str, np.ndarray] = {}
    for name, path in given.items():
        feeds[name] = np.asarray(read_tensor(path).array)
        problem = specs[name].mismatch(feeds[name])
        if problem:
            raise UsageError(f"--input {name}={path}: the array {problem}")
    for i, (name, spec) in enumerate(specs.items()):
        if name not in feeds:
            feeds[name] = avgpool_onnx.generate_input(spec, seed=seed + i, kind=kind)
            print(f"input {name}: generated {kind} {'x'.join(map(str, spec.shape))} {spec.dtype}", file=stdout)
    return feeds


def _write_outputs(
    args: argparse.Namespace, names: Sequence[str], outputs: Sequence[Any], files: dict[str, str], stdout: TextIO
) -> None:
    """A line per output (shape, dtype, range), each written to its file with --output-dir."""
    import numpy as np

    from .files import write_tensor

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
            write_tensor(files[name], value, commit=INTERRUPTS.committing(last=last))
            line += f" -> {files[name]}"
        print(line, file=stdout)


def _check(
    args: argparse.Namespace,
    model: Any,
    feeds: dict[str, np.ndarray],
    names: Sequence[str],
    outputs: Sequence[Any],
    stdout: TextIO,
) -> int:
    """--check: each output against onnxruntime's, a line each; 1 when any differs beyond the tolerance."""
    import numpy as np

    from .. import onnx as avgpool_onnx

    try:
        expected = avgpool_onnx.onnxruntime_outputs(model, feeds, names)
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 - onnxruntime refusing the model: no comparison, one line
        print(
            f"avgpool run: --check: onnxruntime cannot run this model: {type(err).__name__}: "
            f"{' '.join(str(err).split())}",
            file=sys.stderr,
        )
        return 1
    worst_ok = True
    for name, got, ref in zip(names, outputs, expected):
        if np.shape(got) != np.shape(ref):
            # no value to compare with (differences() said inf): onnxruntime's SAME padding with
            # dilations gives a shorter output, for one
            shapes = f"avgpool {'x'.join(map(str, np.shape(got)))}, onnxruntime {'x'.join(map(str, np.shape(ref)))}"
            print(f"check {name} against onnxruntime: [DIFFERENT shapes: {shapes}]", file=stdout)
            worst_ok = False
            continue
        abs_diff, rel_diff = avgpool_onnx.differences(ref, got)
        ok = bool(np.allclose(got, ref, rtol=args.rtol, atol=args.atol, equal_nan=True))
        worst_ok &= ok
        verdict = "ok" if ok else "DIFFERENT"
        if not ok:
            # how many: a QDQ model's QuantizeLinear after a pool flips a value by one step where
            # the average is a rounding tie and onnxruntime's float32 sum lands beside it
            # (7 of 3872 values on a 3x3 pool of a model quantized by onnxruntime)
            close = np.isclose(got, ref, rtol=args.rtol, atol=args.atol, equal_nan=True)
            verdict += f": {int(close.size - np.count_nonzero(close))} of {close.size} values"
        print(
            f"check {name} against onnxruntime: max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g} "
            f"[{verdict} at rtol {args.rtol:g}, atol {args.atol:g}]",
            file=stdout,
        )
    return 0 if worst_ok else 1
