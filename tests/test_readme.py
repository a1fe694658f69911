"""The README's Python examples run as printed (the training one shortened to one epoch)."""

import re
from pathlib import Path

import pytest
from conftest import needs_mlxtend

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_the_api_tour_and_the_training_example():
    blocks = python_blocks()
    assert len(blocks) == 2 and "RHN(" in blocks[0] and "Trainer(" in blocks[1]


def test_api_tour_runs():
    exec(compile(python_blocks()[0], "README.md (API tour)", "exec"), {})


@needs_mlxtend
def test_training_example_runs(tmp_path, monkeypatch):
    code = python_blocks()[1]
    shortened = code.replace("TrainConfig(epochs=10,", "TrainConfig(epochs=1,")
    if shortened == code:
        pytest.fail("the training example no longer reads 'TrainConfig(epochs=10,': update this test")
    monkeypatch.chdir(tmp_path)  # its run folder, runs/mine, goes here
    exec(compile(shortened, "README.md (training)", "exec"), {})
    assert (tmp_path / "runs" / "mine" / "checkpoint.pt").is_file()
