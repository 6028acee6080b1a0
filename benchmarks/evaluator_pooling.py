"""How much faster onnx's ReferenceEvaluator runs the pooling nodes of real models with avgpool.

For every AveragePool / GlobalAveragePool node of the "light" models shipped with onnx, the node's
real input (from one run of the model on the backend runner's ramp input) is fed to a one-node
model, run by ``ReferenceEvaluator`` with its built-in ops and with ``avgpool.onnx``'s; the best of
``--repeat`` runs is kept. Also checks that both give the same result (to float32 rounding; onnx's
own implementation is exact on these nodes, none hits a case it gets wrong).

    python benchmarks/evaluator_pooling.py [--repeat 5] [--models resnet50,shufflenet] [--whole]

``--whole`` also times each whole model once with each op set.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import avgpool.onnx as avgpool_onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ("densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet")
POOL_OPS = ("AveragePool", "GlobalAveragePool")


def best_of(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def one_node(node, x: np.ndarray, opset: int):
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--whole", action="store_true", help="also time each whole model once")
    args = parser.parse_args()
    print(f"onnx {onnx.__version__}, numpy {np.__version__}, {os.cpu_count()} cpus; best of {args.repeat}")
    print(f"{'model':<14}{'nodes':>6}{'input MB':>10}{'onnx.reference ms':>19}{'avgpool ms':>12}{'speed-up':>10}")
    total_ref = total_avg = 0.0
    for name in args.models.split(","):
        model = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
        opset = avgpool_onnx.model_opset(model)
        feeds = {s.name: avgpool_onnx.generate_input(s, kind="ramp") for s in avgpool_onnx.model_inputs(model)}
        results = avgpool_onnx.make_evaluator(model).run(None, feeds, intermediate=True)
        ref_ms = avg_ms = megabytes = 0.0
        nodes = [n for n in model.graph.node if n.op_type in POOL_OPS]
        for node in nodes:
            x = results[node.input[0]]
            megabytes += x.nbytes / 2**20
            single = one_node(node, x, opset)
            builtin, ours = ReferenceEvaluator(single), avgpool_onnx.make_evaluator(single)
            y_ref, y_avg = builtin.run(None, {node.input[0]: x})[0], ours.run(None, {node.input[0]: x})[0]
            np.testing.assert_allclose(y_avg, y_ref, rtol=1e-5, atol=1e-6)
            ref_ms += 1e3 * best_of(lambda: builtin.run(None, {node.input[0]: x}), args.repeat)
            avg_ms += 1e3 * best_of(lambda: ours.run(None, {node.input[0]: x}), args.repeat)
        total_ref += ref_ms
        total_avg += avg_ms
        print(f"{name:<14}{len(nodes):>6}{megabytes:>10.2f}{ref_ms:>19.2f}{avg_ms:>12.2f}{ref_ms / avg_ms:>9.1f}x")
        if args.whole:
            whole_ref = best_of(lambda: ReferenceEvaluator(model).run(None, feeds), 1)
            whole_avg = best_of(lambda: avgpool_onnx.make_evaluator(model).run(None, feeds), 1)
            print(f"{'':<14}whole model: onnx.reference {whole_ref:.2f} s, with avgpool {whole_avg:.2f} s")
    print(f"{'all':<14}{'':>6}{'':>10}{total_ref:>19.2f}{total_avg:>12.2f}{total_ref / total_avg:>9.1f}x")


if __name__ == "__main__":
    main()
