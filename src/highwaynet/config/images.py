"""The image recipes' settings: a deep MLP (:class:`MLPConfig`), a CNN (:class:`CNNConfig`), and the
plain-vs-highway depth study (:class:`DepthConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._fields import check_settings, setting
from .train import SEED_LIMIT, TrainConfig, check_device_name, check_monitor

__all__ = ["ACTIVATIONS", "IMAGE_DATA", "CNNConfig", "DepthConfig", "MLPConfig"]

#: The image sets by name (:func:`highwaynet.data.load_image_data` loads each).
IMAGE_DATA = ("mnist5k", "fashion-mnist", "digits", "mnist")
#: The transforms a recipe can name (any callable works from Python: :mod:`highwaynet.functional`).
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu")


@dataclass
class MLPConfig:
    """A deep MLP experiment: one plain layer to the width, ``depth - 1`` highway layers (or, with
    ``plain``, ``depth`` plain layers), a softmax classifier.

    The gate bias defaults to -4 rather than the layer's -2: through 49 coupled layers the carry
    path scales the input by ``(1 - sigmoid(b))^49``, 0.002 at ``b = -2`` but 0.41 at ``b = -4``,
    and only the latter trains a 50-layer net within a few epochs of SGD (on MNIST 5k, 71% against
    93% validation accuracy after 10 epochs at ``lr = 0.1``).

    ``init="he"`` initialises every linear weight as He et al. (2015), as the highway paper did;
    the default keeps ``nn.Linear``'s, under which a plain ReLU net loses its signal within ten layers.
    """

    data: str = setting("mnist5k", help="the image set", choices=IMAGE_DATA)
    depth: int = setting(50, help="hidden layers: one plain layer, then highway layers", minimum=2)
    width: int = setting(50, help="units per hidden layer", minimum=1)
    plain: bool = setting(False, help="a plain network of the same depth, no highway gates")
    activation: str = setting("relu", help="the layers' nonlinearity", choices=ACTIVATIONS)
    gate_bias: float = setting(-4.0, help="initial transform-gate bias")
    init: str = setting("default", help="linear weights as nn.Linear initialises them, or He et al.",
                        choices=("default", "he"))
    dropout: float = setting(0.0, help="dropout on each hidden layer", minimum=0.0, below=1.0)
    batch_size: int = setting(100, help="training batch size", minimum=1)
    max_train: int | None = setting(None, help="use at most this many training images", minimum=1)
    split_seed: int = setting(0, help="seeds the validation split carved from the training images", minimum=0,
                              below=SEED_LIMIT)
    train: TrainConfig = setting(help="how to train", factory=lambda: TrainConfig(epochs=10, lr=0.1))

    def __post_init__(self) -> None:
        check_settings(self)
        check_monitor(self.train.monitor, ("loss", "acc"))


@dataclass
class CNNConfig:
    """A convolutional experiment: per stage a 3x3 convolution to the stage's width, then highway
    convolutions (or plain conv-BN-ReLU layers), then 2x2 max-pooling; global average pooling and a
    linear classifier; trained with random crops and flips. ``depth`` is the convolutional layers."""

    data: str = setting("fashion-mnist", help="the image set", choices=IMAGE_DATA)
    channels: list[int] = setting(help="channels of each stage", factory=lambda: [32, 64, 128], minimum=1,
                                  distinct=False)
    layers_per_stage: int = setting(3, help="highway (or plain) layers in each stage", minimum=1)
    plain: bool = setting(False, help="a plain CNN of the same depth and width")
    gate_bias: float = setting(-1.0, help="initial transform-gate bias")
    dropout: float = setting(0.2, help="dropout before the classifier", minimum=0.0, below=1.0)
    augment: bool = setting(True, help="random crops and flips of the training images")
    batch_size: int = setting(128, help="training batch size", minimum=1)
    max_train: int | None = setting(None, help="use at most this many training images", minimum=1)
    split_seed: int = setting(0, help="seeds the validation split carved from the training images", minimum=0,
                              below=SEED_LIMIT)
    train: TrainConfig = setting(help="how to train", factory=lambda: TrainConfig(
        epochs=30, lr=0.05, momentum=0.9, weight_decay=5e-4, schedule="cosine", monitor="val_acc"))

    def __post_init__(self) -> None:
        check_settings(self)
        check_monitor(self.train.monitor, ("loss", "acc"))

    @property
    def depth(self) -> int:
        return len(self.channels) * (self.layers_per_stage + 1)


@dataclass
class DepthConfig:
    """Plain vs highway MLPs at several depths (Srivastava et al., 2015, Fig. 1): for each depth and
    kind, the first seed trains at every rate of ``lrs`` and the rate with the lowest final training
    loss is kept for the other seeds. Highway layers ``highway_width`` wide and plain ones
    ``plain_width`` (about the same parameters), He initialisation, SGD with momentum 0.9; both kinds
    clip the gradient's norm at ``grad_clip``."""

    data: str = setting("mnist5k", help="the image set", choices=IMAGE_DATA)
    depths: list[int] = setting(help="network depths", factory=lambda: [10, 20, 50, 100], minimum=2)
    highway_width: int = setting(50, help="units per highway layer", minimum=1)
    plain_width: int = setting(71, help="units per plain layer (about the highway net's parameters)", minimum=1)
    lrs: list[float] = setting(help="learning rates searched", factory=lambda: [0.01, 0.03, 0.1], minimum=0.0)
    epochs: int = setting(6, help="epochs per run", minimum=1)
    seeds: list[int] = setting(help="seeds of each net", factory=lambda: [0, 1, 2], minimum=0, below=SEED_LIMIT)
    gate_bias: float = setting(-4.0, help="initial transform-gate bias of the highway nets")
    batch_size: int = setting(100, help="training batch size", minimum=1)
    max_train: int | None = setting(None, help="use at most this many training images", minimum=1)
    grad_clip: float | None = setting(1.0, help="clip each gradient's norm to this (0: no clipping)", minimum=0.0)
    device: str = setting("auto", help="auto (CUDA, MPS, then CPU), cpu, cuda, cuda:1, ...")
    cuda_graph: bool | None = setting(None, help="replay training steps as CUDA graphs (default: on a GPU)")

    def __post_init__(self) -> None:
        check_settings(self)
        check_device_name(self.device)
