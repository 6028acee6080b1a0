#!/usr/bin/env python3
"""Set up a local virtual environment and run avgpool's main job or its tests.

    python3 run.py demo     # the worked examples of the ONNX spec, computed by avgpool
    python3 run.py test     # the whole test suite
    python3 run.py bench    # the benchmark against the peers (slow; needs the bench extra)
    python3 run.py avgpool ARGS...   # any avgpool command

Needs only Python >= 3.11 with pip and venv. The first run creates ``.venv`` and installs the
package with the extras it needs; later runs reinstall only when pyproject.toml changed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
EXTRAS = {"demo": "", "avgpool": "", "test": "test", "bench": "bench"}


def ensure_environment(extra: str) -> None:
    """Create .venv and install the package (editable) with ``extra``, once per pyproject change."""
    if not PYTHON.exists():
        print(f"run.py: creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = VENV / f".installed-{extra or 'base'}-{digest}"
    if stamp.exists():
        return
    target = f"{ROOT}[{extra}]" if extra else str(ROOT)
    print(f"run.py: installing avgpool{f'[{extra}]' if extra else ''} into {VENV} (first run only) ...", flush=True)
    # --no-compile, then compile_packages(): pip byte-compiles one file at a time, the packages'
    # own test folders too (numba's alone is thousands of files)
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "-e", target],
        check=True,
    )
    compile_packages()
    stamp.touch()


def compile_packages() -> None:
    """Byte-compile the environment's packages once, on every core, leaving out their test folders.

    Python writes a module's .pyc when it first imports it, unless PYTHONDONTWRITEBYTECODE is set
    (as it is on some CI machines and containers): then every process compiles numba, numpy, onnx
    and dask from source again, 2.8 s an import of avgpool instead of 0.9 on the 2-core machine,
    and the test suite starts dozens of processes. compileall writes the .pyc files either way
    (8 s on two cores).
    """
    purelib = subprocess.run(
        [str(PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [str(PYTHON), "-m", "compileall", "-q", "-j", "0", "-x", r"[/\\]tests?[/\\]", purelib, str(ROOT / "src")],
        check=False,
        stdout=subprocess.DEVNULL,
    )  # a file that fails only runs slower


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__.strip())
        return 2
    command, rest = argv[0], argv[1:]
    ensure_environment(EXTRAS[command])
    if command == "demo":
        args = [str(PYTHON), "-m", "avgpool", "demo", *rest]
    elif command == "avgpool":
        args = [str(PYTHON), "-m", "avgpool", *rest]
    elif command == "test":
        args = [str(PYTHON), "-m", "pytest", "-n", "2", "-q", *rest]
    else:
        args = [str(PYTHON), str(ROOT / "benchmarks" / "bench.py"), *rest]
    return subprocess.run(args, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
