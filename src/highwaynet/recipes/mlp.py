"""Recipe: a deep fully connected network, highway or plain, on an image set.

The Lasagne tutorial's network: a plain layer to the width, ``depth - 1`` highway layers, a
softmax classifier; trained with SGD and momentum. ``highwaynet train mlp`` runs it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from torch import nn

from .._checks import check_path
from ..config import MLPConfig
from ..data import ImageData, load_image_data
from ..models import HighwayMLP, PlainMLP
from ..models.mlp import he_init
from ..training import ClassificationTask, Trainer
from ..training.run_dir import load_best_weights, load_run_config, open_run, saved_config, write_text
from ..training.trainer import seed_everything

__all__ = ["MLPConfig", "build_model", "run"]




def build_model(config: MLPConfig, data: ImageData) -> nn.Module:
    """The network the config describes, initialised from ``config.train.seed``."""
    seed_everything(config.train.seed)
    model: nn.Module
    if config.plain:
        model = PlainMLP(data.in_features, data.num_classes, config.depth, config.width,
                         activation=config.activation, dropout=config.dropout)
    else:
        model = HighwayMLP(data.in_features, data.num_classes, config.depth, config.width,
                           activation=config.activation, gate_bias=config.gate_bias, dropout=config.dropout)
    return he_init(model) if config.init == "he" else model


def run(config: MLPConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, data: ImageData | None = None, log=None,
        progress: bool = True) -> dict[str, Any]:
    """Train the network, evaluate it on the test split, and write ``results.json`` in ``out``.

    With ``resume``, the configuration saved in ``out`` is used and training continues after its
    last finished epoch; with ``restart``, a run the folder holds is started over. Returns the
    results (test metrics, parameters, time).
    """
    out = check_path("out", out)
    with open_run(out, "mlp", config, resume=resume, restart=restart, device=config.train.device,
                  log=log) as saved:
        config = saved_config(MLPConfig, saved, out)
        return train_image_classifier(config, "plain" if config.plain else "highway", build_model, out,
                                      resume=resume, data_dir=data_dir, download=download, data=data, log=log,
                                      progress=progress)


def train_image_classifier(config, kind: str, build, out: str | Path, *, resume: bool, data_dir, download: bool,
                           data: ImageData | None, log, progress: bool, augment=None) -> dict[str, Any]:
    """The image recipes' shared part: data, model from ``build(config, data)``, Trainer, test, results."""
    start = time.perf_counter()
    if data is None:
        data = load_image_data(config.data, data_dir, download=download, split_seed=config.split_seed,
                               max_train=config.max_train)
    model = build(config, data)
    task = ClassificationTask(data, config.batch_size, seed=config.train.seed, augment=augment)
    trainer = Trainer(model, task, config.train, out, log=log, progress=progress)
    history = trainer.fit(resume=resume)
    results = {
        "model": kind,
        "depth": config.depth,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final": history[-1],
        "test": trainer.evaluate("test"),
        "device": str(trainer.device),
        # (a resumed run's time counts its earlier sessions' training too)
        "seconds": round(time.perf_counter() - start + trainer.earlier_seconds, 2),
        **({"diverged": trainer.diverged} if trainer.diverged else {}),
    }
    write_text(Path(out, "results.json"), json.dumps(results, indent=2) + "\n")
    return results


def load_trained(run_dir: str | Path, data_dir: str | Path | None = None, download: bool = False
                 ) -> tuple[nn.Module, MLPConfig, ImageData]:
    """A trained MLP from its run folder (its best weights), with its config and data."""
    run_dir = check_path("run_dir", run_dir)
    config = saved_config(MLPConfig, load_run_config(run_dir, "mlp")["config"], run_dir)
    data = load_image_data(config.data, data_dir, download=download, split_seed=config.split_seed,
                           max_train=config.max_train)
    return load_best_weights(build_model(config, data), run_dir).eval(), config, data
