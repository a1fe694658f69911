"""The sentence-classification sweep's report: its tables by task, and accuracy against stack depth
beside Kim's published CNN-rand figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..models.sentence import ENCODER_DESCRIPTIONS, STACKED_ENCODERS
from ..report import compare, findings, markdown_table, save_figure, subplots
from ..training.run_dir import count, format_mean_std, write_text

__all__ = ["KIM_CNN_RAND", "plot_depth", "verdicts", "write_report"]

#: Kim (2014)'s CNN-rand test accuracy (%) on each of the five sets, as published.
KIM_CNN_RAND = {"mr": 76.1, "sst1": 45.0, "sst2": 82.7, "subj": 89.6, "trec": 91.2}


def plot_depth(series: dict[str, list[dict[str, Any]]], task: str, path: Path) -> None:
    """Test accuracy against stack depth: one line per label, each point ``{"layers", "mean", "std"}``
    (error bars: ``std``), and Kim's published CNN-rand accuracy for ``task`` as a dotted line."""

    fig, ax = subplots(figsize=(5.5, 3.6))
    for label, points in series.items():
        points = sorted(points, key=lambda r: r["layers"])
        ax.errorbar([r["layers"] for r in points], [r["mean"] for r in points], yerr=[r["std"] for r in points],
                    marker="o", capsize=3, label=label)
    if task in KIM_CNN_RAND:  # (not for a user's own set)
        ax.axhline(KIM_CNN_RAND[task], color="gray", ls=":", label="Kim CNN-rand (published)")
    ax.set(xlabel="layers in the stack", ylabel="test accuracy (%)", title=f"{task}: accuracy vs depth",
           xticks=sorted({r["layers"] for points in series.values() for r in points}))
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=120)


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the sweep found, a sentence per task (the report's first lines, and the docs' results page's):
    its best encoder against Kim's published CNN-rand, and at the deepest stack both kinds of stack
    against each other, against the spread over seeds (or folds)."""
    lines = []
    for task in dict.fromkeys(row["task"] for row in summary["table"]):
        rows = [r for r in summary["table"] if r["task"] == task]
        best = max(rows, key=lambda r: r["mean"])
        layers = f", {count(best['layers'], 'layer')}" if best["encoder"] in STACKED_ENCODERS else ""
        line = f"{task}: the best encoder, {best['encoder']}{layers}, reaches {format_mean_std(best, best['runs'])}%"
        if task in KIM_CNN_RAND:
            line += f" test accuracy (Kim's CNN-rand, published: {KIM_CNN_RAND[task]:.1f}%)"
        stacks = {e: {r["layers"]: r for r in rows if r["encoder"] == e} for e in STACKED_ENCODERS}
        shared = set.intersection(*(set(by_layers) for by_layers in stacks.values()))
        deepest = max(shared, default=None)
        if deepest is not None and deepest > 1:
            (a, b) = STACKED_ENCODERS[:2]
            line += f"; at {deepest} layers, " + compare(a, stacks[a][deepest], b, stacks[b][deepest], 1,
                                                        higher_is_better=True)
        lines.append(line)
    return lines


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth-<task>.png`` (test accuracy against stack depth, BiLSTM vs HBiLSTM, error bars) and ``report.md``."""
    table = summary["table"]
    encoders = dict.fromkeys(row["encoder"] for row in table)
    lines = ["# Sentence classification", "", *findings(verdicts(summary)),
             "Encoders: " + "; ".join(f"`{e}`, {ENCODER_DESCRIPTIONS[e]}" for e in encoders) + ".", "",
             f"{count(len(summary['runs']), 'run')}, {sum(r['seconds'] for r in summary['runs']):.0f} s of "
             "training summed over them (runs of a sweep may have run side by side). Test accuracy (%), mean ± std "
             "over seeds (SST, TREC) or cross-validation folds (MR, Subj); the best validation epoch's weights are "
             "tested. Embeddings are randomly initialised, as in Kim's CNN-rand; SST is trained on sentences only "
             "(Kim's SST runs also train on the treebank's phrases).", ""]
    settings = summary.get("settings")
    if settings:  # each run's own, from its config.json (a resumed sweep keeps what its runs started with)
        varying = "; ".join(f"`{k}` " + ", ".join(map(str, v)) for k, v in settings["varying"].items())
        lines += ["Settings of these runs: " + ", ".join(f"`{k}={v}`" for k, v in settings["shared"].items())
                  + "." + (f" Differing between runs: {varying}." if varying else ""), ""]
    for task in dict.fromkeys(row["task"] for row in table):
        rows = [r for r in table if r["task"] == task]
        lines += [f"## {task}", "", markdown_table(
            ["encoder", "layers", "runs", "test accuracy (%)"],
            [[r["encoder"], r["layers"] if r["encoder"] in STACKED_ENCODERS else "-", r["runs"],
              format_mean_std(r, r["runs"])] for r in rows]
            + ([["Kim (2014) CNN-rand, published", "-", "-", f"{KIM_CNN_RAND[task]:.1f}"]]
               if task in KIM_CNN_RAND else [])), ""]  # (no published figure for a user's own set)
        stacks = {e: [r for r in rows if r["encoder"] == e] for e in STACKED_ENCODERS}
        if all(len(v) > 1 for v in stacks.values()):
            plot_depth({"BiLSTM stack": stacks["bilstm"], "highway BiLSTM stack": stacks["hbilstm"]},
                       task, out / f"depth-{task}.png")
            lines += [f"![{task} depth](depth-{task}.png)", ""]
    report = out / "report.md"
    write_text(report, "\n".join(lines))
    return report
