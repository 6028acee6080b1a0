#!/usr/bin/env python3
"""Time avgpool against onnxruntime, OpenVINO and PyTorch, interleaved, in one process.

    python benchmarks/bench.py                 # every workload, 7 rounds (a few minutes)
    python benchmarks/bench.py --quick         # 3 rounds, shorter batches: a smoke run
    python benchmarks/bench.py --only kernel   # only workloads whose name contains "kernel"
    python benchmarks/bench.py --only node     # only the AveragePool nodes of onnx's light test models
    python benchmarks/bench.py --json results.json --markdown table.md --plot kernel_scaling.png

Or from the repository root: ``python3 run.py bench [ARGS...]``. See benchmarks/README.md for what
is measured and how to read the output. The peers are the ``bench`` extra:
``pip install 'avgpool[bench]'``; torch is optional (its column is skipped when it is missing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time  # noqa: F401 - tests/test_bench_harness.py patches bench.time.sleep
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import harness
import numpy as np
from harness import (
    PAUSE_S,
    Paired,
    Runner,
    calls_per_batch,
    fmt_ratio,
    fmt_time,
    geomean,
    markdown_table,
    spread,
    verdict,
)

# SLICES and source_state are here for other code: tests/test_bench_harness.py times through
# bench.measure with bench.SLICES; source_state names the commit measured
from harness import SLICES as SLICES
from harness import source_state as source_state
from model_nodes import model_nodes

import avgpool

HERE = Path(__file__).resolve().parent
THREADS = 2  # threads per runtime: the reference machine has 2 cores
MIB = 1 << 20
LARGE_BYTES = 16 * MIB  # "large tensor" threshold of the copy-speed target (input bytes)
PEERS = ("onnxruntime", "openvino", "torch")
RESULTS = HERE / "results" / "bench.md"  # written by every run of all workloads and peers
SHORT_RESULTS = HERE / "results" / "bench_short.md"  # the README's table: the targets' rows, k1 and k31
BENCH_EXTRA = "pip install 'avgpool[bench]'"


# --------------------------------------------------------------------------------------------- #
# Workloads
# --------------------------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Workload:
    """One AveragePool call: input shape (in ``layout``), ONNX attributes, dtype."""

    name: str
    shape: tuple[int, ...]
    attrs: dict[str, Any]  # ONNX attributes: kernel_shape, strides, pads, count_include_pad, ...
    dtype: str = "float32"
    layout: str = "NCX"  # "NXC": avgpool gets N, X..., C; peers see it as NCX (see runners)
    group: str = "table"  # "table" (perf-targets rows), "node" (model nodes), "nhwc node" (the same
    #                              channels-last) or "scaling" (kernel series)
    note: str = ""
    sources: tuple[str, ...] = ()  # "node" rows: every model node that makes this call

    @property
    def ncx_shape(self) -> tuple[int, ...]:
        if self.layout == "NCX":
            return self.shape
        return (self.shape[0], self.shape[-1], *self.shape[1:-1])

    @property
    def rank(self) -> int:
        return len(self.shape) - 2

    @property
    def shape_attrs(self) -> dict[str, Any]:
        """The attributes avgpool.output_shape takes (all but count_include_pad)."""
        return {k: v for k, v in self.attrs.items() if k != "count_include_pad"}

    def attr(self, key: str) -> list[int]:
        """A per-axis attribute with ONNX defaults (strides/dilations 1, pads 0)."""
        default = {"strides": [1] * self.rank, "dilations": [1] * self.rank, "pads": [0] * (2 * self.rank)}
        return list(self.attrs.get(key, default[key]))


def _same(k: int, rank: int = 2) -> dict[str, Any]:
    return {"kernel_shape": [k] * rank, "pads": [k // 2] * (2 * rank)}


def node_workloads() -> tuple[list[Workload], list[str]]:
    """One row per distinct AveragePool/GlobalAveragePool call of onnx's light test models (read from
    the files now: benchmarks/model_nodes.py), and messages about what could not be read."""
    nodes, messages = model_nodes()
    rows = []
    for n in nodes:
        note = f"model opset {n.opset}, timed at opset 22 (same meaning for these attributes)"
        if len(n.sources) > 1:
            note += f"; {len(n.sources)} nodes make this call: " + ", ".join(s.split(" (")[0] for s in n.sources)
        rows.append(Workload(n.label, n.shape, dict(n.attrs), group="node", note=note, sources=n.sources))
    return rows, messages


def channels_last(nodes: list[Workload]) -> list[Workload]:
    """The model-node rows again with the input channels-last (N, H, W, C; avgpool
    ``layout="NXC"``), as a converted or NHWC-trained model hands it over. Their batch is the
    model's, 1: one slab for avgpool, whose threads then share parts of it. onnxruntime and
    OpenVINO have no channels-last float AveragePool and run on an NCHW copy; torch gets the
    channels_last tensor."""
    rows = []
    for w in nodes:
        n, c, *spatial = w.shape
        nhwc = (n, *spatial, c)
        name = w.name.replace("x".join(map(str, w.shape)), "NHWC " + "x".join(map(str, nhwc)), 1)
        rows.append(Workload(name, nhwc, w.attrs, layout="NXC", group="nhwc node", note=w.note, sources=w.sources))
    return rows


def workloads(messages: list[str] | None = None) -> list[Workload]:
    """The rows of /work/shared/perf-targets.md (all but the uint8 QLinear one), every distinct
    AveragePool node of onnx's light test models (as the models have them, then channels-last),
    then the kernel series. Why model-node rows are
    missing, if they are, is appended to ``messages``."""
    k2s2 = {"kernel_shape": [2, 2], "strides": [2, 2]}
    k3p1 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    rows = [
        Workload("densenet121 2x2 s2", (1, 128, 56, 56), k2s2),
        Workload("densenet121 global 7x7", (1, 1024, 7, 7), {"kernel_shape": [7, 7]}),
        Workload("inception_v2 3x3 s1 p1", (1, 192, 28, 28), k3p1, note="count_include_pad=0"),
        Workload(
            "inception_v1 7x7 pads [0,0,1,1]",
            (1, 1024, 6, 6),
            {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]},
            note="k7 s1, pads end 1: 6+1-7+1 = 1x1 output, 36 valid taps",
        ),
        Workload("resnet50 global 7x7", (1, 2048, 7, 7), {"kernel_shape": [7, 7]}),
        Workload(
            "shufflenet 3x3 s2 p1", (1, 24, 56, 56), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
        ),
        Workload("squeezenet global 13x13", (1, 1000, 13, 13), {"kernel_shape": [13, 13]}),
        Workload("densenet transition b32", (32, 128, 56, 56), k2s2),
        Workload("inception 3x3 s1 p1 b32", (32, 192, 28, 28), k3p1),
        Workload("audio 1-D k4 s4", (8, 64, 16000), {"kernel_shape": [4], "strides": [4]}),
        Workload("volume 3-D k2 s2", (1, 32, 64, 64, 64), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
        Workload("volume 3-D k3 s1 p1", (1, 32, 64, 64, 64), {"kernel_shape": [3, 3, 3], "pads": [1] * 6}),
        Workload("large kernel k15 p7", (1, 16, 512, 512), _same(15)),
        Workload(
            "NHWC 3x3 s1 p1",
            (8, 112, 112, 64),
            k3p1,
            layout="NXC",
            note="onnxruntime/OpenVINO on an NCHW copy, torch channels_last",
        ),
        Workload("float16 inception 3x3 b32", (32, 192, 28, 28), k3p1, dtype="float16"),
        Workload("tiny 1x1x4x4 k2", (1, 1, 4, 4), {"kernel_shape": [2, 2]}, note="per-call overhead"),
    ]
    series = [Workload(f"kernel scaling k{k}", (1, 16, 256, 256), _same(k), group="scaling") for k in range(1, 32, 2)]
    nodes, why = node_workloads()
    if messages is not None:
        messages.extend(why)
    return rows + nodes + channels_last(nodes) + series


# --------------------------------------------------------------------------------------------- #
# Runners: one ready-to-call closure per implementation
# --------------------------------------------------------------------------------------------- #


class Skip(Exception):
    """A peer that cannot run this workload (or is not installed); the message says why."""


# A Runner's result() is its last output in NCX layout (None for "copy").


def _import(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as err:
        raise Skip(f"{module} is not installed ({err}); {BENCH_EXTRA}") from None


def make_input(w: Workload, seed: int = 0) -> np.ndarray:
    """Random data in the workload's own layout (C-contiguous)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(w.shape, dtype=np.float32).astype(w.dtype)


def to_ncx(w: Workload, a: np.ndarray) -> np.ndarray:
    """A view of an array in the workload's layout as NCX."""
    if w.layout == "NCX":
        return a
    return np.moveaxis(a, -1, 1)


def avgpool_runner(w: Workload, x: np.ndarray) -> Runner:
    out_shape = avgpool.output_shape(x.shape, layout=w.layout, **w.shape_attrs)
    out = np.empty(out_shape, dtype=x.dtype)
    # the prepared pool is avgpool's counterpart of an onnxruntime session with IOBinding, an
    # OpenVINO compiled model and torch's .out kernels: attributes validated once, data per call
    pool = avgpool.AveragePool(layout=w.layout, **w.attrs)

    def call():
        return pool(x, out)

    return Runner("avgpool", call, lambda: to_ncx(w, out), note="AveragePool prepared, out= preallocated")


FUNCTION = "average_pool"  # the plain-function runner's name (its key in the JSON's median_s)


def function_runner(w: Workload, x: np.ndarray) -> Runner:
    """avgpool as users call it: the plain ``avgpool.average_pool(x, **attrs, out=out)``, attributes
    passed (and looked up) on every call; ``out=`` as for the prepared pool, so that fn/prep is
    the cost of the function itself, not of allocating an output."""
    out = np.empty(avgpool.output_shape(x.shape, layout=w.layout, **w.shape_attrs), dtype=x.dtype)
    kwargs = dict(w.attrs, out=out)
    if w.layout != "NCX":
        kwargs["layout"] = w.layout
    pool = avgpool.average_pool

    def call():
        return pool(x, **kwargs)

    return Runner(FUNCTION, call, lambda: to_ncx(w, out), note="average_pool(x, **attrs, out=out)")


LITERAL = "average_pool literal"  # the function called with lists written in the call (its JSON key)


def literal_runner(w: Workload, x: np.ndarray) -> Runner:
    """The plain function as a script calls it: ``average_pool(x, kernel_shape=[3, 3], ...)``, the
    lists written in the call, so new objects each time. :func:`function_runner`'s call passes the
    same objects each time (as a model runner passes a node's attributes), which avgpool._ops.onnx
    recognises without building a key; these calls are looked up by value."""
    out = np.empty(avgpool.output_shape(x.shape, layout=w.layout, **w.shape_attrs), dtype=x.dtype)
    args = [f"{name}={value!r}" for name, value in w.attrs.items()]
    if w.layout != "NCX":
        args.append(f"layout={w.layout!r}")
    source = f"lambda: average_pool(x, {', '.join(args)}, out=out)"
    call = eval(source, {"average_pool": avgpool.average_pool, "x": x, "out": out})  # noqa: S307 - our own repr()s
    return Runner(LITERAL, call, lambda: to_ncx(w, out), note=source.removeprefix("lambda: "))


def copy_runner(w: Workload, x: np.ndarray, out_shape: tuple[int, ...]) -> Runner:
    """The physical limit: np.copyto of the input's bytes plus np.copyto of the output's bytes."""
    src_in, dst_in = x.copy(), np.empty_like(x)
    src_out, dst_out = np.ones(out_shape, x.dtype), np.empty(out_shape, x.dtype)

    def call():
        np.copyto(dst_in, src_in)
        np.copyto(dst_out, src_out)

    return Runner("copy", call, lambda: None)


def onnxruntime_runner(w: Workload, x_ncx: np.ndarray, out_shape: tuple[int, ...]) -> Runner:
    onnx = _import("onnx")
    ort = _import("onnxruntime")
    from onnx import helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(w.dtype))
    node = helper.make_node("AveragePool", ["X"], ["Y"], **w.attrs)
    graph = helper.make_graph(
        [node],
        "avgpool_bench",
        [helper.make_tensor_value_info("X", elem, list(x_ncx.shape))],
        [helper.make_tensor_value_info("Y", elem, list(out_shape))],
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session, errors = None, []
    for opset in (22, 19):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
        onnx.checker.check_model(model)
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            break
        except Exception as err:  # noqa: BLE001 - an older onnxruntime may lack opset 22
            errors.append(f"opset {opset}: {err}")
    if session is None:
        raise Skip("; ".join(errors))

    x_in = np.ascontiguousarray(x_ncx)
    y = np.empty(out_shape, dtype=w.dtype)
    binding = session.io_binding()
    binding.bind_ortvalue_input("X", ort.OrtValue.ortvalue_from_numpy(x_in))
    binding.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy(y))
    run = session.run_with_iobinding

    def call():
        run(binding)

    note = f"IOBinding, opset {opset}"
    if w.layout == "NXC":
        note += ", NCHW (no NHWC float AveragePool)"
    return Runner("onnxruntime", call, lambda: y, note=note, keep=(x_in, y, session, binding))


def openvino_runner(w: Workload, x_ncx: np.ndarray, out_shape: tuple[int, ...]) -> Runner:
    ov = _import("openvino")
    try:
        import openvino.opset16 as ops

        version = 16
    except ImportError:
        import openvino.opset14 as ops

        version = 14
    rank = w.rank
    pads = w.attr("pads")
    dilations = w.attr("dilations")
    kwargs = {}
    if version >= 16:
        # always explicit: opset16.avg_pool without dilations builds a node with empty dilations,
        # and compiling it on CPU segfaults (OpenVINO 2026.4)
        kwargs["dilations"] = dilations
    elif any(d != 1 for d in dilations):
        raise Skip("dilations need OpenVINO AvgPool-16")
    if w.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        raise Skip("auto_pad is not mapped; use explicit pads")
    param = ops.parameter(list(x_ncx.shape), np.dtype(w.dtype), name="X")
    pool = ops.avg_pool(
        param,
        strides=w.attr("strides"),
        pads_begin=pads[:rank],
        pads_end=pads[rank:],
        kernel_shape=list(w.attrs["kernel_shape"]),
        exclude_pad=not bool(w.attrs.get("count_include_pad", 0)),
        # ONNX ceil_mode (opset >= 10) has the drop rule: OpenVINO's ceil_torch
        rounding_type="ceil_torch" if w.attrs.get("ceil_mode", 0) else "floor",
        **kwargs,
    )
    model = ov.Model([pool], [param], "avgpool_bench")
    config = {ov.properties.inference_num_threads: THREADS, ov.properties.hint.inference_precision: ov.Type.f32}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    x_in = np.ascontiguousarray(x_ncx)
    y = np.empty(out_shape, dtype=w.dtype)
    request.set_input_tensor(ov.Tensor(x_in, shared_memory=True))
    request.set_output_tensor(ov.Tensor(y, shared_memory=True))
    start, wait = request.start_async, request.wait

    def call():
        start()
        wait()

    note = f"AvgPool-{version}, preset tensors"
    if w.dtype == "float16":
        note += ", f16 in/out, precision hint f32"
    if w.layout == "NXC":
        note += ", NCHW"
    return Runner("openvino", call, lambda: y, note=note, keep=(x_in, y, compiled, request))


def torch_runner(w: Workload, x_ncx: np.ndarray, out_shape: tuple[int, ...]) -> Runner:
    torch = _import("torch")
    torch.set_num_threads(THREADS)
    rank = w.rank
    kernel = list(w.attrs["kernel_shape"])
    strides = w.attr("strides")
    pads = w.attr("pads")
    if any(d != 1 for d in w.attr("dilations")):
        raise Skip("torch avg_pool has no dilations")
    if w.attrs.get("ceil_mode", 0) or w.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        raise Skip("ceil_mode/auto_pad are not mapped")
    # torch pads symmetrically: pad max(begin, end) per axis and crop the extra leading windows
    # (exact for both count_include_pad values, since the kept windows never reach the extra pads)
    sym = [max(b, e) for b, e in zip(pads[:rank], pads[rank:])]
    if any(p > k // 2 for p, k in zip(sym, kernel)):
        raise Skip(f"padding {sym} exceeds half the kernel {kernel} (torch limit)")
    if any((p - b) % s for p, b, s in zip(sym, pads[:rank], strides)):
        raise Skip("asymmetric pads not reachable by cropping at this stride")
    crop = tuple(slice((p - b) // s, (p - b) // s + n) for p, b, s, n in zip(sym, pads[:rank], strides, out_shape[2:]))

    # a view of the workload's own buffer: channels_last strides for the NXC row
    xt = torch.from_numpy(x_ncx)
    full = [(L + 2 * p - k) // s + 1 for L, p, k, s in zip(x_ncx.shape[2:], sym, kernel, strides)]
    memory_format = torch.channels_last if (w.layout == "NXC" and rank == 2) else torch.contiguous_format
    y = torch.empty([*x_ncx.shape[:2], *full], dtype=xt.dtype).contiguous(memory_format=memory_format)
    op = {1: torch.ops.aten.avg_pool1d.out, 2: torch.ops.aten.avg_pool2d.out, 3: torch.ops.aten.avg_pool3d.out}[rank]
    cip = bool(w.attrs.get("count_include_pad", 0))
    extra = () if rank == 1 else (None,)  # divisor_override (2-D/3-D only)

    def call():
        op(xt, kernel, strides, sym, False, cip, *extra, out=y)

    note = "aten avg_poolNd.out"
    if w.layout == "NXC":
        note += ", channels_last"
    if crop and any(c.start for c in crop):
        note += f", symmetric pads {sym} + crop"
    return Runner("torch", call, lambda: y[(..., *crop)].numpy(), note=note, keep=(x_ncx, xt, y))


BUILDERS = {"onnxruntime": onnxruntime_runner, "openvino": openvino_runner, "torch": torch_runner}


# --------------------------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------------------------- #


def measure(
    runners: list[Runner], rounds: int, budget_s: float, together: Sequence[str] = ()
) -> dict[str, list[float]]:
    """:func:`harness.measure` with this module's :data:`PAUSE_S` and :func:`calls_per_batch`
    (the names tests/test_bench_harness.py replaces)."""
    return harness.measure(runners, rounds, budget_s, together, pause_s=PAUSE_S, calibrate=calls_per_batch)


def check_outputs(w: Workload, runners: list[Runner]) -> list[str]:
    """Compare each peer's output with avgpool's once (catches attribute-mapping mistakes)."""
    for r in runners:
        r.call()
    ref = np.asarray(runners[0].result(), dtype=np.float64)
    tol = 2e-2 if w.dtype == "float16" else 1e-4
    warnings = []
    for r in runners[1:]:
        got = r.result()
        if got is None:
            continue
        if r.name in (FUNCTION, LITERAL):
            if not np.array_equal(np.asarray(got), np.asarray(runners[0].result()), equal_nan=True):
                warnings.append(f"{r.name}: output is not bit-identical to the prepared pool's")
            continue
        got = np.asarray(got, dtype=np.float64)
        if got.shape != ref.shape:
            warnings.append(f"{r.name}: output shape {got.shape} != avgpool's {ref.shape}")
        elif not np.allclose(got, ref, rtol=tol, atol=tol, equal_nan=True):
            err = np.nanmax(np.abs(got - ref))
            warnings.append(f"{r.name}: output differs from avgpool's (max abs diff {err:.3g})")
    return warnings


# --------------------------------------------------------------------------------------------- #
# One workload end to end
# --------------------------------------------------------------------------------------------- #


@dataclass
class Result(Paired):
    """One workload's times; ratios pair the two times of each round (:class:`harness.Paired`)."""

    peers: ClassVar[tuple[str, ...]] = PEERS
    workload: Workload
    times: dict[str, float]  # median seconds per call
    samples: dict[str, list[float]]
    notes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """The prepared pool's time / the fastest peer's."""
        return self.over_fastest("avgpool")

    @property
    def fn_ratio(self) -> float | None:
        """The plain function's time / the fastest peer's."""
        return self.over_fastest(FUNCTION)

    @property
    def fn_over_prepared(self) -> float | None:
        """The plain function's time / the prepared pool's (1.10 = 10% slower)."""
        return self.paired(FUNCTION, "avgpool")

    @property
    def literal_over_prepared(self) -> float | None:
        """The function called with literal lists: its time / the prepared pool's."""
        return self.paired(LITERAL, "avgpool")

    @property
    def copy_share(self) -> float:
        return self.times["copy"] / self.times["avgpool"]

    @property
    def input_bytes(self) -> int:
        return math.prod(self.workload.shape) * np.dtype(self.workload.dtype).itemsize


def run_workload(w: Workload, peers: list[str], rounds: int, budget_s: float) -> Result:
    x = make_input(w)
    x_ncx = to_ncx(w, x)
    mine = avgpool_runner(w, x)
    out_ncx = avgpool.output_shape(x_ncx.shape, **w.shape_attrs)
    runners, skipped = [mine, function_runner(w, x), literal_runner(w, x)], {}
    for peer in peers:
        try:
            runners.append(BUILDERS[peer](w, x_ncx, out_ncx))
        except Skip as why:
            skipped[peer] = str(why)
    runners.append(copy_runner(w, x, out_ncx))
    warnings = check_outputs(w, runners)
    samples = measure(runners, rounds, budget_s, together=("avgpool", FUNCTION, LITERAL))
    times = harness.medians(samples)
    notes = {r.name: r.note for r in runners if r.note}
    return Result(w, times, samples, notes, skipped, warnings)


# --------------------------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------------------------- #


# "avgpool" is the prepared pool with out=, "function" avgpool.average_pool(x, **attrs, out=out);
# ratio / fn ratio = each of them / the fastest peer; fn/prep = function / prepared
COLUMNS = [
    "workload",
    "avgpool",
    "function",
    "fn/prep",
    "lit/prep",
    *PEERS,
    "best peer",
    "ratio",
    "fn ratio",
    "copy",
    "copy share",
]
NAME_WIDTH = 50


def row(res: Result) -> list[str]:
    t = res.times
    return [
        res.workload.name,
        fmt_time(t["avgpool"]),
        fmt_time(t.get(FUNCTION)),
        fmt_ratio(res.fn_over_prepared),
        fmt_ratio(res.literal_over_prepared),
        *(fmt_time(t.get(p)) for p in PEERS),
        res.fastest or "-",
        fmt_ratio(res.ratio),
        fmt_ratio(res.fn_ratio),
        fmt_time(t["copy"]),
        f"{res.copy_share:.0%}",
    ]


def print_header() -> None:
    print(harness.console_row(COLUMNS, NAME_WIDTH, 12))


def print_row(res: Result) -> None:
    print(harness.console_row(row(res), NAME_WIDTH, 12), flush=True)
    for msg in res.warnings:
        print(f"    WARNING {msg}", flush=True)


def summarize(results: list[Result]) -> tuple[list[str], dict[str, Any]]:
    """Summary lines and the pass/fail of each target of perf-targets.md."""
    lines, summary = [], {"targets": {}}
    table = [r for r in results if r.workload.group == "table" and r.ratio is not None]
    every = [r for r in results if r.ratio is not None]
    # perf-targets.md's "every ratio" covers its own rows and the kernel series; the model nodes
    # have their own lines (issue 20) below
    targeted = [r for r in every if r.workload.group in ("table", "scaling")]

    def target(key: str, ok: bool | None, text: str) -> None:
        summary["targets"][key] = ok
        lines.append(verdict(ok, text))

    def name(r: Result) -> str:
        return r.workload.name

    if table:
        g = geomean([r.ratio for r in table])
        summary["geomean_ratio"] = g
        lines.append(f"geometric mean of avgpool/fastest-peer over {len(table)} workload rows: {g:.2f}")
    else:
        g = None

    # the prepared pool (out=) and the plain function, each against the fastest peer, per row group
    groups = (
        ("table", "table rows"),
        ("node", "model-node rows"),
        ("nhwc node", "NHWC model nodes"),
        ("scaling", "kernel-series rows"),
        (None, "rows in all"),
    )
    present = {r.workload.group for r in every}
    for kind, label in (("prepared", "prepared pool"), ("function", "function     ")):
        summary[kind] = {}
        value = (lambda r: r.ratio) if kind == "prepared" else (lambda r: r.fn_ratio)
        for group, text in groups:
            s = spread((r for r in every if group is None or r.workload.group == group), value)
            if s is None:
                continue
            summary[kind][group or "all"] = {
                "rows": len(s.rows),
                "geomean": s.geomean,
                "worst": s.worst,
                "worst_row": name(s.worst_row),
            }
            if not (group is None and len(present) == 1):  # "all" repeats the only group: no line
                lines.append(f"{label} / fastest peer, {len(s.rows):>2} {text:<18}: {s.text(name)}")
    # each way of calling the function against the prepared pool: same objects, literal lists
    calls = (
        ("fn_over_prepared", "function", "function / prepared"),
        ("literal_over_prepared", "literal", "function, literal lists / prepared"),
    )
    for key, _, text in calls:
        s = spread(results, lambda r: getattr(r, key))
        if s is None:
            continue
        nodes = spread((r for r in s.rows if r.workload.group == "node"), lambda r: getattr(r, key))
        n_nodes = 0 if nodes is None else len(nodes.rows)
        slow = s.over(1.10)
        summary[key] = {
            "geomean": s.geomean,
            "worst": s.worst,
            "worst_row": name(s.worst_row),
            "rows": len(s.rows),
            "within_10pct": len(s.rows) - len(slow),
            "over_10pct": [name(r) for r in slow],
            "nodes": n_nodes,
            "nodes_within_10pct": n_nodes - (0 if nodes is None else len(nodes.over(1.10))),
            "worst_node": None if nodes is None else nodes.worst,
            "worst_node_row": None if nodes is None else name(nodes.worst_row),
        }
        lines.append(
            f"{text}: geometric mean {s.geomean:.2f} over {len(s.rows)} rows, worst "
            f"{s.worst:.2f} ({name(s.worst_row)}); within 10%: {len(s.rows) - len(slow)}/{len(s.rows)} rows"
            + (f", {summary[key]['nodes_within_10pct']}/{n_nodes} model nodes" if nodes else "")
        )

    series = {r.workload.attrs["kernel_shape"][0]: r for r in results if r.workload.group == "scaling"}
    k31_k1 = {}
    if 1 in series and 31 in series:
        for name in ("avgpool", *PEERS):
            if name in series[1].times and name in series[31].times:
                k31_k1[name] = series[31].times[name] / series[1].times[name]
        lines.append("time at kernel 31 / time at kernel 1: " + ", ".join(f"{k} {v:.1f}x" for k, v in k31_k1.items()))
    summary["k31_over_k1"] = k31_k1

    lines.append("")
    worst = max(targeted, key=lambda r: r.ratio, default=None)
    target(
        "every_ratio",
        all(r.ratio <= 1.0 for r in targeted) if targeted else None,
        f"every ratio <= 1.0 ({len(targeted)} table rows and kernel series"
        + (f"; worst {worst.ratio:.2f} on {worst.workload.name})" if worst else ")"),
    )
    target(
        "geomean",
        None if g is None else g <= 0.7,
        "geometric mean of the ratios <= 0.7" + ("" if g is None else f" ({g:.2f})"),
    )
    k = k31_k1.get("avgpool")
    target(
        "flat_kernel", None if k is None else k <= 1.5, "avgpool k31/k1 <= 1.5" + ("" if k is None else f" ({k:.2f})")
    )
    large = [r for r in results if r.input_bytes >= LARGE_BYTES]
    low = [r for r in large if r.copy_share < 0.5]
    target(
        "copy_speed",
        all(r.copy_share >= 0.5 for r in large) if large else None,
        f"tensors >= 16 MiB reach >= 50% of copy speed ({len(large) - len(low)}/{len(large)}"
        + (f"; lowest {min(r.copy_share for r in large):.0%})" if large else ")"),
    )
    tiny = next((r for r in results if r.workload.name.startswith("tiny")), None)
    ok = None
    if tiny is not None and "onnxruntime" in tiny.times:
        ok = tiny.times["avgpool"] <= tiny.times["onnxruntime"]
    target(
        "tiny",
        ok,
        "tiny case <= onnxruntime IOBinding"
        + (f" ({fmt_time(tiny.times['avgpool'])} vs {fmt_time(tiny.times['onnxruntime'])})" if ok is not None else ""),
    )

    # issue 20: the model nodes and the plain function
    lines.append("")
    for key, name, text in calls:
        fp = summary.get(key)
        if fp is None:
            continue
        target(
            f"{name}_within_10pct_nodes",
            None if not fp["nodes"] else fp["nodes_within_10pct"] == fp["nodes"],
            f"{text} within 10% on every model node"
            + (
                f" ({fp['nodes_within_10pct']}/{fp['nodes']}; worst {fp['worst_node']:.2f} on {fp['worst_node_row']})"
                if fp["nodes"]
                else ""
            ),
        )
        target(
            f"{name}_within_10pct",
            not fp["over_10pct"],
            f"{text} within 10% on every row"
            f" ({fp['within_10pct']}/{fp['rows']}; worst {fp['worst']:.2f} on {fp['worst_row']})",
        )
    for kind in ("prepared", "function"):
        node_stats = summary[kind].get("node")
        target(
            f"{kind}_nodes_geomean",
            None if node_stats is None else node_stats["geomean"] <= 0.6,
            f"model nodes, {kind}: geometric mean of the ratios <= 0.6"
            + ("" if node_stats is None else f" ({node_stats['geomean']:.2f})"),
        )
        all_stats = summary[kind].get("all")
        target(
            f"{kind}_every_ratio",
            None if all_stats is None else all_stats["worst"] <= 1.0,
            f"{kind}: no row above 1.0 the fastest peer"
            + (
                ""
                if all_stats is None
                else f" (all {all_stats['rows']} rows; worst {all_stats['worst']:.2f} on {all_stats['worst_row']})"
            ),
        )
    return lines, summary


def environment() -> dict[str, Any]:
    """The versions, CPUs and threads the run reports (the markdown's first line, the JSON)."""
    return harness.environment(THREADS, ("onnxruntime", "openvino", "torch", "numba"))


def markdown_text(results: list[Result], summary_lines: list[str], env: dict[str, Any]) -> str:
    lines = [
        (
            f"Median time per call, {env['threads_per_runtime']} threads per runtime, "
            f"onnxruntime {env['onnxruntime']}, OpenVINO {env['openvino']}, torch {env['torch']}, "
            f"numpy {env['numpy']}, {env['cpus']} CPUs. "
            "avgpool = prepared AveragePool with out=, function = avgpool.average_pool(x, **attrs, out=out); "
            "ratio = avgpool / fastest peer, fn ratio = function / fastest peer, fn/prep = function / avgpool, "
            "each the median over rounds of the two times in one round; copy share = copy time / avgpool time."
        ),
        "",
        *markdown_table(COLUMNS, (row(r) for r in results)),
    ]
    lines += ["", "```", *summary_lines, "```", ""]
    return "\n".join(lines)


def short_markdown_text(results: list[Result]) -> str:
    """The README's table: the performance targets' workloads and kernels 1 and 31, fewer columns."""
    short = [r for r in results if r.workload.group == "table"]
    short += [r for r in results if r.workload.name in ("kernel scaling k1", "kernel scaling k31")]
    columns = ["workload", "avgpool", *PEERS, "ratio"]
    cells = ([r.workload.name, fmt_time(r.times["avgpool"]), *(fmt_time(r.times.get(p)) for p in PEERS)] for r in short)
    lines = markdown_table(columns, (c + [fmt_ratio(r.ratio)] for c, r in zip(cells, short)))
    ratios = [r.ratio for r in short if r.workload.group == "table" and r.ratio is not None]
    if ratios:
        lines += ["", f"Geometric mean of the ratios over the {len(ratios)} workload rows: {geomean(ratios):.2f}."]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, results: list[Result], summary_lines: list[str], env: dict[str, Any]) -> None:
    path.write_text(markdown_text(results, summary_lines, env))


def write_json(path: Path, results: list[Result], summary: dict[str, Any], env: dict[str, Any], args) -> None:
    data = {
        "environment": env,
        "settings": {"rounds": args.rounds, "batch_ms": args.batch_ms},
        "summary": summary,
        "results": [
            {
                "workload": dataclasses.asdict(r.workload),
                "median_s": r.times,
                "samples_s": r.samples,
                "best_peer": r.fastest,
                "ratio": r.ratio,
                "fn_ratio": r.fn_ratio,
                "fn_over_prepared": r.fn_over_prepared,
                "literal_over_prepared": r.literal_over_prepared,
                "copy_share": r.copy_share,
                "notes": r.notes,
                "skipped": r.skipped,
                "warnings": r.warnings,
            }
            for r in results
        ],
    }
    path.write_text(json.dumps(data, indent=1))


def plot_scaling(path: Path, results: list[Result]) -> bool:
    series = sorted(
        (r for r in results if r.workload.group == "scaling"), key=lambda r: r.workload.attrs["kernel_shape"][0]
    )
    if len(series) < 2:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no plot: matplotlib is not installed; {BENCH_EXTRA})")
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ("avgpool", *PEERS, "copy"):
        pts = [(r.workload.attrs["kernel_shape"][0], r.times[name]) for r in series if name in r.times]
        if pts:
            ks, ts = zip(*pts)
            ax.plot(
                ks,
                [t * 1e3 for t in ts],
                "o-" if name != "copy" else "--",
                label=name,
                linewidth=2.5 if name == "avgpool" else 1.2,
                color="gray" if name == "copy" else None,
            )
    shape = "x".join(map(str, series[0].workload.shape))
    ax.set(
        yscale="log",
        xlabel="kernel size k (k x k, stride 1, pads k//2)",
        ylabel="median time per call (ms)",
        title=f"AveragePool {shape} float32, {THREADS} threads",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------------------- #


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="3 rounds of ~5 ms batches (a smoke run)")
    p.add_argument("--only", metavar="SUBSTRING", help="only workloads whose name contains SUBSTRING")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated peers (default: {','.join(PEERS)})")
    p.add_argument("--rounds", type=int, help="timing rounds per workload (default 7, --quick 3)")
    p.add_argument("--batch-ms", type=float, help="minimum duration of one timed batch (default 20, --quick 5)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every result and sample as JSON")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the results table as markdown")
    p.add_argument(
        "--plot",
        metavar="PATH",
        default=str(HERE / "kernel_scaling.png"),
        help="PNG of time vs kernel size (default benchmarks/kernel_scaling.png; '' for none)",
    )
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.batch_ms = args.batch_ms or (5.0 if args.quick else 20.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        print(f"unknown peers {sorted(unknown)}; choose from {', '.join(PEERS)}", file=sys.stderr)
        return 2
    messages: list[str] = []
    selected = harness.select(workloads(messages), args.only)

    if not selected:
        for msg in messages:
            print(f"NOTE: {msg}", file=sys.stderr)
        print(f"no workload name contains {args.only!r}", file=sys.stderr)
        return 2
    env = environment()
    print(f"avgpool benchmark: {harness.describe(env)}; avgpool {source_state()}")
    for msg in messages:
        print(f"NOTE: {msg}")
    print(
        f"{args.rounds} rounds, batches >= {args.batch_ms:g} ms, {PAUSE_S * 1e3:g} ms pause between peers; "
        "times are medians per call; avgpool = prepared AveragePool with out=, function = "
        "avgpool.average_pool(x, **attrs, out=out); ratio = avgpool / fastest peer, "
        "fn ratio = function / fastest peer, "
        "fn/prep = function / avgpool (ratios: the median over rounds of the two times in one round); "
        "copy share = copy time / avgpool time\n"
    )
    harness.warn_if_loaded(end="\n\n")
    print_header()
    results, skipped_once, failed = [], set(), []
    for w in selected:
        try:
            res = run_workload(w, peers, args.rounds, args.batch_ms / 1e3)
        except Exception as err:  # noqa: BLE001 - report it and go on with the other workloads
            print(f"{w.name:<{NAME_WIDTH}}ERROR {type(err).__name__}: {err}", flush=True)
            failed.append(w.name)
            continue
        for peer, why in res.skipped.items():
            key = (peer, why)
            if key not in skipped_once:
                skipped_once.add(key)
                print(f"    ({peer} skipped: {why})")
        results.append(res)
        print_row(res)

    notes = {}
    for r in results:
        for name, note in r.notes.items():
            notes.setdefault(name, set()).add(note)
    print("\nnotes: " + "; ".join(f"{n}: {' | '.join(sorted(v))}" for n, v in notes.items()))
    for r in results:
        if r.workload.note:
            print(f"  {r.workload.name}: {r.workload.note}")
    summary_lines, summary = summarize(results)
    summary["model_node_messages"] = messages
    if failed:
        summary_lines.insert(0, f"ERROR: {len(failed)} workload(s) failed and are missing: {', '.join(failed)}")
    mismatched = [r.workload.name for r in results if r.warnings]
    if mismatched:
        summary_lines.insert(
            0,
            f"WARNING: a peer's output differs from avgpool's on {', '.join(mismatched)}: "
            "those times compare different computations",
        )
    print("\n" + "\n".join(summary_lines))

    if args.markdown:
        write_markdown(args.markdown, results, summary_lines, env)
        print(f"\nwrote {args.markdown}")
    if not args.only and peers == list(PEERS):
        settings = harness.run_settings(args.rounds, args.batch_ms, args.quick)
        harness.write_results(RESULTS, markdown_text(results, summary_lines, env), Path(__file__).name, settings)
        harness.write_results(SHORT_RESULTS, short_markdown_text(results), Path(__file__).name, settings)
        print(f"wrote {RESULTS.relative_to(HERE.parent)} and {SHORT_RESULTS.relative_to(HERE.parent)}")
    if args.json:
        write_json(args.json, results, summary, env, args)
        print(f"wrote {args.json}")
    if args.plot and plot_scaling(Path(args.plot), results):
        print(f"wrote {args.plot}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
