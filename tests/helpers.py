"""Shared test helpers: comparison with the float64 reference, edge arrays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np

FLOAT_DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16)]


def ulp(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at each value (float64 array)."""
    finfo = ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)
    magnitude = np.abs(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(exponent, finfo.minexp)
    return np.exp2(exponent - finfo.nmant)


def assert_close_to_exact(
    got: np.ndarray, exact: np.ndarray, abs_average: np.ndarray, taps: int, context: str = ""
) -> None:
    """``got`` (any float dtype) against the exact average ``exact`` (float64).

    Allowed: one ulp of the output dtype (the final rounding) plus what a float64 accumulation
    can lose, ``taps * 2**-52 * mean(|x|)`` of the window (semantics 1.4). NaN and +-Inf must sit
    at exactly the same places.
    """
    assert got.shape == exact.shape, f"shape {got.shape} != reference {exact.shape} {context}"
    got64 = got.astype(np.float64)
    nan_got, nan_ref = np.isnan(got64), np.isnan(exact)
    assert np.array_equal(nan_got, nan_ref), f"NaN at different places {context}\n got {got64}\n ref {exact}"
    inf_ref = np.isinf(exact)
    # an exact average beyond the dtype's range cannot occur (|mean| <= max |x|), so Inf is exact
    assert np.array_equal(np.isinf(got64), inf_ref), f"Inf at different places {context}\n got {got64}\n ref {exact}"
    assert np.array_equal(got64[inf_ref], exact[inf_ref]), f"Inf signs differ {context}"
    finite = ~(nan_ref | inf_ref)
    with np.errstate(invalid="ignore", over="ignore"):
        tolerance = ulp(exact, got.dtype) + 2.0 * taps * 2.0**-52 * abs_average
        bad = finite & ~(np.abs(got64 - exact) <= tolerance)
    assert not bad.any(), (
        f"{int(bad.sum())} values off {context}\n got {got64[bad][:5]}\n ref {exact[bad][:5]}\n "
        f"tol {tolerance[bad][:5]}"
    )


# Runs every kind of first call and prints, as JSON, how many avgpool kernels numba compiled, a
# digest of results covering every dtype and kernel family, whether numba refreshed its target
# context, and how the entry kernels were loaded.
BATTERY = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    from numba.core import event
    compiled = []
    class Count(event.Listener):
        def on_start(self, ev):
            if ev.data["dispatcher"].py_func.__module__.startswith("avgpool."):
                compiled.append(ev.data["dispatcher"].py_func.__name__)
        def on_end(self, ev):
            pass
    event.register("numba:compile", Count())
    import avgpool, ml_dtypes
    kinds = json.loads(sys.argv[1])
    avgpool.warmup(kinds)
    rng = np.random.default_rng(7)
    digest = hashlib.sha256()
    def add(y):
        digest.update(np.ascontiguousarray(y).tobytes())
    add(avgpool.average_pool(np.linspace(-1, 1, 2 * 3 * 9 * 7).reshape(2, 3, 9, 7), [3, 3], pads=[1] * 4))
    if kinds is None or "float32" in kinds:
        for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
            x = (rng.standard_normal((2, 3, 33, 40)) * 10.0 ** rng.integers(-3, 4, (2, 3, 33, 40))).astype(dtype)
            x.flat[::97] = np.nan
            for k, s, p in ((1, 1, 0), (2, 2, 0), (3, 1, 1), (4, 4, 0), (5, 1, 2), (13, 1, 6), (25, 1, 12), (7, 3, 3)):
                add(avgpool.average_pool(x, [k, k], strides=[s, s], pads=[p] * 4, ceil_mode=True))
                add(avgpool.average_pool(np.moveaxis(x, 1, -1), [k, k], strides=[s, s], pads=[p] * 4, layout="NXC"))
            add(avgpool.average_pool(x, [33, 40]))
            add(avgpool.average_pool(x[:, :, 0], [5]))
            add(avgpool.average_pool(np.ascontiguousarray(x[:, :, :8, :8]).reshape(2, 3, 4, 2, 8), [3, 2, 5]))
        big = rng.standard_normal((2, 16, 128, 128)).astype(np.float32)
        add(avgpool.average_pool(big, [5, 5], pads=[2] * 4))
        add(avgpool.average_pool(big.astype(np.float64), [3, 3]))
    if kinds is None or "qlinear-uint8" in kinds:
        for dtype in (np.uint8, np.int8):
            q = rng.integers(-128 if dtype == np.int8 else 0, 128 if dtype == np.int8 else 256,
                             (2, 4, 9, 11)).astype(dtype)
            for channels_last in (False, True):
                qx = np.ascontiguousarray(np.moveaxis(q, 1, -1)) if channels_last else q
                add(avgpool.qlinear_average_pool(qx, 0.05, 3, 0.07, 2, [3, 3], pads=[1] * 4,
                                                 channels_last=channels_last))
                add(avgpool.qlinear_average_pool(qx, 0.05, 3, 0.07, 2, [9, 11], channels_last=channels_last))
    # numba imports its polynomial implementations only to refresh its whole target context,
    # which compiling needs and loading a compiled kernel does not (avgpool.kernels.jit.KernelCache)
    refreshed = "numba.np.polynomial.polynomial_core" in sys.modules
    print(json.dumps({"compiled": compiled, "digest": digest.hexdigest(), "refreshed": refreshed}))
""")


def run_battery(
    tmp_path: Path, kinds: list[str] | None = None, *, pytest_first: list[str] | None = None, **env: str
) -> dict:
    """Run :data:`BATTERY` in a new process with ``NUMBA_CACHE_DIR`` under ``tmp_path`` and ``env``:
    its JSON, plus its stderr and stdout. ``pytest_first``: pytest's arguments for tests run in that
    same process before the battery (stopping it if they fail), so that the battery reuses the
    kernels they compiled (under NUMBA_OPT=0 numba's cache does not give an entry kernel back to
    another process: a second process compiled them all again, ~100 s)."""
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), **env)
    code = BATTERY
    if pytest_first is not None:
        code = f"import pytest\nstatus = pytest.main({pytest_first!r})\nif status:\n    sys.exit(int(status))\n" + code
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kinds)], env=environment, capture_output=True, text=True, timeout=1500
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]) | {"stderr": result.stderr, "stdout": result.stdout}
