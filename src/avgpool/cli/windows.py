"""The window tables of ``avgpool explain``: every pooling window of a canonical spec, and where
the dialects disagree, as text, SVG and PNG.

Windows follow :func:`avgpool._core.shape.resolve` (the engine's geometry) and the counting rules of
:mod:`avgpool._core.plan`, computed per window when asked for (``tests/test_explain.py`` checks them
against the engine's tables and results): an axis can have billions of windows (absurd pads) and
explain prints a few. Each tap is classified as in the input, in the padding, or past the padding
(a ceil window hanging over the end). What needs every window (listing all of them, comparing the
dialects, drawing a picture) is refused above :data:`MAX_WINDOWS` per axis.

>>> from avgpool.cli.settings import Settings, onnx_spec
>>> spec = onnx_spec(Settings(kernel=(3,), strides=(3,), rounding="ceil"), (4,))
>>> for w in describe(spec, (4,))[0].windows:
...     print(w.index, tuple(w.taps), w.in_input, w.in_padding, w.past_padding, w.divisor)
0 (0, 1, 2) 3 0 0 3.0
1 (3, 4, 5) 1 0 2 1.0
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .._core.shape import AxisGeometry, resolve
from .._core.spec import Divisor, PadMode, PoolSpec, Rounding
from ..errors import AvgPoolError
from .settings import Settings, comparison_rows

#: Most windows (or picture columns) per axis for what needs all of them: listing every window,
#: comparing the dialects window by window, drawing a picture.
MAX_WINDOWS = 2**20

ROUNDING_TEXT = {
    Rounding.FLOOR: "floor",
    Rounding.CEIL: "ceil (no drop rule)",
    Rounding.CEIL_DROP: "ceil with the drop rule",
}
DIVISOR_TEXT = {
    Divisor.VALID_TAPS: "taps inside the input",
    Divisor.PADDED_TAPS: "taps inside the padded extent",
    Divisor.FULL_KERNEL: "the full kernel",
    Divisor.FULL_KERNEL_IF_PADDED: "the full kernel if any pad is non-zero, else taps inside the input",
}


@dataclass(frozen=True)
class Window:
    """One output position along one axis."""

    index: int
    taps: range  # input coordinates of every tap, padding and overhang included (lazy: kernels can be huge)
    in_input: int  # taps in [0, L)
    in_padding: int  # taps in [-pad_begin, 0) or [L, L + pad_end)
    past_padding: int  # taps at L + pad_end or beyond (a ceil window's overhang)
    divisor: float  # this axis's factor of the divisor (the divisor is the product over axes)

    @property
    def first_tap(self) -> int:
        return self.taps[0]


def _taps_within(g: AxisGeometry, start: np.ndarray, low: int, high: int) -> np.ndarray:
    """For windows whose first tap is ``start``: how many of their taps lie in [low, high)."""
    first = np.maximum(0, -((start - low) // g.dilation))  # ceil((low - start) / d), at least 0
    last = np.minimum(g.kernel - 1, (high - 1 - start) // g.dilation)
    return np.maximum(0, last - first + 1)


class Windows(Sequence[Window]):
    """The windows of one axis, each computed when it is asked for (int64 arithmetic, as the
    engine's: every coordinate is within the padded input)."""

    def __init__(self, geometry: AxisGeometry, divisor_rule: Divisor, any_pad: bool) -> None:
        self.geometry, self.divisor_rule, self.any_pad = geometry, divisor_rule, any_pad

    def __len__(self) -> int:
        return self.geometry.out

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, slice):
            return self._windows(np.arange(*item.indices(len(self)), dtype=np.int64))
        index = operator.index(item)
        index += len(self) if index < 0 else 0
        if not 0 <= index < len(self):
            raise IndexError(f"window {item} of {len(self)}")
        return self._windows(np.array([index], dtype=np.int64))[0]

    def __iter__(self) -> Iterator[Window]:
        for start in range(0, len(self), 4096):
            yield from self[start : start + 4096]

    def _counts(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """First taps, taps in the input, taps in the padded extent, divisor factors."""
        g = self.geometry
        start = index * g.stride - g.pad_begin
        in_input = _taps_within(g, start, 0, g.length)
        in_padded = _taps_within(g, start, -g.pad_begin, g.length + g.pad_end)
        rule = self.divisor_rule
        if rule is Divisor.FULL_KERNEL or (rule is Divisor.FULL_KERNEL_IF_PADDED and self.any_pad):
            divisor = np.full(index.shape, float(g.kernel))
        else:
            divisor = (in_padded if rule is Divisor.PADDED_TAPS else in_input).astype(np.float64)
        return start, in_input, in_padded, divisor

    def _windows(self, index: np.ndarray) -> list[Window]:
        g = self.geometry
        rows = zip(index.tolist(), *(column.tolist() for column in self._counts(index)))
        return [
            Window(
                o,
                range(first, first + g.kernel * g.dilation, g.dilation),
                inside,
                padded - inside,
                g.kernel - padded,
                divisor,
            )
            for o, first, inside, padded, divisor in rows
        ]

    def divisors(self) -> np.ndarray:
        """Every window's divisor factor (at most MAX_WINDOWS of them)."""
        if len(self) > MAX_WINDOWS:
            raise AvgPoolError(f"{len(self)} windows are more than the {MAX_WINDOWS} explain handles at once")
        return self._counts(np.arange(len(self), dtype=np.int64))[3]


@dataclass(frozen=True)
class AxisWindows:
    axis: int
    geometry: AxisGeometry
    windows: Windows


def describe(spec: PoolSpec, spatial_shape: Sequence[int]) -> tuple[AxisWindows, ...]:
    """Every window of every spatial axis (computed when read)."""
    geometry = resolve(spec, tuple(int(n) for n in spatial_shape))
    any_pad = any(g.pad_begin or g.pad_end for g in geometry)  # FULL_KERNEL_IF_PADDED looks at every axis
    return tuple(AxisWindows(axis, g, Windows(g, spec.divisor, any_pad)) for axis, g in enumerate(geometry))


def _check_enumerable(
    axes: Sequence[AxisWindows],
    purpose: str,
    remedy: str = "",
    what: str = "windows",
    count: Any = lambda axis: len(axis.windows),
) -> None:
    """Refuse, in one line, what would take every window (or column) of an axis with too many."""
    for axis in axes:
        n = count(axis)
        if n > MAX_WINDOWS:
            raise AvgPoolError(
                f"axis {axis.axis} has {n} {what}, too many {purpose} (at most {MAX_WINDOWS} per "
                f"axis){': ' + remedy if remedy else ''}"
            )


# ---------------------------------------------------------------- dialect comparison


@dataclass(frozen=True)
class DialectOutcome:
    label: str
    spec: PoolSpec | None
    axes: tuple[AxisWindows, ...] | None
    problem: str | None  # why the dialect cannot express the configuration

    @property
    def out_shape(self) -> tuple[int, ...] | None:
        return None if self.axes is None else tuple(a.geometry.out for a in self.axes)


def compare_dialects(settings: Settings, spatial_shape: Sequence[int]) -> list[DialectOutcome]:
    """The same configuration in ONNX, OpenVINO, oneDNN, PyTorch and QLinearAveragePool."""
    spatial = tuple(int(n) for n in spatial_shape)
    outcomes = []
    for label, make_spec in comparison_rows(settings):
        try:
            spec = make_spec(spatial)
            outcomes.append(DialectOutcome(label, spec, describe(spec, spatial), None))
        except AvgPoolError as err:
            outcomes.append(DialectOutcome(label, None, None, str(err)))
    return outcomes


def difference_lines(reference: tuple[AxisWindows, ...], outcome: DialectOutcome, limit: int = 8) -> list[str]:
    """How ``outcome`` differs from ``reference``: shape, then per-window divisors."""
    if outcome.axes is None:
        return [f"cannot express this: {outcome.problem}"]
    ours = tuple(a.geometry.out for a in reference)
    if outcome.out_shape != ours:
        return [f"different output shape: {list(outcome.out_shape)} instead of {list(ours)}"]
    lines = []
    for mine, theirs in zip(reference, outcome.axes):
        a, b = mine.windows.divisors(), theirs.windows.divisors()
        diffs = np.flatnonzero(a != b)
        for index in diffs[:limit].tolist():
            lines.append(
                f"axis {mine.axis} window {index}: divisor factor {_num(b[index])} instead of {_num(a[index])}"
            )
        if len(diffs) > limit:
            lines.append(f"axis {mine.axis}: {len(diffs) - limit} more windows with a different divisor")
    return lines or ["same shape, same divisors"]


# ---------------------------------------------------------------- text


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _cell(position: int, g: AxisGeometry) -> str:
    """What lies at an input coordinate: 'p' padding, a digit for the input, '-' past the padding."""
    if 0 <= position < g.length:
        return str(position % 10)
    if -g.pad_begin <= position < g.length + g.pad_end:
        return "p"
    return "-"


def _extent(axis: AxisWindows) -> tuple[int, int]:
    """The input coordinates a diagram spans: the padded input and the last window's overhang."""
    g = axis.geometry
    last = axis.windows[-1].taps[-1] if len(axis.windows) else g.length + g.pad_end - 1
    return -g.pad_begin, max(g.length + g.pad_end, last + 1)


def axis_header(axis: AxisWindows, spec: PoolSpec) -> str:
    g = axis.geometry
    mode = {
        PadMode.EXPLICIT: "explicit",
        PadMode.SAME_UPPER: "SAME_UPPER",
        PadMode.SAME_LOWER: "SAME_LOWER",
        PadMode.VALID: "VALID",
    }[spec.pad_mode]
    return (
        f"axis {axis.axis}: length {g.length}, kernel {g.kernel}, stride {g.stride}, dilation {g.dilation}, "
        f"pads {g.pad_begin}/{g.pad_end} ({mode}), {ROUNDING_TEXT[spec.rounding]} -> {g.out} windows"
    )


def axis_lines(axis: AxisWindows, *, max_windows: int = 64, diagram_width: int = 80) -> list[str]:
    """The table (and, when it fits, the diagram) of one axis's windows."""
    lo, hi = _extent(axis)
    g = axis.geometry
    draw = hi - lo <= min(diagram_width, MAX_WINDOWS)
    shown = axis.windows if max_windows <= 0 else axis.windows[:max_windows]
    lines = [
        "  window  first tap  taps in input / in padding / past padding  divisor"
        + ("   " + "".join(_cell(p, g) for p in range(lo, hi)) if draw else "")
    ]
    for w in shown:
        row = (
            f"  {w.index:>6}  {w.first_tap:>9}  {w.in_input:>13} / {w.in_padding:>10} / {w.past_padding:>12}  "
            f"{_num(w.divisor):>7}"
        )
        if draw:
            marks = [" "] * (hi - lo)
            for p in range(w.taps[0], w.taps[-1] + 1):
                marks[p - lo] = "."
            for t in w.taps:
                marks[t - lo] = "#" if 0 <= t < g.length else ("P" if t < g.length + g.pad_end else "X")
            row += "   " + "".join(marks).rstrip()
        lines.append(row)
    if len(shown) < len(axis.windows):
        lines.append(f"  ... {len(axis.windows) - len(shown)} more windows (--max-windows 0 shows all)")
    if not draw:
        remedy = f"--width {hi - lo} draws it" if hi - lo <= MAX_WINDOWS else "too wide to draw"
        lines.append(f"  (diagram omitted: {hi - lo} columns; {remedy})")
    return lines


LEGEND = (
    "diagram: digits = input index mod 10, p = padding, - = past the padding;"
    " # tap in the input, P tap in the padding, X tap past the padding, . skipped by dilation"
)


def explain_text(
    settings: Settings,
    dialect_label: str,
    spec: PoolSpec,
    input_shape: Sequence[int],
    spatial_shape: Sequence[int],
    output_shape: Sequence[int],
    *,
    max_windows: int = 64,
    diagram_width: int = 80,
    compare: bool = True,
) -> str:
    """The whole ``avgpool explain`` report."""
    axes = describe(spec, spatial_shape)
    if max_windows <= 0:
        _check_enumerable(axes, "to list", "give --max-windows")
    if compare:
        _check_enumerable(axes, "to compare with the other dialects", "add --no-compare")
    begin = [a.geometry.pad_begin for a in axes]
    end = [a.geometry.pad_end for a in axes]
    lines = [
        f"{dialect_label} on input {'x'.join(map(str, input_shape))}: {settings.describe()}",
        f"output shape: {'x'.join(map(str, output_shape))}",
        f"resolved pads: begin {begin}, end {end} (ONNX pads {begin + end})",
        f"divisor: the product over axes of each axis's factor; factor = {DIVISOR_TEXT[spec.divisor]}",
        LEGEND,
        "",
    ]
    for axis in axes:
        lines.append(axis_header(axis, spec))
        lines.extend(axis_lines(axis, max_windows=max_windows, diagram_width=diagram_width))
        lines.append("")
    if compare:
        lines.append("the same configuration in other dialects (compared with the above):")
        for outcome in compare_dialects(settings, spatial_shape):
            found = difference_lines(axes, outcome)
            lines.append(f"  {outcome.label}: {found[0]}")
            lines.extend(f"      {line}" for line in found[1:])
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- pictures

_COLOURS = {
    "input": "#dbe9f6",
    "pad": "#f6e3c6",
    "past": "#eeeeee",
    "#": "#2b6cb0",
    "P": "#dd8a2b",
    "X": "#b0b0b0",
    ".": "#ffffff",
}
_CELL, _ROW_LABEL = 18, 150
#: The largest PNG diagram drawn (3 bytes a pixel in memory, Pillow's own limit against
#: decompression bombs about 89 million).
PNG_MAX_PIXELS = 50_000_000


def _picture_rows(axes: Sequence[AxisWindows], max_windows: int) -> list[tuple[str, list[tuple[int, str, str]] | None]]:
    """(label, [(column, kind, text)]) rows; a None row list is a title line."""
    _check_enumerable(axes, "to draw", what="input columns", count=lambda axis: _extent(axis)[1] - _extent(axis)[0])
    if max_windows <= 0:
        _check_enumerable(axes, "to draw", "give --max-windows")
    rows: list[tuple[str, list[tuple[int, str, str]] | None]] = []
    for axis in axes:
        g = axis.geometry
        lo, hi = _extent(axis)
        rows.append(
            (
                f"axis {axis.axis}: L={g.length} k={g.kernel} s={g.stride} d={g.dilation} "
                f"pads {g.pad_begin}/{g.pad_end}",
                None,
            )
        )
        cells = []
        for p in range(lo, hi):
            kind = "input" if 0 <= p < g.length else ("pad" if p < g.length + g.pad_end else "past")
            cells.append((p - lo, kind, str(p) if kind == "input" else ""))
        rows.append(("input", cells))
        for w in axis.windows if max_windows <= 0 else axis.windows[:max_windows]:
            marks = [(p - lo, ".", "") for p in range(w.taps[0], w.taps[-1] + 1) if p not in w.taps]
            marks += [
                (t - lo, "#" if 0 <= t < g.length else ("P" if t < g.length + g.pad_end else "X"), "") for t in w.taps
            ]
            rows.append((f"o={w.index}  /{_num(w.divisor)}", marks))
    return rows


def svg(axes: Sequence[AxisWindows], *, max_windows: int = 64, title: str = "") -> str:
    """The window diagram as a standalone SVG document (hand-written markup, no dependency)."""
    from xml.sax.saxutils import escape

    rows = _picture_rows(axes, max_windows)
    columns = max((c for _, cells in rows if cells for c, _, _ in cells), default=0) + 1
    width = _ROW_LABEL + columns * _CELL + 20
    height = (len(rows) + 2) * (_CELL + 4) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    y = _CELL + 14
    for label, cells in rows:
        weight = ' font-weight="bold"' if cells is None else ""
        out.append(f'<text x="8" y="{y + 13}"{weight}>{escape(label)}</text>')
        for column, kind, text in cells or ():
            x = _ROW_LABEL + column * _CELL
            out.append(
                f'<rect x="{x}" y="{y}" width="{_CELL - 2}" height="{_CELL - 2}" '
                f'fill="{_COLOURS[kind]}" stroke="#888"/>'
            )
            if text:
                out.append(f'<text x="{x + 2}" y="{y + 12}" font-size="9">{escape(text)}</text>')
        y += _CELL + 4
    out.append(
        f'<text x="8" y="{y + 13}">blue: tap in the input, orange: tap in the padding, '
        "grey: tap past the padding, white: skipped by dilation</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def png(axes: Sequence[AxisWindows], fp: BinaryIO, *, max_windows: int = 64, title: str = "") -> None:
    """The window diagram as a PNG, written to ``fp`` (needs Pillow: ``pip install 'avgpool[images]'``)."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise ImportError("--png needs Pillow: pip install 'avgpool[images]'") from None
    rows = _picture_rows(axes, max_windows)
    columns = max((c for _, cells in rows if cells for c, _, _ in cells), default=0) + 1
    width = _ROW_LABEL + columns * _CELL + 20
    height = (len(rows) + 2) * (_CELL + 4) + 10
    if width * height > PNG_MAX_PIXELS:  # 1x1x20000 asked for 2.2 GB, 1x1x200000 for ~16 GB
        raise AvgPoolError(
            f"the PNG would be {width} x {height} pixels ({columns} positions of the input in a row), "
            f"more than {PNG_MAX_PIXELS:,}: write an SVG (--svg) or explain a shorter input"
        )
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text((8, 4), title, fill="black")
    y = _CELL + 14
    for label, cells in rows:
        draw.text((8, y + 3), label, fill="black")
        for column, kind, text in cells or ():
            x = _ROW_LABEL + column * _CELL
            draw.rectangle([x, y, x + _CELL - 2, y + _CELL - 2], fill=_COLOURS[kind], outline="#888888")
            if text:
                draw.text((x + 2, y + 3), text[-2:], fill="black")
        y += _CELL + 4
    draw.text((8, y + 3), "blue: tap in the input, orange: in the padding, grey: past the padding", fill="black")
    image.save(fp, format="PNG")
