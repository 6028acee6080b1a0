"""The process-wide caches of window tables and prepared pools (tables.kernel_tables,
engine.prepare, and the helper threads' registered pools) are bounded by bytes as well as by
count: once a result is freed (and the AveragePool that made it), what they keep is small, even
for a long 1-D line whose tables take 18 times its output. Repeated calls on one shape still hit.

Measured in a fresh interpreter: tracemalloc (which sees numpy's array memory) for what stays
allocated, RSS as a second look; the bounds are far from both the broken and the fixed values.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

import avgpool
from avgpool._core import caches, engine

MIB = 1 << 20

_SCRIPT = textwrap.dedent("""
    import gc, json, os, time, tracemalloc
    import numpy as np
    import avgpool
    from avgpool._core import engine
    from avgpool._core import tables

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def held_after(shape, kernel, stride):
        # the bytes still allocated (and RSS grown) once the result and its pool are freed
        x = np.ones(shape, np.float32)
        gc.collect()
        traced, resident = tracemalloc.get_traced_memory()[0], rss()
        pool = avgpool.AveragePool([kernel], strides=[stride])
        y = pool(x)
        correct = bool(np.all(y == 1))
        del y, pool
        time.sleep(0.05)  # a helper drops its pool's arguments after its spin (2 ms)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - traced, rss() - resident, correct

    for warm in ((1, 1, 8), (2, 8, 20000)):  # kernels loaded, helper threads up
        avgpool.AveragePool([2], strides=[2])(np.ones(warm, np.float32))
    # and the exact kernels of the long k5 line (another length: its caches' entries are not
    # these): compiled here, numba's own memory would count as held (23 MiB)
    avgpool.AveragePool([5], strides=[1])(np.ones((1, 1, (1 << 23) - 999), np.float32))
    tracemalloc.start()
    report = {}
    # a 32 MB output: 576 MB of tables and plans stayed in the caches
    report["serial 1-D"] = held_after((1, 1, 1 << 24), 2, 2)
    # the same shared with the helper threads (8 slabs), and the exact float32 path (k5)
    report["threaded 1-D"] = held_after((1, 8, 1 << 21), 2, 2)
    report["exact 1-D"] = held_after((1, 1, 1 << 23), 5, 1)

    # many distinct shapes, each with 2 MB of tables (40K outputs): under the count limit, so
    # only the byte bound keeps them from adding up (380 MB)
    line = np.ones((1, 1, 40200), np.float32)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    for n in range(150):
        avgpool.AveragePool([3], strides=[1], pads=[1, 1])(line[:, :, :40000 + n])
    gc.collect()
    report["150 shapes"] = [tracemalloc.get_traced_memory()[0] - traced, 0, True]
    report["cache bytes"] = [getattr(cache, "held_bytes", lambda: -1)()
                             for cache in (tables.kernel_tables, engine.prepare)]

    # repeated calls on one shape hit the caches (fresh pools, so that each consults them)
    x = np.ones((1, 3, 32, 32), np.float32)
    first = engine.prepare.cache_info()
    for _ in range(5):
        avgpool.AveragePool([3, 3], strides=[2, 2])(x)
    last = engine.prepare.cache_info()
    report["hits, misses"] = [last[0] - first[0], last[1] - first[1]]
    print(json.dumps(report))
""")


def test_caches_keep_little_once_the_result_is_freed():
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # before the bounds (MiB still allocated): 576, 72, 640 and 413; since, under 1 and the byte
    # budget of the caches for the 150 shapes
    for case, bound in (
        ("serial 1-D", 16 * MIB),
        ("threaded 1-D", 16 * MIB),
        ("exact 1-D", 16 * MIB),
        ("150 shapes", caches.CACHE_BYTES + 16 * MIB),
    ):
        traced, resident, correct = report[case]
        assert correct, case
        assert traced < bound, f"{case}: {traced / MIB:.0f} MiB still allocated after the result was freed"
        assert resident < 64 * MIB, f"{case}: RSS grew by {resident / MIB:.0f} MiB"  # 80-650 before
    assert all(held <= caches.CACHE_BYTES for held in report["cache bytes"]), report["cache bytes"]
    assert report["hits, misses"] == [4, 1], report["hits, misses"]


def test_bounded_cache_drops_the_least_recently_used_by_count_and_bytes():
    made = []

    def tables(n: int) -> tuple:
        made.append(n)
        return (np.zeros(n, np.uint8), n)

    cache = caches.BoundedCache(tables, entries=3, total_bytes=100, entry_bytes=60)
    assert cache(10) is cache(10) and made == [10]  # a hit returns the same value
    cache(20), cache(30)
    cache(10)  # now the most recently used
    cache(5)  # a fourth value: 20, the least recently used, goes
    assert cache.cache_info()[2] == 3
    cache(10), cache(30), cache(5)
    assert made == [10, 20, 30, 5]
    cache(20)
    assert made[-1] == 20
    cache(55)  # 30 + 5 + 20 + 55 > 100 bytes: the oldest go until the rest fits
    assert cache.held_bytes() <= 100
    assert made.count(70) == 0 and cache(70) is not cache(70)  # above entry_bytes: built every time
    assert made.count(70) == 2 and cache.held_bytes() <= 100
    cache.cache_clear()
    assert cache.cache_info()[2] == 0 and cache.held_bytes() == 0


def test_held_bytes_counts_a_prepared_pool_s_tables():
    x = np.ones((1, 1, 100_000), np.float32)
    avgpool.AveragePool([3], strides=[1])(x)
    prepared = next(value for value, _ in engine.prepare._values.values() if value.out_shape == (1, 1, 99_998))
    assert 48 * 99_998 <= caches.held_bytes(prepared) <= 80 * 100_000
    assert caches.held_bytes(avgpool) == 0
