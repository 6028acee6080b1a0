#!/usr/bin/env python3
"""Set up a local virtual environment and run avgpool's main job or its tests.

    python3 run.py demo     # the worked examples of the ONNX spec, computed by avgpool
    python3 run.py test     # the whole test suite, in the pinned environment
    python3 run.py bench    # the benchmark against the peers (slow; needs the bench extra)
    python3 run.py avgpool ARGS...   # any avgpool command

    python3 run.py test --latest        # the suite on the newest releases pyproject.toml allows
    python3 run.py test --lowest-numba  # the suite on the lowest numba pyproject.toml allows
    python3 run.py lock     # pin the newest releases pyproject.toml allows into constraints.txt

Needs only Python >= 3.11 with pip and venv. ``demo``, ``test``, ``bench`` and ``avgpool`` use
``.venv``, installed from the exact versions in ``constraints.txt`` (every direct and indirect
dependency, as the suite last passed with them): a fresh clone next month installs what CI
passed with, and an existing ``.venv`` made from other pins is brought to these. ``--latest``
and ``--lowest-numba`` use their own environments (``.venv-latest``, ``.venv-lowest-numba``),
resolved anew on every run, so drift in the dependencies is found on purpose, not by a fresh
clone's red CI. ``lock`` is how the pins are updated: run it, then ``python3 run.py test``, and
commit constraints.txt when the suite passes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PYPROJECT = ROOT / "pyproject.toml"
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = {"demo": "", "avgpool": "", "test": "test", "bench": "bench"}
#: Resolving the dependencies: "locked" installs constraints.txt's versions; "latest" the newest
#: the package's own ranges allow; "lowest-numba" the lowest numba of its range, the rest resolved
#: around it (an older numba caps numpy, so the locked numpy may not fit it).
MODES = {"locked": ".venv", "latest": ".venv-latest", "lowest-numba": ".venv-lowest-numba"}


class Environment:
    """A virtual environment under ROOT and how its packages are resolved."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.path = ROOT / MODES[mode]
        bin_dir = self.path / ("Scripts" if os.name == "nt" else "bin")
        self.python = bin_dir / ("python.exe" if os.name == "nt" else "python")

    def ensure(self, extra: str) -> None:
        """Create the environment and install avgpool (editable) with ``extra`` into it: once per
        change of pyproject.toml or constraints.txt for the pinned one, every run for the others."""
        if not self.python.exists():
            print(f"run.py: creating {self.path} ...", flush=True)
            venv.EnvBuilder(with_pip=True).create(self.path)
        inputs = PYPROJECT.read_bytes() + (CONSTRAINTS.read_bytes() if self.mode == "locked" else b"")
        stamp = self.path / f".installed-{extra or 'base'}-{hashlib.sha256(inputs).hexdigest()[:16]}"
        if stamp.exists() and self.mode == "locked":
            return
        target = f"{ROOT}[{extra}]" if extra else str(ROOT)
        print(
            f"run.py: installing avgpool{f'[{extra}]' if extra else ''} into {self.path} ({self.mode}) ...", flush=True
        )
        self.pip("install", *self._resolution(), "-e", target)
        if self.mode == "locked":
            self._match_pins()
        else:
            self._report_drift()
        compile_packages(self.python)
        for old in self.path.glob(f".installed-{extra or 'base'}-*"):
            old.unlink()
        stamp.touch()

    def pip(self, *args: str) -> None:
        # --no-compile, then compile_packages(): pip byte-compiles one file at a time, the packages'
        # own test folders too (numba's alone is thousands of files)
        quiet = ["--quiet", "--disable-pip-version-check", "--no-compile"] if args[0] == "install" else []
        subprocess.run([str(self.python), "-m", "pip", args[0], *quiet, *args[1:]], check=True)

    def _resolution(self) -> list[str]:
        if self.mode == "locked":
            return ["--constraint", str(CONSTRAINTS)]
        if self.mode == "latest":
            return ["--upgrade", "--upgrade-strategy", "eager"]
        return ["--upgrade", "--upgrade-strategy", "eager", f"numba=={lowest_allowed('numba')}"]

    def installed(self) -> dict[str, str]:
        """{normalised name: version} of every distribution in the environment but avgpool, each
        version without its local label (torch's "+cpu" names a build: "==2.13.0" matches it)."""
        listing = subprocess.run(
            [str(self.python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        found = {normalise(entry["name"]): entry["version"].split("+", 1)[0] for entry in json.loads(listing)}
        for name in ("avgpool", "pip", "setuptools", "wheel"):
            found.pop(name, None)
        return found

    def _match_pins(self) -> None:
        """Bring every installed package that constraints.txt pins to its pinned version: pip
        resolves only what the requested extras need, and a .venv made from older pins keeps
        versions of packages the new resolution did not touch."""
        pins = read_pins(CONSTRAINTS)
        stale = [
            f"{name}=={pins[name]}" for name, version in self.installed().items() if pins.get(name, version) != version
        ]
        if stale:
            print(f"run.py: bringing {len(stale)} packages to constraints.txt: {' '.join(stale)}", flush=True)
            self.pip("install", "--no-deps", *stale)

    def _report_drift(self) -> None:
        pins = read_pins(CONSTRAINTS)
        moved = [
            f"{name} {pins[name]} -> {version}"
            for name, version in sorted(self.installed().items())
            if name in pins and pins[name] != version
        ]
        added = sorted(set(self.installed()) - set(pins))
        print(f"run.py: {self.mode}: {len(moved)} packages differ from constraints.txt", flush=True)
        for line in moved:
            print(f"  {line}")
        if added:
            print(f"  not in constraints.txt: {', '.join(added)}")


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """{normalised name: version} of the ``name==version`` lines of a constraints file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[normalise(name.split("[", 1)[0])] = version.split(";", 1)[0].strip()
    return pins


def lowest_allowed(package: str) -> str:
    """The lower bound of ``package``'s ``>=`` range in pyproject.toml's dependencies."""
    for requirement in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]:
        match = re.fullmatch(rf"{package}\s*>=\s*([\w.]+)(,.*)?", requirement.strip())
        if match:
            return match.group(1)
    raise SystemExit(f"run.py: pyproject.toml gives {package} no '>=' lower bound")


def compile_packages(python: Path) -> None:
    """Byte-compile the environment's packages once, on every core, leaving out their test folders.

    Python writes a module's .pyc when it first imports it, unless PYTHONDONTWRITEBYTECODE is set
    (as it is on some CI machines and containers): then every process compiles numba, numpy, onnx
    and dask from source again, 2.8 s an import of avgpool instead of 0.9 on the 2-core machine,
    and the test suite starts dozens of processes. compileall writes the .pyc files either way
    (8 s on two cores).
    """
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [str(python), "-m", "compileall", "-q", "-j", "0", "-x", r"[/\\]tests?[/\\]", purelib, str(ROOT / "src")],
        check=False,
        stdout=subprocess.DEVNULL,
    )  # a file that fails only runs slower


def lock() -> int:
    """Resolve every extra anew in a scratch environment and write its exact versions to
    constraints.txt (torch is the bench extra's pin, so this takes the CPU build on disk)."""
    extras = ",".join(sorted(tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]))
    with tempfile.TemporaryDirectory(prefix="avgpool-lock-") as scratch:
        env = Environment("latest")
        env.path = Path(scratch) / "venv"
        env.python = env.path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        print(f"run.py: resolving avgpool[{extras}] in {env.path} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(env.path)
        env.pip("install", f"{ROOT}[{extras}]")
        versions = env.installed()
        python = subprocess.run(
            [str(env.python), "-c", "import platform; print(platform.python_version(), platform.machine())"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    header = [
        "# The exact versions of every direct and indirect dependency of avgpool and its extras, as",
        "# the test suite passed with them: run.py installs .venv from these (pip --constraint).",
        f"# Resolved by `python3 run.py lock` on Python {python} ({sys.platform}); update them with",
        "# that command, then `python3 run.py test`, and commit this file when the suite passes.",
    ]
    CONSTRAINTS.write_text("\n".join([*header, *(f"{name}=={v}" for name, v in sorted(versions.items()))]) + "\n")
    print(f"run.py: wrote {len(versions)} pins to {CONSTRAINTS.name}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["lock"]:
        return lock()
    if not argv or argv[0] not in EXTRAS:
        print(__doc__.strip())
        return 2
    command, rest = argv[0], argv[1:]
    mode = "locked"
    if command == "test" and rest[:1] in (["--latest"], ["--lowest-numba"]):
        mode, rest = rest[0][2:], rest[1:]
    env = Environment(mode)
    env.ensure(EXTRAS[command])
    if command == "demo":
        args = [str(env.python), "-m", "avgpool", "demo", *rest]
    elif command == "avgpool":
        args = [str(env.python), "-m", "avgpool", *rest]
    elif command == "test":
        args = [str(env.python), "-m", "pytest", "-n", "2", "-q", *rest]
    else:
        args = [str(env.python), str(ROOT / "benchmarks" / "bench.py"), *rest]
    return subprocess.run(args, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
