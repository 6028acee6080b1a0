"""The AveragePool nodes of onnx's light test models, read from the files at run time.

The benchmark draws its real-model workloads from the models onnx ships as backend test data
(``onnx/backend/test/data/light``: small stand-ins of the model zoo's networks, with the real
graphs and shapes and tiny weights). :func:`model_nodes` loads each, runs onnx's shape inference to
get every pooling node's input shape, and returns one entry per distinct (input shape,
attributes): the first node that has it, with the list of every node that shares it.
GlobalAveragePool nodes are included as AveragePool with the kernel = the whole plane.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

#: (short name, file) in the order the rows are listed
MODELS = (
    ("inception_v1", "light_inception_v1.onnx"),
    ("inception_v2", "light_inception_v2.onnx"),
    ("densenet121", "light_densenet121.onnx"),
    ("resnet50", "light_resnet50.onnx"),
    ("shufflenet", "light_shufflenet.onnx"),
    ("squeezenet", "light_squeezenet.onnx"),
)
POOLING_OPS = ("AveragePool", "GlobalAveragePool")
ATTRIBUTES = ("kernel_shape", "strides", "pads", "ceil_mode", "count_include_pad", "auto_pad", "dilations")


@dataclass(frozen=True)
class ModelNode:
    """One distinct pooling call found in the models."""

    model: str  # short model name of the first node with this call
    ordinal: int  # 1-based position of that node among its model's pooling nodes
    shape: tuple[int, ...]  # input shape, NCX
    attrs: dict[str, Any]  # ONNX AveragePool attributes, defaults left out
    op_type: str  # that node's operator: AveragePool or GlobalAveragePool
    opset: int  # the model's default-domain opset
    sources: tuple[str, ...]  # every node with this call: "model node K (graph node I 'name', op)"

    @property
    def label(self) -> str:
        """e.g. ``densenet121 node 2 1x256x28x28 k2 s2``."""
        return f"{self.model} node {self.ordinal} {'x'.join(map(str, self.shape))} {describe(self.attrs, self.op_type)}"


def _axes(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))


def describe(attrs: dict[str, Any], op_type: str = "AveragePool") -> str:
    """Short text of the attributes: ``k3 s2 p1``, ``k7 pads [0,0,1,1]``, ``k7 global``."""
    parts = [f"k{_axes(list(attrs['kernel_shape']))}"]
    if op_type == "GlobalAveragePool":
        parts.append("global")
    if "strides" in attrs:
        parts.append(f"s{_axes(list(attrs['strides']))}")
    if "dilations" in attrs:
        parts.append(f"d{_axes(list(attrs['dilations']))}")
    if "pads" in attrs:
        pads = list(attrs["pads"])
        parts.append(f"p{pads[0]}" if len(set(pads)) == 1 else "pads [" + ",".join(map(str, pads)) + "]")
    if "auto_pad" in attrs:
        parts.append(str(attrs["auto_pad"]))
    if attrs.get("ceil_mode"):
        parts.append("ceil")
    if attrs.get("count_include_pad"):
        parts.append("cip")
    return " ".join(parts)


def light_model_dir() -> str:
    """onnx's light test model folder (ImportError when onnx is missing)."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _normalized(op_type: str, raw: dict[str, Any], shape: tuple[int, ...]) -> dict[str, Any]:
    """ONNX attributes with their defaults dropped, so that equal calls compare equal."""
    rank = len(shape) - 2
    if op_type == "GlobalAveragePool":
        return {"kernel_shape": list(shape[2:])}
    attrs: dict[str, Any] = {"kernel_shape": [int(k) for k in raw["kernel_shape"]]}
    for key, default in (("strides", [1] * rank), ("dilations", [1] * rank), ("pads", [0] * (2 * rank))):
        if key in raw and [int(v) for v in raw[key]] != default:
            attrs[key] = [int(v) for v in raw[key]]
    for key in ("ceil_mode", "count_include_pad"):
        if int(raw.get(key, 0)):
            attrs[key] = int(raw[key])
    auto_pad = raw.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in ("NOTSET", ""):
        attrs["auto_pad"] = auto_pad
    return attrs


def model_nodes() -> tuple[list[ModelNode], list[str]]:
    """Every distinct pooling call of the light models, and messages about what could not be read.

    An empty list with a message when onnx is not installed or its test data is missing.
    """
    try:
        import onnx
        import onnx.shape_inference
        from onnx import helper

        folder = light_model_dir()
    except ImportError as err:
        return [], [f"model-node rows skipped: onnx is not installed ({err}); pip install 'avgpool[bench]'"]
    found: dict[tuple, dict[str, Any]] = {}
    messages = []
    for model_name, filename in MODELS:
        path = os.path.join(folder, filename)
        if not os.path.exists(path):
            messages.append(
                f"model-node rows of {model_name} skipped: {path} not found "
                f"(not in onnx {onnx.__version__}'s backend test data)"
            )
            continue
        try:
            model = onnx.load(path)
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as err:  # noqa: BLE001 - a model that does not load is reported, the others go on
            messages.append(f"model-node rows of {model_name} skipped: {type(err).__name__}: {err}")
            continue
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        infos = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
        ordinal = 0
        for index, node in enumerate(model.graph.node):
            if node.op_type not in POOLING_OPS or node.domain not in ("", "ai.onnx"):
                continue
            ordinal += 1
            where = f"{model_name} node {ordinal} (graph node {index} {node.name!r}, {node.op_type})"
            info = infos.get(node.input[0])
            dims = info.type.tensor_type.shape.dim if info is not None else []
            if not dims or not all(d.HasField("dim_value") for d in dims):
                messages.append(f"{where} skipped: shape inference gave no static input shape")
                continue
            shape = tuple(int(d.dim_value) for d in dims)
            raw = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in ATTRIBUTES}
            attrs = _normalized(node.op_type, raw, shape)
            key = (shape, repr(sorted(attrs.items())))
            if key in found:
                found[key]["sources"].append(where)
            else:
                found[key] = {
                    "model": model_name,
                    "ordinal": ordinal,
                    "shape": shape,
                    "attrs": attrs,
                    "op_type": node.op_type,
                    "opset": opset,
                    "sources": [where],
                }
    nodes = [
        ModelNode(f["model"], f["ordinal"], f["shape"], f["attrs"], f["op_type"], f["opset"], tuple(f["sources"]))
        for f in found.values()
    ]
    return nodes, messages


if __name__ == "__main__":
    rows, notes = model_nodes()
    for n in rows:
        print(f"{n.label:<44} opset {n.opset}  {n.attrs}  <- {'; '.join(n.sources)}")
    for note in notes:
        print(note)
