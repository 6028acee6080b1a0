"""The process-wide caches of window tables and prepared pools: bounded by count and by the bytes
of the arrays they hold, keyed by the current :mod:`.tuning` too."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from . import tuning
from .memo import Memo

# The process-wide caches below (window tables, prepared pools) keep at most CACHE_ENTRIES values,
# holding at most CACHE_BYTES of arrays in all, and no value above CACHE_ENTRY_BYTES: that one is
# built again for each call. Tables take 48 bytes per output position along each axis (the plans
# they are made from 24 more); bounded by count alone, the caches kept 576 MB after the 32 MB
# result of a 1-D input of 16M samples at stride 2 was freed. Only long 1-D lines exceed the entry
# limit (about 170K outputs along the axes together), and there building the tables costs more
# than the pool (1x1x16M k2 s2: 1.1 s against 12 ms): a caller repeating such a shape keeps an
# AveragePool, which holds its prepared shapes itself.
CACHE_ENTRIES = 512
CACHE_BYTES = 1 << 25
CACHE_ENTRY_BYTES = 1 << 23


def held_bytes(value: object) -> int:
    """The bytes of the numpy arrays that ``value`` holds (through tuples, lists, dict values and
    dataclass fields: a tiled pool's pools per tile shape among them): what keeping it costs."""
    if isinstance(value, np.ndarray):
        return value.base.nbytes if isinstance(value.base, np.ndarray) else value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(held_bytes(item) for item in value)
    if isinstance(value, dict):
        return sum(held_bytes(item) for item in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(held_bytes(getattr(value, f.name, None)) for f in dataclasses.fields(value))
    return 0


def known_calls() -> Memo:
    """A plain function's calls kept by the identity of their argument objects (a ``CallMemo``'s
    ``by_identity``, :mod:`avgpool._ops._remember`): at most 64, holding at most a quarter of
    CACHE_BYTES (prepared pools whose tables pass a quarter of CACHE_ENTRY_BYTES are found by key
    instead)."""
    return Memo(64, held_bytes, CACHE_BYTES // 4, CACHE_ENTRY_BYTES // 4)


class BoundedCache:
    """A least-recently-used cache of ``function``'s results, bounded by count like
    functools.lru_cache and also by the bytes of the arrays they hold (:func:`held_bytes`): a
    :class:`.memo.Memo` (lock-free: a lock held by another thread when the process forks would
    hang the child; a race at worst builds a value twice or drops one), keyed by the arguments
    and the current :mod:`.tuning`, which the function reads: no entry needs clearing when the
    tuning changes."""

    def __init__(
        self,
        function: Callable,
        entries: int = CACHE_ENTRIES,
        total_bytes: int = CACHE_BYTES,
        entry_bytes: int = CACHE_ENTRY_BYTES,
    ) -> None:
        functools.update_wrapper(self, function)
        self._function = function
        self._memo = Memo(entries, held_bytes, total_bytes, entry_bytes)
        self._values = self._memo._entries  # key -> (value, bytes), the least recently used first
        self.hits = self.misses = 0

    def __call__(self, *args: object) -> object:
        key = (tuning.current(), *args)
        found = self._memo.recall(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        value = self._function(*args)
        self._memo.put(key, value)
        return value

    def held_bytes(self) -> int:
        """The bytes the cached values hold."""
        return self._memo.held_bytes()

    def cache_info(self) -> tuple[int, int, int]:
        """(hits, misses, values held)."""
        return self.hits, self.misses, len(self._values)

    def cache_clear(self) -> None:
        self._memo.clear()
