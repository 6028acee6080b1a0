"""The pieces everything avgpool remembers is built of: :class:`Memo`, a bounded dictionary shared
by threads without a lock, and the keys of attribute values (:func:`ints`, :func:`plain`,
:func:`same_items`). :mod:`.caches` builds the process-wide caches of window tables and prepared
pools on it, and :mod:`avgpool._ops._remember` the operators' memory of validated calls;
:func:`clear_all` empties them all.

A call is remembered under everything its validation depends on: the input's shape and dtype and
each attribute value *with its type* (``True == 1 == 1.0`` as dictionary keys, but a float kernel
size is refused where an int is not). Values that are not plain ints, bools, strings, None or
lists/tuples of ints are not remembered: such calls are validated every time.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import AvgPoolError, labelled

#: Scalar argument types calls are remembered by (by value, or by identity): values that cannot
#: change and hash by value (not every numpy scalar: a structured one is a view of its array's row).
IMMUTABLE = (int, float, bool, str, type(None), np.number, np.bool_)


class Unhashable(Exception):
    """An attribute value that calls are not remembered by (see :func:`ints`)."""


def ints(value: Any) -> tuple[int, ...] | None:
    """A key for a sequence attribute (or None): its values, when they are all plain ints."""
    if value is None:
        return None
    if type(value) is list or type(value) is tuple:
        for item in value:
            if type(item) is not int:
                raise Unhashable
        return tuple(value)
    raise Unhashable


def plain(scalars: Sequence[Any]) -> bool:
    """Whether scalar arguments can be remembered by value with their types: immutable scalars
    only. A tuple, though hashable, compares by its items whatever their types (``(True,) ==
    (1.0,)``), and an array cannot be hashed; calls with either are validated every time."""
    return all(isinstance(value, IMMUTABLE) for value in scalars)


def kept(value: Any) -> Any:
    """An argument as a prepared pool keeps it: arrays and lists copied, so that later edits of
    the caller's objects change nothing (the pool validates it again for each new shape)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return list(value)
    return value


def same_items(sequences: Sequence[Any]) -> Callable[..., bool]:
    """A test that each of ``sequences`` (lists or tuples of ints, or None) is still what it is
    now, for a caller that has already checked it is the very same object: called with the same
    objects, True unless a list was changed in place since. Built once per combination of
    lengths, unrolled: ``all(map(operator.is_, ...))`` over three lists cost ~0.6 us of a ~2 us
    repeated call. Each list is unpacked into as many names as it had items (a list of another
    length raises), then its items are compared by identity (``True == 1`` and ``2.0 == 2``, but
    they validate differently): ~0.24 us for a kernel, strides and pads of a 2-D pool, against
    ~0.31 comparing each with a copy of itself first."""
    lengths = tuple(-1 if value is None else len(value) for value in sequences)
    items = [item for value in sequences if value is not None for item in value]
    return _items_check(*lengths)(*items)


@functools.cache
def _items_check(*lengths: int) -> Callable[..., Callable[..., bool]]:
    """For sequences of these lengths (-1: None), a factory of :func:`same_items`'s test."""
    names = [[f"_{axis}_{i}" for i in range(n)] for axis, n in enumerate(lengths)]
    unpacks = [
        f"[{', '.join(f'a{name}' for name in items)}] = s{axis}"
        for axis, (n, items) in enumerate(zip(lengths, names))
        if n >= 0
    ]
    tests = [f"a{name} is v{name}" for items in names for name in items]
    lines = [
        "def factory(" + ", ".join(f"v{name}" for items in names for name in items) + "):",
        "    def check(" + ", ".join(f"s{axis}" for axis in range(len(lengths))) + "):",
        "        try:",
        *(f"            {unpack}" for unpack in unpacks or ["pass"]),
        "        except ValueError:  # a list of another length",
        "            return False",
        f"        return {' and '.join(tests) or 'True'}",
        "    return check",
    ]
    source = "\n".join(lines) + "\n"
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - code built here from integers only
    return namespace["factory"]


_FORGETTERS: list[Callable[[], None]] = []  # what else clear_all clears: the functions' last calls


def on_clear(forget: Callable[[], None]) -> Callable[[], None]:
    """Register ``forget`` to be called by :func:`clear_all` (a module's last remembered call)."""
    _FORGETTERS.append(forget)
    return forget


def clear_all() -> None:
    """Forget every remembered call and every engine cache entry (tests that change tuning constants)."""
    for memo in list(_EVERY_MEMO):
        memo.clear()
    for forget in _FORGETTERS:
        forget()


class Memo:
    """A dictionary of at most ``size`` entries, the oldest dropped first; with ``weigh``, also of
    at most ``total_bytes`` of what ``weigh`` counts, and no entry above ``entry_bytes`` (such a
    call is validated each time: keeping it would cost more memory than it saves time). Shared by
    threads without a lock: a lock held by another thread when the process forks would hang the
    child, and a lost or repeated entry only costs one validation."""

    def __init__(
        self, size: int, weigh: Callable[[Any], int] | None = None, total_bytes: int = 0, entry_bytes: int = 0
    ) -> None:
        self._size, self._weigh = size, weigh
        self._total_bytes, self._entry_bytes = total_bytes, entry_bytes
        self._entries: dict = {}  # key -> (value, bytes); never replaced, only changed
        self._bytes = 0
        #: ``find(key)``: the entry (value, bytes) or None, the dictionary's own ``get``: for
        #: the calls whose every 50 ns counts (api.average_pool)
        self.find = self._entries.get
        _EVERY_MEMO.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any) -> Any:
        found = self._entries.get(key)
        return None if found is None else found[0]

    def recall(self, key: Any) -> Any:
        """:meth:`get`, and the entry becomes the newest (least recently used dropped first)."""
        found = self._entries.pop(key, None)
        if found is None:
            return None
        self._entries[key] = found
        return found[0]

    def held_bytes(self) -> int:
        """What ``weigh`` counts of the entries kept."""
        return sum(weight for _, weight in list(self._entries.values()))

    def put(self, key: Any, value: Any) -> None:
        weight = self._weigh(value) if self._weigh is not None else 0
        if self._weigh is not None and weight > self._entry_bytes:
            return
        entries = self._entries
        replaced = entries.pop(key, None)  # the same key again: its bytes no longer count
        if replaced is not None:
            self._bytes -= replaced[1]
        while entries and (len(entries) >= self._size or self._bytes + weight > self._total_bytes > 0):
            try:
                _, dropped = entries.pop(next(iter(entries)))
            except (KeyError, StopIteration, RuntimeError):  # another thread changed it meanwhile
                break
            self._bytes -= dropped
        if not entries:
            self._bytes = 0
        entries[key] = (value, weight)
        self._bytes += weight

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


_EVERY_MEMO: weakref.WeakSet[Memo] = weakref.WeakSet()  # an AveragePool's memo goes with it


def call_prepared(prepared: Any, label: str, x: Any, out: Any) -> Any:
    """``prepared(x, out)`` for a remembered call: only ``out`` can be wrong, and its error is
    labelled with the operator as the validating path labels it."""
    try:
        return prepared(x, out)
    except AvgPoolError as err:
        raise labelled(label, err) from None
