"""Figures (matplotlib, PNG) and Markdown reports of finished experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["markdown_table", "write_rhn_depth_report", "write_sentences_report"]


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _metric(level: str) -> tuple[str, str]:
    return ("bpc", "bits per character") if level == "char" else ("ppl", "perplexity")


def write_rhn_depth_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (test metric against recurrence depth, LSTM as a line) and ``report.md``."""
    corpora = summary["corpora"]
    fig, axes = plt.subplots(1, len(corpora), figsize=(5 * len(corpora), 3.6), squeeze=False)
    sections = []
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        rows = result["rhn"]
        depths = [r["depth"] for r in rows]
        ax.plot(depths, [r["test"][key] for r in rows], "o-", label="RHN (test)")
        ax.plot(depths, [r["final"][f"val_{key}"] for r in rows], "s--", alpha=0.6, label="RHN (valid)")
        if "lstm" in result:
            ax.axhline(result["lstm"]["test"][key], color="C3", ls=":", label="LSTM, same parameters and time")
        ax.set(xlabel="recurrence depth", ylabel=f"{label} (lower is better)", xticks=depths,
               title=f"{entry}, {summary['config']['budget']:,} parameters")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        table = markdown_table(
            ["model", "depth", "hidden", "parameters", "epochs", f"valid {key}", f"test {key}", "train time (s)"],
            [[r["model"].upper(), r["depth"] or "-", r["hidden"], r["parameters"], r["epochs"],
              r["final"][f"val_{key}"], r["test"][key], r["train_seconds"]]
             for r in rows + ([result["lstm"]] if "lstm" in result else [])])
        best = min(rows, key=lambda r: r["test"][key])
        text = [f"## {entry}", "", table, ""]
        if "lstm" in result:
            lstm = result["lstm"]
            verdict = "beats" if best["test"][key] < lstm["test"][key] else "does not beat"
            text += [f"The best RHN (depth {best['depth']}, test {key} {best['test'][key]:.3f}) {verdict} the LSTM "
                     f"of equal parameters trained for the same time ({lstm['train_seconds']} s, "
                     f"test {key} {lstm['test'][key]:.3f}).", ""]
        text += [f"Sample from the depth-{best['depth']} RHN (temperature 0.8):", "", "```",
                 best["sample"].strip(), "```", ""]
        sections.append("\n".join(text))
    fig.tight_layout()
    fig.savefig(out / "depth.png", dpi=120)
    plt.close(fig)
    report = out / "report.md"
    report.write_text("\n".join([
        "# RHN: recurrence depth at a fixed parameter budget", "",
        f"Total time {summary['seconds']:.0f} s. Each RHN's state size is chosen so that the whole model "
        f"(embedding tied to the decoder) has about {summary['config']['budget']:,} parameters; every RHN "
        "trains for the same number of steps; the LSTM trains for as long as the best RHN did.", "",
        "![depth](depth.png)", "", *sections]))
    return report


def write_sentences_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth-<task>.png`` (test accuracy against stack depth, BiLSTM vs HBiLSTM, error bars) and ``report.md``."""
    from .recipes.sentences import KIM_CNN_RAND

    table = summary["table"]
    lines = ["# Sentence classification: highway BiLSTM stacks", "",
             f"Total time {summary['seconds']:.0f} s. Test accuracy (%), mean ± std over seeds (SST, TREC) or "
             "cross-validation folds (MR, Subj); the best validation epoch's weights are tested. Embeddings are "
             "randomly initialised and SST is trained on sentences only (no phrases), as Kim's CNN-rand.", ""]
    for task in dict.fromkeys(row["task"] for row in table):
        rows = [r for r in table if r["task"] == task]
        lines += [f"## {task}", "", markdown_table(
            ["encoder", "layers", "runs", "test accuracy (%)"],
            [[r["encoder"], r["layers"], r["runs"], f"{r['mean']:.1f} ± {r['std']:.1f}"] for r in rows]
            + [["Kim (2014) CNN-rand, published", "-", "-", f"{KIM_CNN_RAND.get(task, float('nan')):.1f}"]]), ""]
        stacks = {e: sorted((r for r in rows if r["encoder"] == e), key=lambda r: r["layers"])
                  for e in ("bilstm", "hbilstm")}
        if all(len(v) > 1 for v in stacks.values()):
            fig, ax = plt.subplots(figsize=(5.5, 3.6))
            for encoder, label in (("bilstm", "BiLSTM stack"), ("hbilstm", "highway BiLSTM stack")):
                rs = stacks[encoder]
                ax.errorbar([r["layers"] for r in rs], [r["mean"] for r in rs], yerr=[r["std"] for r in rs],
                            marker="o", capsize=3, label=label)
            ax.axhline(KIM_CNN_RAND.get(task, float("nan")), color="gray", ls=":", label="Kim CNN-rand (published)")
            ax.set(xlabel="layers in the stack", ylabel="test accuracy (%)", title=f"{task}: accuracy vs depth")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out / f"depth-{task}.png", dpi=120)
            plt.close(fig)
            lines += [f"![{task} depth](depth-{task}.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
