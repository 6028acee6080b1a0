"""The code base is clean under the project's ruff configuration (pyproject.toml [tool.ruff]):
lint and format, with the ruff version the test extra pins."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "benchmarks", "run.py"]


def _ruff(*arguments: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the test extra)")
    return subprocess.run(
        [ruff, *arguments, "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_ruff_check_is_clean():
    run = _ruff("check")
    assert run.returncode == 0, run.stdout + run.stderr


def test_ruff_format_leaves_every_file_as_it_is():
    run = _ruff("format", "--check")
    assert run.returncode == 0, run.stdout + run.stderr
