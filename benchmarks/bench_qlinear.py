#!/usr/bin/env python3
"""Time avgpool's QLinearAveragePool against onnxruntime's com.microsoft QLinearAveragePool and
PyTorch's quantized avg_pool2d, interleaved, in one process, and check it bit for bit.

    python benchmarks/bench_qlinear.py              # every row, 7 rounds of >= 50 ms batches
    python benchmarks/bench_qlinear.py --rounds 3   # quicker
    python benchmarks/bench_qlinear.py --quick      # 3 rounds of ~5 ms batches: a smoke run
    python benchmarks/bench_qlinear.py --only node  # only the model-node rows
    python benchmarks/bench_qlinear.py --only global

Rows: the hand-written uint8 workloads (group "table"), then one row per distinct AveragePool /
GlobalAveragePool call of onnx's light test models (group "node", found by
``model_nodes.model_nodes()`` as bench.py's node rows are; a GlobalAveragePool becomes a kernel of
the whole plane), run as QLinearAveragePool on random uint8 data of the node's shape and
attributes with x_scale 0.05, x_zero_point 128, y_scale 0.04, y_zero_point 120 (the table rows
keep 0.05/128 for both). Every row runs in both layouts: NCHW (channels_last=0 for avgpool and
onnxruntime, a contiguous torch tensor) and NHWC (channels_last=1, torch's channels_last format).

Columns (median seconds per call; 2 threads per runtime):

  prepared    the public prepared pool, ``pool = avgpool.QLinearAveragePool(x_scale, x_zp, y_scale,
              y_zp, kernel, **attrs, channels_last=...)`` called as ``pool(x, out)`` with a
              preallocated output: the counterpart of an onnxruntime session (and of bench.py's
              prepared AveragePool).
  engine      the engine under both, called directly: ``quantized_pools.run_into(prepared, x,
              kernel_args, out)`` on the very objects the function's memo holds (checked). No public
              API: shown for what the Python layers above it cost; no target reads it.
  function    the public ``avgpool.qlinear_average_pool(x, x_scale, x_zp, y_scale, y_zp, kernel,
              **attrs, channels_last=..., out=out)`` with the same preallocated output.
  onnxruntime a one-node com.microsoft QLinearAveragePool model, CPU EP, run_with_iobinding on
              preallocated OrtValues.
  torch       torch.ao.nn.quantized.functional.avg_pool2d on a quint8 tensor (a new output per
              call; its output keeps the input's scale, so it does no requantization to y_scale).
  fn/prep     function / prepared; ratio = prepared / fastest peer; fn ratio = function / fastest
              peer (< 1: avgpool is faster). Each ratio is the median over the rounds of the two
              times in one round (harness.paired_ratio: the machine's speed drifts for seconds).

Peers are interleaved, the order rotated each round, with a 50 ms pause before each batch
(harness.measure). Both avgpool outputs are checked bit for bit against onnxruntime's on every row
(exit status 1 on any difference); torch uses integer arithmetic of its own, so only its largest
difference is shown (after requantizing its output to y_scale/y_zero_point in numpy). The summary
gives, per layout and for both, the geometric mean and worst of prepared / fastest peer and
function / fastest peer over the table rows, the model-node rows and all rows, with how many are
above 1.0; function / prepared (geometric mean, worst, how many within 10%); and PASS/FAIL for the
targets: model nodes geometric mean <= 0.6, no row above 1.0, function within 10% of prepared on
every model node (and every row).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import harness
import numpy as np
from harness import Paired, Runner, fmt_ratio, markdown_table, spread, verdict
from model_nodes import model_nodes

import avgpool
from avgpool._core import quantized_pools
from avgpool._ops import qlinear as _qlinear

HERE = Path(__file__).resolve().parent
THREADS = 2
RESULTS = HERE / "results" / "bench_qlinear.md"  # written by every run of all rows
TABLE_QUANT = (0.05, 128, 0.05, 128)  # x_scale, x_zero_point, y_scale, y_zero_point of the table rows
NODE_QUANT = (0.05, 128, 0.04, 120)  # ... of the model-node rows
ORT_ATTRS = ("kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad")
PEERS = ("onnxruntime", "torch")


@dataclass(frozen=True)
class Workload:
    name: str
    shape: tuple[int, ...]  # NCHW
    attrs: dict[str, Any]  # QLinearAveragePool attributes but channels_last
    group: str = "table"  # "table" or "node"
    quant: tuple = TABLE_QUANT
    note: str = ""


def _table(name: str, shape: tuple[int, ...], kernel: int, stride: int, pad: int = 0) -> Workload:
    return Workload(name, shape, {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4})


WORKLOADS = [
    _table("uint8 QLinear densenet transition, batch 32 (32x128x56x56, 2x2 s2)", (32, 128, 56, 56), 2, 2),
    _table("densenet121 2x2 s2 (1x128x56x56)", (1, 128, 56, 56), 2, 2),
    _table("densenet121 global 7x7 (1x1024x7x7)", (1, 1024, 7, 7), 7, 7),
    _table("resnet50 global 7x7 (1x2048x7x7)", (1, 2048, 7, 7), 7, 7),
    _table("inception 3x3 s1 p1 (1x192x28x28)", (1, 192, 28, 28), 3, 1, 1),
    _table("tiny 1x1x4x4 k2 (per-call overhead)", (1, 1, 4, 4), 2, 1),
]


def node_workloads() -> tuple[list[Workload], list[str]]:
    """One row per distinct pooling call of onnx's light test models (model_nodes.model_nodes())."""
    nodes, messages = model_nodes()
    rows = []
    for n in nodes:
        attrs = {k: v for k, v in n.attrs.items() if k in ORT_ATTRS}
        if any(d != 1 for d in n.attrs.get("dilations", [])):
            messages.append(f"{n.label} skipped: QLinearAveragePool has no dilations")
            continue
        note = ""
        if len(n.sources) > 1:
            note = f"{len(n.sources)} nodes make this call: " + ", ".join(s.split(" (")[0] for s in n.sources)
        rows.append(Workload(n.label, tuple(n.shape), attrs, "node", NODE_QUANT, note))
    return rows, messages


def _kwargs(w: Workload, nhwc: bool) -> dict[str, Any]:
    kwargs = {k: v for k, v in w.attrs.items() if k != "kernel_shape"}
    kwargs["channels_last"] = nhwc
    return kwargs


def engine_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    """The engine objects qlinear_average_pool memoises, called as its memo-hit path does."""
    kw = _kwargs(w, nhwc)
    frz = _qlinear._freeze
    prepared = _qlinear.prepare(
        x.shape,
        x.dtype,
        frz(w.attrs["kernel_shape"]),
        frz(kw.get("strides")),
        frz(kw.get("pads")),
        frz(kw.get("auto_pad", "NOTSET")),
        frz(kw.get("ceil_mode", False)),
        frz(kw.get("count_include_pad", False)),
        frz(nhwc),
    )
    kernel_args = quantized_pools.kernel_args(prepared, _qlinear._params(x.dtype, *w.quant))
    out = np.empty(out_shape, x.dtype)
    run_into = quantized_pools.run_into

    def call():
        return run_into(prepared, x, kernel_args, out)

    call()
    return Runner(
        "engine",
        call,
        lambda: out,
        note="quantized_pools.run_into(prepared, x, kernel_args, out)",
        keep=(prepared, kernel_args),
    )


def prepared_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    pool = avgpool.QLinearAveragePool(*w.quant, w.attrs["kernel_shape"], **_kwargs(w, nhwc))
    out = np.empty(out_shape, x.dtype)

    def call():
        return pool(x, out)

    call()
    return Runner("prepared", call, lambda: out, note="QLinearAveragePool(...)(x, out)")


def function_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    out = np.empty(out_shape, x.dtype)
    kwargs = dict(_kwargs(w, nhwc), out=out)
    kernel = w.attrs["kernel_shape"]
    xs, xz, ys, yz = w.quant
    fn = avgpool.qlinear_average_pool

    def call():
        return fn(x, xs, xz, ys, yz, kernel, **kwargs)

    call()
    return Runner("function", call, lambda: out, note="qlinear_average_pool(..., out=out)")


def literal_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    """The function as a script calls it, the lists written in the call (new objects each time,
    looked up by value; :func:`function_runner` passes the same objects, as a model runner does)."""
    out = np.empty(out_shape, x.dtype)
    args = [repr(v) for v in w.quant] + [repr(w.attrs["kernel_shape"])]
    args += [f"{name}={value!r}" for name, value in _kwargs(w, nhwc).items()]
    source = f"lambda: qlinear_average_pool(x, {', '.join(args)}, out=out)"
    call = eval(source, {"qlinear_average_pool": avgpool.qlinear_average_pool, "np": np, "x": x, "out": out})  # noqa: S307
    call()
    return Runner("literal", call, lambda: out, note=source.removeprefix("lambda: "))


def ort_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = TensorProto.UINT8
    xs, xz, ys, yz = w.quant
    node = helper.make_node(
        "QLinearAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        channels_last=int(nhwc),
        **w.attrs,
    )
    inputs = [
        helper.make_tensor_value_info("x", elem, list(x.shape)),
        helper.make_tensor_value_info("xs", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("xz", elem, []),
        helper.make_tensor_value_info("ys", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("yz", elem, []),
    ]
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info("y", elem, list(out_shape))])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    y = np.empty(out_shape, np.uint8)
    feeds = {
        "x": x,
        "xs": np.array(xs, np.float32),
        "xz": np.array(xz, np.uint8),
        "ys": np.array(ys, np.float32),
        "yz": np.array(yz, np.uint8),
    }
    binding = session.io_binding()
    values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    for k, v in values.items():
        binding.bind_ortvalue_input(k, v)
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(y))
    run = session.run_with_iobinding

    def call():
        run(binding)

    call()
    return Runner("onnxruntime", call, lambda: y, keep=(feeds, values, session, binding))


def torch_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    import warnings

    import torch

    warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*deprecated")
    torch.set_num_threads(THREADS)
    try:
        from torch.ao.nn.quantized import functional as qf
    except ImportError:
        from torch.nn.quantized import functional as qf
    a = w.attrs
    if len(w.shape) != 4:
        raise ValueError("torch's quantized avg_pool2d is 2-D only")
    if a.get("ceil_mode", 0) or a.get("auto_pad", "NOTSET") != "NOTSET":
        raise ValueError("ceil_mode/auto_pad are not mapped to torch")
    kernel = list(a["kernel_shape"])
    strides = list(a.get("strides", [1, 1]))
    pads = list(a.get("pads", [0] * 4))
    # torch pads symmetrically: pad max(begin, end) per axis and crop the extra leading windows (as bench.py)
    sym = [max(b, e) for b, e in zip(pads[:2], pads[2:])]
    if any(p > k // 2 for p, k in zip(sym, kernel)) or any((p - b) % s for p, b, s in zip(sym, pads[:2], strides)):
        raise ValueError(f"pads {pads} are not reachable with torch's symmetric padding")
    hw = out_shape[1:3] if nhwc else out_shape[2:]
    crop = tuple(slice((p - b) // s, (p - b) // s + n) for p, b, s, n in zip(sym, pads[:2], strides, hw))
    xs, xz, ys, yz = w.quant
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nhwc else x
    dequantized = torch.from_numpy((nchw.astype(np.float32) - xz) * np.float32(xs))
    qx = torch.quantize_per_tensor(dequantized, xs, xz, torch.quint8)
    if nhwc:
        qx = qx.contiguous(memory_format=torch.channels_last)
    cip = bool(a.get("count_include_pad", 0))
    box: list = [None]

    def call():
        box[0] = qf.avg_pool2d(qx, kernel, strides, sym, count_include_pad=cip)

    call()

    def result():
        r = box[0].int_repr().numpy()[(..., *crop)]
        if (xs, xz) != (ys, yz):  # torch keeps the input's scale: requantize for the comparison only
            r = np.clip(np.rint((r.astype(np.float32) - xz) * np.float32(xs) / np.float32(ys) + yz), 0, 255)
            r = r.astype(np.uint8)
        return np.ascontiguousarray(r.transpose(0, 2, 3, 1)) if nhwc else r

    note = "symmetric pads + crop" if any(c.start for c in crop) else ""
    return Runner("torch", call, result, note=note, keep=(qx,))


@dataclass
class Row(Paired):
    """One workload in one layout; ratios pair the two times of each round (:class:`harness.Paired`)."""

    peers: ClassVar[tuple[str, ...]] = PEERS
    workload: Workload
    layout: str
    times: dict[str, float]  # median seconds per call
    notes: list[str] = field(default_factory=list)
    exact: bool | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)  # seconds per call, one per round

    @property
    def label(self) -> str:
        return f"{self.workload.name} [{self.layout}]"

    @property
    def fn_over_prepared(self) -> float | None:
        return self.paired("function", "prepared")

    @property
    def literal_over_prepared(self) -> float | None:
        return self.paired("literal", "prepared")


def _label(row: Row) -> str:
    return row.label


fmt = harness.fmt_time_fixed


def run_row(w: Workload, nhwc: bool, rng: np.random.Generator, rounds: int, budget: float) -> Row:
    x_nchw = rng.integers(0, 256, w.shape, dtype=np.uint8)
    x = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)) if nhwc else x_nchw
    out_shape = avgpool.qlinear_average_pool(x, *w.quant, w.attrs["kernel_shape"], **_kwargs(w, nhwc)).shape
    row = Row(w, "NHWC" if nhwc else "NCHW", {})
    function = function_runner(w, x, nhwc, out_shape)
    prepared = prepared_runner(w, x, nhwc, out_shape)
    literal = literal_runner(w, x, nhwc, out_shape)
    engine = engine_runner(w, x, nhwc, out_shape)
    function.call()  # the function's memo now holds this call: check it is the engine runner's
    known = _qlinear._MEMO.by_identity.get(id(w.attrs["kernel_shape"]))
    if known is None or known[-1][0] is not engine.keep[0] or known[-1][1] is not engine.keep[1]:
        row.notes.append("WARNING: the engine runner's objects are not the function's memoised ones")
    runners = [prepared, function, literal, engine]
    for make in (ort_runner, torch_runner):
        try:
            runners.append(make(w, x, nhwc, out_shape))
        except Exception as err:  # noqa: BLE001 - a missing or failing peer is reported, not fatal
            name = "onnxruntime" if make is ort_runner else "torch"
            row.notes.append(f"{name} skipped: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
    ours = prepared.result()
    exact = all(np.array_equal(r.result(), ours) for r in (function, literal, engine))
    if not exact:
        row.notes.append("FUNCTION, LITERAL CALL OR ENGINE DIFFERS FROM PREPARED")
    for r in runners[4:]:
        theirs = r.result()
        if r.name == "onnxruntime":
            same = theirs.shape == ours.shape and np.array_equal(theirs, ours)
            exact = exact and same
            row.exact = exact
            row.notes.append(
                "prepared, function and engine bit-exact with onnxruntime"
                if exact
                else "DIFFERS FROM ONNXRUNTIME"
                if not same
                else "bit-exact with onnxruntime"
            )
        elif theirs.shape == ours.shape:
            diff = int(np.abs(theirs.astype(np.int16) - ours.astype(np.int16)).max())
            row.notes.append(f"torch max |diff| {diff}" + (f" ({r.note})" if r.note else ""))
        else:
            row.notes.append(f"torch output shape {theirs.shape} != {ours.shape}")
    if row.exact is None and not exact:
        row.exact = False
    if w.note:
        row.notes.append(w.note)
    row.samples = harness.measure(runners, rounds, budget, together=("prepared", "function", "literal", "engine"))
    row.times = harness.medians(row.samples)
    return row


HEADER = (
    "row",
    "prepared",
    "function",
    "engine",
    "onnxruntime",
    "torch",
    "fn/prep",
    "lit/prep",
    "fastest",
    "ratio",
    "fn ratio",
)


def cells(row: Row) -> list[str]:
    t = row.times
    return [
        row.label,
        fmt(t.get("prepared")),
        fmt(t.get("function")),
        fmt(t.get("engine")),
        fmt(t.get("onnxruntime")),
        fmt(t.get("torch")),
        fmt_ratio(row.fn_over_prepared),
        fmt_ratio(row.literal_over_prepared),
        row.fastest or "-",
        fmt_ratio(row.over_fastest("prepared")),
        fmt_ratio(row.over_fastest("function")),
    ]


def print_line(values: list[str], width: int) -> None:
    print(harness.console_row(values, width, 11, " "), flush=True)


def summarize(rows: list[Row]) -> tuple[list[str], bool]:
    lines: list[str] = []
    ok = True

    def target(passed: bool | None, text: str) -> None:
        nonlocal ok
        ok = ok and passed is not False
        lines.append(verdict(passed, text))

    layouts = (
        ("channels-first (NCHW)", ("NCHW",)),
        ("channels_last (NHWC)", ("NHWC",)),
        ("both layouts", ("NCHW", "NHWC")),
    )
    groups = (("table", "table rows"), ("node", "model-node rows"), (None, "rows in all"))
    present = {r.workload.group for r in rows}
    if len(present) == 1:  # "rows in all" would repeat the only group
        groups = tuple(g for g in groups if g[0] is not None)
    stats: dict[tuple, harness.Spread] = {}
    for kind in ("prepared", "function"):
        for group, gtext in groups:
            for ltext, lays in layouts:
                sel = (r for r in rows if r.layout in lays and (group is None or r.workload.group == group))
                s = spread(sel, lambda r: r.over_fastest(kind))
                if s is None:
                    continue
                stats[(kind, group, lays)] = s
                lines.append(
                    f"{kind} / fastest peer, {len(s.rows):>2} {gtext:<15} {ltext:<21}: {s.text(_label)}; "
                    f"{len(s.over(1.0))} above 1.0"
                )
        lines.append("")
    # each way of calling the function against the prepared pool: same objects, literal lists
    calls = (("fn_over_prepared", "function / prepared"), ("literal_over_prepared", "literal lists / prepared"))
    for key, ktext in calls:
        for group, gtext in (("node", "model-node rows"), (None, "rows in all")):
            if group is None and present == {"node"}:
                continue
            for ltext, lays in layouts:
                sel = (r for r in rows if r.layout in lays and (group is None or r.workload.group == group))
                s = spread(sel, lambda r: getattr(r, key))
                if s is None:
                    continue
                lines.append(
                    f"{ktext}, {len(s.rows):>2} {gtext:<15} {ltext:<21}: {s.text(_label)}; "
                    f"within 10%: {len(s.rows) - len(s.over(1.10))}/{len(s.rows)}"
                )
    lines.append("")
    checked = [r for r in rows if r.exact is not None]
    differ = [r for r in rows if r.exact is False]
    target(
        None if not checked else not differ and len(checked) == len(rows),
        f"bit-exact with onnxruntime, prepared and function (both calls): "
        f"{len(checked) - len(differ)}/{len(rows)} rows"
        + (f" (differ: {', '.join(r.label for r in differ)})" if differ else ""),
    )
    both = ("NCHW", "NHWC")
    for key, ktext in calls:
        for sel_group, text in (("node", "every model node"), (None, "every row")):
            s = spread(
                (r for r in rows if sel_group is None or r.workload.group == sel_group), lambda r: getattr(r, key)
            )
            within = 0 if s is None else len(s.rows) - len(s.over(1.10))
            target(
                None if s is None else within == len(s.rows),
                f"{ktext} within 10% on {text}"
                + ("" if s is None else f" ({within}/{len(s.rows)}; worst {s.worst:.2f} on {s.worst_row.label})"),
            )
    for kind in ("prepared", "function"):
        s = stats.get((kind, "node", both))
        target(
            None if s is None else s.geomean <= 0.6,
            f"model nodes, {kind}: geometric mean of the ratios <= 0.6" + ("" if s is None else f" ({s.geomean:.2f})"),
        )
        s = stats.get((kind, None, both)) or stats.get((kind, next(iter(present), None), both))
        above = None if s is None else len(s.over(1.0))
        target(
            None if s is None else above == 0,
            f"{kind}: no row above 1.0 the fastest peer"
            + ("" if s is None else f" ({above} of {len(s.rows)} rows; worst {s.worst:.2f} on {s.worst_row.label})"),
        )
    return lines, not differ


def markdown_text(rows: list[Row], lines: list[str]) -> str:
    """The results table and the summary, as markdown: what RESULTS holds."""
    text = [
        f"Median time per call, {THREADS} threads per runtime; quantization (x_scale, x_zp, y_scale, y_zp): "
        f"table rows {TABLE_QUANT}, model-node rows {NODE_QUANT}. prepared = avgpool.QLinearAveragePool(...)(x, out), "
        "function = avgpool.qlinear_average_pool(..., out=out), engine = the engine under both; ratio = prepared / "
        "fastest peer, fn ratio = function / fastest peer, fn/prep = function / prepared, lit/prep = the function "
        "with lists written in the call / prepared (ratios: the median over rounds of the two times in one round).",
        "",
        *markdown_table(HEADER, (cells(r) for r in rows)),
        "",
        "```",
        *lines,
        "```",
        "",
    ]
    return "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds of ~5 ms batches (a smoke run)")
    parser.add_argument("--rounds", type=int, help="timing rounds (default 7, --quick 3)")
    parser.add_argument("--budget", type=float, help="seconds per timed batch (default 0.05, --quick 0.005)")
    parser.add_argument(
        "--only", default="", help="only rows whose name contains this (case-insensitive; 'node': the model-node rows)"
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.budget = args.budget or (0.005 if args.quick else 0.05)
    rng = np.random.default_rng(0)
    import numba

    nodes, messages = node_workloads()
    selected = harness.select((*WORKLOADS, *nodes), args.only)
    print(
        f"threads: {THREADS} per runtime (numba {numba.get_num_threads()}); rounds {args.rounds}; "
        f"batches >= {args.budget * 1e3:g} ms; quantization (x_scale, x_zp, y_scale, y_zp): table rows "
        f"{TABLE_QUANT}, model-node rows {NODE_QUANT}"
    )
    print(
        "prepared = avgpool.QLinearAveragePool(...)(x, out); function = avgpool.qlinear_average_pool(..., out=out); "
        "engine = quantized_pools.run_into(prepared, x, kernel_args, out) on the objects the function memoises; "
        "ratio = prepared / fastest peer, fn ratio = function / fastest peer, fn/prep = function / prepared (ratios: "
        "the median over rounds of the two times in one round)"
    )
    for m in messages:
        print(f"NOTE: {m}")
    harness.warn_if_loaded()
    width = max([len(w.name) for w in selected] + [20]) + 7
    print()
    print_line(list(HEADER), width)
    rows = []
    for w in selected:
        for nhwc in (False, True):
            row = run_row(w, nhwc, rng, args.rounds, args.budget)
            rows.append(row)
            print_line(cells(row), width)
            for note in row.notes:
                print(f"    ({note})")
    print()
    lines, exact = summarize(rows)
    for line in lines:
        print(line)
    if not args.only:
        settings = harness.run_settings(args.rounds, args.budget * 1e3, args.quick)
        harness.write_results(RESULTS, markdown_text(rows, lines), Path(__file__).name, settings)
        print(f"wrote {RESULTS.relative_to(HERE.parent)}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
