"""How the kernels are compiled, and where their machine code is kept.

numba compiles a kernel on its first call, for this very CPU, and saves the machine code in its
own on-disk cache (``NUMBA_CACHE_DIR``, else the package's ``__pycache__``, else the user's cache
folder): later processes load it. Each kind of call reaches one entry kernel (a kernel family:
:mod:`avgpool.pools` picks it by reference), and an entry kernel is small enough that LLVM
compiles it in a second or two (``benchmarks/compile_times.py`` prints the table;
tests/test_compile_counts.py counts what a first call compiles).

Two things are added to numba's cache (:class:`KernelCache`): the key of a kernel holds the stamp
of every kernel module, since an entry kernel links in kernels from other modules and numba's
stamp covers its own file only; and no cache trouble stops a call (no writable folder, a
truncated or garbage entry: the kernel is compiled, with one notice on the ``avgpool`` logger).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit
from numba.core import caching, event
from numba.core.runtime import rtsys

LOG = logging.getLogger("avgpool")

#: numba options of every kernel: no GIL (helper threads run them), numpy's floating-point rules
#: (a zero divisor gives inf, not an exception), no bounds checks.
JIT = dict(nogil=True, error_model="numpy", boundscheck=None)
# Kernels that allocate nothing are compiled without numba's reference counting: with it, every
# call that passes arrays costs two atomic updates per array (measured: 47 ns per call with eight
# arrays, ~0.2 us per group of slabs through the pass functions), and two threads updating the
# counts of the same tables fight over their cache lines. Only the entry points allocate; the
# arrays they pass down outlive every call below them.
COMPUTE = dict(JIT, _nrt=False)
#: Small loops inlined where they are called (numba IR): a call passes each array as a dozen stack
#: words and LLVM then checks the arrays for overlap again; inlined, literal arguments (a stride of
#: 2) are constants of the loops, which LLVM vectorises.
INLINED = dict(COMPUTE, inline="always")
#: Inner loops index whole arrays at unsigned offsets: numba then drops its negative-index
#: wraparound test and LLVM vectorises the loop (3 to 5 times faster here).
U = np.uint64

#: Constant arguments of inner calls as numpy scalars: numba compiles a function once more for
#: each combination of literal arguments (a Python 0, 1 or True), every copy costing LLVM time.
#: The literals kept (stride 1, the single row of a joined pass) measured a few % faster.
ZERO, ONE = np.int64(0), np.int64(1)
YES, NO = np.bool_(True), np.bool_(False)

_noticed: set[str] = set()  # one log line per kind of cache trouble, not one per kernel


def _notice_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _noticed:
        _noticed.add(kind)
        LOG.warning(message, *args)


def kernel(*, entry: bool = False, **options: Any) -> Any:
    """``numba.njit(**options)`` with avgpool's cache (:class:`KernelCache`). ``entry``: a kernel
    the engine calls from Python (the kernels it calls are linked into it)."""

    def decorate(py_func: Any) -> Any:
        dispatcher = njit(**options)(py_func)
        dispatcher._cache = LazyCache(py_func)
        dispatcher._avgpool_entry = entry
        return dispatcher

    return decorate


@functools.lru_cache(maxsize=None)
def sources_stamp(folder: Path = Path(__file__).parent) -> bytes:
    """The source stamp of every cached kernel: a hash of all the kernel modules in ``folder``.
    An entry kernel links in the kernels it calls from other modules, so the stamp of its own
    file alone (numba's) kept machine code that was stale once a callee in another module
    changed (tests/test_precompiled.py::test_the_stamp_covers_every_kernel_module). Kernels import
    nothing outside this package (tests/test_layers.py)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


#: numba's locators of a writable cache folder, in its order (numba < 0.62 names them with a "_").
_LOCATORS = tuple(
    getattr(caching, name, None) or getattr(caching, f"_{name}")
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
)


def _writable_cache_path(py_func: Any, source: str) -> str | None:
    """Where numba would cache ``py_func``: the first of its locators that can write, or None."""
    for locator_class in _LOCATORS:
        try:
            locator = locator_class.from_function(py_func, source)
        except OSError:
            locator = None
        if locator is not None:
            return locator.get_cache_path()
    return None


class KernelCache(caching.FunctionCache):
    """numba's per-function cache, keyed also by :func:`sources_stamp`, loading without
    refreshing numba's whole target context, and with no failure that stops a call."""

    def _index_key(self, sig: Any, codegen: Any) -> tuple:
        return (*super()._index_key(sig, codegen), sources_stamp().hex())

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        # A cached kernel needs only numba's runtime (NRT) to run; numba refreshes the whole
        # target context here (importing and installing every implementation registry it has),
        # which is needed only to compile: done on a miss, before numba compiles.
        rtsys.initialize(target_context)
        try:
            found = self._load_overload(sig, target_context)
        except Exception as err:  # noqa: BLE001 - a truncated or garbage entry: compile again
            _notice_once(
                "read",
                "avgpool: ignoring an unreadable compiled kernel in %s (%s); compiling it again",
                self.cache_path,
                type(err).__name__,
            )
            found = None
        if found is None:
            target_context.refresh()
        return found

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            try:
                self._save_overload(sig, data)
            except Exception:  # noqa: BLE001 - an unreadable index: start it again
                self.flush()
                self._save_overload(sig, data)
        except Exception as err:  # noqa: BLE001 - a cache that cannot be written only costs time
            _notice_once(
                "write",
                "avgpool: cannot write compiled kernels to %s (%s); later processes compile them again",
                self.cache_path,
                err,
            )


class LazyCache(caching._Cache):
    """A :class:`KernelCache` made on first use (numba's locators probe the file system: done at
    import for every kernel, that would slow ``import avgpool``), or none where no folder is
    writable (each process then compiles what it runs, with one notice)."""

    def __init__(self, py_func: Any) -> None:
        self._py_func = py_func
        self._cache: caching._Cache | None = None
        self._enabled = True

    def _real(self) -> caching._Cache:
        if self._cache is None:
            try:
                self._cache = KernelCache(self._py_func)
            except RuntimeError:  # numba: no locator can write
                _notice_once(
                    "none",
                    "avgpool: no writable folder for compiled kernels (set NUMBA_CACHE_DIR to keep "
                    "them); each process compiles again what it runs",
                )
                self._cache = caching.NullCache()
            if not self._enabled:
                self._cache.disable()
        return self._cache

    @property
    def cache_path(self) -> str:
        return getattr(self._real(), "cache_path", "")

    def enable(self) -> None:
        self._enabled = True
        if self._cache is not None:
            self._cache.enable()

    def disable(self) -> None:
        self._enabled = False
        if self._cache is not None:
            self._cache.disable()

    def flush(self) -> None:
        self._real().flush()

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        return self._real().load_overload(sig, target_context) if self._enabled else None

    def save_overload(self, sig: Any, data: Any) -> None:
        if self._enabled:
            self._real().save_overload(sig, data)


def cache_location() -> str | None:
    """The folder compiled kernels are saved to in this process, or None if none is writable:
    every kernel module sits in this folder, so numba's locators give them all the one this
    function's own file gets."""
    return _writable_cache_path(cache_location, inspect.getfile(cache_location))


class _CompileLog(event.Listener):
    """Logs each compilation of an avgpool kernel that is not part of another one (the only
    compilations that take a user's time: nested ones are inside them), at INFO: compiling on
    first use is the normal course, not a problem to warn about."""

    def __init__(self) -> None:
        self._local = threading.local()

    def on_start(self, ev: Any) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0 and self._ours(ev):
            self._local.start = time.perf_counter()
            LOG.info(
                "avgpool: compiling %s for %s on this machine (first use; then cached in %s)",
                ev.data["dispatcher"].py_func.__name__,
                _data_type(ev.data["args"]),
                cache_location() or "no folder: set NUMBA_CACHE_DIR",
            )

    def on_end(self, ev: Any) -> None:
        self._local.depth -= 1
        if self._local.depth == 0 and self._ours(ev):
            LOG.info(
                "avgpool: compiled %s in %.1f s",
                ev.data["dispatcher"].py_func.__name__,
                time.perf_counter() - self._local.start,
            )

    @staticmethod
    def _ours(ev: Any) -> bool:
        func = getattr(ev.data.get("dispatcher"), "py_func", None)
        return (getattr(func, "__module__", None) or "").startswith("avgpool.")  # None: made by exec()


def _data_type(args: Any) -> str:
    """What a kernel is being compiled for, in a user's words: the dtype of its first data array
    (the threads' wait loops take their int64 job board first, then the data)."""
    dtypes = [str(arg.dtype) for arg in args if hasattr(arg, "dtype")]
    data = [d for d in dtypes if d != "int64"] or dtypes
    return f"{data[0]} arrays" if data else "its arguments"


event.register("numba:compile", _CompileLog())


def flat_signature(x_dtype: Any, out_dtype: Any, args: tuple) -> tuple:
    """The one signature an entry kernel is compiled for: ``kernel(x, out, lo, hi, *args)`` with
    flat C-contiguous ``x`` (read-only: a read-only input needs no other specialisation) and
    ``out``, int64 bounds and the types of ``args``."""
    import numpy as np
    from numba import typeof, types

    return (
        types.Array(typeof(np.empty(0, x_dtype)).dtype, 1, "C", readonly=True),
        types.Array(typeof(np.empty(0, out_dtype)).dtype, 1, "C"),
        types.int64,
        types.int64,
        *(typeof(a) for a in args),
    )


def compiled(dispatcher: Any, signature: tuple) -> Any:
    """The compile result of ``dispatcher`` for ``signature``: loaded, or compiled once."""
    dispatcher.compile(signature)
    return dispatcher.overloads[signature]
