"""The dialects the command line knows, and what one configuration means in each of them.

A :class:`Settings` is a dialect-neutral way to write one pooling configuration (kernel, strides,
dilations, pads, auto_pad, a rounding choice, whether pads count). Each :class:`Dialect` says

- how to call its public pooling function with those settings (``avgpool.average_pool``,
  ``avgpool.openvino.avg_pool``, ``avgpool.onednn.avg_pool``, ``avgpool.qlinear.qlinear_average_pool``),
  imported lazily so a dialect that this build lacks gives a clear message instead of a traceback;
- which canonical :class:`~avgpool.spec.PoolSpec` the same settings give in that dialect
  (semantics.md sections 2 to 5), which ``avgpool explain`` uses to show where the dialects differ.

The ONNX spec comes from :mod:`avgpool.dialects.onnx` itself. For the other dialects the mapping
is the one semantics.md states (OpenVINO ``ceil`` = CEIL + FULL_KERNEL_IF_PADDED, oneDNN = CEIL +
FULL_KERNEL, PyTorch = CEIL_DROP + PADDED_TAPS, QLinear = CEIL_DROP + FULL_KERNEL); the pooling
itself always goes through the dialect's own public function, which does its own validation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .attributes import as_int_tuple
from .errors import AvgPoolError
from .spec import Divisor, PadMode, PoolSpec, Rounding

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
ROUNDINGS = ("floor", "ceil", "ceil_torch")
# How each ecosystem spells auto_pad, folded to ONNX's spelling ("" is NOTSET as ONNX models
# write it: semantics 3.5).
AUTO_PAD_SPELLINGS = {"notset": "NOTSET", "": "NOTSET", "explicit": "NOTSET", "none": "NOTSET",
                      "same_upper": "SAME_UPPER", "same_lower": "SAME_LOWER", "valid": "VALID"}


class DialectUnavailable(RuntimeError):
    """The dialect's module is not part of this build (or an optional dependency is missing)."""


@dataclass(frozen=True)
class Settings:
    """One pooling configuration, written without any dialect's spelling."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    dilations: tuple[int, ...] | None = None
    pads_begin: tuple[int, ...] | None = None
    pads_end: tuple[int, ...] | None = None
    auto_pad: str = "NOTSET"  # ONNX spelling, see AUTO_PAD_SPELLINGS
    rounding: str = "floor"  # floor | ceil | ceil_torch ("ceil" means ceil_mode=1 in ONNX)
    include_pad: bool = False  # ONNX count_include_pad=1, OpenVINO/oneDNN exclude_pad=false
    opset: int = 22  # ONNX
    version: int = 16  # OpenVINO AvgPool
    channels_last: bool = False  # NXC (N x D1.. x C) instead of NCX
    x_scale: float = 1.0  # QLinearAveragePool
    x_zero_point: int = 0
    y_scale: float = 1.0
    y_zero_point: int = 0

    @property
    def ndim(self) -> int:
        return len(self.kernel)

    @property
    def ceil(self) -> bool:
        return self.rounding != "floor"

    def begin_end(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        zeros = (0,) * self.ndim
        return self.pads_begin or zeros, self.pads_end or zeros

    def onnx_pads(self) -> list[int] | None:
        if self.pads_begin is None and self.pads_end is None:
            return None
        begin, end = self.begin_end()
        return list(begin) + list(end)

    def ones(self, values: tuple[int, ...] | None) -> list[int]:
        return list(values) if values is not None else [1] * self.ndim

    def describe(self) -> str:
        begin, end = self.begin_end()
        parts = [f"kernel {list(self.kernel)}", f"strides {self.ones(self.strides)}"]
        if self.dilations and any(d != 1 for d in self.dilations):
            parts.append(f"dilations {list(self.dilations)}")
        parts.append(f"auto_pad {self.auto_pad}" if self.auto_pad != "NOTSET" else f"pads {list(begin)}/{list(end)}")
        parts.append(self.rounding)
        parts.append("pads counted" if self.include_pad else "pads not counted")
        return ", ".join(parts)


def normalise_auto_pad(value: str) -> str:
    """``same_upper``, ``SAME_UPPER``, ``explicit``, ``None`` ... -> ONNX's spelling."""
    folded = AUTO_PAD_SPELLINGS.get(str(value).lower())
    if folded is None:
        raise AvgPoolError(f"`auto_pad` is {value!r}: it must be one of NOTSET/explicit/None/'', SAME_UPPER, SAME_LOWER, VALID")
    return folded


# ---------------------------------------------------------------- canonical specs per dialect


def _axes(settings: Settings, spatial: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    n = len(spatial)
    text = f"the input has {n} spatial axes"
    kernel = as_int_tuple("kernel", settings.kernel, n, text, minimum=1)
    strides = as_int_tuple("strides", settings.ones(settings.strides), n, text, minimum=1)
    dilations = as_int_tuple("dilations", settings.ones(settings.dilations), n, text, minimum=1)
    begin, end = (as_int_tuple(name, values, n, text, minimum=0) for name, values in
                  zip(("pads_begin", "pads_end"), ((settings.pads_begin or (0,) * n), (settings.pads_end or (0,) * n))))
    return kernel, strides, dilations, begin, end


def _generic_spec(settings: Settings, spatial: tuple[int, ...], rounding: Rounding, divisor: Divisor,
                  *, explicit_pads_with_auto_pad: str = "error") -> PoolSpec:
    kernel, strides, dilations, begin, end = _axes(settings, spatial)
    mode = {"NOTSET": PadMode.EXPLICIT, "SAME_UPPER": PadMode.SAME_UPPER, "SAME_LOWER": PadMode.SAME_LOWER,
            "VALID": PadMode.VALID}[normalise_auto_pad(settings.auto_pad)]
    if mode is not PadMode.EXPLICIT and any(begin + end):
        if explicit_pads_with_auto_pad == "error":
            raise AvgPoolError("explicit pads cannot be used together with auto_pad")
        begin = end = (0,) * len(spatial)  # OpenVINO/oneDNN: pads are ignored/overwritten
    return PoolSpec(kernel, strides, dilations, tuple(zip(begin, end)), mode, rounding, divisor)


def onnx_spec(settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
    from .dialects import onnx as onnx_dialect

    version = onnx_dialect.op_version(settings.opset)
    return onnx_dialect.make_spec(version, (1, 1) + tuple(spatial), list(settings.kernel), strides=settings.strides,
                                  pads=settings.onnx_pads(), auto_pad=settings.auto_pad, ceil_mode=settings.ceil,
                                  count_include_pad=settings.include_pad, dilations=settings.dilations)


def _same(settings: Settings) -> bool:
    return normalise_auto_pad(settings.auto_pad) in ("SAME_UPPER", "SAME_LOWER")


def openvino_spec(settings: Settings, spatial: tuple[int, ...], rounding_type: str | None = None) -> PoolSpec:
    """OpenVINO's own translation (:func:`avgpool.dialects.openvino.make_spec`), with its refusals."""
    try:
        from .dialects import openvino as openvino_dialect
    except ImportError:  # pragma: no cover - the dialect is part of this build
        raise DialectUnavailable("the OpenVINO dialect is not available in this build of avgpool") from None
    begin, end = settings.begin_end()
    auto_pad = normalise_auto_pad(settings.auto_pad)
    return openvino_dialect.make_spec(
        settings.version, (1, 1) + tuple(spatial), list(settings.kernel), exclude_pad=not settings.include_pad,
        strides=settings.strides and list(settings.strides), pads_begin=list(begin), pads_end=list(end),
        rounding_type=rounding_type or settings.rounding, auto_pad="explicit" if auto_pad == "NOTSET" else auto_pad.lower(),
        dilations=list(settings.dilations) if settings.dilations and any(d != 1 for d in settings.dilations) else None)


def onednn_spec(settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
    """oneDNN's own translation (:func:`avgpool.dialects.onednn.make_spec`), with its refusals."""
    if settings.dilations and any(d != 1 for d in settings.dilations):
        raise AvgPoolError("oneDNN Graph AvgPool has no dilations")
    if settings.rounding == "ceil_torch":
        raise AvgPoolError("oneDNN's rounding_type is floor or ceil (no ceil_torch)")
    try:
        from .dialects import onednn as onednn_dialect
    except ImportError:  # pragma: no cover - the dialect is part of this build
        raise DialectUnavailable("the oneDNN dialect is not available in this build of avgpool") from None
    from .spec import Layout

    begin, end = settings.begin_end()
    auto_pad = normalise_auto_pad(settings.auto_pad)
    return onednn_dialect.make_spec((1, 1) + tuple(spatial), Layout.NCX, list(settings.kernel),
                                    strides=settings.ones(settings.strides), pads_begin=list(begin), pads_end=list(end),
                                    exclude_pad=not settings.include_pad, rounding_type=settings.rounding,
                                    auto_pad="None" if auto_pad == "NOTSET" else auto_pad)


def pytorch_spec(settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
    """torch.nn.functional.avg_pool1d/2d/3d: ceil_mode with the drop rule, and with
    count_include_pad the taps inside the padded extent (the window is clipped at input + pad)."""
    if settings.dilations and any(d != 1 for d in settings.dilations):
        raise AvgPoolError("torch avg_pool has no dilation")
    if _same(settings):
        raise AvgPoolError("torch avg_pool has no padding='same'")
    if not 1 <= len(spatial) <= 3:
        raise AvgPoolError(f"torch avg_pool takes 1 to 3 spatial axes, not {len(spatial)}")
    begin, end = settings.begin_end()
    if tuple(begin) != tuple(end):
        raise AvgPoolError(f"torch avg_pool pads symmetrically; pads {list(begin)}/{list(end)} differ")
    if any(p > k // 2 for p, k in zip(begin, settings.kernel)):
        raise AvgPoolError(f"torch avg_pool needs pad <= kernel // 2 (pads {list(begin)}, kernel {list(settings.kernel)})")
    rounding = Rounding.CEIL_DROP if settings.ceil else Rounding.FLOOR
    divisor = Divisor.PADDED_TAPS if settings.include_pad else Divisor.VALID_TAPS
    return _generic_spec(settings, spatial, rounding, divisor)


def qlinear_spec(settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
    """The spec ``qlinear_average_pool`` itself computes with (onnxruntime's geometry: its
    truncating output length, its SAME pads that go negative when the kernel is shorter than the
    stride), from the QLinear dialect's own translation, so that ``avgpool shape`` and ``avgpool
    explain`` show what the function computes."""
    from .dialects import qlinear as qlinear_dialect

    if settings.dilations and any(d != 1 for d in settings.dilations):
        raise AvgPoolError("QLinearAveragePool has no dilations")
    strides = list(settings.strides) if settings.strides is not None else None
    return qlinear_dialect.make_geometry((1, 1, *spatial), list(settings.kernel), strides, settings.onnx_pads(),
                                         settings.auto_pad, settings.ceil, settings.include_pad, False).spec


# ---------------------------------------------------------------- calling each dialect


def _load(module: str, attribute: str, title: str, extra: str = "") -> Callable[..., Any]:
    try:
        found = importlib.import_module(module)
    except ImportError as err:
        missing = getattr(err, "name", None)
        if missing and not missing.startswith("avgpool"):
            raise DialectUnavailable(f"{title} needs the package {missing!r}{extra}") from None
        found = None
    function = getattr(found, attribute, None) if found is not None else None
    if function is None:
        raise DialectUnavailable(f"{title} is not available in this build of avgpool ({module}.{attribute} is missing)")
    return function


def _call_onnx(x: np.ndarray, s: Settings) -> np.ndarray:
    from .api import average_pool

    return average_pool(x, list(s.kernel), strides=s.strides, pads=s.onnx_pads(), auto_pad=s.auto_pad,
                        ceil_mode=s.ceil, count_include_pad=s.include_pad, dilations=s.dilations, opset=s.opset,
                        layout="NXC" if s.channels_last else "NCX")


def _call_openvino(x: np.ndarray, s: Settings) -> np.ndarray:
    if s.channels_last:
        raise AvgPoolError("OpenVINO AvgPool is NCX only: drop --layout NXC")
    avg_pool = _load("avgpool.openvino", "avg_pool", "the OpenVINO dialect")
    begin, end = s.begin_end()
    auto_pad = {"NOTSET": "explicit"}.get(normalise_auto_pad(s.auto_pad), normalise_auto_pad(s.auto_pad).lower())
    return avg_pool(x, list(s.kernel), exclude_pad=not s.include_pad, strides=s.strides and list(s.strides),
                    pads_begin=list(begin), pads_end=list(end), rounding_type=s.rounding, auto_pad=auto_pad,
                    dilations=s.dilations and list(s.dilations), version=s.version)


def _call_onednn(x: np.ndarray, s: Settings) -> np.ndarray:
    avg_pool = _load("avgpool.onednn", "avg_pool", "the oneDNN dialect")
    if s.dilations and any(d != 1 for d in s.dilations):
        raise AvgPoolError("oneDNN Graph AvgPool has no dilations")
    begin, end = s.begin_end()
    auto_pad = {"NOTSET": "None"}.get(normalise_auto_pad(s.auto_pad), normalise_auto_pad(s.auto_pad))
    return avg_pool(x, list(s.kernel), strides=s.ones(s.strides), pads_begin=list(begin), pads_end=list(end),
                    exclude_pad=not s.include_pad, rounding_type=s.rounding, auto_pad=auto_pad,
                    data_format="NXC" if s.channels_last else "NCX")


def _call_qlinear(x: np.ndarray, s: Settings) -> np.ndarray:
    from .onnx import _qlinear_function  # the same lookup the ONNX evaluator uses

    function = _qlinear_function()
    if function is None:
        raise DialectUnavailable("the QLinearAveragePool dialect is not available in this build of avgpool "
                                 "(avgpool.qlinear.qlinear_average_pool is missing)")
    if s.dilations and any(d != 1 for d in s.dilations):
        raise AvgPoolError("QLinearAveragePool has no dilations")
    dtype = x.dtype if x.dtype in (np.dtype(np.uint8), np.dtype(np.int8)) else np.dtype(np.uint8)
    return function(x, np.float32(s.x_scale), np.array(s.x_zero_point, dtype=dtype), np.float32(s.y_scale),
                    np.array(s.y_zero_point, dtype=dtype), list(s.kernel), strides=s.strides and list(s.strides),
                    pads=s.onnx_pads(), auto_pad=s.auto_pad, ceil_mode=int(s.ceil),
                    count_include_pad=int(s.include_pad), channels_last=int(s.channels_last))


@dataclass(frozen=True)
class Dialect:
    name: str
    title: str
    spec: Callable[[Settings, tuple[int, ...]], PoolSpec]
    call: Callable[[np.ndarray, Settings], np.ndarray] | None  # None: explain only
    default_channels_last: bool = False
    quantized: bool = False


DIALECTS: dict[str, Dialect] = {
    "onnx": Dialect("onnx", "ONNX AveragePool", onnx_spec, _call_onnx),
    "openvino": Dialect("openvino", "OpenVINO AvgPool", openvino_spec, _call_openvino),
    "onednn": Dialect("onednn", "oneDNN Graph AvgPool", onednn_spec, _call_onednn, default_channels_last=True),
    "qlinear": Dialect("qlinear", "com.microsoft QLinearAveragePool", qlinear_spec, _call_qlinear, quantized=True),
    "pytorch": Dialect("pytorch", "PyTorch avg_pool", pytorch_spec, None),
}
POOL_DIALECTS = tuple(name for name, d in DIALECTS.items() if d.call is not None)


def comparison_rows(settings: Settings) -> list[tuple[str, Callable[[tuple[int, ...]], PoolSpec]]]:
    """The dialects to compare for one configuration: (label, spatial shape -> spec)."""
    rows: list[tuple[str, Callable[[tuple[int, ...]], PoolSpec]]] = []
    onnx_label = f"ONNX AveragePool (opset {settings.opset})"
    rows.append((onnx_label, lambda spatial: onnx_spec(settings, spatial)))
    if settings.ceil:
        for rounding_type in ("ceil", "ceil_torch"):
            rows.append((f"OpenVINO AvgPool-{max(settings.version, 14)} rounding_type={rounding_type}",
                         lambda spatial, r=rounding_type: openvino_spec(replace(settings, version=max(settings.version, 14)),
                                                                       spatial, r)))
    else:
        rows.append((f"OpenVINO AvgPool-{settings.version}", lambda spatial: openvino_spec(settings, spatial, "floor")))
    onednn_settings = replace(settings, rounding="ceil" if settings.ceil else "floor")
    rows.append(("oneDNN Graph AvgPool", lambda spatial: onednn_spec(onednn_settings, spatial)))
    rows.append(("PyTorch avg_pool", lambda spatial: pytorch_spec(settings, spatial)))
    rows.append(("onnxruntime QLinearAveragePool", lambda spatial: qlinear_spec(settings, spatial)))
    return rows
