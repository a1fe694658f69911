"""What a trained highway MLP's gates do (Srivastava et al., 2015, Fig. 2) and which layers it needs
(lesioning, Fig. 4). Both read an ``mlp`` run folder, for instance one seed of ``reproduce depth``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..analysis import gate_modules, lesion, record_gates
from . import mlp

__all__ = ["analyze_gates", "lesion_layers"]


def _load_highway(run_dir: str | Path, data_dir: str | Path | None, download: bool):
    if (Path(run_dir) / "summary.json").is_file() and not (Path(run_dir) / "config.json").is_file():
        raise ValueError(f"{run_dir} is a sweep's folder; give one of its runs, e.g. "
                         f"{Path(run_dir) / 'highway-50' / 'seed0'} for a depth sweep")
    model, config, data = mlp.load_trained(run_dir, data_dir, download)
    if not gate_modules(model):
        raise ValueError(f"{run_dir} holds a plain network: it has no gates to analyse")
    return model, config, data


@torch.no_grad()
def analyze_gates(run_dir: str | Path, out: str | Path | None = None, data_dir: str | Path | None = None,
                  examples: int = 3, download: bool = False) -> dict[str, Any]:
    """Transform-gate biases, mean gate activity over the test set, and single examples' gates.

    Writes ``gates.png``, ``gates.json`` and ``report.md`` into ``out`` (default ``RUN_DIR/gates``).
    """
    from ..report import write_gates_report

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
    out = Path(out) if out else Path(run_dir) / "gates"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gates.json").write_text(json.dumps(result) + "\n")
    write_gates_report(out, result)
    return result


@torch.no_grad()
def lesion_layers(run_dir: str | Path, out: str | Path | None = None, data_dir: str | Path | None = None,
                  download: bool = False) -> dict[str, Any]:
    """Test accuracy with each highway layer lesioned (``T = 0``) in turn.

    Writes ``lesion.png``, ``lesion.json`` and ``report.md`` into ``out`` (default ``RUN_DIR/lesion``).
    """
    from ..report import write_lesion_report

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
    out = Path(out) if out else Path(run_dir) / "lesion"
    out.mkdir(parents=True, exist_ok=True)
    (out / "lesion.json").write_text(json.dumps(result, indent=2) + "\n")
    write_lesion_report(out, result)
    return result
