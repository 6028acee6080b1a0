#!/usr/bin/env python3
"""The first call as a new user meets it: a fresh, non-editable install, empty caches.

    python3 benchmarks/cold_start.py                 # every kind of avgpool._warmup.KINDS, 3 runs each
    python3 benchmarks/cold_start.py --runs 1 --kinds float32 qlinear-uint8

It creates a virtual environment in a temporary folder, installs this checkout into it with pip
(not editable: the package is built and copied, as a user gets it), and then, for each kind, runs
a new process (``import avgpool`` + the kind's first call) with an empty numba cache
(``NUMBA_CACHE_DIR`` a new empty folder, ``HOME`` an empty folder) and times its whole wall time:
"cold". A second process then runs the same call with the cache the first one left: "warm".
Prints a Markdown table of the medians (min-max) of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import os
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


def timed(python: Path, kind: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [str(python), "-c", CALL.format(kind=kind)],
        env=env,
        check=True,
        cwd=tempfile.gettempdir(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def measure(python: Path, kind: str, runs: int) -> tuple[list[float], list[float]]:
    cold, warm = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache, HOME=home)
            cold.append(timed(python, kind, env))
            warm.append(timed(python, kind, env))
    return cold, warm


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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        python = install(Path(work) / "venv")
        print(f"installed into a fresh venv in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        print("| kind | cold: fresh install, empty cache | warm: second process |")
        print("|---|---|---|")
        worst_cold = worst_warm = 0.0
        for kind in args.kinds:
            cold, warm = measure(python, kind, args.runs)
            worst_cold, worst_warm = max(worst_cold, max(cold)), max(worst_warm, max(warm))
            print(f"| {kind} | {cell(cold)} | {cell(warm)} |", flush=True)
        print(f"\nworst cold {worst_cold:.2f} s, worst warm {worst_warm:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
