"""avgpool inside onnx's ReferenceEvaluator: AveragePool, GlobalAveragePool, QLinearAveragePool and
QLinearGlobalAveragePool.

>>> import avgpool.onnx
>>> [op.__name__ for op in avgpool.onnx.reference_ops(opset=9)]
['AveragePool', 'GlobalAveragePool', 'QLinearAveragePool', 'QLinearGlobalAveragePool']

``make_evaluator(model)`` builds an ``onnx.reference.ReferenceEvaluator`` that runs the model's
pooling nodes with avgpool (exact, and much faster than onnx's own Python loops) and every other
node with onnx's implementation. The evaluator does not tell an operator which opset the model
imports, so the op classes are created bound to one opset: ``reference_ops(opset=...)``.

This module imports the real ``onnx`` package lazily (``pip install 'avgpool[onnx]'``), so that
``import avgpool`` never imports onnx.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: What to install when onnx (or onnxruntime) is missing.
ONNX_EXTRA = "pip install 'avgpool[onnx]'"


def _onnx() -> Any:
    try:
        import onnx  # absolute import: the real package, not this module
    except ImportError:  # pragma: no cover - exercised only without onnx
        raise ImportError(f"running ONNX models needs onnx: {ONNX_EXTRA}") from None
    return onnx


def _op_run_base() -> type:
    _onnx()
    from onnx.reference.op_run import OpRun

    return OpRun


def _attributes(op: Any, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The node's attributes as avgpool keywords: the ones the node sets, plus the schema's
    defaults the evaluator filled in (None means "no default")."""
    kwargs = {}
    for name, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, bytes):
            value = value.decode()
        kwargs[name] = list(value) if isinstance(value, (list, tuple, np.ndarray)) else value
    return kwargs


@functools.lru_cache(maxsize=64)
def reference_ops(opset: int = 22, *, qlinear: bool = True, global_pool: bool = True) -> tuple[type, ...]:
    """The op classes to give ``ReferenceEvaluator(model, new_ops=...)``, bound to ``opset``.

    ``AveragePool`` follows the AveragePool version of that opset (attribute set, dtypes, the
    drop rule: see :func:`avgpool.average_pool`); ``GlobalAveragePool`` is AveragePool with the
    kernel covering the whole spatial input; ``QLinearAveragePool`` and ``QLinearGlobalAveragePool``
    (domain ``com.microsoft``, what onnxruntime's quantizer makes of AveragePool and
    GlobalAveragePool nodes) are onnxruntime's quantized ops, bit-exact. Classes are cached per
    opset.
    """
    from ._ops import onnx as onnx_dialect

    version = onnx_dialect.op_version(opset)  # validates the opset now, not at the first node
    base = _op_run_base()
    from onnx import defs

    schema = defs.get_schema("AveragePool", version, "")

    def run_average_pool(self: Any, x: np.ndarray, **attributes: Any) -> tuple[np.ndarray]:
        from ._ops.onnx import average_pool

        return (average_pool(x, opset=opset, **_attributes(self, attributes)),)

    def run_global(self: Any, x: np.ndarray) -> tuple[np.ndarray]:
        from ._ops.onnx import average_pool

        # AveragePool with one window over the whole input, the very numbers average_pool gives
        # (numpy's float64 mean differed where a float64 sum loses bits: [1e20, 1, -1e20, 1, 0]
        # 0.2 against 0.4) and faster (squeezenet's 1x1000x13x13: 27 us against numpy's 158)
        return (average_pool(x, list(np.shape(x)[2:]), opset=opset),)

    def run_qlinear(
        self: Any,
        x: np.ndarray,
        x_scale: Any,
        x_zero_point: Any = None,
        y_scale: Any = None,
        y_zero_point: Any = None,
        **attributes: Any,
    ) -> tuple[np.ndarray]:
        from ._ops.qlinear import qlinear_average_pool

        kwargs = _attributes(self, attributes)
        kernel = kwargs.pop("kernel_shape")
        return (qlinear_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, kernel, **kwargs),)

    def run_qlinear_global(
        self: Any,
        x: np.ndarray,
        x_scale: Any,
        x_zero_point: Any = None,
        y_scale: Any = None,
        y_zero_point: Any = None,
        **attributes: Any,
    ) -> tuple[np.ndarray]:
        from ._ops.qlinear import qlinear_global_average_pool

        return (
            qlinear_global_average_pool(
                x, x_scale, x_zero_point, y_scale, y_zero_point, **_attributes(self, attributes)
            ),
        )

    ops: list[type] = [
        type(
            "AveragePool",
            (base,),
            {"op_domain": "", "op_schema": schema, "opset": opset, "_run": run_average_pool, "__module__": __name__},
        )
    ]
    if global_pool:
        ops.append(
            type(
                "GlobalAveragePool",
                (base,),
                {"op_domain": "", "opset": opset, "_run": run_global, "__module__": __name__},
            )
        )
    if qlinear:
        ops.append(
            type(
                "QLinearAveragePool",
                (base,),
                {"op_domain": "com.microsoft", "op_schema": None, "_run": run_qlinear, "__module__": __name__},
            )
        )
        ops.append(
            type(
                "QLinearGlobalAveragePool",
                (base,),
                {"op_domain": "com.microsoft", "op_schema": None, "_run": run_qlinear_global, "__module__": __name__},
            )
        )
    return tuple(ops)


def load_model(model: Any) -> Any:
    """A ModelProto from a ModelProto, a path or serialized bytes."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(os.fspath(model))


def model_opset(model: Any, domain: str = "") -> int | None:
    """The opset the model imports for a domain ("" and "ai.onnx" are the same)."""
    domains = {"", "ai.onnx"} if domain in ("", "ai.onnx") else {domain}
    for entry in load_model(model).opset_import:
        if entry.domain in domains:
            return int(entry.version)
    return None


def make_evaluator(
    model: Any,
    *,
    opset: int | None = None,
    qlinear: bool = True,
    global_pool: bool = True,
    new_ops: Iterable[type] | None = None,
    **kwargs: Any,
) -> Any:
    """An ``onnx.reference.ReferenceEvaluator`` running the pooling nodes with avgpool.

    ``model`` is a ModelProto, a path or bytes; ``opset`` defaults to the opset the model imports.
    ``new_ops`` are added before avgpool's (the evaluator keeps the first class of a name);
    other keywords go to the evaluator.

    >>> import numpy as np, onnx, avgpool.onnx
    >>> from onnx import helper, TensorProto
    >>> node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[3], ceil_mode=1)
    >>> graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
    ...                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    >>> evaluator = avgpool.onnx.make_evaluator(model)
    >>> evaluator.run(None, {"x": np.array([[[1, 2, 3, 4]]], dtype=np.float32)})[0]
    array([[[2., 4.]]], dtype=float32)
    """
    proto = load_model(model)
    from onnx.reference import ReferenceEvaluator

    if opset is None:
        opset = model_opset(proto) or 22
    ops = list(new_ops or ()) + list(reference_ops(opset, qlinear=qlinear, global_pool=global_pool))
    return ReferenceEvaluator(proto, new_ops=ops, **kwargs)


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  # dim params and unknown dims are 1
    declared: tuple[int | None, ...] | None = None  # None for a symbolic or unknown dim; None if no shape

    def mismatch(self, array: np.ndarray) -> str | None:
        """Why ``array`` cannot feed this input (dtype or a fixed dimension), or None."""
        if np.dtype(array.dtype) != self.dtype:
            return f"has dtype {array.dtype}, the model declares {self.dtype}"
        if self.declared is not None:
            if array.ndim != len(self.declared) or any(
                d is not None and d != n for d, n in zip(self.declared, array.shape)
            ):
                text = "x".join("?" if d is None else str(d) for d in self.declared)
                return f"has shape {'x'.join(map(str, array.shape))}, the model declares {text}"
        return None


def model_inputs(model: Any) -> list[InputSpec]:
    """The inputs a caller must feed (graph inputs that are not initializers)."""
    from onnx import helper

    proto = load_model(model)
    initializers = {i.name for i in proto.graph.initializer}
    specs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            kind = value.type.WhichOneof("value") or "no type"
            raise ValueError(f"input {value.name!r} is not a tensor ({kind}): only tensor inputs can be fed")
        if tensor.elem_type == 0:
            raise ValueError(f"input {value.name!r} declares no element type: only typed tensor inputs can be fed")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim)
        declared = (
            tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            if tensor.HasField("shape")
            else None
        )
        specs.append(InputSpec(value.name, dtype, shape, declared))
    return specs


def generate_input(spec: InputSpec, *, seed: int = 0, kind: str = "random") -> np.ndarray:
    """Data for one input: ``random`` (seeded, floats in [0, 1), integers in a small range) or
    ``ramp``, the ``arange(n) / n`` that onnx's backend test runner feeds its "light" models."""
    shape, dtype = spec.shape, spec.dtype
    if kind == "ramp":
        n = int(np.prod(shape))
        return (np.arange(n).reshape(shape) / max(n, 1)).astype(dtype)
    if kind != "random":
        raise ValueError(f"unknown input kind {kind!r}: use 'random' or 'ramp'")
    rng = np.random.default_rng(seed)
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return rng.random(shape, np.float32).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127), size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise ValueError(f"cannot generate data of dtype {dtype} for input {spec.name!r}")


def onnxruntime_outputs(
    model: Any, feeds: Mapping[str, np.ndarray], output_names: list[str] | None = None
) -> list[np.ndarray]:
    """Run the model in onnxruntime (CPU) on the same feeds."""
    try:
        import onnxruntime
    except ImportError:
        raise ImportError("--check needs onnxruntime: pip install onnxruntime") from None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # no graph-optimizer warnings on stderr
    session = onnxruntime.InferenceSession(
        load_model(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(output_names, dict(feeds))


def differences(expected: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """Max absolute and max relative difference (relative to |expected|, NaN where both are NaN ignored)."""
    a, b = np.asarray(expected, dtype=np.float64), np.asarray(got, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf"), float("inf")
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.where(both_nan, 0.0, np.abs(a - b))
        rel = np.where(diff == 0, 0.0, diff / np.abs(a))
    if diff.size == 0:
        return 0.0, 0.0
    return float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))), float(np.max(np.where(np.isnan(rel), np.inf, rel)))


def node_kwargs(node: Any) -> dict[str, Any]:
    """``{"kernel_shape": [...], "strides": [...], ...}`` from an ``onnx.NodeProto``.

    Strings arrive from protobuf as bytes and are decoded; attribute names are ONNX's, which are
    also :func:`avgpool.average_pool`'s keyword names.
    """
    try:
        from onnx import helper
    except ImportError:  # pragma: no cover - exercised only without onnx
        raise ImportError("reading ONNX nodes needs onnx: pip install 'avgpool[onnx]'") from None
    kwargs = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode()
        kwargs[attribute.name] = list(value) if isinstance(value, (list, tuple)) else value
    return kwargs
