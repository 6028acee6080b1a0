"""Single calls of the prepared pool on the real-model nodes, serial and shared between threads,
alone in the process: percentiles of each call's time, with no other runtime around.

bench.py times batches interleaved with onnxruntime, OpenVINO and torch, pausing 50 ms before each
batch; on the 2-core virtual machine the same small-plane calls there measure up to 1.5x what they
take alone. This shows what a call costs by itself, and what the helper threads gain on it::

    python benchmarks/single_calls.py                 # every model node, 3000 calls per mode
    python benchmarks/single_calls.py --only "28x28" --calls 1000   # case-insensitive substring

Each node is timed serial (Tuning.parallel_min_elements out of reach), then as the engine
chooses (threaded where it shares the call), twice each in turn; the columns are the 5th, 25th,
50th, 75th and 95th percentiles in microseconds.
"""

from __future__ import annotations

import argparse
import sys

import harness
import numpy as np
from model_nodes import model_nodes

import avgpool
from avgpool._core import tuning

PERCENTILES = (5, 25, 50, 75, 95)


def percentiles(pool: avgpool.AveragePool, x: np.ndarray, out: np.ndarray, calls: int) -> np.ndarray:
    """Microseconds of ``calls`` single calls of ``pool(x, out)`` (after one untimed), at PERCENTILES."""
    return np.percentile(harness.call_times_ns(pool, calls, (x, out)), PERCENTILES) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only nodes whose label contains this text (case-insensitive)")
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per mode (default 3000)")
    args = parser.parse_args(argv)
    nodes, messages = model_nodes()
    for message in messages:
        print(message, file=sys.stderr)
    print(f"# {harness.describe(harness.environment(None, ('numba',)))}; avgpool {harness.source_state()}")
    harness.warn_if_loaded()
    print(f"{'node':<50} {'mode':<8} " + " ".join(f"p{p:<5}" for p in PERCENTILES) + " (us)")
    for node in harness.select(nodes, args.only, lambda n: n.label):
        x = np.random.default_rng(0).standard_normal(node.shape, dtype=np.float32)
        pool = avgpool.AveragePool(**node.attrs)
        out = pool(x)
        for mode in ("serial", "threads", "serial", "threads"):
            changes = {"parallel_min_elements": 1 << 62} if mode == "serial" else {}
            with tuning.tuned(**changes):
                row = percentiles(pool, x, out, args.calls)
            print(f"{node.label:<50} {mode:<8} " + " ".join(f"{v:6.1f}" for v in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
