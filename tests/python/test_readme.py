"""The README's Python examples run as written (from the repository root)."""

import os
import re

import pytest

from conftest import ROOT


def python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example(index, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    os.makedirs("build", exist_ok=True)
    exec(compile(python_blocks()[index], f"README.md python block {index}", "exec"), {})
    if "Trainer" in python_blocks()[index]:
        lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("epoch")]
        first, last = (float(l.split("loss ")[1].split(",")[0]) for l in (lines[0], lines[-1]))
        assert last < first  # the example's loss falls


def test_readme_has_both_examples():
    blocks = python_blocks()
    assert any("InferenceSession" in b for b in blocks) and any("Trainer" in b for b in blocks)
