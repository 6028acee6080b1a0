"""Checks on the output every operator shares: ``out=`` (:func:`out_target`) and an output too large
for any memory (:func:`check_output_fits`)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..errors import AvgPoolError


def dtype_name(dtype: np.dtype) -> str:
    """A dtype as users write it (``bfloat16``, ``float32``), without the byte-order mark."""
    return np.dtype(dtype).newbyteorder("=").name


def check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``out=`` must be a writeable array of exactly the output's shape and dtype."""
    if type(out) is np.ndarray and out.shape == shape and out.dtype == dtype and out.flags.writeable:
        return out  # the common case in one test
    if not isinstance(out, np.ndarray):
        raise AvgPoolError(f"`out` must be a numpy array, got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise AvgPoolError(f"`out` has shape {out.shape} but the output has shape {tuple(shape)}")
    if out.dtype != dtype:
        raise AvgPoolError(f"`out` has dtype {out.dtype} but the output has the input's dtype {dtype_name(dtype)}")
    if not out.flags.writeable:
        raise AvgPoolError("`out` is read-only")
    return out


def out_target(out: Any, x: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, bool]:
    """Where a kernel writes a result meant for ``out=`` (checked by :func:`check_out`): ``out``
    itself, or a plain view of an ndarray subclass's memory (an ``np.memmap``, ``open_memmap``'s
    result: the kernels take plain arrays), or a new array where that is not C-contiguous or
    shares memory with the input ``x`` (pooling in place); and whether the result must then be
    copied into ``out``."""
    check_out(out, shape, dtype)
    plain = out if type(out) is np.ndarray else out.view(np.ndarray)
    if plain.flags.c_contiguous and not np.may_share_memory(plain, x):
        return plain, False
    return np.empty(shape, dtype), True


def _memory_limit() -> int | None:
    """The memory this process may use, in bytes: the machine's, or less where an address-space
    limit (``ulimit -v``) or a cgroup (a container's memory limit) says so; None where the system
    does not say. Beyond it numpy's allocation would fail with a bare MemoryError."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append(soft)
    except (ImportError, OSError, ValueError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as file:
                text = file.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max", or cgroup v1's "no limit" (~2**63)
            limits.append(int(text))
        break
    return min(limits) if limits else None


def _size_text(size: float) -> str:
    unit = "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{int(size)} bytes" if unit == "bytes" else f"{size:.3g} {unit}"


#: An output may take up to this many times its input's bytes even past the machine's memory (a
#: memory-mapped input and ``out=``), but no more: only padding far larger than the input gives
#: more, and such windows are all padding.
OUTPUT_TO_INPUT_BYTES = 4


def check_output_fits(
    out_shape: tuple[int, ...],
    dtype: np.dtype,
    in_shape: tuple[int, ...],
    *,
    table_bytes: int = 24,
    check: str = "`kernel_shape` and the pads",
) -> None:
    """Refuse, before any table is built, an output that with its window tables (a few int64s per
    output along each axis) takes more bytes than this process may use (:func:`_memory_limit`) and than
    :data:`OUTPUT_TO_INPUT_BYTES` times the input: kernel sizes and pads in the billions, whose
    tables took tens of GB and minutes to build before failing (a Dask graph of such an output
    never finished building). An input beyond memory (memory-mapped, or a Dask array) may have an
    output beyond memory too. ``table_bytes``: the tables' bytes per output along each axis
    (adaptive windows are Python tuples first, about 200); ``check``: what the message says to check."""
    itemsize = np.dtype(dtype).itemsize
    out_bytes = math.prod(out_shape) * itemsize
    # the window tables: at most three int64s per output along each axis (none for an empty output)
    needed = out_bytes + table_bytes * sum(out_shape) if out_bytes else 0
    memory = _memory_limit() or 0
    limit = max(memory, OUTPUT_TO_INPUT_BYTES * math.prod(in_shape) * itemsize)
    if not out_bytes and math.prod(n for n in out_shape if n) * itemsize > np.iinfo(np.intp).max:
        # numpy refuses such a shape even with an axis of 0, with a ValueError of its own
        raise AvgPoolError(
            f"the attributes give an empty output of shape {'x'.join(map(str, out_shape))}, which numpy cannot make "
            f"(its other lengths hold more than {np.iinfo(np.intp).max} bytes of {dtype_name(dtype)}): "
            f"check {check}"
        )
    if limit and needed > limit:
        raise AvgPoolError(
            f"the attributes give an output of shape {'x'.join(map(str, out_shape))} ({_size_text(out_bytes)} of "
            f"{dtype_name(dtype)} and {_size_text(needed - out_bytes)} of window tables), more than the memory "
            f"this process may use ({_size_text(memory)}) and {OUTPUT_TO_INPUT_BYTES} times the input: an output "
            f"must fit in memory, and only pads far beyond the input give more (check {check})"
        )
