#!/usr/bin/env python3
"""Build the precompiled kernels shipped in the package (src/avgpool/kernels/precompiled/).

    python3 run.py avgpool ...            # (any command: creates .venv first)
    .venv/bin/python tools/precompile.py  # rebuild every level of avgpool.kernels.jit.LEVELS

For each portable x86-64 level this machine can run, a fresh process compiles every kind of
avgpool._warmup.KINDS with numba configured for that level's CPU (NUMBA_CPU_NAME=<level>, no
extra features), and the entry kernels' cache files replace that level's folder; where the level
has wide features (avgpool.kernels.jit.WIDE_FEATURES), a second process compiles them again with
those and keeps the kernels marked ``wide``. A level this machine cannot run (x86-64-v4 on a CPU
without AVX-512: running its code stops with SIGILL) is compiled without running anything: each
entry kernel for the signatures a level built here saved (the same kinds reach the same
signatures at every level), so build the levels it runs first (the default order does).
A level's folder is replaced once its build has succeeded. Run it after any change to a file under
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

from avgpool.kernels.jit import BUILD_ENV, LEVELS, PRECOMPILED, WIDE_FEATURES, _levels_of_this_cpu  # noqa: E402

_SIGNATURES_OF = "--compile-signatures-of"  # the subprocess of a level this machine cannot run


def build(level: str, work: Path, features: str = "", reference: Path | None = None) -> Path:
    """Compile every kind for ``level`` with LLVM ``features`` (or, given ``reference``, the
    signatures saved there, without running); the folder of the entry kernels that want those
    features (jit.WIDE_FEATURES: the others are not saved)."""
    out, internal = work / "out", work / "internal"
    env = dict(
        os.environ,
        NUMBA_CPU_NAME=level,
        NUMBA_CPU_FEATURES=features,
        NUMBA_CACHE_DIR=str(internal),
        **{BUILD_ENV: str(out)},
    )
    env.pop("NUMBA_BOUNDSCHECK", None)
    start = time.perf_counter()
    command = (
        ["-c", "import avgpool; avgpool.warmup()"] if reference is None else [__file__, _SIGNATURES_OF, str(reference)]
    )
    subprocess.run([sys.executable, *command], env=env, check=True, cwd=ROOT)
    print(f"{level}{' ' + features if features else ''}: compiled in {time.perf_counter() - start:.0f} s", flush=True)
    return out / level


def compile_signatures_of(reference: Path) -> None:
    """Compile every entry kernel for each signature its machine code is saved for in
    ``reference`` (a level's folder, built from the current sources), running nothing."""
    from numba.core import config

    from avgpool._warmup import entry_kernels

    found = 0
    for dispatcher in entry_kernels():
        signatures = [key[0] for key in dispatcher._cache._file(str(reference))._load_index()]  # {}: other sources
        found += len(signatures)
        if dispatcher._cache._features(config.CPU_NAME) == (config.CPU_FEATURES or ""):  # the others are not kept
            for signature in signatures:
                dispatcher.compile(signature)
    if not found:
        raise SystemExit(
            f"no entry kernel built from the current sources in {reference}: build a level this "
            f"machine runs ({', '.join(_levels_of_this_cpu())}) first"
        )


def main() -> int:
    runnable = _levels_of_this_cpu()
    levels = sys.argv[1:] or list(LEVELS)
    levels.sort(key=lambda level: level not in runnable)  # a level built here first: the others' reference
    for level in levels:
        reference = None if level in runnable else PRECOMPILED / next(iter(runnable), "")
        with tempfile.TemporaryDirectory() as work:
            target = PRECOMPILED / level
            built = build(level, Path(work) / "plain", reference=reference)
            wide = None
            if level in WIDE_FEATURES:  # the wide kernels, from a build of their own
                wide = build(level, Path(work) / "wide", WIDE_FEATURES[level], reference)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(built, target)
            if wide is not None:
                shutil.copytree(wide, target, dirs_exist_ok=True)
            size = sum(f.stat().st_size for f in target.iterdir())
            print(f"{level}: {len(list(target.iterdir()))} files, {size / 2**20:.1f} MiB in {target}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [_SIGNATURES_OF]:
        compile_signatures_of(Path(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
