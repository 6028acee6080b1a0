"""``qlinear_average_pool(..., out=)`` behaves as ``average_pool``'s: the result, bit for bit the
one without ``out``, is written into it and it is returned (any ndarray subclass itself, an
``np.memmap`` or ``open_memmap``'s result); one that is not C-contiguous or shares memory with
the input (the input itself) gets the result of the input as it was; a wrong one is refused
with the operator's name. Each holds on the first call, on a call repeated with the same
argument objects and on one found in the memo of validated calls."""

from __future__ import annotations

import numpy as np
import pytest

from avgpool import AvgPoolError
from avgpool._core import tuning
from avgpool._ops import qlinear
from avgpool.qlinear import qlinear_average_pool

SCALARS = (0.1, 3, 0.2, 5)
CASES = {  # (shape of N, C, spatial..., attributes): the general path, and the global one
    "general": ((2, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 0])),
    "global": ((2, 3, 6, 5), dict(kernel_shape=[6, 5])),
    "same size": ((2, 3, 9, 10), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
}


class Tagged(np.ndarray):
    """A user's ndarray subclass that carries an attribute."""

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", "tagged")


def _input(case: str, dtype: str, channels_last: int, threaded: bool = False) -> tuple[np.ndarray, dict]:
    shape, attrs = CASES[case]
    if threaded:
        shape = (4, 16, *(4 * n for n in shape[2:])) if case != "global" else (8, 64, *shape[2:])
    if channels_last:
        shape = (shape[0], *shape[2:], shape[1])
    info = np.iinfo(dtype)
    x = np.random.default_rng(7).integers(info.min, info.max + 1, shape).astype(dtype)
    return x, dict(attrs, channels_last=channels_last)


def _calls(x: np.ndarray, attrs: dict):
    """The three ways a call is answered: validated afresh, repeated with the very same argument
    objects (qlinear._MEMO.by_identity), found in the memo by equal arguments (qlinear._MEMO.by_key)."""
    qlinear.forget()
    fresh = {name: list(value) if isinstance(value, list) else value for name, value in attrs.items()}
    yield lambda out: qlinear_average_pool(x, *SCALARS, **fresh, out=out)
    yield lambda out: qlinear_average_pool(x, *SCALARS, **fresh, out=out)
    yield lambda out: qlinear_average_pool(
        x,
        *SCALARS,
        **{name: list(value) if isinstance(value, list) else value for name, value in attrs.items()},
        out=out,
    )


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.fixture(params=[False, True], ids=["serial", "threaded"])
def threaded(request):
    with tuning.tuned(
        **(
            {"qlinear_parallel_work": 1, "qlinear_global_parallel_work": 1, "qlinear_global_ncx_parallel_work": 1}
            if request.param
            else {}
        )
    ):
        qlinear.forget()  # calls remembered by their arguments (tuned() forgets the engines' own)
        yield request.param
    qlinear.forget()


@pytest.mark.parametrize("case", ["general", "global"])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_out_gets_the_bits_of_a_call_without_it(case, channels_last, dtype, threaded):
    x, attrs = _input(case, dtype, channels_last, threaded)
    want = qlinear_average_pool(x, *SCALARS, **attrs)
    if threaded and case == "general":
        assert (
            qlinear.prepare(
                x.shape,
                x.dtype,
                *(attrs.get(name) for name in ("kernel_shape", "strides", "pads")),
                "NOTSET",
                0,
                0,
                channels_last,
            ).pieces
            > 1
        )
    for call in _calls(x, attrs):
        out = np.full(want.shape, 77, x.dtype)
        assert call(out) is out
        assert _same_bits(out, want)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_ndarray_subclasses_as_out_are_returned_themselves(tmp_path, channels_last):
    x, attrs = _input("general", "uint8", channels_last)
    want = qlinear_average_pool(x, *SCALARS, **attrs)
    for round_, call in enumerate(_calls(x, attrs)):
        folder = tmp_path / str(round_)
        folder.mkdir()
        outs = {
            "memmap": np.memmap(folder / "out.dat", dtype=x.dtype, mode="w+", shape=want.shape),
            "open_memmap": np.lib.format.open_memmap(folder / "out.npy", mode="w+", dtype=x.dtype, shape=want.shape),
            "subclass": np.zeros(want.shape, x.dtype).view(Tagged),
            "masked": np.ma.masked_array(np.zeros(want.shape, x.dtype), mask=False),
        }
        for name, out in outs.items():
            result = call(out)
            assert result is out and type(result) is type(out), name
            assert _same_bits(np.asarray(out), want), name
        del outs
        assert _same_bits(np.load(folder / "out.npy"), want)
        assert _same_bits(np.fromfile(folder / "out.dat", x.dtype).reshape(want.shape), want)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_pooling_in_place_into_the_input(channels_last, dtype, threaded):
    x0, attrs = _input("same size", dtype, channels_last, threaded)
    want = qlinear_average_pool(x0, *SCALARS, **attrs)
    assert want.shape == x0.shape
    for _ in range(3):
        x = x0.copy()
        assert qlinear_average_pool(x, *SCALARS, **attrs, out=x) is x
        assert _same_bits(x, want)
    for _ in range(3):  # a view of the input's own memory, strided
        wide = np.repeat(x0, 2, axis=-1)
        x = wide[..., ::2]  # not contiguous: pooled from a copy, written over ``wide`` meanwhile
        assert qlinear_average_pool(x, *SCALARS, **attrs, out=wide[..., 1::2]) is not None
        assert _same_bits(np.ascontiguousarray(wide[..., 1::2]), want) and _same_bits(wide[..., ::2], x0)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_out_of_any_layout_gets_the_result(channels_last):
    x, attrs = _input("general", "int8", channels_last)
    want = qlinear_average_pool(x, *SCALARS, **attrs)
    for call in _calls(x, attrs):
        wide = np.full(want.shape[:-1] + (2 * want.shape[-1],), -7, x.dtype)
        fortran = np.asfortranarray(np.zeros(want.shape, x.dtype))
        tagged = np.zeros(want.shape[:-1] + (2 * want.shape[-1],), x.dtype).view(Tagged)[..., 1::2]
        for out in (wide[..., ::2], fortran, tagged):
            assert call(out) is out
            assert _same_bits(np.ascontiguousarray(out), want)
        assert np.all(wide[..., 1::2] == -7)  # the values in between are untouched


def test_an_empty_output_returns_out():
    x = np.zeros((0, 3, 5, 5), np.uint8)
    out = np.empty((0, 3, 4, 4), np.uint8)
    for call in _calls(x, dict(kernel_shape=[2, 2])):
        assert call(out) is out


@pytest.mark.parametrize(
    "out, message",
    [
        (np.zeros((2, 3, 5, 8), np.uint8), r"`out` has shape \(2, 3, 5, 8\) but the output has shape \(2, 3, 5, 9\)"),
        (np.zeros((2, 3, 5, 9), np.int8), "`out` has dtype int8 but the output has the input's dtype uint8"),
        (np.zeros((2, 3, 5, 9), np.float32), "`out` has dtype float32"),
        (np.zeros((2, 3, 5, 9), np.uint8).view(Tagged)[None], r"`out` has shape \(1, 2, 3, 5, 9\)"),
        ([[0]], "`out` must be a numpy array, got list"),
    ],
)
def test_a_wrong_out_is_refused_with_the_operator_name(out, message):
    x, attrs = _input("general", "uint8", 0)
    for call in _calls(x, attrs):
        with pytest.raises(AvgPoolError, match="^QLinearAveragePool: " + message):
            call(out)


def test_a_read_only_out_is_refused(tmp_path):
    x, attrs = _input("global", "uint8", 1)
    want = qlinear_average_pool(x, *SCALARS, **attrs)
    read_only = np.zeros(want.shape, x.dtype)
    read_only.setflags(write=False)
    np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=x.dtype, shape=want.shape)
    for call in _calls(x, attrs):
        for out in (read_only, np.lib.format.open_memmap(tmp_path / "out.npy", mode="r")):
            with pytest.raises(AvgPoolError, match="^QLinearAveragePool: `out` is read-only"):
                call(out)
