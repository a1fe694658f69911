"""Equal tuning for language models (Melis, Dyer & Blunsom, "On the State of the Art of Evaluation in
Neural Language Models", ICLR 2018): every model family gets the same number of random-search trials
at the same parameter budget, the best trial on validation is tested, and trained again with more
seeds, so that a comparison is between families, not between how well each happened to be tuned.

A trial draws a learning rate (log-uniform on [3e-4, 1e-2]), one dropout rate for the input,
state and output dropouts (uniform on [0, 0.5]) and the family's shape: an RHN's recurrence depth,
an LSTM's number of layers; the state size then follows from the budget. Each family draws from its
own stream, seeded by the family's name and the base seed, so that adding a family changes no other
family's trials.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import LMConfig
from ..data.corpora import Corpus
from ..training.progress import SweepProgress
from ..training.run_dir import run_once
from . import lm

__all__ = ["SHAPES", "draw_trials", "trial_config", "tune_family"]

#: Each family's shape setting and the values a trial draws it from.
SHAPES: dict[str, tuple[str, tuple[int, ...]]] = {"rhn": ("depth", (1, 2, 3, 4, 6, 8, 10)),
                                                   "lstm": ("layers", (1, 2, 3))}


def draw_trials(family: str, model: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` settings for ``family`` (any name; ``model`` ``"rhn"`` or ``"lstm"`` picks the shape)."""
    rng = random.Random(f"{family}:{seed}")
    key, values = SHAPES[model]
    return [{"lr": round(10 ** rng.uniform(math.log10(3e-4), math.log10(1e-2)), 6),
             "dropout": round(rng.uniform(0.0, 0.5), 3), key: rng.choice(values)} for _ in range(n)]


def trial_config(base: LMConfig, trial: dict[str, Any], seed: int | None = None) -> LMConfig:
    """``base`` with a trial's settings (and ``seed``, where given)."""
    config = LMConfig(**asdict(base))
    config.train.lr = trial["lr"]
    config.input_dropout = config.state_dropout = config.output_dropout = trial["dropout"]
    for key in ("depth", "layers"):
        if key in trial:
            setattr(config, key, trial[key])
    if seed is not None:
        config.train.seed = seed
    return LMConfig(**asdict(config))  # (checked again)


def _train(config: LMConfig, run_dir: Path, corpus: Corpus, what: str, log, progress: bool,
           sweep: SweepProgress | None) -> dict[str, Any]:
    return cast(dict, run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus, log=log,
                                                              progress=progress),
                               log, what, config=config, progress=sweep, required=True))


def tune_family(family: str, base: LMConfig, corpus: Corpus, budget: int, trials: int, seeds: Sequence[int],
                folder: Path, log, progress: bool, sweep: SweepProgress | None = None) -> dict[str, Any]:
    """Tune one family: ``trials`` runs with seed ``seeds[0]`` into ``folder/trialK``, then the best on
    validation with the other ``seeds`` (``folder/trialK-seedS``: named by the trial, so that a
    search resumed with more trials whose best changes trains the new best's seeds). Returns every trial's settings and
    results and the best's, with its test metric over the seeds."""
    metric = "bpc" if base.level == "char" else "ppl"
    rows = []
    for k, trial in enumerate(draw_trials(family, base.model, trials, seeds[0])):
        config = trial_config(base, trial, seed=seeds[0])
        config.hidden = lm.hidden_for_budget(config, corpus.vocab, budget)
        result = _train(config, folder / f"trial{k}", corpus, f"{family}, trial {k + 1} of {trials}: {trial}", log,
                        progress, sweep)
        rows.append({**trial, "hidden": config.hidden, "parameters": result["parameters"],
                     "best_val": result["best_val"], "test": result["test"][metric],
                     "train_seconds": result["train_seconds"]})
    best_index = min(range(len(rows)), key=lambda i: rows[i]["best_val"])  # (validation alone picks)
    best = rows[best_index]
    tests = [best["test"]]
    for seed in seeds[1:]:
        config = trial_config(base, best, seed=seed)
        config.hidden = best["hidden"]
        result = _train(config, folder / f"trial{best_index}-seed{seed}", corpus,
                        f"{family}, best trial, seed {seed}", log, progress, sweep)
        tests.append(result["test"][metric])
    return {"family": family, "metric": metric, "trials": rows, "best": best_index, "best_settings": best,
            "test": {"mean": statistics.fmean(tests), "std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
                     "values": tests}}
