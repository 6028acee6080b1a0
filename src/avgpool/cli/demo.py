"""``avgpool demo``: the worked examples of the ONNX AveragePool pages computed and set beside the
published outputs, then one case of ``avgpool explain``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    import numpy as np


SUMMARY = "compute the worked examples of the ONNX spec and compare with the published outputs"
DESCRIPTION = (
    "Compute every worked example of the ONNX AveragePool pages and show input, attributes, avgpool's "
    "output and the published output side by side; then explain one case of docs/semantics.md section 7."
)
EXAMPLES = ["avgpool demo"]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """demo has no flags."""


def command(args: argparse.Namespace, stdout: TextIO) -> int:
    return run_demo(stdout)


def _format(array: np.ndarray) -> str:
    import numpy as np

    return np.array2string(np.squeeze(array, axis=(0, 1)), precision=7, separator=" ", max_line_width=60)


def _side_by_side(*blocks: tuple[str, str]) -> str:
    columns = [[title] + text.splitlines() for title, text in blocks]
    widths = [max(map(len, col)) for col in columns]
    height = max(map(len, columns))
    lines = []
    for row in range(height):
        cells = [(col[row] if row < len(col) else "").ljust(width) for col, width in zip(columns, widths)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def _explain_args(argv: list[str]) -> argparse.Namespace:
    """``avgpool explain ARGV`` parsed as the whole command line parses it."""
    import argparse

    from . import explain
    from .flags import add_command

    parser = argparse.ArgumentParser(prog="avgpool")
    add_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), "explain", explain)
    return parser.parse_args(["explain", *argv])


def run_demo(out: TextIO | None = None) -> int:
    """Compute the worked examples of the ONNX AveragePool pages; 0 when every one matches."""
    import numpy as np

    from .._ops import onnx as api
    from . import explain
    from .examples import EXAMPLES, EXPLAIN_EXAMPLE

    out = out or sys.stdout
    failures = 0
    for example in EXAMPLES:
        y = api.average_pool(example.x, opset=example.opset, **example.attributes)
        ok = y.shape == example.expected.shape and np.allclose(y, example.expected, rtol=1e-6, atol=0)
        failures += not ok
        attrs = ", ".join(f"{k}={v}" for k, v in example.attributes.items())
        print(f"== {example.name}  [{'match' if ok else 'MISMATCH'}]", file=out)
        print(f"   from the {example.source}; opset {example.opset}; {attrs}", file=out)
        if example.notes:
            print(f"   note: {example.notes}", file=out)
        print(
            _side_by_side(
                (f"input {example.x.shape}", _format(example.x)),
                (f"avgpool {y.shape}", _format(y)),
                (f"expected {example.expected.shape}", _format(example.expected)),
            ),
            file=out,
        )
        print(file=out)
    total = len(EXAMPLES)
    print(f"{total - failures} of {total} worked examples match the published outputs.", file=out)
    print(file=out)
    print(f"== avgpool explain {' '.join(EXPLAIN_EXAMPLE.argv)}", file=out)
    print(f"   ({EXPLAIN_EXAMPLE.notes})", file=out)
    explain.command(_explain_args(list(EXPLAIN_EXAMPLE.argv)), out)
    print(
        "more: avgpool pool IN.npy|IN.png OUT.npy|OUT.png -k 3,3 ... (any dialect), "
        "avgpool run MODEL.onnx --check (see avgpool COMMAND --help)",
        file=out,
    )
    return 1 if failures else 0
