"""A representative subset of the suite with numba's bounds checking on, so that an indexing
error in a kernel is a failure here rather than silent memory corruption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def test_kernels_stay_in_bounds(tmp_path):
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               AVGPOOL_EXAMPLES="40")
    subset = ["test_properties.py", "test_examples_and_table.py", "test_halfwidth.py", "test_qlinear.py",
              "test_onednn.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
         *[str(TESTS / name) for name in subset], "-k", "not boundscheck"],
        env=env, capture_output=True, text=True, cwd=TESTS.parent, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
