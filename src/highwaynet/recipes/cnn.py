"""Recipe: a convolutional highway network (or a plain CNN of equal depth and width) on images,
with random crops and flips. ``highwaynet train cnn --data fashion-mnist`` runs it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..data import ImageData
from ..data.augment import RandomCropFlip
from ..models import HighwayCNN
from ..training import TrainConfig
from ..training.run_dir import prepare_run_dir
from ..training.trainer import seed_everything
from .mlp import train_image_classifier

__all__ = ["CNNConfig", "build_model", "run"]


@dataclass
class CNNConfig:
    """A convolutional experiment; ``depth`` is the number of convolutional layers it works out to."""

    data: str = "fashion-mnist"
    channels: list[int] = field(default_factory=lambda: [32, 64, 128])
    layers_per_stage: int = 3
    plain: bool = False
    gate_bias: float = -1.0
    dropout: float = 0.2
    augment: bool = True
    batch_size: int = 128
    max_train: int | None = None
    split_seed: int = 0
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        epochs=30, lr=0.05, momentum=0.9, weight_decay=5e-4, schedule="cosine", monitor="val_acc"))

    def __post_init__(self) -> None:
        if isinstance(self.train, dict):
            self.train = TrainConfig(**self.train)
        if not self.channels or self.layers_per_stage < 1:
            raise ValueError("a CNN needs at least one stage and one layer per stage")

    @property
    def depth(self) -> int:
        return len(self.channels) * (self.layers_per_stage + 1)


def build_model(config: CNNConfig, data: ImageData) -> nn.Module:
    seed_everything(config.train.seed)
    return HighwayCNN(data.image_shape[0], data.num_classes, tuple(config.channels), config.layers_per_stage,
                      config.plain, config.gate_bias, config.dropout)


def run(config: CNNConfig, out: str | Path, *, resume: bool = False, data_dir: str | Path | None = None,
        download: bool = False, data: ImageData | None = None, log=None, progress: bool = True) -> dict[str, Any]:
    """Train with augmentation, test, write ``results.json``; as :func:`highwaynet.recipes.mlp.run`."""
    config = CNNConfig(**prepare_run_dir(out, "cnn", asdict(config), resume))
    return train_image_classifier(config, "plain-cnn" if config.plain else "highway-cnn", build_model, out,
                                  resume=resume, data_dir=data_dir, download=download, data=data, log=log,
                                  progress=progress, augment=RandomCropFlip() if config.augment else None)
