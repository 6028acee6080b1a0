"""Work sharing between the calling thread and helper threads, for kernels that release the GIL.

A kernel ``kernel(x, out, lo, hi, *args)`` computes items ``lo..hi``. The items are cut into
pieces that the threads take in turn until none is left. Unlike a fork-join region (numba's
prange), the caller never waits for a helper that has not started: on a machine whose other core
is busy, it simply takes the pieces itself, so a late thread costs its share, not a stall
(a prange region there took 10 to 40 times longer than the serial kernel).

The helpers are persistent threads that take pieces in compiled code (:mod:`avgpool.kernels.crew`):
after a job they keep watching the job board for ``SPIN_SECONDS`` without the GIL, so the next
job reaches them within a microsecond; then they sleep until a caller wakes them (a wake-up
took 150-250 us on the 2-CPU virtual machine measured, so the first call after a pause runs
mostly on the caller's thread). Neither the helpers nor the caller are pinned to a CPU: pinned to
one, a helper shared it with other runtimes' worker threads and the OS could not move it to the
idle one (inception_v2's 1x1024x7x7 global pool timed in batches of 200 calls between batches of
onnxruntime, OpenVINO and torch: 61-65 us a call pinned, 10-12 unpinned; alike when alone).
Linux, though, wakes a thread on its waker's CPU: a helper woken for a job, or handed the GIL by
the caller, then shared the caller's CPU for whole batches while the other CPU idled (1x1024x7x7
3x3 p1 in batches of 300 calls after 50 ms pauses, the benchmark's pattern: 34 us a call, the
serial kernel's time, against 19.5 with the two threads pinned apart). So a helper that finds
itself on the caller's CPU steps off it, its CPU set restored at once, and a caller that finds a
helper on its CPU lets it run so that it can (:func:`.kernels.crew.lead`, ``_keep_apart``): in
that pattern no batch of 40 ran on one CPU at its 150th call (18-37 of 40 did before), 19-22 us
a call when the machine was in its fast phase. The caller does not yield to a helper it has just
woken: the first call after a pause then waited for the helper's way back through Python
(1x1024x7x7 3x3 p1 after 30 ms pauses: 350-390 us against 195-200 without that yield).

A helper takes pieces of any job (the job's arguments are on the board, read back by a piece
function compiled for their types) and goes back to Python only to sleep. One caller at a time
uses the helpers; a second caller meanwhile runs its kernel on its own thread.
The caller only ever waits for pieces a helper has claimed, offering its CPU to the OS while it
does (the helper may be waiting for that very CPU).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import warnings
from typing import Any

import numpy as np

from . import tuning
from .caches import held_bytes

#: How long a helper keeps spinning for the next job after finishing one.
SPIN_SECONDS = 0.002
_MAX_POOLS = 64  # pools the helpers can be switched to (older ones are forgotten)


def thread_count() -> int:
    """The threads avgpool may use: numba's setting (NUMBA_NUM_THREADS, numba.set_num_threads)."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if getattr(parallel, "_is_initialized", False):
        # numba.get_num_threads() without the two locks it takes every time to check that its
        # threading layer is up: one is shared between processes, and a thread holding it when
        # the process forks leaves the child stuck, or the child then keeps it from the parent
        count = getattr(parallel, "_get_num_threads", lambda: 0)()
        if count > 0:
            return count
    import numba

    return numba.get_num_threads()


def _cpus_allowed() -> int:
    """The CPUs the calling thread and the helpers may run on together: a process limited to
    one, by ``taskset`` or a container's CPU set, has no use for helpers, which would only take
    turns with the caller; a caller pinned to one CPU after the helpers started still has them
    (helpers not yet started will inherit the caller's CPUs). A helper stepping off a CPU
    (:func:`.kernels.crew._keep_apart`) lacks it in its CPU set until it runs again: where the
    answer would be one CPU, the helper's set is read again over a few milliseconds, with this
    thread asleep (the helper may be waiting for its CPU), and their union taken."""
    try:
        allowed = os.sched_getaffinity(0)
        crew = _CREW[0] if _CREW else None
        if crew is not None and crew.helpers:
            helper = crew.helpers[0].native_id
            allowed = allowed | os.sched_getaffinity(helper)
            for _ in range(_STEP_OFF_READS):
                if len(allowed) > 1:
                    break
                time.sleep(0.001)
                allowed = allowed | os.sched_getaffinity(helper)
        return len(allowed)
    except (AttributeError, OSError):  # not Linux, or the helper has just exited
        return os.cpu_count() or 1


#: Reads of a helper's CPU set, a millisecond apart, before one CPU is taken as all there is.
_STEP_OFF_READS = 5


def pieces_for(items: int, work: int, parallel_from: int, many_pieces_from: int) -> int:
    """How many pieces to cut ``items`` into for a job of ``work`` (the caller's measure): 1
    (serial) below ``parallel_from``, one per thread below ``many_pieces_from`` (a piece costs a
    few microseconds of set-up), :attr:`.tuning.Tuning.pieces_per_thread` per thread above
    (read as a pool is prepared, as this is called)."""
    threads = min(thread_count(), _cpus_allowed())
    if work < parallel_from or threads < 2 or items < 2:
        return 1
    per_thread = 1 if work < many_pieces_from else tuning.current().pieces_per_thread
    return max(1, min(items, threads * per_thread))


def _read_only(array: np.ndarray) -> np.ndarray:
    """``array``, or a read-only view of it: the type the kernels and lead are compiled for."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


class _Crew:
    """The helper threads, the job board they watch, and the pools they can serve."""

    def __init__(self) -> None:
        from ..kernels import crew

        self.compiled = crew
        self.max_pieces = crew.MAX_PIECES
        self.board = np.zeros(crew.BOARD_WORDS, np.int64)
        self.board[[crew.CPU, crew.HELPER]] = -1  # no CPU known yet
        self.job = np.zeros(crew.JOB_BYTES, np.uint8)  # the posted job's arguments (crew.stash)
        self.job_address = self.job.ctypes.data
        # lead's compiled entry point, called without numba's dispatcher (one signature for every job)
        self.lead = crew.compiled(crew.lead, crew.LEAD_SIGNATURE).entry_point
        self.lock = threading.Lock()  # held by the one caller using the board
        self.pools: dict[int, tuple] = {}  # pool id -> (kernel address, piece function address, args)
        # pool id -> stash's compiled entry point for that pool's argument types, called without
        # numba's dispatcher (which types all ~20 arguments on every call)
        self.stashes: dict[int, Any] = {}
        self.ids: dict[tuple, int] = {}  # (kernel, id(args), shapes, dtypes) -> pool id
        # the last job's (kernel, args, dtypes, shapes, pool id, addresses, stash's entry point): a
        # prepared pool called over and over finds its pool without hashing a key (~0.4 us a call)
        self.recent: tuple | None = None
        self.held = 0  # bytes of the arrays in the registered pools' arguments
        self.max_held = tuning.DEFAULT.helper_pool_bytes  # Tuning.helper_pool_bytes
        self.next_id = itertools.count(1)
        self.cond = threading.Condition()
        self.sleeping = 0
        self.helpers: list[threading.Thread] = []
        self.spin_rounds = self._calibrate()

    def _calibrate(self) -> int:
        """How many idle reads of the board make ``SPIN_SECONDS``."""
        board = np.zeros(self.compiled.BOARD_WORDS, np.int64)
        board[self.compiled.CPU] = -1  # no caller to keep apart from
        scratch = np.zeros(self.compiled.SCRATCH_WORDS, np.uint64)
        self.compiled.serve(board, 1, scratch)
        start = time.perf_counter()
        self.compiled.serve(board, 20000, scratch)
        per_round = max(1e-9, (time.perf_counter() - start) / 20000)
        return max(1, int(SPIN_SECONDS / per_round))

    def pool(self, kernel: Any, x: np.ndarray, out: np.ndarray, args: tuple) -> tuple[int, int, int]:
        """(pool id, kernel address, piece function address) of a job: registered once per
        kernel, shapes and ``args``."""
        key = (kernel, id(args), x.shape, x.dtype, out.shape, out.dtype)
        pool = self.ids.get(key)
        entry = self.pools.get(pool) if pool is not None else None
        if entry is not None and entry[2] is args:  # the same tuple, not a new one at a reused id
            return pool, entry[0], entry[1]
        size = held_bytes(args)  # the tables, through the kernels' named tuples
        self.max_held = tuning.current().helper_pool_bytes  # read as a pool is registered, not per call
        if len(self.pools) >= _MAX_POOLS or self.held + size > self.max_held:
            self.forget()
        pool, address = next(self.next_id), self.compiled.native_address(kernel, x, out, args)
        # compiled (or loaded) here, by the caller: compiling in a helper thread while a short
        # script's interpreter shuts down aborts inside LLVM
        piece = self.compiled.piece_address(_read_only(x), out, args)
        self.pools[pool] = (address, piece, args)
        self.ids[key] = pool
        self.held += size
        return pool, address, piece

    def forget(self) -> None:
        """Forget every registered pool: its tables, addresses and stash entry point."""
        self.pools.clear()
        self.ids.clear()
        self.stashes.clear()
        self.recent = None
        self.held = 0

    def ensure_helpers(self, count: int) -> None:
        while len(self.helpers) < count:
            index = len(self.helpers)
            helper = threading.Thread(target=self._serve, daemon=True, name=f"avgpool-helper-{index}")
            helper.start()
            self.helpers.append(helper)

    def run(self, kernel: Any, x: np.ndarray, out: np.ndarray, items: int, pieces: int, args: tuple) -> bool:
        """Share the job with the helpers; False if the board is busy (another caller) or a piece
        failed, and the caller should run the job itself."""
        if not self.lock.acquire(False):  # not blocking (a keyword argument costs 80 ns more)
            return False
        try:
            recent = self.recent
            if (
                recent is not None
                and recent[0] is kernel
                and recent[1] is args
                and recent[2] is x.dtype
                and recent[3] is out.dtype
                and recent[4] == x.shape
                and recent[5] == out.shape
            ):
                # the job before's pool: no key to hash
                pool, address, piece, stash = recent[6], recent[7], recent[8], recent[9]
            else:
                pool, address, piece = self.pool(kernel, x, out, args)
                stash = self.stashes.get(pool)
                if stash is not None:
                    self.recent = (kernel, args, x.dtype, out.dtype, x.shape, out.shape, pool, address, piece, stash)
            if self.sleeping:
                with self.cond:
                    self.cond.notify_all()
            if pieces > self.max_pieces:
                pieces = self.max_pieces
            if stash is not None and x.flags.c_contiguous and out.flags.c_contiguous:
                # the entry point stash was compiled to for this pool's types (x read-only: the
                # same machine code for a writable x)
                stash(x, out, self.job, args)
            else:
                # the kernels only read x: typed read-only always, stash and the kernel's address
                # are the same for a writable input and a read-only one (a memory map, avgpool
                # pool's input), and one compiled kernel serves both
                x = _read_only(x)
                self.compiled.stash(x, out, self.job, *args)
                self._remember_stash(pool, (x, out, self.job, args))
            return self.lead(self.board, self.job_address, piece, address, items, pieces)
        finally:
            if self.held > self.max_held:  # a pool too large to keep: its job is finished
                self.forget()
            self.lock.release()

    def _remember_stash(self, pool: int, arguments: tuple) -> None:
        """Keep the entry point of the overload of stash that the dispatcher has just used for
        ``pool``, called with ``arguments`` (its key: their types, the star arguments as one tuple)."""
        from numba import typeof

        x, out = arguments[0], arguments[1]
        if pool in self.pools and x.flags.c_contiguous and out.flags.c_contiguous:
            key = tuple(typeof(v) for v in arguments)
            overload = self.compiled.stash.overloads.get(key)
            if overload is not None:
                self.stashes[pool] = overload.entry_point

    def _serve(self) -> None:
        scratch = np.zeros(self.compiled.SCRATCH_WORDS, np.uint64)  # this helper's CPU sets
        while True:
            self.compiled.serve(self.board, self.spin_rounds, scratch)
            with self.cond:
                self.sleeping += 1
                self.cond.wait()
                self.sleeping -= 1


_CREW: list[_Crew] = []
_CREW_LOCK = threading.Lock()


_HELD_FOR_FORK: list[Any] = []


def _fork_locks() -> list[Any]:
    """The locks a thread may hold while it pools, in the order threads take them: the crew's
    creation, numba's compiler lock (also taken to look compiled code up), numba's threading
    layer's initialisation, llvmlite's lock around every LLVM call. Only those of modules
    already imported: a fork imports nothing."""
    compiler = sys.modules.get("numba.core.compiler_lock")
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    ffi = sys.modules.get("llvmlite.binding.ffi")
    locks = [
        _CREW_LOCK,
        getattr(compiler, "global_compiler_lock", None),
        getattr(parallel, "_backend_init_thread_lock", None),
        getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None),
    ]
    return [lock for lock in locks if hasattr(lock, "acquire") and hasattr(lock, "release")]


def _before_fork() -> None:
    """Fork only while no other thread holds a lock that a child's first calls need: in the
    child that thread does not exist, so a lock it held stays held forever (children forked
    while another thread pooled new shapes hung in 1 to 6 of 40 forks, in llvmlite's lock).
    Waits for those threads to leave them: microseconds, or a compilation in progress."""
    for lock in _fork_locks():
        lock.acquire()
        _HELD_FOR_FORK.append(lock)


def _after_fork_in_parent() -> None:
    while _HELD_FOR_FORK:
        _HELD_FOR_FORK.pop().release()


def _after_fork_in_child() -> None:
    _after_fork_in_parent()  # the forking thread holds the child's copies too
    _CREW.clear()  # a forked child has none of the parent's helper threads: it starts its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def _crew() -> _Crew | None:
    """The helpers, started on first use; None where they could not be (then calls run serially)."""
    if not _CREW:
        with _CREW_LOCK:
            if not _CREW:
                try:
                    crew = _Crew()
                    crew.ensure_helpers(thread_count() - 1)  # as many as numba's setting at first use
                except Exception as err:  # noqa: BLE001 - a numba without the internals crew.py uses
                    warnings.warn(
                        f"avgpool runs on one thread: its helper threads could not start ({err!r})",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    crew = None
                _CREW.append(crew)
    return _CREW[0]


def run_pieces(kernel: Any, x: Any, out: Any, items: int, pieces: int, args: tuple) -> None:
    """Run ``kernel(x, out, lo, hi, *args)`` over ``items`` in ``pieces`` pieces, shared."""
    if pieces > 1:
        crew = _CREW[0] if _CREW else _crew()
        try:
            if crew is not None and crew.run(kernel, x, out, items, pieces, args):
                return
        except Exception:  # noqa: BLE001 - the sharing machinery failed for this kernel: run it here
            pass
    # the kernels only read x and are compiled for a read-only x (as the crew calls them):
    # through the dispatcher a writable one would compile a new signature, seconds for a
    # thread whose helpers another thread is using (tests/test_threads.py)
    kernel(_read_only(x), out, 0, items, *args)
