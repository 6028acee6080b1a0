"""A representative subset of the suite with numba's bounds checking on, so that an indexing
error in a kernel is a failure here rather than silent memory corruption; and the kernels
compiled here, for this CPU, against the shipped precompiled ones, bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import run_battery

from avgpool.kernels import jit

TESTS = Path(__file__).parent


def test_kernels_stay_in_bounds_and_match_the_shipped_ones(tmp_path):
    # Bounds checks need no optimisation: NUMBA_OPT=0 halves the compile (float32 85 -> 48 s)
    # without changing a result bit (IEEE arithmetic in the same order; no fast-math anywhere
    # but the reassociated contiguous sum, whose order the battery below checks).
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_OPT="0", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               AVGPOOL_EXAMPLES="40")
    subset = ["test_properties.py", "test_examples_and_table.py", "test_halfwidth.py", "test_qlinear.py",
              "test_onednn.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
         *[str(TESTS / name) for name in subset], "-k", "not boundscheck"],
        env=env, capture_output=True, text=True, cwd=TESTS.parent, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    # the same kernels (cached above) on every dtype and kernel family, against the shipped ones
    compiled_here = run_battery(tmp_path, NUMBA_BOUNDSCHECK="1", NUMBA_OPT="0")
    if jit.shipped_levels():
        assert compiled_here["digest"] == run_battery(tmp_path / "shipped")["digest"]
