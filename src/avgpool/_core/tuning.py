"""The measured crossovers and budgets the engines choose their paths by, in one frozen object.

The engines read :func:`current` when they prepare a pool (never at import, never per call), and
their caches of prepared pools are keyed by it, so that a pool prepared under one tuning is never
found under another. Tests and benchmarks change it with :func:`tuned`::

    with tuning.tuned(parallel_min_elements=1, many_pieces_elements=1):
        ...  # every call shared between threads, in the smallest pieces

Each field says why it has its value and which benchmark row (``python benchmarks/bench.py
--only NAME``) or test measures or exercises it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from . import memo


@dataclass(frozen=True)
class Tuning:
    """Every measured crossover and budget of the engines (field names as keyword arguments of
    :func:`tuned`); hashable, and part of the key of every cached preparation."""

    # --- threads (pools.prepare_tables, threads.pieces_for) ---
    #: Below this many input elements one thread is faster. A spinning helper joins a job within a
    #: microsecond, so sharing pays from a few microseconds of work: the small-plane model nodes
    #: (50K-113K elements) run in 0.55-0.65 of their serial time on two threads, 1x1024x6x6 7x7
    #: (37K) in 0.93, 1x544x7x7 7x7 (27K, a global sum) not faster. Re-measured by bench.py's
    #: node rows (1x1024x7x7, 1x576x14x14, 1x272x14x14 3x3, 1x512x14x14 2x2); tests/test_threads.py
    #: forces it to 1.
    parallel_min_elements: int = 1 << 15
    #: Below this many elements each thread takes one piece; above, more pieces leave less to wait
    #: for when a thread runs late (bench.py's large rows, e.g. 32x128x56x56; tests/test_threads.py).
    many_pieces_elements: int = 1 << 22
    #: Pieces per thread above many_pieces_elements: small enough that a thread scheduled late
    #: leaves little to wait for (bench.py's large rows).
    pieces_per_thread: int = 2

    # --- the separable float64 passes (pools.prepare_tables, tables.band_and_scratch) ---
    #: Bytes of a group's two float64 intermediates where windows do not overlap (each input value
    #: read once): bigger than the caches is faster, long sequential sweeps (1x128x56x56 serial
    #: 2x2 s2 and 32x128x56x56 faster at 8 MiB than at 256 KiB-2 MiB). Re-measured by bench.py's
    #: 2x2 s2 rows and 8x64x16000 k4 s4; tests/test_properties.py test_group_budgets.
    group_scratch_bytes: int = 1 << 23
    #: The same where windows overlap: a value is read several times and sums of more than three
    #: taps sweep the accumulator several times, so the intermediates must stay in the L2 cache
    #: (1 MiB per core here) with their input; 512 KiB beat 2 MiB and 256 KiB (bench.py's
    #: 32x192x28x28 3x3 and 1x16x256x256 k5/k11 float64 rows).
    overlapping_group_scratch_bytes: int = 1 << 19
    #: Channels-last planes of at least this many channels whose windows allow it run both passes
    #: fused (tables.fuses_passes): the fused loops run over the channels, too short below.
    fused_min_channels: int = 16
    #: A slab whose intermediates exceed the group budget alone is pooled in bands of first-axis
    #: outputs whose two buffers take about this much cache (tests/test_properties.py in_bands).
    band_scratch_bytes: int = 1 << 18
    #: float16/bfloat16 are widened to float32 this many elements at a time (numba has no 16-bit
    #: floats), so that the widened block stays in cache (bench.py's float16 rows).
    widen_block_elements: int = 1 << 16
    #: From this many taps along an axis of rows (more than one value per position) a pass sums
    #: from block partial sums (flat in k): 1x16x256x256 k x 1 threaded, direct 748 us against
    #: block 615 at k 13, direct cheaper at k 11; 1x16x512x512 k13 4.40 ms against 3.71.
    #: Re-measured by bench.py's 1x16x256x256 kernel rows ("--only kernel").
    block_sums_min_kernel: int = 13
    #: The same along a contiguous axis, where the block sums need transposed tiles (1 x k serial:
    #: direct 3085 us against block 2679 at k 25, alike below). bench.py's 1 x k kernel rows.
    contiguous_block_sums_min_kernel: int = 25
    #: NCX planes of at most this many values go by kernels/small_planes.py's masks (3 x 3 "same"
    #: windows at stride 1, rows narrower than flat_plane_min_width), where the separable passes'
    #: short rows cost more (serial, this kernel against the separable passes): 3x3 p1 1x1024x7x7
    #: by the masks 38 us against 59. Re-measured by bench.py's 1x1024x7x7 node row;
    #: tests/test_small_planes.py turns it off with 0.
    small_plane_values: int = 196
    #: NCX planes at stride 2 with rows of at most 16 values (windows of 2 or 3 taps) go by
    #: kernels/small_planes.py's stride-2 rows when a row has at least this many outputs: an
    #: output row costs them the same whatever its width, the separable passes less when short
    #: (AMD EPYC, AVX2, serial, time of the stride-2 rows / the separable passes' in planes of 16K
    #: values: 2x2 s2 4x4 1.5, 6x6 0.95-1.05, 7x7 0.8, 8x8 1.05-1.3, 14x14 0.75-0.8, 16x16 0.9,
    #: 14x7 0.65; 3x3 s2 p1 3x3 1.15, 4x4 1.0, 6x6 0.65, 8x8 0.75-0.85, 14x14 0.55, 16x16 0.65).
    #: Re-measured by bench.py's node rows (1x272x14x14 3x3 s2, 1x512x14x14 2x2);
    #: tests/test_small_planes.py turns them off with 9.
    stride_two_min_columns: int = 3
    #: ... in planes of at most this many values: a plane is one thread's work (threads split the
    #: planes, not a plane), so a few tall planes keep the separable passes, which cut them
    #: (64x16 3x3 s2 p1, 1024 values, serial: 0.63 of the separable passes' time).
    stride_two_max_values: int = 1024
    #: Planes of 3 x 3 (or 1) "same" windows at stride 1 whose rows have at least this many values
    #: go by kernels/small_planes.py's flat loops (a loop per plane, the edge windows summed again
    #: apart), narrower ones of at most small_plane_values values by its masks (serial, masks
    #: against flat: 1x4000x5x5 62 us against 74, 1x2000x7x7 59 against 56, 1x1024x7x7 33 against
    #: 28.5, 1x1000x10x10 59 against 44.5, 1x576x14x14 70 against 49). Re-measured by bench.py's
    #: 1x1024x7x7 and 1x576x14x14 node rows; tests/test_small_planes.py.
    flat_plane_min_width: int = 7
    #: ... and at most this many values (a plane's float64 sums, 512 KiB, in the L2 cache), where
    #: the separable passes take longer (serial, flat against separable: 1x256x28x28 79 us against
    #: 106, 1x64x56x56 82 against 94, 1x16x112x112 81 against 88, 1x4x256x256 106 against 123).
    #: Re-measured by bench.py's inception_v2 node 1 and 2 rows (28 x 28).
    flat_plane_values: int = 1 << 16
    #: Values of the planes kernels/small_planes.py pools together (whole planes, at least one):
    #: the block's masks and scales (18 bytes a value) and its float64 sums (8) stay in the L1
    #: cache; 512 to 2048 measured alike (bench.py's 1x1024x7x7 node rows).
    small_plane_block_values: int = 1024

    # --- float32's exact int64 running sums (tables.running_plan, running_boxes) ---
    #: From this many taps along some axis float32 windows are summed exactly in int64 running sums
    #: (kernels/running.py), whose cost is the same for every kernel size (bench.py's float32
    #: kernel rows, k3 to k31; tests/test_properties.py exact_from lowers it). 1x16x256x256 on an
    #: AMD EPYC (AVX2), two threads, two runs: 0.98-1.0 ms by the running sums at every kernel,
    #: by the float64 passes 0.50-0.53 at k3, 1.05-1.07 at k5, 1.46-1.50 at k7.
    exact_running_min_kernel: int = 5
    #: Input bytes checked and then pooled together on that path: within the L2 cache, so the sums
    #: read what the check has just read (a whole 2 MiB piece cost 5-10% more).
    exact_group_bytes: int = 1 << 18
    #: The running sums of a slab (one row of the later axes per level, int64) over this many bytes
    #: are swept in boxes of the later axes' outputs whose rows take at most this much (the same
    #: integer sums): 1x2x131072x64 NXC k5 in 0.15 of one sweep's time, 1x64x8192x64 0.95; 1 MiB
    #: and 256 KiB cut more and cost up to 1.2 and 1.4 times one sweep (tests/test_running_boxes.py).
    exact_held_bytes: int = 1 << 22
    #: A box keeps at least this many outputs along each axis it cuts, where it can (by cutting
    #: the channels instead): each box reads again the input its windows share with the next
    #: (1x32x256x64x64 NXC k5: two axes cut to 40 outputs 1.16 times one sweep, one cut to 26 0.97;
    #: tests/test_running_boxes.py).
    exact_box_min_outputs: int = 16

    # --- tiles (engine.prepare -> avgpool._core.tiles) ---
    #: An axis with more outputs than this is pooled in tiles of tile_outputs outputs (the same
    #: bits): the window tables take 48 bytes per output along each axis, with plans and
    #: temporaries 200 (3.4 GiB over a 1 x 1 x 32M input and its output); tiled, 1x1x16M k2 s2
    #: took 0.15 s against 1.1 s for the tables alone (tests/test_memory_bounds.py,
    #: tests/test_tiles.py small_tiles).
    long_axis_outputs: int = 1 << 18
    #: Outputs per tile along each axis of such an input.
    tile_outputs: int = 1 << 16

    # --- Dask graphs (avgpool.dask) ---
    #: Tiles reading fewer input values than this are pooled from their pieces put together: below,
    #: the edge strips' extra pool calls cost more than the copy they save (1x2x1024x1024 in 256 x
    #: 256 chunks, SAME 3x3: 0.046 s split, 0.039 together; 2048 x 2048 chunks gain from the split).
    #: Re-measured by benchmarks/bench_dask.py; tests/test_dask.py sets 0 to split every tile.
    dask_split_min_elements: int = 1 << 20
    #: Bytes of input chunks the threads may read ahead while a worker loads the kernels (dask._cut):
    #: unbounded, the 6 GiB job of benchmarks/out_of_core.py peaked at 1.02 GB of RSS, bounded 0.62-0.66.
    #: tests/test_dask.py sets 0: every chunk read waits for the kernels, and nothing deadlocks.
    dask_read_ahead_bytes: int = 256 << 20

    # --- QLinearAveragePool (quantized_pools) ---
    #: Channels last, general path: below this many operations (input reads plus tap additions) a
    #: call runs on one thread. A shared call costs ~2.5 us more than a serial one (threads.run_pieces
    #: and the job board: 1x4x4x16 2x2 s2 0.58 us serial, 2.93 shared) and the kernel runs ~18
    #: operations per ns (13 to 23), so sharing pays from ~150K (serial vs shared, fastest of 21
    #: batches: 1x7x7x256 3x3 p1, 102K, 5.95 vs 6.34 us; 1x14x14x272 3x3 s2 p1, 158K, 8.88 vs 8.67;
    #: 1x14x14x512 2x2 s2, 196K, 8.53 vs 7.62; 1x7x7x512 3x3 p1, 205K, 10.4 vs 9.1; 1x7x7x1024 3x3
    #: p1, 410K, 24.0 vs 19.7; 1x28x28x256 2x2 s2, 392K, 16.7 vs 11.3).
    #: Re-measured by bench_qlinear.py's NHWC node rows; tests/test_qlinear.py forces it to 1.
    qlinear_parallel_work: int = 1 << 17
    #: The integer global path channels last (int16 sums across channels, ~40 elements per ns)
    #: below this many input elements (1x13x13x1000, 169K elements, ~4 us serial, stays serial).
    qlinear_global_parallel_work: int = 1 << 19
    #: The same channels first, one int32 sum per plane: planes of a few dozen values leave LLVM's
    #: 64-wide vector loop mostly to its scalar remainder (~10-17 elements per ns), so two threads
    #: pay from ~64K elements (serial vs shared, medians: 1x1024x7x7, 50K, 4.8 vs 5.9 us;
    #: 1x2048x7x7, 100K, 8.1 vs 5.8; 1x1000x13x13, 169K, 10.2 vs 8.6). bench_qlinear.py's NCHW
    #: global rows; tests/test_qlinear*.py force it to 1.
    qlinear_global_ncx_parallel_work: int = 1 << 16
    #: The same for the channels-first general path, whose operations cost more (a window's taps
    #: are a chain of dependent float32 additions in onnxruntime's order): there two threads
    #: already pay from ~70K operations (serial vs threaded, medians: 1x1024x6x6 7x7 pads
    #: [0,0,1,1] 69 vs 43 us, 1x272x14x14 3x3 s2 105 vs 58, 1x1024x7x7 3x3 p1 371 vs 191).
    #: Re-measured by bench_qlinear.py's NCHW node rows.
    qlinear_ncx_parallel_work: int = 1 << 16
    #: Channels first, input rows (the last axis) of at most this many values go through the
    #: channels-last kernel, a block of planes transposed at a time
    #: (kernels.qlinear_kernels.pool_ncx_through_nxc), when there are at least
    #: ``qlinear_ncx_through_nxc_min_channels`` channels (the channels-last loops' length) and
    #: the windows are not the ones pool_ncx sums ``PLANES`` planes at a time. Its loops along
    #: a short row are mostly set-up; the transposes cost ~0.5 ns a byte. uint8, two threads,
    #: pool_ncx against through pool_nxc (us): 1x1024x7x7 3x3 p1 388 / 67, 1x576x14x14 3x3 p1
    #: 551 / 106, 1x272x14x14 3x3 s2 p1 126 / 42, 1x512x14x14 2x2 s2 123 / 55, 1x192x28x28 3x3
    #: p1 544 / 199, 1x136x28x28 3x3 s2 p1 130 / 73, 1x256x28x28 2x2 s2 131 / 96; rows of 56:
    #: 1x24x56x56 3x3 s2 p1 51 / 92, 1x128x56x56 2x2 s2 131 / 197. 0: never.
    qlinear_ncx_through_nxc_max_width: int = 32
    qlinear_ncx_through_nxc_min_channels: int = 16
    #: Below this many operations each thread takes one piece (threads.pieces_for).
    qlinear_many_pieces_work: int = 1 << 23
    #: Channels last: input rows are dequantized once into a float32 ring, not at each tap, when
    #: the windows take at least this many taps per input value (1x56x56x16 3x3 s1 serial: 29 us
    #: with the ring, 43 without; 1x56x56x128 2x2 s2, one tap per value: 49 with, 36 without) ...
    dequant_reuse: int = 2
    #: ... and a row holds at least this many values (W * C): below, the ring's upkeep costs more
    #: than it saves (1x14x14x8 3x3 s1: 3.7 us with it, 3.4 without). bench_qlinear.py's NHWC rows;
    #: tests/test_qlinear.py forces either source.
    dequant_row: int = 128

    # --- memory bounds (not crossovers: what a process may hold) ---
    #: An .npy input file of at least this many bytes is memory-mapped by the CLI (cli.files
    #: read_npy), so that pooling it in batches keeps memory proportional to a batch, not the file
    #: (tests/test_cli.py lowers it to map a small file).
    mmap_input_bytes: int = 16 << 20
    #: The most bytes of arrays (window tables) the helper threads keep registered pools' arguments
    #: alive with (threads.Crew): a long 1-D line's tables take many times its output. A pool larger
    #: than this alone is forgotten after its job (tests/test_threads.py sets 1).
    helper_pool_bytes: int = 1 << 25

    def __post_init__(self) -> None:
        # the caches of prepared pools hash it with every lookup: once here, not per lookup
        object.__setattr__(self, "_hash", hash(dataclasses.astuple(self)))

    def __hash__(self) -> int:
        return self._hash


DEFAULT = Tuning()

_ACTIVE: contextvars.ContextVar[Tuning] = contextvars.ContextVar("avgpool_tuning", default=DEFAULT)

#: The tuning in effect in this context (thread, task): what a pool prepared now is prepared by.
current = _ACTIVE.get


@contextlib.contextmanager
def using(tuning: Tuning) -> Iterator[Tuning]:
    """Make ``tuning`` current in this context, nothing else: for work prepared later on behalf
    of a pool prepared under it (tiles prepared as they are first pooled, maybe in another
    thread). Remembered calls are not cleared: use :func:`tuned` to change the tuning."""
    token = _ACTIVE.set(tuning)
    try:
        yield tuning
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def tuned(**changes: int | float) -> Iterator[Tuning]:
    """The current tuning with ``changes`` (field names of :class:`Tuning`) in effect within the
    block, in this context. The engines' caches are keyed by the tuning, but calls remembered by
    their arguments alone (an AveragePool's shapes, average_pool's calls) are not: they are
    forgotten on the way in and out (:func:`.memo.clear_all`)."""
    tuning = dataclasses.replace(current(), **changes)
    memo.clear_all()
    try:
        with using(tuning):
            yield tuning
    finally:
        memo.clear_all()
