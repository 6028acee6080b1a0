#!/usr/bin/env python3
"""Time avgpool.qlinear_average_pool against onnxruntime's QLinearAveragePool and PyTorch's
quantized avg_pool2d, interleaved, in one process.

    python benchmarks/bench_qlinear.py             # 7 rounds
    python benchmarks/bench_qlinear.py --rounds 3  # quicker
    python benchmarks/bench_qlinear.py --quick     # 3 rounds of ~5 ms batches: a smoke run
    python benchmarks/bench_qlinear.py --only global

Each workload runs in both layouts: NCHW (onnxruntime channels_last=0, torch contiguous) and NHWC
(avgpool channels_last=True, onnxruntime channels_last=1, torch channels_last memory format).
onnxruntime runs through IOBinding on preallocated buffers; 2 threads per runtime. Peers are
interleaved, the order rotated each round, with a 50 ms pause before each batch (onnxruntime's
workers spin for ~40 ms after a call and would slow whatever runs next on 2 cores). Printed: each
implementation's median per-call time and avgpool's ratio to the fastest peer of that layout
(< 1 is faster). avgpool's output is checked bit for bit against onnxruntime's; torch uses integer
arithmetic of its own, so only its largest difference is shown. At the end: per layout and for
both together, the geometric mean of avgpool / fastest peer and the worst row.

avgpool is timed as users call it, ``qlinear_average_pool(x, scales, zero points, kernel, ...)``
(a new output per call): avgpool has no prepared QLinearAveragePool object and no ``out=`` for it,
so there is no function / prepared ratio to report here (bench.py reports it for AveragePool).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass

import numpy as np
from bench import Runner, measure  # one timing method for every benchmark

from avgpool.qlinear import qlinear_average_pool

THREADS = 2
X_SCALE, X_ZP, Y_SCALE, Y_ZP = 0.05, 128, 0.05, 128


@dataclass(frozen=True)
class Workload:
    name: str
    shape: tuple[int, ...]  # NCHW
    kernel: int
    stride: int
    pad: int = 0


WORKLOADS = [
    Workload("uint8 QLinear densenet transition, batch 32 (32x128x56x56, 2x2 s2)", (32, 128, 56, 56), 2, 2),
    Workload("densenet121 2x2 s2 (1x128x56x56)", (1, 128, 56, 56), 2, 2),
    Workload("densenet121 global 7x7 (1x1024x7x7)", (1, 1024, 7, 7), 7, 7),
    Workload("resnet50 global 7x7 (1x2048x7x7)", (1, 2048, 7, 7), 7, 7),
    Workload("inception 3x3 s1 p1 (1x192x28x28)", (1, 192, 28, 28), 3, 1, 1),
    Workload("tiny 1x1x4x4 k2 (per-call overhead)", (1, 1, 4, 4), 2, 1),
]


def avgpool_runner(w: Workload, x: np.ndarray, nhwc: bool) -> Runner:
    kwargs = dict(strides=[w.stride] * 2, pads=[w.pad] * 4, channels_last=nhwc)
    kernel = [w.kernel] * 2
    box: list = [None]

    def call():
        box[0] = qlinear_average_pool(x, X_SCALE, X_ZP, Y_SCALE, Y_ZP, kernel, **kwargs)

    call()
    return Runner("avgpool", call, lambda: box[0])


def ort_runner(w: Workload, x: np.ndarray, nhwc: bool, out_shape: tuple[int, ...]) -> Runner:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = TensorProto.UINT8
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            kernel_shape=[w.kernel] * 2, strides=[w.stride] * 2, pads=[w.pad] * 4,
                            channels_last=int(nhwc))
    inputs = [helper.make_tensor_value_info("x", elem, list(x.shape)),
              helper.make_tensor_value_info("xs", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("xz", elem, []),
              helper.make_tensor_value_info("ys", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("yz", elem, [])]
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info("y", elem, list(out_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    y = np.empty(out_shape, np.uint8)
    feeds = {"x": x, "xs": np.array(X_SCALE, np.float32), "xz": np.array(X_ZP, np.uint8),
             "ys": np.array(Y_SCALE, np.float32), "yz": np.array(Y_ZP, np.uint8)}
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


def torch_runner(w: Workload, x: np.ndarray, nhwc: bool) -> Runner:
    import torch

    torch.set_num_threads(THREADS)
    try:
        from torch.ao.nn.quantized import functional as qf
    except ImportError:
        from torch.nn.quantized import functional as qf
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nhwc else x
    dequantized = torch.from_numpy((nchw.astype(np.float32) - X_ZP) * np.float32(X_SCALE))
    qx = torch.quantize_per_tensor(dequantized, X_SCALE, X_ZP, torch.quint8)
    if nhwc:
        qx = qx.contiguous(memory_format=torch.channels_last)
    box: list = [None]

    def call():
        box[0] = qf.avg_pool2d(qx, w.kernel, w.stride, w.pad, count_include_pad=False)

    call()

    def result():
        r = box[0].int_repr().numpy()
        return np.ascontiguousarray(r.transpose(0, 2, 3, 1)) if nhwc else r

    return Runner("torch", call, result, keep=(qx,))


def fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.3f} ms"
    return f"{seconds * 1e6:8.1f} us"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds of ~5 ms batches (a smoke run)")
    parser.add_argument("--rounds", type=int, help="timing rounds (default 7, --quick 3)")
    parser.add_argument("--budget", type=float,
                        help="seconds per timed batch (default 0.05, --quick 0.005)")
    parser.add_argument("--only", default="", help="only workloads whose name contains this")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.budget = args.budget or (0.005 if args.quick else 0.05)
    rng = np.random.default_rng(0)
    import numba
    print(f"threads: {THREADS} per runtime (numba {numba.get_num_threads()}); rounds {args.rounds}; "
          f"x_scale={X_SCALE} x_zp={X_ZP} y_scale={Y_SCALE} y_zp={Y_ZP}")
    print("avgpool = qlinear_average_pool(...) called as users call it (no prepared QLinear object exists, "
          "so no function / prepared ratio)")
    ratios: dict[str, list[tuple[float, str]]] = {"NCHW": [], "NHWC": []}
    differs = []
    for w in WORKLOADS:
        if args.only and args.only not in w.name:
            continue
        x_nchw = rng.integers(0, 256, w.shape, dtype=np.uint8)
        for nhwc in (False, True):
            x = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)) if nhwc else x_nchw
            runners = [avgpool_runner(w, x, nhwc)]
            out_shape = runners[0].result().shape
            notes = []
            for make in (lambda: ort_runner(w, x, nhwc, out_shape), lambda: torch_runner(w, x, nhwc)):
                try:
                    runners.append(make())
                except Exception as err:  # noqa: BLE001 - a missing or failing peer is reported, not fatal
                    notes.append(f"peer skipped: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
            ours = runners[0].result()
            for r in runners[1:]:
                theirs = r.result()
                if r.name == "onnxruntime":
                    same = theirs.shape == ours.shape and np.array_equal(theirs, ours)
                    notes.append("bit-exact with onnxruntime" if same else "DIFFERS FROM ONNXRUNTIME")
                    if not same:
                        differs.append(f"{w.name} [{'NHWC' if nhwc else 'NCHW'}]")
                elif theirs.shape == ours.shape:
                    diff = int(np.abs(theirs.astype(np.int16) - ours.astype(np.int16)).max())
                    notes.append(f"torch max |diff| {diff}")
            medians = {name: statistics.median(samples)
                       for name, samples in measure(runners, args.rounds, args.budget).items()}
            peers = {k: v for k, v in medians.items() if k != "avgpool"}
            print(f"\n{w.name} [{'NHWC' if nhwc else 'NCHW'}]")
            for name, t in medians.items():
                print(f"  {name:12s} {fmt(t)}")
            if peers:
                fastest = min(peers, key=peers.get)
                ratio = medians["avgpool"] / peers[fastest]
                ratios["NHWC" if nhwc else "NCHW"].append((ratio, f"{w.name} [{'NHWC' if nhwc else 'NCHW'}]"))
                print(f"  avgpool / fastest peer ({fastest}): {ratio:.2f}")
            for note in notes:
                print(f"  ({note})")
    print()
    both = ratios["NCHW"] + ratios["NHWC"]
    for label, rows in (("channels-first (NCHW)", ratios["NCHW"]), ("channels_last (NHWC)", ratios["NHWC"]),
                        ("both layouts", both)):
        if not rows:
            continue
        gm = math.exp(sum(math.log(r) for r, _ in rows) / len(rows))
        worst, name = max(rows)
        above = sum(r > 1.0 for r, _ in rows)
        print(f"avgpool / fastest peer, {label:<21} {len(rows):>2} rows: geometric mean {gm:.2f}, "
              f"worst {worst:.2f} ({name}); {above} above 1.0")
    if both:
        print(f"worst ratio avgpool / fastest peer: {max(both)[0]:.2f}")
    if differs:
        print(f"WARNING: avgpool differs from onnxruntime on {', '.join(differs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
