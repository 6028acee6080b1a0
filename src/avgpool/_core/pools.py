"""A prepared pool: the kernel, its arguments and its threading for one input shape, called with
the data (:class:`PreparedPool`, the engine's one prepared-call type, float and quantized), made
from kernel tables by :func:`prepare_tables` (QLinearAveragePool's by :mod:`.quantized_pools`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels import columns
from ..kernels.arguments import SlabTables
from . import tuning, workers
from .outputs import out_target
from .spec import Layout
from .tables import KernelTables, RunningPlan, band_and_scratch

_NATIVE = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True, eq=False)
class PreparedPool:
    """Everything about one (operator, input shape, dtype, layout) that does not depend on the
    data. A float pool holds its kernel's arguments and is called with the data: that costs the
    kernel and a few checks. QLinearAveragePool's kernel arguments depend on the quantisation
    values too: :mod:`.quantized_pools` makes them per set of values from ``quantized`` and runs
    the pool with them through ``plan``."""

    out_shape: tuple[int, ...]
    dtype: np.dtype
    items: int  # the kernel's work items (slabs or parts of slabs, output rows, positions or planes)
    kernel: Callable[..., None] | None  # kernel(x, out, first item, stop item, *kernel_args); None: empty
    kernel_args: tuple  # () where they come with each call (QLinearAveragePool)
    pieces: int  # shared between threads when more than 1
    as_bits: bool  # float16/bfloat16 reach the kernel as their uint16 bit patterns
    # the input's shape and the shapes the kernel takes the input and output in (QLinearAveragePool's
    # kernels, some of them 2-D to 4-D); None: flat arrays
    views: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    quantized: Any = None  # QLinearAveragePool: what its kernel arguments are made from
    # the exact float32 kernel: the float64 pool of the items whose values it cannot sum exactly
    # (it marks them in a per-call array, its last argument)
    fallback: FloatFallback | None = None
    empty: bool = field(init=False)  # nothing to compute
    # the kernel's compiled entry for these arrays (flat: jit.flat_signature), called without
    # numba's dispatcher: no argument typing per call, and one specialisation for any input
    call: Callable[..., None] | None = field(init=False)
    # with views: what quantized_pools.run needs, in one tuple (each attribute lookup counts in a
    # 1-2 us call)
    plan: tuple = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "empty", self.items == 0 or math.prod(self.out_shape) == 0)
        if self.views is None and self.kernel is None:  # an empty output: nothing to call
            object.__setattr__(self, "call", None)
            object.__setattr__(self, "plan", ())
            return
        if self.views is None:
            from ..kernels import jit

            bits = np.dtype(np.uint16) if self.as_bits else self.dtype
            args = self.kernel_args if self.fallback is None else (*self.kernel_args, _NO_FAILURES)
            entry = jit.compiled(self.kernel, jit.flat_signature(bits, bits, args)).entry_point
            object.__setattr__(self, "call", entry)
            object.__setattr__(self, "plan", ())
            return
        in_shape, x_view, out_view = self.views
        x_how = 1 if len(x_view) == 1 else 2 if x_view != in_shape else 0  # as it is, ravel, reshape
        out_how = 0 if out_view == self.out_shape else 1 if len(out_view) == 1 else 2  # ... reshape after
        entry = None if self.kernel is None else _view_entry(self.kernel, self.dtype, x_view, out_view)
        object.__setattr__(self, "call", entry)
        object.__setattr__(
            self,
            "plan",
            (entry, self.items, self.pieces, x_view, out_view, self.out_shape, x_how, out_how, self.kernel, self.dtype),
        )

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        # a tiny pool costs about as much as this method, hence each flags object fetched once,
        # ravel (a view of a contiguous array) rather than reshape, and one test for a good out=
        if out is None:
            out = target = np.empty(self.out_shape, dtype=self.dtype)
        else:
            out_flags = out.flags if type(out) is np.ndarray else None
            if out_flags is None or out.shape != self.out_shape or out.dtype != self.dtype or not out_flags.writeable:
                # an ndarray subclass, or a wrong out (outputs.out_target raises, naming what is wrong)
                target, copy = out_target(out, x, self.out_shape, self.dtype)
                self(x, target)
                if copy:
                    out[...] = target
                return out
            # two arrays that each own their memory cannot overlap: the common case skips the
            # bounds test (it costs more than a tiny pool)
            separate = out.base is None and x.base is None and out is not x
            in_place = out_flags.c_contiguous and (separate or not np.may_share_memory(out, x))
            target = out if in_place else np.empty(self.out_shape, dtype=self.dtype)
        if self.empty:
            return out
        flat_x = x.ravel()  # a view of a C-contiguous array, else a C-ordered copy
        flat_out = target.ravel()
        if self.as_bits:
            flat_x, flat_out = flat_x.view(np.uint16), flat_out.view(np.uint16)
        args = self.kernel_args
        if self.fallback is not None:
            failed = np.zeros(self.items, np.uint8)
            args = (*args, failed)
        if self.pieces == 1:  # the common small call: no thread machinery in the way
            self.call(flat_x, flat_out, 0, self.items, *args)
        else:
            workers.run_pieces(self.kernel, flat_x, flat_out, self.items, self.pieces, args)
        if self.fallback is not None and failed.any():
            self.fallback(flat_x, flat_out, failed)
        if target is not out:
            out[...] = target
        return out


def _view_entry(kernel: Any, dtype: np.dtype, x_view: tuple[int, ...], out_view: tuple[int, ...]) -> Any:
    """The compiled entry point of ``kernel`` for C-contiguous arrays of ``dtype`` in these shapes
    and one int64 table (QLinearAveragePool's ``tab``): :func:`.kernels.crew.native_address`'s
    signature, which the helper threads run, so one machine code serves both. Called without
    numba's dispatcher: typing five arguments cost it ~0.2-0.5 us of every call (1x4x4x1 2x2:
    0.79 us through the dispatcher, 0.62 through the entry point). Kernels only read ``x``: a
    read-only input runs the same code."""
    from numba import typeof, types

    from ..kernels.jit import compiled, flat_signature

    tab = np.empty(0, np.int64)
    if len(x_view) == 1 and len(out_view) == 1:
        signature = flat_signature(dtype, dtype, (tab,))
    else:
        element = typeof(np.empty(0, dtype)).dtype
        signature = (
            types.Array(element, len(x_view), "C"),
            types.Array(element, len(out_view), "C"),
            types.int64,
            types.int64,
            typeof(tab),
        )
    return compiled(kernel, signature).entry_point


#: The type of the exact kernel's last argument (the items it left to :class:`FloatFallback`).
_NO_FAILURES = np.zeros(0, np.uint8)


@dataclass(frozen=True, eq=False)
class FloatFallback:
    """The float64 kernels of :mod:`..kernels.separable` for the items of an exact float32 pool
    whose values failed its check (NaN, Inf, too wide a range): compiled on the first call that
    needs them, so that a first call on ordinary values compiles only the exact kernels
    (benchmarks/compile_times.py, float32-exact). The items are pooled as the separable pool
    would pool them, whatever else is in the call: the same bits."""

    tables: SlabTables
    dtype: np.dtype
    pieces: int

    @functools.cached_property
    def _entry(self) -> tuple[Any, Any]:
        """The separable entry kernel for these tables and its compiled entry point: compiled
        (with each axis's pass) on the first call with failed items, then kept."""
        from ..kernels import jit, separable

        separable.set_pass_addresses(self.tables, self.dtype, self.dtype)
        entry = separable.entry_kernel(self.tables)
        return entry, jit.compiled(entry, jit.flat_signature(self.dtype, self.dtype, (self.tables,))).entry_point

    def __call__(self, x: np.ndarray, out: np.ndarray, failed: np.ndarray) -> None:
        entry, call = self._entry
        items = failed.shape[0]
        if self.pieces > 1 and failed.all():  # every item (NaN everywhere): shared as the pool is
            workers.run_pieces(entry, x, out, items, self.pieces, (self.tables,))
            return
        marked = np.flatnonzero(np.diff(failed, prepend=0, append=0))  # runs of failed items
        for lo, hi in zip(marked[::2], marked[1::2]):
            call(x, out, int(lo), int(hi), self.tables)


def prepare_tables(
    out_shape: tuple[int, ...],
    shape: tuple[int, ...],
    dtype: np.dtype,
    layout: Layout,
    t: KernelTables,
    running: RunningPlan | None,
) -> PreparedPool:
    """The kernel choice and threading for an input ``shape`` pooled by the tables ``t`` (and,
    float32 only, the exact running sums where a slab's values allow)."""
    from ..kernels import native, separable  # compiled lazily: importing avgpool stays fast

    slabs, channels = (shape[0] * shape[1], 1) if layout is Layout.NCX else (shape[0], shape[-1])
    tune = tuning.current()
    work = math.prod(shape)
    parts = _slab_parts(slabs, channels, work, dtype, t, running)
    items = slabs * parts
    pieces = workers.pieces_for(items, work, tune.parallel_min_elements, tune.many_pieces_elements)
    budget = tune.overlapping_group_scratch_bytes if t.windows_overlap else tune.group_scratch_bytes
    group = 1 if parts > 1 else max(1, min(-(-slabs // pieces), budget // (16 * max(1, t.scratch_size))))
    if dtype in _NATIVE:
        slab_tables = _slab_tables(t, group, channels, parts)
        if running is None:
            separable.set_pass_addresses(slab_tables, dtype, dtype)
            return PreparedPool(
                out_shape, dtype, items, separable.entry_kernel(slab_tables), (slab_tables,), pieces, False
            )
        from ..kernels import running as exact

        form = exact.exact_form(t.axes.shape[0], int(t.axes[0, columns.LENGTH]), running.passes)
        fallback = FloatFallback(slab_tables, dtype, pieces)
        return PreparedPool(
            out_shape, dtype, items, exact.exact_kernel(form), (slab_tables, running), pieces, False, fallback=fallback
        )
    # float16/bfloat16: widened to float32 in blocks of slabs inside the kernel, accumulated in
    # float64 and rounded once (numpy's casts of these types cost more than the pool); each block
    # is pooled on its own, so groups never span more than a block
    slab_in = max(1, math.prod(shape) // max(1, slabs))
    block = max(1, tune.widen_block_elements // slab_in)
    slab_tables = _slab_tables(t, min(group, block), channels, parts)
    separable.set_pass_addresses(slab_tables, np.float32, np.float64)
    family = native.address(
        separable.entry_kernel(slab_tables), separable.entry_signature(np.float32, np.float64, slab_tables)
    )
    args = (slab_tables, bool(dtype != np.float16), block, family)
    return PreparedPool(out_shape, dtype, items, separable.pool_slabs_16, args, pieces, True)


def _slab_parts(
    slabs: int, channels: int, work: int, dtype: np.dtype, t: KernelTables, running: RunningPlan | None
) -> int:
    """How many items each slab is cut into for threads to share: 1 (an item is a slab) unless
    there are fewer slabs than pieces, as in a channels-last batch of one (1x112x112x64 3x3 p1,
    one slab, ran on one thread at 1.4 times onnxruntime's time; ``benchmarks/bench.py``'s NHWC
    batch-1 rows). The separable passes with direct sums along the first axis cut a slab's
    first-axis outputs (float16/bfloat16: widening the input rows each part reads), and so do
    the exact running sums (each part checks the whole slab's values: one fixed point, the
    same bits; where a slab fails the check, the separable passes pool its part, hence the
    same condition) but along a 1-D channels-first line or a plane of one row; global windows
    over channels (NXC, float32/float64) cut their channels. Small planes are not cut."""
    axes = t.axes
    ncx_line = channels == 1 and (axes.shape[0] == 1 or axes[0, columns.LENGTH] == 1)
    if (
        axes[0, columns.PLANE_PAD] >= 0
        or (dtype not in _NATIVE and t.global_scale > 0)
        or (running is not None and ncx_line)
    ):
        return 1
    if t.global_scale > 0:
        most = channels if channels > 1 else 1  # one channel: one contiguous sum
    else:
        most = 1 if axes[0, columns.BLOCK] > 0 else int(axes[0, columns.OUTPUTS])
    tune = tuning.current()
    wanted = workers.pieces_for(slabs * most, work, tune.parallel_min_elements, tune.many_pieces_elements)
    return 1 if wanted <= max(1, slabs) else min(most, -(-wanted // slabs))


def _slab_tables(t: KernelTables, group: int, channels: int, parts: int) -> SlabTables:
    """The tables ``t`` as :func:`.kernels.separable.pool_slabs` takes them, ``group`` slabs at a
    time, each slab in ``parts`` items."""
    band, scratch_size = band_and_scratch(t, group)
    return SlabTables(
        group=group,
        band=band,
        axes=t.axes,
        firsts=t.firsts,
        counts=t.counts,
        splits=t.splits,
        scales=t.scales,
        channels=channels,
        scratch_size=scratch_size,
        global_scale=t.global_scale,
        plane_masks=t.plane_masks,
        plane_factors=t.plane_factors,
        plane_sums=t.plane_sums,
        parts=parts,
        passes=np.zeros(t.axes.shape[0], np.int64),
    )
