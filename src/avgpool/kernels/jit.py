"""How the kernels are compiled, and where their machine code is found.

numba compiles a kernel on its first call, and avgpool's kernels cost LLVM a minute or more per
dtype on a 2-core machine (many specialised vector loops). So the machine code of a kernel is
looked up, in this order, before anything is compiled:

1. the writable cache, where numba itself would put it (``NUMBA_CACHE_DIR``, else the package's
   ``__pycache__``, else the user's cache folder), keyed by this machine's CPU;
2. the precompiled kernels shipped in the package (``kernels/precompiled/<level>/``), built by
   ``tools/precompile.py`` for the portable x86-64 levels :data:`LEVELS`: used when this CPU
   has every feature of a level and numba, Python and the kernel sources are those they were
   built from (numba's index checks the last three);
3. otherwise the kernel is compiled, logged on the ``avgpool`` logger, and saved to the writable
   cache if there is one.

Loading a kernel from either needs only numba's runtime, not its whole target context (refreshed
on a miss, before compiling), and reads the symbols from the machine code, leaving the LLVM
bitcode kept for linking unparsed until something links it (:mod:`.loading`).

Nothing here raises for a cache that cannot be written (a read-only install with no writable
home: :func:`cache_location` is None and every process compiles what is not shipped) or cannot
be read (a truncated or garbage entry is ignored and replaced): a cache never stops a call.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit
from numba.core import caching, config, event, serialize
from numba.core.runtime import rtsys

from . import loading

LOG = logging.getLogger("avgpool")

#: The shipped machine code: one folder per level of :data:`LEVELS`.
PRECOMPILED = Path(__file__).with_name("precompiled")
_V2 = ("cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")
_V3 = (*_V2, "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
#: The x86-64 levels precompiled kernels are built for (LLVM CPU names), best first, with the CPU
#: features a machine needs to run their code.
LEVELS = {
    "x86-64-v4": (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
    "x86-64-v3": _V3,
}
#: The LLVM features the precompiled code of "wide" entry kernels (``kernel(wide=True)``) is built
#: with, per level (the others: none). x86-64-v4's tuning keeps loops at 256-bit vectors; the
#: quantized kernels and the exact running sums run faster at 512 bits, other float loops slower
#: (their short loops end in long remainders). Serial, min of 9 runs, AMD EPYC (Zen 4), v4 build
#: as tuned vs 512-bit: QLinear NHWC 1x14x14x272 3x3 s2 p1 9.5 vs 8.4 us, 1x14x14x576 3x3 p1 46 vs 37,
#: NCHW 1x192x28x28 3x3 p1 381 vs 329; float32 exact 1x16x256x256 k5 616 vs 555; but float32
#: 1x1024x7x7 7x7 6.6 vs 8.5, 1x192x28x28 3x3 p1 60 vs 65 (benchmarks/bench_qlinear.py, bench.py).
WIDE_FEATURES = {"x86-64-v4": "-prefer-256-bit"}
#: Set to a folder by tools/precompile.py: entry kernels are saved there, under the level that
#: numba is configured to compile for (NUMBA_CPU_NAME), instead of the writable cache.
BUILD_ENV = "AVGPOOL_BUILD_PRECOMPILED"
#: Set to 0 to ignore the shipped kernels (then every kernel is compiled for this very CPU), or to
#: a level of :data:`LEVELS` to use only that one.
USE_ENV = "AVGPOOL_PRECOMPILED"

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
#: each combination of literal arguments (a Python 0, 1 or True), every copy costing seconds of
#: LLVM time. The literals kept (stride 1, the single row of a joined pass) measured a few % faster.
ZERO, ONE = np.int64(0), np.int64(1)
YES, NO = np.bool_(True), np.bool_(False)

_noticed: set[str] = set()  # one log line per kind of cache trouble, not one per kernel


def _notice_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _noticed:
        _noticed.add(kind)
        LOG.warning(message, *args)


def kernel(*, entry: bool = False, wide: bool = False, **options: Any) -> Any:
    """``numba.njit(**options)`` with avgpool's cache. ``entry``: a kernel the engine calls from
    Python, whose machine code is shipped precompiled (the kernels it calls are linked into it);
    ``wide``: an entry kernel precompiled with :data:`WIDE_FEATURES`."""

    def decorate(py_func: Any) -> Any:
        dispatcher = njit(**options)(py_func)
        dispatcher._cache = KernelCache(py_func, entry, wide)
        return dispatcher

    return decorate


@functools.cache
def host_features() -> frozenset[str]:
    """The features of this CPU, as LLVM reads them (none where it cannot tell)."""
    import llvmlite.binding as llvm

    try:
        return frozenset(name for name, present in llvm.get_host_cpu_features().items() if present)
    except RuntimeError:  # LLVM cannot tell on this platform
        return frozenset()


def _levels_of_this_cpu() -> tuple[str, ...]:
    """The levels of :data:`LEVELS` this CPU can run, best first."""
    return tuple(level for level, needed in LEVELS.items() if host_features().issuperset(needed))


def shipped_levels() -> tuple[str, ...]:
    """The precompiled levels a call may use here, best first (none under NUMBA_BOUNDSCHECK or
    with AVGPOOL_PRECOMPILED=0, or while building them)."""
    choice = os.environ.get(USE_ENV, "")
    if config.BOUNDSCHECK or choice == "0" or os.environ.get(BUILD_ENV):
        return ()
    return tuple(level for level in _USABLE_LEVELS if choice in ("", "1", level))


_USABLE_LEVELS = _levels_of_this_cpu()


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


def _writable_cache_path(py_func: Any, source: str) -> str | None:
    """Where numba would cache ``py_func``: the first of its locators that can write, or None."""
    for locator_class in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator):
        try:
            locator = locator_class.from_function(py_func, source)
        except OSError:
            locator = None
        if locator is not None:
            return locator.get_cache_path()
    return None


class KernelCache(caching._Cache):
    """numba's per-function cache (same files and index keys), with the shipped precompiled
    levels as a second, read-only tier, and no failure that stops a call."""

    def __init__(self, py_func: Any, entry: bool, wide: bool = False) -> None:
        self._py_func = py_func
        self._name = f"{py_func.__module__}.{py_func.__qualname__}"
        self._entry = entry
        self._wide = wide
        self._files: dict[str, caching.IndexDataCacheFile] = {}
        self._writable_path: str | None | bool = False  # looked up on first use
        self._enabled = True

    # -- numba's interface
    @property
    def cache_path(self) -> str:
        return self._writable() or ""

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def flush(self) -> None:
        file = self._file(self._writable())
        if file is not None:
            file.flush()

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if not self._enabled:
            return None
        # A cached kernel needs only numba's runtime (NRT) to run; numba refreshes the whole
        # target context here (importing and installing every implementation registry it has),
        # which is needed only to compile: done on a miss, before numba compiles.
        rtsys.initialize(target_context)
        triple, cpu, features = target_context.codegen().magic_tuple()
        found = self._load(self._writable(), sig, (triple, cpu, features), target_context)
        if found is None and self._entry:
            for level in shipped_levels():
                found = self._load(
                    str(PRECOMPILED / level), sig, (triple, level, self._features(level)), target_context
                )
                if found is not None:
                    break
        if found is None:
            target_context.refresh()
        return found

    def save_overload(self, sig: Any, cres: Any) -> None:
        path = self._writable()
        if path is None:
            _notice_once(
                "none",
                "avgpool: no writable folder for compiled kernels (set NUMBA_CACHE_DIR to keep "
                "them); each process compiles again what is not shipped precompiled",
            )
        if not self._enabled or path is None or cres.objectmode or cres.lifted or cres.library.has_dynamic_globals:
            return  # nothing numba could cache either (avgpool's kernels have none of these)
        if os.environ.get(BUILD_ENV) and (config.CPU_FEATURES or "") != self._features(config.CPU_NAME):
            return  # a precompiling build keeps each kernel from the build with its own features
        key = self._key(sig, cres.codegen.magic_tuple())
        try:
            os.makedirs(path, exist_ok=True)
            file = self._file(path)
            try:
                file.save(key, cres._reduce())
            except Exception:  # noqa: BLE001 - an unreadable index: start it again
                file.flush()
                file.save(key, cres._reduce())
        except Exception as err:  # noqa: BLE001 - a cache that cannot be written only costs time
            _notice_once(
                "write",
                "avgpool: cannot write compiled kernels to %s (%s); later processes compile them again",
                path,
                err,
            )

    def _features(self, level: str) -> str:
        """The LLVM features this kernel is precompiled with at ``level``."""
        return WIDE_FEATURES.get(level, "") if self._wide else ""

    # -- the tiers
    def _writable(self) -> str | None:
        if self._writable_path is False:
            build = os.environ.get(BUILD_ENV)
            if build and self._entry:
                self._writable_path = os.path.join(build, config.CPU_NAME or "host")
            else:
                self._writable_path = _writable_cache_path(self._py_func, inspect.getfile(self._py_func))
        return self._writable_path

    def _file(self, path: str | None) -> caching.IndexDataCacheFile | None:
        if path is None:
            return None
        file = self._files.get(path)
        if file is None:
            source = inspect.getfile(self._py_func)
            base = "%s.%s-%d.py%d%d%s" % (
                os.path.splitext(os.path.basename(source))[0],
                self._py_func.__qualname__,
                self._py_func.__code__.co_firstlineno,
                *sys.version_info[:2],
                getattr(sys, "abiflags", ""),
            )
            file = self._files[path] = caching.IndexDataCacheFile(path, base, sources_stamp())
        return file

    def _key(self, sig: Any, magic: tuple) -> tuple:
        """numba's index key (caching.Cache._index_key) for ``magic``, the machine's identity."""
        code = self._py_func.__code__.co_code
        closure = self._py_func.__closure__
        cells = serialize.dumps(tuple(c.cell_contents for c in closure)) if closure is not None else b""
        return sig, magic, (hashlib.sha256(code).hexdigest(), hashlib.sha256(cells).hexdigest())

    def _load(self, path: str | None, sig: Any, magic: tuple, target_context: Any) -> Any:
        file = self._file(path) if path is not None and os.path.isdir(path) else None
        if file is None:
            return None
        try:
            data = file.load(self._key(sig, magic))
            return None if data is None else loading.rebuild(target_context, *data)
        except Exception as err:  # noqa: BLE001 - a truncated or garbage entry: compile again
            _notice_once(
                "read",
                "avgpool: ignoring an unreadable compiled kernel in %s (%s); compiling it again",
                path,
                type(err).__name__,
            )
            return None


def cache_location() -> str | None:
    """The folder compiled kernels are saved to in this process, or None if none is writable:
    every kernel module sits in this folder, so numba's locators give them all the one this
    function's own file gets (a precompiling build writes its entry kernels to BUILD_ENV)."""
    build = os.environ.get(BUILD_ENV)
    if build:
        return os.path.join(build, config.CPU_NAME or "host")
    return _writable_cache_path(cache_location, inspect.getfile(cache_location))


class _CompileLog(event.Listener):
    """Logs each compilation of an avgpool kernel that is not part of another one (the only
    compilations that take a user's time: nested ones are inside them)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def on_start(self, ev: Any) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0 and self._ours(ev):
            self._local.start = time.perf_counter()
            LOG.warning(
                "avgpool: compiling %s for %s on this machine (first use, up to a minute; then cached in %s)",
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
