"""The README's API example runs as written."""

import re
from pathlib import Path


def test_readme_api_example_runs(capsys):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "the README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})
    assert "has 2 spatial axes" in capsys.readouterr().out
