"""A process that forks while another of its threads is pooling (multiprocessing's fork start
method, gunicorn, Dask's process workers) gives a child that pools correctly and never hangs.

A forked child has only the forking thread: a lock that another thread of the parent held at the
moment of the fork stays held in the child forever. The locks in question are numba's compiler
lock, llvmlite's lock around every LLVM call, numba's threading-layer lock (taken by
``numba.get_num_threads``) and avgpool's own; the parent's thread takes them on the per-shape path
(new shapes: prepare, registering a job with the helper threads), and a child takes them on its
first threaded call (it starts its own helpers).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time

import numpy as np
import pytest

import avgpool
from avgpool._core import tuning
from avgpool._core import workers as threads

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.skipif(threads.thread_count() < 2, reason="needs numba threads >= 2 (the helpers' path)"),
]

FORKS = 40
CHILD_SECONDS = 40  # a child pools twice from cached kernels: well under a second when it does not hang


def _wait(pid: int, seconds: float) -> int | None:
    """The child's exit status, or None (after killing it) if it has not ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_children_forked_while_a_thread_pools_never_hang():
    # a 5x5 float32 kernel takes the exact path, whose preparation looks up compiled code (the
    # compiler and LLVM locks); `big` is large enough to be shared with the helper threads
    pool = avgpool.AveragePool([5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    rng = np.random.default_rng(17)
    big = rng.random((2, 16, 96, 96), dtype=np.float32)
    small = rng.random((1, 2, 12, 12), dtype=np.float32)
    assert small.size < tuning.DEFAULT.parallel_min_elements <= big.size  # serial, and threaded (2 threads or more)
    want_big, want_small = pool(big), pool(small)

    stop, errors = threading.Event(), []

    def pool_new_shapes() -> None:
        # every call a shape not seen before (more than the caches hold), threaded: the thread
        # keeps going through the per-shape path and the helpers' job board
        n = 0
        try:
            while not stop.is_set():
                n += 1
                pool(big[:, :, : 40 + n % 56, : 40 + (n // 56) % 56])
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    worker = threading.Thread(target=pool_new_shapes, daemon=True)
    worker.start()
    failures = []
    try:
        for fork in range(FORKS):
            time.sleep(0.01 * (fork % 3))  # forks at varied points of the thread's calls
            pid = os.fork()
            if pid == 0:  # the child: pool once serially, once shared with its own helpers
                code = 3
                try:
                    # a hung child prints where it hangs and exits with 1
                    faulthandler.dump_traceback_later(CHILD_SECONDS - 10, exit=True)
                    same = np.array_equal(pool(small), want_small) and np.array_equal(pool(big), want_big)
                    code = 0 if same else 4
                finally:
                    os._exit(code)
            status = _wait(pid, CHILD_SECONDS)
            if status != 0:
                failures.append((fork, "hung (killed)" if status is None else f"exit status {status}"))
                break  # one is enough: each hang costs a minute
    finally:
        stop.set()
        worker.join(60)
    assert not errors, errors
    assert not failures, f"a forked child failed (1: hung, see its traceback; 3: raised; 4: wrong result): {failures}"
