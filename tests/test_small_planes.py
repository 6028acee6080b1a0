"""kernels/small_planes.py: small NCX planes with 3 x 3 "same" windows at stride 1 give the same
bits as the separable passes, on values chosen to expose any change of summation order (signed
zeros, NaN, infinities, magnitudes far apart), and are chosen exactly where tables.small_planes
says."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import avgpool
from avgpool import tables, tuning
from avgpool.api import _validated

SHAPES = [(7, 7), (12, 12), (14, 14), (3, 5), (1, 9), (9, 1), (2, 2), (1, 1), (11, 13)]
KERNELS = [(3, 3), (3, 3), (3, 1), (1, 3), (1, 1), (2, 3)]  # (2, 3): the separable passes, both ways


def _hard_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Values whose sums round differently in another order, with -0.0, NaN and +-Inf."""
    spread = min(30, ml_dtypes.finfo(dtype).maxexp // 3)  # no overflow in float16
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))
    u = rng.random(shape)
    x[u < 0.15] = -0.0
    x[(u > 0.15) & (u < 0.17)] = np.nan
    x[(u > 0.17) & (u < 0.18)] = np.inf
    x[(u > 0.18) & (u < 0.19)] = -np.inf
    return x.astype(dtype)


def _attributes(rng: np.random.Generator, k0: int, k1: int) -> dict:
    mode = rng.integers(3)
    count_include_pad = int(rng.integers(2))
    if mode < 2:
        return dict(kernel_shape=[k0, k1], auto_pad=("SAME_UPPER", "SAME_LOWER")[mode],
                    count_include_pad=count_include_pad)
    begins = [int(rng.integers(k)) for k in (k0, k1)]  # any split of k - 1 pads keeps the size
    return dict(kernel_shape=[k0, k1], pads=[*begins, k0 - 1 - begins[0], k1 - 1 - begins[1]],
                count_include_pad=count_include_pad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16],
                         ids=["float32", "float64", "float16", "bfloat16"])
def test_small_planes_give_the_bits_of_the_separable_passes(dtype):
    rng = np.random.default_rng(7)
    cases = 0
    for shape in SHAPES:
        for k0, k1 in KERNELS:
            x = _hard_values(rng, (2, int(rng.integers(1, 40)), *shape), np.dtype(dtype))
            attrs = _attributes(rng, min(k0, shape[0] + 2), min(k1, shape[1] + 2))
            small = avgpool.average_pool(x, **attrs)
            with tuning.tuned(small_plane_values=0):
                separable = avgpool.average_pool(x, **attrs)
            assert np.array_equal(small.view(np.uint8), separable.view(np.uint8)), (shape, attrs)
            cases += 1
    assert cases == len(SHAPES) * len(KERNELS)


def test_threads_split_small_planes_anywhere():
    # 1x1024x7x7 is shared between threads: every piece boundary falls inside a block of planes
    rng = np.random.default_rng(3)
    x = _hard_values(rng, (3, 700, 7, 7), np.dtype(np.float32))
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    pooled = avgpool.average_pool(x, **attrs)
    one_plane_at_a_time = np.stack([avgpool.average_pool(x[:, c:c + 1], **attrs)[:, 0] for c in range(700)], axis=1)
    assert np.array_equal(pooled.view(np.uint32), one_plane_at_a_time.view(np.uint32))


@pytest.mark.parametrize(("shape", "attrs", "expected"), [
    ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
    ((1, 8, 12, 12), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER"), True),
    ((1, 8, 9, 16), dict(kernel_shape=[1, 3], pads=[0, 1, 0, 1]), True),
    ((1, 8, 9, 16), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 1]), False),  # 2 taps: no middle tap
    ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[0, 0, 2, 2]), False),  # windows that start at their output
    ((1, 8, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), True),
    ((1, 8, 15, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), False),  # 210 values: too big a plane
    ((1, 8, 7, 7), dict(kernel_shape=[3, 3]), False),  # the output is smaller than the input
    ((1, 8, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), False),
    ((1, 8, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], dilations=[2, 2]), False),
    ((1, 8, 7, 7), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]), False),
    ((1, 8, 7), dict(kernel_shape=[3], pads=[1, 1]), False),  # 1-D
    ((1, 8, 0, 7), dict(kernel_shape=[1, 3], pads=[0, 1, 0, 1]), False),  # empty planes
])
def test_which_inputs_take_the_small_plane_kernel(shape, attrs, expected):
    defaults = dict(strides=None, pads=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None)
    _, spec, _ = _validated(np.zeros(shape, np.float32), 22, opset=22, layout="NCX", **{**defaults, **attrs})
    found = tables.kernel_tables(spec, shape[2:], 1)
    assert bool((found.axes[:, 8] >= 0).all()) is expected
