"""avgpool.torch against the real torch (CPU) and against a slow, obviously correct twin: the
windows of torch's rules summed in float64 per window (math.fsum), divided and rounded once.

Random configurations cover every argument, every dtype, batched and unbatched inputs,
channels-last memory, NaN and Inf; the refusals are compared with torch's, call by call."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import avgpool
import avgpool.torch as at
from avgpool._ops.block_mean import round_to
from tests.helpers import ulp

torch = pytest.importorskip("torch")
F = torch.nn.functional

BF16 = np.dtype(ml_dtypes.bfloat16)
TORCH_DTYPES = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    BF16: torch.bfloat16,
}
POOLS = {1: (at.avg_pool1d, F.avg_pool1d), 2: (at.avg_pool2d, F.avg_pool2d), 3: (at.avg_pool3d, F.avg_pool3d)}
ADAPTIVE = {
    1: (at.adaptive_avg_pool1d, F.adaptive_avg_pool1d),
    2: (at.adaptive_avg_pool2d, F.adaptive_avg_pool2d),
    3: (at.adaptive_avg_pool3d, F.adaptive_avg_pool3d),
}


# ------------------------------------------------------------------------------ the slow twin


def torch_windows(length, k, s, p, ceil, include_pad):
    """Per output along one axis: (valid taps, divisor) by torch's CPU kernel's rule."""
    out = (length + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= length + p:
        out -= 1
    windows = []
    for o in range(out):
        start = o * s - p
        end = min(start + k, length + p)
        size = end - start
        taps = list(range(max(start, 0), min(end, length)))
        windows.append((taps, size if include_pad else len(taps)))
    return windows


def adaptive_windows(length, out):
    bounds = [((i * length) // out, -(-(i + 1) * length // out)) for i in range(out)]
    return [(list(range(start, end)), end - start) for start, end in bounds]


def reference(x, axes_windows, override=None):
    """The exact average of each window (``x`` batched, N x C x spatial, any float dtype), rounded
    once to x's dtype, and the sum of |x| / |divisor| over each window times its taps (what a
    sum's rounding errors are bounded by, in units of the accumulator's epsilon)."""
    x64 = x.astype(np.float64)
    outs = [len(w) for w in axes_windows]
    result = np.empty(x.shape[:2] + tuple(outs))
    magnitude = np.empty_like(result)
    taps = np.empty_like(result)
    for index in itertools.product(*(range(o) for o in outs)):
        chosen = [axes_windows[a][o] for a, o in enumerate(index)]
        block = x64[(slice(None), slice(None), *np.ix_(*[taps for taps, _ in chosen]))]
        block = block.reshape(x.shape[0], x.shape[1], math.prod(len(taps) for taps, _ in chosen))
        divisor = override if override is not None else math.prod(d for _, d in chosen)
        with np.errstate(invalid="ignore"):
            sums = np.array([[_exact_sum(row) for row in plane] for plane in block]).reshape(x.shape[:2])
            result[(slice(None), slice(None), *index)] = sums / divisor
            magnitude[(slice(None), slice(None), *index)] = np.abs(block).sum(axis=-1) / abs(divisor)
            taps[(slice(None), slice(None), *index)] = block.shape[-1]
    return round_to(result, x.dtype), magnitude * np.maximum(taps, 1)


def _exact_sum(values):
    if np.all(np.isfinite(values)):
        return math.fsum(values.tolist())
    return float(np.sum(values))  # NaN, or Inf of one sign, or +Inf + -Inf = NaN


def assert_exact(got, exact, bound, context):
    """``got`` is the exact average rounded once: within one ulp of the rounded exact value, plus
    what its float64 sums can lose before that rounding (``bound`` * 2**-52, semantics 1.4)."""
    got64, ref = np.asarray(got).astype(np.float64), exact.astype(np.float64)
    assert got64.shape == ref.shape, context
    assert np.array_equal(np.isnan(got64), np.isnan(ref)), f"NaN differ {context}\n{got64}\n{ref}"
    finite = np.isfinite(ref)
    assert np.array_equal(got64[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)]), context
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(got64 - ref) <= ulp(ref, np.asarray(got).dtype) + 2.0**-51 * bound)
    assert not bad.any(), f"{context}\n got {got64[bad][:5]}\n ref {ref[bad][:5]}"


def assert_torch_close(ours, theirs, magnitude, dtype, context):
    """torch's float32 (or, for 16-bit inputs, float32-then-rounded) sums: within its
    accumulation's error of the exact average."""
    ours64 = np.asarray(ours).astype(np.float64)
    theirs64 = theirs.detach().to(torch.float64).numpy()
    assert ours64.shape == theirs64.shape, context
    assert np.array_equal(np.isnan(ours64), np.isnan(theirs64)), f"NaN differ {context}"
    finite = np.isfinite(ours64) & np.isfinite(theirs64)
    assert np.array_equal(ours64[~finite & ~np.isnan(ours64)], theirs64[~finite & ~np.isnan(ours64)]), context
    # torch sums float32 in float32, and some of its 16-bit kernels in their own dtype
    eps = {np.dtype(np.float64): 2.0**-52, np.dtype(np.float32): 2.0**-23, np.dtype(np.float16): 2.0**-10}
    with np.errstate(invalid="ignore"):
        tolerance = 2 * ulp(ours64, dtype) + 2 * eps.get(dtype, 2.0**-7) * magnitude
        bad = finite & ~(np.abs(ours64 - theirs64) <= tolerance)
    assert not bad.any(), f"{context}\n ours {ours64[bad][:5]}\n torch {theirs64[bad][:5]}"


def random_input(rng, shape, dtype, specials):
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3)
    if specials and x.size:
        flat = x.reshape(-1)
        for value in (np.nan, np.inf, -np.inf):
            if rng.random() < 0.5:
                flat[rng.integers(flat.size)] = value
    return x.astype(dtype)


def as_tensor(x, channels_last):
    t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if x.dtype == BF16 else torch.from_numpy(x)
    if channels_last:
        t = t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


def numpy_view(t):
    return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()


def torch_supports(n, dtype):
    return not (n == 3 and dtype in (np.float16, BF16))  # torch's CPU avg_pool3d lacks 16-bit floats


# ------------------------------------------------------------------------------ forward


def pool_config(rng, n):
    k = tuple(int(v) for v in rng.integers(1, 5, n))
    s = tuple(int(v) for v in rng.integers(1, 4, n))
    p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
    # avg_pool3d wants the kernel within the input itself, the others within the padded input
    lengths = tuple(int(max(kk - (0 if n == 3 else 2 * pp), 1) + rng.integers(0, 6)) for kk, pp in zip(k, p))
    return k, s, p, lengths


@pytest.mark.parametrize("n", [1, 2, 3])
def test_avg_pool_random(n):
    rng = np.random.default_rng(n)
    ours, theirs = POOLS[n]
    for case in range(120 if n < 3 else 60):
        k, s, p, lengths = pool_config(rng, n)
        dtype = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16][case % 4]
        ceil, include_pad = bool(rng.integers(2)), bool(rng.integers(2))
        override = int(rng.choice([-3, 1, 2, 7])) if n > 1 and rng.random() < 0.25 else None
        batch = int(rng.integers(0, 3)) if rng.random() < 0.8 else None  # None: unbatched
        shape = ((batch,) if batch is not None else ()) + (int(rng.integers(1, 4)),) + lengths
        x = random_input(rng, shape, dtype, specials=rng.random() < 0.3)
        channels_last = batch is not None and n > 1 and rng.random() < 0.4
        scalar = rng.random() < 0.3  # kernel_size etc. as ints where they are all equal
        kw = dict(
            kernel_size=k[0] if scalar and len(set(k)) == 1 else k,
            stride=None if rng.random() < 0.2 else s,
            padding=p[0] if scalar and len(set(p)) == 1 else p,
            ceil_mode=ceil,
            count_include_pad=include_pad,
        )
        if override is not None:
            kw["divisor_override"] = override
        context = f"{n}d {shape} {dtype} {kw} channels_last={channels_last}"
        stride = k if kw["stride"] is None else s
        windows = [torch_windows(L, kk, ss, pp, ceil, include_pad) for L, kk, ss, pp in zip(lengths, k, stride, p)]
        t = as_tensor(x, channels_last)
        got = ours(t, **kw)
        assert isinstance(got, torch.Tensor) and got.dtype == t.dtype, context
        if channels_last and got.numel():
            form = torch.channels_last if n == 2 else torch.channels_last_3d
            assert got.is_contiguous(memory_format=form), context
        got_np = numpy_view(got)
        assert np.array_equal(ours(numpy_view(t), **kw), got_np, equal_nan=True), context  # numpy in: same bits
        batched = x if batch is not None else x[None]
        exact, magnitude = reference(batched, windows, override)
        if batch is None:
            exact, magnitude = exact[0], magnitude[0]
        assert_exact(got_np, exact, magnitude, context)
        if torch_supports(n, dtype):
            expected = theirs(t, **kw)
            assert tuple(expected.shape) == got_np.shape, context
            assert_torch_close(got_np, expected, magnitude, dtype, context)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_adaptive_random(n):
    rng = np.random.default_rng(10 + n)
    ours, theirs = ADAPTIVE[n]
    for case in range(100 if n < 3 else 50):
        dtype = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16][case % 4]
        lengths = tuple(int(v) for v in rng.integers(1, 13, n))
        sizes = [int(rng.integers(0, 2 * L + 1)) if rng.random() < 0.9 else L for L in lengths]
        if rng.random() < 0.3:  # divisors of the length: average_pool's pool
            sizes = [int(rng.choice([d for d in range(1, L + 1) if L % d == 0])) for L in lengths]
        output_size = tuple(None if n > 1 and rng.random() < 0.15 else o for o in sizes)
        outs = tuple(L if o is None else o for L, o in zip(lengths, output_size))
        arg = output_size[0] if n == 1 and rng.random() < 0.5 else output_size
        batch = int(rng.integers(1, 3)) if rng.random() < 0.8 else None
        shape = ((batch,) if batch is not None else ()) + (int(rng.integers(1, 4)),) + lengths
        x = random_input(rng, shape, dtype, specials=rng.random() < 0.3)
        channels_last = batch is not None and n > 1 and rng.random() < 0.4
        context = f"{n}d {shape} {dtype} output_size={arg} channels_last={channels_last}"
        t = as_tensor(x, channels_last)
        got = ours(t, arg)
        assert got.dtype == t.dtype, context
        got_np = numpy_view(got)
        assert np.array_equal(ours(numpy_view(t), arg), got_np, equal_nan=True), context
        windows = [adaptive_windows(L, o) for L, o in zip(lengths, outs)]
        batched = x if batch is not None else x[None]
        exact, magnitude = reference(batched, windows)
        if batch is None:
            exact, magnitude = exact[0], magnitude[0]
        assert_exact(got_np, exact, magnitude, context)
        if all(o > 0 and L % o == 0 for L, o in zip(lengths, outs)):  # bit for bit average_pool's
            kernel = [L // o for L, o in zip(lengths, outs)]
            if channels_last:  # pooled channels-last, as average_pool pools a channels-last tensor
                moved = np.moveaxis(numpy_view(t), 1, -1)
                same = np.moveaxis(avgpool.average_pool(moved, kernel, strides=kernel, layout="NXC"), -1, 1)
            else:
                same = avgpool.average_pool(batched, kernel, strides=kernel)
            assert np.array_equal(same if batch is not None else same[0], got_np, equal_nan=True), context
        expected = theirs(t, arg)
        assert tuple(expected.shape) == got_np.shape, context
        assert_torch_close(got_np, expected, magnitude, dtype, context)


def test_float32_sums_that_overflow_in_torch():
    x = torch.full((1, 1, 2, 2), 3e38)
    assert torch.isinf(F.avg_pool2d(x, 2)).all()
    assert at.avg_pool2d(x, 2).item() == np.float32(3e38)
    assert at.adaptive_avg_pool2d(x, 1).item() == np.float32(3e38)


def test_cancellation_is_exact():
    x = torch.tensor([[[1e8, 1.0, -1e8, 1.0]]])
    assert at.avg_pool1d(x, 4).item() == 0.5
    assert at.adaptive_avg_pool1d(x, 1).item() == 0.5


# ------------------------------------------------------------------------------ refusals


def refused(call):
    try:
        call()
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as err:
        return err
    return None


REFUSALS = [
    # (function dimension, input shape, arguments, the argument the message names)
    (2, (1, 1, 5, 5), dict(kernel_size=3, padding=2), "padding"),
    (2, (1, 1, 5, 5), dict(kernel_size=0), "kernel_size"),
    (2, (1, 1, 5, 5), dict(kernel_size=3, stride=0), "stride"),
    (2, (1, 1, 5, 5), dict(kernel_size=3, padding=-1), "padding"),
    (2, (1, 1, 5, 5), dict(kernel_size=7), "kernel_size"),
    (2, (1, 1, 5, 5), dict(kernel_size=(3, 3, 3)), "kernel_size"),
    (2, (1, 1, 5, 5), dict(kernel_size=3, divisor_override=0), "divisor_override"),
    (2, (1, 1, 5, 5), dict(kernel_size=3, divisor_override=2.5), "divisor_override"),
    (2, (5, 5), dict(kernel_size=3), "input"),
    (2, (1, 1, 1, 5, 5), dict(kernel_size=3), "input"),
    (2, (1, 0, 5, 5), dict(kernel_size=3), "input"),
    (2, (1, 1, 5, 5), dict(kernel_size=3.0), "kernel_size"),
    (2, (1, 1, 5, 5), dict(kernel_size=3, ceil_mode=1), "ceil_mode"),
    (2, (1, 1, 5, 5), dict(kernel_size=True), "kernel_size"),
    (1, (1, 5, 5, 5), dict(kernel_size=3), "input"),
    (1, (1, 5), dict(kernel_size=(3, 3)), "kernel_size"),
    (1, (1, 5), dict(kernel_size=6), "kernel_size"),
    (3, (1, 5, 5), dict(kernel_size=2), "input"),
    (3, (1, 1, 4, 4, 4), dict(kernel_size=2, padding=(1, 2, 1)), "padding"),
]


@pytest.mark.parametrize("n, shape, kw, name", REFUSALS)
def test_refusals_are_torch_s(n, shape, kw, name):
    x = torch.zeros(shape)
    ours, theirs = POOLS[n]
    assert refused(lambda: theirs(x, **kw)) is not None
    with pytest.raises(avgpool.AvgPoolError, match=f"avg_pool{n}d: .*{name}"):
        ours(x, **kw)


ADAPTIVE_REFUSALS = [
    (2, (1, 1, 5, 5), -1, "output_size"),
    (2, (1, 1, 5, 5), (2, 3, 4), "output_size"),
    (1, (1, 5), None, "output_size"),
    (1, (1, 5), (2, 2), "output_size"),
    (1, (1, 1, 5, 5), 2, "input"),
    (2, (1, 1, 0, 5), 2, "input"),
    (3, (1, 1, 5), 2, "input"),
]


@pytest.mark.parametrize("n, shape, size, name", ADAPTIVE_REFUSALS)
def test_adaptive_refusals_are_torch_s(n, shape, size, name):
    x = torch.zeros(shape)
    ours, theirs = ADAPTIVE[n]
    assert refused(lambda: theirs(x, size)) is not None
    with pytest.raises(avgpool.AvgPoolError, match=f"adaptive_avg_pool{n}d: .*{name}"):
        ours(x, size)


#: Arguments of the wrong Python type: torch raises a TypeError, and so does avgpool (an
#: AvgPoolTypeError, both an AvgPoolError and a TypeError) naming the function, the argument and
#: the value. (function, input shape, arguments, the argument named)
BAD_TYPES = [
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size="3"), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3.5), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3.0), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=None), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=True), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size={3: 1}), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size={3}), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=(3, 2.0)), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=torch.tensor(3.0)), "kernel_size"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, stride=[2.0]), "stride"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, stride="2"), "stride"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, padding=1.0), "padding"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, padding=None), "padding"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, padding="same"), "padding"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, ceil_mode="yes"), "ceil_mode"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, ceil_mode=1), "ceil_mode"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, ceil_mode=None), "ceil_mode"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, count_include_pad="no"), "count_include_pad"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, count_include_pad=0), "count_include_pad"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, divisor_override=1.5), "divisor_override"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, divisor_override=2.0), "divisor_override"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, divisor_override="2"), "divisor_override"),
    ("avg_pool2d", (1, 1, 6, 6), dict(kernel_size=3, divisor_override=True), "divisor_override"),
    ("avg_pool1d", (1, 1, 6), dict(kernel_size="3"), "kernel_size"),
    ("avg_pool1d", (1, 1, 6), dict(kernel_size=3.5), "kernel_size"),
    ("avg_pool1d", (1, 1, 6), dict(kernel_size=3, ceil_mode="yes"), "ceil_mode"),
    ("avg_pool3d", (1, 1, 4, 4, 4), dict(kernel_size=2.0), "kernel_size"),
    ("avg_pool3d", (1, 1, 4, 4, 4), dict(kernel_size=2, divisor_override=1.5), "divisor_override"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size="7"), "output_size"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size=7.0), "output_size"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size=(7.0, 7)), "output_size"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size=None), "output_size"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size=True), "output_size"),
    ("adaptive_avg_pool2d", (1, 1, 6, 6), dict(output_size=(2, "3")), "output_size"),
    ("adaptive_avg_pool1d", (1, 1, 6), dict(output_size="7"), "output_size"),
    ("adaptive_avg_pool1d", (1, 1, 6), dict(output_size=3.0), "output_size"),
    ("adaptive_avg_pool3d", (1, 1, 4, 4, 4), dict(output_size=(2, 2, 2.0)), "output_size"),
]
#: Inputs that are not arrays: torch's TypeError (its adaptive pools' Python wrapper fails on
#: them with an AttributeError first); avgpool's AvgPoolTypeError names `input` and the type.
BAD_INPUTS = [[[[[1.0, 2.0], [3.0, 4.0]]]], (1.0, 2.0), 3, 2.5, None, "abc"]


def _torch_function(name):
    return getattr(F, name)


@pytest.mark.parametrize("function, shape, kw, name", BAD_TYPES)
def test_wrong_python_types_are_type_errors(function, shape, kw, name):
    x = torch.zeros(shape)
    assert isinstance(refused(lambda: _torch_function(function)(x, **kw)), TypeError)
    for given in (x, x.numpy()):  # the same refusal for a tensor and a numpy array
        with pytest.raises(avgpool.AvgPoolTypeError) as caught:
            getattr(at, function)(given, **kw)
        message = str(caught.value)
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, avgpool.AvgPoolError)
        assert message.startswith(f"{function}: `{name}`"), message
        assert repr(kw[name]) in message and type(kw[name]).__name__ in message, message


@pytest.mark.parametrize("function", ["avg_pool2d", "adaptive_avg_pool2d"])
@pytest.mark.parametrize("given", BAD_INPUTS, ids=lambda v: type(v).__name__)
def test_inputs_that_are_not_arrays_are_type_errors(function, given):
    argument = 2 if function == "avg_pool2d" else 1
    with pytest.raises((TypeError, AttributeError)):
        _torch_function(function)(given, argument)
    with pytest.raises(avgpool.AvgPoolTypeError, match=f"^{function}: `input` must be .*, got {type(given).__name__}$"):
        getattr(at, function)(given, argument)


#: Values of the right type that no pool has: an AvgPoolError that is not a TypeError (torch's
#: are ValueErrors or RuntimeErrors: overflow). (function, arguments, the argument named)
BAD_VALUES = [
    ("avg_pool2d", dict(kernel_size=2**63), "kernel_size"),
    ("avg_pool2d", dict(kernel_size=3, stride=2**63), "stride"),
    ("avg_pool2d", dict(kernel_size=(3, 2**62)), "kernel_size"),
    ("avg_pool2d", dict(kernel_size=3, divisor_override=2**70), "divisor_override"),
    ("adaptive_avg_pool2d", dict(output_size=2**63), "output_size"),
    ("adaptive_avg_pool2d", dict(output_size=(2**36, 1)), "output_size"),  # beyond memory: refused, not built
]


@pytest.mark.parametrize("function, kw, name", BAD_VALUES)
def test_bad_values_are_avgpool_errors(function, kw, name):
    x = torch.zeros(1, 1, 6, 6)
    if kw.get("output_size") != (2**36, 1):  # torch would try to allocate its 256 GiB
        error = refused(lambda: _torch_function(function)(x, **kw))
        assert error is not None and not isinstance(error, TypeError)
    with pytest.raises(avgpool.AvgPoolError, match=f"^{function}: .*`{name}`") as caught:
        getattr(at, function)(x, **kw)
    assert not isinstance(caught.value, TypeError)


#: Ints as torch reads them (numpy ints, one-element integer tensors, lists, torch.Size, an empty
#: stride): the shape of torch's result. (function, arguments)
INTS_AS_TORCH_READS_THEM = [
    ("avg_pool2d", dict(kernel_size=np.int64(3))),
    ("avg_pool2d", dict(kernel_size=[3, 2])),
    ("avg_pool2d", dict(kernel_size=torch.tensor(3))),
    ("avg_pool2d", dict(kernel_size=torch.tensor([3]))),
    ("avg_pool2d", dict(kernel_size=(torch.tensor(3), np.int32(2)))),
    ("avg_pool2d", dict(kernel_size=torch.Size([3, 3]), stride=())),
    ("avg_pool2d", dict(kernel_size=3, stride=[], divisor_override=np.int64(2))),
    ("adaptive_avg_pool2d", dict(output_size=[None, 3])),
    ("adaptive_avg_pool2d", dict(output_size=torch.Size([2, 4]))),
]


@pytest.mark.parametrize("function, kw", INTS_AS_TORCH_READS_THEM)
def test_ints_as_torch_reads_them(function, kw):
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    expected = _torch_function(function)(x, **kw)
    got = getattr(at, function)(x, **kw)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


def test_random_geometries_refused_exactly_where_torch_refuses():
    rng = np.random.default_rng(5)
    for _ in range(150):
        n = int(rng.integers(1, 4))
        k = tuple(int(v) for v in rng.integers(-1, 6, n))
        s = tuple(int(v) for v in rng.integers(0, 4, n))
        p = tuple(int(v) for v in rng.integers(-1, 4, n))
        shape = (1, 2) + tuple(int(v) for v in rng.integers(1, 6, n))
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=bool(rng.integers(2)))
        ours, theirs = POOLS[n]
        x = torch.zeros(shape, dtype=torch.float64)
        theirs_error = refused(lambda: theirs(x, **kw))
        ours_error = refused(lambda: ours(x, **kw))
        assert (theirs_error is None) == (ours_error is None), f"{n}d {shape} {kw}: {theirs_error} / {ours_error}"
        assert ours_error is None or isinstance(ours_error, avgpool.AvgPoolError)
        if ours_error is None:
            assert tuple(ours(x, **kw).shape) == tuple(theirs(x, **kw).shape)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_tensors_are_refused(dtype):
    with pytest.raises(avgpool.AvgPoolError, match="integer"):
        at.avg_pool2d(torch.zeros((1, 1, 4, 4), dtype=dtype), 2)
    with pytest.raises(avgpool.AvgPoolError, match="integer"):
        at.adaptive_avg_pool2d(np.zeros((1, 1, 4, 4), np.int64), 2)


def test_other_devices_are_refused():
    x = torch.zeros((1, 1, 4, 4), device="meta")
    with pytest.raises(avgpool.AvgPoolError, match="only CPU memory"):
        at.avg_pool2d(x, 2)


def test_numpy_in_numpy_out_and_the_input_unchanged():
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    before = x.copy()
    y = at.avg_pool2d(x, 3, 1, 1)
    assert type(y) is np.ndarray and y.dtype == np.float32
    np.testing.assert_allclose(y, F.avg_pool2d(torch.from_numpy(x), 3, 1, 1).numpy(), rtol=1e-6, atol=1e-6)
    assert np.array_equal(x, before)


def test_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, avgpool.torch\n"
        "print(avgpool.torch.adaptive_avg_pool2d(np.ones((1, 1, 4, 4)), 2).sum())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "4.0"


# ------------------------------------------------------------------------------ gradients


def exact_gradient(x_shape, axes_windows, grad, override=None):
    """Each input position: the exact sum of grad / divisor over the windows that hold it (as
    Fractions: math.fsum of the rounded float64 quotients is not exact where they cancel),
    rounded once to float64."""
    terms = {}
    outs = [len(w) for w in axes_windows]
    for index in itertools.product(*(range(o) for o in outs)):
        chosen = [axes_windows[a][o] for a, o in enumerate(index)]
        divisor = override if override is not None else math.prod(d for _, d in chosen)
        for position in itertools.product(*[taps for taps, _ in chosen]):
            terms.setdefault(position, []).append((index, divisor))
    result = np.zeros(x_shape)
    for position, windows in terms.items():
        for b in range(x_shape[0]):
            for c in range(x_shape[1]):
                result[(b, c, *position)] = float(sum(Fraction(float(grad[(b, c, *i)])) / d for i, d in windows))
    return result


def assert_gradient(grad, exact, context):
    """Gradients of every dtype: within 1 ulp of the exact adjoint rounded to the dtype (one
    rounding of a double-double sum: 1 ulp only where the exact value is within 2**-100 of a
    midpoint)."""
    got = grad.to(torch.float64).numpy()
    dtype = np.dtype(np.float64) if grad.dtype == torch.float64 else np.dtype(np.float32)
    rounded = exact.astype(dtype).astype(np.float64)
    bad = ~(np.abs(got - rounded) <= ulp(rounded, dtype))
    assert not bad.any(), f"{context}\n got {got[bad][:5]}\n exact {rounded[bad][:5]}"


GRADIENT_CASES = [
    (2, (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    (2, (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)),
    (2, (1, 2, 6, 6), dict(kernel_size=2, divisor_override=3)),
    (1, (2, 9), dict(kernel_size=4, stride=1, padding=2)),
    (3, (1, 2, 5, 4, 5), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True)),
]


@pytest.mark.parametrize("n, shape, kw", GRADIENT_CASES)
def test_gradients(n, shape, kw):
    ours, theirs = POOLS[n]
    rng = np.random.default_rng(1)
    for dtype in (torch.float64, torch.float32):
        x = torch.from_numpy(rng.standard_normal(shape)).to(dtype).requires_grad_()
        y = ours(x, **kw)
        assert y.grad_fn is not None
        g = torch.from_numpy(rng.standard_normal(tuple(y.shape))).to(dtype)
        (grad,) = torch.autograd.grad(y, x, g)
        xt = x.detach().clone().requires_grad_()
        (expected,) = torch.autograd.grad(theirs(xt, **kw), xt, g)
        batched = len(shape) == n + 2
        x_shape = shape if batched else (1, *shape)
        stride = kw.get("stride") or kw["kernel_size"]
        args = [
            _per_axis(kw["kernel_size"], n),
            _per_axis(stride, n),
            _per_axis(kw.get("padding", 0), n),
        ]
        windows = [
            torch_windows(L, k, s, p, kw.get("ceil_mode", False), kw.get("count_include_pad", True))
            for L, k, s, p in zip(x_shape[2:], *args)
        ]
        g_np = g.numpy() if batched else g.numpy()[None]
        exact = exact_gradient(x_shape, windows, g_np, kw.get("divisor_override"))
        assert_gradient(grad, exact if batched else exact[0], f"{dtype} {kw}")
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)
    x = torch.from_numpy(rng.standard_normal(shape)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: ours(t, **kw), (x,))
    assert torch.autograd.gradgradcheck(lambda t: ours(t, **kw), (x,))


def _per_axis(value, n):
    return (value,) * n if isinstance(value, int) else tuple(value)


@pytest.mark.parametrize("size", [(3, 5), (4, None), 1, (7, 2)])
def test_adaptive_gradients(size):
    rng = np.random.default_rng(2)
    shape = (2, 3, 12, 8)
    for dtype in (torch.float64, torch.float32):
        x = torch.from_numpy(rng.standard_normal(shape)).to(dtype).requires_grad_()
        y = at.adaptive_avg_pool2d(x, size)
        g = torch.from_numpy(rng.standard_normal(tuple(y.shape))).to(dtype)
        (grad,) = torch.autograd.grad(y, x, g)
        outs = tuple(y.shape[2:])
        windows = [adaptive_windows(L, o) for L, o in zip(shape[2:], outs)]
        assert_gradient(grad, exact_gradient(shape, windows, g.numpy()), f"{dtype} {size}")
    x = torch.from_numpy(rng.standard_normal((1, 2, 7, 5))).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: at.adaptive_avg_pool2d(t, size), (x,))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_float64_gradients_within_one_ulp(n):
    """Random pools and adaptive pools, gradients of magnitudes 1e-3 to 1e3 (so that the terms
    of a position cancel): float64 and float32 gradients within 1 ulp of the exact adjoint.
    The kernels' float64 sums of the quotients fail this (up to 16245 ulp where terms cancel)."""
    rng = np.random.default_rng(20 + n)
    for case in range(40):
        adaptive_ = case % 4 == 3
        if adaptive_:
            lengths = tuple(int(v) for v in rng.integers(1, 9, n))
            outs = tuple(int(rng.integers(1, 2 * L + 1)) for L in lengths)
            windows = [adaptive_windows(L, o) for L, o in zip(lengths, outs)]
            kw, override = dict(output_size=outs), None
            ours = ADAPTIVE[n][0]
        else:
            k, s, p, lengths = pool_config(rng, n)
            ceil, include_pad = bool(rng.integers(2)), bool(rng.integers(2))
            override = int(rng.choice([-3, 2, 7])) if n > 1 and rng.random() < 0.25 else None
            windows = [torch_windows(L, kk, ss, pp, ceil, include_pad) for L, kk, ss, pp in zip(lengths, k, s, p)]
            kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=include_pad)
            if override is not None:
                kw["divisor_override"] = override
            ours = POOLS[n][0]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *lengths)
        channels_last = n > 1 and rng.random() < 0.3
        for dtype in (torch.float64, torch.float32):
            x = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last if n == 2 else torch.channels_last_3d)
            x.requires_grad_()
            y = ours(x, **kw)
            scale = 10.0 ** rng.integers(-3, 4, tuple(y.shape))
            g = torch.from_numpy(rng.standard_normal(tuple(y.shape)) * scale).to(dtype)
            (grad,) = torch.autograd.grad(y, x, g)
            exact = exact_gradient(shape, windows, g.to(torch.float64).numpy(), override)
            assert_gradient(grad, exact, f"{dtype} {shape} {kw} channels_last={channels_last}")


@pytest.mark.parametrize("spread", [0, 150])
def test_float64_gradients_non_finite_and_wide(spread):
    """float64 gradients with Inf and NaN (they reach the positions whose windows hold them, as
    in torch) and, with spread 150, magnitudes 1e-150 to 1e150 (the split sums' error would
    reach the small results: the double-double twin, _core/adjoint.exact_adjoint, takes over):
    every finite one within 1 ulp of the exact adjoint."""
    rng = np.random.default_rng(spread)
    kw = dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)
    x = torch.zeros((2, 2, 6, 5), dtype=torch.float64, requires_grad=True)
    y = at.avg_pool2d(x, **kw)
    values = rng.standard_normal(tuple(y.shape)) * 10.0 ** rng.integers(-spread, spread + 1, tuple(y.shape))
    if spread == 0:
        values[0, 0, 1, 1], values[1, 1, 4, 0], values[1, 1, 5, 0] = np.inf, -np.inf, np.nan
    g = torch.from_numpy(values)
    (grad,) = torch.autograd.grad(y, x, g)
    xt = x.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.avg_pool2d(xt, **kw), xt, g)
    got = grad.numpy()
    assert np.array_equal(np.isnan(got), np.isnan(expected.numpy()))
    assert np.array_equal(np.isinf(got), np.isinf(expected.numpy()))
    assert np.array_equal(got[np.isinf(got)], expected.numpy()[np.isinf(got)])
    windows = [torch_windows(L, 3, 1, 1, False, False) for L in (6, 5)]
    finite = np.isfinite(got)
    exact = exact_gradient((2, 2, 6, 5), windows, np.where(np.isfinite(values), values, 0.0))
    assert_gradient(torch.from_numpy(np.where(finite, got, 0.0)), np.where(finite, exact, 0.0), f"spread {spread}")


def test_gradient_of_channels_last_and_16_bit_inputs():
    x = torch.randn(2, 4, 6, 6).contiguous(memory_format=torch.channels_last).requires_grad_()
    y = at.adaptive_avg_pool2d(x, 4)
    y.sum().backward()
    xt = x.detach().clone().requires_grad_()
    F.adaptive_avg_pool2d(xt, 4).sum().backward()
    torch.testing.assert_close(x.grad, xt.grad)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(1, 2, 6, 6, dtype=dtype, requires_grad=True)
        at.avg_pool2d(x, 3, 2, 1).sum().backward()
        assert x.grad.dtype == dtype


def test_no_grad_gives_no_graph():
    x = torch.randn(1, 1, 4, 4, requires_grad=True)
    with torch.no_grad():
        assert at.avg_pool2d(x, 2).grad_fn is None
    assert at.avg_pool2d(x.detach(), 2).grad_fn is None


def test_the_call_memo_keeps_values_of_other_types_apart():
    x = torch.zeros(1, 1, 4, 4)
    at.avg_pool2d(x, 2, ceil_mode=True)
    with pytest.raises(avgpool.AvgPoolError, match="ceil_mode"):
        at.avg_pool2d(x, 2, ceil_mode=1)
    at.avg_pool2d(x, 1)
    with pytest.raises(avgpool.AvgPoolError, match="kernel_size"):
        at.avg_pool2d(x, True)
    at.avg_pool2d(x, (2, 2), divisor_override=1)
    with pytest.raises(avgpool.AvgPoolError, match="kernel_size"):
        at.avg_pool2d(x, (2.0, 2), divisor_override=1)
    with pytest.raises(avgpool.AvgPoolError, match="divisor_override"):
        at.avg_pool2d(x, (2, 2), divisor_override=True)
    at.adaptive_avg_pool2d(x, (2, 2))
    with pytest.raises(avgpool.AvgPoolError, match="output_size"):
        at.adaptive_avg_pool2d(x, (2.0, 2))
    contiguous = at.adaptive_avg_pool2d(torch.zeros(2, 3, 4, 4), 2)
    last = at.adaptive_avg_pool2d(torch.zeros(2, 3, 4, 4).contiguous(memory_format=torch.channels_last), 2)
    assert contiguous.is_contiguous() and last.is_contiguous(memory_format=torch.channels_last)
