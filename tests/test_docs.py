"""The README and docs/ as they are checked: the Python examples run as written, every relative link
and every repository path named in backticks resolves, the semantics sections the code cites exist,
and the performance tables are the files the benchmarks wrote, embedded unchanged.

A results table is embedded between ``<!-- results: PATH -->`` and ``<!-- end results -->``, PATH
relative to the repository root (``benchmarks/bench.py`` writes ``benchmarks/results/bench.md``
and ``bench_short.md``, ``benchmarks/bench_qlinear.py`` ``bench_qlinear.md``). After a benchmark
run, ``python3 tests/test_docs.py --sync`` copies the files into the documents.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
README_LIMIT = 12_000  # characters: a newcomer reads it to the end; the rest goes to docs/

FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", re.S | re.M)
PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EMBED = re.compile(r"<!-- results: (\S+) -->\n(.*?)<!-- end results -->", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH_SUFFIXES = (".py", ".md", ".txt", ".toml", ".png", ".json", ".cfg")
#: Where a path in backticks may be relative to, besides its document's folder: the code names
#: modules from the package (``kernels/jit.py``) or from src (``avgpool/threads.py``).
PATH_BASES = (ROOT, ROOT / "src" / "avgpool", ROOT / "src")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def prose(text: str) -> str:
    """The text without its fenced code blocks (whose paths are examples: ``photo.png``)."""
    return FENCE.sub("", text)


def python_blocks() -> list[tuple[Path, int, str]]:
    return [(doc, i, block) for doc in DOCUMENTS for i, block in enumerate(PYTHON.findall(doc.read_text()))]


def run_block(doc: Path, block: str, as_main: bool = False) -> None:
    name = "__main__" if as_main else f"docs_example_{doc.stem}"
    exec(compile(block, str(doc), "exec"), {"__name__": name})


# ------------------------------------------------------------------------------------------------ #
# the examples


def test_readme_api_example_runs(capsys):
    blocks = PYTHON.findall(README.read_text())
    assert blocks, "the README has no python example"
    run_block(README, blocks[0])
    assert "has 2 spatial axes" in capsys.readouterr().out


def test_readme_dask_example_runs(capsys):
    pytest.importorskip("distributed")
    block = next(b for b in PYTHON.findall(README.read_text()) if "avgpool.dask" in b)
    run_block(README, block, as_main=True)  # run as a script: LocalCluster's workers import it
    assert "{'band': 3, 'y': 256, 'x': 256} [0.5 2.  4. ]" in capsys.readouterr().out


OTHER_BLOCKS = [(d, i, b) for d, i, b in python_blocks() if not (d == README and ("avgpool.dask" in b or i == 0))]


@pytest.mark.parametrize(("doc", "index", "block"), OTHER_BLOCKS, ids=[f"{rel(d)}-{i}" for d, i, _ in OTHER_BLOCKS])
def test_every_other_python_example_runs(doc, index, block, capsys):
    for module in ("dask", "xarray"):
        if re.search(rf"^import .*\b{module}\b", block, re.M):
            pytest.importorskip(module)
    run_block(doc, block, as_main="__main__" in block)
    printed = capsys.readouterr().out
    for expected in re.findall(r"^print\(.*\)  # (.+)$", block, re.M):  # a print's comment is its output
        assert expected.split(":")[0] in printed


def test_the_docs_examples_print_what_they_say(capsys):
    block = next(b for d, _, b in python_blocks() if d.name == "dask-xarray.md" and "xarray" in b)
    pytest.importorskip("xarray")
    run_block(ROOT / "docs" / "dask-xarray.md", block)
    assert "{'band': 3, 'y': 4, 'x': 4} [0.5 2.5 4.5 6.5]" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ #
# links and paths


def test_the_readme_is_short():
    assert len(README.read_text()) <= README_LIMIT


@pytest.mark.parametrize("doc", DOCUMENTS, ids=rel)
def test_relative_links_resolve(doc):
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{rel(doc)}: links that do not resolve: {broken}"


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", prose(doc.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def looks_like_a_path(span: str) -> bool:
    if not re.fullmatch(r"[\w.\-/<>]+", span) or span.startswith(("-", ".venv")) or "<" in span:
        return False
    if span.endswith("/") or span.endswith(PATH_SUFFIXES):
        return True
    return "/" in span and "." in span.rsplit("/", 1)[1]  # a/b.ext; not fn/prep


@pytest.mark.parametrize("doc", DOCUMENTS, ids=rel)
def test_paths_in_backticks_resolve(doc):
    spans = {s for s in CODE_SPAN.findall(prose(doc.read_text())) if looks_like_a_path(s)}
    missing = sorted(s for s in spans if not any((base / s).exists() for base in (doc.parent, *PATH_BASES)))
    assert not missing, f"{rel(doc)} names paths that are not in the repository: {missing}"


def test_path_detection():
    assert looks_like_a_path("kernels/jit.py") and looks_like_a_path("cli/") and looks_like_a_path("bench.py")
    assert not looks_like_a_path("avgpool warmup") and not looks_like_a_path("NUMBA_CACHE_DIR")
    assert not looks_like_a_path("--plot") and not looks_like_a_path("tables.divisor_scales")
    assert not looks_like_a_path("fn/prep") and looks_like_a_path("benchmarks/results/")


# ------------------------------------------------------------------------------------------------ #
# the semantics the code cites


def semantics_sections() -> set[str]:
    text = (ROOT / "docs" / "semantics.md").read_text()
    sections = set(re.findall(r"^## (\d+)\. ", text, re.M))
    return sections | set(re.findall(r"^(\d+\.\d+) ", text, re.M))


CITATION = re.compile(r"semantics(?:\.md)?,? (?:sections? )?(\d+(?:\.\d+)?(?:(?:, | and | to )\d+(?:\.\d+)?)*)")


def test_the_sections_the_code_cites_exist():
    sections = semantics_sections()
    assert {"1.4", "3.5", "5.2", "7"} <= sections
    wrong = []
    for path in sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            for cited in CITATION.findall(line):
                for number in re.split(r", | and | to ", cited):
                    if number not in sections:
                        wrong.append(f"{rel(path)}:{line_number}: semantics {number}")
    assert not wrong, "citations of docs/semantics.md sections that do not exist:\n" + "\n".join(wrong)


# ------------------------------------------------------------------------------------------------ #
# the performance figures


EMBEDS = [(doc, path) for doc in DOCUMENTS for path, _ in EMBED.findall(doc.read_text())]


@pytest.mark.parametrize(("doc", "source"), EMBEDS, ids=[f"{rel(d)}<-{s}" for d, s in EMBEDS])
def test_embedded_results_are_the_benchmarks_files(doc, source):
    embedded = dict(EMBED.findall(doc.read_text()))[source]
    path = ROOT / source
    assert path.is_file(), f"{source}, embedded in {rel(doc)}, is missing: run the benchmark that writes it"
    assert embedded == path.read_text(), (
        f"{rel(doc)} embeds another text than {source}: run `python3 tests/test_docs.py --sync`"
    )


def test_performance_figures_are_embedded():
    sources = {source for _, source in EMBEDS}
    assert {"benchmarks/results/bench.md", "benchmarks/results/bench_qlinear.md"} <= sources
    assert "benchmarks/results/bench_short.md" in {s for d, s in EMBEDS if d == README}


def sync() -> list[Path]:
    """Copy every embedded results file into its documents (a missing file leaves its block as it
    is); the documents changed."""

    def embedded(match: re.Match) -> str:
        source = ROOT / match[1]
        if not source.is_file():
            print(f"missing {match[1]}: run the benchmark that writes it", file=sys.stderr)
            return match[0]
        return f"<!-- results: {match[1]} -->\n{source.read_text()}<!-- end results -->"

    changed = []
    for doc in DOCUMENTS:
        text = doc.read_text()
        new = EMBED.sub(embedded, text)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--sync"]:
        sys.exit("usage: python3 tests/test_docs.py --sync   (copies benchmarks/results/*.md into the docs)")
    for doc in sync():
        print(f"updated {rel(doc)}")
