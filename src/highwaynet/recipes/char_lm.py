"""Reproduction: character-aware language models (Kim, Jernite, Sontag & Rush, AAAI 2016) and their
ablation on a word-level corpus: words read by a character CNN with 0, 1 or 2 highway layers, with
the same numbers of MLP layers in the highway layers' place, and a word-level LSTM; every model at
about the same parameter count (its LSTM's state size chosen to fit the budget), several seeds.

``highwaynet reproduce char-lm`` runs it (default: Jane Austen's novels, CPU-sized; ``--full`` the
paper's sizes) and writes ``char-lm.png``, ``report.md`` and ``summary.json``. With ``tune``, each
model's settings are first chosen by an equal random search (:mod:`.tuning`).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import CharLMConfig, LMConfig
from ..data.corpora import load_corpus
from ..training.run_dir import SweepProgress, finish_sweep, run_once, start_sweep, write_text
from . import lm
from .tuning import trial_config, tune_family

__all__ = ["CharLMConfig", "run", "variants"]


def variants(config: CharLMConfig) -> list[tuple[str, dict[str, Any]]]:
    """``(name, settings)`` of each model the study trains: ``base`` with these settings replaced."""
    chars = [(f"chars, {n} highway", {"input": "chars", "char_layers": n, "char_mlp": False}) for n in config.highway]
    chars += [(f"chars, {n} MLP", {"input": "chars", "char_layers": n, "char_mlp": True}) for n in config.mlp if n]
    return chars + ([("words (LSTM)", {"input": "words", "tie_weights": True})] if config.word_lstm else [])


def _slug(name: str) -> str:
    return name.replace(" (LSTM)", "-lstm").replace(", ", "-").replace(" ", "-")


def run(config: CharLMConfig, out: str | Path = "runs/char-lm", *, resume: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True
        ) -> dict[str, Any]:
    """Train every model into ``out/<model>/seed<S>`` (and ``out/<model>/tune-*`` when tuning), then
    write ``summary.json``, ``char-lm.png`` and ``report.md``."""
    from ..report import write_char_lm_report

    config = config.resolved()
    out = start_sweep(out, resume)
    write_text(out / "sweep.json", json.dumps({"recipe": "char-lm", "config": asdict(config)}, indent=2))
    start = time.perf_counter()
    corpus = load_corpus(config.corpus, "word", data_dir, download=download, max_vocab=config.base.max_vocab)
    models = variants(config)
    runs_each = (config.tune + len(config.seeds) - 1) if config.tune else len(config.seeds)
    sweep = SweepProgress(len(models) * runs_each)
    rows = []
    for name, settings in models:
        base = LMConfig(**{**asdict(config.base), **settings, "corpus": config.corpus})
        base.train.seed = config.seeds[0]
        folder = out / _slug(name)
        if config.tune:
            tuned = tune_family(name, base, corpus, config.budget, config.tune, config.seeds, folder, log,
                                progress, sweep)
            base = trial_config(base, tuned["best_settings"])
        base.hidden = lm.hidden_for_budget(base, corpus.vocab, config.budget)
        results = []
        for seed in config.seeds:
            one = LMConfig(**asdict(base))
            one.train.seed = seed
            run_dir = folder / f"seed{seed}"
            if config.tune:  # the tuned settings' runs: the search's own for its seed
                best = tuned["best"]
                run_dir = folder / (f"trial{best}" if seed == config.seeds[0] else f"trial{best}-seed{seed}")
            results.append(cast(dict, run_once(
                run_dir, lambda resume, one=one, run_dir=run_dir: lm.run(one, run_dir, resume=resume, corpus=corpus,
                                                                         log=log, progress=progress),
                log, f"{name}, seed {seed}", config=one, progress=sweep, required=True)))
        tests = [r["test"]["ppl"] for r in results]
        rows.append({"model": name, "settings": settings, "hidden": base.hidden,
                     "parameters": results[0]["parameters"], "seeds": config.seeds,
                     "test_ppl": {"mean": statistics.fmean(tests), "std": statistics.stdev(tests) if len(tests) > 1
                                  else 0.0, "values": tests},
                     "val_ppl": statistics.fmean(r["final"]["val_ppl"] for r in results),
                     "train_seconds": statistics.fmean(r["train_seconds"] for r in results),
                     **({"tuning": tuned} if config.tune else {})})
    summary = {"recipe": "char-lm", "config": asdict(config), "corpus": repr(corpus), "rows": rows,
               "seconds": round(time.perf_counter() - start, 1)}
    return finish_sweep(out, summary, write_char_lm_report)
