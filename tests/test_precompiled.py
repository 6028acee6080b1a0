"""The kernels' machine code: compiled on first use, kept in numba's cache, and never in the way.

Each process test runs avgpool in a fresh interpreter with an empty numba cache, as a new user
would after ``pip install``. They use the kernels that compile in about a second (QLinear global
pools, float windows covering every axis), so that the suite compiles little.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from avgpool.first_calls import entry_kernels
from avgpool.kernels import jit

SRC = Path(__file__).resolve().parents[1] / "src"

#: A first call of a cheap kernel in a new process: prints its result, the avgpool kernels numba
#: compiled, and whether numba refreshed its target context (needed only to compile).
PROBE = """
import json, sys
from numba.core import event
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        if ev.data["dispatcher"].py_func.__module__.startswith("avgpool."):
            compiled.append(ev.data["dispatcher"].py_func.__name__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
import logging, numpy as np, avgpool
if sys.argv[1:] == ["log"]:
    logging.basicConfig(level=logging.INFO)
x = (np.arange(2 * 3 * 9 * 11) % 251).astype(np.uint8).reshape(2, 3, 9, 11)
y = avgpool.qlinear_average_pool(x, 0.05, 3, 0.07, 2, [9, 11])
print(json.dumps({"y": y.ravel().tolist(), "compiled": compiled,
                  "refreshed": "numba.np.polynomial.polynomial_core" in sys.modules}))
"""


def _probe(cache: Path, *args: str, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=dict(os.environ, NUMBA_CACHE_DIR=str(cache), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}


def test_the_stamp_covers_every_kernel_module(tmp_path):
    # an entry kernel links in kernels from other modules (small_planes, halfwidth, crew): a
    # change to any of them must make its cached machine code stale, not only a change to its own
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
    # and numba's cache of every entry kernel holds the stamp in its key
    from numba import types
    from numba.core.registry import cpu_target

    entries = entry_kernels()
    assert len(entries) >= 10
    for dispatcher in entries:
        key = jit.KernelCache(dispatcher.py_func)._index_key((types.int64,), cpu_target.target_context.codegen())
        assert key[-1] == jit.sources_stamp().hex(), dispatcher


def test_a_second_process_loads_the_kernels_and_compiles_nothing(tmp_path):
    first = _probe(tmp_path / "cache")
    assert "global_ncx" in first["compiled"] and first["refreshed"]
    second = _probe(tmp_path / "cache")
    assert second["compiled"] == [] and second["y"] == first["y"]
    # nor numba's target context refreshed for the loading (a fifth of a warm first call)
    assert not second["refreshed"]
    assert "avgpool:" not in second["stderr"]


def test_a_truncated_or_garbage_cache_entry_is_ignored(tmp_path):
    """numba's cache holding a truncated data file (a crash mid-write) and a garbage index: the
    call compiles again, with at most one notice and no traceback."""
    cache = tmp_path / "cache"
    expected = _probe(cache)
    data, indexes = list(cache.rglob("*global_ncx*.nbc")), list(cache.rglob("*global_ncx*.nbi"))
    assert data and indexes
    for path in data:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = _probe(cache)
    assert result["y"] == expected["y"] and "Traceback" not in result["stderr"]
    for path in cache.rglob("*global_ncx*.nbi"):
        path.write_bytes(b"\x80\x04\x95 garbage, not an index")
    result = _probe(cache)
    assert result["y"] == expected["y"] and "global_ncx" in result["compiled"]
    assert "Traceback" not in result["stderr"]
    assert len([line for line in result["stderr"].splitlines() if "avgpool" in line]) <= 2, result["stderr"]


def test_compiling_is_logged_on_the_avgpool_logger(tmp_path):
    result = _probe(tmp_path / "cache", "log")
    assert "global_ncx" in result["compiled"]
    assert "avgpool: compiling global_ncx" in result["stderr"]
    assert "avgpool: compiling" not in _probe(tmp_path / "quiet")["stderr"]  # INFO: not shown by default


def test_a_read_only_install_without_a_writable_home_runs(tmp_path):
    """The package copied to a folder nobody may write, run as a user whose home does not exist
    and with no NUMBA_CACHE_DIR: the call works (compiled in memory) with at most one notice."""
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
    env.update(HOME="/nonexistent", PYTHONPATH=str(install))
    code = (
        "import numpy as np, avgpool; x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4); "
        "y = avgpool.average_pool(x, [4, 4]); print(y.ravel().tolist()); "
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
    assert lines[0] == str(np.arange(32, dtype=np.float32).reshape(2, 16).mean(axis=1).tolist())
    if as_nobody:
        assert lines[1] == "None"
    assert len([line for line in result.stderr.splitlines() if line.strip()]) <= 1, result.stderr
