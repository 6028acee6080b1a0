"""Average pooling of xarray objects by dim name: ONNX AveragePool over the named dims, bit for bit.

``avgpool.xarray.average_pool(obj, kernel={"y": 3, "x": 3}, ...)`` pools the named dims of a
``DataArray`` (or of every data variable of a ``Dataset`` that has them all), in whatever order
the array holds its dims. The attributes are :func:`avgpool.average_pool`'s, given per dim:
``strides``, ``dilations`` (a dim left out: 1) and ``pads`` (``{dim: (begin, end)}``, a dim left
out: no padding). Numpy-backed data goes through :func:`avgpool.average_pool`, Dask-backed data
through :func:`avgpool.dask.average_pool` and stays lazy. Importing this module registers the
``.avgpool`` accessor on DataArray and Dataset.

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
into N) and the result is moved back to the array's dim order. A pooled dim's numeric
dimension coordinate becomes the mean of the coordinate over each window's valid taps (NaN for a
window with none); every other coordinate that spans a pooled dim is dropped, the rest are kept,
as are the name and the attributes.

Needs xarray (the ``dask`` extra); ``import avgpool`` does not import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import numpy as np
import xarray as xr

from .api import average_pool as _numpy_average_pool
from .api import output_shape
from .dialects import onnx as onnx_dialect
from .errors import AvgPoolError, error_context

__all__ = ["AvgPoolAccessor", "average_pool"]


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

    def along(self, dim: Hashable) -> _Pooling:
        """The pooling of ``dim`` alone, averaging valid taps only: a coordinate's window means."""
        i = self.dims.index(dim)
        return _Pooling(
            (dim,),
            self.kernel[i : i + 1],
            _picked(self.strides, i),
            _picked(self.pads, i),
            _picked(self.dilations, i),
            self.auto_pad,
            self.ceil_mode,
            False,
            self.opset,
        )


def _listed(values: tuple | None) -> list | None:
    return None if values is None else list(values)


def _picked(values: tuple | None, i: int) -> tuple | None:
    return None if values is None else values[i : i + 1]


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
) -> xr.DataArray | xr.Dataset:
    """ONNX AveragePool over the dims named in ``kernel`` (``{dim: size}``, in the order of the
    attributes' spatial axes) of a DataArray, or of each data variable of a Dataset that has all
    of them (a variable with only some of them is dropped, one with none is kept).

    ``strides`` and ``dilations`` map dims to values (1 where left out), ``pads`` maps dims to
    ``(begin, end)`` ((0, 0) where left out); ``auto_pad``, ``ceil_mode``, ``count_include_pad``
    and ``opset`` are :func:`avgpool.average_pool`'s. Dask-backed data gives a lazy result.

    Raises :class:`avgpool.AvgPoolError` for a dim the object does not have or ``kernel`` does
    not pool, and for any attribute, dtype or shape that :func:`avgpool.average_pool` refuses.
    """
    if not isinstance(obj, xr.DataArray | xr.Dataset):
        raise AvgPoolError(f"avgpool.xarray pools a DataArray or a Dataset, got {type(obj).__name__}")
    # the dims' own checks named no operator; average_pool's name AveragePool-<version> already
    with error_context(onnx_dialect.label(onnx_dialect.op_version(opset))):
        pooling = _parsed(obj, kernel, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad, opset)
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
    if isinstance(x, np.ndarray):
        return _numpy_average_pool(x, **pooling.attributes())
    # a dask array exists only once dask.array is imported: no import for numpy-only users
    dask_array = sys.modules.get("dask.array")
    if dask_array is not None and isinstance(x, dask_array.Array):
        from . import dask as avgpool_dask

        return avgpool_dask.average_pool(x, **pooling.attributes())
    raise AvgPoolError(f"avgpool.xarray pools numpy- or dask-backed data, got {type(x).__name__}")


def _coords(obj: xr.DataArray | xr.Dataset, pooling: _Pooling) -> xr.Coordinates:
    """The coordinates of the pooled ``obj``: those spanning no pooled dim as they are, a pooled
    dim's numeric dimension coordinate as the mean over each window's valid taps."""
    pooled = set(pooling.dims)
    spanning = [name for name, coord in obj.coords.items() if pooled & set(coord.dims)]
    means = {
        dim: _window_means(obj.coords[dim].variable, pooling.along(dim))
        for dim in pooling.dims
        if dim in obj.coords and obj.coords[dim].dtype.kind in "iuf"
    }
    # dropped together, so that a MultiIndex goes whole
    return obj.drop_vars(spanning).coords.assign(means)


def _window_means(coord: xr.Variable, pooling: _Pooling) -> xr.Variable:
    """count_include_pad off: the average over the taps inside the axis, i.e. their mean position."""
    values = coord.data.astype(np.float64).reshape(1, 1, -1)
    return xr.Variable(coord.dims, _pool_ncx(values, pooling)[0, 0], attrs=coord.attrs)


@xr.register_dataset_accessor("avgpool")
@xr.register_dataarray_accessor("avgpool")
class AvgPoolAccessor:
    """``obj.avgpool.average_pool(kernel=..., ...)``: :func:`avgpool.xarray.average_pool` of ``obj``."""

    def __init__(self, obj: xr.DataArray | xr.Dataset) -> None:
        self._obj = obj

    def average_pool(self, kernel: Mapping[Hashable, int], **attributes: Any) -> xr.DataArray | xr.Dataset:
        """:func:`avgpool.xarray.average_pool` of this DataArray or Dataset, the same keyword attributes."""
        return average_pool(self._obj, kernel, **attributes)
