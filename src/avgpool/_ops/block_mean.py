"""Block means: the mean of each block of ``block`` values along every axis (stride = block), any
rank, numpy and dask arrays, missing values and integer pixels as the scientific stack has them.

>>> import numpy as np, avgpool
>>> image = np.array([[1, 2, 3, 4, 5], [5, 6, 7, 8, 9]], np.uint16)
>>> avgpool.block_mean(image, 2, boundary="trim")
array([[3.5, 5.5]])
>>> avgpool.block_mean(image, 2, boundary="pad")  # the partial block: the mean of the values present
array([[3.5, 5.5, 7. ]])
>>> avgpool.block_mean(image, 2, boundary="pad", dtype=np.uint16)  # rounded half to even, once
array([[4, 6, 7]], dtype=uint16)
>>> avgpool.block_mean(np.array([np.nan, 1.0, 2.0, 4.0]), 2, skipna=True)
array([1., 3.])

Every axis is an axis (no batch or channel convention). The sums of a block are taken in one fixed
order, one axis after the other and along each axis tap after tap, in float64 for float inputs and
in int64 for integer and bool inputs (int32 where a block's sum cannot leave it; no float copy
of the input is made): so a block's mean does
not depend on how the array is laid out, sliced or chunked, and a dask array gives the numpy
array's bits whatever its chunks. An integer block's mean is exact, rounded once to the output
dtype (float64 by default, numpy's ``mean``); a float block's is its float64 sum divided once
(docs/semantics.md 8).

The input is read in slabs along its first axis, so memory is the output and a few MiB of
partial sums, whatever the input's size.
"""

from __future__ import annotations

import itertools
import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.outputs import dtype_name
from ..errors import AvgPoolError, error_context
from ._args import check_missing_options, is_masked
from ._dtypes import FloatDtypes, as_dtype, bfloat16, is_bfloat16

LABEL = "block_mean"
BOUNDARIES = ("exact", "trim", "pad")
SIDES = ("left", "right")
FLOAT_DTYPES = FloatDtypes("float16", "float32", "float64", "bfloat16")
#: Integer inputs summed in int64: their sums fit whatever the block (int64 and uint64 inputs are
#: checked value by value, :func:`_integer_sums`).
_SMALL_INTEGERS = frozenset(
    np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)
)
_WIDE_INTEGERS = frozenset(np.dtype(t) for t in (np.int64, np.uint64))
#: Partial sums held at a time while a slab of the input is summed (bytes).
SLAB_BYTES = 8 << 20
_EXACT_IN_FLOAT64 = 1 << 53


def block_mean(
    x: Any,
    block: int | Sequence[int],
    *,
    boundary: str = "exact",
    side: str = "left",
    skipna: bool = False,
    min_count: int = 1,
    dtype: Any = None,
) -> Any:
    """The mean of each block of ``x``: ``block`` values along every axis (an int), or
    ``block[i]`` along axis ``i`` (1 leaves the axis alone).

    - ``boundary``: ``"exact"``, an axis whose length is not a multiple of its block is an error;
      ``"trim"``, the partial block is dropped; ``"pad"``, it is kept and averaged over the values
      present. ``side="left"``: blocks start at index 0 (the partial block is the last);
      ``"right"``: blocks end at the last index (the partial block is the first). As xarray's
      ``coarsen``.
    - ``skipna``: a NaN is not data: it is left out of the sum and of the count. A block with
      fewer than ``min_count`` values present is NaN. An infinity is data.
    - A numpy masked array's masked values are missing whatever ``skipna`` says; the result is a
      masked array whose mask marks the blocks with fewer than ``min_count`` values present
      (their data are NaN, or 0 for an integer ``dtype``).
    - ``dtype``: the output's, any float dtype, or the input's integer dtype (the exact mean
      rounded half to even). Default: the input's float dtype, float64 for integer and bool
      inputs.
    - A dask array gives a lazy dask array with the numpy result's bits, whatever its chunks.

    Raises :class:`avgpool.AvgPoolError` for any invalid argument.
    """
    with error_context(LABEL):
        lazy = _dask_array(x)
        masked = is_masked(x)
        if lazy is None and not masked:
            x = _as_array(x)
        shape, in_dtype = tuple(x.shape), np.dtype(x.dtype)
        blocks = blocks_per_axis(block, len(shape))
        check_choice("boundary", boundary, BOUNDARIES)
        check_choice("side", side, SIDES)
        check_missing_options(skipna, min_count)
        min_count = int(min_count)
        out_dtype = _out_dtype(in_dtype, dtype)
        cuts = [block_range(axis, n, k, boundary, side) for axis, (n, k) in enumerate(zip(shape, blocks))]
        if lazy is not None:
            return _dask_block_mean(lazy, blocks, cuts, bool(skipna), min_count, out_dtype, side, boundary == "pad")
        return _numpy_block_mean(x, blocks, cuts, bool(skipna), min_count, out_dtype, side, boundary == "pad")


# ------------------------------------------------------------------------------------------ checks


def _as_array(x: Any) -> np.ndarray:
    try:
        array = np.asarray(x)
    except Exception as err:  # noqa: BLE001 - any conversion failure is a bad input
        raise AvgPoolError(f"the input cannot be read as an array: {err}") from None
    _check_dtype(array.dtype)
    if array.ndim == 0:
        raise AvgPoolError("the input is a scalar (rank 0): it must have at least 1 dimension")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.newbyteorder("=") in FLOAT_DTYPES or dtype.kind in "biu":
        return
    name = "object" if dtype.kind == "O" else dtype_name(dtype)
    raise AvgPoolError(
        f"the input has dtype {name}: it must be a float (float16, float32, float64, bfloat16), "
        "an integer or a bool dtype"
    )


def blocks_per_axis(block: Any, ndim: int) -> tuple[int, ...]:
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (numbers.Integral, Sequence, np.ndarray)):
        raise AvgPoolError(f"`block` is {block!r}: it must be an int or a sequence of one int per axis")
    values = [block] * ndim if isinstance(block, numbers.Integral) else list(block)
    if len(values) != ndim:
        raise AvgPoolError(f"`block` has {len(values)} values {tuple(values)} but the input has {ndim} axes")
    for axis, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
            raise AvgPoolError(f"`block` is {value!r} along axis {axis}: it must be an integer >= 1")
    return tuple(int(v) for v in values)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise AvgPoolError(f"`{name}` is {value!r}: it must be one of {', '.join(map(repr, choices))}")


def _out_dtype(in_dtype: np.dtype, dtype: Any) -> np.dtype:
    native = in_dtype.newbyteorder("=")
    if dtype is None:
        return native if native in FLOAT_DTYPES else np.dtype(np.float64)
    try:
        wanted = as_dtype(dtype)
    except TypeError:
        raise AvgPoolError(f"`dtype` is {dtype!r}: it must be a float dtype or the input's integer dtype") from None
    if wanted in FLOAT_DTYPES or (wanted.kind == "f" and wanted.itemsize <= 8):
        return wanted
    if wanted == native and native.kind in "iu":
        return wanted
    raise AvgPoolError(
        f"`dtype` is {dtype_name(wanted)}: it must be a float dtype or the input's integer dtype ({dtype_name(native)})"
    )


def block_range(axis: int, length: int, k: int, boundary: str, side: str) -> tuple[int, int, int]:
    """``(start, stop, partial)`` along an axis: the input range its blocks cover, and the
    length of a partial block kept (``"pad"``) at the end (``side="left"``) or the start."""
    whole, rest = divmod(length, k)
    if rest == 0:
        return 0, length, 0
    if boundary == "exact":
        raise AvgPoolError(
            f"axis {axis} has length {length}, not a multiple of its block {k} (boundary='exact'): "
            "use boundary='trim' to drop the partial block or 'pad' to average the values present"
        )
    if boundary == "trim":
        return (0, whole * k, 0) if side == "left" else (rest, length, 0)
    return 0, length, rest


# ------------------------------------------------------------------------------------------ numpy


def _dask_array(x: Any) -> Any:
    module = sys.modules.get("dask.array")
    return x if module is not None and isinstance(x, module.Array) else None


def is_float(dtype: np.dtype) -> bool:
    return dtype in FLOAT_DTYPES or dtype.kind == "f"  # bfloat16's kind is "V"


def _numpy_block_mean(
    x: Any, blocks: tuple[int, ...], cuts: list, skipna: bool, min_count: int, out_dtype: np.dtype, side: str, pad: bool
) -> Any:
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, as the contract says
        return _block_means(x, blocks, cuts, skipna, min_count, out_dtype, side, pad)


def _block_means(
    x: Any, blocks: tuple[int, ...], cuts: list, skipna: bool, min_count: int, out_dtype: np.dtype, side: str, pad: bool
) -> Any:
    """The block means of ``x`` (``cuts``: :func:`block_range`'s per axis); with ``pad`` (boundary
    "pad") every block counts its values, a block of fewer than ``min_count`` being NaN."""
    mask = None
    if is_masked(x):
        mask = np.ma.getmaskarray(x)
        x = _as_array(np.ma.getdata(x))
    inside = tuple(slice(start, stop) for start, stop, _ in cuts)
    x = x[inside]
    if mask is not None:
        mask = mask[inside]
    if side == "right":  # blocks end at the last index: seen backwards, they start at 0
        backwards = (slice(None, None, -1),) * x.ndim
        x = x[backwards]
        mask = None if mask is None else mask[backwards]
    out_shape = tuple(-(-n // k) for n, k in zip(x.shape, blocks))
    floats = x.dtype in FLOAT_DTYPES
    if x.dtype in _WIDE_INTEGERS:
        _check_int64_sums(x, blocks)
    counted = mask is not None or skipna or pad
    result = np.empty(out_shape, out_dtype)
    few_all = np.zeros(out_shape, bool) if mask is not None else None
    for rows, out_rows in _slabs(x.shape, blocks, out_shape):
        part = x[rows]
        present = None if mask is None else ~mask[rows]
        if skipna and floats:
            not_nan = part == part  # one pass where ~np.isnan is two
            present = not_nan if present is None else present & not_nan
        if present is not None:
            part = np.where(present, part, np.zeros((), part.dtype))
        sums = _block_sums(part, blocks, np.float64 if floats else _integer_sum_dtype(x.dtype, blocks))
        counts = math.prod(blocks)
        few = None
        if counted:
            counts = (
                _block_sums(present, blocks, _count_dtype(math.prod(blocks)))
                if present is not None
                else _geometric_counts(part.shape, blocks)
            )
            few = counts < min_count
        means = _divide(sums, counts, out_dtype, floats)
        if few is not None:
            means[few] = np.nan if is_float(out_dtype) else 0
            if few_all is not None:
                few_all[out_rows] = few
        result[out_rows] = round_to(means, out_dtype) if is_float(out_dtype) else means
    if side == "right":
        result = result[(slice(None, None, -1),) * result.ndim]
        few_all = None if few_all is None else few_all[(slice(None, None, -1),) * few_all.ndim]
    result = np.ascontiguousarray(result)
    if mask is not None:
        return np.ma.MaskedArray(result, mask=np.ascontiguousarray(few_all))
    return result


def _check_int64_sums(x: np.ndarray, blocks: tuple[int, ...]) -> None:
    """int64 and uint64 inputs are summed in int64 too: refused where a block's sum could pass it."""
    if x.size == 0:
        return
    largest = max(abs(int(x.max())), abs(int(x.min())))
    if largest * math.prod(blocks) >= 2**63:
        raise AvgPoolError(
            f"the input ({dtype_name(x.dtype)}) holds {largest}, and a block of {math.prod(blocks)} such values "
            "sums past 2**63, which block_mean's exact int64 sums cannot hold: convert the input to float64 first"
        )


def _slabs(shape: tuple[int, ...], blocks: tuple[int, ...], out_shape: tuple[int, ...]):
    """(input index, output index) of the slabs summed at once: ranges of whole blocks along the
    first axis whose row of blocks takes at most :data:`SLAB_BYTES` of partial sums, each block
    of the axes before it on its own (a stack of 8 planes: slabs of rows of each plane)."""
    cut = len(shape) - 1
    for axis in range(len(shape)):
        if math.prod(shape[axis + 1 :]) * blocks[axis] * 8 <= SLAB_BYTES:
            cut = axis
            break
    row = max(1, math.prod(shape[cut + 1 :]) * blocks[cut] * 8)
    step = max(1, SLAB_BYTES // row)
    for lead in itertools.product(*(range(n) for n in out_shape[:cut])):
        take = tuple(slice(i * k, (i + 1) * k) for i, k in zip(lead, blocks))
        put = tuple(slice(i, i + 1) for i in lead)
        for first in range(0, out_shape[cut], step):
            last = min(out_shape[cut], first + step)
            yield take + (slice(first * blocks[cut], last * blocks[cut]),), put + (slice(first, last),)


def _block_sums(part: np.ndarray, blocks: tuple[int, ...], acc: Any) -> np.ndarray:
    """The sum of each block of ``part``, in ``acc``: the last axis first, then each axis before
    it; along an axis, tap 0 of every block, plus tap 1, ...: one fixed order, whatever the
    array's strides (a partial last block sums the taps it has)."""
    sums = part
    for axis in reversed(range(part.ndim)):
        k = blocks[axis]
        n = sums.shape[axis]
        out = -(-n // k)
        index = [slice(None)] * sums.ndim
        index[axis] = slice(0, out * k if n >= out * k else None, k)
        total = sums[tuple(index)].astype(acc, copy=True)
        for tap in range(1, k):
            index[axis] = slice(tap, None, k)
            taps = sums[tuple(index)]
            if taps.shape[axis] == out:
                total += taps
            else:  # the partial last block has no such tap
                lead = [slice(None)] * sums.ndim
                lead[axis] = slice(0, taps.shape[axis])
                total[tuple(lead)] += taps
        sums = total
    return sums


def _integer_sum_dtype(dtype: np.dtype, blocks: tuple[int, ...]) -> Any:
    """int32 where a block's sum of ``dtype`` values cannot leave it (a uint16 image in blocks of
    up to 32768 values: half the memory traffic of int64, the same exact sums), int64 otherwise."""
    if dtype.kind == "b":
        return np.int32 if math.prod(blocks) < 2**31 else np.int64
    info = np.iinfo(dtype)
    return np.int32 if max(abs(int(info.min)), int(info.max)) * math.prod(blocks) < 2**31 else np.int64


def _count_dtype(most: int) -> Any:
    """The narrowest integer that counts a block's values (less memory traffic than int64)."""
    return np.uint8 if most <= 255 else np.uint16 if most <= 65535 else np.int64


def _geometric_counts(shape: tuple[int, ...], blocks: tuple[int, ...]) -> np.ndarray:
    """The values of each block inside ``shape`` (a partial last block has fewer)."""
    counts = np.ones((), np.int64)
    for axis, (n, k) in enumerate(zip(shape, blocks)):
        along = np.full(-(-n // k), k, np.int64)
        if n % k:
            along[-1] = n % k
        counts = np.multiply.outer(counts, along) if axis else along
    return counts.reshape(tuple(-(-n // k) for n, k in zip(shape, blocks)))


def _divide(sums: np.ndarray, counts: Any, out_dtype: np.dtype, floats: bool) -> np.ndarray:
    """The means, in float64 (rounded once: an integer sum below 2**53 and its count are exact in
    float64, a float sum is the float64 sum), or as rounded integers for an integer ``out_dtype``."""
    counts = np.asarray(counts)
    safe = np.maximum(counts, 1)
    if out_dtype.kind in "iu":
        quotient, remainder = np.divmod(sums, safe)  # floor division: 0 <= remainder < count
        twice = 2 * remainder
        up = (twice > safe) | ((twice == safe) & (quotient % 2 == 1))
        return quotient + up
    if floats:
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums / safe
    if np.any(np.abs(sums) >= _EXACT_IN_FLOAT64):
        return _exact_quotients(sums, safe)
    return sums.astype(np.float64) / safe


def _exact_quotients(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``sums / counts`` rounded once to float64 where a sum is too large for float64 to hold it
    exactly (Python's int / int is correctly rounded)."""
    counts = np.broadcast_to(counts, sums.shape)
    flat = [int(s) / int(c) for s, c in zip(sums.ravel().tolist(), counts.ravel().tolist())]
    return np.array(flat, np.float64).reshape(sums.shape)


def round_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 means rounded once to ``dtype``: numpy's casts to float32 and float16 round to
    nearest even; bfloat16 goes through float32 rounded to odd, which then rounds to nearest
    even exactly as one rounding would (float32 has more than twice bfloat16's bits + 2)."""
    if dtype == np.float64:
        return values
    if not is_bfloat16(dtype):
        with np.errstate(over="ignore"):
            return values.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(np.float32)
        back = nearest.astype(np.float64)
        inexact = (back != values) & np.isfinite(values) & np.isfinite(nearest)
        bits = nearest.view(np.uint32).copy()
        away = inexact & (np.abs(back) > np.abs(values))
        bits[away] -= 1  # the truncation toward zero (sign and magnitude)
        bits[inexact] |= 1  # then odd: rounded to odd
        return bits.view(np.float32).astype(bfloat16())


# ------------------------------------------------------------------------------------------ dask


def _dask_block_mean(
    x: Any,
    blocks: tuple[int, ...],
    cuts: list,
    skipna: bool,
    min_count: int,
    out_dtype: np.dtype,
    side: str,
    pad: bool,
) -> Any:
    """The same computation chunk by chunk: the input trimmed, then rechunked so that every chunk
    holds whole blocks (a partial block only in the chunk at its end), each chunk's blocks
    averaged by :func:`_numpy_block_mean`: the same sums in the same order as the whole array's."""
    import dask.array as da

    _check_dtype(np.dtype(x.dtype))
    x = x[tuple(slice(start, stop) for start, stop, _ in cuts)]
    chunks = []
    for axis, (n, k, (_, _, partial)) in enumerate(zip(x.shape, blocks, cuts)):
        if math.isnan(n):
            raise AvgPoolError(f"axis {axis} has an unknown length (a dask array of unknown chunks): compute it first")
        wanted = max(k, (max(x.chunks[axis]) // k) * k)
        lead = partial if (partial and side == "right") else 0
        body = n - lead - (partial if side == "left" else 0)
        sizes = [lead] if lead else []
        sizes += [wanted] * (body // wanted) + ([body % wanted] if body % wanted else [])
        if partial and side == "left":
            if sizes:
                sizes[-1] += partial
            else:
                sizes = [partial]
        chunks.append(tuple(sizes) or (0,))
    x = x.rechunk(tuple(chunks))
    out_chunks = tuple(tuple(-(-c // k) for c in sizes) for sizes, k in zip(chunks, blocks))
    meta_dtype = out_dtype

    def chunk_mean(part: np.ndarray) -> Any:
        local = [block_range(axis, n, k, "pad", side) for axis, (n, k) in enumerate(zip(part.shape, blocks))]
        return _numpy_block_mean(part, blocks, local, skipna, min_count, out_dtype, side, pad)

    return da.map_blocks(chunk_mean, x, chunks=out_chunks, dtype=meta_dtype, name="avgpool-block-mean")
