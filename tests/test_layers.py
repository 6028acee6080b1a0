"""Folders are layers and imports point down, read from the source with ``ast`` (nothing is imported).

The layers, top down (docs/architecture.md):

- ``cli/`` (the command line): imported by nothing but ``__main__``;
- the public modules (``avgpool``, ``openvino``, ``onednn``, ``qlinear``, ``torch``, ``onnx``, ``dask``,
  ``xarray``, ``_warmup``);
- ``_ops/``, one module per operator: imports ``_core``, ``kernels`` and ``errors`` only;
- ``_core/``, the engine, which knows no attribute names: imports ``kernels`` and ``errors`` only;
- ``kernels/``, numba only: imports nothing outside ``kernels/``.

Every import counts, also one inside a function or under ``if TYPE_CHECKING``. No module imports
itself back through others (no cycle), and no module imports another package's private module
(``dask._task_spec``) unless :data:`PRIVATE_IMPORTS` says why there is no public way. An import
that breaks a rule today is in :data:`KNOWN_EXCEPTIONS` with the reason; an entry no longer
needed fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "avgpool"

KERNELS = ("avgpool.kernels",)
CORE = ("avgpool._core",)
OPS = ("avgpool._ops",)
CLI = ("avgpool.cli",)
CLI_ENTRY = ("avgpool.__main__",)  # python -m avgpool
ERRORS = ("avgpool.errors",)

#: What each layer may import from avgpool (besides itself).
ALLOWED = {
    KERNELS: KERNELS,
    CORE: CORE + KERNELS + ERRORS,
    OPS: OPS + CORE + KERNELS + ERRORS,
}

#: (importer, imported) -> why it is still there. Remove the entry with the import.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

#: (importer, private module of another package) -> why there is no public way.
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {
    ("avgpool.dask", "dask._task_spec"): (
        "convert_legacy_graph: dask (2026.8) has no public function that turns a persisted "
        "array's legacy (tuple) graph into Task objects; dask.task_spec exports the classes only"
    ),
}


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
            layer = next((group for group in ALLOWED if within(name, group)), None)
            if layer is not None and not within(target, ALLOWED[layer]):
                rule = f"{layer[0]} imports only {', '.join(ALLOWED[layer])}"
            elif within(target, CLI) and not within(name, CLI + CLI_ENTRY):
                rule = "only the CLI and __main__ import the CLI"
            else:
                continue
            broken[name, target, line] = rule
    return [(name, target, line, rule) for (name, target, line), rule in broken.items()]


def import_cycles(modules: dict[str, tuple[ast.Module, bool]]) -> list[list[str]]:
    """The import cycles between modules (every import counted), each as a closed path."""
    known = set(modules)
    graph = {
        name: sorted({target for target, _ in imports(name, tree, is_package, known) if target != name})
        for name, (tree, is_package) in modules.items()
    }
    graph = {
        name: [t for t in targets if t in graph and not _is_parent(t, name, modules)] for name, targets in graph.items()
    }
    cycles, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in graph[name]:
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def _is_parent(target: str, name: str, modules: dict[str, tuple[ast.Module, bool]]) -> bool:
    """A package's ``__init__`` runs before its modules: ``from . import x`` in ``pkg.y`` names
    ``pkg`` only to reach ``pkg.x`` (resolved by :func:`imports`), not a cycle through ``pkg``."""
    return modules[target][1] and name.startswith(target + ".")


def private_imports(modules: dict[str, tuple[ast.Module, bool]]) -> list[tuple[str, str, int]]:
    """(importer, module, line) for every import of another package's private module: a dotted
    name with a part after the first starting with ``_`` (``dask._task_spec``; a top-level
    module such as ``_thread`` or ``__future__`` is the standard library's public one)."""
    found = []
    for name, (tree, _) in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            else:
                continue
            for target in targets:
                if not target.startswith("avgpool") and any(part.startswith("_") for part in target.split(".")[1:]):
                    found.append((name, target, node.lineno))
    return found


def test_imports_point_down():
    broken = [b for b in broken_rules(read_modules(PACKAGE)) if b[:2] not in KNOWN_EXCEPTIONS]
    assert not broken, "\n".join(
        f"{importer} -> {target} (line {line}): {rule}" for importer, target, line, rule in broken
    )


def test_every_known_exception_is_still_needed():
    still = {b[:2] for b in broken_rules(read_modules(PACKAGE))}
    gone = [pair for pair in KNOWN_EXCEPTIONS if pair not in still]
    assert not gone, f"these imports are gone: remove them from KNOWN_EXCEPTIONS: {gone}"


def test_no_import_cycle():
    cycles = import_cycles(read_modules(PACKAGE))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_private_import_of_another_package():
    found = private_imports(read_modules(PACKAGE))
    unexplained = [
        f"{name} imports {target} (line {line})"
        for name, target, line in found
        if (name, target) not in PRIVATE_IMPORTS
    ]
    assert not unexplained, "\n".join(unexplained)
    gone = [pair for pair in PRIVATE_IMPORTS if pair not in {(n, t) for n, t, _ in found}]
    assert not gone, f"these imports are gone: remove them from PRIVATE_IMPORTS: {gone}"


def test_the_public_modules_are_thin_faces():
    """``avgpool.openvino``, ``.onednn``, ``.qlinear`` and ``.torch`` only name their operator's functions."""
    for face in ("openvino", "onednn", "qlinear", "torch"):
        tree = ast.parse((PACKAGE / f"{face}.py").read_text())
        statements = [node for node in tree.body if not isinstance(node, ast.Expr)]
        assert all(isinstance(node, (ast.ImportFrom, ast.Assign)) for node in statements), face
        assert {node.module for node in statements if isinstance(node, ast.ImportFrom)} == {f"_ops.{face}"}, face


_EMPTY = (ast.parse(""), False)


@pytest.mark.parametrize(
    ("name", "source", "target"),
    [
        ("avgpool.kernels.separable", "from .._core.engine import prepare", "avgpool._core.engine"),
        ("avgpool.kernels.separable", "from .. import errors", "avgpool.errors"),
        ("avgpool.kernels.separable", "import avgpool._core.spec", "avgpool._core.spec"),
        ("avgpool.kernels", "from .._core.spec import Layout", "avgpool._core.spec"),  # kernels/__init__.py
        ("avgpool._core.engine", "def f():\n    from .._ops import onnx", "avgpool._ops.onnx"),
        (
            "avgpool._core.plan",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .._ops.onnx import AveragePool",
            "avgpool._ops.onnx",
        ),
        ("avgpool._core.shape", "from avgpool.cli import main", "avgpool.cli"),
        ("avgpool._ops.onnx", "from ..cli.flags import UsageError", "avgpool.cli.flags"),
        ("avgpool._ops.onnx", "from .. import dask", "avgpool.dask"),
        ("avgpool.dask", "from . import cli", "avgpool.cli"),
    ],
)
def test_a_forbidden_import_is_found(name, source, target):
    modules = {
        "avgpool._core.spec": _EMPTY,
        "avgpool._core.engine": _EMPTY,
        "avgpool.errors": _EMPTY,
        "avgpool.dask": _EMPTY,
        "avgpool._ops": (ast.parse(""), True),
        "avgpool._ops.onnx": _EMPTY,
        "avgpool.cli": (ast.parse(""), True),
        "avgpool.cli.flags": _EMPTY,
        "avgpool.kernels.jit": (ast.parse("from .separable import pool_slabs"), False),
    }
    modules[name] = (ast.parse(source), name in ("avgpool.kernels", "avgpool._ops", "avgpool.cli"))
    assert [(importer, imported) for importer, imported, _, _ in broken_rules(modules)] == [(name, target)]


def test_a_cycle_is_found():
    modules = {
        "avgpool._core": (ast.parse(""), True),
        "avgpool._core.tiles": (ast.parse("def f():\n    from . import quantized_pools"), False),
        "avgpool._core.quantized_pools": (ast.parse("from .tiles import tile_regions"), False),
        "avgpool._core.spec": (ast.parse("from . import shape"), False),
        "avgpool._core.shape": _EMPTY,
    }
    assert import_cycles(modules) == [
        ["avgpool._core.quantized_pools", "avgpool._core.tiles", "avgpool._core.quantized_pools"]
    ]


def test_a_private_import_is_found():
    modules = {"avgpool.dask": (ast.parse("def f():\n    from dask._task_spec import x\nimport numpy.linalg"), False)}
    assert private_imports(modules) == [("avgpool.dask", "dask._task_spec", 2)]
