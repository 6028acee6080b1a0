#!/usr/bin/env python3
"""Time avgpool.torch against torch.nn.functional on CPU tensors, interleaved in one process
(harness.measure), and check every output against torch's.

    python benchmarks/bench_torch.py              # every row, 7 rounds of >= 50 ms batches
    python benchmarks/bench_torch.py --quick      # 3 rounds of ~5 ms batches: a smoke run
    python benchmarks/bench_torch.py --only adaptive

Rows (float32, contiguous NCHW tensors; 2 threads for torch, avgpool's own on the 2 cores):

  adaptive   ``adaptive_avg_pool2d`` on the issue's workloads: a classifier head (1x2048x7x7 -> 1),
             a pyramid pooling module (1x512x60x60 -> 1, 2, 3, 6), 32x256x28x28 -> 7 and the
             12 -> 7 case (windows that overlap, by avgpool's per-window tables);
  pool       ``avg_pool2d`` on bench.py's 2-D workloads (ONNX attributes as torch's: pads as
             ``padding``, ``count_include_pad`` as the row has it);
  backward   the backward pass alone (``torch.autograd.grad`` of a kept graph with a fixed
             gradient) of three rows.

Columns: avgpool and torch (median seconds per call, a new output tensor per call), ratio =
avgpool / torch paired by round (harness.paired_ratio; below 1 avgpool is faster), and the
largest difference from torch's output. The summary says PASS/FAIL for the issue's targets: every
adaptive row and every pool row at most 1.0x torch, backward at most 1.0x on three rows.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
from harness import Runner, fmt_ratio, fmt_time, markdown_table, verdict

THREADS = 2


@dataclass
class Row:
    name: str
    group: str  # adaptive, pool, backward
    shape: tuple[int, ...]
    args: dict[str, Any]  # the function's arguments after the input
    function: str  # the name in torch.nn.functional and avgpool.torch
    times: dict[str, float] = field(default_factory=dict)
    ratio: float | None = None
    difference: float | None = None


def rows() -> list[Row]:
    adaptive = [
        ("resnet head 2048x7x7 -> 1", (1, 2048, 7, 7), 1),
        ("pyramid 512x60x60 -> 1", (1, 512, 60, 60), 1),
        ("pyramid 512x60x60 -> 2", (1, 512, 60, 60), 2),
        ("pyramid 512x60x60 -> 3", (1, 512, 60, 60), 3),
        ("pyramid 512x60x60 -> 6", (1, 512, 60, 60), 6),
        ("b32 256x28x28 -> 7", (32, 256, 28, 28), 7),
        ("512x12x12 -> 7 (overlapping)", (1, 512, 12, 12), 7),
    ]
    pools = [
        ("densenet121 2x2 s2", (1, 128, 56, 56), dict(kernel_size=2, stride=2)),
        ("densenet121 global 7x7", (1, 1024, 7, 7), dict(kernel_size=7)),
        ("inception_v2 3x3 s1 p1", (1, 192, 28, 28), dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)),
        ("resnet50 global 7x7", (1, 2048, 7, 7), dict(kernel_size=7)),
        ("shufflenet 3x3 s2 p1", (1, 24, 56, 56), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
        ("squeezenet global 13x13", (1, 1000, 13, 13), dict(kernel_size=13)),
        ("densenet transition b32", (32, 128, 56, 56), dict(kernel_size=2, stride=2)),
        ("inception 3x3 s1 p1 b32", (32, 192, 28, 28), dict(kernel_size=3, stride=1, padding=1)),
        ("large kernel k15 p7", (1, 16, 512, 512), dict(kernel_size=15, stride=1, padding=7)),
        ("tiny 1x1x4x4 k2", (1, 1, 4, 4), dict(kernel_size=2, stride=1)),
    ]
    found = [Row(n, "adaptive", s, dict(output_size=o), "adaptive_avg_pool2d") for n, s, o in adaptive]
    found += [Row(n, "pool", s, a, "avg_pool2d") for n, s, a in pools]
    found += [
        Row("backward b32 256x28x28 -> 7", "backward", (32, 256, 28, 28), dict(output_size=7), "adaptive_avg_pool2d"),
        Row("backward 512x12x12 -> 7", "backward", (1, 512, 12, 12), dict(output_size=7), "adaptive_avg_pool2d"),
        Row(
            "backward densenet transition b32",
            "backward",
            (32, 128, 56, 56),
            dict(kernel_size=2, stride=2),
            "avg_pool2d",
        ),
        Row(
            "backward inception 3x3 s1 p1 b32",
            "backward",
            (32, 192, 28, 28),
            dict(kernel_size=3, stride=1, padding=1),
            "avg_pool2d",
        ),
        Row(
            "backward shufflenet 3x3 s2 p1",
            "backward",
            (1, 24, 56, 56),
            dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
            "avg_pool2d",
        ),
    ]
    return found


def runners(row: Row) -> list[Runner]:
    import torch

    import avgpool.torch

    x = torch.from_numpy(harness.np.random.default_rng(0).standard_normal(row.shape, dtype=harness.np.float32))
    ours, theirs = getattr(avgpool.torch, row.function), getattr(torch.nn.functional, row.function)
    if row.group != "backward":
        last: dict[str, Any] = {}

        def make(name: str, f: Any) -> Runner:
            def call() -> None:
                last[name] = f(x, **row.args)

            return Runner(name, call, lambda: last[name])

        return [make("avgpool", ours), make("torch", theirs)]
    made = []
    for name, f in (("avgpool", ours), ("torch", theirs)):
        leaf = x.clone().requires_grad_()
        y = f(leaf, **row.args)
        g = torch.ones_like(y) / 3
        box: dict[str, Any] = {}

        def call(y=y, leaf=leaf, g=g, box=box) -> None:
            box["grad"] = torch.autograd.grad(y, leaf, g, retain_graph=True)[0]

        made.append(Runner(name, call, lambda box=box: box["grad"]))
    return made


def run(row: Row, rounds: int, budget_s: float) -> None:
    found = runners(row)
    samples = harness.measure(found, rounds, budget_s)
    row.times = harness.medians(samples)
    row.ratio = harness.paired_ratio(samples["avgpool"], samples["torch"])
    ours, theirs = (r.result() for r in found)
    row.difference = float((ours.double() - theirs.double()).abs().max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads for each (numba's for avgpool)")
    parser.add_argument("--markdown", type=Path, help="write the table here (benchmarks/results/bench_torch.md)")
    args = parser.parse_args(argv)
    rounds, batch_ms = (3, 5.0) if args.quick else (args.rounds, args.batch_ms)

    import numba
    import torch

    torch.set_num_threads(args.threads)
    numba.set_num_threads(args.threads)
    harness.warn_if_loaded()
    env = harness.environment(args.threads, ("torch", "numba"))
    print(harness.describe(env))
    table = []
    chosen = harness.select(rows(), args.only)
    for row in chosen:
        run(row, rounds, batch_ms / 1000)
        cells = [
            row.name,
            row.group,
            fmt_time(row.times["avgpool"]),
            fmt_time(row.times["torch"]),
            fmt_ratio(row.ratio),
            f"{row.difference:.1e}",
        ]
        table.append(cells)
        print(" | ".join(cells), flush=True)
    summary = []
    for group, text, needed in (
        ("adaptive", "adaptive_avg_pool2d at most 1.0x torch on every row", None),
        ("pool", "avg_pool2d at most 1.0x torch on every row", None),
        ("backward", "backward at most 1.0x torch on three rows", 3),
    ):
        measured = [r for r in chosen if r.group == group]
        if not measured:
            summary.append(verdict(None, text))
            continue
        within = [r for r in measured if r.ratio <= 1.0]
        ok = len(within) >= needed if needed else len(within) == len(measured)
        worst = max(measured, key=lambda r: r.ratio)
        summary.append(verdict(ok, f"{text}: {len(within)} of {len(measured)}, worst {worst.ratio:.2f} ({worst.name})"))
    print("\n".join(summary))
    if args.markdown:
        lines = [
            f"Median time per call, {args.threads} threads each, float32 CPU tensors ({harness.describe(env)}).",
            "",
            *markdown_table(["row", "group", "avgpool", "torch", "ratio", "max diff"], table),
            "",
            *(f"- {line}" for line in summary),
        ]
        harness.write_results(
            args.markdown, "\n".join(lines) + "\n", "bench_torch.py", harness.run_settings(rounds, batch_ms, args.quick)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
