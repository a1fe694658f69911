"""The user guide's code runs as shown (its index says so), and so do the getting-started page's and the
README's tour: each page's Python blocks in order, in one namespace, as a reader pastes them. Each
trailing comment that shows a value is what its line gives: a shape, ``# (8, 20, 525)`` (several for
several results: ``# (35, 8, 128), (2, 8, 128)``), or a list, dict or string, ``...`` standing for any
text as in a doctest (``# {'loss': ..., 'acc': ...}``). A comment that shows a value stands after its line, never
on a line of its own (above the line it describes, where nothing checks it)."""

import ast
import contextlib
import doctest
import io
import re
import tokenize
from pathlib import Path

import pytest
import torch

from highwaynet._versions import release

ROOT = Path(__file__).resolve().parents[1]
# Pages whose code fetches files from elsewhere (ELMo's and SeqVec's published weights): not run here.
NEEDS_NETWORK = {"docs/guide/elmo.md"}
# The README's blocks run here: its tour (its training example runs in tests/test_readme.py, shortened).
BLOCKS = {"README.md": slice(0, 1)}
PAGES = ["README.md", "docs/getting-started.md",
         *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "guide").glob("*.md")))]
SHAPES = re.compile(r"\((?:\d+(?:, *\d+)*,?)?\)")
LEADING_SHAPES = re.compile(rf"^{SHAPES.pattern}(?:, *{SHAPES.pattern})*(?=$|[,:;]| )")


def python_blocks(page: str) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)
    return blocks[BLOCKS.get(page, slice(None))]


def trailing_comments(code: str, alone: bool = False) -> dict[int, str]:
    """Each line's comment where the line also holds code: {line number: the comment's text}; ``alone``: each
    comment on a line of its own instead."""
    comments, code_lines = {}, set()
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                tokenize.ENDMARKER):
            code_lines.add(token.start[0])
    return {line: text for line, text in comments.items() if (line in code_lines) != alone}


def shows_a_value(comment: str) -> bool:
    """Whether a comment shows a value that :func:`check_comment` checks: a shape, or a list, dict or string."""
    return bool(LEADING_SHAPES.match(comment)) or comment[:1] in ("[", "{", "'", '"')


def shapes_of(value: object) -> list[tuple[int, ...]]:
    """The shapes a line gives, in order: a tensor's, a ``torch.Size``, those inside a tuple or list."""
    if isinstance(value, torch.Tensor):
        return [tuple(value.shape)]
    if isinstance(value, torch.Size):
        return [tuple(value)]
    if isinstance(value, (tuple, list)):
        return [shape for item in value for shape in shapes_of(item)]
    return []


def check_comment(where: str, comment: str, value: object, printed: str) -> None:
    shown = LEADING_SHAPES.match(comment)
    if shown:
        expected = [tuple(int(n) for n in re.findall(r"\d+", s)) for s in SHAPES.findall(shown[0])]
        assert shapes_of(value) == expected, f"{where}: the comment shows {shown[0]}, the line gives {shapes_of(value)}"
    elif shows_a_value(comment):
        got = printed if printed else repr(value)
        assert doctest.OutputChecker().check_output(comment + "\n", got.rstrip("\n") + "\n", doctest.ELLIPSIS), \
            f"{where}: the comment shows {comment}, the line gives {got.rstrip()}"


def run_page(page: str, *, check_prints: bool = True) -> int:
    """Run a page's blocks as a reader would; returns how many comments were checked against their line.
    A ``print`` inside a loop or block is checked against the first line that block printed."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    checked = 0
    for number, code in enumerate(python_blocks(page)):
        alone = [f"line {line}: # {text}" for line, text in trailing_comments(code, alone=True).items()
                 if shows_a_value(text)]
        assert not alone, (f"{page}, Python block {number + 1}: a comment that shows a value stands on a line of its "
                           f"own, where nothing checks it; put it after the line it shows ({'; '.join(alone)})")
        comments = trailing_comments(code)
        for statement in ast.parse(code).body:
            where = f"{page}, Python block {number + 1}, line {statement.end_lineno}"
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                if isinstance(statement, ast.Expr):
                    value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)
                else:
                    exec(compile(ast.Module([statement], []), where, "exec"), namespace)
                    value = None
                    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                        value = eval(compile(ast.Expression(_loaded(statement.targets[0])), where, "eval"), namespace)
            comment = comments.get(statement.end_lineno)
            if comment and isinstance(statement, (ast.Expr, ast.Assign)) and statement.lineno == statement.end_lineno:
                printed = out.getvalue() if _is_print(statement) else ""
                check_comment(where, comment, value, printed)
                checked += 1
            elif check_prints and not isinstance(statement, (ast.Expr, ast.Assign)):
                for inner in ast.walk(statement):
                    comment = comments.get(getattr(inner, "end_lineno", None))
                    if comment and isinstance(inner, ast.Expr) and _is_print(inner):
                        first = out.getvalue().split("\n", 1)[0]
                        assert doctest.OutputChecker().check_output(comment + "\n", first + "\n", doctest.ELLIPSIS), \
                            f"{where}: the comment shows {comment}, the line printed {first}"
                        checked += 1
    return checked


def _loaded(target: ast.expr) -> ast.expr:
    """An assignment's target read back (``a, (b, c) = ...`` gives ``(a, (b, c))``)."""
    return ast.fix_missing_locations(ast.parse(ast.unparse(target), mode="eval").body)


def _is_print(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name) and statement.value.func.id == "print")


@pytest.mark.parametrize("page", [p for p in PAGES if p not in NEEDS_NETWORK])
def test_page_runs_and_gives_what_its_comments_show(page, tmp_path, monkeypatch):
    if page == "docs/guide/speed.md":
        pytest.importorskip("onnxscript", reason="the page exports to ONNX: the export extra")
        if release(torch.__version__) < (2, 10):
            pytest.skip("the page exports to ONNX by torch.onnx.export(dynamo=True), which needs torch >= 2.10")
    monkeypatch.chdir(tmp_path)  # (the training page writes run folders where it runs)
    torch.manual_seed(0)
    # (the speed page prints the path an RHN took on the CPU: the C++ loops, where this machine has them)
    from highwaynet.kernels import rhn_cpu

    with torch.device("cpu"):
        run_page(page, check_prints=page != "docs/guide/speed.md" or rhn_cpu.available(torch.zeros(1)))


def test_every_guide_page_is_run_or_said_to_need_the_network():
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert NEEDS_NETWORK <= pages, f"NEEDS_NETWORK names pages that are not in the guide: {NEEDS_NETWORK - pages}"
    assert any(python_blocks(p) for p in NEEDS_NETWORK), "a page said to need the network shows no Python"


@pytest.mark.parametrize(("code", "alone"), [
    ("x = f()  # (2, 525)\n", {}),
    ("# (2, 525): unseen words\nx = f()\n", {1: "(2, 525): unseen words"}),
    ("# ['a', 'b']\nx = f()\n", {1: "['a', 'b']"}),
    ("# the gate shut: the block carries x through\nx = f()\n", {}),
])
def test_a_comment_showing_a_value_on_a_line_of_its_own_is_found(code, alone):
    assert {line: text for line, text in trailing_comments(code, alone=True).items() if shows_a_value(text)} == alone


@pytest.mark.parametrize(("comment", "value", "printed", "right"), [
    ("(8, 20, 525)", torch.zeros(8, 20, 525), "", True),
    ("(8, 20, 525)", torch.zeros(8, 20, 512), "", False),
    ("(35, 8, 128), (2, 8, 128)", (torch.zeros(35, 8, 128), torch.zeros(2, 8, 128)), "", True),
    ("(4,): each layer's gate, on average", torch.zeros(4), "", True),
    ("(2, 525): unseen words", torch.zeros(2, 526), "", False),
    ("['gates.0', 'gates.1', ...]", ["gates.0", "gates.1", "gates.2"], "", True),
    ("{'loss': ..., 'acc': ...}", None, "{'loss': 0.3, 'acc': 0.9}\n", True),
    ("{'loss': ..., 'acc': ...}", {"loss": 0.3}, "", False),
    ("a comment in words", 3, "", True),
])
def test_the_comment_check_reads_shapes_and_values(comment, value, printed, right):
    if right:
        check_comment("here", comment, value, printed)
    else:
        with pytest.raises(AssertionError):
            check_comment("here", comment, value, printed)
