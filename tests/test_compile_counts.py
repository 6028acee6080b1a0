"""A first call compiles only the kernel family it runs (a number of functions, not a time): each
kind of pool is its own entry kernel, picked in Python (:func:`avgpool.pools.slab_kernel`), so a
small-plane call or a global pool does not compile the separable passes or the exact running
sums (one entry that branched to every family compiled 108 functions for any float32 call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: One call in a new process with an empty cache: the avgpool kernels numba compiled, in order.
PROBE = """
import json, sys
from numba.core import event
compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        func = ev.data["dispatcher"].py_func
        if func.__module__.startswith("avgpool."):
            compiled.append(func.__module__.rsplit(".", 1)[-1] + "." + func.__name__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
import numpy as np, avgpool
shape, kernel, pads = json.loads(sys.argv[1])
x = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
avgpool.average_pool(x, kernel, pads=pads)
print(json.dumps(compiled))
"""

#: The separable passes and the exact running sums: the big families a small call must not compile.
BIG = {"separable.pool_slabs", "separable._pool_slabs", "separable._one_pass", "running.pool_slabs_exact"}


def compiled_by(tmp_path, shape, kernel, pads) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([shape, kernel, pads])],
        env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("shape", "kernel", "pads", "entry", "most"),
    [
        # 3 x 3 "same" windows on 14 x 14 planes: kernels/small_planes.py only
        ((1, 8, 14, 14), [3, 3], [1, 1, 1, 1], "separable.pool_planes", 8),
        # a window covering the whole plane: running sums of the channels only
        ((1, 3, 16, 16), [16, 16], [0, 0, 0, 0], "separable.pool_global", 4),
    ],
    ids=["small-planes", "global"],
)
def test_a_first_call_compiles_only_its_family(tmp_path, shape, kernel, pads, entry, most):
    compiled = compiled_by(tmp_path, shape, kernel, pads)
    assert compiled[0] == entry, compiled
    assert not BIG & set(compiled), compiled
    assert len(compiled) <= most, compiled
