"""Fully connected classifiers: the highway MLP of the papers and a plain MLP of the same depth."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from torch import Tensor, nn

from .._checks import check_input, check_int, check_probability, check_size
from ..functional import get_activation
from ..nn import Highway
from ..nn._signature import settings_repr

__all__ = ["HighwayMLP", "PlainMLP", "he_init"]


def he_init(model: nn.Module) -> nn.Module:
    """He et al. (2015) initialisation of every ``nn.Linear`` weight (normal, fan-in, ReLU gain),
    as the highway paper's networks; biases are left as they are (the gate biases included)."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return model


class HighwayMLP(nn.Module):
    r"""A deep highway classifier, as the Lasagne tutorial's ``build_model``.

    ``x -> flatten -> Linear(in, width) -> f -> Highway(width, depth - 1) -> Linear(width, classes)``

    ``depth`` counts the hidden layers: one plain layer to reach the width, then ``depth - 1``
    highway layers. The output is the logits.

    Args:
        in_features: size of a flattened input (784 for MNIST).
        num_classes: number of classes.
        depth: number of hidden layers (at least 2).
        width: width of every hidden layer. Default: 50 (the highway paper's MNIST nets).
        activation, gate_bias, carry, dropout: as :class:`highwaynet.nn.Highway`.

    Shape:
        ``(N, *)`` with ``prod(*) == in_features`` -> ``(N, num_classes)``.

    Example::

        >>> net = HighwayMLP(784, 10, depth=50)          # the paper's 50-layer MNIST net, 50 wide
        >>> net(torch.randn(100, 1, 28, 28)).shape
        torch.Size([100, 10])
    """

    def __init__(self, in_features: int, num_classes: int, depth: int, width: int = 50, *,
                 activation: str | Callable[[Tensor], Tensor] = "relu", gate_bias: float = -2.0,
                 carry: str = "coupled", dropout: float = 0.0) -> None:
        super().__init__()
        in_features, num_classes = check_size("in_features", in_features), check_size("num_classes", num_classes)
        if check_int("depth", depth) < 2:
            raise ValueError(f"a highway MLP needs depth >= 2 (one plain layer, then highway layers), "
                             f"got depth={depth}")
        width = check_size("width", width)
        self.in_features, self.num_classes, self.depth, self.width = in_features, num_classes, depth, width
        self.activation = get_activation(activation)
        self.input = nn.Linear(in_features, width)
        self.highway = Highway(width, depth - 1, activation=activation, gate_bias=gate_bias, carry=carry,
                               dropout=dropout)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _flatten(type(self).__name__, x, self.input.weight)
        return self.classifier(self.highway(self.activation(self.input(x))))

    def extra_repr(self) -> str:
        return settings_repr(self, gate_bias=self.highway.gate_bias, carry=self.highway.carry,
                             dropout=self.highway.dropout_p)


class PlainMLP(nn.Module):
    r"""A plain deep classifier: ``depth`` layers ``Linear -> f`` of one width, then a linear classifier.

    Initialised as ``nn.Linear`` is, like :class:`HighwayMLP`, so that the two differ only in the
    highway gating. The default width, 71, is the highway paper's: about the parameters of a highway
    MLP 50 wide.

    Shape:
        ``(N, *)`` with ``prod(*) == in_features`` -> ``(N, num_classes)``.
    """

    def __init__(self, in_features: int, num_classes: int, depth: int, width: int = 71, *,
                 activation: str | Callable[[Tensor], Tensor] = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        in_features, num_classes = check_size("in_features", in_features), check_size("num_classes", num_classes)
        depth, width = check_size("depth", depth), check_size("width", width)
        self.in_features, self.num_classes, self.depth, self.width = in_features, num_classes, depth, width
        self.dropout_p = check_probability("dropout", dropout)
        self.activation = get_activation(activation)
        self.layers = nn.ModuleList(
            nn.Linear(in_features if i == 0 else width, width) for i in range(depth))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _flatten(type(self).__name__, x, cast(nn.Linear, self.layers[0]).weight)
        for layer in self.layers:
            x = self.dropout(self.activation(layer(x)))
        return self.classifier(x)

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p)


def _flatten(owner: str, x: Tensor, weight: Tensor) -> Tensor:
    """``x`` ``(N, *)`` as ``(N, in_features)``, checked against the first layer's ``weight``."""
    check_input(owner, "x", x, weight)
    in_features = weight.shape[1]
    if x.dim() < 2 or math.prod(x.shape[1:]) != in_features:
        raise ValueError(f"{owner} expected inputs (N, *) with {in_features} features per example, "
                         f"got {tuple(x.shape)}")
    return x.flatten(1)
