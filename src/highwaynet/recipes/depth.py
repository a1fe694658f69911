"""Reproduction of "Training Very Deep Networks" (Srivastava et al., 2015), Fig. 1: plain vs highway
networks at 10, 20, 50 and 100 layers.

For each depth and kind (plain, highway), a small learning-rate search (``search_epochs`` epochs
at each rate, seed 0) picks the rate with the lowest final training loss; the chosen rate is then
trained with several seeds. Highway layers are 50 units wide and plain layers 71 (about the same
parameters), He initialisation and SGD with momentum, as in the paper. Every run is an ``mlp`` run
folder, so that ``reproduce gates`` and ``reproduce lesion`` can read any of them.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data import load_image_data
from ..training import TrainConfig, read_metrics
from ..training.run_dir import run_once, start_sweep
from . import mlp

__all__ = ["DepthConfig", "run"]


@dataclass
class DepthConfig:
    data: str = "mnist5k"
    depths: list[int] = field(default_factory=lambda: [10, 20, 50, 100])
    highway_width: int = 50
    plain_width: int = 71
    lrs: list[float] = field(default_factory=lambda: [0.01, 0.03, 0.1])
    search_epochs: int = 2
    epochs: int = 10
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    gate_bias: float = -4.0
    batch_size: int = 100
    max_train: int | None = None

    def __post_init__(self) -> None:
        if min(self.depths) < 2:
            raise ValueError(f"depths must be at least 2, got {self.depths}")
        if not self.lrs or not self.seeds:
            raise ValueError("the learning-rate search needs at least one rate, and training at least one seed")


def _mlp_config(config: DepthConfig, depth: int, plain: bool, lr: float, epochs: int, seed: int) -> mlp.MLPConfig:
    return mlp.MLPConfig(data=config.data, depth=depth, plain=plain,
                         width=config.plain_width if plain else config.highway_width, gate_bias=config.gate_bias,
                         init="he",
                         batch_size=config.batch_size, max_train=config.max_train,
                         train=TrainConfig(epochs=epochs, lr=lr, momentum=0.9, seed=seed))


def run(config: DepthConfig, out: str | Path, *, resume: bool = False, data_dir: str | Path | None = None,
        download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the search and the seeds into ``out``; write ``summary.json``, ``depth.png`` and ``report.md``."""
    from ..report import write_depth_report

    out = start_sweep(out, resume)
    (out / "sweep.json").write_text(json.dumps({"recipe": "depth", "config": asdict(config)}, indent=2))
    start = time.perf_counter()
    data = load_image_data(config.data, data_dir, download=download, max_train=config.max_train)

    def train(cfg: mlp.MLPConfig, run_dir: Path, what: str) -> dict[str, Any]:
        return run_once(run_dir, lambda resume: mlp.run(cfg, run_dir, resume=resume, data=data, log=log,
                                                        progress=progress), log, what)

    nets = []
    for depth in config.depths:
        for plain in (True, False):
            kind = "plain" if plain else "highway"
            folder = out / f"{kind}-{depth}"
            search = {lr: train(_mlp_config(config, depth, plain, lr, config.search_epochs, 0),
                                folder / f"search-lr{lr:g}", f"{kind} {depth}: search, lr {lr:g}")
                      for lr in config.lrs}
            # A diverged run has a NaN loss: it never wins the search.
            best_lr = min(config.lrs, key=lambda lr: _finite(search[lr]["final"]["train_loss"]))
            runs = [train(_mlp_config(config, depth, plain, best_lr, config.epochs, seed), folder / f"seed{seed}",
                          f"{kind} {depth}: lr {best_lr:g}, seed {seed}") for seed in config.seeds]
            curves = [[m["train_loss"] for m in read_metrics(folder / f"seed{seed}")] for seed in config.seeds]
            nets.append({"kind": kind, "depth": depth, "lr": best_lr, "parameters": runs[0]["parameters"],
                         "search": {f"{lr:g}": search[lr]["final"]["train_loss"] for lr in config.lrs},
                         "train_loss": _mean_std([r["final"]["train_loss"] for r in runs]),
                         "test_acc": _mean_std([100 * r["test"]["acc"] for r in runs]),
                         "curves": curves, "run_dirs": [str(folder / f"seed{s}") for s in config.seeds]})
    summary = {"recipe": "depth", "config": asdict(config), "nets": nets,
               "seconds": round(time.perf_counter() - start, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_depth_report(out, summary)
    return summary


def _finite(x: float) -> float:
    return x if x == x and x != float("inf") else float("inf")


def _mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}

