"""What a trained highway MLP's gates do (Srivastava et al., 2015, Fig. 2) and which layers it needs
(lesioning, Fig. 4). Both read an ``mlp`` run folder, for instance one seed of ``reproduce depth``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .._checks import check_path
from ..analysis import gate_modules, lesion, record_gates
from ..report import FIGURE_WIDTH, findings, markdown_table, save_figure, subplots, whole_numbers
from ..training import files
from ..training.run_dir import write_text
from . import mlp

__all__ = ["analyze_gates", "gates_verdicts", "lesion_layers", "lesion_verdicts", "write_gates_report",
           "write_lesion_report"]


def _load_highway(run_dir: str | Path, data_dir: str | Path | None, download: bool):
    if (Path(run_dir) / "summary.json").is_file() and not (Path(run_dir) / "config.json").is_file():
        raise ValueError(f"{run_dir} is a sweep's folder; give one of its runs, e.g. "
                         f"{Path(run_dir) / 'highway-50' / 'seed0'} for a depth sweep")
    model, config, data = mlp.load_trained(run_dir, data_dir, download)
    if not gate_modules(model):
        raise ValueError(f"{run_dir} holds a plain network: it has no gates to analyse")
    return model, config, data


def _claim(out: Path, result: str, restart: bool) -> None:
    files.claim(out, "analysis", files.ANALYSES[result])
    if restart:
        files.clear(out)


@torch.no_grad()
def analyze_gates(run_dir: str | Path, out: str | Path | None = None, data_dir: str | Path | None = None,
                  examples: int = 3, download: bool = False, restart: bool = False) -> dict[str, Any]:
    """Transform-gate biases, mean gate activity over the test set, and single examples' gates.

    Writes ``gates.png``, ``gates.json`` and ``report.md`` into ``out`` (default ``RUN_DIR/gates``), a
    folder of its own (:func:`~highwaynet.training.files.claim`: a folder holding other files is refused).
    Run again, it writes them again; ``restart`` first removes what an earlier analysis wrote there. The
    run started over (``train --restart``) clears the default folder too: it analysed the weights before.
    """
    run_dir = check_path("run_dir", run_dir)
    out = check_path("out", out) if out else run_dir / "gates"  # (the name training.files' _ANALYSIS_FOLDERS clears)
    files.check_analysis_folder(out, "gates.json", restart=restart)
    model, config, data = _load_highway(run_dir, data_dir, download)
    width = config.width
    biases = torch.stack([layer.bias[width:2 * width] for layer in model.highway.layers])  # (layers, units)
    x, y = data.test
    with record_gates(model) as rec:
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
    gates = torch.stack([rec.values(i) for i in range(len(rec.names))], dim=1)  # (N, layers, units)
    picked = [int((y == label).nonzero()[0]) for label in y.unique()[:examples].tolist()]
    result = {
        "run_dir": str(run_dir), "data": config.data, "depth": config.depth, "test_acc": accuracy,
        "bias": biases.tolist(), "mean_activity": gates.mean(0).tolist(),
        "mean_activity_per_layer": gates.mean((0, 2)).tolist(),
        "closed_fraction": float((gates < 0.1).float().mean()),
        "examples": [{"index": i, "label": int(y[i]), "gates": gates[i].tolist()} for i in picked],
        # How much the gates depend on the input: mean over units of the std over examples.
        "input_dependence": float(gates.std(0).mean()),
    }
    _claim(out, "gates.json", restart)
    write_text(out / "gates.json", json.dumps(result) + "\n")
    write_gates_report(out, result)
    return result


@torch.no_grad()
def lesion_layers(run_dir: str | Path, out: str | Path | None = None, data_dir: str | Path | None = None,
                  download: bool = False, restart: bool = False) -> dict[str, Any]:
    """Test accuracy with each highway layer lesioned (``T = 0``) in turn.

    Writes ``lesion.png``, ``lesion.json`` and ``report.md`` into ``out`` (default ``RUN_DIR/lesion``, which the
    run started over clears), a folder of its own.
    """
    run_dir = check_path("run_dir", run_dir)
    out = check_path("out", out) if out else run_dir / "lesion"  # (the name training.files' _ANALYSIS_FOLDERS clears)
    files.check_analysis_folder(out, "lesion.json", restart=restart)
    model, config, data = _load_highway(run_dir, data_dir, download)
    x, y = data.test

    def accuracy() -> float:
        return (model(x).argmax(-1) == y).float().mean().item()

    baseline = accuracy()
    lesioned = []
    for i in range(len(gate_modules(model))):
        with lesion(model, [i]):
            lesioned.append(accuracy())
    result = {"run_dir": str(run_dir), "data": config.data, "depth": config.depth, "baseline": baseline,
              "lesioned": lesioned,
              "harmless": sum(a >= baseline - 0.01 for a in lesioned)}  # within 1 point of the intact net
    _claim(out, "lesion.json", restart)
    write_text(out / "lesion.json", json.dumps(result, indent=2) + "\n")
    write_lesion_report(out, result)
    return result


def gates_verdicts(result: dict[str, Any]) -> list[str]:
    """What the gates' analysis found, in sentences (the report's first lines, and the docs' page's)."""
    per_layer = result["mean_activity_per_layer"]
    closed = 100 * result["closed_fraction"]
    busiest = max(range(len(per_layer)), key=per_layer.__getitem__)
    return [f"{closed:.1f}% of the gate outputs on the test set are below 0.1: "
            + ("most units of most layers carry their input through" if closed > 50 else
               "most units transform their input"),
            f"the mean gate output per layer ranges from {min(per_layer):.3f} to {max(per_layer):.3f}, highest at "
            f"highway layer {busiest} of {len(per_layer)}",
            f"the gates depend on the input: T's standard deviation over the test examples, averaged over the "
            f"units, is {result['input_dependence']:.3f}"]


def lesion_verdicts(result: dict[str, Any]) -> list[str]:
    """What lesioning found, in sentences (the report's first lines, and the docs' page's)."""
    lesioned, baseline = result["lesioned"], result["baseline"]
    worst = min(range(len(lesioned)), key=lesioned.__getitem__)
    return [f"{result['harmless']} of {len(lesioned)} highway layers can each be lesioned alone at a cost of at most "
            f"one point of test accuracy (intact: {100 * baseline:.2f}%)",
            f"lesioning layer {worst} costs the most: {100 * (baseline - lesioned[worst]):.1f} points, to "
            f"{100 * lesioned[worst]:.2f}%"]


def write_gates_report(out: Path, result: dict[str, Any]) -> Path:
    """The highway paper's Fig. 2 for one net: gate biases, mean gate activity, and single examples' gates."""
    import numpy as np

    panels = [("transform gate bias", np.array(result["bias"]), "RdBu_r"),
              ("mean gate output\n(test set)", np.array(result["mean_activity"]), "viridis")]
    panels += [(f"one example's gates\n(label {e['label']})", np.array(e["gates"]), "viridis")
               for e in result["examples"]]
    columns = 3  # (panels three a row: each legible at the page's width)
    panel_rows = -(-(len(panels) + 1) // columns)
    fig, axes = subplots(panel_rows, columns, figsize=(FIGURE_WIDTH, 3.6 * panel_rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(panels) + 1:]:
        ax.axis("off")
    for ax, (title, values, cmap) in zip(flat, panels, strict=False):
        image = ax.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest",
                          vmin=None if cmap == "RdBu_r" else 0, vmax=None if cmap == "RdBu_r" else 1)
        ax.set(title=title, xlabel="unit", ylabel="highway layer")
        whole_numbers(ax.yaxis)
        fig.colorbar(image, ax=ax, fraction=0.08)
    per_layer = result["mean_activity_per_layer"]
    last = flat[len(panels)]
    last.plot(per_layer, range(len(per_layer)), "o-", ms=3)
    last.invert_yaxis()
    last.set(title="mean gate output\nper layer", xlabel="mean T", ylabel="highway layer")
    whole_numbers(last.yaxis)
    save_figure(fig, out / "gates.png", dpi=110)
    report = out / "report.md"
    write_text(report, "\n".join([
        f"# What the gates of a {result['depth']}-layer highway network learned ({result['data']})", "",
        *findings(gates_verdicts(result)),
        f"Run: `{result['run_dir']}`; test accuracy {100 * result['test_acc']:.2f}%.", "",
        "![gates](gates.png)", "",
        markdown_table(["measure", "value"], [
            ["gates mostly shut (T < 0.1), share of all gate outputs on the test set",
             f"{100 * result['closed_fraction']:.1f}%"],
            ["input dependence: std of T over test examples, mean over units",
             f"{result['input_dependence']:.3f}"],
            ["mean T, first / last highway layer",
             f"{result['mean_activity_per_layer'][0]:.3f} / {result['mean_activity_per_layer'][-1]:.3f}"]]), ""]))
    return report


def write_lesion_report(out: Path, result: dict[str, Any]) -> Path:
    """Test accuracy with each layer lesioned in turn (Fig. 4 of the highway paper), as a figure and table."""
    lesioned = result["lesioned"]
    fig, ax = subplots(figsize=(6, 3.2))
    ax.plot(range(len(lesioned)), [100 * a for a in lesioned], "o-", ms=3, label="one layer lesioned (T = 0)")
    ax.axhline(100 * result["baseline"], color="gray", ls="--", label="intact network")
    ax.set(xlabel="lesioned highway layer", ylabel="test accuracy (%)",
           title=f"{result['depth']}-layer highway net, {result['data']}")
    whole_numbers(ax.xaxis)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, out / "lesion.png", dpi=120)
    report = out / "report.md"
    write_text(report, "\n".join([
        f"# Lesioning a {result['depth']}-layer highway network ({result['data']})", "",
        *findings(lesion_verdicts(result)),
        f"Run: `{result['run_dir']}`. Intact test accuracy {100 * result['baseline']:.2f}%; "
        f"{result['harmless']} of {len(lesioned)} layers can be lesioned alone at a cost of at most one point.", "",
        "![lesion](lesion.png)", "",
        markdown_table(["lesioned layer", "test accuracy (%)", "change (points)"],
                       [[i, f"{100 * a:.2f}", f"{100 * (a - result['baseline']):+.2f}"]
                        for i, a in enumerate(lesioned)]), ""]))
    return report
