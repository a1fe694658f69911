"""Recurrent Highway Networks (Zilly, Srivastava, Koutník & Schmidhuber, ICML 2017)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast, overload

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from .._checks import (
    check_factory,
    check_flag,
    check_gate_bias,
    check_input,
    check_probability,
    check_size,
    check_state,
    warn_unused_dropout,
)
from ..functional import get_activation, split_parts
from ..kernels.dispatch import note
from ..kernels.rhn_recurrence import choose_path, rhn_recurrence
from ._signature import settings_repr
from .gate import TransformGate, check_carry
from .highway import init_gate_bias
from .sequence import batch_sequence, check_lengths, initial_state, pack_like, unbatch_sequence, unpack_sequence

__all__ = ["RHN", "RHNCell", "variational_mask"]


def _reversed(x: Tensor, reverse: Tensor | None) -> Tensor:
    """``x`` ``(T, B, F)`` with each sequence's valid steps in reverse order (``reverse`` from
    :meth:`RHN.forward`; None: every sequence is full length). Its own inverse."""
    if reverse is None:
        return x.flip(0)
    return x.gather(0, reverse.unsqueeze(-1).expand_as(x))


def variational_mask(x: Tensor, p: float, shape: tuple[int, ...]) -> Tensor | None:
    """A dropout mask of ``shape`` (scaled by ``1 / (1 - p)``), or None when ``p == 0``.

    Drawn once and reused at every time step: variational dropout (Gal & Ghahramani, 2016), the
    scheme of the RHN paper.
    """
    if p == 0:
        return None
    return torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1 - p).div_(1 - p)


def variational_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``x`` ``(T, B, F)`` times one :func:`variational_mask` per sequence, the same at every step
    (``x`` itself when not ``training`` or ``p == 0``)."""
    mask = variational_mask(x, p, (1, *x.shape[1:])) if training else None
    return x if mask is None else x * mask


class RHNCell(nn.Module):
    r"""One layer of a Recurrent Highway Network for one time step, with recurrence depth ``L``.

    Micro-layer ``d = 0 .. L-1`` of step ``t`` updates the state ``s``:

    .. math::
        [z_H \mid z_T] &= R_d\, s_{d-1} + b_d + [d = 0]\, W x_t, \\
        s_d &= \tanh(z_H) \odot \sigma(z_T) + s_{d-1} \odot (1 - \sigma(z_T))

    with ``s_{-1}`` the previous step's state and ``s_{L-1}`` the new one (coupled carry gate; with
    ``carry="independent"`` each projection has a third part and ``C = σ(z_C)``).

    Args:
        input_size: features of ``x_t``.
        hidden_size: features of the state.
        depth: recurrence depth ``L`` (micro-layers per time step). Default: 4.
        carry: ``"coupled"`` or ``"independent"``. Default: ``"coupled"``.
        gate_bias: initial transform-gate bias of every micro-layer. Default: -2.0.
        activation: the transform's nonlinearity. Default: ``"tanh"``.
        device, dtype: where and in what type the parameters are made, as for ``nn.Linear``.

    Attributes:
        input_proj: ``nn.Linear(input_size, 2 * hidden_size, bias=False)``, output ``[H | T]``.
        hidden_proj: ``nn.ModuleList`` of ``nn.Linear(hidden_size, 2 * hidden_size)``, one per micro-layer.
        gates: one :class:`TransformGate` per micro-layer (recorded and lesioned per micro-layer).

    Shape:
        ``input`` ``(B, input_size)`` and ``state`` ``(B, hidden_size)`` (zeros if None; by keyword
        also ``hx``, ``nn.RNNCell``'s name for it) -> the new state ``(B, hidden_size)``; unbatched, as
        ``nn.RNNCell``: ``(input_size,)`` and ``(hidden_size,)`` -> ``(hidden_size,)``.

    Example::

        >>> cell = RHNCell(10, 20, depth=3)
        >>> s = None
        >>> for x_t in torch.randn(5, 8, 10):   # 5 steps of a batch of 8, one at a time
        ...     s = cell(x_t, s)
        >>> s.shape
        torch.Size([8, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, *, depth: int = 4, carry: str = "coupled",
                 gate_bias: float = -2.0, activation: str | Callable[[Tensor], Tensor] = "tanh",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        self.depth = check_size("depth", depth)
        self.carry = check_carry(carry)
        self.gate_bias = check_gate_bias(gate_bias, dtype)
        self.activation = get_activation(activation)
        self.parts = 2 if carry == "coupled" else 3
        factory = check_factory(device, dtype)
        self.input_proj = nn.Linear(input_size, self.parts * hidden_size, bias=False, **factory)
        self.hidden_proj = nn.ModuleList(nn.Linear(hidden_size, self.parts * hidden_size, **factory)
                                         for _ in range(depth))
        self.gates = nn.ModuleList(TransformGate(carry=carry) for _ in range(depth))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.input_proj.reset_parameters()
        for proj in self.projections():
            proj.reset_parameters()
            init_gate_bias(proj.bias, self.hidden_size, self.gate_bias, self.carry)

    def projections(self) -> Iterable[nn.Linear]:
        """The micro-layers' ``[H | T]`` projections, :attr:`hidden_proj` typed as what it holds."""
        return cast("Iterable[nn.Linear]", self.hidden_proj)

    def step(self, x_proj: Tensor, state: Tensor, state_mask: Tensor | None = None) -> Tensor:
        """One time step from the input's projection ``x_proj = input_proj(x_t)``, ``(B, parts·H)``.

        ``state_mask`` (variational dropout) multiplies the state where it enters the products;
        the carried state is never dropped.
        """
        s = state
        for d, (proj, gate) in enumerate(zip(self.hidden_proj, self.gates, strict=True)):
            z = proj(s if state_mask is None else s * state_mask)
            if d == 0:
                z = z + x_proj
            parts = split_parts(z, self.parts)
            s = gate(self.activation(parts[0]), parts[1], s, parts[2] if self.parts == 3 else None)
        return s

    def forward(self, input: Tensor, state: Tensor | None = None, *, hx: Tensor | None = None) -> Tensor:
        state = initial_state("RHNCell", state, hx)
        check_input("RHNCell", "input", input, self.input_proj.weight)
        if input.dim() not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(f"RHNCell expects input of shape (B, {self.input_size}) or ({self.input_size},) "
                             f"(unbatched), got {tuple(input.shape)}")
        unbatched = input.dim() == 1
        if state is None:
            state = input.new_zeros(*input.shape[:-1], self.hidden_size)
        else:
            check_state("RHNCell", "state", state, (*input.shape[:-1], self.hidden_size), input,
                        "(hidden_size,) for an unbatched input" if unbatched else "(B, hidden_size)")
        if unbatched:  # (as nn.RNNCell: one sequence's step, without its batch dimension)
            return self.step(self.input_proj(input).unsqueeze(0), state.unsqueeze(0)).squeeze(0)
        return self.step(self.input_proj(input), state)

    def extra_repr(self) -> str:
        return settings_repr(self)


class RHN(nn.Module):
    r"""A multi-layer Recurrent Highway Network with an ``nn.LSTM``-like API.

    Each layer is an :class:`RHNCell` of recurrence depth ``depth`` (two when bidirectional: one
    reads the sequence forward, the other backward, and their states are concatenated); layer
    ``l + 1`` reads layer ``l``'s states as its input sequence. The input projection of a whole
    sequence is computed in one matrix product before the recurrence.

    Args:
        input_size: features of the input.
        hidden_size: features of the state of every layer.
        num_layers: stacked RHN layers. Default: 1.
        depth: recurrence depth (micro-layers per time step), keyword-only. Default: 4.
        dropout: variational dropout on the outputs of every layer but the last (as ``nn.LSTM``'s
            ``dropout``, but one mask per sequence; with one layer it drops nothing, and warns so, as
            ``nn.LSTM``'s). Default: 0.
        batch_first: inputs and outputs are ``(B, T, F)`` instead of ``(T, B, F)``. Default: False.
        carry: ``"coupled"`` or ``"independent"``. Default: ``"coupled"``.
        gate_bias: initial transform-gate bias (negative, as in the paper). Default: -2.0.
        input_dropout: variational dropout on the first layer's input. Default: 0.
        state_dropout: variational dropout on the states where they enter the recurrent
            products, per layer (the paper's scheme). Default: 0.
        fused: use :func:`highwaynet.kernels.rhn_recurrence` (hand-written backward, weight
            gradients in one product per micro-layer) where it applies: coupled carry, gates not
            recorded or lesioned (padded batches and packed sequences too), not under ``torch.func``'s
            transforms (``grad``, ``vmap``, ``jvp``, ...) or forward-mode AD, which need more than a
            backward, not while ONNX export traces it, and under torch 2.3 not while being compiled or
            exported (:func:`highwaynet.kernels.rhn_recurrence.choose_path` decides;
            :func:`highwaynet.kernels.explain` says which path each layer took, and why). Same values
            as the reference loop; gradients of first order only (``fused=False`` for gradients of
            gradients, as with cuDNN's ``nn.LSTM``). Default: True.
        bidirectional: add a second RHN per layer that reads each sequence backward, from its
            last valid step (as ``nn.LSTM``'s). Default: False.
        device, dtype: where and in what type the parameters are made, as for ``nn.LSTM``.

    Inputs: ``input, state``
        - **input**: ``(T, B, input_size)`` (or ``(B, T, input_size)`` when ``batch_first``), one
          unbatched sequence ``(T, input_size)``, or a :class:`~torch.nn.utils.rnn.PackedSequence`.
        - **state**: ``(D * num_layers, B, hidden_size)`` (``(D * num_layers, hidden_size)`` for an
          unbatched input), zeros when None, where ``D = 2`` if ``bidirectional`` else 1 (layer by
          layer, the forward direction first, as ``nn.LSTM``). By keyword also as ``hx``, ``nn.LSTM``'s
          name for it (a ``TypeError`` if both are given).
        - **lengths** (keyword): ``(B,)`` valid lengths of a padded batch. Steps past a sequence's
          length leave its state unchanged and give zero outputs, so padding (of any value) never
          changes a shorter sequence's result.

    Outputs: ``output, state``
        - **output**: ``(T, B, D * hidden_size)`` (or batch first, unbatched or packed like the
          input): the last layer's state at every step (bidirectional: ``[forward | backward]``).
        - **state**: ``(D * num_layers, B, hidden_size)`` (no ``B`` for an unbatched input), each
          layer's state after each sequence's last valid step (the backward direction's: after its
          first step). Passing a unidirectional RHN's state to the next call continues the sequence
          exactly.

    Compiled and exported: ``torch.compile`` and ``torch.export`` take the fused recurrence as one
    operator, so that an exported RHN serves any sequence length and batch size (needs torch ≥ 2.4;
    under 2.3 they trace the reference loop, and an exported RHN keeps the length it was traced
    with). With ``lengths``, compiled and exported code checks them itself (needs torch ≥ 2.10).
    ONNX export (``torch.onnx.export(..., dynamo=True)``, needs torch ≥ 2.10) writes the reference
    loop, for the traced length.

    Example::

        >>> rhn = RHN(32, 64, num_layers=2, depth=3)
        >>> out, state = rhn(torch.randn(35, 8, 32))
        >>> out.shape, state.shape
        (torch.Size([35, 8, 64]), torch.Size([2, 8, 64]))
        >>> rhn
        RHN(
          32, 64, num_layers=2, depth=3
          (cells): ModuleList(...)
        )
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *, depth: int = 4,
                 dropout: float = 0.0, batch_first: bool = False, carry: str = "coupled", gate_bias: float = -2.0,
                 input_dropout: float = 0.0, state_dropout: float = 0.0, fused: bool = True,
                 bidirectional: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        self.depth, self.num_layers = check_size("depth", depth), check_size("num_layers", num_layers)
        for name, p in (("dropout", dropout), ("input_dropout", input_dropout), ("state_dropout", state_dropout)):
            check_probability(name, p)
        warn_unused_dropout(dropout, self.num_layers)  # (input_dropout and state_dropout apply to one layer too)
        self.batch_first = check_flag("batch_first", batch_first)
        self.bidirectional = check_flag("bidirectional", bidirectional)
        self.carry, self.gate_bias = check_carry(carry), check_gate_bias(gate_bias, dtype)
        self.directions = 2 if bidirectional else 1
        self.fused = check_flag("fused", fused)
        self.dropout, self.input_dropout, self.state_dropout = dropout, input_dropout, state_dropout
        # cells[layer * directions + direction], the order of the state's rows (nn.LSTM's).
        self.cells = nn.ModuleList(
            RHNCell(input_size if layer == 0 else self.directions * hidden_size, hidden_size, depth=depth,
                    carry=carry, gate_bias=gate_bias, device=device, dtype=dtype)
            for layer in range(num_layers) for _ in range(self.directions))

    def reset_parameters(self) -> None:
        for cell in cast("Iterable[RHNCell]", self.cells):
            cell.reset_parameters()

    def flatten_parameters(self) -> None:
        """Does nothing: there for code written for an ``nn.LSTM``, which calls it after
        ``DataParallel``'s replication or at each forward.

        ``nn.LSTM``'s lays its weights out again as the one contiguous buffer cuDNN runs from. An RHN
        keeps no such buffer: each micro-layer's weight and bias is its own contiguous tensor, which
        the loop and the fused recurrence read as they are at each call (where the fused path wants a
        weight transposed or padded, it copies it within the call and keeps nothing), so there is
        nothing to lay out again.
        """

    # (the overloads tell a type checker what nn.LSTM's say: a PackedSequence in, a PackedSequence out)
    @overload
    def forward(self, input: Tensor, state: Tensor | None = None, *, hx: Tensor | None = None,
                lengths: Tensor | None = None) -> tuple[Tensor, Tensor]: ...

    @overload
    def forward(self, input: PackedSequence, state: Tensor | None = None, *, hx: Tensor | None = None,
                lengths: None = None) -> tuple[PackedSequence, Tensor]: ...

    def forward(self, input: Tensor | PackedSequence, state: Tensor | None = None, *, hx: Tensor | None = None,
                lengths: Tensor | None = None) -> tuple[Tensor | PackedSequence, Tensor]:
        state = initial_state("RHN", state, hx)
        input, lengths, packed = unpack_sequence(input, lengths, self.batch_first)
        x, state, unbatched = batch_sequence("RHN", input, self.input_size, self.batch_first, time_major=True,
                                             state=state, lengths=lengths, pair=False)
        lengths = self._check(x, state, lengths)
        steps, batch = x.shape[0], x.shape[1]
        directions = self.directions
        if state is None:
            state = x.new_zeros(directions * self.num_layers, batch, self.hidden_size)
        valid = reverse = last_step = None
        if lengths is not None:
            lengths = lengths.to(x.device)
            time = torch.arange(steps, device=x.device)[:, None]
            # (T, B, 1): whether step t is inside sequence b.
            valid = (time < lengths[None, :]).unsqueeze(-1)
            # (T, B): the step each sequence's backward reading takes at t (padding stays in place).
            reverse = torch.where(valid[..., 0], lengths[None, :] - 1 - time, time)
            last_step = (lengths - 1).clamp(min=0).view(1, -1, 1)  # (0 for an empty sequence)
            # Padding of any value, NaN included, becomes zeros: the recurrence runs over it, and
            # masking a non-finite step afterwards (times 0) would leave NaN in outputs and gradients.
            x = torch.where(valid, x, 0.0)

        final = []
        for layer in range(self.num_layers):
            p_in = self.input_dropout if layer == 0 else self.dropout
            x = variational_dropout(x, p_in, self.training)
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                if direction == 0:
                    out, last = self._recur(self._cell(k), x, state[k], valid, last_step)
                else:  # the same recurrence over each sequence read backward, then put back in order
                    out, last = self._recur(self._cell(k), _reversed(x, reverse), state[k], valid, last_step)
                    out = _reversed(out, reverse)
                outputs.append(out)
                final.append(last)
            x = outputs[0] if directions == 1 else torch.cat(outputs, dim=-1)
        state = torch.stack(final)

        if packed is not None and lengths is not None:
            return pack_like(x, lengths, packed, batch_first=False), state
        return unbatch_sequence(x, state, unbatched, self.batch_first, time_major=True)

    def _cell(self, k: int) -> RHNCell:
        return cast(RHNCell, self.cells[k])  # (a ModuleList's items are typed Module)

    def _recur(self, cell: RHNCell, x: Tensor, s: Tensor, valid: Tensor | None,
               last_step: Tensor | None) -> tuple[Tensor, Tensor]:
        """One layer, one direction: the states at every step ``(T, B, H)`` (zero past each sequence's
        length) and the state after each sequence's last valid step."""
        state_mask = variational_mask(x, self.state_dropout, (x.shape[1], self.hidden_size)) \
            if self.training else None
        # Every time step's input projection in one product. The loop iterates with unbind, not
        # x_proj[t]: indexing's backward would write a full-size zero gradient at every step.
        x_proj = cell.input_proj(x)
        weights, biases = [p.weight for p in cell.projections()], [p.bias for p in cell.projections()]
        choice = note(cell, choose_path(x_proj, s, state_mask, (*weights, *biases), fused=self.fused,
                                        carry=cell.carry, activation=cell.activation,
                                        gates_plain=all(g.is_plain for g in cell.gates)))
        if choice.path.fused:
            out = rhn_recurrence(x_proj, s, weights, biases, state_mask, path=choice.path)
            if valid is None:
                return out, out[-1]
            # The steps past a sequence's length never reach its earlier ones: the recurrence runs over
            # them too, then their outputs are zeroed and each final state is read at its last valid step
            # (the initial one for an empty sequence), as the loop below holds it.
            last = out.gather(0, cast(Tensor, last_step).expand(1, *out.shape[1:]))[0]
            return out * valid, torch.where(valid[0], last, s)
        outputs = []
        for t, xp in enumerate(x_proj.unbind(0)):
            s_new = cell.step(xp, s, state_mask)
            s = s_new if valid is None else torch.where(valid[t], s_new, s)
            outputs.append(s_new if valid is None else s_new * valid[t])
        return torch.stack(outputs), s

    def _check(self, x: Tensor, state: Tensor | None, lengths: Tensor | None) -> Tensor | None:
        """The input's dtype and device against the parameters', the state's and the lengths' against the
        input's batch ``x`` ``(T, B, F)``; the lengths as a tensor."""
        check_input("RHN", "input", x, self._cell(0).input_proj.weight)
        if state is not None:
            what = "(2 * num_layers, B, hidden_size)" if self.bidirectional else "(num_layers, B, hidden_size)"
            check_state("RHN", "state", state, (self.directions * self.num_layers, x.shape[1], self.hidden_size), x,
                        what)
        return check_lengths("RHN", lengths, x.shape[1], x.shape[0], shortest=0, device=x.device)

    def extra_repr(self) -> str:
        return settings_repr(self)
