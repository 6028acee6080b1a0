#!/usr/bin/env python3
"""What each first call compiles: the number of kernels and the seconds numba spends on them.

    .venv/bin/python benchmarks/compile_times.py                      # every kind of avgpool._warmup.KINDS
    .venv/bin/python benchmarks/compile_times.py --kinds float32 float64 --top 5

Each kind runs in a new process with an empty numba cache (``NUMBA_CACHE_DIR`` a new folder), so
everything it needs is compiled; numba's event API (``numba:compile``) reports every compilation,
nested ones included. For each kind the table gives the kernels compiled (one per function and
signature), the seconds of the outermost compilations (what the call waited for), the process's
wall time, and the kernels that took longest on their own (their time less their callees').
``benchmarks/cold_start.py`` times the same first calls from a fresh non-editable install.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: Run in the child: the kind's first call with a listener on numba's compile events; prints JSON.
CHILD = r"""
import json, sys, time
from numba.core import event

records, stack = [], []

class Listener(event.Listener):
    def on_start(self, ev):
        stack.append([ev.data["dispatcher"].py_func.__qualname__.replace("<locals>.", ""), time.perf_counter(), 0.0])

    def on_end(self, ev):
        name, start, inner = stack.pop()
        took = time.perf_counter() - start
        if stack:
            stack[-1][2] += took
        records.append((name, took, took - inner, len(stack)))

event.register("numba:compile", Listener())
import avgpool
made = {}
for kind in sys.argv[1:]:
    start = time.perf_counter()
    avgpool.warmup([kind])
    made[kind] = [records[:], time.perf_counter() - start]
    records.clear()
print(json.dumps(made))
"""


def compile_records(kinds: list[str]) -> list[dict]:
    """The compilations of each kind's first call, made one after the other in a new process
    with an empty cache (a kernel that one kind compiled is loaded by the next)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *kinds], env=env, check=True, capture_output=True, text=True
        )
    made = json.loads(done.stdout.strip().splitlines()[-1])
    return [_record(kind, *made[kind]) for kind in kinds]


def compile_record(kind: str) -> dict:
    """The compilations of ``kind``'s first call in a new process with an empty cache, and the
    process's wall time."""
    start = time.perf_counter()
    (record,) = compile_records([kind])
    return record | {"wall": time.perf_counter() - start}


def _record(kind: str, records: list, seconds: float) -> dict:
    own = [r for r in records if r[0].split(".")[0] not in ("ol_max", "ol_min", "ol_np_empty", "_ol_array_allocate")]
    return {
        "kind": kind,
        "kernels": len(own),
        "seconds": sum(r[1] for r in records if r[3] == 0),
        "call": seconds,
        "slowest": sorted(((r[2], r[0]) for r in own), reverse=True),
    }


def main(argv: list[str] | None = None) -> int:
    from avgpool._warmup import KINDS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS), metavar="KIND")
    parser.add_argument("--top", type=int, default=3, help="slowest kernels listed per kind (default 3)")
    args = parser.parse_args(argv)
    print("| kind | kernels compiled | compile s | process s | slowest kernels (own s) |")
    print("|---|---|---|---|---|")
    for kind in args.kinds:
        row = compile_record(kind)
        slowest = ", ".join(f"{name} {took:.1f}" for took, name in row["slowest"][: args.top])
        print(f"| {kind} | {row['kernels']} | {row['seconds']:.1f} | {row['wall']:.1f} | {slowest} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
