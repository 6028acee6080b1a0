"""How the kernels are compiled, and where their machine code is kept.

numba compiles a kernel on its first call. avgpool's kernels are small and each family, dtype
and loop its own (:mod:`.native`), so a first call compiles only what it runs, in seconds on any
machine (benchmarks/compile_times.py); the machine code is then kept in the writable cache where
numba itself would put it (``NUMBA_CACHE_DIR``, else the package's ``__pycache__``, else the
user's cache folder), keyed by this machine's CPU, and later processes load it.

Nothing here raises for a cache that cannot be written (a read-only install with no writable
home: :func:`cache_location` is None and every process compiles again) or cannot be read (a
truncated or garbage entry is ignored and replaced): a cache never stops a call.
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
from numba import njit, types
from numba.core import caching, compiler, event, serialize
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
#: each combination of literal arguments (a Python 0, 1 or True), every copy costing seconds of
#: LLVM time. The literals kept (stride 1, the single row of a joined pass) measured a few % faster.
ZERO, ONE = np.int64(0), np.int64(1)
YES, NO = np.bool_(True), np.bool_(False)

#: Kernel modules whose loops run faster at 512-bit vectors on a CPU with AVX-512 (serial, min of
#: 9 runs, AMD EPYC Zen 4, 256-bit vs 512-bit: QLinear NHWC 1x14x14x272 3x3 s2 p1 9.5 vs 8.4 us,
#: 1x14x14x576 3x3 p1 46 vs 37, NCHW 1x192x28x28 3x3 p1 381 vs 329; float32 exact 1x16x256x256 k5
#: 616 vs 555). The float passes' short loops end in long remainders at 512 bits, and run faster
#: at 256 (float32 1x1024x7x7 7x7 6.6 vs 8.5 us, 1x192x28x28 3x3 p1 60 vs 65: bench.py): their
#: functions carry LLVM's "prefer-vector-width"="256" (:func:`_prefer_256_bit_vectors`).
WIDE_MODULES = ("qlinear_kernels", "running", "vector_scan")
_PREFER_256 = '"prefer-vector-width"="256"'


def _prefer_256_bit_vectors(post_lowering: Any) -> Any:
    """numba's CPU post-lowering step, then the "prefer-vector-width"="256" attribute on the
    functions of avgpool's kernels outside :data:`WIDE_MODULES` (numba's mangled names hold
    the module path, e.g. ``7avgpool7kernels9separable``). llvmlite accepts only attributes it
    knows by name; a string attribute is valid IR, printed as given."""

    def hook(self: Any, module: Any, library: Any) -> None:
        post_lowering(self, module, library)
        for function in module.functions:
            name = function.name
            if (
                not function.is_declaration
                and "7avgpool7kernels" in name
                and not any(f"{len(m)}{m}" in name for m in WIDE_MODULES)
            ):
                set.add(function.attributes, _PREFER_256)

    return hook


def _has_avx512() -> bool:
    import llvmlite.binding as llvm

    try:
        return bool(llvm.get_host_cpu_features().get("avx512f"))
    except RuntimeError:  # LLVM cannot tell on this platform
        return False


if _has_avx512():
    from numba.core.cpu import CPUContext

    CPUContext.post_lowering = _prefer_256_bit_vectors(CPUContext.post_lowering)

_noticed: set[str] = set()  # one log line per kind of cache trouble, not one per kernel


def _notice_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _noticed:
        _noticed.add(kind)
        LOG.warning(message, *args)


def kernel(*, key: tuple = (), **options: Any) -> Any:
    """``numba.njit(**options)`` with avgpool's cache. ``key``: what tells apart the kernels one
    factory makes (constants of their closure), in their cache entries."""

    def decorate(py_func: Any) -> Any:
        if key:
            # numba names a compiled function by its qualified name, its argument types and a
            # per-process counter: two products of one factory compiled in two processes could
            # get the same symbol, and once both were loaded into one process (one from the
            # cache) a lookup by name found the other's machine code. The key makes it theirs.
            py_func.__qualname__ += "_" + "_".join(str(part) for part in key)
        dispatcher = njit(**options)(py_func)
        dispatcher._cache = KernelCache(py_func, key)
        return dispatcher

    return decorate


@functools.lru_cache(maxsize=None)
def sources_stamp(folder: Path = Path(__file__).parent) -> bytes:
    """The source stamp of every cached kernel: a hash of all the kernel modules in ``folder``.
    A kernel links in the kernels it calls from other modules, so the stamp of its own file
    alone (numba's) kept machine code that was stale once a callee in another module changed
    (tests/test_kernel_cache.py::test_the_stamp_covers_every_kernel_module). Kernels import
    nothing outside this package (tests/test_layers.py)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


#: numba's cache locators, in its order (named with a leading underscore before numba 0.62).
_LOCATORS = tuple(
    getattr(caching, name, None) or getattr(caching, "_" + name)
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


class _CacheFile(caching.IndexDataCacheFile):
    """numba's index and data files, each data file named by its key's hash rather than by the
    first free number: two processes saving kernels of one index at once (pytest-xdist's
    workers, a user's pool of processes) would pick the same number, and the index of one would
    then point at the other's machine code. Here they write distinct files, and a lost race
    loses an index entry at worst (the kernel is compiled again)."""

    def save(self, key: Any, data: Any) -> None:
        overloads = self._load_index()
        name = overloads.get(key)
        if name is None:
            digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
            name = overloads[key] = f"{self._index_name[:-4]}.{digest}.nbc"
            self._save_index(overloads)
        self._save_data(name, data)


class KernelCache(caching._Cache):
    """numba's per-function cache (same files and index keys), the stamp of every kernel module,
    and no failure that stops a call."""

    def __init__(self, py_func: Any, key: tuple = ()) -> None:
        self._py_func = py_func
        self._factory_key = key
        self._name = f"{py_func.__module__}.{py_func.__qualname__}"
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
        found = self._load(self._writable(), sig, target_context.codegen().magic_tuple(), target_context)
        if found is None:
            target_context.refresh()
        return found

    def save_overload(self, sig: Any, cres: Any) -> None:
        path = self._writable()
        if path is None:
            _notice_once(
                "none",
                "avgpool: no writable folder for compiled kernels (set NUMBA_CACHE_DIR to keep "
                "them); each process compiles them again",
            )
        if not self._enabled or path is None or cres.objectmode or cres.lifted or cres.library.has_dynamic_globals:
            return  # nothing numba could cache either (avgpool's kernels have none of these)
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

    # -- the tiers
    def _writable(self) -> str | None:
        if self._writable_path is False:
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
                self._py_func.__qualname__.replace("<locals>.", ""),
                self._py_func.__code__.co_firstlineno,
                *sys.version_info[:2],
                getattr(sys, "abiflags", ""),
            )
            file = self._files[path] = _CacheFile(path, base, sources_stamp())
        return file

    def _key(self, sig: Any, magic: tuple) -> tuple:
        """numba's index key (caching.Cache._index_key) for ``magic``, the machine's identity."""
        code = self._py_func.__code__.co_code
        closure = self._py_func.__closure__
        if self._factory_key:  # the closure's constants, named (its kernels need no pickling)
            cells = repr(self._factory_key).encode()
        else:
            cells = serialize.dumps(tuple(c.cell_contents for c in closure)) if closure is not None else b""
        return sig, magic, (hashlib.sha256(code).hexdigest(), hashlib.sha256(cells).hexdigest())

    def _load(self, path: str | None, sig: Any, magic: tuple, target_context: Any) -> Any:
        file = self._file(path) if path is not None and os.path.isdir(path) else None
        if file is None:
            return None
        try:
            data = file.load(self._key(sig, magic))
            return None if data is None else compiler.CompileResult._rebuild(target_context, *data)
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
    function's own file gets."""
    return _writable_cache_path(cache_location, inspect.getfile(cache_location))


class _CompileLog(event.Listener):
    """Logs each compilation of an avgpool kernel that is not part of another one (the only
    compilations that take a user's time: nested ones are inside them): the first of a process
    as a warning (once: a first call compiles a few kernels, seconds in all), the rest at INFO."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._warned = False

    def on_start(self, ev: Any) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0 and self._ours(ev):
            self._local.start = time.perf_counter()
            LOG.log(
                logging.INFO if self._warned else logging.WARNING,
                "avgpool: compiling %s for %s on this machine (first use; then cached in %s)",
                ev.data["dispatcher"].py_func.__name__,
                _data_type(ev.data["args"]),
                cache_location() or "no folder: set NUMBA_CACHE_DIR",
            )
            self._warned = True

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
    (the threads' job board, int64, is not data)."""
    # arrays only: an empty star-args tuple has a "dtype" too, the empty union
    dtypes = [str(arg.dtype) for arg in args if isinstance(arg, types.Array)]
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
