"""Changing the width between highway blocks: a learned projection, or zero padding.

A highway layer carries its input through, so its input and output must have the same width.
Where a network changes width between blocks (the HBiLSTM article's two options), the input is
brought to the new width first, by one of these modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Projection", "ZeroPad", "make_resize"]


class Projection(nn.Linear):
    r"""A learned change of width, ``y = x W^T`` (no bias by default): ``(*, in_features) -> (*, out_features)``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)


class ZeroPad(nn.Module):
    r"""Widens the last dimension by appending zeros: ``(*, in_features) -> (*, out_features)``.

    Parameter-free, so the carried signal is the input itself in its first ``in_features`` units.

    Example::

        >>> ZeroPad(2, 4)(torch.ones(1, 2))
        tensor([[1., 1., 0., 0.]])
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        if out_features < in_features:
            raise ValueError(f"ZeroPad can only widen: in_features={in_features} > "
                             f"out_features={out_features}; use Projection to narrow")
        self.in_features = in_features
        self.out_features = out_features

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"ZeroPad expects inputs of shape (..., {self.in_features}), got {tuple(x.shape)}")
        return F.pad(x, (0, self.out_features - self.in_features))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def make_resize(kind: str, in_features: int, out_features: int, device: torch.device | str | None = None,
                dtype: torch.dtype | None = None) -> nn.Module:
    """The module that brings ``in_features`` to ``out_features``: identity when they are equal,
    else ``kind`` = ``"projection"`` (its weight made on ``device`` in ``dtype``) or ``"zeropad"``."""
    if in_features == out_features:
        return nn.Identity()
    if kind == "projection":
        return Projection(in_features, out_features, device=device, dtype=dtype)
    if kind == "zeropad":
        return ZeroPad(in_features, out_features)
    raise ValueError(f"unknown resize {kind!r}; expected 'projection' or 'zeropad'")
