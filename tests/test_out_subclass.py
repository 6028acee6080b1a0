"""``out=`` takes what numpy users pass: an ``np.memmap``, an ``open_memmap`` result, any ndarray
subclass, a non-contiguous view, an array sharing memory with the input. The result is written
into it and the very object passed is returned, for the function and the prepared pool, on the
serial and the threaded path and for 16-bit floats (whose kernels see the bits as uint16)."""

from __future__ import annotations

import numpy as np
import pytest

import avgpool
from avgpool._core import tuning

ATTRIBUTES = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
SHAPES = {"serial": (1, 3, 9, 10), "threaded": (2, 16, 96, 96)}


class Tagged(np.ndarray):
    """A user's ndarray subclass that carries an attribute."""

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", "tagged")


def _input(size: str, dtype: str = "float32") -> np.ndarray:
    x = np.random.default_rng(5).standard_normal(SHAPES[size]).astype(dtype)
    if size == "threaded":
        assert x.size >= tuning.DEFAULT.parallel_min_elements
    return x


def _callers():
    """Each entry point, called twice with the same shape: the second call takes the path that
    remembers the validated call (the prepared pool's per-shape cache, the function's memo)."""
    pool = avgpool.AveragePool(**ATTRIBUTES)
    return {
        "function": lambda x, out: avgpool.average_pool(x, out=out, **ATTRIBUTES),
        "prepared": lambda x, out: pool(x, out),
    }


def _outs(tmp_path, shape, dtype):
    """Fresh out= arrays of every kind, by name."""
    memmap = np.memmap(tmp_path / "out.dat", dtype=dtype, mode="w+", shape=shape)
    opened = np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=dtype, shape=shape)
    tagged = np.zeros(shape, dtype).view(Tagged)
    masked = np.ma.masked_array(np.zeros(shape, dtype), mask=False)
    return {"memmap": memmap, "open_memmap": opened, "subclass": tagged, "masked": masked}


@pytest.mark.parametrize("caller", ["function", "prepared"])
@pytest.mark.parametrize(
    "size,dtype", [("serial", "float32"), ("threaded", "float32"), ("serial", "float16"), ("serial", "float64")]
)
def test_ndarray_subclasses_as_out(tmp_path, caller, size, dtype):
    x = _input(size, dtype)
    want = avgpool.average_pool(x, **ATTRIBUTES)
    call = _callers()[caller]
    for round_ in range(2):
        folder = tmp_path / str(round_)
        folder.mkdir()
        for name, out in _outs(folder, want.shape, want.dtype).items():
            result = call(x, out)
            assert result is out, name
            assert type(result) is type(out), name
            np.testing.assert_array_equal(np.asarray(out), want, err_msg=name)
    # what was written to the files is the result
    np.testing.assert_array_equal(np.load(tmp_path / "1" / "out.npy"), want)
    np.testing.assert_array_equal(np.fromfile(tmp_path / "1" / "out.dat", want.dtype).reshape(want.shape), want)


@pytest.mark.parametrize("caller", ["function", "prepared"])
@pytest.mark.parametrize("size", ["serial", "threaded"])
def test_non_contiguous_out(caller, size):
    x = _input(size)
    want = avgpool.average_pool(x, **ATTRIBUTES)
    call = _callers()[caller]
    for _ in range(2):
        wide = np.full(want.shape[:-1] + (2 * want.shape[-1],), -7, np.float32)
        strided = wide[..., ::2]  # every other value: the ones in between stay untouched
        fortran = np.asfortranarray(np.zeros(want.shape, np.float32))
        tagged = wide.view(Tagged)[..., 1::2]
        for out in (strided, fortran, tagged):
            assert call(x, out) is out
            np.testing.assert_array_equal(out, want)
        assert np.all(wide[..., 0::2] == want) and np.all(wide[..., 1::2] == want)


@pytest.mark.parametrize("caller", ["function", "prepared"])
@pytest.mark.parametrize("size", ["serial", "threaded"])
def test_out_sharing_memory_with_the_input(tmp_path, caller, size):
    """The output written over the input's own memory (its start, a strided view, the start of
    the memmap it is read from) is still the average of the input as it was. (Two separate
    mappings of one file share pages at different addresses, which no address test can see:
    numpy's own out= does not look for that either.)"""
    x0 = _input(size)
    want = avgpool.average_pool(x0, **ATTRIBUTES)
    call = _callers()[caller]
    for _ in range(2):
        x = x0.copy()
        assert call(x, x.reshape(-1)[: want.size].reshape(want.shape)) is not None
        np.testing.assert_array_equal(x.reshape(-1)[: want.size].reshape(want.shape), want)

        x = x0.copy()
        out = x.reshape(-1)[::3][: want.size].reshape(want.shape)  # non-contiguous and overlapping
        call(x, out)
        np.testing.assert_array_equal(out, want)

        path = tmp_path / "shared.dat"
        mapped = np.memmap(path, dtype=np.float32, mode="w+", shape=x0.shape)
        mapped[...] = x0
        out = mapped.reshape(-1)[: want.size].reshape(want.shape)  # a memmap: the file's first bytes
        assert type(out) is np.memmap and call(mapped, out) is out
        np.testing.assert_array_equal(out, want)
        del mapped, out


@pytest.mark.parametrize("caller", ["function", "prepared"])
def test_bad_subclass_out_is_refused_with_the_usual_errors(tmp_path, caller):
    x = _input("serial")
    want = avgpool.average_pool(x, **ATTRIBUTES)
    call = _callers()[caller]
    np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=np.float32, shape=want.shape)
    for _ in range(2):
        with pytest.raises(avgpool.AvgPoolError, match="read-only"):
            call(x, np.lib.format.open_memmap(tmp_path / "out.npy", mode="r"))
        with pytest.raises(avgpool.AvgPoolError, match="has shape"):
            call(x, np.zeros((1,) + want.shape, np.float32).view(Tagged))
        with pytest.raises(avgpool.AvgPoolError, match="has dtype"):
            call(x, np.zeros(want.shape, np.float64).view(Tagged))
