"""Convolutional classifiers: a highway CNN (stacked ``HighwayConv2d`` between pooling stages, a
Fitnet-like layout as the highway paper's CIFAR nets) and a plain CNN of equal depth and width."""

from __future__ import annotations

from torch import Tensor, nn

from .._checks import check_flag, check_gate_bias, check_input, check_probability, check_size, check_sizes
from ..nn import HighwayConv2d
from ..nn._signature import settings_repr

__all__ = ["HighwayCNN"]


class HighwayCNN(nn.Module):
    r"""``stem conv -> [layers_per_stage conv layers -> 2x2 max-pool] per stage -> global average pool -> linear``.

    Each stage widens to its channel count with a plain 3x3 convolution, then stacks
    ``layers_per_stage`` highway convolutions (:class:`~highwaynet.nn.HighwayConv2d`), or, with
    ``plain=True``, as many plain ``Conv2d -> BatchNorm -> ReLU`` layers of the same width.

    Args:
        in_channels: image channels (1 for Fashion-MNIST).
        num_classes: classes.
        channels: channels of each stage. Default: ``(32, 64, 128)``.
        layers_per_stage: highway (or plain) layers in each stage. Default: 3.
        plain: build the plain network of equal depth and width.
        gate_bias: initial transform-gate bias. Default: -1.0.
        dropout: dropout before the classifier. Default: 0.2.

    Shape:
        ``(N, in_channels, H, W)`` -> ``(N, num_classes)``.

    Example::

        >>> HighwayCNN(1, 10)(torch.randn(4, 1, 28, 28)).shape     # Fashion-MNIST images
        torch.Size([4, 10])
    """

    def __init__(self, in_channels: int, num_classes: int, *, channels: tuple[int, ...] = (32, 64, 128),
                 layers_per_stage: int = 3, plain: bool = False, gate_bias: float = -1.0, dropout: float = 0.2) -> None:
        super().__init__()
        in_channels, num_classes = check_size("in_channels", in_channels), check_size("num_classes", num_classes)
        channels = check_sizes("channels", channels)
        check_size("layers_per_stage", layers_per_stage, minimum=0)
        check_gate_bias(gate_bias)
        check_probability("dropout", dropout)
        check_flag("plain", plain)
        self.in_channels, self.num_classes, self.channels = in_channels, num_classes, tuple(channels)
        self.layers_per_stage, self.plain, self.gate_bias, self.dropout_p = layers_per_stage, plain, gate_bias, dropout
        stages: list[nn.Module] = []
        width = in_channels
        for c in channels:
            stages += [nn.Conv2d(width, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            for _ in range(layers_per_stage):
                if plain:
                    stages += [nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
                else:
                    stages.append(HighwayConv2d(c, 3, gate_bias=gate_bias))
            stages.append(nn.MaxPool2d(2))
            width = c
        self.features = nn.Sequential(*stages)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        check_input("HighwayCNN", "x", x, self.classifier.weight)
        smallest = 2 ** len(self.channels)  # (each stage halves the height and width)
        if x.dim() != 4 or x.shape[1] != self.in_channels or min(x.shape[2:]) < smallest:
            raise ValueError(f"HighwayCNN expects x, images of {self.in_channels} channels at least {smallest} x "
                             f"{smallest} (one 2x2 pooling per stage): of shape (N, C, H, W), got {tuple(x.shape)}")
        return self.classifier(self.dropout(self.features(x).mean((2, 3))))

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p)
