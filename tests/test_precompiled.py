"""The kernels' machine code: shipped precompiled, cached, or compiled, and never in the way.

Each process test runs avgpool in a fresh interpreter with an empty numba cache, as a new user
would after ``pip install``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import run_battery as _run_battery

from avgpool._warmup import entry_kernels
from avgpool.kernels import jit

SRC = Path(__file__).resolve().parents[1] / "src"

needs_a_level = pytest.mark.skipif(not jit.shipped_levels(), reason="no precompiled level runs on this CPU")


@pytest.mark.parametrize("level", list(jit.LEVELS))
def test_the_shipped_kernels_are_built_from_the_current_sources(level):
    # a kernel source edited without `python tools/precompile.py` leaves a stale index: rebuild them
    for dispatcher in entry_kernels():
        index = dispatcher._cache._file(str(jit.PRECOMPILED / level))._load_index()
        assert index, f"{level}: no current precompiled {dispatcher.py_func.__name__}: run tools/precompile.py"


def test_every_level_holds_the_same_signatures():
    # tools/precompile.py builds a level the build machine cannot run (x86-64-v4 without AVX-512)
    # from the signatures a level it runs saved: a signature missing from one level would be
    # compiled on a user's first call, on CPUs of that level only
    def signatures(level):
        return {
            dispatcher.py_func.__name__: sorted(
                str(key[0]) for key in dispatcher._cache._file(str(jit.PRECOMPILED / level))._load_index()
            )
            for dispatcher in entry_kernels()
        }

    first, *others = jit.LEVELS
    expected = signatures(first)
    assert all(expected.values()), expected
    for level in others:
        assert signatures(level) == expected, level


def test_the_stamp_covers_every_kernel_module(tmp_path):
    # pool_slabs links in kernels from other modules (small_planes, halfwidth): a change to any of
    # them must make its cached and shipped machine code stale, not only a change to separable.py
    kernels = SRC / "avgpool" / "kernels"
    stamps = set()
    for name in ("small_planes.py", "halfwidth.py", "separable.py"):
        copy = tmp_path / name.removesuffix(".py")
        copy.mkdir()
        for source in kernels.glob("*.py"):
            shutil.copy(source, copy / source.name)
        (copy / name).write_text((copy / name).read_text() + "\n# changed\n")
        stamps.add(jit.sources_stamp(copy))
    assert len(stamps) == 3 and jit.sources_stamp(kernels) not in stamps
    for dispatcher in entry_kernels():
        assert dispatcher._cache._file(str(tmp_path))._source_stamp == jit.sources_stamp(), dispatcher


@needs_a_level
def test_every_kind_of_first_call_loads_shipped_kernels_and_compiles_nothing(tmp_path):
    result = _run_battery(tmp_path)
    assert result["compiled"] == []
    assert "avgpool:" not in result["stderr"]  # no notice, no compile log
    # nor numba's target context refreshed for the loading (0.19-0.23 s of a 0.8-1.0 s first call)
    assert not result["refreshed"]
    # nor any kernel's bitcode parsed (kernels/loading.py), which is still there for linking
    assert result["loaded"] >= 9 and result["unparsed"] == result["loaded"] and result["links"]


@pytest.mark.parametrize("level", list(jit.LEVELS))
def test_the_object_code_defines_the_symbols_the_bitcode_would_name(level):
    # kernels/loading.py reads a library's defined symbols from its object code instead of its
    # bitcode: for every shipped kernel, the same global names, the Python wrapper among them
    import pickle

    from llvmlite import binding as ll

    from avgpool.kernels import loading

    entries = sorted((jit.PRECOMPILED / level).glob("*.nbc"))
    assert entries
    for path in entries:
        (name, kind, (code, bitcode)), fndesc = pickle.loads(path.read_bytes())[:2]
        module = ll.parse_bitcode(bitcode)
        linkable = {
            value.name
            for values in (module.functions, module.global_variables)
            for value in values
            if not value.is_declaration and value.linkage not in (ll.Linkage.internal, ll.Linkage.private)
        }
        assert kind == "object" and fndesc.llvm_cpython_wrapper_name in linkable, path.name
        assert loading.elf_defined_symbols(code) == linkable, path.name
    assert loading.elf_defined_symbols(b"\xcf\xfa\xed\xfe" + bytes(60)) is None  # Mach-O: numba's own loader


@needs_a_level
def test_another_cpu_runs_the_portable_level_with_the_same_results(tmp_path):
    """Code built for x86-64-v3 (AVX2) on a machine that numba takes for a Haswell (another CPU
    than the one that built it) is loaded, not compiled, and gives the bits of the best level."""
    if "x86-64-v3" not in jit.shipped_levels():
        pytest.skip("this CPU cannot run x86-64-v3 code")
    best = _run_battery(tmp_path / "best")
    other = _run_battery(
        tmp_path / "other", NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="", AVGPOOL_PRECOMPILED="x86-64-v3"
    )
    assert other["compiled"] == []
    assert other["digest"] == best["digest"]


@needs_a_level
def test_a_truncated_or_garbage_cache_entry_is_ignored(tmp_path):
    """numba's writable cache holding a truncated data file (a crash mid-write) and a garbage
    index: the calls go on from the next tier, with at most one notice and no traceback."""
    from numba.core import caching

    level = jit.shipped_levels()[0]
    kernels = Path(jit.__file__).parent
    folder = tmp_path / "numba-cache" / caching._CacheLocator.get_suitable_cache_subpath(str(kernels / "jit.py"))
    shutil.copytree(jit.PRECOMPILED / level, folder)  # valid entries, keyed as on a CPU called `level`
    for data in folder.glob("separable.pool_slabs-*.nbc"):
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    for index in folder.glob("separable.pool_slabs_16-*.nbi"):
        index.write_bytes(b"\x80\x04\x95 garbage, not an index")
    expected = _run_battery(tmp_path / "clean", ["float32"])
    result = _run_battery(tmp_path, ["float32"], NUMBA_CPU_NAME=level, NUMBA_CPU_FEATURES="", AVGPOOL_PRECOMPILED=level)
    assert result["compiled"] == [] and result["digest"] == expected["digest"]
    assert "Traceback" not in result["stderr"]
    assert len([line for line in result["stderr"].splitlines() if "avgpool" in line]) == 1, result["stderr"]


def test_compiling_is_logged_on_the_avgpool_logger(tmp_path):
    # the QLinear global kernel compiles in a fraction of a second: a cheap compile to watch
    result = _run_battery(tmp_path, ["qlinear-uint8-global"], AVGPOOL_PRECOMPILED="0")
    assert "global_ncx" in result["compiled"]
    assert "avgpool: compiling global_ncx" in result["stderr"]
    assert result["refreshed"]  # numba's target context, refreshed on the cache miss to compile


def test_a_read_only_install_without_a_writable_home_runs(tmp_path):
    """The package copied to a folder nobody may write, run as a user whose home does not exist
    and with no NUMBA_CACHE_DIR: the call works (precompiled kernels, or compiled in memory) with
    at most one notice."""
    install = Path(tempfile.mkdtemp(prefix="avgpool-read-only-")) / "site"  # tmp_path's parents may be private
    shutil.copytree(SRC / "avgpool", install / "avgpool", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [install, *install.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(
            (
                mode
                | stat.S_IRUSR
                | stat.S_IRGRP
                | stat.S_IROTH
                | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if path.is_dir() else 0)
            )
            & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        )
    install.parent.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(HOME="/nonexistent", PYTHONPATH=str(install), AVGPOOL_PRECOMPILED="1")
    code = (
        "import numpy as np, avgpool; x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4); "
        "y = avgpool.average_pool(x, [2, 2], strides=[2, 2]); print(y.ravel().tolist()); "
        "print(avgpool.cache_location()); print(avgpool.__file__)"
    )
    as_nobody = os.geteuid() == 0 and hasattr(os, "setuid")

    def drop() -> None:
        os.setgid(65534)
        os.setuid(65534)

    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=drop if as_nobody else None,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.rmtree(install.parent, ignore_errors=True)
    lines = result.stdout.splitlines()
    assert lines[2].startswith(str(install)), "the copy was not the package imported"
    assert lines[0] == str(np.arange(32, dtype=np.float32).reshape(1, 2, 2, 2, 2, 2).mean(axis=(3, 5)).ravel().tolist())
    if as_nobody:
        assert lines[1] == "None"
    assert len([line for line in result.stderr.splitlines() if line.strip()]) <= 1, result.stderr


def test_a_kernel_compiled_later_links_a_callee_loaded_from_the_cache(tmp_path):
    """kernels/loading.py leaves a loaded kernel's bitcode unparsed until another kernel links it:
    a process that loads the callee from the cache and compiles a new caller gives its result."""
    (tmp_path / "linked.py").write_text(
        "from avgpool.kernels.jit import kernel\n\n"
        "@kernel()\ndef callee(a):\n    s = 0.0\n    for v in a:\n        s += v * 2.0\n    return s\n\n"
        "@kernel()\ndef caller(a):\n    return callee(a) + 1.0\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=f"{tmp_path}{os.pathsep}{SRC}")
    report = (
        "import numpy as np, linked\n"
        "value = linked.{0}(np.arange(5.0))\n"
        "library = next(iter(linked.callee.overloads.values())).library\n"
        "print(value, dict(linked.callee.stats.cache_hits) != {{}}, '_shared_bitcode' in library.__dict__)\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", report.format(name)], env=env, capture_output=True, text=True, timeout=600
        )
        for name in ("callee", "caller")
    ]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split() == ["20.0", "False", "False"]  # compiled, then cached
    assert runs[1].stdout.split() == ["21.0", "True", "True"]  # loaded lazily from the cache, then linked
