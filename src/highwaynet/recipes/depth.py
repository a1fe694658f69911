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

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import DepthConfig
from ..data import load_image_data
from ..report import (
    FIGURE_WIDTH,
    compare,
    diverged,
    diverged_rule,
    findings,
    loss_cell,
    markdown_table,
    save_figure,
    seeds_cell,
    subplots,
    whole_numbers,
)
from ..training import TrainConfig, read_metrics
from ..training.cuda_graph import use_cuda_graphs
from ..training.progress import SweepProgress
from ..training.run_dir import (
    finish_sweep,
    finite_or_inf,
    format_mean_std,
    mean_std,
    run_once,
    start_sweep,
    write_text,
)
from . import mlp

__all__ = ["DepthConfig", "chance_loss", "plan", "run", "verdicts", "write_report"]




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


def run(config: DepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the search and the seeds into ``out``; write ``summary.json``, ``depth.png`` and ``report.md``."""
    out, config = start_sweep(out, "depth", config, resume=resume, restart=restart, log=log)
    start = time.perf_counter()
    data = load_image_data(config.data, data_dir, download=download, max_train=config.max_train)

    sweep = SweepProgress(plan(config))

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
            best_lr = min(config.lrs, key=lambda lr: finite_or_inf(search[lr]["final"]["train_loss"]))
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
    summary = {"recipe": "depth", "config": asdict(config), "classes": data.num_classes, "nets": nets,
               "seconds": round(time.perf_counter() - start, 1)}
    return finish_sweep(out, summary, write_report)


def plan(config: DepthConfig) -> list[tuple[tuple[bool, int], int, bool]]:
    """The sweep's runs for its progress (:class:`~highwaynet.training.progress.SweepProgress`), in the
    order :func:`run` trains them, each net's search and then its other seeds: each ``((plain, depth),
    cost, plain)``, its cost its weights times its epochs (a 100-layer net's ten times a 10-layer one's),
    each kind a family of its own (a highway layer does more than a plain one of the same weights)."""
    return [((plain, depth), depth * config.epochs * (config.plain_width ** 2 if plain else
                                                      2 * config.highway_width ** 2), plain)
            for depth in config.depths for plain in (True, False)
            for _ in range(len(config.lrs) + len(config.seeds) - 1)]


def chance_loss(summary: dict[str, Any]) -> float:
    """The loss of guessing every class alike, ``ln(classes)``: a run that ends above it learnt nothing and
    moved away (diverged). (Summaries written before 0.4 do not record the classes: every image set the
    recipe loads has 10.)"""
    return math.log(summary.get("classes", 10))


def _final_losses(net: dict[str, Any]) -> list[float]:
    return [curve[-1] for curve in net["curves"]]


def _loss_summary(net: dict[str, Any], limit: float) -> str:
    """A net's final training loss over its seeds, ``mean ± std``, or how many of them diverged."""
    return seeds_cell(net["train_loss"], _final_losses(net), 4, limit)


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the sweep found, in sentences (the report's first lines, and the docs' results page's): how
    each kind's final training loss moves with depth, then plain against highway at each depth, against
    the seeds' spread, with their test accuracies."""
    config, nets, limit = summary["config"], summary["nets"], chance_loss(summary)
    by = {(n["kind"], n["depth"]): n for n in nets}
    depths = [d for d in config["depths"] if ("plain", d) in by and ("highway", d) in by]
    if not depths:
        return []
    first, last = depths[0], depths[-1]
    lines = []
    if last != first:
        for kind in ("plain", "highway"):
            a, b = by[(kind, first)], by[(kind, last)]
            if not any(diverged(v, limit) for v in _final_losses(a) + _final_losses(b)):
                move = "rises" if b["train_loss"]["mean"] > a["train_loss"]["mean"] else "falls"
                lines.append(f"{kind.capitalize()} networks: the final training loss {move} from "
                             f"{a['train_loss']['mean']:.3f} at {first} layers to {b['train_loss']['mean']:.3f} at "
                             f"{last} (mean over {len(b['curves'])} seeds)")
    for depth in depths:
        plain, highway = by[("plain", depth)], by[("highway", depth)]
        failed = [f"{kind} {_loss_summary(net, limit)}" for kind, net in (("plain", plain), ("highway", highway))
                  if any(diverged(v, limit) for v in _final_losses(net))]
        if failed:
            line = f"{depth} layers: " + " and ".join(failed)
        else:
            line = f"{depth} layers: in final training loss, " + compare("highway", highway["train_loss"], "plain",
                                                                          plain["train_loss"])
        accuracy = ", ".join(f"{kind} {format_mean_std(net['test_acc'], len(net['curves']))}%"
                             for kind, net in (("highway", highway), ("plain", plain)))
        lines.append(f"{line}; test accuracy {accuracy}")
    return lines


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (training loss vs epoch, one panel per depth, plain vs highway) and ``report.md``,
    which opens with :func:`verdicts`."""
    import numpy as np

    config, nets = summary["config"], summary["nets"]
    depths, limit = config["depths"], chance_loss(summary)
    columns = min(2, len(depths))  # (panels two a row: each legible at the page's width)
    panel_rows = -(-len(depths) // columns)
    fig, axes = subplots(panel_rows, columns, figsize=(FIGURE_WIDTH, 3.0 * panel_rows + 0.4), squeeze=False,
                         sharey=True)
    panels = list(axes.flat)
    for ax in panels[len(depths):]:
        ax.axis("off")
    for ax, depth in zip(panels, depths, strict=False):
        for net, color in ((n, "C0" if n["kind"] == "plain" else "C1") for n in nets if n["depth"] == depth):
            curves = np.array(net["curves"])
            epochs = np.arange(1, curves.shape[1] + 1)
            mean, std = curves.mean(0), curves.std(0)
            ax.plot(epochs, mean, color=color, label=f"{net['kind']} (lr {net['lr']:g})")
            ax.fill_between(epochs, np.maximum(mean - std, 1e-6), mean + std, color=color, alpha=0.2)
        ax.set(title=f"{depth} layers", xlabel="epoch", yscale="log")
        whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    for row in axes:
        row[0].set_ylabel("training loss")
    fig.suptitle(f"Plain vs highway networks on {config['data']} (mean over seeds)")
    save_figure(fig, out / "depth.png", dpi=120)

    rows = [[n["depth"], n["kind"], f"{n['parameters']:,}", f"{n['lr']:g}", _loss_summary(n, limit),
             format_mean_std(n["test_acc"], len(n["curves"]), 2)] for n in nets]
    search = [[n["depth"], n["kind"], *(loss_cell(v, limit) for v in n["search"].values())] for n in nets]
    rule = diverged_rule(limit, f"the loss of guessing the {summary.get('classes', 10)} classes alike")
    report = out / "report.md"
    write_text(report, "\n".join([
        f"# Plain vs highway networks at {', '.join(map(str, depths))} layers ({config['data']})", "",
        *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Highway layers {config['highway_width']} wide, plain layers "
        f"{config['plain_width']} wide; SGD with momentum 0.9, batch {config['batch_size']}, {config['epochs']} "
        f"epochs, seeds {config['seeds']}; He initialisation; highway gate bias {config['gate_bias']}. The learning "
        f"rate of each net is the one of {config['lrs']} whose first-seed run ends with the lowest training loss.",
        "", "![training loss vs epoch](depth.png)", "",
        markdown_table(["layers", "net", "parameters", "lr", "final training loss", "test accuracy (%)"], rows), "",
        f"Learning-rate search: final training loss of the first seed at each rate ({rule}).", "",
        markdown_table(["layers", "net", *(f"lr {lr:g}" for lr in config["lrs"])], search), ""]))
    return report
