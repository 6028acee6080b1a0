"""How every operator's plain function remembers the calls it has validated, so that a repeated
call costs what a prepared pool's call costs (``benchmarks/bench.py``, the "function" and
"literal" columns; ``fn/prep`` near 1).

One :class:`CallMemo` per function, made from the names of its arguments:

- **by identity**: a model runner passes each node's own attribute objects on every call, node
  after node (avgpool.onnx's evaluator does). Such a call is found under ``id()`` of its first
  sequence argument and recognised by the identity of every argument object, the input's shape
  and dtype, and a test that the lists still hold the values validated
  (:func:`avgpool._core.memo.same_items`): no key to build (~0.4 us of a ~2.8 us call).
- **by value**: otherwise the call's key is built (:func:`avgpool._core.memo.ints` for the
  sequences, each scalar with its type, since ``True == 1 == 1.0`` as dictionary keys but they
  validate differently) and looked up. Scalars passed as the function's own default objects
  have no place in the key: a shorter key to build and hash (~0.3 us of a call with lists
  written in it, which can never be found by identity). A call found by value twice in a row
  with the very same sequence objects is kept by identity too (its scalars equal the kept
  call's, type and value, and are then recognised by identity); calls that build their lists
  afresh each time do not pay for keeping one on every call.

:meth:`CallMemo.recall` is generated per function (:func:`_recall_factory`) with the
function's argument names, so that every test is a plain comparison of locals: written as a
loop over the arguments it cost ~0.3 us more per call (``all(map(operator.is_, ...))``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._core import caches
from .._core.memo import Memo, Unhashable, ints, on_clear, plain, same_items


class Miss:
    """What :meth:`CallMemo.recall` returns for a call it does not remember: ``key``, the key to
    keep it under once it is validated (None: it cannot be kept, e.g. ``x`` is not an ndarray)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple | None) -> None:
        self.key = key


NOT_KEPT = Miss(None)


class CallMemo:
    """The validated calls of one function whose arguments are ``x``, then ``sequences`` (lists
    or tuples of ints, or None where the name is in ``optional``), then ``scalars``; ``defaults``
    maps some scalar names to the function's default objects.

    ``recall(x, *sequences, *scalars)`` gives the value kept for an equal call, or a :class:`Miss`;
    after validating a missed call, ``keep(miss.key, x, array, args, value)`` keeps its value
    (the prepared pool and what else the function needs to answer it)."""

    def __init__(
        self,
        sequences: Sequence[str],
        scalars: Sequence[str],
        *,
        optional: Sequence[str] = (),
        defaults: Mapping[str, Any] | None = None,
        size: int = caches.CACHE_ENTRIES,
    ) -> None:
        defaults = dict(defaults or {})
        self._sequences = len(sequences)
        self.by_key = Memo(size, caches.held_bytes, caches.CACHE_BYTES, caches.CACHE_ENTRY_BYTES)
        self.by_identity = caches.known_calls()
        factory = _recall_factory(tuple(sequences), tuple(scalars), frozenset(optional), tuple(defaults))
        self.recall, self._forget_last = factory(
            self.by_key, self.by_identity.find, self._keep_known, np.ndarray, Miss, NOT_KEPT, *defaults.values()
        )
        on_clear(self._forget_last)  # avgpool._core.memo.clear_all clears both memos and this

    def forget(self) -> None:
        """Forget every remembered call (tests that change the engine's tuning constants)."""
        self.by_key.clear()
        self.by_identity.clear()
        self._forget_last()

    def keep(self, key: tuple | None, x: Any, array: np.ndarray, args: tuple, value: Any) -> None:
        """Keep ``value`` for a validated call ``(x, *args)`` missed under ``key``: by value, and
        by identity too, when ``x`` was used as it is (``array``) and every scalar is immutable
        (:func:`avgpool._core.memo.plain`)."""
        if key is None or array is not x or not plain(args[self._sequences :]):
            return
        if getattr(value[0] if type(value) is tuple else value, "grows_when_called", False):
            return  # a tiled pool makes its tiles' pools as it runs: no memo could weigh it when kept
        self.by_key.put(key, value)
        self._keep_known(x, args, value)

    def _keep_known(self, x: np.ndarray, args: tuple, value: Any) -> None:
        """Keep a call remembered by value by the identity of its argument objects too: the
        objects, the input's shape and dtype, the test that the sequences are unchanged, the
        value (the layout :func:`_recall_factory`'s code unpacks)."""
        sequences = args[: self._sequences]
        self.by_identity.put(id(args[0]), (*args, x.shape, x.dtype, same_items(sequences), value))


@functools.cache
def _recall_factory(
    sequences: tuple[str, ...], scalars: tuple[str, ...], optional: frozenset[str], defaulted: tuple[str, ...]
) -> Callable[..., tuple[Callable[..., Any], Callable[[], None]]]:
    """The factory of :meth:`CallMemo.recall` (and of the function that forgets its last call)
    for these argument names: code built here from the names of avgpool's own arguments."""
    names = (*sequences, *scalars)
    args = ", ".join(names)
    kept = [f"k_{name}" for name in names]
    sequence_keys = [f"None if {n} is None else ints({n})" if n in optional else f"ints({n})" for n in sequences]
    required = [n for n in scalars if n not in defaulted]
    typed = lambda ns: [part for n in ns for part in (f"type({n})", n)]  # noqa: E731
    key_items = ["x.shape", "x.dtype", *typed(required), *sequence_keys]
    lines = [
        "def factory(by_key, find_known, keep_known, ndarray, Miss, NOT_KEPT"
        + "".join(f", d_{n}" for n in defaulted)
        + "):",
        f"    last = (None,) * {len(sequences) + 1}",
        f"    def recall(x, {args}):",
        "        nonlocal last",
        f"        known = find_known(id({names[0]}))",
        "        if known is not None:",
        f"            {', '.join(kept)}, shape, dtype, same, value = known[0]",
        "            if (",
        *(f"                {n} is k_{n} and" for n in names),
        "                type(x) is ndarray and x.shape == shape and x.dtype is dtype",
        f"                and same({', '.join(sequences)})",
        "            ):",
        "                return value",
        "        if type(x) is not ndarray:",
        "            return NOT_KEPT",
        "        try:",
        f"            key = ({', '.join(key_items)},)",
    ]
    if defaulted:
        lines += [
            f"            if not ({' and '.join(f'{n} is d_{n}' for n in defaulted)}):",
            f"                key += ({', '.join(typed(defaulted))},)",
        ]
    lines += [
        "            found = by_key.find(key)  # an attribute read: a test can count the lookups",
        "        except (Unhashable, TypeError):  # a value with no key, or one that cannot be hashed",
        "            return NOT_KEPT",
        "        if found is None:",
        "            return Miss(key)",
        "        value = found[0]",
        f"        was, {', '.join(f'l_{n}' for n in sequences)} = last",
        f"        if was is value and {' and '.join(f'l_{n} is {n}' for n in sequences)}:",
        f"            keep_known(x, ({args},), value)  # found twice in a row with the same sequence objects",
        f"        last = (value, {', '.join(sequences)})",
        "        return value",
        "    def forget():",
        "        nonlocal last",
        f"        last = (None,) * {len(sequences) + 1}",
        "    return recall, forget",
    ]
    namespace: dict = {"ints": ints, "Unhashable": Unhashable}
    exec("\n".join(lines) + "\n", namespace)  # noqa: S102 - code built here from avgpool's own argument names
    return namespace["factory"]
