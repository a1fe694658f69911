"""Reproduction: what recurrence depth buys an RHN at a fixed parameter budget (Zilly et al., 2017, Fig. 4),
and the RHN against an LSTM of equal parameters trained for the same time.

For each corpus, an RHN language model is trained at each recurrence depth with its state size
chosen so that the whole model has ``budget`` parameters; then an LSTM language model of the same
budget is trained for as long as the best RHN took. ``highwaynet reproduce rhn-depth`` runs it and
writes a figure, tables, generated text and a Markdown report. Finished runs are skipped and
unfinished ones resumed when the command is run again with ``--resume``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data.corpora import load_corpus
from ..training import TrainConfig
from ..training.cuda_graph import use_cuda_graphs
from ..training.run_dir import finish_sweep, run_once, start_sweep, write_text
from . import lm

__all__ = ["RHNDepthConfig", "run"]


@dataclass
class RHNDepthConfig:
    """The sweep. ``corpora`` entries are ``name:level``; ``base`` sets everything but depth and size."""

    corpora: list[str] = field(default_factory=lambda: ["tinyshakespeare:char"])
    depths: list[int] = field(default_factory=lambda: [1, 2, 4, 6, 8, 10])
    budget: int = 200_000
    lstm: bool = True
    #: Replay each training step as a CUDA graph (``None``: on a GPU). The RHN's many small
    #: micro-steps are launch-bound (``benchmarks/rhn.py``: 62.1 ms eager, 17.1 ms replayed at the
    #: PTB shape on an H100), and an equal-time comparison should not be decided by launch overhead.
    cuda_graph: bool | None = None
    base: lm.LMConfig = field(default_factory=lambda: lm.LMConfig(
        batch_size=128, bptt=50, steps_per_epoch=50, input_dropout=0.0, state_dropout=0.0, output_dropout=0.0,
        train=TrainConfig(epochs=8, optimizer="adam", lr=3e-3, grad_clip=1.0, schedule="cosine")))

    def __post_init__(self) -> None:
        if isinstance(self.base, dict):
            self.base = lm.LMConfig(**self.base)
        for entry in self.corpora:
            if entry.count(":") != 1 or entry.split(":")[1] not in ("char", "word"):
                raise ValueError(f"corpora entries are 'name:level' with level char or word, got {entry!r}")


def run(config: RHNDepthConfig, out: str | Path, *, resume: bool = False, data_dir: str | Path | None = None,
        download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the sweep into ``out`` (one run folder per model) and write ``summary.json`` and the report."""
    from ..report import write_rhn_depth_report

    out = start_sweep(out, resume)
    write_text(out / "sweep.json", json.dumps({"recipe": "rhn-depth", "config": asdict(config)}, indent=2))
    summary: dict[str, Any] = {"config": asdict(config), "corpora": {}}
    start = time.perf_counter()
    graphs = summary["cuda_graph"] = use_cuda_graphs(config.cuda_graph, config.base.train.device)
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        rows = []
        for depth in config.depths:
            probe = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": "rhn",
                                   "depth": depth})
            probe.train.cuda_graph = graphs
            probe.hidden = lm.hidden_for_budget(probe, len(corpus.vocab), config.budget)
            rows.append(_run_one(probe, out / f"{name}-{level}" / f"rhn-depth{depth}", corpus, None, log, progress))
        result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "rhn": rows}
        if config.lstm:
            best = min(rows, key=lambda r: r["best_val"])
            lstm_config = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": "lstm"})
            lstm_config.hidden = lm.hidden_for_budget(lstm_config, len(corpus.vocab), config.budget)
            lstm_config.train.cuda_graph = graphs
            # Same time as the best RHN: many epochs allowed, cut by the time limit.
            lstm_config.train.epochs = config.base.train.epochs * 20
            result["lstm"] = _run_one(lstm_config, out / f"{name}-{level}" / "lstm", corpus,
                                      best["train_seconds"], log, progress)
            result["lstm"]["time_of"] = f"rhn depth {best['depth']}"
        summary["corpora"][entry] = result
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_rhn_depth_report)


def _run_one(config: lm.LMConfig, run_dir: Path, corpus, max_time: float | None, log, progress) -> dict[str, Any]:
    what = (f"rhn depth {config.depth}" if config.model == "rhn" else "lstm") + f", hidden {config.hidden}"
    return run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus, max_time=max_time,
                                                   log=log, progress=progress), log, what, config=config)
