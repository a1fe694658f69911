"""The README's Python examples run as printed (the training one shortened to one epoch): as a script,
and pasted into Python's interactive prompt line by line, as a reader tries them."""

import code
import re
import traceback
from pathlib import Path

import pytest
from conftest import needs_mlxtend

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def shortened_training(code_text: str) -> str:
    """The training example at one epoch (the test's time), or a failure saying to update this test."""
    shortened = code_text.replace("TrainConfig(epochs=10,", "TrainConfig(epochs=1,")
    if shortened == code_text:
        pytest.fail("the training example no longer reads 'TrainConfig(epochs=10,': update this test")
    return shortened


class Prompt(code.InteractiveConsole):
    """Python's interactive prompt (``code.InteractiveConsole``, the REPL's rules: a block ends at a blank
    line), keeping each error it would print."""

    def __init__(self) -> None:
        super().__init__({})
        self.errors: list[str] = []

    def showsyntaxerror(self, *args, **kwargs) -> None:
        self.errors.append(traceback.format_exc())

    def showtraceback(self) -> None:
        self.errors.append(traceback.format_exc())

    def paste(self, text: str) -> list[str]:
        """Each line of ``text`` as a paste types it, then the Enter after it; the errors printed."""
        for line in text.splitlines():
            self.push(line)
        self.push("")
        return self.errors


def test_readme_has_the_api_tour_and_the_training_example():
    blocks = python_blocks()
    assert len(blocks) == 2 and "RHN(" in blocks[0] and "Trainer(" in blocks[1]


def test_api_tour_pastes_into_the_prompt():
    """Pasted into ``python``'s prompt, line by line, it runs: each statement's error is kept, and a block
    not closed by a blank line before the next statement is a SyntaxError there, though it runs as a
    script. (The prompt's rules are the stricter: this is the run of the tour; tests/test_guide_examples.py
    runs it again as a script, checking the values its comments show.)"""
    errors = Prompt().paste(python_blocks()[0])
    assert not errors, errors[0]


@needs_mlxtend
def test_training_example_pastes_into_the_prompt(tmp_path, monkeypatch):
    """Shortened (one epoch), pasted into the prompt, it runs and writes its run folder."""
    monkeypatch.chdir(tmp_path)  # its run folder, runs/mine, goes here
    errors = Prompt().paste(shortened_training(python_blocks()[1]))
    assert not errors, errors[0]
    assert (tmp_path / "runs" / "mine" / "checkpoint.pt").is_file()


def test_the_prompt_refuses_what_a_reader_s_prompt_refuses():
    """The check has teeth: a ``with`` block followed at once by a statement, as the README had it."""
    errors = Prompt().paste("import contextlib\nwith contextlib.nullcontext():\n    x = 1\ny = x\n")
    assert errors and "SyntaxError" in errors[0]
