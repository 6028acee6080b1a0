"""A representative subset of the suite with numba's bounds checking on, so that an indexing
error in a kernel is a failure here rather than silent memory corruption; and the kernels
compiled here, for this CPU, against the shipped precompiled ones, bit for bit.

Compiling every kernel with bounds checks takes 3-5 minutes on the 2-core machine, longer than the
rest of the suite, so it is marked ``slow`` and left out of ``python3 run.py test``: run it after
changing a kernel, with ``python3 run.py test -m slow`` (as ``tools/precompile.py``). A pass
records the kernels' source stamp in ``bounds_checked.txt``, and the default suite fails while
that record is not the stamp of the kernels as they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_battery

from avgpool.kernels import jit

TESTS = Path(__file__).parent
SUBSET = ("test_properties.py", "test_examples_and_table.py", "test_halfwidth.py", "test_qlinear.py", "test_onednn.py")
#: The source stamp (:func:`avgpool.kernels.jit.sources_stamp`) of the kernels last bounds-checked.
RECORD = TESTS / "bounds_checked.txt"


@pytest.mark.slow
def test_kernels_stay_in_bounds_and_match_the_shipped_ones(tmp_path):
    # Bounds checks need no optimisation: NUMBA_OPT=0 halves the compile (float32 85 -> 48 s)
    # without changing a result bit (IEEE arithmetic in the same order; no fast-math anywhere
    # but the reassociated contiguous sum, whose order the battery checks). The subset and the
    # battery (every dtype and kernel family) run in one process, so that they compile once.
    subset = [
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *[str(TESTS / name) for name in SUBSET],
        "-k",
        "not boundscheck",
    ]
    compiled_here = run_battery(
        tmp_path, pytest_first=subset, NUMBA_BOUNDSCHECK="1", NUMBA_OPT="0", AVGPOOL_EXAMPLES="40"
    )
    assert " passed" in compiled_here["stdout"]
    RECORD.write_text(jit.sources_stamp().hex() + "\n")


def test_the_bounds_check_ran_on_the_kernels_as_they_are():
    recorded = RECORD.read_text().strip() if RECORD.exists() else "nothing"
    assert recorded == jit.sources_stamp().hex(), (
        "a kernel changed since the bounds check last passed: run `python3 run.py test -m slow`, "
        f"which records the kernels' stamp in {RECORD.name}"
    )
