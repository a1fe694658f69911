"""Reproduction: what recurrence depth buys an RHN at a fixed parameter budget (Zilly et al., 2017, Fig. 4),
and the RHN against an LSTM of equal parameters trained for the same time; or (``tune``) RHN against
LSTM under equal tuning (Melis et al., 2018: :mod:`.tuning`).

For each corpus, an RHN language model is trained at each recurrence depth with its state size
chosen so that the whole model has ``budget`` parameters; then an LSTM language model of the same
budget is trained for as long as the best RHN took. ``highwaynet reproduce rhn-depth`` runs it and
writes a figure, tables, generated text and a Markdown report. Finished runs are skipped and
unfinished ones resumed when the command is run again.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import RHNDepthConfig
from ..data.corpora import load_corpus
from ..report import (
    FIGURE_WIDTH,
    compare,
    findings,
    loss_cell,
    markdown_table,
    save_figure,
    seeds_cell,
    subplots,
    with_rule,
)
from ..training.cuda_graph import use_cuda_graphs
from ..training.progress import SweepProgress
from ..training.run_dir import finish_sweep, run_once, start_sweep, write_text
from . import lm
from .tuning import tune_family

__all__ = ["RHNDepthConfig", "run", "verdicts", "write_report"]




def run(config: RHNDepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the sweep into ``out`` (one run folder per model) and write ``summary.json`` and the report."""
    out, config = start_sweep(out, "rhn-depth", config, resume=resume, restart=restart, log=log)
    summary: dict[str, Any] = {"config": asdict(config), "corpora": {}}
    start = time.perf_counter()
    graphs = summary["cuda_graph"] = use_cuda_graphs(config.cuda_graph, config.base.train.device)
    if config.tune:
        return _tune(config, out, summary, start, data_dir, download, log, progress)
    sweep = SweepProgress(len(config.corpora) * (len(config.depths) + config.lstm))
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        rows = []
        for depth in config.depths:
            probe = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": "rhn",
                                   "depth": depth})
            probe.train.cuda_graph = graphs
            probe.hidden = lm.hidden_for_budget(probe, corpus.vocab, config.budget)
            rows.append(_run_one(probe, out / f"{name}-{level}" / f"rhn-depth{depth}", corpus, None, log, progress,
                                 sweep))
        result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "rhn": rows}
        if config.lstm:
            best = min(rows, key=lambda r: r["best_val"])
            lstm_config = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": "lstm"})
            lstm_config.hidden = lm.hidden_for_budget(lstm_config, corpus.vocab, config.budget)
            lstm_config.train.cuda_graph = graphs
            # Same time as the best RHN: many epochs allowed, cut by the time limit.
            lstm_config.train.epochs = config.base.train.epochs * 20
            result["lstm"] = _run_one(lstm_config, out / f"{name}-{level}" / "lstm", corpus,
                                      best["train_seconds"], log, progress, sweep)
            result["lstm"]["time_of"] = f"rhn depth {best['depth']}"
        summary["corpora"][entry] = result
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_report)


def _tune(config: RHNDepthConfig, out: Path, summary: dict[str, Any], start: float, data_dir, download: bool, log,
          progress: bool) -> dict[str, Any]:
    """RHN against LSTM under equal tuning, on each corpus: ``config.tune`` trials per family."""
    families = ("rhn", "lstm")
    sweep = SweepProgress(len(config.corpora) * len(families) * (config.tune + config.tune_seeds - 1))
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "tuning": {}}
        for family in families:
            base = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": family})
            base.train.cuda_graph = summary["cuda_graph"]
            seeds = [base.train.seed + k for k in range(config.tune_seeds)]
            result["tuning"][family] = tune_family(family, base, corpus, config.budget, config.tune, seeds,
                                                   out / f"{name}-{level}" / f"tune-{family}", log, progress, sweep)
        summary["corpora"][entry] = result
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_report)


def _run_one(config: lm.LMConfig, run_dir: Path, corpus, max_time: float | None, log, progress,
             sweep: SweepProgress) -> dict[str, Any]:
    what = (f"rhn depth {config.depth}" if config.model == "rhn" else "lstm") + f", hidden {config.hidden}"
    return cast(dict, run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus,
                                                              max_time=max_time, log=log, progress=progress),
                               log, what, config=config, progress=sweep, required=True))


def _metric(level: str) -> tuple[str, str]:
    return ("bpc", "bits per character") if level == "char" else ("ppl", "perplexity")


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the sweep found, a sentence per corpus (the report's first lines, and the docs' results
    page's): the best recurrence depth and whether it beats the LSTM of the same parameters and time;
    with ``tune``, which family leads under equal tuning, against the seeds' spread."""
    lines = []
    for entry, result in summary["corpora"].items():
        key = _metric(result["level"])[0]
        if "tuning" in result:
            (a, a_tuned), (b, b_tuned) = list(result["tuning"].items())[:2]
            lines.append(f"{entry}: under equal tuning, in test {key}, "
                         + compare(a.upper(), a_tuned["test"], b.upper(), b_tuned["test"]))
            continue
        best = min(result["rhn"], key=lambda r: r["test"][key])
        line = f"{entry}: the best RHN has recurrence depth {best['depth']} (test {key} {best['test'][key]:.3f})"
        if "lstm" in result:
            lstm = result["lstm"]
            line += (f"; it {'beats' if best['test'][key] < lstm['test'][key] else 'does not beat'} the LSTM of "
                     f"equal parameters trained for the same time ({lstm['train_seconds']:.0f} s, test {key} "
                     f"{lstm['test'][key]:.3f})")
        lines.append(line)
    return lines


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (test metric against recurrence depth, LSTM as a line) and ``report.md``; for a
    sweep run with ``tune``, ``tuning.png`` (each family's trials) and the equal-tuning tables."""
    corpora = summary["corpora"]
    if any("tuning" in result for result in corpora.values()):
        return _write_tuning_report(out, summary)
    fig, axes = subplots(1, len(corpora), figsize=(min(FIGURE_WIDTH, 5 * len(corpora)), 3.6), squeeze=False)
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
        ax.legend()
        table = markdown_table(
            ["model", "depth", "hidden", "parameters", "epochs", f"valid {key}", f"test {key}", "train time (s)"],
            [[r["model"].upper(), r["depth"] or "-", r["hidden"], f"{r['parameters']:,}", r["epochs"],
              loss_cell(r["final"][f"val_{key}"], digits=3), loss_cell(r["test"][key], digits=3),
              f"{r['train_seconds']:.0f}"]
             for r in rows + ([result["lstm"]] if "lstm" in result else [])])
        best = min(rows, key=lambda r: r["test"][key])
        text = [f"## {entry}", "", with_rule(table), ""]
        text += [f"Sample from the depth-{best['depth']} RHN (temperature 0.8):", "", "```",
                 best["sample"].strip(), "```", ""]
        sections.append("\n".join(text))
    save_figure(fig, out / "depth.png", dpi=120)
    report = out / "report.md"
    write_text(report, "\n".join([
        "# RHN: recurrence depth at a fixed parameter budget", "",
        *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Each RHN's state size is chosen so that the whole model "
        f"(embedding tied to the decoder) has about {summary['config']['budget']:,} parameters; every RHN "
        "trains for the same number of steps; the LSTM trains for as long as the best RHN did. Dropout "
        f"{summary['config']['base']['state_dropout']}; training steps "
        f"{'replayed as CUDA graphs' if summary.get('cuda_graph') else 'run eagerly'}.", "",
        "![depth](depth.png)", "", *sections]))
    return report


def _tuning_rows(tuned: dict[str, Any]) -> list[list[Any]]:
    shape = "depth" if "depth" in tuned["trials"][0] else "layers"
    return [["**best**" if i == tuned["best"] else i + 1, f"{t['lr']:.2g}", f"{t['dropout']:.2f}",
             f"{shape} {t[shape]}", t["hidden"], f"{t['parameters']:,}", loss_cell(t["best_val"]),
             f"{t['train_seconds']:.0f}"]
            for i, t in enumerate(tuned["trials"])]


def _write_tuning_report(out: Path, summary: dict[str, Any]) -> Path:
    """RHN against LSTM under equal tuning: each family's trials (validation), and the best's test."""

    corpora = summary["corpora"]
    fig, axes = subplots(1, len(corpora), figsize=(min(FIGURE_WIDTH, 4.5 * len(corpora)), 3.6), squeeze=False)
    sections = []
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        tuning = result["tuning"]
        for i, (family, tuned) in enumerate(tuning.items()):
            vals = [t["best_val"] for t in tuned["trials"]]
            ax.scatter([i] * len(vals), vals, alpha=0.6, label=f"{family.upper()} trials (validation loss)")
            ax.scatter([i], [vals[tuned["best"]]], marker="*", s=160, color="k")
        ax.set(xticks=range(len(tuning)), xticklabels=[f.upper() for f in tuning], ylabel="validation loss (nats)",
               title=f"{entry}: {len(next(iter(tuning.values()))['trials'])} trials each")
        ax.grid(alpha=0.3)
        table = markdown_table(["family (best of its trials)", "settings", f"test {key}, mean ± std over seeds",
                                "seeds"],
                               [[f.upper(), ", ".join(f"{k} {v}" for k, v in t["best_settings"].items()
                                                      if k in ("lr", "dropout", "depth", "layers", "hidden")),
                                 seeds_cell(t["test"], t["test"]["values"], 3), len(t["test"]["values"])]
                                for f, t in tuning.items()])
        sections.append("\n".join([f"## {entry}", "", with_rule(table), "",
                                    *[f"### {f.upper()} trials\n\n" + with_rule(markdown_table(
                                        ["trial", "lr", "dropout", "shape", "hidden", "parameters",
                                         "best validation loss", "train time (s)"], _tuning_rows(t))) + "\n"
                                      for f, t in tuning.items()]]))
    save_figure(fig, out / "tuning.png", dpi=120)
    config = summary["config"]
    report = out / "report.md"
    write_text(report, "\n".join([
        "# RHN against LSTM under equal tuning", "",
        *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Each family (RHN, LSTM) gets {config['tune']} random-search trials "
        f"at about {config['budget']:,} parameters (Melis, Dyer & Blunsom, 2018): a learning rate, one dropout rate "
        "and its shape (the RHN's recurrence depth, the LSTM's layers), the state size following from the budget; "
        f"each trains {config['base']['train']['epochs']} epochs. The best trial on validation is then trained with "
        f"{config['tune_seeds']} seeds and tested.", "", "![trials](tuning.png)", "", *sections]))
    return report
