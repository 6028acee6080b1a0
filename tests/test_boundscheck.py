"""A representative subset of the suite with numba's bounds checking on, so that an indexing
error in a kernel is a failure here rather than silent memory corruption; and the kernels
compiled here, for this CPU, against the shipped precompiled ones, bit for bit."""

from __future__ import annotations

from pathlib import Path

from helpers import run_battery

from avgpool.kernels import jit

TESTS = Path(__file__).parent
SUBSET = ("test_properties.py", "test_examples_and_table.py", "test_halfwidth.py", "test_qlinear.py", "test_onednn.py")


def test_kernels_stay_in_bounds_and_match_the_shipped_ones(tmp_path):
    # Bounds checks need no optimisation: NUMBA_OPT=0 halves the compile (float32 85 -> 48 s)
    # without changing a result bit (IEEE arithmetic in the same order; no fast-math anywhere
    # but the reassociated contiguous sum, whose order the battery checks). The subset and the
    # battery (every dtype and kernel family) run in one process, so that they compile once.
    subset = ["-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", *[str(TESTS / name) for name in SUBSET],
              "-k", "not boundscheck"]
    compiled_here = run_battery(tmp_path, pytest_first=subset, NUMBA_BOUNDSCHECK="1", NUMBA_OPT="0",
                                AVGPOOL_EXAMPLES="40")
    assert " passed" in compiled_here["stdout"]
    if jit.shipped_levels():
        assert compiled_here["digest"] == run_battery(tmp_path / "shipped")["digest"]
