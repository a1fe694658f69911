"""Gated residual connections: a highway gate (or its relatives) around any block.

A Transformer's block adds its sublayer's output to its input, ``x + F(x)``. The highway paper's
gate, and the gates that followed it on residual connections, decide per element (or per layer)
how much of ``F(x)`` goes in:

- ``"residual"``: ``x + F(x)``, the baseline;
- ``"highway"``: ``T ⊙ F(x) + (1 − T) ⊙ x`` with ``T = σ(W_T x + b_T)`` (Srivastava et al., 2015),
  ``b_T = −2`` so that each block starts close to the identity; with ``gate_reads="both"`` the gate
  reads ``[x; F(x)]``;
- ``"gtrxl"``: GTrXL's GRU-type gate (Parisotto et al., 2019): with ``y = F(x)``,
  ``r = σ(W_r y + U_r x)``, ``z = σ(W_z y + U_z x + b_z)``, ``ĥ = tanh(W_g y + U_g (r ⊙ x))``,
  output ``(1 − z) ⊙ x + z ⊙ ĥ``; ``b_z`` starts at −2 (the paper's ``b_g = 2``), near the identity;
- ``"rezero"``: ``x + α F(x)`` with one learned scalar ``α`` starting at 0 (Bachlechner et al.,
  2020): the identity at initialisation.

:class:`GatedResidualNetwork` is the Temporal Fusion Transformer's gated residual block (Lim et
al., 2021). Each module's gate is a :class:`~highwaynet.nn.gate.Gate`, so
:func:`~highwaynet.analysis.record_gates` records it and :func:`~highwaynet.analysis.lesion`
shuts it (the block then carries its input through).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_factory,
    check_gate_bias,
    check_input,
    check_probability,
    check_size,
    check_tensor,
    describe,
)
from ._signature import settings_repr
from .gate import BranchGate, TransformGate

__all__ = ["RESIDUAL_KINDS", "GatedResidual", "GatedResidualNetwork"]

#: The connections :class:`GatedResidual` makes.
RESIDUAL_KINDS = ("residual", "highway", "gtrxl", "rezero")
_GATED = ("highway", "gtrxl")


class GatedResidual(nn.Module):
    r"""A residual connection around ``sublayer``, plain or gated: ``y = x ⊕ F(x)``.

    Args:
        sublayer: any module mapping ``(..., dim)`` to ``(..., dim)``; extra arguments of the
            forward call go to it.
        dim: the width of the residual stream.
        kind: ``"residual"`` (:math:`x + F(x)`), ``"highway"``
            (:math:`T \odot F(x) + (1 - T) \odot x`, :math:`T = \sigma(W_T x + b_T)`), ``"gtrxl"``
            (GTrXL's GRU-type gate) or ``"rezero"`` (:math:`x + \alpha F(x)`, :math:`\alpha = 0` at
            first). See the module's description for the equations.
        gate_bias: the initial bias of the gate that lets the branch in: :math:`b_T` (highway) or
            :math:`b_z` (gtrxl, the paper's :math:`-b_g`). Default −2 (:math:`\sigma(-2) = 0.12`:
            close to the identity). Only the gated kinds have one.
        gate_reads: what the highway gate reads: ``"stream"`` (:math:`x`) or ``"both"``
            (:math:`[x; F(x)]`).
        device, dtype: where and in what type the gate's parameters are made.

    Shape:
        ``x``: ``(..., dim)``; the output has its shape.

    Example::

        >>> block = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        >>> layer = GatedResidual(block, 64, kind="highway")
        >>> layer(torch.randn(8, 10, 64)).shape
        torch.Size([8, 10, 64])
    """

    def __init__(self, sublayer: nn.Module, dim: int, *, kind: str = "highway", gate_bias: float | None = None,
                 gate_reads: str = "stream", device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if not isinstance(sublayer, nn.Module):
            raise TypeError(f"GatedResidual wraps an nn.Module: sublayer must be one, got {describe(sublayer)}")
        if kind not in RESIDUAL_KINDS:
            raise ValueError(f"kind must be one of {', '.join(RESIDUAL_KINDS)}, got {kind!r}")
        if gate_bias is not None and kind not in _GATED:
            raise ValueError(f"kind {kind!r} has no gate bias: only {' and '.join(_GATED)} gates have one")
        if gate_bias is not None:
            check_gate_bias(gate_bias, dtype)
        check_choice("gate_reads", gate_reads, ("stream", "both"))
        if gate_reads != "stream" and kind != "highway":
            raise ValueError(f"gate_reads is the highway gate's setting, not kind {kind!r}'s")
        self.sublayer, self.dim, self.kind, self.gate_reads = sublayer, check_size("dim", dim), kind, gate_reads
        self.gate_bias = gate_bias if gate_bias is not None or kind not in _GATED else -2.0
        factory = check_factory(device, dtype)
        self.gate: TransformGate | BranchGate
        if kind == "highway":
            self.gate_proj = nn.Linear(dim * (2 if gate_reads == "both" else 1), dim, **factory)
            self.gate = TransformGate()
        elif kind == "gtrxl":
            self.from_branch = nn.Linear(dim, 3 * dim, bias=False, **factory)  # [W_r | W_z | W_g] y
            self.from_stream = nn.Linear(dim, 2 * dim, **factory)             # [U_r | U_z] x + [0 | b_z]
            self.candidate = nn.Linear(dim, dim, bias=False, **factory)       # U_g (r ⊙ x)
            self.gate = TransformGate()
        else:
            self.gate = BranchGate()
            if kind == "rezero":
                self.alpha = nn.Parameter(torch.zeros((), **factory))
        self.reset_gate_parameters()

    def reset_gate_parameters(self) -> None:
        """Start the gate as the module's description says (the sublayer's parameters are its own)."""
        with torch.no_grad():
            if self.kind == "highway":
                self.gate_proj.reset_parameters()
                self.gate_proj.bias.fill_(cast(float, self.gate_bias))
            elif self.kind == "gtrxl":
                for layer in (self.from_branch, self.from_stream, self.candidate):
                    layer.reset_parameters()
                self.from_stream.bias.zero_()
                self.from_stream.bias[self.dim:].fill_(cast(float, self.gate_bias))
            elif self.kind == "rezero":
                self.alpha.zero_()

    def forward(self, x: Tensor, *args: object, **kwargs: object) -> Tensor:
        gate_weight = {"highway": "gate_proj", "gtrxl": "from_stream"}.get(self.kind)
        if gate_weight is None:  # (no gate parameters to match but ReZero's scalar, which broadcasts)
            check_tensor("x", x, owner="GatedResidual")
        else:
            check_input("GatedResidual", "x", x, cast(nn.Linear, getattr(self, gate_weight)).weight)
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"GatedResidual expects inputs of shape (..., {self.dim}), got {tuple(x.shape)}")
        y = self.sublayer(x, *args, **kwargs)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"GatedResidual's sublayer must return its input's shape {tuple(x.shape)}, got {shape}")
        if self.kind == "highway":
            reads = x if self.gate_reads == "stream" else torch.cat([x, y], dim=-1)
            return self.gate(y, self.gate_proj(reads), x)
        if self.kind == "gtrxl":
            r_y, z_y, g_y = self.from_branch(y).chunk(3, dim=-1)
            r_x, z_x = self.from_stream(x).chunk(2, dim=-1)
            r = torch.sigmoid(r_y + r_x)
            candidate = torch.tanh(g_y + self.candidate(r * x))
            return self.gate(candidate, z_y + z_x, x)  # (1 − z) ⊙ x + z ⊙ ĥ
        return self.gate(y, x, self.alpha if self.kind == "rezero" else None)

    def extra_repr(self) -> str:
        return settings_repr(self, gate_bias=self.gate_bias if self.kind in _GATED and self.gate_bias != -2.0
                             else None)


class GatedResidualNetwork(nn.Module):
    r"""The Temporal Fusion Transformer's gated residual network (Lim et al., 2021).

    .. math::
        \eta_2 &= \mathrm{ELU}(W_2 a + W_3 c + b_2), \quad \eta_1 = W_1 \eta_2 + b_1, \\
        \mathrm{GRN}(a, c) &= \mathrm{LayerNorm}\big(\mathrm{skip}(a) + \sigma(W_4 \eta_1 + b_4)
        \odot (W_5 \eta_1 + b_5)\big)

    where :math:`\mathrm{skip}(a) = a`, or a linear projection where the output's width differs,
    and dropout applies to :math:`\eta_1`. The GLU's gate :math:`\sigma(W_4 \eta_1 + b_4)` is a
    :class:`~highwaynet.nn.gate.BranchGate`'s scale: recorded, and lesioned to 0 (the block is then
    :math:`\mathrm{LayerNorm}(\mathrm{skip}(a))`).

    Args:
        input_size: the width of ``a``.
        hidden_size: the width of :math:`\eta_1, \eta_2`.
        output_size: the output's width (default: ``input_size``).
        context_size: the width of an optional context ``c`` (default: no context).
        dropout: dropout on :math:`\eta_1`.
        device, dtype: where and in what type the parameters are made.

    Shape:
        ``a``: ``(..., input_size)``; ``context``: ``(..., context_size)``, broadcasting against
        ``a``'s leading dimensions; output ``(..., output_size)``.

    Example::

        >>> grn = GatedResidualNetwork(16, 32, context_size=4)
        >>> grn(torch.randn(8, 16), torch.randn(8, 4)).shape
        torch.Size([8, 16])
    """

    def __init__(self, input_size: int, hidden_size: int, output_size: int | None = None, *,
                 context_size: int | None = None, dropout: float = 0.0, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        input_size, hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        output_size = input_size if output_size is None else check_size("output_size", output_size)
        context_size = None if context_size is None else check_size("context_size", context_size)
        check_probability("dropout", dropout)
        factory = check_factory(device, dtype)
        self.input_size, self.hidden_size, self.output_size = input_size, hidden_size, output_size
        self.context_size = context_size
        self.input = nn.Linear(input_size, hidden_size, **factory)                       # W_2, b_2
        self.context = nn.Linear(context_size, hidden_size, bias=False, **factory) if context_size else None  # W_3
        self.hidden = nn.Linear(hidden_size, hidden_size, **factory)                     # W_1, b_1
        self.glu = nn.Linear(hidden_size, 2 * output_size, **factory)                   # [W_4 | W_5]
        self.skip = nn.Linear(input_size, output_size, **factory) if input_size != output_size else None
        self.dropout = nn.Dropout(dropout)
        self.gate = BranchGate()
        self.norm = nn.LayerNorm(output_size, **factory)

    def forward(self, a: Tensor, context: Tensor | None = None) -> Tensor:
        check_input("GatedResidualNetwork", "a", a, self.input.weight)
        if a.shape[-1:] != (self.input_size,):
            raise ValueError(f"GatedResidualNetwork expects a of shape (..., {self.input_size}), got {tuple(a.shape)}")
        if (context is None) != (self.context is None):
            raise ValueError("GatedResidualNetwork(context_size=...) takes a context, and one without takes none"
                             if context is None else "this GatedResidualNetwork was built without context_size: "
                             "it takes no context")
        if context is not None:
            check_input("GatedResidualNetwork", "context", context, self.input.weight)
            if context.shape[-1:] != (self.context_size,):
                raise ValueError(f"GatedResidualNetwork expects context of shape (..., {self.context_size}), "
                                 f"got {tuple(context.shape)}")
            try:
                torch.broadcast_shapes(a.shape[:-1], context.shape[:-1])
            except RuntimeError:
                raise ValueError(f"GatedResidualNetwork expects context's leading dimensions to broadcast against "
                                 f"a's, got a {tuple(a.shape)} and context {tuple(context.shape)}") from None
        eta2 = self.input(a)
        if self.context is not None and context is not None:
            eta2 = eta2 + self.context(context)
        eta1 = self.dropout(self.hidden(F.elu(eta2)))
        gate_logits, value = self.glu(eta1).chunk(2, dim=-1)
        skip = a if self.skip is None else self.skip(a)
        return self.norm(self.gate(value, skip, torch.sigmoid(gate_logits)))

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout.p,
                             output_size=None if self.output_size == self.input_size else self.output_size)
