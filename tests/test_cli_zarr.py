"""``avgpool pool`` with zarr stores: chunk by chunk through avgpool.dask, bit for bit the numpy
result, and an existing output store replaced only by a complete new one."""

from __future__ import annotations

import errno
import io
import os
import sys

import numpy as np
import pytest

import avgpool
from avgpool.cli import main

zarr = pytest.importorskip("zarr")
pytest.importorskip("dask.array")


def run(argv: list) -> tuple[int, str]:
    out = io.StringIO()
    return main([str(a) for a in argv], stdout=out), out.getvalue()


def fails(capsys, argv: list, *needles: str) -> str:
    """Exit 2 with one line on stderr, no traceback, nothing on stdout."""
    capsys.readouterr()
    code, text = run(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "error" in err and "Traceback" not in err, err
    assert text == ""
    for needle in needles:
        assert needle in err, err
    return err


def store(path, array: np.ndarray, chunks: tuple[int, ...]):
    z = zarr.create_array(store=str(path), shape=array.shape, chunks=chunks, dtype=array.dtype)
    z[...] = array
    return z


def listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.fixture
def x(tmp_path) -> np.ndarray:
    array = np.random.default_rng(0).standard_normal((2, 3, 11, 10)).astype(np.float32)
    store(tmp_path / "x.zarr", array, (1, 2, 4, 3))
    return array


# flags, the same as avgpool.average_pool attributes
ATTRIBUTES = [
    (
        ["-k", "3,3", "-s", "2,2", "-p", "1,0,1,2", "--ceil-mode", "--count-include-pad"],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2], "ceil_mode": 1, "count_include_pad": 1},
    ),
    # float32 kernels of 5 and more go by the exact running sums, decided per slab
    (["-k", "5,5", "-p", "2,2,2,2"], {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    (
        ["-k", "2,3", "-d", "2,1", "--auto-pad", "SAME_LOWER", "-s", "1,2"],
        {"kernel_shape": [2, 3], "dilations": [2, 1], "auto_pad": "SAME_LOWER", "strides": [1, 2]},
    ),
]


@pytest.mark.parametrize("flags, attributes", ATTRIBUTES)
@pytest.mark.parametrize("chunks", [None, "1,1,2,2", "2,-1,5,auto"])  # the store's, smaller than the kernel, mixed
def test_zarr_to_zarr_is_the_numpy_result_bit_for_bit(tmp_path, x, flags, attributes, chunks):
    argv = ["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", *flags, "-q"] + (["--chunks", chunks] if chunks else [])
    assert run(argv) == (0, "")
    y = zarr.open_array(str(tmp_path / "y.zarr"), mode="r")
    expected = avgpool.average_pool(x, **attributes)
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y[...], expected, strict=True)
    assert listing(tmp_path) == ["x.zarr", "y.zarr"]


def test_result_line_on_stdout_and_no_progress_without_a_terminal(tmp_path, x, capsys):
    code, text = run(["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "2,2", "-s", "2,2"])
    assert code == 0
    assert text.count("\n") == 1 and "x.zarr 2x3x11x10 float32 -> ONNX AveragePool-22" in text
    # the 3-wide tiles along the last axis pool into 2, 1, 2 outputs, stored as chunks of 2
    assert "y.zarr 2x3x5x5 float32 (chunks 1x2x2x2)" in text
    assert capsys.readouterr().err == ""


def test_progress_bar_on_stderr(tmp_path, x, capsys):
    code, text = run(["pool", tmp_path / "x.zarr", tmp_path / "y.npy", "-k", "2,2", "--progress", "-q"])
    assert (code, text) == (0, "")
    assert "100% Completed" in capsys.readouterr().err


def test_zarr_to_npy_and_npz(tmp_path, x):
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "y.npy", "-k", "3,2", "-s", "2,1", "-q"]) == (0, "")
    np.testing.assert_array_equal(
        np.load(tmp_path / "y.npy"), avgpool.average_pool(x, [3, 2], strides=[2, 1]), strict=True
    )
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "y.npz", "-k", "3,2", "--output-key", "pooled", "-q"])[0] == 0
    with np.load(tmp_path / "y.npz") as archive:
        np.testing.assert_array_equal(archive["pooled"], avgpool.average_pool(x, [3, 2]), strict=True)


def test_npy_to_zarr_in_the_chunks_asked_for(tmp_path, x):
    np.save(tmp_path / "x.npy", x)
    assert run(
        ["pool", tmp_path / "x.npy", tmp_path / "y.zarr", "-k", "2,2", "-s", "2,2", "--chunks", "1,3,4,4", "-q"]
    ) == (0, "")
    y = zarr.open_array(str(tmp_path / "y.zarr"), mode="r")
    assert y.chunks == (1, 3, 2, 2)  # the output chunks follow the input's
    np.testing.assert_array_equal(y[...], avgpool.average_pool(x, [2, 2], strides=[2, 2]), strict=True)


def test_chunks_override_the_stores_own(tmp_path, x):
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "a.zarr", "-k", "2,2", "-s", "2,2", "-q"]) == (0, "")
    assert zarr.open_array(str(tmp_path / "a.zarr"), mode="r").chunks == (1, 2, 2, 2)  # the 2, 1, 2 of 3-wide tiles
    assert run(
        ["pool", tmp_path / "x.zarr", tmp_path / "b.zarr", "-k", "2,2", "-s", "2,2", "--chunks", "2,-1,6,10", "-q"]
    ) == (0, "")
    b = zarr.open_array(str(tmp_path / "b.zarr"), mode="r")
    assert b.chunks == (2, 3, 3, 5)
    np.testing.assert_array_equal(b[...], avgpool.average_pool(x, [2, 2], strides=[2, 2]), strict=True)


def test_irregular_pooled_chunks_are_stored_regularly(tmp_path, x):
    # a 3-tap window's centre is one past its start: the first tile has one output fewer (3, 4, 1)
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "3,3", "--chunks", "1,1,4,-1", "-q"]) == (0, "")
    y = zarr.open_array(str(tmp_path / "y.zarr"), mode="r")
    assert y.chunks == (1, 1, 4, 8)
    np.testing.assert_array_equal(y[...], avgpool.average_pool(x, [3, 3]), strict=True)


def test_a_group_needs_key(tmp_path, x, capsys):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("scan", shape=x.shape, chunks=(1, 1, 5, 5), dtype=x.dtype)[...] = x
    fails(capsys, ["pool", tmp_path / "g.zarr", tmp_path / "y.npy", "-k", "2,2"], "zarr group", "['scan']", "--key")
    assert run(["pool", tmp_path / "g.zarr", tmp_path / "y.npy", "-k", "2,2", "--key", "scan", "-q"]) == (0, "")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), avgpool.average_pool(x, [2, 2]), strict=True)
    # an array in a subgroup is named by its path, which --key takes
    group.create_group("more").create_array("inner", shape=x.shape, chunks=(1, 1, 5, 5), dtype=x.dtype)[...] = x
    fails(capsys, ["pool", tmp_path / "g.zarr", tmp_path / "z.npy", "-k", "2,2"], "['more/inner', 'scan']")
    assert run(["pool", tmp_path / "g.zarr", tmp_path / "z.npy", "-k", "2,2", "--key", "more/inner", "-q"]) == (0, "")


# ---------------------------------------------------------------- dialects


def test_qlinear(tmp_path):
    from avgpool.qlinear import qlinear_average_pool

    q = np.random.default_rng(3).integers(0, 256, size=(2, 2, 9, 7), dtype=np.uint8)
    store(tmp_path / "q.zarr", q, (1, 1, 2, 3))
    assert run(
        [
            "pool",
            tmp_path / "q.zarr",
            tmp_path / "y.zarr",
            "--dialect",
            "qlinear",
            "-k",
            "3,3",
            "-p",
            "1,1,1,1",
            "--x-scale",
            "0.1",
            "--x-zero-point",
            "95",
            "--y-scale",
            "0.2",
            "--y-zero-point",
            "115",
            "--count-include-pad",
            "-q",
        ]
    ) == (0, "")
    expected = qlinear_average_pool(
        q, np.float32(0.1), np.uint8(95), np.float32(0.2), np.uint8(115), [3, 3], pads=[1, 1, 1, 1], count_include_pad=1
    )
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "y.zarr"), mode="r")[...], expected, strict=True)


def test_openvino_where_it_is_some_onnx_pooling(tmp_path, x):
    import avgpool.openvino

    # exclude_pad false with pads: the whole kernel, which ONNX's count_include_pad gives without overhang
    assert run(
        [
            "pool",
            tmp_path / "x.zarr",
            tmp_path / "y.zarr",
            "--dialect",
            "openvino",
            "-k",
            "3,3",
            "-s",
            "2,2",
            "--pads-begin",
            "1,1",
            "--pads-end",
            "1,1",
            "--exclude-pad",
            "false",
            "-q",
        ]
    ) == (0, "")
    expected = avgpool.openvino.avg_pool(
        x, [3, 3], strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], exclude_pad=False
    )
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "y.zarr"), mode="r")[...], expected, strict=True)


@pytest.mark.parametrize("chunks", ["1,1,1,1", "1,2,3,2", "2,3,11,10"])
@pytest.mark.parametrize("stride", [4, 5])
def test_openvino_empty_windows_as_its_function_writes_them(tmp_path, x, chunks, stride):
    import avgpool.openvino

    # rounding_type ceil: windows that start past the input's end hold no input value, which OpenVINO
    # divides by a negative count (-0.0, and +0.0 where both axes are negative; stride 4) or by 0
    # (NaN; stride 5): written chunk by chunk after the engine, as avgpool._ops.openvino writes a
    # whole output
    expected = avgpool.openvino.avg_pool(x, [1, 1], strides=[stride, stride], exclude_pad=True, rounding_type="ceil")
    assert np.signbit(expected[expected == 0]).any() if stride == 4 else np.isnan(expected).any()
    assert run(
        [
            "pool",
            tmp_path / "x.zarr",
            tmp_path / "y.zarr",
            "--dialect",
            "openvino",
            "-k",
            "1,1",
            "-s",
            f"{stride},{stride}",
            "--exclude-pad",
            "true",
            "--rounding-type",
            "ceil",
            "--chunks",
            chunks,
            "-q",
        ]
    ) == (0, "")
    got = zarr.open_array(str(tmp_path / "y.zarr"), mode="r")[...]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()  # bit for bit: the signs of the zeros, the NaNs


def test_onednn_channels_last(tmp_path, x):
    onednn = pytest.importorskip("avgpool.onednn")

    # x read as N x H x W x C (oneDNN's default); exclude_pad false: the whole kernel, ONNX's count_include_pad here
    assert run(
        [
            "pool",
            tmp_path / "x.zarr",
            tmp_path / "y.zarr",
            "--dialect",
            "onednn",
            "-k",
            "2,3",
            "-s",
            "1,2",
            "--pads-begin",
            "1,1",
            "--pads-end",
            "0,1",
            "--exclude-pad",
            "false",
            "--chunks",
            "1,2,2,3",
            "-q",
        ]
    ) == (0, "")
    expected = onednn.avg_pool(x, [2, 3], strides=[1, 2], pads_begin=[1, 1], pads_end=[0, 1], exclude_pad=False)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "y.zarr"), mode="r")[...], expected, strict=True)


def test_openvino_refusals_are_its_own(tmp_path, x, capsys):
    fails(
        capsys,
        [
            "pool",
            tmp_path / "x.zarr",
            tmp_path / "y.zarr",
            "--dialect",
            "openvino",
            "-k",
            "3,3",
            "--pads-begin",
            "3,0",
            "--pads-end",
            "0,0",
        ],
        "OpenVINO AvgPool-16",
        "pads_begin",
    )


# ---------------------------------------------------------------- errors and the existing output


def old_store(path) -> np.ndarray:
    old = np.arange(8, dtype=np.float64).reshape(1, 1, 2, 4)
    store(path, old, (1, 1, 1, 2))
    return old


def assert_old_store(path, old: np.ndarray) -> None:
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[...], old, strict=True)


def test_existing_store_is_replaced_by_the_complete_result(tmp_path, x):
    old_store(tmp_path / "y.zarr")
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "2,2", "-q"]) == (0, "")
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "y.zarr"), mode="r")[...], avgpool.average_pool(x, [2, 2]), strict=True
    )
    assert listing(tmp_path) == ["x.zarr", "y.zarr"]


def test_bad_attribute_exits_2_before_any_work(tmp_path, x, capsys):
    old = old_store(tmp_path / "y.zarr")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "3,3", "-s", "0,1"], "strides")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "3,3,3"], "kernel_shape")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "3,3", "--chunks", "1,1,4"], "--chunks")
    assert_old_store(tmp_path / "y.zarr", old)
    assert listing(tmp_path) == ["x.zarr", "y.zarr"]


@pytest.mark.parametrize(
    "failure, code, needle",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 2, "y.zarr: cannot write: No space left on device"),
        (KeyboardInterrupt(), 130, "avgpool pool: interrupted"),
    ],
)
def test_failed_write_keeps_the_old_store_and_leaves_no_temporary(
    tmp_path, x, monkeypatch, capsys, failure, code, needle
):
    old = old_store(tmp_path / "y.zarr")
    original = zarr.Array.__setitem__
    written = []

    def write(self, selection, value):
        if written:  # after one chunk is in the temporary store
            raise failure
        written.append(selection)
        original(self, selection, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", write)
    capsys.readouterr()
    assert run(["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "2,2", "--chunks", "1,1,4,4"]) == (code, "")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    monkeypatch.undo()
    assert written
    assert_old_store(tmp_path / "y.zarr", old)
    assert listing(tmp_path) == ["x.zarr", "y.zarr"]


def test_npy_output_that_does_not_fit_keeps_the_old_file(tmp_path, x, monkeypatch, capsys):
    (tmp_path / "y.npy").write_bytes(b"old")

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)  # the output's bytes are reserved before any is computed
    fails(
        capsys,
        ["pool", tmp_path / "x.zarr", tmp_path / "y.npy", "-k", "2,2"],
        "y.npy: cannot write: No space left on device",
    )
    assert (tmp_path / "y.npy").read_bytes() == b"old"
    assert listing(tmp_path) == ["x.zarr", "y.npy"]


def test_output_that_is_the_input_store_is_refused(tmp_path, x, capsys):
    os.symlink(tmp_path / "x.zarr", tmp_path / "link.zarr")
    for output in ("x.zarr", "x.zarr/", "link.zarr", "x.zarr/inner.zarr"):
        fails(capsys, ["pool", tmp_path / "x.zarr", f"{tmp_path}/{output}", "-k", "2,2"], "input")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"), mode="r")[...], x, strict=True)
    assert listing(tmp_path) == ["link.zarr", "x.zarr"]
    assert "inner.zarr" not in listing(tmp_path / "x.zarr")


def test_a_directory_that_is_not_a_zarr_array_is_never_replaced(tmp_path, x, capsys):
    (tmp_path / "mine.zarr").mkdir()
    (tmp_path / "mine.zarr" / "notes.txt").write_text("keep me")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "mine.zarr", "-k", "2,2"], "not a zarr array store")
    assert (tmp_path / "mine.zarr" / "notes.txt").read_text() == "keep me"


def test_missing_store_and_flags_that_do_not_apply(tmp_path, x, capsys):
    fails(capsys, ["pool", tmp_path / "none.zarr", tmp_path / "y.npy", "-k", "2,2"], "no such zarr store")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "y.zarr", "-k", "2,2", "--output-key", "a"], "--output-key")
    fails(capsys, ["pool", tmp_path / "x.zarr", tmp_path / "y.npy", "-k", "2,2", "--batch-size", "1"], "--batch-size")
    np.save(tmp_path / "x.npy", x)
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--chunks", "auto"], "--chunks")
    assert listing(tmp_path) == ["x.npy", "x.zarr"]


def test_without_zarr_says_what_to_install(tmp_path, x, monkeypatch, capsys):
    np.save(tmp_path / "x.npy", x)
    monkeypatch.setitem(sys.modules, "zarr", None)  # import zarr now raises ImportError
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.zarr", "-k", "2,2"], "install avgpool[dask]")
    assert listing(tmp_path) == ["x.npy", "x.zarr"]


def test_help_mentions_zarr_and_chunks(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pool", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "zarr" in text and "--chunks" in text


def test_a_corrupt_chunk_is_one_line_and_the_old_output_stays(tmp_path, capsys):
    store(tmp_path / "in.zarr", np.arange(256, dtype=np.float32).reshape(1, 1, 16, 16), (1, 1, 8, 8))
    (tmp_path / "in.zarr" / "c" / "0" / "0" / "1" / "1").write_bytes(b"not the codec's data")
    np.save(tmp_path / "out.npy", np.ones(3))
    old = (tmp_path / "out.npy").read_bytes()
    fails(
        capsys,
        ["pool", tmp_path / "in.zarr", tmp_path / "out.npy", "-k", "2,2"],
        "a chunk of the zarr store could not be read",
    )
    assert (tmp_path / "out.npy").read_bytes() == old
