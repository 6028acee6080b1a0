#!/usr/bin/env python3
"""Build the precompiled kernels shipped in the package (src/avgpool/kernels/precompiled/).

    python3 run.py avgpool ...            # (any command: creates .venv first)
    .venv/bin/python tools/precompile.py  # rebuild every level of avgpool.kernels.jit.LEVELS

For each portable x86-64 level, a fresh process compiles every kind of avgpool.first_calls.KINDS
with numba configured for that level's CPU (NUMBA_CPU_NAME=<level>, no extra features), and the
entry kernels' cache files replace that level's folder; where the level has wide features
(avgpool.kernels.jit.WIDE_FEATURES), a second process compiles them again with those and keeps
the kernels marked ``wide``. Run it after any change to a file under
src/avgpool/kernels/, or to numba's version: tests/test_precompiled.py fails until then. Then
run the bounds check, ``python3 run.py test -m slow`` (every kernel compiled with bounds checks,
3-5 min), which records the kernels' stamp: tests/test_boundscheck.py fails until then.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from avgpool.kernels.jit import BUILD_ENV, LEVELS, PRECOMPILED, WIDE_FEATURES  # noqa: E402


def build(level: str, work: Path, features: str = "") -> Path:
    """Compile every kind for ``level`` with LLVM ``features``; the folder of the entry kernels
    that want those features (jit.WIDE_FEATURES: the others are not saved)."""
    out, internal = work / "out", work / "internal"
    env = dict(os.environ, NUMBA_CPU_NAME=level, NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=str(internal),
               **{BUILD_ENV: str(out)})
    env.pop("NUMBA_BOUNDSCHECK", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import avgpool; avgpool.warmup()"], env=env, check=True, cwd=ROOT)
    print(f"{level}{' ' + features if features else ''}: compiled in {time.perf_counter() - start:.0f} s", flush=True)
    return out / level


def main() -> int:
    levels = sys.argv[1:] or list(LEVELS)
    for level in levels:
        with tempfile.TemporaryDirectory() as work:
            target = PRECOMPILED / level
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(build(level, Path(work) / "plain"), target)
            if level in WIDE_FEATURES:  # the wide kernels, from a build of their own
                shutil.copytree(build(level, Path(work) / "wide", WIDE_FEATURES[level]), target, dirs_exist_ok=True)
            size = sum(f.stat().st_size for f in target.iterdir())
            print(f"{level}: {len(list(target.iterdir()))} files, {size / 2**20:.1f} MiB in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
