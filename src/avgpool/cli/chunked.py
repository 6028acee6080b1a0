"""``avgpool pool`` when the input or the output is a zarr store: a dask graph from the input's
chunks to the output's (avgpool.dask), never the whole array in memory, the output store moved
into place only once complete. Imported by :mod:`avgpool.cli.pool` when it is needed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .flags import UsageError, dialect_label, refuse_overwriting
from .interrupts import INTERRUPTS

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    import numpy as np

    from .settings import Settings


def _dask() -> tuple[Any, Any]:
    """dask.array and avgpool.dask, or an ImportError that says what to install."""
    try:
        import dask.array as da

        from .. import dask as avgpool_dask
    except ImportError as err:
        raise ImportError(f"zarr stores need dask and zarr: install avgpool[dask] ({err})") from None
    return da, avgpool_dask


def _refuse_nested(input_path: str, output: str) -> None:
    """Beyond :func:`~avgpool.cli.flags.refuse_overwriting`: with a store, one path inside the
    other is refused too (an output store replacing the group the input array is in, or an output
    written into the input store)."""
    source, target = os.path.realpath(input_path), os.path.realpath(output)
    if os.path.commonpath([source, target]) in (source, target):
        raise UsageError(
            f"{output} is the input store {input_path}, holds it or is inside it: write the result elsewhere"
        )


def _lazy_input(args: argparse.Namespace, settings: Settings, da: Any) -> tuple[Any, str | None, str]:
    """The input as a dask array in the chunks --chunks asks for (a zarr store's own by default),
    converted by :func:`~avgpool.cli.files.as_pool_input`; its key, and its shape and dtype as read."""
    from . import files
    from .settings import DIALECTS

    quantized = DIALECTS[args.dialect].quantized
    if files.is_zarr(args.input):
        z = files.open_zarr(args.input, args.key)
        chunks = _checked_chunks(args.chunks, z.ndim)
        x, kind, key = da.from_zarr(z, chunks=chunks), "zarr", args.key
        read = f"{'x'.join(map(str, z.shape))} {z.dtype}"
    else:
        tensor = files.read_tensor(args.input, key=args.key)
        array = tensor.array
        read = f"{'x'.join(map(str, array.shape))} {array.dtype}"
        if tensor.kind == "image":  # a picture is small: converted whole, as for a file output
            array = files.as_pool_input(
                array, dtype=args.dtype, image=True, channels_last=settings.channels_last, quantized=quantized
            )
        chunks = _checked_chunks(args.chunks, array.ndim)
        # name=False: the graph's name is not a hash of the whole input
        x = da.from_array(array, chunks="auto" if chunks is None else chunks, name=False)
        kind, key = tensor.kind, tensor.key
    if x.ndim < 3:
        raise UsageError(
            f"{args.input} holds an array of shape {x.shape}: pooling needs N x C x D1 ... (at least 3 dimensions)"
        )
    if args.dtype and kind != "image":
        x = x.astype(args.dtype)
    if not x.dtype.isnative:  # zarr v2 stores big-endian arrays; the kernels read native numbers
        x = x.astype(x.dtype.newbyteorder("="))
    return x, key, read


def _checked_chunks(chunks: Any, ndim: int) -> Any:
    if isinstance(chunks, tuple) and len(chunks) != ndim:
        raise UsageError(
            f"--chunks has {len(chunks)} values {','.join(map(str, chunks))} but the input has "
            f"{ndim} axes: give one per axis (-1 for a whole axis) or auto"
        )
    return chunks


def _dialect_spec(name: str, s: Settings, shape: tuple[int, ...], dtype: np.dtype) -> tuple[Any, Any]:
    """The canonical spec and layout of dialect ``name`` (openvino, onednn) on an input of
    ``shape``, for avgpool.dask.pool_spec: the registry's, which is the dialect function's own
    translation, refused with the function's messages. The engine sees nothing of a dialect beyond it."""
    import numpy as np

    from ..errors import AvgPoolError, error_context
    from .settings import DIALECTS

    if name == "openvino":
        from .._ops import openvino as dialect

        label = dialect.operator_label(dialect.check_version(s.version))
    else:
        from .._ops import onednn as dialect

        label = dialect.LABEL
    with error_context(label):
        if np.dtype(dtype) not in dialect.DTYPES:
            raise AvgPoolError(f"the input has dtype {dtype}: it must be {dialect.DTYPES_TEXT}")
        spec = DIALECTS[name].input_spec(s, tuple(shape))
    return spec, s.layout


def _onednn_empty_windows(y: Any, spec: Any, input_shape: tuple[int, ...]) -> Any:
    """``y`` (the lazy NCX output of ``spec``) with OpenVINO's empty windows written as its CPU
    kernels compute them, chunk by chunk: what :func:`avgpool.openvino.avg_pool` does to a whole
    output (the same per-axis divisor factors, cut to each chunk)."""
    import numpy as np

    from .._ops.openvino import empty_window_factors, write_empty_windows

    factors = empty_window_factors(spec, input_shape)
    if factors is None:
        return y

    def write(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        where = block_info[0]["array-location"][2:]
        cut = [f[a:b] for f, (a, b) in zip(factors, where)]
        written = block.copy()
        return written if write_empty_windows(written, cut) else block

    return y.map_blocks(write, dtype=y.dtype, meta=np.empty((0,) * y.ndim, y.dtype))


def _dask_pooled(args: argparse.Namespace, s: Settings, x: Any, avgpool_dask: Any) -> Any:
    """The lazy pooled array; every attribute is validated here, before any chunk is read. The
    attributes are the registry's (one mapping per dialect), as for a file."""
    from .settings import onnx_attributes, qlinear_attributes

    if args.dialect == "qlinear":
        attributes = qlinear_attributes(s)
        return avgpool_dask.qlinear_average_pool(x, s.x_scale, s.x_zero_point, s.y_scale, s.y_zero_point, **attributes)
    if args.dialect == "onnx":
        return avgpool_dask.average_pool(x, **onnx_attributes(s), opset=s.opset, layout=s.layout.value)
    spec, layout = _dialect_spec(args.dialect, s, x.shape, x.dtype)
    y = avgpool_dask.pool_spec(x, spec, layout)
    if args.dialect == "openvino":  # its empty windows: oneDNN's signed zeros, written after the engine
        y = _onednn_empty_windows(y, spec, x.shape)
    return y


def _output_kind(args: argparse.Namespace) -> str:
    """zarr, or the output file's kind by its suffix, once the flags, the input and the zarr
    module allow writing it."""
    from . import files

    files.zarr_module()  # missing: said before any work
    zarr_output = files.is_zarr(args.output)
    out_kind = "zarr" if zarr_output else files.check_suffix(args.output, writing=True)
    if args.batch_size is not None:
        raise UsageError("--batch-size is for files; with a zarr store the work goes chunk by chunk (--chunks)")
    if args.output_key is not None:
        if zarr_output:
            raise UsageError("--output-key names the array of an .npz output; a zarr output store is one array")
        files.check_member_name(args.output, args.output_key)
    refuse_overwriting([args.input], args.output)
    _refuse_nested(args.input, args.output)
    if zarr_output:
        files.check_zarr_target(args.output)
    return out_kind


def _write(
    args: argparse.Namespace, out_kind: str, y: Any, channels_last: bool, input_key: str | None, progress: bool
) -> None:
    """``y`` computed into the output, which replaces any old one only once complete: chunk by
    chunk into a zarr store or a .npy file, whole into an .npz or an image."""
    import numpy as np

    from . import files

    commit = INTERRUPTS.committing(last=True)
    if out_kind == "zarr":
        with files.replacing_directory(args.output, commit=commit) as directory:
            _store(y, files.create_zarr(directory, y.shape, tuple(max(c[0], 1) for c in y.chunks), y.dtype), progress)
    elif out_kind == "npy":
        with files.replacing(args.output, commit=commit) as fp:
            target = files.npy_memmap(fp, y.shape, y.dtype)
            _store(y, target, progress)
            if isinstance(target, np.memmap):
                target.flush()
            del target
    else:
        result = np.empty(y.shape, y.dtype)
        _store(y, result, progress)
        if out_kind == "image" and channels_last and result.ndim == 4:
            result = result.transpose(0, 3, 1, 2)
        files.write_tensor(
            args.output, result, key=args.output_key or files.safe_member_name(input_key or "y"), commit=commit
        )


def _regular(y: Any) -> Any:
    """``y`` with chunks zarr can store: equal along each axis but the last one of it. The pooled
    chunks follow the input's, and windows near a chunk edge can shift a few outputs from one
    chunk to the next; then the largest chunk of each axis is used (as dask.array.to_zarr does)."""
    if all(len(set(c[:-1])) <= 1 and c[-1] <= c[0] for c in y.chunks):
        return y
    return y.rechunk(tuple(map(max, y.chunks)))


def _store(y: Any, target: Any, progress: bool) -> None:
    """Compute ``y`` chunk by chunk into ``target`` (a zarr array, a memory map, an array), with a
    progress bar on stderr if asked.

    The tasks run on a thread pool of our own, which is shut down before this returns, also on an
    error or Ctrl-C: dask's scheduler stops handing out tasks then, but those already running
    would go on writing chunks into a temporary store that is being removed."""
    import concurrent.futures

    import dask
    from dask.diagnostics import ProgressBar

    da, _ = _dask()
    stored = da.store(y, target, lock=False, compute=False)  # each chunk is its own region of the target
    pool = concurrent.futures.ThreadPoolExecutor(dask.config.get("num_workers", None) or dask.system.CPU_COUNT)
    try:
        with ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext():
            dask.compute(stored, scheduler="threads", pool=pool)
    except Exception as err:
        from . import files

        if _raised_by_the_store(err):  # a corrupt chunk file, a codec's error: the input's fault, one line
            raise files.FileFormatError(
                f"a chunk of the zarr store could not be read: {type(err).__name__}: {err}"
            ) from None
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _raised_by_the_store(err: BaseException) -> bool:
    """Whether ``err`` was raised inside zarr or its codecs (numcodecs), reading a chunk."""
    from ..errors import AvgPoolError
    from . import files

    if isinstance(err, (AvgPoolError, files.FileFormatError, OSError, MemoryError)):
        return False  # reported as they are
    frame = err.__traceback__
    while frame is not None:
        if frame.tb_frame.f_globals.get("__name__", "").partition(".")[0] in ("zarr", "numcodecs"):
            return True
        frame = frame.tb_next
    return False


def pool_chunked(args: argparse.Namespace, settings: Settings, stdout: TextIO) -> int:
    """``pool`` when the input or the output is a zarr store: a dask graph from the input's chunks
    to the output's, never the whole array in memory (but for an .npz or image output, which is
    written whole)."""
    da, avgpool_dask = _dask()
    out_kind = _output_kind(args)  # before any work
    x, key, read = _lazy_input(args, settings, da)
    y = _dask_pooled(args, settings, x, avgpool_dask)
    progress = args.progress or (not args.quiet and sys.stderr.isatty())
    started = time.perf_counter()
    if out_kind == "zarr":
        y = _regular(y)  # the chunks stored, and printed below
    _write(args, out_kind, y, settings.channels_last, key, progress)
    seconds = time.perf_counter() - started
    if not args.quiet:
        chunks = "x".join(str(max(c[0], 1)) for c in y.chunks)
        print(
            f"{args.input} {read} -> {dialect_label(args.dialect, settings)} "
            f"({settings.describe()}) -> {args.output} {'x'.join(map(str, y.shape))} {y.dtype} "
            f"(chunks {chunks}) in {seconds:.2f} s",
            file=stdout,
        )
    return 0
