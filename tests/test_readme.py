"""The README's API example runs as written."""

import re
from pathlib import Path

import pytest


def test_readme_api_example_runs(capsys):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "the README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert "has 2 spatial axes" in capsys.readouterr().out


def test_readme_dask_example_runs(capsys):
    pytest.importorskip("distributed")
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "avgpool.dask" in b)
    exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})  # run as a script
    assert "{'band': 3, 'y': 256, 'x': 256} [0.5 2.  4. ]" in capsys.readouterr().out
