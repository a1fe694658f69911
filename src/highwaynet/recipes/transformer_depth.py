"""The depth study redrawn for Transformers: does a plain residual Transformer stop training as it
deepens, where gated residual connections keep training?

The highway paper's Fig. 1 trains plain and highway MLPs of 10 to 100 layers; here causal
character-level Transformers of ``depths`` blocks (Tiny Shakespeare, nanoGPT's ``shakespeare_char``
task) train in each variant ``NORM-KIND``: the LayerNorms before each sublayer (``pre``), after each
residual connection (``post``, the original Transformer's) or nowhere (``none``), and the connection
itself plain (``residual``), highway-gated, GTrXL-gated or ReZero. No warm-up by default: the
original post-LN Transformer is known to need one as it deepens (Xiong et al., 2020; Liu et al.,
2020), and the question is which connections do without.

As in :mod:`highwaynet.recipes.depth`, each depth and variant's learning rate is the one of ``lrs``
whose first-seed run ends with the lowest validation loss; the other seeds train at it. A run whose
numbers stop being finite ends there and counts as diverged. Every run is an ``lm`` run folder
(``highwaynet generate`` samples from any of them). Writes ``depth.png`` (validation loss against
steps, one panel per depth), ``gates.png`` (the mean gate of each block, gated variants) and
``report.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch

from ..config import LMConfig, TransformerDepthConfig
from ..data.corpora import Corpus, load_corpus
from ..report import (
    FIGURE_WIDTH,
    compare,
    diverged_rule,
    findings,
    loss_cell,
    markdown_table,
    save_figure,
    subplots,
    whole_numbers,
)
from ..training import read_metrics
from ..training.progress import SweepProgress
from ..training.run_dir import finish_sweep, finite_or_inf, format_mean_std, mean_std, run_once, start_sweep, write_text
from . import lm

__all__ = ["TransformerDepthConfig", "mean_gates", "run", "verdicts", "write_report"]


def _config(config: TransformerDepthConfig, depth: int, variant: str, lr: float, seed: int) -> LMConfig:
    norm, _, kind = variant.partition("-")
    base = asdict(config.base)
    train = {**base["train"], "lr": lr, "seed": seed, "warmup_steps": config.warmup}
    return LMConfig(**{**base, "layers": depth, "norm": norm, "residual": kind, "train": train})


@torch.no_grad()
def mean_gates(run_dir: Path, corpus: Corpus, batch: int = 16) -> dict[str, list[float]] | None:
    """The mean gate of each block's attention and MLP connection (``T`` for highway, ``z`` for
    GTrXL, ``α`` for ReZero), over the first validation window of ``batch`` streams, with the run's
    best weights; None for a plain residual model (its branches are added whole)."""
    from ..analysis import record_gates
    from ..training.language_model import batchify

    model, config, _ = lm.load_trained(run_dir)
    if config.residual == "residual":
        return None
    window = batchify(corpus.valid, batch)[: config.bptt]
    with record_gates(model) as record:
        model(window)
    means = record.mean_per_gate().tolist()  # (blocks × [attention, MLP]) in module order
    return {"attention": means[0::2], "mlp": means[1::2]}


def run(config: TransformerDepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the search and the seeds into ``out``; write ``summary.json``, the figures and ``report.md``."""
    config = config.resolved()
    out, config = start_sweep(out, "transformer-depth", config, resume=resume, restart=restart, log=log)
    start = time.perf_counter()
    corpus = load_corpus(config.base.corpus, "char", data_dir, download=download)
    runs_each = len(config.lrs) + len(config.seeds) - 1
    steps = config.base.train.epochs * (config.base.steps_per_epoch or 1)
    sweep = SweepProgress([((depth, variant), depth * steps, variant) for depth in config.depths
                           for variant in config.variants for _ in range(runs_each)])

    def train(cfg: LMConfig, run_dir: Path, what: str) -> dict[str, Any]:
        return cast(dict, run_once(run_dir, lambda resume: lm.run(cfg, run_dir, resume=resume, corpus=corpus, log=log,
                                                                  progress=progress),
                                   log, what, config=cfg, progress=sweep, required=True))

    rows = []
    first = config.seeds[0]
    for depth in config.depths:
        for variant in config.variants:
            folder = out / f"depth{depth}" / variant
            search = {lr: train(_config(config, depth, variant, lr, first), folder / f"lr{lr:g}-seed{first}",
                                f"{depth} blocks, {variant}: lr {lr:g}, seed {first}") for lr in config.lrs}
            best_lr = min(config.lrs, key=lambda lr: finite_or_inf(search[lr]["final"]["val_loss"]))
            run_dirs = [folder / f"lr{best_lr:g}-seed{seed}" for seed in config.seeds]
            results = [search[best_lr]] + [
                train(_config(config, depth, variant, best_lr, seed), run_dir,
                      f"{depth} blocks, {variant}: lr {best_lr:g}, seed {seed}")
                for seed, run_dir in zip(config.seeds[1:], run_dirs[1:], strict=True)]
            final = [r["final"]["val_loss"] for r in results]
            trained = [v for v in final if math.isfinite(v)]
            gates = [] if variant.endswith("-residual") else [  # (a plain residual has no gates to read)
                mean_gates(d, corpus) for d, v in zip(run_dirs, final, strict=True) if math.isfinite(v)]
            rows.append({
                "depth": depth, "variant": variant, "lr": best_lr, "parameters": results[0]["parameters"],
                "search": {f"{lr:g}": search[lr]["final"]["val_loss"] for lr in config.lrs},
                # (over the seeds that did not diverge, which "diverged" counts)
                "val_loss": mean_std(trained) if trained else {"mean": math.nan, "std": math.nan},
                "val_loss_values": final,
                "diverged": sum(not math.isfinite(v) for v in final),
                "train_seconds": mean_std([r["train_seconds"] for r in results]),
                "curves": [[m["val_loss"] for m in read_metrics(d)] for d in run_dirs],
                "gates": _mean_over_seeds([g for g in gates if g is not None]),
                "run_dirs": [str(d) for d in run_dirs],
            })
    summary = {"recipe": "transformer-depth", "config": asdict(config), "rows": rows,
               "steps_per_epoch": config.base.steps_per_epoch, "unigram_nats": corpus.unigram_entropy_bits("valid")
               * math.log(2), "seconds": round(time.perf_counter() - start, 1)}
    return finish_sweep(out, summary, write_report)


def _mean_over_seeds(gates: list[dict[str, list[float]]]) -> dict[str, list[float]] | None:
    if not gates:
        return None
    return {part: [sum(g[part][i] for g in gates) / len(gates) for i in range(len(gates[0][part]))]
            for part in gates[0]}


# -- the report ---------------------------------------------------------------------------------

_COLOURS = {"post-residual": "C0", "pre-residual": "C2", "pre-highway": "C1", "pre-gtrxl": "C3", "none-rezero": "C4"}


def _trained(row: dict[str, Any], unigram: float) -> bool:
    """Whether every seed's run learned more than the characters' frequencies (and none diverged)."""
    return row["diverged"] == 0 and all(v < unigram - 0.1 for v in row["val_loss_values"])


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the study measured, depth by depth: which variants failed to train (diverged, or no better
    than the characters' frequencies), and the best variant against the runner-up, against the
    seeds' spread."""
    unigram, lines = summary["unigram_nats"], []
    for depth in summary["config"]["depths"]:
        rows = [r for r in summary["rows"] if r["depth"] == depth]
        failed = [r["variant"] for r in rows if not _trained(r, unigram)]
        ranked = sorted((r for r in rows if _trained(r, unigram)), key=lambda r: r["val_loss"]["mean"])
        line = f"{depth} blocks: " + (f"failed to train: {', '.join(failed)}" if failed else "every variant trained")
        if len(ranked) > 1:
            line += "; " + compare(ranked[0]["variant"], ranked[0]["val_loss"], ranked[1]["variant"],
                                   ranked[1]["val_loss"])
        elif ranked:
            line += f"; only {ranked[0]['variant']} trained"
        lines.append(line)
    return lines


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (validation loss against steps, one panel per depth, mean over seeds), ``gates.png``
    (each gated variant's mean gate per block at the deepest depth) and ``report.md``."""
    import numpy as np

    config, rows = summary["config"], summary["rows"]
    depths, per_epoch = config["depths"], summary["steps_per_epoch"] or 1
    columns = min(2, len(depths))  # (panels two a row: each legible at the page's width)
    rows_of_panels = -(-len(depths) // columns)
    fig, axes = subplots(rows_of_panels, columns, figsize=(FIGURE_WIDTH, 3.2 * rows_of_panels), squeeze=False,
                         sharey=True)
    panels = list(axes.flat)
    for ax in panels[len(depths):]:
        ax.axis("off")
    for ax, depth in zip(panels, depths, strict=False):
        for row in (r for r in rows if r["depth"] == depth):
            curves = np.array([c + [math.nan] * (max(map(len, row["curves"])) - len(c)) for c in row["curves"]])
            steps = per_epoch * np.arange(1, curves.shape[1] + 1)
            mean = np.nanmean(curves, axis=0) if np.isfinite(curves).any() else curves[0]
            colour = _COLOURS.get(row["variant"])
            ax.plot(steps, mean, color=colour, label=f"{row['variant']} (lr {row['lr']:g})")
            if curves.shape[0] > 1:
                ax.fill_between(steps, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), color=colour, alpha=0.15)
        ax.axhline(summary["unigram_nats"], color="gray", ls=":", lw=1)
        ax.set(title=f"{depth} blocks", xlabel="step")
        whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for row in axes:
        row[0].set_ylabel("validation loss (nats/char)")
    fig.suptitle("Causal Transformers on Tiny Shakespeare (characters), by residual connection", y=1.0)
    save_figure(fig, out / "depth.png")

    gated = [r for r in rows if r["depth"] == max(depths) and r.get("gates")]
    figures = ["![validation loss against steps](depth.png)", ""]
    if gated:
        fig, axes = subplots(1, 2, figsize=(FIGURE_WIDTH, 3.2), squeeze=False)
        for ax, part in zip(axes[0], ("attention", "mlp"), strict=True):
            for row in gated:
                ax.plot(range(1, len(row["gates"][part]) + 1), row["gates"][part], "o-", ms=3,
                        color=_COLOURS.get(row["variant"]), label=row["variant"])
            ax.set(title=f"{part} connections, {max(depths)} blocks", xlabel="block", ylabel="mean gate")
            whole_numbers(ax.xaxis)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
        save_figure(fig, out / "gates.png")
        figures += ["The mean gate of each block (highway: T, GTrXL: z, ReZero: α), first validation window, "
                    "best weights, mean over seeds:", "", "![mean gate per block](gates.png)", ""]
    seeds = len(config["seeds"])
    table = markdown_table(
        ["blocks", "variant", "parameters", "lr", "final validation loss", "diverged", "train time (s)"],
        [[r["depth"], r["variant"], f"{r['parameters']:,}", f"{r['lr']:g}",
          format_mean_std(r["val_loss"], seeds - r["diverged"], 3), f"{r['diverged']} of {seeds}",
          f"{r['train_seconds']['mean']:.0f}"] for r in rows])
    search = markdown_table(["blocks", "variant", *(f"lr {lr:g}" for lr in config["lrs"])],
                            [[r["depth"], r["variant"], *(loss_cell(v, digits=3) for v in r["search"].values())]
                             for r in rows])
    base, train = config["base"], config["base"]["train"]
    report = out / "report.md"
    write_text(report, "\n".join([
        "# Residual, highway, GTrXL and ReZero connections in deep Transformers", "", *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Character-level causal Transformers on {base['corpus']}: width "
        f"{base['hidden']}, {base['heads']} heads, context {base['bptt']}, batch {base['batch_size']}, "
        f"{train['epochs'] * per_epoch} steps of {train['optimizer']} ({train['schedule']} rate, gradient norm "
        f"clipped at {train['grad_clip']}), " + (f"{config['warmup']} warm-up steps" if config["warmup"] else
                                                 "no warm-up") +
        f", dropout {base['output_dropout']}; seeds {config['seeds']}. Each depth and variant's learning rate is the "
        f"one of {config['lrs']} whose first seed ends with the lowest validation loss. A variant failed to train "
        f"where a seed diverged or ended no better than the characters' frequencies "
        f"({summary['unigram_nats']:.2f} nats, the dotted line).", "", *figures, table, "",
        f"Learning-rate search: final validation loss of the first seed at each rate ({diverged_rule()}).", "",
        search, ""]))
    return report
