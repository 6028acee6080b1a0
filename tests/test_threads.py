"""Work sharing (avgpool._core.workers and its compiled job board): every item computed exactly once,
by whichever thread, failures raised in the caller, several callers at once, and the engine's
threaded path equal to its serial one."""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import pytest
from helpers import FLOAT_DTYPES
from hypothesis import given, note, settings
from hypothesis import strategies as st
from numba import njit
from test_properties import configurations, edge_arrays

import avgpool
from avgpool._core import tuning
from avgpool._core import workers as threads
from avgpool.kernels import crew as crew_board

pytestmark = pytest.mark.skipif(threads.thread_count() < 2, reason="needs numba threads >= 2")


@njit(nogil=True)
def _count_items(x, out, lo, hi, weight):
    for i in range(lo, hi):
        out[i] += x[i] * weight[0]


@njit(nogil=True)
def _fail_in_piece(x, out, lo, hi, bad):
    for i in range(lo, hi):
        if i == bad[0]:
            raise IndexError("item out of range")
        out[i] = x[i]


def test_every_item_once_over_many_jobs():
    """Jobs back to back (the helpers spinning) and after pauses (the helpers asleep): each item
    of each job is added exactly once, whichever thread took its piece."""
    x = np.arange(1, 10_001, dtype=np.float64)
    weight = np.ones(1)
    crew = threads._crew()
    assert crew is not None, "the helper threads did not start"
    posted = int(crew.board[crew_board.CLAIM]) >> 20  # jobs posted on the board so far
    for pieces in (2, 3, 8, 64):
        out = np.zeros_like(x)
        for _ in range(50):
            threads.run_pieces(_count_items, x, out, x.size, pieces, (weight,))
        assert np.array_equal(out, 50 * x), pieces
    assert (int(crew.board[crew_board.CLAIM]) >> 20) - posted == 200, "jobs did not go through the job board"


needs_two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs CPU affinity and two CPUs"
)


@needs_two_cpus
def test_helpers_are_not_pinned_and_a_pinned_caller_gets_every_job_done():
    """Helpers keep the process's CPUs: pinned to one, a helper shared it with other runtimes'
    worker threads and the OS could not move it (threads.py). A caller a user pinned to one CPU
    still has every item of every job counted."""
    x = np.arange(1, 20_001, dtype=np.float64)
    weight = np.ones(1)
    out = np.zeros_like(x)
    threads.run_pieces(_count_items, x, out, x.size, 2, (weight,))  # the helpers are up
    allowed = os.sched_getaffinity(0)
    assert all(os.sched_getaffinity(h.native_id) == allowed for h in threads._crew().helpers)
    caller = threading.get_native_id()
    try:
        os.sched_setaffinity(caller, {min(allowed)})
        for _ in range(300):
            threads.run_pieces(_count_items, x, out, x.size, 8, (weight,))
    finally:
        os.sched_setaffinity(caller, allowed)
    assert np.array_equal(out, 301 * x)


@needs_two_cpus
def test_a_helper_steps_off_a_cpu_and_keeps_its_cpu_set():
    """A helper that finds itself on its caller's CPU (Linux wakes a thread on its waker's) moves
    off it at once, its CPU set restored after (a nudge, not a pin: threads.py); a thread that
    may run on that CPU alone stays there."""
    try:
        getcpu = ctypes.CDLL(None).sched_getcpu
    except AttributeError:
        pytest.skip("no sched_getcpu")
    allowed = os.sched_getaffinity(0)
    seen = {}

    def helper():
        for _ in range(3):  # the system may move it back before getcpu() is read, if rarely
            here = getcpu()
            crew_board._step_off(here, np.zeros(crew_board.SCRATCH_WORDS, np.uint64))
            seen["moved"] = (here, getcpu())
            seen["cpu set"] = os.sched_getaffinity(0)
            if seen["moved"][0] != seen["moved"][1]:
                break
        os.sched_setaffinity(0, {here})
        crew_board._step_off(here, np.zeros(crew_board.SCRATCH_WORDS, np.uint64))
        seen["pinned"] = (here, getcpu())
        seen["pinned set"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=helper)
    thread.start()
    thread.join()
    before, after = seen["moved"]
    assert after != before, "the thread stayed on the CPU it was to leave"
    assert seen["cpu set"] == allowed
    assert seen["pinned"][0] == seen["pinned"][1] and seen["pinned set"] == {seen["pinned"][0]}


@needs_two_cpus
def test_a_process_allowed_one_cpu_pools_alone():
    """A pool prepared where the caller and the helpers may run on one CPU only (taskset, a
    container's CPU set) runs on the caller's thread: helpers would only take turns with it. A
    caller pinned to one CPU whose helpers may run elsewhere still shares."""
    x, out, weight = np.ones(100), np.zeros(100), np.ones(1)
    threads.run_pieces(_count_items, x, out, x.size, 2, (weight,))  # the helpers are up
    allowed = os.sched_getaffinity(0)
    both = (0, *(h.native_id for h in threads._crew().helpers))
    sharing = min(threads.thread_count(), len(allowed))
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert threads.pieces_for(1000, 1 << 30, 1, 1 << 40) == sharing
        for thread in both:
            os.sched_setaffinity(thread, {min(allowed)})
        assert threads.pieces_for(1000, 1 << 30, 1, 1 << 40) == 1
    finally:
        for thread in both:
            os.sched_setaffinity(thread, allowed)
    assert threads.pieces_for(1000, 1 << 30, 1, 1 << 40) == sharing


def test_jobs_of_different_pools_alternate():
    """Helpers switch between kernels, shapes and arguments without mixing them up."""
    a, b = np.arange(1000.0), np.arange(5000.0)
    wa, wb = np.full(1, 2.0), np.full(1, 3.0)
    out_a, out_b = np.zeros_like(a), np.zeros_like(b)
    for _ in range(30):
        threads.run_pieces(_count_items, a, out_a, a.size, 4, (wa,))
        threads.run_pieces(_count_items, b, out_b, b.size, 4, (wb,))
    assert np.array_equal(out_a, 60 * a) and np.array_equal(out_b, 90 * b)


def test_failing_piece_raises_in_the_caller():
    x = np.arange(100.0)
    out = np.zeros_like(x)
    with pytest.raises(IndexError, match="item out of range"):
        threads.run_pieces(_fail_in_piece, x, out, x.size, 8, (np.array([77]),))
    threads.run_pieces(_fail_in_piece, x, out, x.size, 8, (np.array([-1]),))  # and the board is usable again
    assert np.array_equal(out, x)


def test_several_callers_at_once():
    """Callers on several Python threads: one at a time uses the helpers, the others compute on
    their own thread; every result is complete."""
    x = np.arange(1, 20_001, dtype=np.float64)
    results: dict[int, np.ndarray] = {}

    def caller(k: int) -> None:
        out = np.zeros_like(x)
        weight = np.full(1, float(k + 1))
        for _ in range(40):
            threads.run_pieces(_count_items, x, out, x.size, 4, (weight,))
        results[k] = out

    workers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for k in range(4):
        assert np.array_equal(results[k], 40 * (k + 1) * x), k


def threaded_everywhere():
    """Every call shared between threads, in the smallest pieces."""
    return tuning.tuned(parallel_min_elements=1, many_pieces_elements=1)


@settings(max_examples=60)
@given(st.data())
def test_threaded_engine_equals_serial(data):
    """The engine cut into pieces gives bit for bit the serial result (same kernels, same slabs)."""
    attrs, dtype, ncx_shape, layout = data.draw(configurations())
    shape = ncx_shape if layout == "NCX" else (ncx_shape[0],) + ncx_shape[2:] + (ncx_shape[1],)
    x = data.draw(edge_arrays(shape, dtype))
    note(f"attrs={attrs} layout={layout} dtype={dtype} shape={shape}")
    try:
        serial = avgpool.average_pool(x, layout=layout, **attrs)
    except avgpool.AvgPoolError:
        return
    with threaded_everywhere():
        shared = avgpool.average_pool(x, layout=layout, **attrs)
    assert shared.dtype == serial.dtype and shared.shape == serial.shape
    assert np.array_equal(shared.view(np.uint8), serial.view(np.uint8))


def test_threaded_engine_is_threaded():
    """threaded_everywhere() really cuts calls into pieces (else the test above compares serial
    with serial)."""
    from avgpool._core import engine
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    spec = onnx_dialect.make_spec(22, (4, 3, 9, 9), [3, 3])
    with threaded_everywhere():
        assert engine.prepare(spec, (4, 3, 9, 9), np.dtype(np.float32), Layout.NCX).pieces > 1


@pytest.mark.parametrize(
    "shape, layout, kernel, dtype, cut",
    [
        ((1, 30, 20, 16), "NXC", [3, 3], "float32", True),  # one channels-last slab: a batch of one
        ((1, 30, 20, 16), "NXC", [3, 3], "float16", True),  # the parts' rows widened, their outputs narrowed
        ((1, 30, 20, 16), "NXC", [3, 3], "bfloat16", True),
        ((3, 30, 20, 16), "NXC", [3, 3], "float64", True),  # three slabs, four pieces or more
        ((1, 1, 40, 50), "NCX", [2, 2], "float32", True),  # one channels-first plane
        ((1, 1, 5000), "NCX", [4], "float32", True),  # one 1-D line
        ((64, 30, 20, 16), "NXC", [3, 3], "float32", False),  # slabs enough
        ((1, 30, 20, 16), "NXC", [5, 5], "float32", True),  # the exact running sums, or the float64 passes
        ((1, 30, 20, 16), "NXC", [15, 5], "float32", False),  # block sums along the first axis
        ((1, 1, 30, 20), "NCX", [5, 5], "float32", True),  # a channels-first plane, exactly
        ((1, 1, 9, 8, 7), "NCX", [5, 5, 5], "float32", True),  # a channels-first volume, exactly
        ((1, 1, 1, 500), "NCX", [1, 5], "float32", False),  # a plane of one row: one line
        ((1, 30, 20, 16), "NXC", [5, 5], "float16", True),  # no exact sums
        ((1, 9, 7, 40), "NXC", [9, 7], "float32", True),  # a global window (no pads): parts of the channels
        ((1, 9, 7, 40), "NXC", [9, 7], "float16", False),  # widened in whole slabs
        ((1, 1, 9, 7), "NCX", [9, 7], "float64", False),  # one global contiguous sum
    ],
)
def test_few_big_slabs_are_cut_into_parts(shape, layout, kernel, dtype, cut):
    """Fewer slabs than pieces (a channels-last batch of one): each slab's first-axis outputs (or
    a global window's channels) are cut into parts that the threads share, with the serial bits,
    NaN and Inf included."""
    from avgpool._core import engine
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    pads = [0 if kernel in ([9, 7], [1, 5]) else 1] * 2 * len(kernel)
    spec = onnx_dialect.make_spec(22, shape, kernel, pads=pads)
    finite = np.random.default_rng(5).standard_normal(shape).astype({d.name: d for d in FLOAT_DTYPES}[dtype])
    special = finite.copy()  # float32 with NaN and Inf: not the exact sums, the float64 passes
    special.flat[::37] = np.nan
    special.flat[5::41] = np.inf
    with threaded_everywhere():
        prepared = engine.prepare(spec, shape, finite.dtype, Layout[layout])
    slabs = shape[0] * (shape[1] if layout == "NCX" else 1)
    parts = prepared.kernel_args[0].parts
    assert (parts > 1) == cut and prepared.items == slabs * parts
    assert (prepared.pieces > 1) == (prepared.items > 1)
    for x in (finite, special):
        serial = avgpool.average_pool(x, kernel, pads=pads, layout=layout)
        with threaded_everywhere():
            shared = avgpool.average_pool(x, kernel, pads=pads, layout=layout)
        assert np.array_equal(shared.view(np.uint8), serial.view(np.uint8))


def test_a_pool_whose_tables_are_too_large_to_keep_is_forgotten_after_its_job():
    """The crew counts the bytes of the tables a registered pool holds, inside the kernels' named
    tuples too, and forgets a pool that exceeds Tuning.helper_pool_bytes once its job is done."""
    from avgpool._core import engine
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    crew = threads._crew()
    shape = (2, 1, 64, 64)
    spec = onnx_dialect.make_spec(22, shape, [3, 3])
    with threaded_everywhere():
        prepared = engine.prepare(spec, shape, np.dtype(np.float64), Layout.NCX)
    tables = prepared.kernel_args[0]
    x = np.random.default_rng(3).random(shape)
    out = np.empty(prepared.out_shape)
    crew.forget()
    crew.pool(prepared.kernel, x.ravel(), out.ravel(), prepared.kernel_args)
    assert crew.held >= tables.axes.nbytes + tables.firsts.nbytes + tables.scales.nbytes > 0
    crew.forget()
    with tuning.tuned(helper_pool_bytes=1):  # read as the pool is registered again
        threads.run_pieces(prepared.kernel, x.ravel(), out.ravel(), prepared.items, 2, prepared.kernel_args)
    assert crew.held == 0 and not crew.pools
    assert np.array_equal(out, avgpool.average_pool(x, [3, 3]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_caller_whose_helpers_are_busy_runs_the_shipped_kernel(monkeypatch, dtype):
    """When another thread holds the helpers, the kernel runs on the caller's thread with the
    signature it is shipped compiled for (a read-only input): a writable one compiled a new
    specialisation, 3-4 minutes for two threads pooling at once in a fresh install."""
    from avgpool._core import engine
    from avgpool._core.spec import Layout
    from avgpool._ops import onnx as onnx_dialect

    x = np.random.default_rng(3).random((2, 3, 16, 16)).astype(dtype)
    spec = onnx_dialect.make_spec(22, x.shape, [3, 3], pads=[1, 1, 1, 1])
    with threaded_everywhere():
        prepared = engine.prepare(spec, x.shape, x.dtype, Layout.NCX)
        assert prepared.pieces > 1
        expected = prepared(x)
    kernel, signatures, writable = prepared.kernel, list(prepared.kernel.signatures), []

    def recording(flat_x, *rest):  # what the kernel is given (called read-only either way)
        writable.append(flat_x.flags.writeable)
        flat_x = flat_x.view()
        flat_x.flags.writeable = False
        return kernel(flat_x, *rest)

    monkeypatch.setattr(threads, "_CREW", [None])  # no helpers: as when another caller holds them
    bits = np.uint16 if prepared.as_bits else x.dtype
    out = np.empty_like(expected)
    threads.run_pieces(
        recording, x.view(bits).ravel(), out.view(bits).ravel(), prepared.items, prepared.pieces, prepared.kernel_args
    )
    assert writable == [False]
    assert out.tobytes() == expected.tobytes() and list(kernel.signatures) == signatures  # nothing compiled
