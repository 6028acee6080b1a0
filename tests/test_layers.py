"""Folders are layers and imports point down, read from the source with ``ast`` (nothing is imported).

- nothing under ``kernels/`` imports a module outside ``kernels/``;
- the core (spec, shape, plan, the engines, threads, memo, tiles) imports neither a dialect
  (api, onnx, openvino, onednn, qlinear, dialects/, dialect_registry) nor the command line;
- a dialect does not import the command line, and nothing but ``__main__`` does: ``cli/`` is the top.

Every import counts, also one inside a function or under ``if TYPE_CHECKING``. An import that breaks
a rule today is in :data:`KNOWN_EXCEPTIONS` with the reason; an entry no longer needed fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "avgpool"

KERNELS = ("avgpool.kernels",)
CORE = tuple(
    f"avgpool.{name}"
    for name in (
        "spec",
        "shape",
        "plan",
        "engine",
        "qlinear_engine",
        "threads",
        "memo",
        "caches",
        "pools",
        "tiles",
        "tables",
        "workers",
        "tuning",
        "quantized",
    )
)
DIALECTS = tuple(
    f"avgpool.{name}" for name in ("api", "onnx", "openvino", "onednn", "qlinear", "dialects", "dialect_registry")
)
CLI = ("avgpool.cli",)
CLI_ENTRY = ("avgpool.__main__",)  # python -m avgpool

#: (importer, imported) -> why it is still there. Remove the entry with the import.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules(package: Path) -> dict[str, tuple[ast.Module, bool]]:
    """Dotted name -> (syntax tree, is a package), for every .py file under ``package``."""
    return {
        module_name(path, package): (ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
        for path in sorted(package.rglob("*.py"))
    }


def imports(name: str, tree: ast.Module, is_package: bool, known: set[str]) -> list[tuple[str, int]]:
    """The avgpool modules ``name`` imports, with the line: ``from X import y`` names the
    submodule X.y when there is one, else X."""
    here = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule if submodule in known else source, node.lineno))
    return [(target, line) for target, line in found if within(target, ("avgpool",))]


def within(name: str, groups: tuple[str, ...]) -> bool:
    return any(name == group or name.startswith(group + ".") for group in groups)


def broken_rules(modules: dict[str, tuple[ast.Module, bool]]) -> list[tuple[str, str, int, str]]:
    """(importer, imported, line, rule) for every import that points the wrong way."""
    known = set(modules)
    broken = {}
    for name, (tree, is_package) in modules.items():
        for target, line in imports(name, tree, is_package, known):
            if within(name, KERNELS) and not within(target, KERNELS):
                rule = "kernels/ imports only kernels/"
            elif within(name, CORE) and within(target, DIALECTS + CLI):
                rule = "the core imports no dialect and not the CLI"
            elif within(target, CLI) and not within(name, CLI + CLI_ENTRY):
                rule = "only the CLI and __main__ import the CLI"
            else:
                continue
            broken[name, target, line] = rule
    return [(name, target, line, rule) for (name, target, line), rule in broken.items()]


def test_imports_point_down():
    broken = [b for b in broken_rules(read_modules(PACKAGE)) if b[:2] not in KNOWN_EXCEPTIONS]
    assert not broken, "\n".join(
        f"{importer} -> {target} (line {line}): {rule}" for importer, target, line, rule in broken
    )


def test_every_known_exception_is_still_needed():
    still = {b[:2] for b in broken_rules(read_modules(PACKAGE))}
    gone = [pair for pair in KNOWN_EXCEPTIONS if pair not in still]
    assert not gone, f"these imports are gone: remove them from KNOWN_EXCEPTIONS: {gone}"


@pytest.mark.parametrize(
    ("name", "source", "target"),
    [
        ("avgpool.kernels.separable", "from ..engine import prepare", "avgpool.engine"),
        ("avgpool.kernels.separable", "from .. import errors", "avgpool.errors"),
        ("avgpool.kernels.separable", "import avgpool.spec", "avgpool.spec"),
        ("avgpool.kernels", "from ..spec import Layout", "avgpool.spec"),  # kernels/__init__.py
        ("avgpool.engine", "def f():\n    from .dialects import onnx", "avgpool.dialects.onnx"),
        (
            "avgpool.plan",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .api import AveragePool",
            "avgpool.api",
        ),
        ("avgpool.shape", "from avgpool.cli import main", "avgpool.cli"),
        ("avgpool.dialects.onnx", "from ..cli.flags import UsageError", "avgpool.cli.flags"),
        ("avgpool.dask", "from . import cli", "avgpool.cli"),
    ],
)
def test_a_forbidden_import_is_found(name, source, target):
    modules = {
        "avgpool.spec": (ast.parse(""), False),
        "avgpool.errors": (ast.parse(""), False),
        "avgpool.dialects": (ast.parse(""), True),
        "avgpool.dialects.onnx": (ast.parse(""), False),
        "avgpool.cli": (ast.parse(""), True),
        "avgpool.cli.flags": (ast.parse(""), False),
        "avgpool.kernels.jit": (ast.parse("from .separable import pool_slabs"), False),
    }
    modules[name] = (ast.parse(source), name in ("avgpool.kernels", "avgpool.dialects", "avgpool.cli"))
    assert [(importer, imported) for importer, imported, _, _ in broken_rules(modules)] == [(name, target)]
