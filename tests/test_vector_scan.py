"""The eight-lane window sums (kernels/vector_scan.py, used by kernels/running.py): LLVM IR that
numba's bounds checking cannot see into, so these tests also watch the memory just past the
buffers the callers size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from avgpool._core import tables
from avgpool.kernels.running import _line_window_sums, _scale_line
from avgpool.kernels.vector_scan import LANES

CANARY = -0x5A5A5A5A5A5A5A5A


@given(n_out=st.integers(1, 70), k=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_line_window_sums_match_numpy_and_stay_in_their_buffers(n_out, k, seed):
    rng = np.random.default_rng(seed)
    line_size, sums_size = n_out + k + LANES - 1, n_out + LANES - 1  # the documented minimum
    backing = np.full(line_size + 16, CANARY, np.int64)
    line = backing[:line_size]
    line[:] = rng.integers(-(1 << 40), 1 << 40, line_size)
    sums_backing = np.full(sums_size + 16, CANARY, np.int64)
    sums = sums_backing[:sums_size]
    _line_window_sums(line, n_out, k, sums)
    expected = np.convolve(line[: n_out + k - 1], np.ones(k, np.int64), mode="valid")
    assert np.array_equal(sums[:n_out], expected)
    assert (backing[line_size:] == CANARY).all() and (sums_backing[sums_size:] == CANARY).all()


@pytest.mark.parametrize("k", [1, 8, 31])
def test_line_window_sums_are_exact_where_float64_sums_are_not(k):
    """Integers near 2**62 (in int64 the running sums wrap nowhere: the windows fit)."""
    n_out = 40
    line = np.zeros(n_out + k + LANES - 1, np.int64)
    line[: n_out + k - 1] = (1 << 56) + np.arange(n_out + k - 1)
    sums = np.zeros(n_out + LANES - 1, np.int64)
    _line_window_sums(line, n_out, k, sums)
    starts = np.arange(n_out)
    expected = [k * (1 << 56) + sum(range(s, s + k)) for s in starts]
    assert sums[:n_out].tolist() == expected


def test_window_sums_become_float64_as_numpy_converts_them():
    """_scale_line's int64 -> float64 conversion is vector code of its own (running._to_double):
    every int64 rounds as numpy rounds it, ties to even included, at every magnitude and sign."""
    edges = [0, 1, -1, (1 << 63) - 1, -(1 << 63)]
    for bits in range(30, 63):
        for k in range(-3, 4):
            edges += [(1 << bits) + k, -(1 << bits) + k]
    ties = []
    for bits in range(54, 63):  # halfway between two float64 neighbours, and one unit either side
        step = 1 << (bits - 52)
        for m in (1, 2, 3, (1 << 52) - 1):
            tie = (1 << bits) + m * step + step // 2
            ties += [tie - 1, tie, tie + 1, -tie + 1, -tie, -tie - 1]
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 64, 200_000)
    random = rng.integers(-(1 << 62), 1 << 62, 200_000, dtype=np.int64) >> (62 - lengths)
    sums = np.concatenate([np.array(edges + ties, np.int64), random])
    out = np.zeros(sums.size + 3)
    _scale_line(sums, out, 3, sums.size, 1.0, np.ones(sums.size + 5), 5)
    assert np.array_equal(out[3:].view(np.uint64), sums.astype(np.float64).view(np.uint64))
    assert (out[:3] == 0).all()


@pytest.mark.parametrize("size, first", [(1, 0), (300, 0), (300, 15), (37, 7), (8, 8)])
def test_exact_scratch_starts_its_chosen_element_on_a_cache_line(size, first):
    """The exact kernel's lines are allocated so that element ``first`` (where the vertical step
    writes) starts a 64-byte line: the allocator alone gives 32-byte alignment."""
    from avgpool.kernels.running import _cache_aligned

    for _ in range(4):  # allocations land at either 32-byte phase
        scratch = _cache_aligned(size, first)
        assert scratch.shape == (size,) and scratch.dtype == np.int64
        assert (scratch.ctypes.data + 8 * first) % 64 == 0


def test_scale_tables_start_on_a_cache_line():
    from avgpool._core.plan import make_plan
    from avgpool._ops import onnx as onnx_dialect

    shape = (1, 3, 37, 29)
    spec = onnx_dialect.make_spec(22, shape, [5, 3], pads=[2, 1, 2, 1])
    found = tables.kernel_tables(spec, shape[2:], 1)
    assert found.scales.ctypes.data % 64 == 0  # the exact kernel reads NCX's last-axis scales from here
    assert np.array_equal(found.scales, tables.divisor_scales(make_plan(spec, shape[2:])))  # the same values
