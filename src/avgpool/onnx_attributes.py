"""Read an ONNX AveragePool node's attributes as avgpool keyword arguments (needs ``onnx``)."""

from __future__ import annotations

from typing import Any


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
