"""A first call compiles only what it runs: counted, in a new process with an empty numba cache.

Each family of kernels (small planes, one global window, fused channels-last passes, the passes
per axis, the exact running sums) has its own entry kernel, and each axis's pass is compiled
for its own loop (kernels/native.py), so the count of kernels a call compiles is a property of
the code, not of the machine: a number, not a time (benchmarks/compile_times.py has the times).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from compile_times import compile_records  # noqa: E402

#: Kernels of the families a kind must not compile (they are not the ones it runs).
OTHER_FAMILIES = {
    "float64": ("pool_small_planes", "_global_slabs", "_fused_rows", "block_pass", "pool_slabs_exact", "widen"),
    "float32-nxc": ("pool_small_planes", "_global_slabs", "block_pass", "pool_slabs_exact", "widen"),
    "float16": ("pool_small_planes", "_global_slabs", "_fused_rows", "block_pass", "pool_slabs_exact"),
    "qlinear-uint8": ("pool_passes", "direct_pass", "sums", "pool_slabs_exact"),
    # the float64 fallback of the exact path waits for values that need it (float32-exact-nan)
    "float32-exact": (
        "pool_small_planes",
        "_global_slabs",
        "block_pass",
        "widen",
        "direct_pass",
        "sums",
        "_pool_slabs",
    ),
    # the ring of dequantized rows is the other channels-last kernel (pool_nxc_kernel)
    "qlinear-uint8-nxc": ("pool_nxc_pool_nxc_True", "pool_ncx", "pool_passes", "sums"),
    "qlinear-threads": ("pool_passes", "sums"),
    # the helpers' loop and the job board's functions serve every job: compiled once, by the first
    # threaded kind; a further one compiles its kernel, the copy of its arguments and its piece
    # function (kernels/crew.py)
    "qlinear-int8-threads": ("serve", "lead", "_run_piece", "_claim", "_keep_apart", "_step_off"),
}
#: The most kernels each kind may compile (one per function and signature). The single entry that
#: dispatched to every family compiled 79 for float64 and 108 for float32; float32-exact compiled
#: its fallback too (44), and channels last both of its kernels.
MOST = {
    "qlinear-uint8": 4,
    "float64": 14,
    "float32-nxc": 14,
    "float16": 20,
    "float32-exact": 24,
    "qlinear-uint8-nxc": 2,
    "qlinear-threads": 8,
    "qlinear-int8-threads": 3,
}


def test_a_first_call_compiles_only_its_own_kernels():
    # one process, the kinds one after the other: each kind's count is of the kernels it adds
    for record in compile_records(list(MOST)):
        kind, names = record["kind"], [name for _, name in record["slowest"]]
        assert record["kernels"] <= MOST[kind], (kind, names)
        strays = [name for name in names if any(name.split(".")[-1].startswith(o) for o in OTHER_FAMILIES[kind])]
        assert not strays, (kind, strays)
