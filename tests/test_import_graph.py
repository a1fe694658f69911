"""The package's modules import one another without circles: each shared name lives below all its users.

Every import of a ``highwaynet`` module counts, at the top of a file or inside a function (an import
hidden in a function is a circle all the same, only deferred), except those for type checkers alone
(under ``if TYPE_CHECKING:``). ``from package import name`` counts as an import of the submodule
where ``name`` is one, else of the package's ``__init__``.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or (
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")


def imports(path: Path) -> set[str]:
    """The highwaynet modules the file at ``path`` imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "highwaynet")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] == "highwaynet":
                for alias in node.names:
                    found.add(f"{source}.{alias.name}" if is_module(f"{source}.{alias.name}") else source)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in sorted((SRC / "highwaynet").rglob("*.py"))}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected group of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def test_the_finder_sees_a_circle_hidden_in_a_function():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_between_the_packages_modules():
    edges = graph()
    assert len(edges) > 50 and "highwaynet.training.devices" in edges["highwaynet.training.trainer"]
    assert not circles(edges), circles(edges)


@pytest.mark.parametrize("module", ["highwaynet.report"])
def test_the_shared_report_names_no_recipe(module):
    assert not {m for m in graph()[module] if m.startswith("highwaynet.recipes")}
