"""What every report shares: figures (matplotlib, PNG), Markdown tables, comparisons, a run's own
report, and the self-contained HTML page of any report.

Each recipe writes its own report (``write_report`` in :mod:`highwaynet.recipes.depth` and the
others) from these pieces; nothing here knows a recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .training import files  # noqa: E402

__all__ = ["compare", "markdown_table", "save_figure", "subplots", "whole_numbers", "write_html", "write_run_report"]


def subplots(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots``, drawing to files only (the Agg backend: no display needed)."""
    return plt.subplots(*args, **kwargs)


def save_figure(fig: Any, path: Path, dpi: int = 120) -> None:
    """Write ``fig`` as a PNG at ``path`` (:func:`highwaynet.training.files.save_figure`: in one step, never
    through a link, listed in its folder's marker) and close it."""
    files.save_figure(fig, path, dpi)


def whole_numbers(axis: Any) -> None:
    """Ticks only at whole numbers, for an axis that counts layers or epochs (no layer 2.5)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table of ``rows`` under ``header`` (floats to three decimals)."""
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def compare(a: str, a_stat: dict[str, float], b: str, b_stat: dict[str, float], digits: int = 3) -> str:
    """Which of two results (``mean`` and ``std`` over seeds, lower is better) is ahead, and whether
    by more than the seeds' spread (the two mean ± std intervals do not overlap)."""
    (first, one), (second, two) = sorted(((a, a_stat), (b, b_stat)), key=lambda p: p[1]["mean"])
    gap = two["mean"] - one["mean"]
    apart = one["mean"] + one["std"] < two["mean"] - two["std"]
    return f"{first} beats {second} by {gap:.{digits}f}, " + ("beyond the seeds' spread" if apart else
                                                              "within the seeds' spread")


def write_run_report(run_dir: Path) -> Path:
    """``curves.png`` (each metric by epoch, training and validation) and ``report.md`` for one
    training run's folder (``highwaynet train ...``, or one run of a sweep): rewritten each time,
    as a resumed run adds epochs."""
    from .training.run_dir import count, read_json, read_metrics

    metrics = read_metrics(run_dir)
    if not metrics:
        raise FileNotFoundError(f"{run_dir} has no finished epoch (no metrics.jsonl) to report")
    config = read_json(run_dir / "config.json", optional=True)
    recipe = config.get("recipe", "?") if isinstance(config, dict) else "?"
    names = [k[len("train_"):] for k in metrics[0] if k.startswith("train_")]  # loss, then acc / bpc / ppl
    fig, axes = subplots(1, len(names), figsize=(4.5 * len(names), 3.4), squeeze=False)
    epochs = [m["epoch"] for m in metrics]
    for ax, name in zip(axes[0], names, strict=True):
        for split, style in (("train", "o-"), ("val", "s--")):
            if f"{split}_{name}" in metrics[0]:
                ax.plot(epochs, [m[f"{split}_{name}"] for m in metrics], style, ms=3, label=split)
        ax.set(xlabel="epoch", title=name)
        whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, run_dir / "curves.png")
    columns = [k for k in metrics[0] if k.startswith(("train_", "val_"))]
    text = [f"# Training run: {run_dir.name} ({recipe})", "",
            f"{count(len(metrics), 'epoch')}, {sum(m['time'] for m in metrics):.0f} s of training.", "",
            "![curves](curves.png)", "",
            markdown_table(["epoch", "lr", *columns], [[m["epoch"], f"{m['lr']:.3g}", *(m[c] for c in columns)]
                                                        for m in metrics]), ""]
    results = read_json(run_dir / "results.json", optional=True)
    if isinstance(results, dict):
        if isinstance(results.get("test"), dict):
            text += ["Test set, with the best validation epoch's weights: "
                     + ", ".join(f"{k} {v:.4f}" for k, v in results["test"].items()) + ".", ""]
        if isinstance(results.get("sample"), str):
            text += ["A sample:", "", "```", results["sample"].strip(), "```", ""]
    report = run_dir / "report.md"
    files.write_text(report, "\n".join(text))
    return report


def _no_report(folder: Path, found: dict[str, Any] | None) -> str:
    """Why ``folder`` has no report to render, and what to do."""
    what = ("give a run folder ('highwaynet train ... --out DIR'), a 'reproduce' output folder, or its gates/ or "
            "lesion/ folder")
    if not folder.exists():
        return f"{folder} does not exist: {what}"
    if found is None:
        return f"{folder} is not a folder highwaynet wrote: {what}"
    if found["kind"] == "sweep":
        return (f"{folder} is a sweep whose report is not written yet: a sweep writes it when all its runs are done. "
                f"Finish it by running its command again with --out {folder} (it goes on where it stopped), or report "
                f"one of its runs (highwaynet report {folder}/<a run's folder>)")
    return f"{folder} holds no finished epoch nor report yet: its run has not finished an epoch"


def write_html(folder: Path) -> Path:
    """``report.html`` beside a folder's ``report.md``: one self-contained page, figures inlined,
    with the folder's configuration, versions and time taken appended.

    Only the folder's own files are read (regular files, not links, that highwaynet wrote there), and
    only the figures it wrote are inlined: a page made from a folder holds nothing from elsewhere.
    """
    import base64
    import html
    import json
    import re

    import markdown

    from .training.checkpoint import identity_in_folder

    folder = Path(folder)
    found = files.adopt(folder, identity=identity_in_folder)  # (a run whose marker was lost keeps its identity)
    own = files.written(folder)
    if found is not None and found["kind"] == "run" and "metrics.jsonl" in own and (folder / "metrics.jsonl").exists():
        write_run_report(folder)  # one training run: its report from its metrics
        own = files.written(folder)
    source = files.read_regular(folder, "report.md") if "report.md" in own else None
    if source is None:
        raise FileNotFoundError(_no_report(folder, found))
    text = source.decode("utf-8", errors="replace")
    for name in ("sweep.json", "config.json"):
        data = files.read_regular(folder, name) if name in own else None
        if data is not None:
            text += f"\n\n## Configuration ({name})\n\n```json\n{data.decode('utf-8', errors='replace').strip()}\n```\n"
    # Every string is shown as text, never read as HTML: a folder's name, a user's sentences or
    # settings may hold '<'. (Python-Markdown's documented way: without its raw-HTML rules, HTML in
    # the source is escaped like any text.)
    converter = markdown.Markdown(extensions=["tables", "fenced_code"])
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    body = converter.convert(text)

    def inline(match: re.Match) -> str:
        name = html.unescape(match.group(1))
        image = files.read_regular(folder, name) if name in own else None
        if image is None:
            return match.group(0)
        return f'src="data:image/png;base64,{base64.b64encode(image).decode()}"'

    body = re.sub(r'src="([^"]+\.png)"', inline, body)
    from .training.run_dir import environment

    footer = f"<p><small>Rendered with {html.escape(json.dumps(environment()))}</small></p>"
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(folder.name)}</title>"
            f"<style>{style}</style></head><body>{body}{footer}</body></html>")
    out = folder / "report.html"
    files.write_text(out, page)
    return out
