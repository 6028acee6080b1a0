"""kernels/separable.py's fused passes (channels-last planes whose windows take at most three taps
per axis and do not overlap along the second axis: tables.fuses_passes) give the results of the
two separate passes, on values chosen to expose any change of summation order (signed zeros,
NaN, infinities, magnitudes far apart): the same bits wherever the result is not NaN, NaN in the
same windows; threaded (parts of a slab) as serial."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_small_planes import _hard_values, _same_results

import avgpool
from avgpool._core import engine, tuning
from avgpool._core.spec import Layout
from avgpool._ops import onnx as onnx_dialect
from avgpool.kernels import columns

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def _random_case(rng: np.random.Generator) -> tuple[tuple[int, ...], dict]:
    """A channels-last input and attributes whose windows the fused passes take (clipped ones,
    windows of no valid tap, dilations and ceil_mode included)."""
    kernel = [int(rng.integers(1, 4)), int(rng.integers(1, 3))]
    dilations = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    strides = [int(rng.integers(1, 4)), extents[1] + int(rng.integers(0, 2))]
    pads = [int(rng.integers(0, e)) for e in extents] + [int(rng.integers(0, e)) for e in extents]
    spatial = [int(rng.integers(max(1, extents[a]), 30)) for a in range(2)]
    shape = (int(rng.integers(1, 3)), *spatial, int(rng.choice([16, 24, 40])))
    return shape, dict(
        kernel_shape=kernel,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=int(rng.integers(2)),
        count_include_pad=int(rng.integers(2)),
        layout="NXC",
    )


def _fused(shape: tuple[int, ...], dtype: np.dtype, attrs: dict) -> bool:
    onnx_attrs = {k: v for k, v in attrs.items() if k != "layout"}
    spec = onnx_dialect.make_spec(22, (shape[0], shape[-1], *shape[1:-1]), **onnx_attrs)
    prepared = engine.prepare(spec, shape, dtype, Layout.NXC)
    return bool(prepared.kernel_args[0].axes[0, columns.FUSED])


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64", "float16", "bfloat16"])
def test_fused_passes_give_the_results_of_the_two_passes(dtype):
    rng = np.random.default_rng(23)
    dtype = np.dtype(dtype)
    for _ in range(40):
        shape, attrs = _random_case(rng)
        x = _hard_values(rng, shape, dtype)
        assert _fused(shape, dtype, attrs), (shape, attrs)
        fused = avgpool.average_pool(x, **attrs)
        with tuning.tuned(parallel_min_elements=1, many_pieces_elements=1):  # parts of slabs on threads
            shared = avgpool.average_pool(x, **attrs)
        with tuning.tuned(fused_min_channels=1 << 30):
            assert not _fused(shape, dtype, attrs)
            passes = avgpool.average_pool(x, **attrs)
        assert _same_results(fused, passes), (shape, attrs)
        assert _same_results(shared, passes), (shape, attrs)


@pytest.mark.parametrize(
    ("shape", "attrs", "fused"),
    [
        ((1, 8, 8, 16), dict(kernel_shape=[2, 2], strides=[2, 2]), True),  # DenseNet's transitions
        ((1, 8, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), False),  # too few channels
        ((1, 8, 8, 16), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), False),  # overlapping columns
        ((1, 8, 8, 16), dict(kernel_shape=[3, 3], strides=[1, 3]), True),  # rows may overlap
        ((1, 8, 8, 16), dict(kernel_shape=[4, 4], strides=[4, 4]), False),  # four taps
        ((1, 8, 8, 16), dict(kernel_shape=[8, 8]), False),  # a global window: one sum per channel
        ((1, 8, 8, 8, 16), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), False),  # volumes: three passes
    ],
)
def test_the_passes_fuse_only_where_the_rule_says(shape, attrs, fused):
    assert _fused(shape, np.dtype(np.float32), attrs) == fused
