#!/usr/bin/env python3
"""The first call as a new user meets it: a fresh, non-editable install, empty caches.

    python3 benchmarks/cold_start.py                 # every kind of avgpool._warmup.KINDS, 3 runs each
    python3 benchmarks/cold_start.py --runs 1 --kinds float32 qlinear-uint8
    python3 benchmarks/cold_start.py --together      # every kind in one cold process (avgpool warmup)

It creates a virtual environment in a temporary folder, installs this checkout into it with pip
(not editable: the package is built and copied, as a user gets it), and then, for each kind, runs
a new process (``import avgpool`` + the kind's first call) with an empty numba cache
(``NUMBA_CACHE_DIR`` a new empty folder, ``HOME`` an empty folder) and times its whole wall time:
"cold", and the CPU seconds it used (its threads', summed: compiling hidden in a background
thread would show here). A second process then runs the same call with the cache the first one
left: "warm". Prints a Markdown table of the medians (min-max) of ``--runs`` runs.
``--together`` instead runs every kind one after the other in one cold process, as
``avgpool warmup`` does, and prints the seconds each kind added and the total.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from avgpool._warmup import KINDS  # noqa: E402  (only the names; the timed processes import the install)

CALL = "import avgpool; avgpool.warmup([{kind!r}])"


def install(where: Path) -> Path:
    """A new venv at ``where`` with this checkout installed non-editable; its python."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)], check=True
    )
    return python


def timed(python: Path, code: str, env: dict[str, str], output: int | None = subprocess.DEVNULL) -> tuple:
    """The wall and CPU seconds of a new process running ``code``, and its standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [str(python), "-c", code],
        env=env,
        check=True,
        cwd=tempfile.gettempdir(),
        stdout=output,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stdout


def measure(python: Path, kind: str, runs: int) -> tuple[list[float], list[float], list[float]]:
    cold, cpu, warm = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache, HOME=home)
            wall, used, _ = timed(python, CALL.format(kind=kind), env)
            cold.append(wall)
            cpu.append(used)
            warm.append(timed(python, CALL.format(kind=kind), env)[0])
    return cold, cpu, warm


#: Every kind in one process, each kind's seconds printed as it ends.
TOGETHER = "import avgpool; avgpool.warmup({kinds!r}, report=lambda kind, s: print(kind, s, flush=True))"


def together(python: Path, kinds: list[str]) -> None:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, HOME=home)
        wall, cpu, output = timed(python, TOGETHER.format(kinds=kinds), env, subprocess.PIPE)
    print("| kind | seconds it added |")
    print("|---|---|")
    for line in output.splitlines():
        kind, seconds = line.rsplit(" ", 1)
        print(f"| {kind} | {float(seconds):.2f} s |")
    print(f"\nall {len(kinds)} kinds in one cold process: {wall:.1f} s wall, {cpu:.1f} s CPU")


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per kind (default 3)")
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=list(KINDS),
        choices=list(KINDS),
        metavar="KIND",
        help="kinds to time (default: all)",
    )
    parser.add_argument("--together", action="store_true", help="every kind in one cold process (avgpool warmup)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        python = install(Path(work) / "venv")
        print(f"installed into a fresh venv in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        if args.together:
            together(python, args.kinds)
            return 0
        print("| kind | cold: fresh install, empty cache | its CPU | warm: second process |")
        print("|---|---|---|---|")
        worst_cold = worst_cpu = worst_warm = 0.0
        for kind in args.kinds:
            cold, cpu, warm = measure(python, kind, args.runs)
            worst_cold, worst_cpu, worst_warm = max(worst_cold, *cold), max(worst_cpu, *cpu), max(worst_warm, *warm)
            print(f"| {kind} | {cell(cold)} | {cell(cpu)} | {cell(warm)} |", flush=True)
        print(
            f"\nworst cold {worst_cold:.2f} s ({worst_cpu:.2f} s CPU), worst warm {worst_warm:.2f} s", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
