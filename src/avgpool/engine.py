"""Run a canonical spec on an array: plan, kernel, output.

The only place that joins the plan to a kernel; dialects call this and nothing below it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .inputs import check_out
from .plan import make_plan
from .shape import infer_output_shape, spatial_shape_of
from .spec import Layout, PoolSpec

# Below this many input elements one thread is faster: a numba prange launch alone costs 2-6 us.
PARALLEL_MIN_ELEMENTS = 1 << 16
# float16/bfloat16 are widened to float32 this many elements at a time (numba has no float16).
WIDEN_BLOCK_ELEMENTS = 1 << 18
# A pass sums from block partial sums (cost flat in k) when direct summation would cost more.
BLOCK_SUMS_MIN_KERNEL = 5

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True, eq=False)
class KernelTables:
    """The plan of every axis, concatenated into the flat arrays the compiled kernel takes."""

    lengths: np.ndarray
    outs: np.ndarray
    offsets: np.ndarray
    firsts: np.ndarray
    counts: np.ndarray
    divisors: np.ndarray
    dilations: np.ndarray
    blocks: np.ndarray
    scratch_size: int


@functools.lru_cache(maxsize=512)
def kernel_tables(spec: PoolSpec, spatial_shape: tuple[int, ...], channels: int) -> KernelTables:
    """Cached per (spec, shape): repeated calls on the same node shape pay only the kernel."""
    plans = make_plan(spec, spatial_shape)
    lengths = [p.geometry.length for p in plans]
    outs = [p.geometry.out for p in plans]
    scratch = channels
    blocks = []
    for axis, p in enumerate(plans):
        inner = channels * math.prod(lengths[axis + 1:])
        outer = math.prod(outs[:axis])
        scratch = max(scratch, outer * outs[axis] * inner, lengths[axis] * inner)
        direct_cost = int(p.count.sum())
        use_blocks = p.geometry.kernel >= BLOCK_SUMS_MIN_KERNEL and direct_cost > 3 * lengths[axis]
        blocks.append(p.geometry.kernel if use_blocks else 0)
    as_int = functools.partial(np.asarray, dtype=np.int64)
    return KernelTables(
        lengths=as_int(lengths), outs=as_int(outs), offsets=as_int(np.cumsum([0] + outs)),
        firsts=as_int(np.concatenate([p.first for p in plans])), counts=as_int(np.concatenate([p.count for p in plans])),
        divisors=np.concatenate([p.divisor for p in plans]).astype(np.float64),
        dilations=as_int([p.geometry.dilation for p in plans]), blocks=as_int(blocks), scratch_size=scratch)


def _run_kernel(x2: np.ndarray, out2: np.ndarray, tables: KernelTables, channels: int) -> None:
    from .kernels import separable  # compiled lazily: importing avgpool stays fast

    t = tables
    args = (t.lengths, t.outs, t.offsets, t.firsts, t.counts, t.divisors, t.dilations, t.blocks, channels,
            t.scratch_size)
    if x2.size >= PARALLEL_MIN_ELEMENTS and x2.shape[0] > 1:
        import numba

        chunks = min(x2.shape[0], 4 * numba.get_num_threads())
        separable.pool_parallel(x2, out2, *args, chunks)
    else:
        separable.pool_serial(x2, out2, *args)


def pool(x: np.ndarray, spec: PoolSpec, layout: Layout, out: np.ndarray | None = None) -> np.ndarray:
    """Average-pool a validated float array (native byte order, any strides) with ``spec``."""
    shape = infer_output_shape(spec, x.shape, layout)
    if out is None:
        out = np.empty(shape, dtype=x.dtype)
    else:
        check_out(out, shape, x.dtype)
    if out.size == 0:
        return out
    spatial = spatial_shape_of(x.shape, layout)
    slabs, channels = (x.shape[0] * x.shape[1], 1) if layout is Layout.NCX else (x.shape[0], x.shape[-1])
    tables = kernel_tables(spec, spatial, channels)
    x2 = np.ascontiguousarray(x).reshape(slabs, -1)
    writable_in_place = out.flags.c_contiguous and not np.shares_memory(out, x)
    target = out if writable_in_place else np.empty(shape, dtype=x.dtype)
    out2 = target.reshape(slabs, -1)
    if x.dtype in _NATIVE:
        _run_kernel(x2, out2, tables, channels)
    else:
        # widen float16/bfloat16 to float32 in blocks, accumulate in float64, round once
        step = max(1, WIDEN_BLOCK_ELEMENTS // max(1, x2.shape[1]))
        for start in range(0, slabs, step):
            wide_out = np.empty((min(step, slabs - start), out2.shape[1]), np.float64)
            _run_kernel(x2[start:start + step].astype(np.float32), wide_out, tables, channels)
            out2[start:start + step] = wide_out.astype(x.dtype)
    if target is not out:
        out[...] = target
    return out
