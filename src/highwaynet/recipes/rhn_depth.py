"""Reproduction: what recurrence depth buys an RHN at a fixed parameter budget (Zilly et al., 2017, Fig. 4),
and the RHN against an LSTM of equal parameters trained for the same time; or (``tune``) RHN against
LSTM under equal tuning (Melis et al., 2018: :mod:`.tuning`).

For each corpus, an RHN language model is trained at each recurrence depth with its state size
chosen so that the whole model has ``budget`` parameters; then an LSTM language model of the same
budget is trained for as long as the best RHN took. ``highwaynet reproduce rhn-depth`` runs it and
writes a figure, tables, generated text and a Markdown report. Finished runs are skipped and
unfinished ones resumed when the command is run again with ``--resume``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import RHNDepthConfig
from ..data.corpora import load_corpus
from ..training.cuda_graph import use_cuda_graphs
from ..training.run_dir import SweepProgress, finish_sweep, run_once, start_sweep, write_text
from . import lm
from .tuning import tune_family

__all__ = ["RHNDepthConfig", "run"]




def run(config: RHNDepthConfig, out: str | Path, *, resume: bool = False, data_dir: str | Path | None = None,
        download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the sweep into ``out`` (one run folder per model) and write ``summary.json`` and the report."""
    from ..report import write_rhn_depth_report

    out = start_sweep(out, resume)
    write_text(out / "sweep.json", json.dumps({"recipe": "rhn-depth", "config": asdict(config)}, indent=2))
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
    return finish_sweep(out, summary, write_rhn_depth_report)


def _tune(config: RHNDepthConfig, out: Path, summary: dict[str, Any], start: float, data_dir, download: bool, log,
          progress: bool) -> dict[str, Any]:
    """RHN against LSTM under equal tuning, on each corpus: ``config.tune`` trials per family."""
    from ..report import write_rhn_depth_report

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
    return finish_sweep(out, summary, write_rhn_depth_report)


def _run_one(config: lm.LMConfig, run_dir: Path, corpus, max_time: float | None, log, progress,
             sweep: SweepProgress) -> dict[str, Any]:
    what = (f"rhn depth {config.depth}" if config.model == "rhn" else "lstm") + f", hidden {config.hidden}"
    return cast(dict, run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus,
                                                              max_time=max_time, log=log, progress=progress),
                               log, what, config=config, progress=sweep, required=True))
