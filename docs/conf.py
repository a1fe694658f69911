"""Sphinx configuration of highwaynet's documentation: ``sphinx-build -W -b html docs docs/_build/html``."""

import logging
import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

import highwaynet  # noqa: E402

project = "highwaynet"
author = "highwaynet developers"
copyright = "2026, highwaynet developers"
release = version = highwaynet.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "sphinx-mathjax-offline",  # MathJax from the package, not a CDN: the site loads nothing from elsewhere
    "results",  # docs/_ext/results.py: the results and performance tables from stored JSON
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "notes", "results/*.py", "gallery/*.ipynb", "gallery/*.py", "gallery/*.zip",
                    "gallery/*.json", "gallery/*.md5", "gallery/*.codeobj.json", "_generated/*/*.md",
                    "_generated/performance.md", "_generated/compiled.md"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"highwaynet {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]  # (display equations scroll inside the column: tests/test_site_browser.py)
html_favicon = "_static/favicon.svg"  # (a browser asks for one on every site; without it, a 404)

# The docstrings: Google style (Args:, Returns:) with PyTorch's own sections.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = ["Shape", "Inputs", "Outputs"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}
autodoc_preserve_defaults = True

# The gallery: every example runs at build time, on the CPU; the TREC one where TREC's files are in
# $HIGHWAYNET_DATA or ~/.cache/highwaynet (a build offline and without them shows its code unrun).
_DATA = Path(os.environ.get("HIGHWAYNET_DATA", Path.home() / ".cache" / "highwaynet"))
_RUN = r"\.py$" if (_DATA / "TREC.train.all").is_file() else r"^(?!.*highway_lstm_classifier).*\.py$"
sphinx_gallery_conf = {
    "examples_dirs": str(DOCS.parent / "examples"),
    "gallery_dirs": "gallery",
    "filename_pattern": _RUN,
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "plot_gallery": "True",
}
# Sphinx logs at INFO; the ONNX exporter's passes would fill the export example's output with theirs.
for _name in ("onnxscript", "onnx_ir", "torch.onnx"):
    logging.getLogger(_name).setLevel(logging.WARNING)
