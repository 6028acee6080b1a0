"""The kernels' machine code: compiled once per machine, cached, and never in the way.

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
from helpers import run_battery as _run_battery

from avgpool.kernels import jit, qlinear_kernels, running, separable

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_stamp_covers_every_kernel_module(tmp_path):
    # the entry kernels link in kernels from other modules (small_planes, halfwidth, direct): a
    # change to any of them must make their cached machine code stale, not only a change to
    # separable.py
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
    for dispatcher in (
        separable.pool_passes,
        separable.pool_planes,
        running.exact_kernel(0),
        qlinear_kernels.global_ncx,
    ):
        assert dispatcher._cache._file(str(tmp_path))._source_stamp == jit.sources_stamp(), dispatcher


def test_a_second_process_loads_every_kernel_and_compiles_nothing(tmp_path):
    kinds = ["float64", "qlinear-uint8-global"]
    first = _run_battery(tmp_path, kinds)
    assert first["compiled"] and first["refreshed"]
    second = _run_battery(tmp_path, kinds)
    assert second["compiled"] == [] and second["digest"] == first["digest"]
    assert "avgpool:" not in second["stderr"]  # no notice, no compile log
    # nor numba's target context refreshed for the loading (a fifth of a warm first call)
    assert not second["refreshed"]


def test_a_truncated_or_garbage_cache_entry_is_ignored(tmp_path):
    """numba's cache holding a truncated data file (a crash mid-write) and a garbage index: the
    calls go on, compiling those kernels again, with at most one notice and no traceback."""
    expected = _run_battery(tmp_path, ["float64"])
    folder = next((tmp_path / "numba-cache").rglob("separable.pool_passes-*.nbi")).parent
    for data in folder.glob("separable.pool_passes-*.nbc"):
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    for index in folder.glob("direct.direct_pass_kernel.direct_pass_*.nbi"):
        index.write_bytes(b"\x80\x04\x95 garbage, not an index")
    result = _run_battery(tmp_path, ["float64"])
    assert "pool_passes" in result["compiled"] and result["digest"] == expected["digest"]
    assert "Traceback" not in result["stderr"]
    notices = [line for line in result["stderr"].splitlines() if "avgpool" in line and "unreadable" in line]
    assert len(notices) == 1, result["stderr"]


def test_compiling_is_logged_on_the_avgpool_logger(tmp_path):
    # the QLinear global kernel compiles in a fraction of a second: a cheap compile to watch
    result = _run_battery(tmp_path, ["qlinear-uint8-global"])
    assert "global_ncx" in result["compiled"]
    assert "avgpool: compiling global_ncx" in result["stderr"]
    assert result["refreshed"]  # numba's target context, refreshed on the cache miss to compile


def test_a_read_only_install_without_a_writable_home_runs(tmp_path):
    """The package copied to a folder nobody may write, run as a user whose home does not exist
    and with no NUMBA_CACHE_DIR: the call works (compiled in memory) with at most two notices."""
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
    # one line that the kernels are compiled, and where they are kept: nowhere here
    assert len([line for line in result.stderr.splitlines() if line.strip()]) <= 2, result.stderr


def test_a_kernel_compiled_later_links_a_callee_loaded_from_the_cache(tmp_path):
    """A process that loads a callee from the cache and compiles a new caller that links it gives
    the caller's result (numba links the loaded callee's bitcode)."""
    (tmp_path / "linked.py").write_text(
        "from avgpool.kernels.jit import kernel\n\n"
        "@kernel()\ndef callee(a):\n    s = 0.0\n    for v in a:\n        s += v * 2.0\n    return s\n\n"
        "@kernel()\ndef caller(a):\n    return callee(a) + 1.0\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=f"{tmp_path}{os.pathsep}{SRC}")
    report = (
        "import numpy as np, linked\n"
        "value = linked.{0}(np.arange(5.0))\n"
        "print(value, dict(linked.callee.stats.cache_hits) != {{}})\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", report.format(name)], env=env, capture_output=True, text=True, timeout=600
        )
        for name in ("callee", "caller")
    ]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split() == ["20.0", "False"]  # compiled, then cached
    assert runs[1].stdout.split() == ["21.0", "True"]  # loaded from the cache, then linked
