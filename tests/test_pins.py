"""constraints.txt, the pinned set run.py installs, covers what pyproject.toml asks for.

Every dependency of the package and of each extra is pinned there, once, to a version that its
range in pyproject.toml allows: a range widened or narrowed without `python3 run.py lock` fails
here instead of on a fresh clone.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, list[str]]:
    pins: dict[str, list[str]] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            pins.setdefault(canonicalize_name(name), []).append(version)
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    return [Requirement(text) for text in listed]


def test_every_pin_is_exact_and_listed_once():
    twice = {name: versions for name, versions in _pins().items() if len(versions) > 1}
    assert not twice


def test_every_dependency_is_pinned_within_its_range():
    pins = _pins()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not pinned in constraints.txt (python3 run.py lock)"
        version = Version(pins[name][0])
        assert requirement.specifier.contains(version, prereleases=True), (
            f"constraints.txt pins {name}=={version}, outside pyproject.toml's {requirement}"
        )
