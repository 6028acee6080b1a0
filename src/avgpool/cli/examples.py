"""The worked examples of the ONNX AveragePool documents, with their published outputs.

Transcribed from the ONNX operator pages (AveragePool-19's examples and AveragePool-11's
precomputed examples); ``avgpool demo`` computes them and shows both side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Example:
    name: str
    source: str
    x: np.ndarray
    attributes: dict[str, Any]
    expected: np.ndarray
    opset: int = 19
    notes: str = field(default="")


def _grid(*shape: int) -> np.ndarray:
    """1, 2, 3, ... in the given shape (every example in the documents uses such inputs)."""
    return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)


def _f32(rows: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.array(rows, dtype=np.float32).reshape(shape)


DOC19 = "AveragePool-19 page (onnx-averagepool-19.txt)"
DOC11 = "AveragePool-11 page (onnx-averagepool-opsets-1-11.rst)"

EXAMPLES: tuple[Example, ...] = (
    Example(
        "averagepool_1d_default",
        DOC19,
        _grid(1, 1, 8),
        {"kernel_shape": [2]},
        _f32([1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5], (1, 1, 7)),
    ),
    Example(
        "averagepool_2d_ceil",
        DOC19,
        _grid(1, 1, 4, 4),
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        _f32([6, 7.5, 12, 13.5], (1, 1, 2, 2)),
    ),
    Example(
        "averagepool_2d_ceil_last_window_starts_on_pad",
        DOC19,
        _grid(1, 1, 2, 2),
        {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
        _f32([1.1111112], (1, 1, 1, 1)),
        notes="the drop rule: a second window would start in the end padding",
    ),
    Example(
        "averagepool_2d_default",
        DOC19,
        _grid(1, 1, 4, 4),
        {"kernel_shape": [2, 2]},
        _f32([3.5, 4.5, 5.5, 7.5, 8.5, 9.5, 11.5, 12.5, 13.5], (1, 1, 3, 3)),
    ),
    Example(
        "averagepool_2d_pads",
        DOC19,
        _grid(1, 1, 4, 4),
        {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2]},
        _f32(
            [
                1,
                1.5,
                2,
                3,
                3.5,
                4,
                3,
                3.5,
                4,
                5,
                5.5,
                6,
                5,
                5.5,
                6,
                7,
                7.5,
                8,
                9,
                9.5,
                10,
                11,
                11.5,
                12,
                11,
                11.5,
                12,
                13,
                13.5,
                14,
                13,
                13.5,
                14,
                15,
                15.5,
                16,
            ],
            (1, 1, 6, 6),
        ),
    ),
    Example(
        "averagepool_2d_pads_count_include_pad",
        DOC19,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        _f32(
            [
                1.7777778,
                3,
                3.6666667,
                4.3333335,
                3.1111112,
                4.3333335,
                7,
                8,
                9,
                6.3333335,
                7.6666665,
                12,
                13,
                14,
                9.666667,
                11,
                17,
                18,
                19,
                13,
                8.444445,
                13,
                13.666667,
                14.333333,
                9.777778,
            ],
            (1, 1, 5, 5),
        ),
    ),
    Example(
        "averagepool_2d_precomputed_pads",
        DOC19,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]},
        _f32(
            [
                7,
                7.5,
                8,
                8.5,
                9,
                9.5,
                10,
                10.5,
                11,
                11.5,
                12,
                12.5,
                13,
                13.5,
                14,
                14.5,
                15,
                15.5,
                16,
                16.5,
                17,
                17.5,
                18,
                18.5,
                19,
            ],
            (1, 1, 5, 5),
        ),
    ),
    Example(
        "averagepool_2d_precomputed_pads_count_include_pad",
        DOC19,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "count_include_pad": 1},
        _f32(
            [
                2.52,
                3.6,
                4.8,
                4.08,
                3.24,
                4.56,
                6.4,
                8.4,
                7.04,
                5.52,
                7.2,
                10,
                13,
                10.8,
                8.4,
                6.96,
                9.6,
                12.4,
                10.24,
                7.92,
                6.12,
                8.4,
                10.8,
                8.88,
                6.84,
            ],
            (1, 1, 5, 5),
        ),
    ),
    Example(
        "averagepool_2d_precomputed_strides",
        DOC19,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        _f32([4, 6, 14, 16], (1, 1, 2, 2)),
    ),
    Example(
        "averagepool_2d_strides",
        DOC19,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [3, 3], "strides": [2, 2]},
        _f32([7, 9, 17, 19], (1, 1, 2, 2)),
    ),
    Example(
        "averagepool_3d_default",
        DOC19,
        _grid(1, 1, 3, 3, 3),
        {"kernel_shape": [2, 2, 2]},
        _f32([7.5, 8.5, 10.5, 11.5, 16.5, 17.5, 19.5, 20.5], (1, 1, 2, 2, 2)),
    ),
    Example(
        "averagepool_2d_precomputed_same_upper",
        DOC11,
        _grid(1, 1, 5, 5),
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        _f32([4, 5.5, 7, 11.5, 13, 14.5, 19, 20.5, 22], (1, 1, 3, 3)),
        opset=11,
    ),
)


@dataclass(frozen=True)
class ExplainExample:
    argv: tuple[str, ...]
    notes: str


#: The first row of docs/semantics.md section 7, as ``avgpool demo`` explains it.
EXPLAIN_EXAMPLE = ExplainExample(
    ("1x1x4", "-k", "3", "-s", "3", "--ceil-mode"),
    "docs/semantics.md section 7: [1, 2, 3, 4], k3 s3 ceil gives [2, 4]; the second window has one tap in the input "
    "and two past it, so its divisor is 1 (onnx.reference shifts the windows and gives [1.5, 3])",
)
