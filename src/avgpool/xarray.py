"""Average pooling of xarray objects by dim name: ONNX AveragePool over the named dims, bit for bit.

``avgpool.xarray.average_pool(obj, kernel={"y": 3, "x": 3}, ...)`` pools the named dims of a
``DataArray`` (or of every data variable of a ``Dataset`` that has them all), in whatever order
the array holds its dims. The attributes are :func:`avgpool.average_pool`'s, given per dim:
``strides``, ``dilations`` (a dim left out: 1) and ``pads`` (``{dim: (begin, end)}``, a dim left
out: no padding). Numpy-backed data goes through :func:`avgpool.average_pool`, Dask-backed data
through :func:`avgpool.dask.average_pool` and stays lazy. NaN in float data is skipped unless
``skipna=False`` (as xarray's own reductions; docs/semantics.md 1.6). Importing this module
registers the ``.avgpool`` accessor on DataArray and Dataset.

>>> import numpy as np, xarray as xr, avgpool.xarray
>>> arr = xr.DataArray(np.arange(12.0).reshape(3, 4), dims=("y", "x"), coords={"x": [0.0, 10.0, 20.0, 30.0]},
...                    name="t", attrs={"units": "K"})
>>> pooled = arr.avgpool.average_pool(kernel={"x": 3}, strides={"x": 2}, pads={"x": (1, 1)}, ceil_mode=True)
>>> pooled.values
array([[ 0.5,  2. ,  3. ],
       [ 4.5,  6. ,  7. ],
       [ 8.5, 10. , 11. ]])
>>> pooled.x.values  # each window's mean position, over the taps it reads
array([ 5., 20., 30.])
>>> pooled.name, pooled.attrs
('t', {'units': 'K'})

The values equal :func:`avgpool.average_pool` on the array laid out as N x C x (pooled dims):
the other dims are moved in front (none: N = C = 1; one: C = 1; more: all but the last merged
into N) and the result is moved back to the array's dim order.

A coordinate along pooled dims, a dimension coordinate or not, 1-D or more, becomes its mean over
each window's valid taps (the taps inside the input, whatever ``count_include_pad`` says; NaN for
a window with none): bool, integers and floats as float64, complex as complex128, datetime64 and
timedelta64 in their own dtype, exactly (the mean in integer ticks of the unit, rounded half to
even; NaT for a window with none or with a NaT tap). A coordinate with no mean (text, Python
objects, a MultiIndex) is dropped with a :class:`CoordinateDroppedWarning` that names it. The
other coordinates are kept, as are the name and the attributes (the coordinates' too).

>>> import pandas as pd
>>> days = xr.DataArray(np.arange(4.0), dims="time", coords={"time": pd.date_range("2020-01-01", periods=4)})
>>> days.avgpool.average_pool(kernel={"time": 2}, strides={"time": 2}).time.values
array(['2020-01-01T12:00:00.000000', '2020-01-03T12:00:00.000000'],
      dtype='datetime64[us]')

Needs xarray (the ``dask`` extra); ``import avgpool`` does not import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import warnings
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import numpy as np
import xarray as xr

from ._core.shape import AxisGeometry, resolve
from ._ops import block_mean as block_mean_op
from ._ops import onnx as onnx_dialect
from ._ops._args import check_missing_options
from ._ops.onnx import average_pool as _numpy_average_pool
from ._ops.onnx import output_shape
from .errors import AvgPoolError, error_context

__all__ = ["AvgPoolAccessor", "CoordinateDroppedWarning", "average_pool", "block_mean"]


@dataclasses.dataclass(frozen=True)
class _Pooling:
    """The attributes of one call, per pooled dim, in the order of ``kernel`` (the spatial axes)."""

    dims: tuple[Hashable, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...] | None
    pads: tuple[tuple[int, int], ...] | None
    dilations: tuple[int, ...] | None
    auto_pad: str
    ceil_mode: bool | int
    count_include_pad: bool | int
    opset: int
    skipna: bool | None = False  # None: True for float data (the data's pooling only, not the coordinates')
    min_count: int = 1

    def attributes(self) -> dict[str, Any]:
        """The keyword attributes of :func:`avgpool.average_pool`; ``None`` stays ``None`` so
        that the numpy function's defaults and version rules (e.g. no dilations before opset 19) apply."""
        pads = None if self.pads is None else [p[0] for p in self.pads] + [p[1] for p in self.pads]
        return {
            "kernel_shape": list(self.kernel),
            "strides": _listed(self.strides),
            "pads": pads,
            "auto_pad": self.auto_pad,
            "ceil_mode": self.ceil_mode,
            "count_include_pad": self.count_include_pad,
            "dilations": _listed(self.dilations),
            "opset": self.opset,
        }

    def along(self, dims: tuple[Hashable, ...]) -> _Pooling:
        """The pooling of some of the pooled ``dims`` alone (in their order here), averaging valid
        taps only: the window means of a coordinate that spans those dims."""
        picked = tuple(self.dims.index(d) for d in dims)
        return _Pooling(
            dims,
            _picked(self.kernel, picked),
            _picked(self.strides, picked),
            _picked(self.pads, picked),
            _picked(self.dilations, picked),
            self.auto_pad,
            self.ceil_mode,
            False,
            self.opset,
        )

    def geometry(self, lengths: tuple[int, ...]) -> tuple[AxisGeometry, ...]:
        """Each pooled axis resolved for these lengths (pads, output length), as avgpool resolves it."""
        attributes = self.attributes()
        version = onnx_dialect.op_version(attributes.pop("opset"))
        return resolve(onnx_dialect.make_spec(version, (1, 1, *lengths), **attributes), lengths)


def _listed(values: tuple | None) -> list | None:
    return None if values is None else list(values)


def _picked(values: Any, indices: tuple[int, ...]) -> Any:
    return None if values is None else tuple(values[i] for i in indices)


def average_pool(
    obj: xr.DataArray | xr.Dataset,
    kernel: Mapping[Hashable, int],
    *,
    strides: Mapping[Hashable, int] | None = None,
    pads: Mapping[Hashable, tuple[int, int]] | None = None,
    dilations: Mapping[Hashable, int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool | int = False,
    count_include_pad: bool | int = False,
    opset: int = 22,
    skipna: bool | None = None,
    min_count: int = 1,
) -> xr.DataArray | xr.Dataset:
    """ONNX AveragePool over the dims named in ``kernel`` (``{dim: size}``, in the order of the
    attributes' spatial axes) of a DataArray, or of each data variable of a Dataset that has all
    of them (a variable with only some of them is dropped, one with none is kept).

    ``strides`` and ``dilations`` map dims to values (1 where left out), ``pads`` maps dims to
    ``(begin, end)`` ((0, 0) where left out); ``auto_pad``, ``ceil_mode``, ``count_include_pad``
    and ``opset`` are :func:`avgpool.average_pool`'s, and so are ``skipna`` and ``min_count``
    (docs/semantics.md 1.6), but ``skipna`` None means True for float data, as xarray's. Dask-backed
    data gives a lazy result.
    The coordinates along pooled dims become window means, as the module docstring says; one
    with no mean is dropped with a :class:`CoordinateDroppedWarning`.

    Raises :class:`avgpool.AvgPoolError` for a dim the object does not have or ``kernel`` does
    not pool, and for any attribute, dtype or shape that :func:`avgpool.average_pool` refuses.
    """
    if not isinstance(obj, xr.DataArray | xr.Dataset):
        raise AvgPoolError(f"avgpool.xarray pools a DataArray or a Dataset, got {type(obj).__name__}")
    # the dims' own checks named no operator; average_pool's name AveragePool-<version> already
    with error_context(onnx_dialect.operator_label(onnx_dialect.op_version(opset))):
        pooling = _parsed(obj, kernel, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset)
        check_missing_options(False if skipna is None else skipna, min_count)
        pooling = dataclasses.replace(pooling, skipna=skipna, min_count=min_count)
    with _naming_axes(pooling.dims):
        if isinstance(obj, xr.DataArray):
            return xr.DataArray(_pooled_variable(obj.variable, pooling), coords=_coords(obj, pooling), name=obj.name)
        return _pooled_dataset(obj, pooling)


def _parsed(
    obj: xr.DataArray | xr.Dataset,
    kernel: Any,
    strides: Any,
    pads: Any,
    dilations: Any,
    auto_pad: str,
    ceil_mode: bool | int,
    count_include_pad: bool | int,
    opset: int,
) -> _Pooling:
    """The call's attributes per pooled dim, every dim name checked, the geometry validated
    up front (a Dataset may hold nothing to pool, and should still refuse a bad kernel)."""
    if not isinstance(kernel, Mapping) or not kernel:
        raise AvgPoolError(f"`kernel` is {kernel!r}: it must map at least one dim to its size, e.g. {{'y': 3, 'x': 3}}")
    dims = tuple(kernel)
    sizes = dict(obj.sizes)
    for attribute, given in (("kernel", kernel), ("strides", strides), ("pads", pads), ("dilations", dilations)):
        _check_dims(attribute, given, dims, type(obj).__name__, tuple(sizes))
    pooling = _Pooling(
        dims,
        tuple(kernel[d] for d in dims),
        _per_dim(strides, dims, 1),
        None if pads is None else tuple(_pair(d, pads.get(d, (0, 0))) for d in dims),
        _per_dim(dilations, dims, 1),
        auto_pad,
        ceil_mode,
        count_include_pad,
        opset,
    )
    attributes = pooling.attributes()
    del attributes["count_include_pad"]  # output_shape's attributes: the shape's only
    with _naming_axes(dims):
        output_shape((1, 1, *(sizes[d] for d in dims)), **attributes)
    return pooling


def _check_dims(
    attribute: str, given: Any, pooled: tuple[Hashable, ...], kind: str, available: tuple[Hashable, ...]
) -> None:
    if given is None:
        return
    if not isinstance(given, Mapping):
        raise AvgPoolError(f"`{attribute}` is {given!r}: it must map dim names to values")
    for dim in given:
        if dim not in available:
            raise AvgPoolError(
                f"`{attribute}` names dim {dim!r}, which the {kind} does not have (its dims: {available})"
            )
        if dim not in pooled:
            raise AvgPoolError(f"`{attribute}` names dim {dim!r}, which `kernel` does not pool (it pools {pooled})")


def _per_dim(given: Mapping[Hashable, int] | None, dims: tuple[Hashable, ...], default: int) -> tuple[int, ...] | None:
    return None if given is None else tuple(given.get(d, default) for d in dims)


def _pair(dim: Hashable, value: Any) -> tuple[int, int]:
    try:
        begin, end = value
    except (TypeError, ValueError):
        raise AvgPoolError(f"`pads` of dim {dim!r} is {value!r}: it must be a pair (begin, end)") from None
    return begin, end


@contextlib.contextmanager
def _naming_axes(dims: tuple[Hashable, ...]) -> Iterator[None]:
    """avgpool's messages speak of flat attributes and N x C x spatial shapes: say which dim is which axis."""
    try:
        yield
    except AvgPoolError as err:
        raise AvgPoolError(f"{err} (avgpool.xarray: the spatial axes are the dims {dims}, in that order)") from None


def _pooled_dataset(ds: xr.Dataset, pooling: _Pooling) -> xr.Dataset:
    pooled = set(pooling.dims)
    variables = {}
    for name, var in ds.data_vars.items():
        if pooled <= set(var.dims):
            variables[name] = _pooled_variable(var.variable, pooling)
        elif not pooled & set(var.dims):
            variables[name] = var.variable
    return xr.Dataset(variables, coords=_coords(ds, pooling), attrs=ds.attrs)


def _pooled_variable(var: xr.Variable, pooling: _Pooling) -> xr.Variable:
    """``var`` pooled over the pooled dims, its dims in the same order, its attributes kept (not
    its encoding: the chunks and sizes it may describe are the input's)."""
    return xr.Variable(var.dims, _pooled_data(var.data, var.dims, pooling), attrs=var.attrs)


def _pooled_data(data: Any, dims: tuple[Hashable, ...], pooling: _Pooling) -> Any:
    """The data laid out as N x C x (pooled dims), pooled, and put back in ``dims``' order."""
    others = [d for d in dims if d not in pooling.dims]
    order = tuple(dims.index(d) for d in (*others, *pooling.dims))
    moved = data.transpose(order)
    leading = moved.shape[: len(others)]
    result = _pool_ncx(moved.reshape(_batch_and_channels(leading) + moved.shape[len(others) :]), pooling)
    return result.reshape(leading + result.shape[2:]).transpose(tuple(np.argsort(order).tolist()))


def _batch_and_channels(leading: tuple[int, ...]) -> tuple[int, int]:
    """N and C for the non-pooled dims' sizes. Dask keeps the chunks of the last one (C) and
    merges only the ones before it, which never touches a pooled dim."""
    if len(leading) <= 1:
        return (*leading, 1) if leading else (1, 1)
    return math.prod(leading[:-1]), leading[-1]


def _pool_ncx(x: Any, pooling: _Pooling) -> Any:
    skipna = block_mean_op.is_float(np.dtype(x.dtype)) if pooling.skipna is None else pooling.skipna
    missing = {"skipna": skipna, "min_count": pooling.min_count}
    if isinstance(x, np.ndarray):
        return _numpy_average_pool(x, **pooling.attributes(), **missing)
    # a dask array exists only once dask.array is imported: no import for numpy-only users
    dask_array = sys.modules.get("dask.array")
    if dask_array is not None and isinstance(x, dask_array.Array):
        from . import dask as avgpool_dask

        return avgpool_dask.average_pool(x, **pooling.attributes(), **missing)
    raise AvgPoolError(f"avgpool.xarray pools numpy- or dask-backed data, got {type(x).__name__}")


def block_mean(
    obj: xr.DataArray | xr.Dataset,
    windows: Mapping[Hashable, int],
    *,
    boundary: str = "exact",
    side: str = "left",
    skipna: bool | None = None,
    min_count: int = 1,
    coord_func: str = "mean",
    keep_attrs: bool = True,
) -> xr.DataArray | xr.Dataset:
    """Block means over the dims in ``windows`` (``{dim: block}``), as ``obj.coarsen(windows,
    boundary=boundary, side=side).mean()`` computes them, numpy- or dask-backed
    (:func:`avgpool.block_mean`: exact integer sums, NaN skipped or not, the same bits whatever
    the chunks). Each data variable is averaged over the window dims it has (the others are kept
    as they are); coordinates along window dims become their block means (datetime64 and
    timedelta64 exactly, rounded to their unit), as in :func:`average_pool`.

    ``skipna`` None means True for float data, as xarray's. ``coord_func`` is "mean" (the only
    one). With ``keep_attrs`` the attributes of the object and its variables are kept.

    >>> import numpy as np, xarray as xr, avgpool.xarray
    >>> arr = xr.DataArray([[np.nan, 1.0, 2.0, 3.0]], dims=("y", "x"), coords={"x": [0, 10, 20, 30]})
    >>> small = avgpool.xarray.block_mean(arr, {"x": 2})
    >>> small.values, small.x.values
    (array([[1. , 2.5]]), array([ 5., 25.]))
    """
    if not isinstance(obj, xr.DataArray | xr.Dataset):
        raise AvgPoolError(f"avgpool.xarray.block_mean averages a DataArray or a Dataset, got {type(obj).__name__}")
    with error_context(block_mean_op.LABEL):
        if not isinstance(windows, Mapping) or not windows:
            raise AvgPoolError(f"`windows` is {windows!r}: it must map at least one dim to its block, e.g. {{'x': 2}}")
        dims = tuple(windows)
        sizes = dict(obj.sizes)
        _check_dims("windows", windows, dims, type(obj).__name__, tuple(sizes))
        blocks = block_mean_op.blocks_per_axis([windows[d] for d in dims], len(dims))
        block_mean_op.check_choice("boundary", boundary, block_mean_op.BOUNDARIES)
        block_mean_op.check_choice("side", side, block_mean_op.SIDES)
        if coord_func != "mean":
            raise AvgPoolError(f"`coord_func` is {coord_func!r}: block_mean averages coordinates ('mean')")
        cuts = {d: block_mean_op.block_range(repr(d), sizes[d], k, boundary, side) for d, k in zip(dims, blocks)}
    obj = obj.isel({d: slice(start, stop) for d, (start, stop, _) in cuts.items()})
    # the coordinates' block means: windows of the blocks, the partial block's padding not counted
    pads = tuple(_partial_pads(k, partial, side) for k, (_, _, partial) in zip(blocks, cuts.values()))
    pooling = _Pooling(dims, blocks, blocks, pads, None, "NOTSET", False, False, 22)
    per_dim = dict(zip(dims, blocks))
    kept = boundary if boundary == "pad" else "exact"

    def averaged(var: xr.Variable) -> xr.Variable:
        block = tuple(per_dim.get(d, 1) for d in var.dims)
        floats = block_mean_op.is_float(np.dtype(var.dtype))
        data = block_mean_op.block_mean(
            var.data, block, boundary=kept, side=side, skipna=floats if skipna is None else skipna, min_count=min_count
        )
        return xr.Variable(var.dims, data, attrs=var.attrs if keep_attrs else {})

    with _naming_axes(dims):
        if isinstance(obj, xr.DataArray):
            result = xr.DataArray(averaged(obj.variable), coords=_coords(obj, pooling), name=obj.name)
            return result if keep_attrs else result.drop_attrs(deep=False)
        variables = {
            name: averaged(var.variable) if set(dims) & set(var.dims) else var.variable
            for name, var in obj.data_vars.items()
        }
        return xr.Dataset(variables, coords=_coords(obj, pooling), attrs=obj.attrs if keep_attrs else {})


def _partial_pads(k: int, partial: int, side: str) -> tuple[int, int]:
    """The pads that make a partial block of ``partial`` values a whole window of ``k``."""
    if not partial:
        return 0, 0
    return (k - partial, 0) if side == "right" else (0, k - partial)


class CoordinateDroppedWarning(UserWarning):
    """Coordinates along a pooled dim that have no mean (text, Python objects, a MultiIndex) were
    left out of the pooled result; the warning names them."""


# the dtype kinds whose window means exist (as in xarray's coarsen(...).mean()): bool, integers,
# floats and complex through the float kernel, datetime64 and timedelta64 exactly in integers
_AVERAGED_KINDS = "biufcmM"
_NAT = np.iinfo(np.int64).min


def _coords(obj: xr.DataArray | xr.Dataset, pooling: _Pooling) -> xr.Coordinates:
    """The coordinates of the pooled ``obj``: those spanning no pooled dim as they are, every other
    one pooled over the pooled dims it spans (:func:`_window_means`), or dropped with a
    :class:`CoordinateDroppedWarning` when it has no mean."""
    pooled = set(pooling.dims)
    spanning = [name for name, coord in obj.coords.items() if pooled & set(coord.dims)]
    unaveraged = _unaveraged(obj, spanning)
    means = {name: _window_means(obj.coords[name].variable, pooling) for name in spanning if name not in unaveraged}
    if unaveraged:
        warnings.warn(
            CoordinateDroppedWarning(
                f"avgpool.xarray dropped the coordinates {', '.join(unaveraged.values())} along the pooled "
                f"dims {pooling.dims}: they have no window mean"
            ),
            stacklevel=3,
        )
    # dropped together, so that a MultiIndex goes whole
    return obj.drop_vars(spanning).coords.assign(means)


def _unaveraged(obj: xr.DataArray | xr.Dataset, names: list[Hashable]) -> dict[Hashable, str]:
    """Those of ``names`` without a window mean, each with what it is: the coordinates of a
    MultiIndex (its tuples and levels go together) and those of a dtype that is not averaged."""
    unaveraged = {}
    for name in names:
        if isinstance(obj.xindexes.get(name), xr.indexes.PandasMultiIndex):
            unaveraged[name] = f"{name!r} (of a MultiIndex)"
        elif obj.coords[name].dtype.kind not in _AVERAGED_KINDS:
            unaveraged[name] = f"{name!r} (dtype {obj.coords[name].dtype})"
    return unaveraged


def _window_means(coord: xr.Variable, pooling: _Pooling) -> xr.Variable:
    """The coordinate pooled over the pooled dims it spans with count_include_pad off: the mean
    over each window's taps inside the input, i.e. the window's mean position.

    Bool, integers and floats become float64 (NaN for a window with no taps inside), complex
    complex128, through the same kernel as the data. datetime64 and timedelta64 keep their dtype:
    the exact mean in integer ticks of their unit, rounded half to even (not through float64,
    exact only up to 2**53 ticks where a nanosecond date is near 2**60); NaT for a window with no taps inside or with
    a NaT among its taps, as a NaN tap gives NaN in a float coordinate."""
    along = pooling.along(tuple(d for d in pooling.dims if d in coord.dims))
    data = coord.data
    if coord.dtype.kind in "mM":
        means = _exact_time_means(data, coord.dims, along)
    elif coord.dtype.kind == "c":
        means = _complex(
            _pooled_data(data.real.astype(np.float64), coord.dims, along),
            _pooled_data(data.imag.astype(np.float64), coord.dims, along),
        )
    else:
        means = _pooled_data(data.astype(np.float64), coord.dims, along)
    return xr.Variable(coord.dims, means, attrs=coord.attrs)


def _complex(real: Any, imag: Any) -> Any:
    if isinstance(real, np.ndarray):
        return _complex_block(real, imag)
    return real.map_blocks(_complex_block, imag, dtype=np.complex128)


def _complex_block(real: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """``real + imag * 1j`` without its product, which makes an infinite imaginary part's real part NaN."""
    out = np.empty(real.shape, np.complex128)
    out.real, out.imag = real, imag
    return out


def _exact_time_means(data: Any, dims: tuple[Hashable, ...], pooling: _Pooling) -> Any:
    """The datetime64 or timedelta64 ``data`` pooled over ``pooling.dims``; a Dask array stays lazy,
    whole along those dims in each block (a coordinate is small) and chunked as before along the others."""
    axes = tuple(dims.index(d) for d in pooling.dims)
    geometry = pooling.geometry(tuple(data.shape[a] for a in axes))
    pooled_axes = tuple(zip(axes, geometry))
    if isinstance(data, np.ndarray):
        return _time_means_block(data, pooled_axes)
    whole = data.rechunk({a: -1 for a in axes})
    chunks = list(whole.chunks)
    for axis, axis_geometry in pooled_axes:
        chunks[axis] = (axis_geometry.out,)
    return whole.map_blocks(_time_means_block, pooled_axes, chunks=tuple(chunks), dtype=data.dtype)


def _time_means_block(data: np.ndarray, pooled_axes: tuple[tuple[int, AxisGeometry], ...]) -> np.ndarray:
    """Each window's exact mean in ticks: the offsets from the earliest tick summed over the taps
    inside the input, axis by axis (a window is a product of its axes' taps), then divided once.
    int64 holds those sums when the offsets' span times the taps stays below 2**63; Python ints
    (an object array) hold any."""
    ticks = data.view(np.int64)
    missing = np.isnat(data)
    present = ticks[~missing]
    origin = int(present.min()) if present.size else 0
    span = int(present.max()) - origin if present.size else 0
    taps = math.prod(g.kernel for _, g in pooled_axes)
    exact = np.int64 if span * taps < 2**63 else object
    sums = np.where(missing, origin, ticks).astype(exact) - origin
    counts, nats = np.ones(ticks.shape, np.int64), missing.astype(np.int64)
    for axis, geometry in pooled_axes:
        sums, counts, nats = (_tap_sums(values, axis, geometry) for values in (sums, counts, nats))
    means = _rounded_means(sums, np.maximum(counts, 1), origin).astype(np.int64)
    means[(counts == 0) | (nats > 0)] = _NAT
    return means.view(data.dtype)


def _tap_sums(values: np.ndarray, axis: int, geometry: AxisGeometry) -> np.ndarray:
    """Each window's sum of ``values`` over its taps inside the input along ``axis``, which
    becomes the windows' axis."""
    taps = (np.arange(geometry.out) * geometry.stride - geometry.pad_begin)[:, None]
    taps = taps + np.arange(geometry.kernel) * geometry.dilation
    inside = (taps >= 0) & (taps < geometry.length)
    if not geometry.length:  # nothing to take from: every tap is padding, any value will do
        values = np.zeros(values.shape[:axis] + (1,) + values.shape[axis + 1 :], values.dtype)
    gathered = np.take(values, np.where(inside, taps, 0), axis=axis)  # the axis becomes (windows, taps)
    inside = inside.reshape(inside.shape + (1,) * (values.ndim - axis - 1))
    return np.where(inside, gathered, 0).sum(axis=axis + 1)


def _rounded_means(sums: np.ndarray, counts: np.ndarray, origin: int) -> np.ndarray:
    """``origin + sums / counts`` rounded to the nearest integer, a tie to the even one (``counts`` > 0).
    The parity is the sum's with ``origin``: the offsets' own would round an odd origin's ties wrong."""
    quotient = sums // counts
    twice_remainder = 2 * (sums - quotient * counts)
    means = quotient + origin
    up = (twice_remainder > counts) | ((twice_remainder == counts) & (means % 2 == 1))
    return np.where(up, means + 1, means)


@xr.register_dataset_accessor("avgpool")
@xr.register_dataarray_accessor("avgpool")
class AvgPoolAccessor:
    """``obj.avgpool.average_pool(kernel=..., ...)`` and ``obj.avgpool.block_mean(windows, ...)``:
    :func:`avgpool.xarray.average_pool` and :func:`avgpool.xarray.block_mean` of ``obj``."""

    def __init__(self, obj: xr.DataArray | xr.Dataset) -> None:
        self._obj = obj

    def average_pool(self, kernel: Mapping[Hashable, int], **attributes: Any) -> xr.DataArray | xr.Dataset:
        """:func:`avgpool.xarray.average_pool` of this DataArray or Dataset, the same keyword attributes."""
        return average_pool(self._obj, kernel, **attributes)

    def block_mean(self, windows: Mapping[Hashable, int], **options: Any) -> xr.DataArray | xr.Dataset:
        """:func:`avgpool.xarray.block_mean` of this DataArray or Dataset, the same keyword options."""
        return block_mean(self._obj, windows, **options)
