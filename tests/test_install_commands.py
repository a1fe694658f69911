"""Every install command a reader is shown works today: from the clone or a built wheel, with extras
that exist. ``pip install highwaynet`` (from PyPI, where the package is not yet) appears only where the
text says it is for after a release. (The commands themselves run in CI: the README's two commands,
and tests/test_wheel.py builds the wheel and installs it in a fresh environment.)"""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads pyproject.toml with the standard library")

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def sources() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if not {"notes", "_build", "_generated", "gallery"}
            & set(p.relative_to(ROOT / "docs").parts)]
    return [ROOT / "README.md", *sorted(docs), *sorted((ROOT / "examples").glob("*.py")), *sorted(
        (ROOT / "src").rglob("*.py"))]


def paragraphs(path: Path) -> list[str]:
    return re.split(r"\n\s*\n", path.read_text())


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_install_commands_work_from_the_clone_or_say_they_wait_for_a_release(path):
    for paragraph in paragraphs(path):
        for command in re.findall(r"pip install[^\n`]*", paragraph):
            if re.search(r"pip install (-[-\w]+ )*['\"]?highwaynet\b", command):
                assert re.search(r"after (its|a|the) (first )?release", paragraph), (path.name, command)
            for extras in re.findall(r"\[([\w,\s-]+)\]", command):
                unknown = {e.strip() for e in extras.split(",")} - EXTRAS
                assert not unknown, (path.name, command, unknown)


def test_the_extras_each_page_names_exist():
    named = set()
    for path in sources():
        named |= set(re.findall(r"the `?(\w+)`? extra", path.read_text()))
    assert named and named <= EXTRAS, named - EXTRAS
