"""The documentation site builds without a warning, documents every public name, shows every stored
result, and the README's results table is the one the stored results give."""

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

import highwaynet

ROOT = Path(__file__).resolve().parents[1]
# Each public module and the page that documents it (docs/api/NAME.md); names documented elsewhere.
API_MODULES = ["nn", "functional", "analysis", "kernels", "elmo", "models", "training", "data", "config", "report"]
DOCUMENTED_ELSEWHERE = {"highwaynet.training.TrainConfig": "highwaynet.config.TrainConfig"}


def _inventory(site: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    return {name for kind in inventory.data.values() for name in kind} if hasattr(inventory, "data") else \
        {name for kind in inventory.values() for name in kind}


def test_every_public_name_has_a_reference_entry(site):
    documented = _inventory(site)
    missing = []
    for module in API_MODULES:
        for name in importlib.import_module(f"highwaynet.{module}").__all__:
            full = f"highwaynet.{module}.{name}"
            # (a constant is documented in the submodule that defines it, with its comment)
            if DOCUMENTED_ELSEWHERE.get(full, full) not in documented and not any(
                    d.startswith(f"highwaynet.{module}.") and d.endswith(f".{name}") for d in documented):
                missing.append(full)
    for name, home in highwaynet._WHERE.items():  # the top level's names: each documented where it lives
        if home is not None and f"highwaynet.{home}.{name}" not in documented:
            missing.append(f"highwaynet.{home}.{name}")
    settings = set(importlib.import_module("highwaynet.config").__all__)
    for module in ("mlp", "cnn", "depth", "gates", "analyses", "lm", "rhn_depth", "char_lm", "tuning", "sentences",
                   "sentences_report", "transformer_depth"):
        for name in set(importlib.import_module(f"highwaynet.recipes.{module}").__all__) - settings:
            if f"highwaynet.recipes.{module}.{name}" not in documented:
                missing.append(f"highwaynet.recipes.{module}.{name}")
    assert not missing, f"public names without an API entry: {missing}"


def test_every_stored_result_is_on_a_results_page(site):
    pages = {page.stem: page.read_text() for page in (site / "results").glob("*.html")}
    for record in sorted((ROOT / "docs" / "results").glob("*.json")):
        json.loads(record.read_text())  # every stored result is valid JSON
        name = record.stem if not record.stem.startswith("sentences-features-") else "sentences-features"
        sources = (ROOT / "docs" / "results").glob("*.md")
        assert any(f"_generated/{name}" in src.read_text() for src in sources), f"no page includes {record.name}"
    unfinished = [name for name, text in pages.items() if "Not stored yet" in text]
    assert not unfinished, f"results pages waiting for a stored result: {unfinished}"


def test_pages_show_generated_tables_and_figures(site):
    depth = (site / "results" / "depth.html").read_text()
    assert "<table" in depth and "How this was made" in depth
    for image in re.findall(r'<img [^>]*src="([^"]+)"', depth):
        assert (site / "results" / image).is_file(), image
    if not (ROOT / "docs" / "results" / "transformer-depth-tinyshakespeare.json").exists():  # (withdrawn, not rerun)
        for page in ("results/transformer.html", "guide/residual.html"):
            assert "Not run yet for 0.4.0" in (site / page).read_text(), page
    performance = (site / "performance.html").read_text()
    for record in (ROOT / "benchmarks").glob("*.json"):
        if "ms" in json.loads(record.read_text()):
            assert f"benchmarks/{record.name}" in performance, record.name


def test_gallery_ran_its_examples(site):
    gallery = site / "gallery"
    digits = (gallery / "highway_in_your_model.html").read_text()
    assert re.search(r"highway +30 layers: test accuracy [\d.]+%", digits), "the example's output is not on its page"


def test_readme_results_table_is_the_stored_results(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")
    readme = (ROOT / "README.md").read_text()
    table = re.search(r"<!-- summary:start[^\n]*-->\n(.*?)<!-- summary:end -->", readme, re.S)
    assert table, "the README lost its summary markers"
    assert table[1] == results.readme_summary(), "run `python docs/_ext/results.py --readme`"
    sys.modules.pop("results", None)


def test_readme_is_a_guide_of_at_most_200_lines_whose_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which is not in the checkout"


@pytest.mark.parametrize("name", ["CHANGELOG.md"])
def test_changelog_names_this_version(name):
    assert f"## {highwaynet.__version__}" in (ROOT / name).read_text()


def test_changelog_names_only_public_functions_of_the_public_modules():
    """A name the changelog gives as ``functional.NAME`` (or ``highwaynet.functional.NAME``, and so for each public
    module) is one the module exports: an internal helper named so reads as public API, which it is not (it checks
    no arguments, and may change). It named ``functional.split_parts``, the layers' unchecked ``split_halves``."""
    import inspect

    text = (ROOT / "CHANGELOG.md").read_text()
    internal = []
    for found in re.finditer(rf"`(?:highwaynet\.)?({'|'.join(API_MODULES)})\.([A-Za-z_]\w*)", text):
        module, name = importlib.import_module(f"highwaynet.{found[1]}"), found[2]
        value = getattr(module, name, None)  # (torch's names, nn.LSTM, and submodules are not the module's own)
        if value is not None and not inspect.ismodule(value) and name not in module.__all__:
            internal.append(found[0].strip("`"))
    assert not internal, f"the changelog names internal functions as public: {internal}"


def test_pages_quote_the_transformer_study_s_sizes_as_stored():
    # The study's page and the residual guide say by hand how large its models are ("29,316 to 806,016
    # parameters"): the smallest and largest of its stored rows (ReZero without LayerNorms is the smallest).
    record = ROOT / "docs" / "results" / "transformer-depth-tinyshakespeare.json"
    if not record.exists():
        pytest.skip("the study's result is not stored")
    sizes = [row["parameters"] for row in json.loads(record.read_text())["result"]["rows"]]
    stored = f"{min(sizes):,} to {max(sizes):,} parameters"
    for page in ("docs/results/transformer.md", "docs/guide/residual.md"):
        text = " ".join((ROOT / page).read_text().split())
        quoted = [" ".join(m) for m in re.findall(r"(\d[\d,]{4,}) (to) (\d[\d,]{4,}) (parameters)", text)]
        assert quoted, f"{page} no longer quotes the study's sizes: update this test"
        assert all(q == stored for q in quoted), f"{page} says {quoted}, the stored study {stored}"
