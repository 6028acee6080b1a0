"""Reading and writing tensors for the command line: .npy, .npz and images, never with pickle.

- ``.npy`` / ``.npz``: the header is read and checked before any data: object (pickled) and
  structured dtypes are refused, and the byte count the header promises must be exactly what the
  file holds (a truncated file is an error, not a short read). Loading uses
  ``np.load(..., allow_pickle=False)``; a large ``.npy`` is memory-mapped, so pooling it batch by
  batch never holds the whole input in memory.
- Images (``.png``, ``.jpg``, ``.jpeg``, via Pillow, ``pip install 'avgpool[images]'``) are read as
  one N x C x H x W tensor (N = 1; C = 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA), with the pixel values
  unchanged (0..255 for 8-bit images, uint8; :func:`as_pool_input` converts them to float32 for the
  float dialects).
- Writing an image: N must be 1 and C 1 to 4; each value is rounded half to even
  (``np.rint``) and stored as 8 bits; NaN becomes 0; a value that would round outside 0..255 (a
  16-bit grey PNG's, or a .npy's) is refused rather than clipped.

- ``.npz`` inputs are untrusted: a member that would inflate to more than the memory available
  is refused before any of it is decompressed, and member names never become paths (an output
  archive's member name is :func:`safe_member_name`'s).
- Every output is written to a temporary file beside the target and renamed onto it only when
  complete (:func:`replacing`): an error, a full disk or an interrupt leaves the old file as it was.
- Zarr stores (``pip install 'avgpool[dask]'``): a path is one when it ends in ``.zarr`` or is an
  existing directory (:func:`is_zarr`); an input store is an array, or a group with ``--key``
  naming its array (:func:`open_zarr`). An output store is written into a temporary directory
  beside the target and swapped in only when complete (:func:`replacing_directory`); an existing
  target is replaced only if it is a zarr array itself (:func:`check_zarr_target`), never another
  directory.

Every problem with a file raises :class:`FileFormatError` (a ValueError) naming the file.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import re
import secrets
import shutil
import signal
import stat
import struct
import threading
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .._core import tuning
from .interrupts import set_sigint

TENSOR_SUFFIXES = (".npy", ".npz")
ZARR_SUFFIX = ".zarr"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


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
    raise FileFormatError(
        f"{os.fspath(path)}: unknown extension {ext or '(none)'!r} for "
        f"{'an output' if writing else 'an input'}; use one of {known}"
    )


def _read_header(fp: BinaryIO, what: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """shape, fortran_order, dtype and the data's byte count, from an .npy header."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        elif version == (3, 0):
            shape, fortran, dtype = _read_header_3_0(fp)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]}, which numpy does not define (1.0 to 3.0)")
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, struct.error) as err:
        raise FileFormatError(f"{what} is not a valid .npy file: {err}") from None
    if not all(type(n) is int and n >= 0 for n in shape):  # numpy's readers let True and -1 through
        raise FileFormatError(
            f"{what} is not a valid .npy file: its header's shape {shape} is not a tuple of non-negative integers"
        )
    if dtype.hasobject:
        raise FileFormatError(
            f"{what} holds Python objects (dtype {dtype}): that needs pickle, which avgpool never "
            "uses to read files; save plain numeric arrays"
        )
    if dtype.fields is not None or dtype.kind == "V":
        raise FileFormatError(f"{what} has a structured or void dtype {dtype}: save a plain numeric array")
    return tuple(shape), fortran, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _read_header_3_0(fp: BinaryIO) -> tuple[Any, bool, np.dtype]:
    """An .npy 3.0 header (2.0's, in UTF-8: numpy writes it for field names beyond latin-1),
    which numpy reads only through a private function: a literal dictionary, never evaluated
    as code."""
    (length,) = struct.unpack("<I", fp.read(4))
    header = ast.literal_eval(fp.read(length).decode("utf-8"))
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"the header is not a dictionary of descr, fortran_order and shape: {header!r}")
    if not isinstance(header["shape"], tuple) or not isinstance(header["fortran_order"], bool):
        raise ValueError(f"the header's shape or fortran_order is not valid: {header!r}")
    return header["shape"], header["fortran_order"], np.lib.format.descr_to_dtype(header["descr"])


def _check_size(what: str, shape: tuple[int, ...], dtype: np.dtype, expected: int, available: int) -> None:
    if available < expected:
        raise FileFormatError(
            f"{what} is truncated: its header promises shape {shape} of {dtype} "
            f"({expected} bytes) but only {available} bytes of data follow"
        )
    if available > expected:
        raise FileFormatError(f"{what} has {available - expected} unexpected bytes after the {shape} {dtype} array")


def read_npy(path: Any) -> np.ndarray:
    path = os.fspath(path)
    with open(path, "rb") as fp:
        shape, _, dtype, expected = _read_header(fp, path)
        available = os.fstat(fp.fileno()).st_size - fp.tell()
    _check_size(path, shape, dtype, expected, available)
    big = expected >= tuning.current().mmap_input_bytes
    try:
        return np.load(path, mmap_mode="r" if big else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # pragma: no cover - the checks above should catch it
        raise FileFormatError(f"{path} cannot be read: {err}") from None


def available_memory() -> int:
    """Bytes this process can still allocate, as far as the system says: Linux's MemAvailable, or
    the free physical pages, and no more than the address-space limit."""
    found = None
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as meminfo:
        found = next((int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")), None)
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # not reported on this system: no limit known
            found = 2**63 - 1
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            found = min(found, soft)
    return found


def _check_inflated_size(what: str, info: zipfile.ZipInfo) -> None:
    """Refuse a member larger than memory before decompressing any of it (a zip bomb's ratio can
    exceed 1000:1). zipfile stops reading at the declared size, and the .npy header is then
    checked against that size, so nothing larger is ever read."""
    limit = available_memory()
    if info.file_size > limit:
        raise FileFormatError(
            f"{what} would take {info.file_size} bytes of memory once read ({info.compress_size} "
            f"bytes in the archive), more than the {limit} available: refused unread"
        )


def read_npz(path: Any, key: str | None = None) -> tuple[np.ndarray, str]:
    path = os.fspath(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise FileFormatError(f"{path} is not a valid .npz (zip) file: {err}") from None
    with archive:
        members: dict[str, str] = {}
        for name in archive.namelist():
            array_name = name.removesuffix(".npy")
            if array_name in members:  # "x" and "x.npy", or one name twice: which is x?
                raise FileFormatError(
                    f"{path} holds two members for the array {array_name!r}: {members[array_name]!r} and {name!r}"
                )
            members[array_name] = name
        if key is None:
            if len(members) != 1:
                raise FileFormatError(f"{path} holds {len(members)} arrays {sorted(members)}: choose one with --key")
            key = next(iter(members))
        if key not in members:
            raise FileFormatError(f"{path} has no array {key!r}; it holds {sorted(members)}")
        info = archive.getinfo(members[key])
        what = f"{path}[{key}]"
        _check_inflated_size(what, info)
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
        with warnings.catch_warnings():
            # above ~89 million pixels Pillow warns of a decompression bomb (several lines on stderr);
            # above twice that it refuses, which is reported below in one line
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(path)
        with image:
            if image.format not in ("PNG", "JPEG"):
                raise FileFormatError(f"{path} is a {image.format} image; avgpool reads PNG and JPEG")
            if image.format == "PNG" and image.mode != "I;16" and _png_bit_depth(path) == 16:
                # Pillow keeps 16 bits only for grey: colour or alpha it reads as 8 bits, silently
                raise FileFormatError(
                    f"{path} is a 16-bit {image.mode} PNG, which Pillow reads as 8 bits a "
                    "sample: save it as .npy (or as 16-bit grey) to pool its values unchanged"
                )
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


def _png_bit_depth(path: str) -> int:
    """The bits a sample of a PNG file: its IHDR chunk's bit depth (byte 24, the chunk being the
    first, as the format requires)."""
    with open(path, "rb") as fp:
        head = fp.read(25)
    return head[24] if len(head) == 25 and head[12:16] == b"IHDR" else 0


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


def as_pool_input(block: Any, *, dtype: str | None, image: bool, channels_last: bool, quantized: bool) -> np.ndarray:
    """A block read from a file as the dialect takes it: an image's N x C x H x W turned channels
    last if the dialect wants it, converted to ``dtype`` (``--dtype``), or an image to float32 for
    the float dialects."""
    array = np.asarray(block)
    if not (dtype or image or quantized) and array.dtype.kind in "iub":
        # the dialect's own message lists its float dtypes, not the flag that converts
        raise FileFormatError(
            f"the input has dtype {array.dtype}, which the float dialects do not pool: --dtype float32 (or "
            "float64) converts it; uint8/int8 data is QLinearAveragePool's (--dialect qlinear)"
        )
    if image and channels_last:
        array = array.transpose(0, 2, 3, 1)
    if dtype:
        array = array.astype(dtype)
    elif image and not quantized:
        array = array.astype(np.float32)
    return np.ascontiguousarray(array) if image else array


def to_image_pixels(array: np.ndarray) -> np.ndarray:
    """N x C x H x W values -> H x W x C uint8: round half to even, NaN -> 0, refused outside 0..255."""
    if array.ndim != 4 or array.shape[0] != 1 or not 1 <= array.shape[1] <= 4:
        raise FileFormatError(
            f"an image needs an output of shape 1 x C x H x W with C from 1 to 4, not "
            f"{'x'.join(map(str, array.shape))}; write .npy or .npz instead"
        )
    values = np.rint(np.nan_to_num(np.asarray(array, dtype=np.float64), nan=0.0))
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if low < 0 or high > 255:
        # clipping would lose them silently (a 16-bit grey PNG pooled into a PNG: all 255)
        raise FileFormatError(
            f"the result holds values from {low:g} to {high:g}, outside the 0..255 an 8-bit image stores; "
            "write .npy, .npz or zarr to keep them"
        )
    return values.astype(np.uint8)[0].transpose(1, 2, 0)


def _image(path: Any, array: np.ndarray) -> Any:
    """The PIL image to write for an N x C x H x W array (uint8: L, LA, RGB or RGBA)."""
    try:
        from PIL import Image
    except ImportError:
        raise FileFormatError("writing images needs Pillow: pip install 'avgpool[images]'") from None
    pixels = to_image_pixels(array)
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[pixels.shape[2]]
    image = Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels)
    if suffix(path) in (".jpg", ".jpeg") and mode in ("LA", "RGBA"):
        image = image.convert("L" if mode == "LA" else "RGB")  # JPEG has no alpha
    return image


def safe_member_name(name: str, *, empty: str = "y") -> str:
    """A name that is only ever a plain file name when an archive is extracted (or a file is
    created from it): no directory separators, no leading dot (``../../x`` -> ``_.._x``), never
    empty (``empty`` instead)."""
    return re.sub(r"[^\w.-]", "_", name).lstrip(".") or empty


def check_member_name(path: Any, key: str) -> None:
    if safe_member_name(key) != key:
        raise FileFormatError(
            f"{os.fspath(path)}: the array name {key!r} is not a plain file name; use letters, "
            "digits, '_', '.' and '-', not starting with '.'"
        )


def _new_file_mode(path: str) -> int:
    """The permissions ``open(path, "w")`` would leave: the old file's, or 0o666 less the umask
    (a temporary file is created 0o600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


#: Temporary outputs being written: avgpool.cli's main() removes any still here once the command
#: has ended (:func:`remove_pending`), as an interrupt can land in :func:`replacing`'s clean-up
#: before its removal (the interrupt machinery sends one again a millisecond after a swallowed
#: KeyboardInterrupt: tests/test_interrupts.py left the file behind in about one run in twenty).
PENDING: set[str] = set()


def remove_pending() -> None:
    """Remove the temporary outputs an interrupted command left (:data:`PENDING`)."""
    while PENDING:
        with contextlib.suppress(OSError):
            os.remove(PENDING.pop())


def _check_regular(path: Any, target: str) -> None:
    """Refuse a target that exists and is not a regular file: renaming a new file over a device
    or a FIFO would delete it (a character device, /dev/full, became an SVG file)."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise FileFormatError(f"{os.fspath(path)}: cannot write: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, a FIFO or a socket)"
        raise FileFormatError(f"{os.fspath(path)} is {kind}: avgpool writes regular files, replacing them whole")


@contextlib.contextmanager
def replacing(path: Any, *, commit: contextlib.AbstractContextManager[Any] | None = None) -> Iterator[BinaryIO]:
    """A new file that becomes ``path`` only when the block completes.

    The data goes to a temporary file in the target's directory (so the rename cannot cross file
    systems), is flushed to disk, and is renamed over the target with ``os.replace``, which is
    atomic: readers see the old file or the new one, never a part. On any exception (a full disk,
    a file-size limit, KeyboardInterrupt) the temporary file is removed and the target is left as
    it was; an OSError becomes a FileFormatError naming the target.

    ``commit``, if given, is entered around the rename alone: the command line's Ctrl-C handling
    (:mod:`avgpool.cli`), which refuses the rename when Ctrl-C came before it and keeps a Ctrl-C
    during it from being raised between the rename and the end of the block.
    """
    target = os.path.realpath(os.fspath(path))  # through a symlink, as open() would write
    _check_regular(path, target)
    directory, name = os.path.split(target)
    # hidden, recognisably ours, and short enough for NAME_MAX whatever the target's length
    temporary = os.path.join(directory, f".{name[:100]}.{secrets.token_hex(8)}.partial")
    PENDING.add(temporary)
    try:
        with open(temporary, "xb") as fp:
            yield fp
            fp.flush()
            os.fsync(fp.fileno())
        os.chmod(temporary, _new_file_mode(target))
        with commit if commit is not None else contextlib.nullcontext():
            os.replace(temporary, target)
        PENDING.discard(temporary)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)  # by name: also when the interrupt came right after creating it
        PENDING.discard(temporary)
        if isinstance(err, OSError):
            raise FileFormatError(f"{os.fspath(path)}: cannot write: {err.strerror or err}") from None
        raise


def write_npy_batches(fp: BinaryIO, shape: tuple[int, ...], dtype: np.dtype, batches: Iterable[np.ndarray]) -> None:
    """An .npy of ``shape`` and ``dtype`` written batch by batch along the first axis, so that an
    output larger than memory never has to be held at once (the batches must fill ``shape``)."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(fp, header)
    # fp.write, not ndarray.tofile: a failed write then says why (errno), not only a byte count
    fp.writelines(np.ascontiguousarray(batch, dtype=dtype).reshape(-1).view(np.uint8).data for batch in batches)


def write_npz(fp: BinaryIO, key: str, array: np.ndarray) -> None:
    """An .npz holding ``array`` as ``key``, as ``np.savez`` writes it (uncompressed), with the
    archive closed by its ``with`` whatever fails: numpy 2.1's savez left a failed archive to
    its ``__del__``, which printed a traceback after the error (a file-size limit,
    tests/test_robustness_files.py)."""
    with zipfile.ZipFile(fp, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        with archive.open(f"{key}.npy", mode="w", force_zip64=True) as member:
            np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def write_tensor(
    path: Any, array: np.ndarray, *, key: str = "y", commit: contextlib.AbstractContextManager[Any] | None = None
) -> None:
    """Write by extension, through :func:`replacing` (with its ``commit``). ``key`` names the array
    in an .npz and must be a :func:`safe_member_name`."""
    kind = check_suffix(path, writing=True)
    if kind == "npz":
        check_member_name(path, key)
    image = _image(path, array) if kind == "image" else None  # before the file: a refusal leaves no trace
    with replacing(path, commit=commit) as fp:
        if kind == "npy":
            write_npy_batches(fp, array.shape, array.dtype, [array])
        elif kind == "npz":
            write_npz(fp, key, array)
        else:
            image.save(fp, format="JPEG" if suffix(path) in (".jpg", ".jpeg") else "PNG")


def npy_memmap(fp: BinaryIO, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The .npy header of ``shape`` and ``dtype`` written to ``fp`` (a :func:`replacing` file),
    and its data as a writeable memory map of that file, for chunks that arrive in any order.

    The data's bytes are reserved on disk first: a full disk or a file-size limit is then an
    OSError here, not a SIGBUS when a page of the map is written back."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(fp, header)
    fp.flush()
    offset = fp.tell()
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size == 0:
        return np.empty(shape, dtype)  # nothing to map, and mmap refuses an empty range
    try:
        os.posix_fallocate(fp.fileno(), offset, size)
    except (AttributeError, OSError) as err:  # not on this system, or not on this file system
        if isinstance(err, OSError) and err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        fp.truncate(offset + size)
    # by name: ``fp`` is write-only, and a shared map needs a readable descriptor
    return np.memmap(fp.name, dtype=dtype, mode="r+", offset=offset, shape=tuple(shape))


# ---------------------------------------------------------------- zarr stores


def zarr_module() -> Any:
    """zarr, or an ImportError that says what to install."""
    try:
        import zarr
    except ImportError as err:
        raise ImportError(f"zarr stores need zarr and dask: install avgpool[dask] ({err})") from None
    return zarr


def is_zarr(path: Any) -> bool:
    """Whether ``path`` names a zarr store: it ends in ``.zarr`` (whether or not it exists yet)
    or is an existing directory (which :func:`open_zarr` then has to be able to open)."""
    name = os.fspath(path)
    return suffix(name.rstrip("/" + os.sep) or name) == ZARR_SUFFIX or os.path.isdir(name)


def open_zarr(path: Any, key: str | None = None) -> Any:
    """The zarr array stored at ``path`` (a directory), or the array ``key`` of the group there,
    opened read-only: nothing is read but its metadata."""
    zarr = zarr_module()
    name = os.fspath(path)
    if not os.path.isdir(name):
        raise FileFormatError(
            f"{name}: no such zarr store (a directory)"
            if not os.path.exists(name)
            else f"{name} is not a directory: a zarr store is one"
        )
    try:
        node = zarr.open(store=name, mode="r", path=key or "")
    except (OSError, ValueError, KeyError, TypeError) as err:  # zarr's errors are ValueErrors or OSErrors
        what = f"{name} (array {key!r})" if key else name
        raise FileFormatError(f"{what} is not a readable zarr array: {err}") from None
    if isinstance(node, zarr.Group):
        # every array below it, by its path (--key group/array), so that a nested one is named too
        arrays = sorted(path for path, value in node.members(max_depth=None) if isinstance(value, zarr.Array))
        raise FileFormatError(
            f"{name}{'/' + key if key else ''} is a zarr group holding the arrays {arrays}: choose one with --key"
        )
    return node


def check_zarr_target(path: Any) -> None:
    """An existing output store is replaced only if it is a zarr array: anything else at that
    path (a file, a group of other arrays, a directory of the user's) is not avgpool's to remove."""
    name = os.fspath(path)
    if not os.path.lexists(name):
        return
    zarr = zarr_module()
    if os.path.isdir(name) and not os.path.islink(name) and not os.listdir(name):
        return  # an empty directory, made for the output: nothing to lose
    if os.path.isdir(name):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if isinstance(zarr.open(store=name, mode="r"), zarr.Array):
                return
    raise FileFormatError(
        f"{name} exists and is not a zarr array store: avgpool replaces only a zarr array; "
        "remove it or choose another output"
    )


def create_zarr(directory: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype) -> Any:
    """A new zarr array in ``directory`` (a :func:`replacing_directory`), default compression."""
    zarr = zarr_module()
    try:
        return zarr.create_array(store=directory, shape=shape, chunks=chunks, dtype=dtype)
    except (TypeError, ValueError) as err:  # e.g. a dtype zarr has no data type for (bfloat16)
        raise FileFormatError(f"zarr cannot store this output ({'x'.join(map(str, shape))} {dtype}): {err}") from None


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C is held off while the block runs (in the main thread, where Python handles it):
    swapping a finished store in and removing the old one is short, and cut short it would
    leave both or neither under the target's name. The result is then complete, so a Ctrl-C
    that came during the swap is too late to stop it and is dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # ignored already, or a handler Python does not know
        yield
        return
    set_sigint(signal.SIG_IGN)
    try:
        yield
    finally:
        set_sigint(previous)


@contextlib.contextmanager
def replacing_directory(path: Any, *, commit: contextlib.AbstractContextManager[Any] | None = None) -> Iterator[str]:
    """A new directory (a zarr store) that becomes ``path`` only when the block completes.

    The block writes into a temporary directory beside the target (the same file system, so the
    renames are atomic). Then, if the target exists, it is renamed aside, the new directory is
    renamed in and the old one removed. On any exception (a full disk, KeyboardInterrupt) the
    temporary directory is removed and the target is left as it was; an OSError becomes a
    FileFormatError naming the target. Whoever writes into the directory must have stopped
    when the block ends (also when it raises): nothing may recreate files in it after removal.
    ``commit``, if given, is entered around the swap instead of holding Ctrl-C off (see
    :func:`replacing`).
    """
    target = os.path.realpath(os.fspath(path))
    directory, name = os.path.split(target)
    stem = os.path.join(directory, f".{name[:100]}.{secrets.token_hex(8)}")  # hidden, ours, within NAME_MAX
    temporary, aside = stem + ".partial", stem + ".old"
    try:
        os.mkdir(temporary)
        yield temporary
        with commit if commit is not None else _interrupts_held():
            replaced = os.path.lexists(target)
            if replaced:
                os.rename(target, aside)
            try:
                os.rename(temporary, target)
            except BaseException:
                if replaced:
                    os.rename(aside, target)
                raise
            if replaced:
                try:
                    shutil.rmtree(aside)
                except OSError as err:
                    raise FileFormatError(
                        f"{os.fspath(path)} is written, but its previous version could not be "
                        f"removed from {aside}: {err.strerror or err}"
                    ) from None
    except BaseException as err:
        shutil.rmtree(temporary, ignore_errors=True)
        if isinstance(err, OSError):  # its file name would be the temporary one's
            raise FileFormatError(f"{os.fspath(path)}: cannot write: {err.strerror or err}") from None
        raise
