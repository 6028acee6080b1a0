"""The ``avgpool`` command on real files: demo, shape, pool, run, errors, help, a real subprocess."""

from __future__ import annotations

import importlib.util
import io
import os
import pickle
import re
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import avgpool
from avgpool._core import tuning
from avgpool.cli import main

HAS_ONEDNN = importlib.util.find_spec("avgpool.onednn") is not None


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main([str(a) for a in argv], stdout=out), out.getvalue()


def fails(capsys, argv: list[str], *needles: str) -> str:
    """The command exits with 2 and one clear line on stderr, no traceback."""
    capsys.readouterr()
    code, _ = run(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error" in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def x(tmp_path):
    array = np.random.default_rng(0).standard_normal((5, 3, 9, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", array)
    return array


# ---------------------------------------------------------------- demo, shape, help


def test_demo():
    code, text = run(["demo"])
    assert code == 0
    assert "12 of 12 worked examples match" in text
    assert "== avgpool explain 1x1x4 -k 3 -s 3 --ceil-mode" in text
    assert "1          3              1 /          0 /            2        1" in text


def test_shape_in_every_dialect():
    assert run(["shape", "1x3x32x32", "-k", "3,3", "-s", "2,2", "--ceil-mode"]) == (0, "1x3x16x16\n")
    assert run(["shape", "1x1x2", "-k", "3", "-s", "3", "-p", "1,1", "--ceil-mode"]) == (0, "1x1x1\n")
    assert run(["shape", "1x1x2", "-k", "3", "-s", "3", "-p", "1,1", "--ceil-mode", "--dialect", "openvino"]) == (
        0,
        "1x1x2\n",
    )
    assert run(
        [
            "shape",
            "1x1x5",
            "-k",
            "1",
            "-s",
            "3",
            "--auto-pad",
            "same_upper",
            "--rounding-type",
            "ceil",
            "--dialect",
            "openvino",
        ]
    ) == (0, "1x1x3\n")


def test_shape_onednn_defaults_to_channels_last():
    assert run(["shape", "1x8x6x3", "-k", "2,2", "-s", "2,2", "--dialect", "onednn"]) == (0, "1x4x3x3\n")
    assert run(["shape", "1x3x8x6", "-k", "2,2", "-s", "2,2", "--dialect", "onednn", "--layout", "NCX"]) == (
        0,
        "1x3x4x3\n",
    )


@pytest.mark.parametrize("command", [[], ["demo"], ["shape"], ["explain"], ["pool"], ["run"]])
def test_help_has_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    assert "example" in capsys.readouterr().out


# ---------------------------------------------------------------- pool


def test_pool_npy_matches_the_api(tmp_path, x):
    code, text = run(
        [
            "pool",
            tmp_path / "x.npy",
            tmp_path / "y.npy",
            "-k",
            "3,2",
            "-s",
            "2,2",
            "-p",
            "1,0,1,1",
            "--ceil-mode",
            "--count-include-pad",
            "--opset",
            "19",
        ]
    )
    assert code == 0 and "-> ONNX AveragePool-19" in text
    expected = avgpool.average_pool(
        x, [3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1, count_include_pad=1, opset=19
    )
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_pool_batch_by_batch_with_progress(tmp_path, x, capsys):
    code, _ = run(["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--batch-size", "2", "--progress"])
    assert code == 0
    err = capsys.readouterr().err
    assert "pooled 2/5 of N" in err and "pooled 5/5 of N (100%)" in err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), avgpool.average_pool(x, [2, 2]))
    code, _ = run(["pool", tmp_path / "x.npy", tmp_path / "y.npz", "-k", "2,2", "--batch-size", "3", "--quiet"])
    assert code == 0 and capsys.readouterr().err == ""
    with np.load(tmp_path / "y.npz") as archive:
        np.testing.assert_array_equal(archive["y"], avgpool.average_pool(x, [2, 2]))


def test_pool_large_npy_is_memory_mapped_and_written_batch_by_batch(tmp_path):
    import avgpool.cli.files

    array = np.random.default_rng(1).random((6, 2, 10, 10)).astype(np.float64)
    np.save(tmp_path / "big.npy", array)
    assert not isinstance(avgpool.cli.files.read_tensor(tmp_path / "big.npy").array, np.memmap)
    with tuning.tuned(mmap_input_bytes=1024):
        assert isinstance(avgpool.cli.files.read_tensor(tmp_path / "big.npy").array, np.memmap)
        assert run(["pool", tmp_path / "big.npy", tmp_path / "out.npy", "-k", "3,3", "--batch-size", "4", "-q"])[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), avgpool.average_pool(array, [3, 3]))


def test_pool_npz_keys(tmp_path, x):
    np.savez(tmp_path / "two.npz", images=x, other=np.zeros(3))
    fails_argv = ["pool", tmp_path / "two.npz", tmp_path / "y.npz", "-k", "2,2"]
    assert run(fails_argv)[0] == 2
    assert run([*fails_argv, "--key", "images", "--dtype", "float64"])[0] == 0
    with np.load(tmp_path / "y.npz") as archive:
        assert list(archive.keys()) == ["images"]
        np.testing.assert_allclose(archive["images"], avgpool.average_pool(x.astype(np.float64), [2, 2]))


def test_pool_dtype_conversion(tmp_path):
    np.save(tmp_path / "i.npy", np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4))
    assert run(["pool", tmp_path / "i.npy", tmp_path / "o.npy", "-k", "2,2"])[0] == 2  # int32 is not a float type
    assert run(["pool", tmp_path / "i.npy", tmp_path / "o.npy", "-k", "2,2", "-s", "2,2", "--dtype", "float32"])[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o.npy").reshape(-1), [2.5, 4.5, 10.5, 12.5])


def test_pool_image_round_trip(tmp_path):
    from PIL import Image

    rgb = np.random.default_rng(2).integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "in.png")
    assert run(["pool", tmp_path / "in.png", tmp_path / "out.npy", "-k", "2,2", "-s", "2,2"])[0] == 0
    y = np.load(tmp_path / "out.npy")
    expected = avgpool.average_pool(rgb.transpose(2, 0, 1)[None].astype(np.float32), [2, 2], strides=[2, 2])
    assert y.shape == (1, 3, 3, 4) and y.dtype == np.float32
    np.testing.assert_array_equal(y, expected)
    assert run(["pool", tmp_path / "in.png", tmp_path / "out.png", "-k", "2,2", "-s", "2,2"])[0] == 0
    with Image.open(tmp_path / "out.png") as image:
        assert image.mode == "RGB"
        pixels = np.asarray(image)
    np.testing.assert_array_equal(pixels, np.rint(expected[0]).astype(np.uint8).transpose(1, 2, 0))
    # channels last: the image is given to the op as N x H x W x C and written back the right way
    assert run(["pool", tmp_path / "in.png", tmp_path / "nxc.npy", "-k", "2,2", "-s", "2,2", "--layout", "NXC"])[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "nxc.npy"), expected.transpose(0, 2, 3, 1))


def test_pool_image_output_rule(tmp_path):
    from PIL import Image

    values = np.array([[[[-0.4, 0.5, 1.5, 2.5], [254.5, 255.4, 3.0, np.nan]]]], dtype=np.float32)
    np.save(tmp_path / "v.npy", values)
    assert run(["pool", tmp_path / "v.npy", tmp_path / "v.png", "-k", "1,1"])[0] == 0
    with Image.open(tmp_path / "v.png") as image:
        assert image.mode == "L"
        # round half to even, NaN -> 0
        np.testing.assert_array_equal(np.asarray(image), [[0, 0, 2, 2], [254, 255, 3, 0]])


@pytest.mark.parametrize("outside", [-3.0, 255.6, 1e9, np.inf])
def test_pool_image_output_refuses_values_it_would_clip(tmp_path, capsys, outside):
    # a 16-bit grey PNG pooled into a PNG came out all 255, silently
    values = np.array([[[[10.0, outside], [20.0, 30.0]]]], dtype=np.float32)
    np.save(tmp_path / "v.npy", values)
    fails(capsys, ["pool", tmp_path / "v.npy", tmp_path / "v.png", "-k", "1,1"], "outside the 0..255", "write .npy")
    assert not (tmp_path / "v.png").exists()


def test_pool_grayscale_jpeg_in(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((4, 4), 100, dtype=np.uint8)).save(tmp_path / "g.jpg")
    assert run(["pool", tmp_path / "g.jpg", tmp_path / "g.npy", "-k", "4,4"])[0] == 0
    y = np.load(tmp_path / "g.npy")
    assert y.shape == (1, 1, 1, 1) and abs(y.item() - 100) < 3


def test_pool_openvino(tmp_path, x):
    import avgpool.openvino

    code, text = run(
        [
            "pool",
            tmp_path / "x.npy",
            tmp_path / "y.npy",
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
            "--rounding-type",
            "ceil",
            "--exclude-pad",
            "false",
        ]
    )
    assert code == 0 and "OpenVINO AvgPool-16" in text
    expected = avgpool.openvino.avg_pool(
        x, [3, 3], strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], rounding_type="ceil", exclude_pad=False
    )
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_pool_qlinear(tmp_path):
    from avgpool.qlinear import qlinear_average_pool

    q = np.random.default_rng(3).integers(0, 256, size=(3, 2, 6, 6), dtype=np.uint8)
    np.save(tmp_path / "q.npy", q)
    code, _ = run(
        [
            "pool",
            tmp_path / "q.npy",
            tmp_path / "y.npy",
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
            "--batch-size",
            "2",
        ]
    )
    assert code == 0
    expected = qlinear_average_pool(
        q, np.float32(0.1), np.uint8(95), np.float32(0.2), np.uint8(115), [3, 3], pads=[1, 1, 1, 1], count_include_pad=1
    )
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_pool_onednn(tmp_path, x, capsys):
    argv = [
        "pool",
        tmp_path / "x.npy",
        tmp_path / "y.npy",
        "--dialect",
        "onednn",
        "--layout",
        "NCX",
        "-k",
        "2,2",
        "-s",
        "2,2",
    ]
    if not HAS_ONEDNN:
        fails(capsys, argv, "oneDNN dialect is not available")
        return
    import avgpool.onednn

    assert run(argv)[0] == 0
    expected = avgpool.onednn.avg_pool(
        x, [2, 2], strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=True, data_format="NCX"
    )
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


# ---------------------------------------------------------------- hostile and malformed files


def test_pickled_npy_is_refused(tmp_path, capsys):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    fails(capsys, ["pool", tmp_path / "obj.npy", tmp_path / "y.npy", "-k", "1,1"], "Python objects", "pickle")
    # a raw pickle named .npy must not be unpickled either
    (tmp_path / "raw.npy").write_bytes(pickle.dumps(np.zeros((1, 1, 2, 2))))
    fails(capsys, ["pool", tmp_path / "raw.npy", tmp_path / "y.npy", "-k", "1,1"], "not a valid .npy file")
    # nor an object array inside an .npz
    np.savez(tmp_path / "obj.npz", a=np.array([object()], dtype=object))
    fails(capsys, ["pool", tmp_path / "obj.npz", tmp_path / "y.npy", "-k", "1,1"], "Python objects")
    assert not (tmp_path / "y.npy").exists()


def test_truncated_and_padded_npy(tmp_path, x, capsys):
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "short.npy").write_bytes(data[: len(data) - 100])
    fails(capsys, ["pool", tmp_path / "short.npy", tmp_path / "y.npy", "-k", "2,2"], "truncated", "(5, 3, 9, 8)")
    (tmp_path / "header.npy").write_bytes(data[:20])
    fails(capsys, ["pool", tmp_path / "header.npy", tmp_path / "y.npy", "-k", "2,2"], "not a valid .npy file")
    (tmp_path / "long.npy").write_bytes(data + b"\0" * 8)
    fails(capsys, ["pool", tmp_path / "long.npy", tmp_path / "y.npy", "-k", "2,2"], "8 unexpected bytes")
    (tmp_path / "empty.npy").write_bytes(b"")
    fails(capsys, ["pool", tmp_path / "empty.npy", tmp_path / "y.npy", "-k", "2,2"], "not a valid .npy file")
    # a header promising a huge array with no data behind it: refused before any allocation
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6, 10, 10)}
    with open(tmp_path / "huge.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
    fails(capsys, ["pool", tmp_path / "huge.npy", tmp_path / "y.npy", "-k", "2,2"], "truncated")


def _npy_bytes(version: tuple[int, int], header: object, data: bytes) -> bytes:
    """An .npy file of any version whose header is ``repr(header)``, padded as numpy pads it."""
    text = repr(header).encode("utf-8")
    length_format, fixed = ("<H", 10) if version[0] == 1 else ("<I", 12)
    pad = (64 - (fixed + len(text) + 1) % 64) % 64
    length = struct.pack(length_format, len(text) + pad + 1)
    return b"\x93NUMPY" + bytes(version) + length + text + b" " * pad + b"\n" + data


def test_npy_headers_of_every_version_and_hostile_shapes(tmp_path, capsys):
    good = {"descr": "<f4", "fortran_order": False, "shape": (1, 1, 2, 2)}
    data = np.arange(4, dtype="<f4").tobytes()
    # 3.0 (numpy's format for UTF-8 field names) is read as 1.0 and 2.0 are
    (tmp_path / "v3.npy").write_bytes(_npy_bytes((3, 0), good, data))
    code, _ = run(["pool", tmp_path / "v3.npy", tmp_path / "y.npy", "-k", "2,2"])
    assert code == 0 and np.load(tmp_path / "y.npy").item() == 1.5
    for name, version, header, needle in [
        ("v9.npy", (9, 0), good, "format version 9.0"),
        ("bool.npy", (1, 0), {**good, "shape": (True, 1, 2, 2)}, "is not a tuple of non-negative integers"),
        ("negative.npy", (2, 0), {**good, "shape": (-1, 1, 2, 2)}, "is not a tuple of non-negative integers"),
        ("extra.npy", (3, 0), {**good, "x": 1}, "is not a dictionary of descr, fortran_order and shape"),
        ("code.npy", (3, 0), "__import__('os').getcwd()", "is not a dictionary"),
    ]:
        (tmp_path / name).write_bytes(_npy_bytes(version, header, data))
        fails(capsys, ["pool", tmp_path / name, tmp_path / "z.npy", "-k", "2,2"], "not a valid .npy file", needle)
    assert not (tmp_path / "z.npy").exists()


def test_an_npz_with_two_members_for_one_array_is_refused(tmp_path, x, capsys):
    data = (tmp_path / "x.npy").read_bytes()
    with zipfile.ZipFile(tmp_path / "two.npz", "w") as archive:
        archive.writestr("x.npy", data)
        archive.writestr("x", data[:-4])  # np.load would call both of them "x"
    fails(
        capsys,
        ["pool", tmp_path / "two.npz", tmp_path / "y.npy", "-k", "2,2"],
        "holds two members for the array 'x': 'x.npy' and 'x'",
    )


def test_malformed_npz_and_images(tmp_path, x, capsys):
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not really a zip")
    fails(capsys, ["pool", tmp_path / "bad.npz", tmp_path / "y.npy", "-k", "2,2"], "not a valid .npz")
    data = (tmp_path / "x.npy").read_bytes()
    with zipfile.ZipFile(tmp_path / "short.npz", "w") as archive:
        archive.writestr("x.npy", data[:-10])
    fails(capsys, ["pool", tmp_path / "short.npz", tmp_path / "y.npy", "-k", "2,2"], "truncated")
    fails(capsys, ["pool", tmp_path / "short.npz", tmp_path / "y.npy", "-k", "2,2", "--key", "nope"], "no array 'nope'")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    fails(capsys, ["pool", tmp_path / "bad.png", tmp_path / "y.npy", "-k", "2,2"], "not a readable PNG or JPEG")
    from PIL import Image

    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "gif.png", format="GIF")
    fails(capsys, ["pool", tmp_path / "gif.png", tmp_path / "y.npy", "-k", "2,2"], "GIF")


def _png16(path, colour_type: int, samples: int, value: int = 258) -> None:
    """A 4 x 4 16-bit PNG of ``samples`` samples a pixel, every sample ``value``."""
    import zlib

    row = b"\x00" + value.to_bytes(2, "big") * samples * 4

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 4, 4, 16, colour_type, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * 4)) + chunk(b"IEND", b"")
    )


def test_16_bit_pngs_keep_their_values_or_are_refused(tmp_path, capsys):
    pytest.importorskip("PIL")
    _png16(tmp_path / "grey.png", 0, 1)  # Pillow keeps 16-bit grey
    code, _ = run(["pool", tmp_path / "grey.png", tmp_path / "y.npy", "-k", "2,2"])
    assert code == 0 and set(np.load(tmp_path / "y.npy").ravel()) == {258.0}
    for name, colour_type, samples in (("rgb.png", 2, 3), ("rgba.png", 6, 4), ("greyalpha.png", 4, 2)):
        _png16(tmp_path / name, colour_type, samples)  # Pillow would read 8 bits a sample
        fails(capsys, ["pool", tmp_path / name, tmp_path / "z.npy", "-k", "2,2"], "16-bit", "reads as 8 bits")


def test_quantized_flags_out_of_range_and_batch_sizes(tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.zeros((2, 1, 4, 4), np.uint8))
    q = ["pool", tmp_path / "q.npy", tmp_path / "y.npy", "-k", "2,2", "--dialect", "qlinear"]
    fails(capsys, [*q, "--x-zero-point", "300"], "`x_zero_point` is 300: it does not fit X's dtype uint8")
    fails(capsys, [*q, "--y-zero-point", "-1"], "`y_zero_point` is -1")
    fails(capsys, [*q, "--x-scale", "1e300"], "`x_scale` is 1e+300, as float32 inf: it must be finite")
    for size in ("-1", "0", "two"):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            run([*q, "--batch-size", size])
        assert exit_.value.code == 2 and f"expected a positive integer, got '{size}'" in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()


def test_wrong_shapes_and_extensions(tmp_path, x, capsys):
    np.save(tmp_path / "flat.npy", np.zeros((4, 4), np.float32))
    fails(capsys, ["pool", tmp_path / "flat.npy", tmp_path / "y.npy", "-k", "2,2"], "at least 3 dimensions")
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2,2"], "`kernel_shape` has 3 values")
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "20,2"], "no output")
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.png", "-k", "2,2"], "1 x C x H x W")
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.csv", "-k", "2,2"], "unknown extension '.csv'")
    (tmp_path / "x.txt").write_text("1 2 3")
    fails(capsys, ["pool", tmp_path / "x.txt", tmp_path / "y.npy", "-k", "2,2"], "unknown extension '.txt'")
    fails(capsys, ["pool", tmp_path / "missing.npy", tmp_path / "y.npy", "-k", "2,2"], "no such file")
    fails(
        capsys,
        ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "-p", "1,1,1"],
        "2 values per spatial axis",
    )
    fails(
        capsys,
        ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "-p", "1,1,1,1", "--pads-begin", "1,1"],
        "not both",
    )
    # the values as typed, not the flat ONNX pads they are joined into
    fails(
        capsys,
        ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--pads-begin", "1"],
        "--pads-begin has 1 value [1] but --kernel has 2: one value per spatial axis",
    )
    fails(
        capsys,
        ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--pads-begin", "1,1", "--pads-end", "1,1,1"],
        "--pads-end has 3 values [1, 1, 1]",
    )
    fails(capsys, ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--dialect", "qlinear"], "uint8")
    fails(
        capsys,
        ["pool", tmp_path / "x.npy", tmp_path / "y.npy", "-k", "2,2", "--dialect", "openvino", "--layout", "NXC"],
        "NCX only",
    )


# ---------------------------------------------------------------- run


def _pool_model(opset: int, **attributes):
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_run_model_with_inputs_outputs_and_check(tmp_path, capsys):
    import onnx

    onnx.save(_pool_model(11, kernel_shape=[3], pads=[1, 1], count_include_pad=1), tmp_path / "m.onnx")
    x = np.arange(1, 11, dtype=np.float32).reshape(2, 1, 5)
    np.save(tmp_path / "x.npy", x)
    code, text = run(
        ["run", tmp_path / "m.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out", "--check"]
    )
    assert code == 0, text
    y = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(y[0, 0], [1, 2, 3, 4, 3], rtol=1e-6)
    assert "check y against onnxruntime: max abs diff" in text and "[ok" in text
    # generated input: the symbolic batch is 1
    code, text = run(["run", tmp_path / "m.onnx", "--output-dir", tmp_path / "gen", "--seed", "3"])
    assert code == 0 and "input x: generated random 1x1x5 float32" in text
    assert np.load(tmp_path / "gen" / "y.npy").shape == (1, 1, 5)


def test_run_respects_the_model_opset(tmp_path):
    import onnx

    # docs/semantics.md section 7: opset 1 never counts pads ([1.5, 2, 3, 4, 4.5]; onnx.reference gives [1, 2, 3, 4, 3])
    onnx.save(_pool_model(1, kernel_shape=[3], pads=[1, 1]), tmp_path / "m1.onnx")
    np.save(tmp_path / "x.npy", np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5))
    code, _ = run(["run", tmp_path / "m1.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "o"])
    assert code == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy").reshape(-1), [1.5, 2, 3, 4, 4.5])


def test_run_errors(tmp_path, capsys):
    import onnx

    onnx.save(_pool_model(11, kernel_shape=[3]), tmp_path / "m.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage\xff\xff")
    fails(capsys, ["run", tmp_path / "bad.onnx"], "not a valid ONNX model")
    fails(capsys, ["run", tmp_path / "nope.onnx"], "no such file")
    np.save(tmp_path / "x.npy", np.zeros((1, 2, 5), np.float32))
    fails(capsys, ["run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x.npy'}"], "the model declares ?x1x5")
    fails(capsys, ["run", tmp_path / "m.onnx", "-i", f"z={tmp_path / 'x.npy'}"], "no such input")
    fails(capsys, ["run", tmp_path / "m.onnx", "-i", "x"], "NAME=PATH")
    np.save(tmp_path / "x64.npy", np.zeros((1, 1, 5), np.float64))
    fails(capsys, ["run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x64.npy'}"], "dtype float64")
    # an attribute the opset does not have: avgpool's message, exit 2
    onnx.save(_pool_model(9, kernel_shape=[3], ceil_mode=1), tmp_path / "m9.onnx")
    fails(capsys, ["run", tmp_path / "m9.onnx"], "`ceil_mode` does not exist before AveragePool-10")


def _onnxruntime_seen() -> bool:
    """The onnxruntime releases whose answers on these two models were looked at: through 1.32
    (constraints.txt pins 1.32.0). There its AveragePool sums each window in float32, and its SAME
    padding with dilations sizes the output by the undilated kernel; a later release may fix
    either, which changes what --check finds but nothing avgpool writes."""
    ort = pytest.importorskip("onnxruntime")
    from packaging.version import Version

    return Version(ort.__version__).release[:2] <= (1, 32)


def _onnxruntime_run(path, feeds: dict) -> list[np.ndarray]:
    """The model run by onnxruntime itself, not through avgpool."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_run_check_counts_the_values_that_differ(tmp_path, monkeypatch):
    # a QDQ chain: avgpool's exact averages hit the rounding ties that QuantizeLinear then rounds
    # to even; a float32 sum (onnxruntime's, through 1.32) lands beside some of them, a step
    # away: --check says how many values differ, the count being onnxruntime's real one
    import onnx
    from onnx import TensorProto, helper

    import avgpool.onnx as avgpool_onnx

    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]),
        helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[4], strides=[4]),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["y"]),
    ]
    scalars = [
        helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]),
        helper.make_tensor("z", TensorProto.UINT8, [], [0]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [1, 1, 4000])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        initializer=scalars,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), tmp_path / "m.onnx")
    q = np.random.default_rng(0).integers(0, 256, (1, 1, 4000)).astype(np.uint8)
    np.save(tmp_path / "q.npy", q)
    argv = ["run", tmp_path / "m.onnx", "-i", f"q={tmp_path / 'q.npy'}", "--check", "-o"]
    code, text = run([*argv, tmp_path / "out"])
    scale = np.float32(0.1)
    averages = (q.astype(np.float32) * scale).astype(np.float64).reshape(-1, 4).mean(axis=1).astype(np.float32)
    ours = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_array_equal(ours.reshape(-1), np.clip(np.rint(averages / scale), 0, 255).astype(np.uint8))
    (theirs,) = _onnxruntime_run(tmp_path / "m.onnx", {"q": q})
    differ = int(np.count_nonzero(ours != theirs))  # uint8: one step is beyond any --check tolerance
    if _onnxruntime_seen():
        assert differ > 0  # onnxruntime <= 1.32: its float32 sums miss ties
    if differ:
        assert code == 1
        assert re.search(rf"check y against onnxruntime: .*\[DIFFERENT: {differ} of 1000 values at", text), text
    else:  # a later onnxruntime agrees everywhere: say so, and count a disagreement made here
        assert code == 0 and "[ok" in text, text
        bumped = theirs.copy()
        bumped.reshape(-1)[[3, 500, 999]] ^= 1
        monkeypatch.setattr(avgpool_onnx, "onnxruntime_outputs", lambda model, feeds, names=None: [bumped])
        code, text = run([*argv, tmp_path / "again"])
        assert code == 1
        assert re.search(r"check y against onnxruntime: .*\[DIFFERENT: 3 of 1000 values at", text), text


def test_run_check_when_onnxruntime_cannot_run_the_model(tmp_path, capsys):
    # AveragePool-1 with pads: avgpool runs it (semantics 7), onnxruntime has no kernel for it
    import onnx

    onnx.save(_pool_model(1, kernel_shape=[3], pads=[1, 1]), tmp_path / "m1.onnx")
    capsys.readouterr()
    code, text = run(["run", tmp_path / "m1.onnx", "-o", tmp_path / "out", "--check"])
    err = capsys.readouterr().err
    assert code == 1 and (tmp_path / "out" / "y.npy").exists()
    assert err.startswith("avgpool run: --check: onnxruntime cannot run this model:") and err.count("\n") == 1, err


def test_run_inputs_outputs_and_opset_refusals(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [
            helper.make_node("SequenceAt", ["s", "i"], ["x"]),
            helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2]),
        ],
        "g",
        [sequence],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("i", TensorProto.INT64, [], [0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8), tmp_path / "s.onnx")
    fails(capsys, ["run", tmp_path / "s.onnx"], "input 's' is not a tensor (sequence_type)")
    onnx.save(_pool_model(11, kernel_shape=[3]), tmp_path / "m.onnx")
    fails(capsys, ["run", tmp_path / "m.onnx", "--opset", "0"], "`opset` is 0")
    # outputs Y, y and y_2: y_2 keeps its file, y (Y's on a case-insensitive disk) takes y_3
    nodes = [
        helper.make_node("AveragePool", ["x"], [name], kernel_shape=[k]) for name, k in (("Y", 2), ("y", 1), ("y_2", 3))
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("Y", "y", "y_2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5])], outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=8), tmp_path / "o.onnx")
    code, text = run(["run", tmp_path / "o.onnx", "-o", tmp_path / "out"])
    assert code == 0, text
    shapes = {name: np.load(tmp_path / "out" / f"{name}.npy").shape for name in ("Y", "y_2", "y_3")}
    assert shapes == {"Y": (1, 1, 4), "y_2": (1, 1, 3), "y_3": (1, 1, 5)}, text


def test_run_a_model_with_a_node_the_evaluator_has_no_implementation_of(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("NoSuchPool", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.example", 1)])
    onnx.save(model, tmp_path / "m.onnx")
    capsys.readouterr()
    code, _ = run(["run", tmp_path / "m.onnx"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("avgpool run: the reference evaluator cannot run this model:") and "NoSuchPool" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- a real process


def test_real_subprocess(tmp_path, x):
    env = dict(os.environ, PYTHONWARNINGS="error")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "avgpool",
            "pool",
            str(tmp_path / "x.npy"),
            str(tmp_path / "y.npy"),
            "-k",
            "2,2",
            "-s",
            "2,2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), avgpool.average_pool(x, [2, 2], strides=[2, 2]))
    np.save(tmp_path / "obj.npy", np.array([None], dtype=object), allow_pickle=True)
    done = subprocess.run(
        [sys.executable, "-m", "avgpool", "pool", str(tmp_path / "obj.npy"), str(tmp_path / "z.npy"), "-k", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("avgpool pool: error:") and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_warmup_reports_each_kind_and_where_kernels_are_kept():
    out = io.StringIO()
    assert main(["warmup", "float64", "qlinear-int8"], stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["float64", "qlinear-int8"]
    assert lines[2].startswith("kernels compiled here are kept in: ")
    assert main(["warmup", "no-such-kind"], stdout=out) == 2


@pytest.mark.parametrize("program", [True, False])
def test_the_program_freezes_the_collector_after_every_other_exit_handler(program):
    # the program's exit skips the interpreter's collections over numba's objects (0.3 s of a
    # 1.3 s command); main() called as a library function leaves the caller's collector alone
    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
        "from avgpool.cli import main\n"
        "sys.argv = ['avgpool', 'shape', '1x1x4', '-k', '2']\n"
        f"code = main({'' if program else 'sys.argv[1:]'})\n"
        "print('frozen before exit:', gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1x1x3", "frozen before exit: False", f"frozen at exit: {program}"]


def test_a_large_image_is_read_without_pillows_warning(tmp_path, monkeypatch):
    Image = pytest.importorskip("PIL.Image")
    Image.fromarray(np.full((4, 4), 7, np.uint8)).save(tmp_path / "g.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)  # 16 pixels: Pillow's warning, not yet its refusal
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _ = run(["pool", tmp_path / "g.png", tmp_path / "y.npy", "-k", "2,2"])
    assert code == 0 and set(np.load(tmp_path / "y.npy").ravel()) == {7.0}


@pytest.mark.parametrize(
    "argv, label",
    [
        (["shape", "1x3x8x8", "-k", "3,3", "-s", "0,1"], "ONNX AveragePool-22 (opset 22): `strides` is (0, 1)"),
        (["shape", "1x3x8x8", "-k", "3,3", "-s", "0,1", "--dialect", "openvino"], "OpenVINO AvgPool-16: `strides`"),
        (
            ["explain", "1x1x4", "-k", 2**40, "-d", 2**40, "--auto-pad", "SAME_UPPER"],
            "ONNX AveragePool-22 (opset 22): `kernel_shape` (1099511627776,) with `dilations`",
        ),
    ],
)
def test_shape_and_explain_name_the_operator_that_refuses(capsys, argv, label):
    fails(capsys, argv, label)


@pytest.mark.parametrize("shape, kernel, typo", [("1x3x32x32x", "3,3", "1x3x32x32x"), ("1x3x32x32", "3,,3", "3,,3")])
def test_an_empty_number_in_a_list_flag_is_a_typo_not_skipped(capsys, shape, kernel, typo):
    with pytest.raises(SystemExit) as exit_:
        run(["shape", shape, "-k", kernel])  # argparse's usage error
    assert exit_.value.code == 2
    assert f"expected comma-separated integers, got '{typo}'" in capsys.readouterr().err


def test_run_check_names_the_shapes_when_onnxruntime_gives_another(tmp_path, capsys, monkeypatch):
    # the line said "max abs diff inf" and no more. onnxruntime (through 1.32) sizes SAME padding
    # with dilations by the undilated kernel, a shorter output than avgpool's 2x1x5 (the spec's
    # ceil(5 / 1)); where a later one agrees, a shorter output is made here instead
    import onnx

    import avgpool.onnx as avgpool_onnx

    model = _pool_model(19, kernel_shape=[3], dilations=[2], auto_pad="SAME_UPPER")
    onnx.save(model, tmp_path / "m.onnx")
    x = np.arange(1, 11, dtype=np.float32).reshape(2, 1, 5)
    np.save(tmp_path / "x.npy", x)
    (theirs,) = _onnxruntime_run(tmp_path / "m.onnx", {"x": x})
    if _onnxruntime_seen():
        assert theirs.shape != (2, 1, 5)  # onnxruntime <= 1.32: the undilated kernel's size
    if theirs.shape == (2, 1, 5):
        theirs = theirs[..., :3]
        monkeypatch.setattr(avgpool_onnx, "onnxruntime_outputs", lambda model, feeds, names=None: [theirs])
    code, text = run(
        ["run", tmp_path / "m.onnx", "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out", "--check"]
    )
    assert code == 1
    assert np.load(tmp_path / "out" / "y.npy").shape == (2, 1, 5)
    shape = "x".join(map(str, theirs.shape))
    assert f"check y against onnxruntime: [DIFFERENT shapes: avgpool 2x1x5, onnxruntime {shape}]" in text, text


def test_run_refuses_an_output_dir_that_is_a_file_before_running(tmp_path, capsys):
    import onnx

    onnx.save(_pool_model(11, kernel_shape=[3]), tmp_path / "m.onnx")
    (tmp_path / "x.npy").write_bytes(b"keep")
    fails(capsys, ["run", tmp_path / "m.onnx", "-o", tmp_path / "x.npy"], "is a file, not a folder")
    assert (tmp_path / "x.npy").read_bytes() == b"keep"


def test_pool_names_the_flag_a_dialect_needs(tmp_path, capsys):
    # --x-scale without --dialect qlinear was ignored, then the uint8 input refused by ONNX; an
    # int64 input's refusal listed dtypes, not the --dtype that converts it
    np.save(tmp_path / "q.npy", np.zeros((1, 1, 4, 4), np.uint8))
    np.save(tmp_path / "i.npy", np.arange(16, dtype=np.int64).reshape(1, 1, 4, 4))
    fails(
        capsys,
        ["pool", tmp_path / "q.npy", tmp_path / "o.npy", "-k", "2,2", "--x-scale", "0.1"],
        "--x-scale is a QLinearAveragePool flag",
        "add --dialect qlinear",
    )
    fails(capsys, ["pool", tmp_path / "i.npy", tmp_path / "o.npy", "-k", "2,2"], "dtype int64", "--dtype float32")
    assert run(["pool", tmp_path / "i.npy", tmp_path / "o.npy", "-k", "2,2", "--dtype", "float32", "-q"])[0] == 0
    assert np.load(tmp_path / "o.npy")[0, 0, 0, 0] == 2.5  # (0 + 1 + 4 + 5) / 4
