"""Changing the width between highway blocks: a learned projection, or zero padding.

A highway layer carries its input through, so its input and output must have the same width.
Where a network changes width between blocks (the HBiLSTM article's two options), the input is
brought to the new width first, by one of these modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_factory, check_flag, check_input, check_size, check_tensor

__all__ = ["RESIZE_KINDS", "Projection", "ZeroPad", "make_resize"]

#: How a layer brings its input to a new width.
RESIZE_KINDS = ("projection", "zeropad")


class Projection(nn.Linear):
    r"""A learned change of width, ``y = x W^T`` (no bias by default): ``(*, in_features) -> (*, out_features)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(check_size("in_features", in_features), check_size("out_features", out_features),
                         bias=check_flag("bias", bias), **check_factory(device, dtype))

    def forward(self, input: Tensor) -> Tensor:
        check_input("Projection", "input", input, self.weight)
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise ValueError(f"Projection expects inputs of shape (..., {self.in_features}), got {tuple(input.shape)}")
        return super().forward(input)


class ZeroPad(nn.Module):
    r"""Widens the last dimension by appending zeros: ``(*, in_features) -> (*, out_features)``.

    Parameter-free, so the carried signal is the input itself in its first ``in_features`` units.

    Example::

        >>> ZeroPad(2, 4)(torch.ones(1, 2))
        tensor([[1., 1., 0., 0.]])
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        in_features, out_features = check_size("in_features", in_features), check_size("out_features", out_features)
        if out_features < in_features:
            raise ValueError(f"ZeroPad can only widen: in_features={in_features} > "
                             f"out_features={out_features}; use Projection to narrow")
        self.in_features = in_features
        self.out_features = out_features

    def forward(self, x: Tensor) -> Tensor:
        check_tensor("x", x, owner="ZeroPad")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"ZeroPad expects inputs of shape (..., {self.in_features}), got {tuple(x.shape)}")
        return F.pad(x, (0, self.out_features - self.in_features))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def make_resize(kind: str, in_features: int, out_features: int, device: torch.device | str | None = None,
                dtype: torch.dtype | None = None) -> nn.Module:
    """The module that brings ``in_features`` to ``out_features``: identity when they are equal,
    else ``kind`` = ``"projection"`` (its weight made on ``device`` in ``dtype``) or ``"zeropad"``."""
    if kind not in RESIZE_KINDS:
        raise ValueError(f"unknown resize {kind!r}: kind must be 'projection' or 'zeropad'")
    if check_size("in_features", in_features) == check_size("out_features", out_features):
        return nn.Identity()
    if kind == "projection":
        return Projection(in_features, out_features, device=device, dtype=dtype)
    return ZeroPad(in_features, out_features)
