"""``avgpool pool``: a tensor (.npy, .npz) or an image (PNG, JPEG) pooled into a file, batch by
batch along N with a progress line; a zarr input or output goes chunk by chunk instead
(:mod:`avgpool.cli.chunked`, imported only then)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from .flags import (
    UsageError,
    add_attribute_flags,
    chunk_lengths,
    dialect_label,
    positive_int,
    refuse_overwriting,
    settings_from_args,
)
from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator
    from typing import TextIO

    import numpy as np

#: Inputs at least this large show a progress line without --progress.
PROGRESS_BYTES = 256 * 2**20
#: Default batch size: as many samples (along N) as fit in this many input bytes.
BATCH_BYTES = 32 * 2**20


SUMMARY = "pool a tensor (.npy/.npz/zarr) or an image (PNG/JPEG) into .npy/.npz/zarr/PNG"
DESCRIPTION = (
    "Read a tensor from .npy or .npz (never with pickle) or an image (PNG or JPEG, read as "
    "1 x C x H x W, pixel values unchanged, float32 for the float dialects and uint8 for qlinear), "
    "pool it with any dialect and write .npy, .npz or an image. Image output: N must be 1 and C 1 "
    "to 4; values are rounded half to even (NaN -> 0) and stored as 8 bits (a value outside 0..255 is refused). "
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
    "exit 2). A .npz or image output from a zarr input is held in memory whole."
)
EXAMPLES = [
    "avgpool pool photo.png small.png -k 2,2 -s 2,2",
    "avgpool pool scan.zarr small.zarr -k 4,4 -s 4,4 --chunks 1,1,2048,2048 --progress",
    "avgpool pool scans.zarr y.npy --key scan/raw -k 3,3 -p 1,1,1,1",
    "avgpool pool x.npy y.npy -k 3,3 -p 1,1,1,1 --count-include-pad --opset 11",
    "avgpool pool x.npz y.npz --key images -k 2,2 -s 2,2 --dialect openvino --rounding-type ceil",
    "avgpool pool x.npy y.npy -k 2,2 -s 2,2 --dialect onednn --layout NCX",
    "avgpool pool q.npy y.npy -k 2,2 --dialect qlinear --x-scale 0.1 --y-scale 0.1 --x-zero-point 128",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    from .settings import POOL_DIALECTS

    parser.add_argument("input", help="input file: .npy, .npz, .png, .jpg or .jpeg, or a zarr store (DIR.zarr)")
    parser.add_argument("output", help="output file: .npy, .npz, .png, .jpg or .jpeg, or a zarr store (DIR.zarr)")
    add_attribute_flags(parser, list(POOL_DIALECTS))
    files = parser.add_argument_group("files and progress")
    files.add_argument("--key", help="the array to read from an .npz holding several, or from a zarr group")
    files.add_argument("--output-key", help="the array name in an .npz output (default: the input's key, or y)")
    files.add_argument(
        "--dtype",
        choices=["float16", "float32", "float64", "uint8", "int8"],
        help="convert the input to this dtype first",
    )
    files.add_argument(
        "--batch-size", type=positive_int, help="samples along N per step (default: about 32 MB of input; files only)"
    )
    files.add_argument(
        "--chunks",
        type=chunk_lengths,
        metavar="C1,C2,...|auto",
        help="with a zarr store: the chunks the input is read and pooled in, one length per axis "
        "(-1: the whole axis) or auto; default: the input store's own chunks (auto for a file)",
    )
    files.add_argument("--progress", action="store_true", help="show a progress line on stderr")
    files.add_argument("--quiet", "-q", action="store_true", help="no summary line, no automatic progress")


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
        line = (
            f"avgpool: pooled {done}/{self.total} of N ({100 * done // max(self.total, 1)}%), {elapsed:.1f} s, "
            f"~{left:.1f} s left"
        )
        self.stream.write(("\r" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _pooled(x: Any, batch: int, compute: Any, progress: Progress) -> Iterator[np.ndarray]:
    """The output batch by batch along N (one batch when N is 0); progress is reported when the
    consumer asks for the next batch, that is once the previous one is written."""
    n = x.shape[0]
    for start in range(0, max(n, 1), batch):
        INTERRUPTS.check()
        yield compute(x[start : start + batch])
        progress.update(min(start + batch, n))


def _gathered(shape: tuple[int, ...], first: np.ndarray, rest: Iterator[np.ndarray]) -> np.ndarray:
    import numpy as np

    if first.shape[0] == shape[0]:
        return first
    y = np.empty(shape, dtype=first.dtype)
    y[: len(first)] = first
    start = len(first)
    for block in rest:
        y[start : start + len(block)] = block
        start += len(block)
    return y


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    from . import files
    from .settings import DIALECTS

    settings = settings_from_args(args)
    if files.is_zarr(args.input) or files.is_zarr(args.output):
        from .chunked import pool_chunked

        return pool_chunked(args, settings, stdout)
    if args.chunks is not None:
        raise UsageError("--chunks chooses the tiles of a zarr store's work: the input or the output must be one")
    dialect = DIALECTS[args.dialect]
    out_kind = _output_kind(args)  # before any work
    tensor = files.read_tensor(args.input, key=args.key)
    x = tensor.array
    if x.ndim < 3:
        raise UsageError(
            f"{args.input} holds an array of shape {x.shape}: pooling needs N x C x D1 ... (at least 3 dimensions)"
        )
    image_input = tensor.kind == "image"
    n = x.shape[0]
    per_sample = max(1, x.nbytes // max(n, 1))
    batch = args.batch_size or max(1, BATCH_BYTES // per_sample)
    progress = Progress(n, args.progress or (x.nbytes >= PROGRESS_BYTES and not args.quiet))
    started = time.perf_counter()

    def compute(block: Any) -> np.ndarray:
        return dialect.call(
            files.as_pool_input(
                block,
                dtype=args.dtype,
                image=image_input,
                channels_last=settings.channels_last,
                quantized=dialect.quantized,
            ),
            settings,
        )

    pooled = _pooled(x, batch, compute, progress)
    first = next(pooled)
    shape = (n,) + first.shape[1:]
    _write(args, out_kind, shape, first, pooled, settings.channels_last, tensor.key)
    progress.close()
    seconds = time.perf_counter() - started
    if not args.quiet:
        print(
            f"{args.input} {'x'.join(map(str, x.shape))} {x.dtype} -> {dialect_label(args.dialect, settings)} "
            f"({settings.describe()}) -> {args.output} {'x'.join(map(str, shape))} {first.dtype} in {seconds:.2f} s",
            file=stdout,
        )
    return 0


def _output_kind(args: argparse.Namespace) -> str:
    """The output's kind by its suffix, once its name, --output-key and the input allow writing it."""
    from . import files

    out_kind = files.check_suffix(args.output, writing=True)
    if args.output_key is not None:
        files.check_member_name(args.output, args.output_key)
    refuse_overwriting([args.input], args.output)
    return out_kind


def _write(
    args: argparse.Namespace,
    out_kind: str,
    shape: tuple[int, ...],
    first: np.ndarray,
    rest: Iterator[np.ndarray],
    channels_last: bool,
    input_key: str | None,
) -> None:
    """The pooled batches into the output file, which replaces any old one only once complete."""
    import itertools

    from . import files

    commit = INTERRUPTS.committing(last=True)
    if out_kind == "npy":  # streamed: an output larger than memory is never held whole
        with files.replacing(args.output, commit=commit) as fp:
            files.write_npy_batches(fp, shape, first.dtype, itertools.chain([first], rest))
    else:
        y = _gathered(shape, first, rest)
        result = y.transpose(0, 3, 1, 2) if out_kind == "image" and channels_last and y.ndim == 4 else y
        files.write_tensor(
            args.output, result, key=args.output_key or files.safe_member_name(input_key or "y"), commit=commit
        )
