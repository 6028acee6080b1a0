#!/usr/bin/env python3
"""What each kind of first call compiles, and how long it takes: one new process per kind, with
an empty numba cache, counting numba's compile events (``numba.core.event``).

    python3 benchmarks/compile_times.py                   # every kind of avgpool.first_calls.KINDS
    python3 benchmarks/compile_times.py --kinds float32 float32-exact --functions
    python3 benchmarks/compile_times.py --families        # compile time per kernel family

It runs the avgpool that ``python -c "import avgpool"`` imports here (set PYTHONPATH to time
another checkout). Columns, per kind (one row each):

  wall        the process's wall time: start, ``import avgpool``, the kind's first call, exit
  cpu         the process's CPU time (user + system), compiling included
  compiled    functions numba compiled (one event per function and signature, nested or not)
  entries     the top-level compilations (the ones a call waits for; nested ones are inside)
  LLVM        seconds numba held its LLVM lock (optimising and emitting machine code)

``--functions`` lists each kind's compiled functions with their seconds (nested ones indented);
``--families`` prints one row per top-level kernel (a family: what one call waits for), the
seconds its first compilation took across the kinds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from avgpool.first_calls import KINDS  # noqa: E402  (only the names; the timed processes import avgpool)

#: Run in each process: a listener on numba's compile and LLVM events, the kind's first call, a
#: JSON line of what happened.
PROBE = r"""
import json, resource, sys, threading, time
from numba.core import event

calls, llvm = [], [0.0]


class Compiles(event.Listener):
    depth = 0

    def on_start(self, ev):
        ev.data["_start"] = time.perf_counter()
        func = ev.data["dispatcher"].py_func
        data = [str(a.dtype) for a in ev.data["args"] if hasattr(a, "dtype") and str(a.dtype) != "int64"]
        calls.append([Compiles.depth, f"{func.__module__}.{func.__qualname__}[{data[0] if data else ''}]", 0.0])
        ev.data["_row"] = calls[-1]
        Compiles.depth += 1

    def on_end(self, ev):
        Compiles.depth -= 1
        ev.data["_row"][2] = time.perf_counter() - ev.data["_start"]


class Llvm(event.Listener):
    def on_start(self, ev):
        self.start = time.perf_counter()

    def on_end(self, ev):
        llvm[0] += time.perf_counter() - self.start


event.register("numba:compile", Compiles())
event.register("numba:llvm_lock", Llvm())
import avgpool
avgpool.warmup([sys.argv[1]])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"calls": calls, "llvm": llvm[0], "cpu": usage.ru_utime + usage.ru_stime,
                  "threads": threading.active_count()}))
"""


def probe(kind: str, python: str) -> dict:
    """One new process's first call of ``kind`` with an empty cache: what it compiled."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, HOME=home, AVGPOOL_PRECOMPILED="0")
        import time

        start = time.perf_counter()
        done = subprocess.run(
            [python, "-c", PROBE, kind], env=env, check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["wall"] = time.perf_counter() - start
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS), metavar="KIND")
    parser.add_argument("--functions", action="store_true", help="list each kind's compiled functions")
    parser.add_argument("--families", action="store_true", help="one row per top-level kernel")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run (default: this one)")
    parser.add_argument("--json", metavar="PATH", help="write every probe's result as JSON")
    args = parser.parse_args(argv)
    results = {}
    print("| kind | wall | cpu | compiled | entries | LLVM |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds:
        r = results[kind] = probe(kind, args.python)
        tops = [c for c in r["calls"] if c[0] == 0]
        print(
            f"| {kind} | {r['wall']:.2f} s | {r['cpu']:.2f} s | {len(r['calls'])} | {len(tops)} | {r['llvm']:.2f} s |",
            flush=True,
        )
        if args.functions:
            for depth, name, seconds in r["calls"]:
                print(f"    {'  ' * depth}{name.removeprefix('avgpool.kernels.')} {seconds:.2f} s")
    if args.families:
        families: dict[str, float] = {}
        for r in results.values():
            for depth, name, seconds in r["calls"]:
                if depth == 0:
                    families.setdefault(name.removeprefix("avgpool.kernels."), seconds)
        print("\n| kernel family (top-level compile) | seconds (first kind that compiled it) |")
        print("|---|---|")
        for name, seconds in families.items():
            print(f"| {name} | {seconds:.2f} s |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
