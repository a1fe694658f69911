"""Reproduction of "Training Very Deep Networks" (Srivastava et al., 2015), Fig. 1: plain vs highway
networks at 10, 20, 50 and 100 layers.

For each depth and kind (plain, highway), a learning-rate search trains the first seed at each rate
for the full schedule and picks the rate with the lowest final training loss (a short search picks
rates that diverge later: measured, a 100-layer highway net at lr 0.1 leads after 2 epochs and
diverges by the fourth); that run is the first seed's, and the other seeds train at the chosen
rate. Highway layers are 50 units wide and plain layers 71 (about the same parameters), with He
initialisation and SGD with momentum, as in the paper. Both kinds clip the gradient's norm at 1 (the
paper does not say; without it, at the rate its first seed chose, one of three 100-layer highway
nets on Fashion-MNIST diverged in its fourth epoch; with it, all of them train). On a GPU each
training step is a CUDA graph. Every run is an ``mlp`` run folder, so that ``reproduce gates`` and
``reproduce lesion`` can read any of them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import DepthConfig
from ..data import load_image_data
from ..training import TrainConfig, read_metrics
from ..training.cuda_graph import use_cuda_graphs
from ..training.run_dir import SweepProgress, finish_sweep, mean_std, run_once, start_sweep, write_text
from . import mlp

__all__ = ["DepthConfig", "run"]




def _mlp_config(config: DepthConfig, depth: int, plain: bool, lr: float, epochs: int, seed: int) -> mlp.MLPConfig:
    return mlp.MLPConfig(data=config.data, depth=depth, plain=plain,
                         width=config.plain_width if plain else config.highway_width, gate_bias=config.gate_bias,
                         init="he",
                         batch_size=config.batch_size, max_train=config.max_train,
                         train=TrainConfig(epochs=epochs, lr=lr, momentum=0.9, seed=seed, device=config.device,
                                           grad_clip=config.grad_clip, cuda_graph=_use_graphs(config),
                                           nonfinite="record"))


def _use_graphs(config: DepthConfig) -> bool:
    """CUDA graphs by default on a GPU: these narrow, deep nets are launch-bound there, and a replayed
    step is an order of magnitude faster than an eager one (``benchmarks/mlp_step.py``)."""
    return use_cuda_graphs(config.cuda_graph, config.device)


def run(config: DepthConfig, out: str | Path, *, resume: bool = False, data_dir: str | Path | None = None,
        download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the search and the seeds into ``out``; write ``summary.json``, ``depth.png`` and ``report.md``."""
    from ..report import write_depth_report

    out = start_sweep(out, resume)
    write_text(out / "sweep.json", json.dumps({"recipe": "depth", "config": asdict(config)}, indent=2))
    start = time.perf_counter()
    data = load_image_data(config.data, data_dir, download=download, max_train=config.max_train)

    sweep = SweepProgress(len(config.depths) * 2 * (len(config.lrs) + len(config.seeds) - 1))

    def train(cfg: mlp.MLPConfig, run_dir: Path, what: str) -> dict[str, Any]:
        return cast(dict, run_once(run_dir, lambda resume: mlp.run(cfg, run_dir, resume=resume, data=data, log=log,
                                                                   progress=progress),
                                   log, what, config=cfg, progress=sweep, required=True))

    nets = []
    for depth in config.depths:
        for plain in (True, False):
            kind = "plain" if plain else "highway"
            folder = out / f"{kind}-{depth}"
            first = config.seeds[0]
            # A rate that diverges ends its run there (nonfinite="record"): its loss is NaN, and it loses.
            search = {lr: train(_mlp_config(config, depth, plain, lr, config.epochs, first),
                                folder / f"lr{lr:g}-seed{first}", f"{kind} {depth}: lr {lr:g}, seed {first}")
                      for lr in config.lrs}
            # A diverged run has a NaN loss: it never wins the search.
            best_lr = min(config.lrs, key=lambda lr: _finite(search[lr]["final"]["train_loss"]))
            run_dirs = [folder / f"lr{best_lr:g}-seed{seed}" for seed in config.seeds]
            runs = [search[best_lr]] + [
                train(_mlp_config(config, depth, plain, best_lr, config.epochs, seed), run_dir,
                      f"{kind} {depth}: lr {best_lr:g}, seed {seed}")
                for seed, run_dir in zip(config.seeds[1:], run_dirs[1:], strict=True)]
            curves = [[m["train_loss"] for m in read_metrics(run_dir)] for run_dir in run_dirs]
            nets.append({"kind": kind, "depth": depth, "lr": best_lr, "parameters": runs[0]["parameters"],
                         "search": {f"{lr:g}": search[lr]["final"]["train_loss"] for lr in config.lrs},
                         "train_loss": mean_std([r["final"]["train_loss"] for r in runs]),
                         "test_acc": mean_std([100 * r["test"]["acc"] for r in runs]),
                         "curves": curves, "run_dirs": [str(d) for d in run_dirs]})
    summary = {"recipe": "depth", "config": asdict(config), "nets": nets,
               "seconds": round(time.perf_counter() - start, 1)}
    return finish_sweep(out, summary, write_depth_report)


def _finite(x: float) -> float:
    return x if x == x and x != float("inf") else float("inf")

