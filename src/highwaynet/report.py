"""What every report shares: figures (matplotlib, PNG), Markdown tables, comparisons, a run's own
report, and the self-contained HTML page of any report.

Each recipe writes its own report (``write_report`` in :mod:`highwaynet.recipes.depth` and the
others) from these pieces; nothing here knows a recipe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ._checks import check_path  # noqa: E402
from .training import files  # noqa: E402

__all__ = ["FIGURE_WIDTH", "SHOWN_WIDTH", "SMALLEST_TEXT", "bullets", "compare", "diverged", "diverged_rule",
           "environment_text", "findings", "legible", "loss_cell", "markdown_table", "paired_resolves", "paired_text",
           "run_verdicts", "save_figure", "seeds_cell", "shown_points", "subplots", "with_rule", "whole_numbers",
           "write_html", "write_run_report"]


#: How wide a report's figure is shown, in pixels: the docs' text column (furo's 46em) and about a report
#: page's. A figure wider than that in pixels is shown scaled down, and its text with it.
SHOWN_WIDTH = 736
#: The width, in inches, a figure of several panels is drawn at: at 120 dots an inch it is shown at
#: ``SHOWN_WIDTH`` (scaled by 0.77), so that matplotlib's 10-point text shows 12.8 pixels high.
FIGURE_WIDTH = 8.0
#: The smallest text a saved figure holds, in pixels as shown (:func:`save_figure` raises any smaller).
SMALLEST_TEXT = 11.0


def subplots(*args: Any, **kwargs: Any) -> Any:
    """``matplotlib.pyplot.subplots``, drawing to files only (the Agg backend: no display needed)."""
    return plt.subplots(*args, **kwargs)


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """Write ``fig`` as a PNG at ``path`` (:func:`highwaynet.training.files.save_figure`: in one step, never
    through a link, listed in its folder's marker) and close it; its text first made legible as shown
    (:func:`legible`)."""
    legible(fig, dpi)
    files.save_figure(fig, path, dpi)


def shown_points(fig: Any, dpi: int = 120) -> float:
    """How many pixels a point of ``fig``'s text takes when the figure is shown: at its own size where
    it is narrower than :data:`SHOWN_WIDTH`, else scaled down to that width."""
    return min(float(dpi), SHOWN_WIDTH / fig.get_figwidth()) / 72


def legible(fig: Any, dpi: int = 120) -> None:
    """Raise every text of ``fig`` (titles, labels, ticks, legends, colour bars) that would be shown smaller
    than :data:`SMALLEST_TEXT` pixels (:func:`shown_points`) to that size. A figure drawn at
    :data:`FIGURE_WIDTH` with matplotlib's default sizes needs nothing raised; a wider one gets larger text."""
    from matplotlib.text import Text

    smallest = SMALLEST_TEXT / shown_points(fig, dpi)
    for ax in fig.axes:  # (tick labels are made when drawn: set by their axes)
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                ticks = axis.get_major_ticks() if which == "major" else axis.get_minor_ticks()
                if ticks and ticks[0].label1.get_fontsize() < smallest:
                    axis.set_tick_params(which=which, labelsize=smallest)
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < smallest:
            text.set_fontsize(smallest)


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


def compare(a: str, a_stat: dict[str, float], b: str, b_stat: dict[str, float], digits: int = 3, *,
            higher_is_better: bool = False) -> str:
    """Which of two results (``mean`` and ``std`` over seeds; lower is better, or higher with
    ``higher_is_better``) is ahead, and whether by more than the seeds' spread (the two mean ± std
    intervals do not overlap)."""
    (first, one), (second, two) = sorted(((a, a_stat), (b, b_stat)), key=lambda p: p[1]["mean"],
                                         reverse=higher_is_better)
    if higher_is_better:
        one, two = two, one  # (the interval below first, as for a loss)
    gap = two["mean"] - one["mean"]
    apart = one["mean"] + one["std"] < two["mean"] - two["std"]
    return f"{first} beats {second} by {gap:.{digits}f}, " + ("beyond the seeds' spread" if apart else
                                                              "within the seeds' spread")


def paired_resolves(c: Mapping[str, Any], lower: tuple[str, str]) -> str:
    """What a paired difference (first − second; ``mean``, ``lo``, ``hi`` and ``n`` as
    :func:`~highwaynet.training.run_dir.paired_interval` gives them) resolves: which of ``lower`` (the
    first, the second) its 95% interval puts lower, or none; fewer than two pairs have no interval."""
    if c["n"] < 2:
        return "one seed: no interval" if c["n"] else "no seed to pair"
    return f"{lower[0]} lower" if c["hi"] < 0 else f"{lower[1]} lower" if c["lo"] > 0 else "no difference resolved"


def paired_text(c: Mapping[str, Any], unit: str, lower: tuple[str, str], digits: int = 3) -> str:
    """A paired difference in words: its mean in ``unit``, its 95% interval over the seeds paired and
    what it resolves (:func:`paired_resolves`): ``+0.133 bpc [+0.062, +0.205] (95%, paired over 3
    seeds): the LSTM lower``."""
    if c["n"] < 2:
        return f"{c['mean']:+.{digits}f} {unit} ({paired_resolves(c, lower)})" if c["n"] else paired_resolves(c, lower)
    return (f"{c['mean']:+.{digits}f} {unit} [{c['lo']:+.{digits}f}, {c['hi']:+.{digits}f}] (95%, paired over "
            f"{c['n']} seeds): {paired_resolves(c, lower)}")


def findings(lines: Sequence[str]) -> list[str]:
    """The lines that open a report, under its title: what it found, one bullet a finding (each recipe's
    ``verdicts``, the sentences the docs' results pages print from the same function); none where
    there is nothing to state."""
    return ["**What it found:**", "", *bullets(lines), ""] if lines else []


def bullets(lines: Sequence[str]) -> list[str]:
    """Sentences as a Markdown list, each begun with a capital and ended with a full stop."""
    return [f"- {line[:1].upper()}{line[1:]}." for line in lines]


def diverged(value: float, limit: float = math.inf) -> bool:
    """Whether a loss says its run diverged: not a finite number, or above ``limit`` (a loss no run
    that learnt anything ends with, such as that of guessing uniformly)."""
    return not math.isfinite(value) or value > limit


def loss_cell(value: float, limit: float = math.inf, digits: int = 4) -> str:
    """A table's cell for a loss: the number, or ``diverged`` by :func:`diverged`'s rule (a loss of
    237.2 or NaN is not a result to compare digits of)."""
    return "diverged" if diverged(value, limit) else f"{value:.{digits}f}"


def seeds_cell(stats: dict[str, float], values: Sequence[float], digits: int = 1, limit: float = math.inf) -> str:
    """A table's cell for a result over seeds: ``mean ± std`` (``stats``, of ``values``), or how many of its
    runs diverged (:func:`diverged`: a mean over a diverged run is no result)."""
    from .training.run_dir import format_mean_std

    bad = sum(diverged(v, limit) for v in values)
    return f"diverged ({bad} of {len(values)} seeds)" if bad else format_mean_std(stats, len(values), digits)


def diverged_rule(limit: float = math.inf, why: str = "") -> str:
    """The rule :func:`loss_cell` applied, stated under its table."""
    rule = "*diverged*: the loss is not a finite number"
    return rule + (f" or is above {limit:.2f}" + (f", {why}" if why else "") if math.isfinite(limit) else "")


def with_rule(table: str, rule: str | None = None) -> str:
    """``table``, with :func:`diverged_rule` (or ``rule``) stated under it where a cell of it says *diverged*."""
    return table + (f"\n\n{rule or diverged_rule()}." if "| diverged" in table else "")


def environment_text(env: Mapping[str, Any]) -> str:
    """A run's versions and machine (:func:`highwaynet.training.run_dir.environment`) in words:
    ``highwaynet 0.4.0, torch 2.13.0+cpu, NumPy 2.4.6, Python 3.11.7 on AMD EPYC (2 threads), no GPU;
    Linux-6.1-x86_64``. What a record leaves out is left out."""
    def known(key: str) -> bool:
        return env.get(key) not in (None, "")

    versions = ", ".join(f"{name} {env[key]}" for key, name in (("highwaynet", "highwaynet"), ("torch", "torch"),
                                                                 ("numpy", "NumPy"), ("python", "Python"))
                         if known(key))
    machine = str(env["cpu"]) if known("cpu") else ""
    if known("cpu_threads"):
        threads = env["cpu_threads"]
        machine += f" ({threads} thread{'' if threads == 1 else 's'})"
    if "cuda" in env:
        machine += (", " if machine else "") + (f"GPU: {env['cuda']}" if env["cuda"] else "no GPU")
    text = " on ".join(part for part in (versions, machine.strip()) if part)
    return text + (f"; {env['platform']}" if known("platform") else "")


def run_verdicts(metrics: Sequence[Mapping[str, Any]], monitor: str = "val_loss",
                 test: Mapping[str, float] | None = None) -> list[str]:
    """What one training run found, in sentences (its report's first lines): where it diverged, its best
    epoch by ``monitor`` (the weights ``model.pt`` keeps), and their test metrics where it was tested."""
    lines = []
    bad = [k for k, v in metrics[-1].items() if k.startswith(("train_", "val_")) and not math.isfinite(v)]
    if bad:
        lines.append(f"the run diverged in epoch {metrics[-1]['epoch']}: its {', '.join(bad)} stopped being a finite "
                     f"number, and it ended there")
    scored = [m for m in metrics if math.isfinite(m.get(monitor, math.nan))]
    if scored:
        best = (max if monitor.endswith("acc") else min)(scored, key=lambda m: m[monitor])
        lines.append(f"the best epoch by {monitor} is epoch {best['epoch']} of {len(metrics)}, with {monitor} "
                     f"{best[monitor]:.4f}")
    if test:
        lines.append("tested with that epoch's weights: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
    return lines


def write_run_report(run_dir: str | Path) -> Path:
    """``curves.png`` (each metric by epoch, training and validation) and ``report.md`` for one
    training run's folder (``highwaynet train ...``, or one run of a sweep): rewritten each time,
    as a resumed run adds epochs."""
    from .training.run_dir import count, read_json, read_metrics

    run_dir = check_path("run_dir", run_dir)
    metrics = read_metrics(run_dir)
    if not metrics:
        raise FileNotFoundError(f"{run_dir} has no finished epoch (no metrics.jsonl) to report")
    config = read_json(run_dir / "config.json", optional=True)
    recipe = config.get("recipe", "?") if isinstance(config, dict) else "?"
    names = [k[len("train_"):] for k in metrics[0] if k.startswith("train_")]  # loss, then acc / bpc / ppl
    fig, axes = subplots(1, len(names), figsize=(min(FIGURE_WIDTH, 4.5 * len(names)), 3.4), squeeze=False)
    epochs = [m["epoch"] for m in metrics]
    for ax, name in zip(axes[0], names, strict=True):
        for split, style in (("train", "o-"), ("val", "s--")):
            if f"{split}_{name}" in metrics[0]:
                ax.plot(epochs, [m[f"{split}_{name}"] for m in metrics], style, ms=3, label=split)
        ax.set(xlabel="epoch", title=name)
        whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3)
        ax.legend()
    save_figure(fig, run_dir / "curves.png")
    columns = [k for k in metrics[0] if k.startswith(("train_", "val_"))]
    results = read_json(run_dir / "results.json", optional=True)
    results = results if isinstance(results, dict) else {}
    settings = config.get("config") if isinstance(config, dict) else None  # (as read: an edited file may hold anything)
    train = settings.get("train") if isinstance(settings, dict) else None
    monitor = train.get("monitor", "val_loss") if isinstance(train, dict) else "val_loss"
    test = results.get("test") if isinstance(results.get("test"), dict) else None
    table = markdown_table(["epoch", "lr", *columns],
                           [[m["epoch"], f"{m['lr']:.3g}", *(loss_cell(m[c], digits=3) for c in columns)]
                            for m in metrics])
    text = [f"# Training run: {run_dir.name} ({recipe})", "",
            *findings(run_verdicts(metrics, str(monitor), test)),
            f"{count(len(metrics), 'epoch')}, {sum(m['time'] for m in metrics):.0f} s of training.", "",
            "![curves](curves.png)", "", with_rule(table), ""]
    if results:
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


def write_html(folder: str | Path) -> Path:
    """``report.html`` beside a folder's ``report.md``: one self-contained page, figures inlined,
    with the folder's configuration, versions and time taken appended.

    Only the folder's own files are read (regular files, not links, that highwaynet wrote there), and
    only the figures it wrote are inlined: a page made from a folder holds nothing from elsewhere.

    It takes no run lock: a run in progress gets a page of its epochs so far, as the run writes none of
    the report's files; the folder's marker, which both update, is locked for each update
    (:mod:`highwaynet.training.files`).
    """
    import base64
    import html
    import re

    import markdown

    from .training.checkpoint import identity_in_folder

    folder = check_path("folder", folder)
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

    footer = f"<p><small>Page rendered with {html.escape(environment_text(environment()))}.</small></p>"
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(folder.name)}</title>"
            f"<style>{style}</style></head><body>{body}{footer}</body></html>")
    out = folder / "report.html"
    files.write_text(out, page)
    return out
