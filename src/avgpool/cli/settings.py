"""The dialects the command line knows, and what one configuration means in each of them.

A :class:`Settings` is a dialect-neutral way to write one pooling configuration (kernel, strides,
dilations, pads, auto_pad, a rounding choice, whether pads count). Each :class:`Dialect` says

- how to call its public pooling function with those settings (``avgpool.average_pool``,
  ``avgpool.openvino.avg_pool``, ``avgpool.onednn.avg_pool``, ``avgpool.qlinear.qlinear_average_pool``),
  imported when first used;
- which canonical :class:`~avgpool._core.spec.PoolSpec` the same settings give in that dialect
  (docs/semantics.md sections 2 to 5), which ``avgpool explain`` uses to show where the dialects differ.

Both come from one mapping per dialect (``onnx_attributes``, ``openvino_attributes``, ...): the
settings spelled as the keyword attributes of the dialect's public function, which is called with
them, and given as they are to the dialect module's own translation (``avgpool._ops.<name>``'s
``make_spec``, QLinear's ``make_geometry``), the one the public function runs. So ``avgpool shape``
and ``avgpool explain`` show what the function computes, or refuse what it refuses. PyTorch has no
function in avgpool: its spec (docs/semantics.md: CEIL_DROP + PADDED_TAPS) is written here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._core.shape import spatial_shape_of
from .._core.spec import Divisor, Layout, PadMode, PoolSpec, Rounding
from .._ops._args import as_int_tuple
from ..errors import AvgPoolError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
ROUNDINGS = ("floor", "ceil", "ceil_torch")
# How each ecosystem spells auto_pad, folded to ONNX's spelling ("" is NOTSET as ONNX models
# write it: semantics 3.5).
AUTO_PAD_SPELLINGS = {
    "notset": "NOTSET",
    "": "NOTSET",
    "explicit": "NOTSET",
    "none": "NOTSET",
    "same_upper": "SAME_UPPER",
    "same_lower": "SAME_LOWER",
    "valid": "VALID",
}


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

    @property
    def layout(self) -> Layout:
        return Layout.NXC if self.channels_last else Layout.NCX

    def sample_shape(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """An input of one sample and one channel with these spatial lengths, in this layout."""
        return (1, *spatial, 1) if self.channels_last else (1, 1, *spatial)

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
        raise AvgPoolError(
            f"`auto_pad` is {value!r}: it must be one of NOTSET/explicit/None/'', SAME_UPPER, SAME_LOWER, VALID"
        )
    return folded


# ---------------------------------------------------------------- each dialect's attributes and spec
#
# One function per dialect spells the settings as that dialect's keyword attributes; its public
# function is called with them and its dialect module's make_spec (the translation the public
# function itself runs) is given the very same dict, so the CLI's shape, explain and zarr paths
# cannot disagree with what the function computes.


def _dialect_module(name: str) -> Any:
    """The operator module of dialect ``name`` (:mod:`avgpool._ops`)."""
    return importlib.import_module(f"avgpool._ops.{name}")


def _has_dilations(settings: Settings) -> bool:
    return bool(settings.dilations) and any(d != 1 for d in settings.dilations)


def onnx_attributes(s: Settings) -> dict[str, Any]:
    """The keywords of ``avgpool.average_pool`` (less opset and layout), also ``make_spec``'s."""
    return {
        "kernel_shape": list(s.kernel),
        "strides": s.strides,
        "pads": s.onnx_pads(),
        "auto_pad": s.auto_pad,
        "ceil_mode": s.ceil,
        "count_include_pad": s.include_pad,
        "dilations": s.dilations,
    }


def onnx_input_spec(s: Settings, input_shape: tuple[int, ...]) -> PoolSpec:
    onnx_dialect = _dialect_module("onnx")
    return onnx_dialect.make_spec(onnx_dialect.op_version(s.opset), input_shape, **onnx_attributes(s))


def openvino_attributes(s: Settings) -> dict[str, Any]:
    """The keywords of ``avgpool.openvino.avg_pool`` (less version), also ``make_spec``'s. Given
    dilations are passed even when all ones: AvgPool-1 and -14 refuse the attribute itself."""
    if s.channels_last:
        raise AvgPoolError("OpenVINO AvgPool is NCX only: drop --layout NXC")
    begin, end = s.begin_end()
    auto_pad = normalise_auto_pad(s.auto_pad)
    return {
        "kernel": list(s.kernel),
        "exclude_pad": not s.include_pad,
        "strides": s.strides and list(s.strides),
        "pads_begin": list(begin),
        "pads_end": list(end),
        "rounding_type": s.rounding,
        "auto_pad": "explicit" if auto_pad == "NOTSET" else auto_pad.lower(),
        "dilations": s.dilations and list(s.dilations),
    }


def openvino_input_spec(s: Settings, input_shape: tuple[int, ...]) -> PoolSpec:
    openvino_dialect = _dialect_module("openvino")
    version = openvino_dialect.check_version(s.version)  # as avg_pool checks it before make_spec
    return openvino_dialect.make_spec(version, input_shape, **openvino_attributes(s))


def onednn_attributes(s: Settings) -> dict[str, Any]:
    """The keywords of ``avgpool.onednn.avg_pool`` (less data_format), also ``make_spec``'s. oneDNN
    has no dilations attribute: all ones is what it computes, any other value is refused here."""
    if _has_dilations(s):
        raise AvgPoolError("oneDNN Graph AvgPool has no dilations")
    begin, end = s.begin_end()
    auto_pad = normalise_auto_pad(s.auto_pad)
    return {
        "kernel": list(s.kernel),
        "strides": s.ones(s.strides),
        "pads_begin": list(begin),
        "pads_end": list(end),
        "exclude_pad": not s.include_pad,
        "rounding_type": s.rounding,
        "auto_pad": "None" if auto_pad == "NOTSET" else auto_pad,
    }


def onednn_input_spec(s: Settings, input_shape: tuple[int, ...]) -> PoolSpec:
    onednn_dialect = _dialect_module("onednn")
    return onednn_dialect.make_spec(input_shape, onednn_dialect.parse_layout(s.layout.value), **onednn_attributes(s))


def qlinear_attributes(s: Settings) -> dict[str, Any]:
    """The keywords of ``qlinear_average_pool`` (less the scales and zero points), also those of
    ``make_geometry``, which gives the spec the function computes with (onnxruntime's geometry)."""
    if _has_dilations(s):
        raise AvgPoolError("QLinearAveragePool has no dilations")
    return {
        "kernel_shape": list(s.kernel),
        "strides": s.strides and list(s.strides),
        "pads": s.onnx_pads(),
        "auto_pad": s.auto_pad,
        "ceil_mode": int(s.ceil),
        "count_include_pad": int(s.include_pad),
        "channels_last": int(s.channels_last),
    }


def qlinear_input_spec(s: Settings, input_shape: tuple[int, ...]) -> PoolSpec:
    qlinear_dialect = _dialect_module("qlinear")
    return qlinear_dialect.make_geometry(input_shape, **qlinear_attributes(s)).spec


def _axes(settings: Settings, spatial: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    n = len(spatial)
    text = f"the input has {n} spatial axes"
    kernel = as_int_tuple("kernel", settings.kernel, n, text, minimum=1)
    strides = as_int_tuple("strides", settings.ones(settings.strides), n, text, minimum=1)
    dilations = as_int_tuple("dilations", settings.ones(settings.dilations), n, text, minimum=1)
    begin, end = (
        as_int_tuple(name, values, n, text, minimum=0)
        for name, values in zip(
            ("pads_begin", "pads_end"), ((settings.pads_begin or (0,) * n), (settings.pads_end or (0,) * n))
        )
    )
    return kernel, strides, dilations, begin, end


def _generic_spec(settings: Settings, spatial: tuple[int, ...], rounding: Rounding, divisor: Divisor) -> PoolSpec:
    kernel, strides, dilations, begin, end = _axes(settings, spatial)
    mode = {
        "NOTSET": PadMode.EXPLICIT,
        "SAME_UPPER": PadMode.SAME_UPPER,
        "SAME_LOWER": PadMode.SAME_LOWER,
        "VALID": PadMode.VALID,
    }[normalise_auto_pad(settings.auto_pad)]
    if mode is not PadMode.EXPLICIT and any(begin + end):
        raise AvgPoolError("explicit pads cannot be used together with auto_pad")
    return PoolSpec(kernel, strides, dilations, tuple(zip(begin, end)), mode, rounding, divisor)


def pytorch_spec(settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
    """torch.nn.functional.avg_pool1d/2d/3d: ceil_mode with the drop rule, and with
    count_include_pad the taps inside the padded extent (the window is clipped at input + pad).
    avgpool has no torch function whose translation this could share: it is written here."""
    if _has_dilations(settings):
        raise AvgPoolError("torch avg_pool has no dilation")
    if normalise_auto_pad(settings.auto_pad) in ("SAME_UPPER", "SAME_LOWER"):
        raise AvgPoolError("torch avg_pool has no padding='same'")
    if not 1 <= len(spatial) <= 3:
        raise AvgPoolError(f"torch avg_pool takes 1 to 3 spatial axes, not {len(spatial)}")
    begin, end = settings.begin_end()
    if tuple(begin) != tuple(end):
        raise AvgPoolError(f"torch avg_pool pads symmetrically; pads {list(begin)}/{list(end)} differ")
    if any(p > k // 2 for p, k in zip(begin, settings.kernel)):
        raise AvgPoolError(
            f"torch avg_pool needs pad <= kernel // 2 (pads {list(begin)}, kernel {list(settings.kernel)})"
        )
    rounding = Rounding.CEIL_DROP if settings.ceil else Rounding.FLOOR
    divisor = Divisor.PADDED_TAPS if settings.include_pad else Divisor.VALID_TAPS
    return _generic_spec(settings, spatial, rounding, divisor)


def _pytorch_input_spec(s: Settings, input_shape: tuple[int, ...]) -> PoolSpec:
    return pytorch_spec(s, spatial_shape_of(input_shape, s.layout))


# ---------------------------------------------------------------- calling each dialect


def _call_onnx(x: np.ndarray, s: Settings) -> np.ndarray:
    from .._ops.onnx import average_pool

    return average_pool(x, **onnx_attributes(s), opset=s.opset, layout=s.layout.value)


def _call_openvino(x: np.ndarray, s: Settings) -> np.ndarray:
    from .._ops.openvino import avg_pool

    return avg_pool(x, **openvino_attributes(s), version=s.version)


def _call_onednn(x: np.ndarray, s: Settings) -> np.ndarray:
    from .._ops.onednn import avg_pool

    return avg_pool(x, **onednn_attributes(s), data_format=s.layout.value)


def _call_qlinear(x: np.ndarray, s: Settings) -> np.ndarray:
    from .._ops.qlinear import qlinear_average_pool

    # plain Python numbers, which the function reads as onnxruntime reads its tensors (float32
    # scales, zero points of X's dtype), refusing out-of-range ones with its own messages
    return qlinear_average_pool(x, s.x_scale, s.x_zero_point, s.y_scale, s.y_zero_point, **qlinear_attributes(s))


@dataclass(frozen=True)
class Dialect:
    name: str
    title: str
    # (settings, the whole input shape in settings.layout) -> the spec the dialect's function computes with
    input_spec: Callable[[Settings, tuple[int, ...]], PoolSpec]
    call: Callable[[np.ndarray, Settings], np.ndarray] | None  # None: explain only
    default_channels_last: bool = False
    quantized: bool = False

    def spec(self, settings: Settings, spatial: tuple[int, ...]) -> PoolSpec:
        """The spec for spatial lengths alone (one sample, one channel): what explain compares."""
        return self.input_spec(settings, settings.sample_shape(spatial))


DIALECTS: dict[str, Dialect] = {
    "onnx": Dialect("onnx", "ONNX AveragePool", onnx_input_spec, _call_onnx),
    "openvino": Dialect("openvino", "OpenVINO AvgPool", openvino_input_spec, _call_openvino),
    "onednn": Dialect("onednn", "oneDNN Graph AvgPool", onednn_input_spec, _call_onednn, default_channels_last=True),
    "qlinear": Dialect(
        "qlinear", "com.microsoft QLinearAveragePool", qlinear_input_spec, _call_qlinear, quantized=True
    ),
    "pytorch": Dialect("pytorch", "PyTorch avg_pool", _pytorch_input_spec, None),
}
POOL_DIALECTS = tuple(name for name, d in DIALECTS.items() if d.call is not None)
# (settings, spatial lengths) -> spec, by the names explain and the tests use
onnx_spec = DIALECTS["onnx"].spec
openvino_spec = DIALECTS["openvino"].spec
onednn_spec = DIALECTS["onednn"].spec
qlinear_spec = DIALECTS["qlinear"].spec


def comparison_rows(settings: Settings) -> list[tuple[str, Callable[[tuple[int, ...]], PoolSpec]]]:
    """The dialects to compare for one configuration: (label, spatial shape -> spec)."""
    settings = replace(settings, channels_last=False)  # the windows do not depend on it; OpenVINO is NCX only
    rows: list[tuple[str, Callable[[tuple[int, ...]], PoolSpec]]] = []
    onnx_label = f"ONNX AveragePool (opset {settings.opset})"
    rows.append((onnx_label, lambda spatial: onnx_spec(settings, spatial)))
    if settings.ceil:
        version = max(settings.version, 14)
        for rounding_type in ("ceil", "ceil_torch"):
            openvino_settings = replace(settings, version=version, rounding=rounding_type)
            rows.append(
                (
                    f"OpenVINO AvgPool-{version} rounding_type={rounding_type}",
                    lambda spatial, s=openvino_settings: openvino_spec(s, spatial),
                )
            )
    else:
        rows.append((f"OpenVINO AvgPool-{settings.version}", lambda spatial: openvino_spec(settings, spatial)))
    onednn_settings = replace(settings, rounding="ceil" if settings.ceil else "floor")
    rows.append(("oneDNN Graph AvgPool", lambda spatial: onednn_spec(onednn_settings, spatial)))
    rows.append(("PyTorch avg_pool", lambda spatial: pytorch_spec(settings, spatial)))
    rows.append(("onnxruntime QLinearAveragePool", lambda spatial: qlinear_spec(settings, spatial)))
    return rows
