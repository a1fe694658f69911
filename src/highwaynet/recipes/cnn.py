"""Recipe: a convolutional highway network (or a plain CNN of equal depth and width) on images,
with random crops and flips. ``highwaynet train cnn --data fashion-mnist`` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from .._checks import check_path
from ..config import CNNConfig
from ..data import ImageData
from ..data.augment import RandomCropFlip
from ..models import HighwayCNN
from ..training.run_dir import open_run, saved_config
from ..training.trainer import seed_everything
from .mlp import train_image_classifier

__all__ = ["CNNConfig", "build_model", "run"]




def build_model(config: CNNConfig, data: ImageData) -> nn.Module:
    """The :class:`~highwaynet.models.HighwayCNN` (or plain CNN) the config describes for ``data``,
    initialised from ``config.train.seed``."""
    seed_everything(config.train.seed)
    return HighwayCNN(data.image_shape[0], data.num_classes, channels=tuple(config.channels),
                      layers_per_stage=config.layers_per_stage, plain=config.plain, gate_bias=config.gate_bias,
                      dropout=config.dropout)


def run(config: CNNConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, data: ImageData | None = None, log=None,
        progress: bool = True) -> dict[str, Any]:
    """Train with augmentation, test, write ``results.json``; as :func:`highwaynet.recipes.mlp.run`."""
    out = check_path("out", out)
    with open_run(out, "cnn", config, resume=resume, restart=restart, device=config.train.device,
                  log=log) as saved:
        config = saved_config(CNNConfig, saved, out)
        return train_image_classifier(config, "plain-cnn" if config.plain else "highway-cnn", build_model, out,
                                      resume=resume, data_dir=data_dir, download=download, data=data, log=log,
                                      progress=progress, augment=RandomCropFlip() if config.augment else None)
