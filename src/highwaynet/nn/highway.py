"""``Highway``: a stack of dense highway layers."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import torch
from torch import Tensor, nn

from .._checks import check_factory, check_flag, check_gate_bias, check_input, check_probability, check_size
from ..functional import get_activation, split_parts
from ..kernels.activations import Activation, activation_code
from ..kernels.dense_highway import DensePath, choose_path, highway_layer
from ..kernels.dispatch import note
from ._signature import settings_repr
from .gate import TransformGate, check_carry

__all__ = ["Highway"]


def init_gate_bias(bias: Tensor, dim: int, gate_bias: float, carry: str) -> None:
    """Initialise a ``[H | T]`` (or ``[H | T | C]``) bias: 0 for H, ``gate_bias`` for T, ``-gate_bias`` for C.

    ``dim`` is the size of one part. An independent carry gate starts as open as the coupled form's
    ``1 - T`` would be, so that both forms start close to the identity.
    """
    with torch.no_grad():
        bias.zero_()
        bias[dim:2 * dim].fill_(gate_bias)
        if carry == "independent":
            bias[2 * dim:3 * dim].fill_(-gate_bias)


class Highway(nn.Module):
    r"""A stack of dense highway layers (Srivastava et al., 2015).

    Each layer ``i`` computes, on inputs of shape ``(..., dim)``,

    .. math::
        [z_H \mid z_T] = W_i x + b_i, \qquad
        T = \sigma(z_T), \qquad
        y = T \odot f(z_H) + (1 - T) \odot x

    with one projection ``nn.Linear(dim, 2 * dim)`` whose output is ``[H | T]`` in that order
    (GluonNLP's layout). Separate H and T projections (Chainer's and Lasagne's layout) are the
    same maths: concatenate their weights along the output dimension, H first.

    Args:
        dim: the width of the input and of every layer.
        num_layers: how many highway layers to stack. Default: 1.
        activation: the transform's nonlinearity ``f``: ``"relu"``, ``"tanh"``, ``"sigmoid"``,
            ``"gelu"``, ``"identity"`` or any callable / ``nn.Module``. Default: ``"relu"``.
        gate_bias: initial bias of the transform gate. Negative, so that the stack starts out
            close to the identity and deep stacks train. Default: -2.0 (as GluonNLP).
        carry: ``"coupled"`` (``C = 1 - T``) or ``"independent"``, where each projection has a
            third part for a carry gate and ``y = T \odot f(z_H) + \sigma(z_C) \odot x``
            (its bias starts at ``-gate_bias``). Default: ``"coupled"``.
        dropout: dropout probability applied to ``f(z_H)`` in training. Default: 0.
        fused: on CUDA with Triton installed, run each layer as
            :func:`highwaynet.kernels.highway_layer` (one fused element-wise pass each way around
            the matrix products) where it applies: coupled carry, an activation the kernels know
            (relu, tanh, sigmoid, identity), dtypes the kernels compute exactly (float32, float16,
            bfloat16: float64 stays unfused), no dropout in training, gates not recorded or
            lesioned, not under ``torch.compile`` (which fuses the reference itself), nor under
            ``torch.func``'s transforms or forward-mode AD (which need more than a backward)
            (:func:`highwaynet.kernels.dense_highway.choose_path` decides; :func:`highwaynet.kernels.explain`
            says which ran and why). Same values as the unfused layers; gradients of first order only
            (``fused=False`` for gradients of gradients). On the CPU the unfused path is the faster and
            always runs. Default: True.
        device, dtype: where and in what type the parameters are made, as for ``nn.Linear``.

    Shape:
        - Input: ``(*, dim)``
        - Output: ``(*, dim)``, the same shape.

    Attributes:
        layers: ``nn.ModuleList`` of the projections, ``nn.Linear(dim, 2 * dim)`` each
            (``3 * dim`` with an independent carry gate). Biases start at 0 for H and
            ``gate_bias`` for T.
        gates: ``nn.ModuleList`` of :class:`TransformGate`, one per layer: where
            :func:`highwaynet.analysis.record_gates` and :func:`highwaynet.analysis.lesion` act.

    Example::

        >>> net = Highway(64, num_layers=3)
        >>> net(torch.randn(8, 10, 64)).shape
        torch.Size([8, 10, 64])
    """

    def __init__(
        self,
        dim: int,
        num_layers: int = 1,
        *,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        gate_bias: float = -2.0,
        carry: str = "coupled",
        dropout: float = 0.0,
        fused: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_size("dim", dim)
        self.num_layers = check_size("num_layers", num_layers)
        self.carry = check_carry(carry)
        self.gate_bias = check_gate_bias(gate_bias, dtype)
        self.activation = get_activation(activation)
        self.fused = check_flag("fused", fused)
        self._code = activation_code(self.activation)
        self.dropout_p = check_probability("dropout", dropout)
        factory = check_factory(device, dtype)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        parts = 2 if carry == "coupled" else 3
        self.layers = nn.ModuleList(nn.Linear(dim, parts * dim, **factory) for _ in range(num_layers))
        self.gates = nn.ModuleList(TransformGate(carry=carry) for _ in range(num_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights as ``nn.Linear`` initialises them; biases 0 for H and ``gate_bias`` for T."""
        for proj in self._projections():
            proj.reset_parameters()
            init_gate_bias(proj.bias, self.dim, self.gate_bias, self.carry)

    def _projections(self) -> Iterable[nn.Linear]:
        return cast("Iterable[nn.Linear]", self.layers)  # (a ModuleList's items are typed Module)

    def forward(self, x: Tensor) -> Tensor:
        first = next(iter(self._projections())).weight
        check_input("Highway", "x", x, first)
        if x.dim() == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"Highway expects inputs of shape (..., {self.dim}), "
                             f"got {tuple(x.shape)}")
        choice = note(self, choose_path(x, fused=self.fused, activation=self._code, carry=self.carry,
                                        dropout_in_training=self.training and isinstance(self.dropout, nn.Dropout),
                                        gates_plain=all(g.is_plain for g in self.gates),
                                        weight=first))
        if choice.path is DensePath.FUSED:
            for proj in self._projections():
                x = highway_layer(x, proj.weight, proj.bias, cast(Activation, self._code))
            return x
        for proj, gate in zip(self._projections(), self.gates, strict=True):
            z = proj(x)
            if self.carry == "coupled":
                h, t = split_parts(z, 2)
                c = None
            else:
                h, t, c = split_parts(z, 3)
            x = gate(self.dropout(self.activation(h)), t, x, c)
        return x

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p)
