"""Reading and writing tensors for the command line: .npy, .npz and images, never with pickle.

- ``.npy`` / ``.npz``: the header is read and checked before any data: object (pickled) and
  structured dtypes are refused, and the byte count the header promises must be exactly what the
  file holds (a truncated file is an error, not a short read). Loading uses
  ``np.load(..., allow_pickle=False)``; a large ``.npy`` is memory-mapped, so pooling it batch by
  batch never holds the whole input in memory.
- Images (``.png``, ``.jpg``, ``.jpeg``, via Pillow, ``pip install 'avgpool[images]'``) are read as
  one N x C x H x W tensor (N = 1; C = 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA), with the pixel values
  unchanged (0..255 for 8-bit images, uint8; the command line converts to float32 for the float
  dialects).
- Writing an image: N must be 1 and C 1 to 4; each value is rounded half to even
  (``np.rint``), clipped to 0..255 and stored as 8 bits; NaN becomes 0.

Every problem with a file raises :class:`FileFormatError` (a ValueError) naming the file.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

TENSOR_SUFFIXES = (".npy", ".npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: Above this size an .npy input is memory-mapped instead of read.
MMAP_THRESHOLD = 16 * 2**20


class FileFormatError(ValueError):
    """A file avgpool cannot or will not read or write."""


@dataclass(frozen=True)
class Tensor:
    array: np.ndarray  # possibly a read-only memory map
    kind: str  # "npy", "npz" or "image"
    key: str | None = None  # the .npz member


def suffix(path: Any) -> str:
    return os.path.splitext(os.fspath(path))[1].lower()


def check_suffix(path: Any, *, writing: bool) -> str:
    """The file's kind from its extension, or a FileFormatError listing the known ones."""
    ext = suffix(path)
    if ext in TENSOR_SUFFIXES:
        return ext[1:]
    if ext in IMAGE_SUFFIXES:
        return "image"
    known = ", ".join(TENSOR_SUFFIXES + IMAGE_SUFFIXES)
    raise FileFormatError(f"{os.fspath(path)}: unknown extension {ext or '(none)'!r} for "
                          f"{'an output' if writing else 'an input'}; use one of {known}")


def _read_header(fp: BinaryIO, what: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """shape, fortran_order, dtype and the data's byte count, from an .npy header."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        else:
            shape, fortran, dtype = fmt._read_array_header(fp, version)  # 3.0: utf-8 field names
    except (ValueError, EOFError, OSError, SyntaxError, TypeError) as err:
        raise FileFormatError(f"{what} is not a valid .npy file: {err}") from None
    if dtype.hasobject:
        raise FileFormatError(f"{what} holds Python objects (dtype {dtype}): that needs pickle, which avgpool never "
                              "uses to read files; save plain numeric arrays")
    if dtype.fields is not None or dtype.kind == "V":
        raise FileFormatError(f"{what} has a structured or void dtype {dtype}: save a plain numeric array")
    return tuple(shape), fortran, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _check_size(what: str, shape: tuple[int, ...], dtype: np.dtype, expected: int, available: int) -> None:
    if available < expected:
        raise FileFormatError(f"{what} is truncated: its header promises shape {shape} of {dtype} "
                              f"({expected} bytes) but only {available} bytes of data follow")
    if available > expected:
        raise FileFormatError(f"{what} has {available - expected} unexpected bytes after the {shape} {dtype} array")


def read_npy(path: Any) -> np.ndarray:
    path = os.fspath(path)
    with open(path, "rb") as fp:
        shape, _, dtype, expected = _read_header(fp, path)
        available = os.fstat(fp.fileno()).st_size - fp.tell()
    _check_size(path, shape, dtype, expected, available)
    big = expected >= MMAP_THRESHOLD
    try:
        return np.load(path, mmap_mode="r" if big else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # pragma: no cover - the checks above should catch it
        raise FileFormatError(f"{path} cannot be read: {err}") from None


def read_npz(path: Any, key: str | None = None) -> tuple[np.ndarray, str]:
    path = os.fspath(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise FileFormatError(f"{path} is not a valid .npz (zip) file: {err}") from None
    with archive:
        members = {name[:-4] if name.endswith(".npy") else name: name for name in archive.namelist()}
        if key is None:
            if len(members) != 1:
                raise FileFormatError(f"{path} holds {len(members)} arrays {sorted(members)}: choose one with --key")
            key = next(iter(members))
        if key not in members:
            raise FileFormatError(f"{path} has no array {key!r}; it holds {sorted(members)}")
        info = archive.getinfo(members[key])
        what = f"{path}[{key}]"
        try:
            with archive.open(info) as fp:
                shape, _, dtype, expected = _read_header(fp, what)
                header_size = fp.tell()
            _check_size(what, shape, dtype, expected, info.file_size - header_size)
            with archive.open(info) as fp:
                array = np.load(fp, allow_pickle=False)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
            if isinstance(err, FileFormatError):
                raise
            raise FileFormatError(f"{what} cannot be read: {err}") from None
    return array, key


def read_image(path: Any) -> np.ndarray:
    """An image as a 1 x C x H x W array of its pixel values (uint8 for 8-bit images)."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise FileFormatError("reading images needs Pillow: pip install 'avgpool[images]'") from None
    path = os.fspath(path)
    try:
        with Image.open(path) as image:
            if image.format not in ("PNG", "JPEG"):
                raise FileFormatError(f"{path} is a {image.format} image; avgpool reads PNG and JPEG")
            if image.mode in ("P", "PA", "CMYK", "YCbCr", "LAB", "HSV", "RGBX"):
                image = image.convert("RGBA" if "transparency" in image.info or image.mode == "PA" else "RGB")
            elif image.mode == "1":
                image = image.convert("L")
            pixels = np.asarray(image)
    except FileFormatError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise FileFormatError(f"{path} is not a readable PNG or JPEG image: {err}") from None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return np.ascontiguousarray(pixels.transpose(2, 0, 1)[None])


def read_tensor(path: Any, *, key: str | None = None) -> Tensor:
    """Read an input file by its extension."""
    kind = check_suffix(path, writing=False)
    if not os.path.isfile(os.fspath(path)):
        raise FileFormatError(f"{os.fspath(path)}: no such file")
    if kind == "npy":
        return Tensor(read_npy(path), "npy")
    if kind == "npz":
        array, key = read_npz(path, key)
        return Tensor(array, "npz", key)
    return Tensor(read_image(path), "image")


def to_image_pixels(array: np.ndarray) -> np.ndarray:
    """N x C x H x W values -> H x W x C uint8: round half to even, clip to 0..255, NaN -> 0."""
    if array.ndim != 4 or array.shape[0] != 1 or not 1 <= array.shape[1] <= 4:
        raise FileFormatError(f"an image needs an output of shape 1 x C x H x W with C from 1 to 4, not "
                              f"{'x'.join(map(str, array.shape))}; write .npy or .npz instead")
    values = np.asarray(array, dtype=np.float64)
    values = np.clip(np.rint(np.nan_to_num(values, nan=0.0, posinf=255.0, neginf=0.0)), 0, 255)
    return values.astype(np.uint8)[0].transpose(1, 2, 0)


def write_image(path: Any, array: np.ndarray) -> None:
    try:
        from PIL import Image
    except ImportError:
        raise FileFormatError("writing images needs Pillow: pip install 'avgpool[images]'") from None
    pixels = to_image_pixels(array)
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[pixels.shape[2]]
    image = Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels)  # uint8: L, LA, RGB or RGBA
    if suffix(path) in (".jpg", ".jpeg") and mode in ("LA", "RGBA"):
        image = image.convert("L" if mode == "LA" else "RGB")  # JPEG has no alpha
    image.save(os.fspath(path))


def write_tensor(path: Any, array: np.ndarray, *, key: str = "y") -> None:
    kind = check_suffix(path, writing=True)
    if kind == "npy":
        np.save(os.fspath(path), array, allow_pickle=False)
    elif kind == "npz":
        np.savez(os.fspath(path), **{key: array})
    else:
        write_image(path, array)
