"""Work sharing between the calling thread and helper threads, for kernels that release the GIL.

A kernel ``kernel(x, out, lo, hi, *args)`` computes items ``lo..hi``. The items are cut into
pieces that the threads take in turn until none is left. Unlike a fork-join region (numba's
prange), the caller never waits for a helper that has not started: on a machine whose other core
is busy, it simply takes the pieces itself, so a late thread costs its share, not a stall
(a prange region there took 10 to 40 times longer than the serial kernel).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Pieces per thread: small enough that a thread scheduled late leaves little to wait for.
PIECES_PER_THREAD = 4

_EXECUTOR: list = []  # [(threads, ThreadPoolExecutor)], created on first use


def thread_count() -> int:
    """The threads avgpool may use: numba's setting (NUMBA_NUM_THREADS, numba.set_num_threads)."""
    import numba

    return numba.get_num_threads()


def pieces_for(items: int, parallel: bool) -> int:
    """How many pieces to cut ``items`` into: 1 (serial) unless the work is worth threads."""
    threads = thread_count()
    if not parallel or threads < 2 or items < 2:
        return 1
    return max(1, min(items, threads * PIECES_PER_THREAD))


class _Shared:
    def __init__(self, kernel: Any, x: Any, out: Any, items: int, pieces: int, args: tuple) -> None:
        self.kernel, self.x, self.out, self.items, self.pieces, self.args = kernel, x, out, items, pieces, args
        self.next = self.running = 0
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def work(self) -> None:
        while True:
            with self.cond:
                i = self.next
                if i >= self.pieces or self.error is not None:
                    return
                self.next = i + 1
                self.running += 1
            try:
                self.kernel(self.x, self.out, self.items * i // self.pieces, self.items * (i + 1) // self.pieces,
                            *self.args)
            except BaseException as err:  # noqa: BLE001 - re-raised in the calling thread
                self.error = err
            finally:
                with self.cond:
                    self.running -= 1
                    if self.running == 0:
                        self.cond.notify_all()


def run_pieces(kernel: Any, x: Any, out: Any, items: int, pieces: int, args: tuple) -> None:
    """Run ``kernel(x, out, lo, hi, *args)`` over ``items`` in ``pieces`` pieces, shared."""
    if pieces <= 1:
        kernel(x, out, 0, items, *args)
        return
    threads = thread_count()
    if not _EXECUTOR or _EXECUTOR[0][0] != threads:
        _EXECUTOR[:] = [(threads, ThreadPoolExecutor(threads - 1, thread_name_prefix="avgpool"))]
    shared = _Shared(kernel, x, out, items, pieces, args)
    for _ in range(threads - 1):
        _EXECUTOR[0][1].submit(shared.work)
    shared.work()
    with shared.cond:
        while shared.running:
            shared.cond.wait()
    if shared.error is not None:
        raise shared.error
