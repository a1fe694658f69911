"""Convolutional highway layers: ``HighwayConv1d`` and ``HighwayConv2d`` with 'same' padding."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_factory,
    check_gate_bias,
    check_input,
    check_int,
    check_probability,
    check_size,
)
from ..functional import get_activation, split_parts
from ._signature import settings_repr
from .gate import TransformGate, check_carry
from .highway import init_gate_bias

__all__ = ["HighwayConv1d", "HighwayConv2d"]


class _HighwayConvNd(nn.Module):
    _conv: Callable[..., nn.Conv1d | nn.Conv2d]
    _spatial: int

    def __init__(
        self,
        channels: int,
        kernel_size: int | tuple[int, ...],
        *,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        gate_bias: float = -2.0,
        carry: str = "coupled",
        dropout: float = 0.0,
        dilation: int = 1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.channels = check_size("channels", channels)
        self.carry = check_carry(carry)
        self.gate_bias = check_gate_bias(gate_bias, dtype)
        self.activation = get_activation(activation)
        self.dropout_p, self.dilation = check_probability("dropout", dropout), check_int("dilation", dilation)
        factory = check_factory(device, dtype)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        parts = 2 if carry == "coupled" else 3
        # 'same' padding: an even kernel needs one more zero on the right/bottom than on the
        # left/top. Padding explicitly keeps odd kernels on the convolution's own (symmetric)
        # padding and avoids PyTorch's warning and extra copy for padding="same" with even ones.
        if isinstance(kernel_size, (tuple, list)):
            ks = tuple(check_int(f"kernel_size[{i}]", k) for i, k in enumerate(kernel_size))
        else:
            ks = (check_int("kernel_size", kernel_size),) * self._spatial
        if len(ks) != self._spatial or min(ks) < 1 or dilation < 1:
            raise ValueError(f"kernel_size must be a positive int or {self._spatial} of them, and dilation positive; "
                             f"got kernel_size={kernel_size}, dilation={dilation}")
        total = [dilation * (k - 1) for k in ks]
        self._pad = None
        if any(t % 2 for t in total):
            # F.pad takes (left, right) pairs from the last dimension backwards.
            self._pad = tuple(p for t in reversed(total) for p in (t // 2, t - t // 2))
            padding: int | tuple[int, ...] = 0
        else:
            padding = tuple(t // 2 for t in total)
        self.conv = self._conv(channels, parts * channels, ks, padding=padding, dilation=dilation, **factory)
        self.gate = TransformGate(carry=carry)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()
        init_gate_bias(cast(Tensor, self.conv.bias), self.channels, self.gate_bias, self.carry)

    def forward(self, x: Tensor) -> Tensor:
        check_input(type(self).__name__, "x", x, self.conv.weight)
        batched = self._spatial + 2
        if x.dim() not in (batched, batched - 1) or x.shape[-self._spatial - 1] != self.channels:
            raise ValueError(f"{type(self).__name__} expects inputs of shape (N, {self.channels}, "
                             f"{', '.join('*' * self._spatial)}), got {tuple(x.shape)}")
        if 0 in x.shape[-self._spatial:]:
            raise ValueError(f"{type(self).__name__} expects x's spatial sizes to be at least 1, got {tuple(x.shape)}")
        z = self.conv(x if self._pad is None else F.pad(x, self._pad))
        channel_dim = -self._spatial - 1
        if self.carry == "coupled":
            h, t = split_parts(z, 2, channel_dim)
            c = None
        else:
            h, t, c = split_parts(z, 3, channel_dim)
        return self.gate(self.dropout(self.activation(h)), t, x, c)

    def extra_repr(self) -> str:
        kernel_size = self.conv.kernel_size
        return settings_repr(self, kernel_size=kernel_size[0] if len(set(kernel_size)) == 1 else kernel_size,
                             dropout=self.dropout_p)


class HighwayConv1d(_HighwayConvNd):
    r"""A convolutional highway layer over sequences, ``(N, C, L) -> (N, C, L)``.

    .. math::
        [z_H \mid z_T] = \mathrm{conv}(x), \quad T = \sigma(z_T), \quad
        y = T \odot f(z_H) + (1 - T) \odot x

    One ``nn.Conv1d(C, 2C, kernel_size, padding="same")`` computes ``[H | T]`` along the channel
    dimension; 'same' padding keeps the length for odd and even kernels. Arguments as
    :class:`HighwayConv2d`.
    """

    _conv = nn.Conv1d
    _spatial = 1


class HighwayConv2d(_HighwayConvNd):
    r"""A convolutional highway layer over images (Lasagne's ``highway_conv2d``), ``(N, C, H, W) -> (N, C, H, W)``.

    .. math::
        [z_H \mid z_T] = \mathrm{conv}(x), \quad T = \sigma(z_T), \quad
        y = T \odot f(z_H) + (1 - T) \odot x

    Args:
        channels: input and output channels ``C`` (a highway layer keeps its width).
        kernel_size: odd or even; 'same' padding keeps the spatial size either way.
        activation: the transform's nonlinearity, a name or a callable. Default: ``"relu"``.
        gate_bias: initial transform-gate bias. Default: -2.0.
        carry: ``"coupled"`` or ``"independent"``. Default: ``"coupled"``.
        dropout: dropout on ``f(z_H)``. Default: 0.
        dilation: the convolution's dilation. Default: 1.
        device, dtype: where and in what type the parameters are made, as for ``nn.Conv2d``.

    Shape:
        - Input: ``(N, C, H, W)`` or ``(C, H, W)``
        - Output: the same shape.

    Example::

        >>> layer = HighwayConv2d(16, kernel_size=3)
        >>> layer(torch.randn(2, 16, 28, 28)).shape
        torch.Size([2, 16, 28, 28])
    """

    _conv = nn.Conv2d
    _spatial = 2
