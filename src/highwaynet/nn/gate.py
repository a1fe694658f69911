"""The gates: the one place where every layer of the package mixes what it computes with what it carries.

Every highway layer of the package (dense, convolutional, the RHN's micro-layers, the highway LSTM,
a highway or GTrXL residual connection) ends in a :class:`TransformGate`; a residual branch that is
added rather than mixed (plain residual, ReZero, the gated residual network's GLU) ends in a
:class:`BranchGate`. Both are a :class:`Gate`: because the gate is a module of its own, analysis
tools can find every gate of any model by walking ``model.modules()`` and act on it without knowing
the layer around it:

* recording: observers attached to a gate receive ``T`` (and ``C``) on each forward pass
  (:func:`highwaynet.analysis.record_gates`);
* lesioning: a lesioned gate forces ``T = 0`` (and ``C = 1``; a branch's scale to 0), so the
  layer becomes the identity and carries its input through (:func:`highwaynet.analysis.lesion`).

Layers stay free to compute the logits however they like (one fused projection, separate
projections, convolutions, recurrent products) and, when nobody observes or lesions the gate,
to take a fused fast path: :attr:`TransformGate.is_plain` tells them when that is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import check_broadcast, check_choice, check_tensor
from ..functional import highway_combine, highway_combine_independent
from ._signature import settings_repr

__all__ = ["CARRY_MODES", "BranchGate", "Gate", "TransformGate"]

CARRY_MODES = ("coupled", "independent")

GateObserver = Callable[["Gate", Tensor, "Tensor | None"], None]


def check_carry(carry: str) -> str:
    return check_choice("carry", carry, CARRY_MODES)


class Gate(nn.Module):
    """What every gate shares: observers that receive its values on each forward pass, and a lesion
    that shuts it (the layer around it then carries its input through)."""

    def __init__(self) -> None:
        super().__init__()
        self._lesioned = False  # (set through `lesioned`: the module's own, copied with it)
        self._lesions = 0  # (the lesion() blocks shutting it now: theirs, ended with them)
        self._observers: list[GateObserver] = []

    @property
    def lesioned(self) -> bool:
        """Whether the gate is shut: set so (``gate.lesioned = True``, kept by a copy of the module), or
        inside a :func:`highwaynet.analysis.lesion` block that shuts it (:meth:`add_lesion`)."""
        return self._lesioned or self._lesions > 0

    @lesioned.setter
    def lesioned(self, value: bool) -> None:
        self._lesioned = bool(value)

    @property
    def is_plain(self) -> bool:
        """True when no observer is attached and the gate is not lesioned (fast paths allowed)."""
        return not self._observers and not self.lesioned

    def add_observer(self, fn: GateObserver) -> Callable[[], None]:
        """Call ``fn(gate, T, C)`` each time the gate is applied; returns a function that detaches it.

        ``fn`` receives the gate itself, then what it opens by:

        - a :class:`TransformGate`: ``T = sigmoid(t_logits)``, the transform gate's values, of the logits'
          shape: the layer's output's for a highway layer (``(..., features)`` dense; ``(N, C, L)`` or
          ``(N, C, H, W)`` convolutional; ``(B, T, out)`` a highway LSTM block; ``(B, hidden_size)`` an RHN
          micro-layer, called once per time step), a shape that broadcasts against it elsewhere (``()`` for
          :class:`~highwaynet.nn.FixedGate`); and ``C``, the carry gate's values of the same shape with
          ``carry="independent"``, else None (``C = 1 - T``). Lesioned: ``T`` zeros, ``C`` ones.
        - a :class:`BranchGate`: the branch's scale ``s``, ``()`` for a plain sum (ones) and
          :class:`~highwaynet.nn.ReZero`'s ``α``, ``(features,)`` for :class:`~highwaynet.nn.LayerScale`'s
          ``γ``; and None. Lesioned: zeros.

        ``fn`` is called in the forward pass, before the gate mixes its inputs, in the order the observers were
        added, with the tensors the pass goes on with (part of the autograd graph while training): detach what
        you keep. While any observer is attached the gate is not :attr:`is_plain`: its layer takes the
        reference path, not a fused kernel, so that every application is seen.

        Example::

            >>> layer = Highway(16, num_layers=2)
            >>> seen = []
            >>> detach = [gate.add_observer(lambda gate, t, c: seen.append((tuple(t.shape), c)))
            ...           for gate in layer.gates]
            >>> _ = layer(torch.randn(4, 7, 16))
            >>> seen                                   # each layer's T, no C (coupled)
            [((4, 7, 16), None), ((4, 7, 16), None)]
            >>> for remove in detach:
            ...     remove()
        """
        self._observers.append(fn)
        return lambda: self._observers.remove(fn)

    def add_lesion(self) -> Callable[[], None]:
        """Shut the gate until the function returned is called, as :func:`highwaynet.analysis.lesion` does
        for its block; a copy of the module made meanwhile is not shut by it."""
        self._lesions += 1

        def end() -> None:
            self._lesions -= 1
        return end

    def __getstate__(self) -> dict[str, Any]:
        # The observers are a recording's (record_gates, gate_means) of this gate alone, and end with it: a
        # copy made while one runs (copy.deepcopy, torch.save of the model) starts without them. (Copied,
        # they kept calling into that recording after it ended, and a closure cannot be pickled.) A lesion()
        # block's lesion alike: a copy made inside it is the model as it is outside (it stayed shut, for good).
        return {**super().__getstate__(), "_observers": [], "_lesions": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # (a gate pickled by an earlier highwaynet holds its lesion as `lesioned`, the property's name now)
        if "lesioned" in state:
            state = {k: v for k, v in state.items() if k != "lesioned"} | {"_lesioned": state["lesioned"]}
        super().__setstate__({"_lesions": 0, **state})

    def _observe(self, t: Tensor, c: Tensor | None = None) -> None:
        for observe in self._observers:
            observe(self, t, c)


class TransformGate(Gate):
    r"""Applies the transform gate: ``y = T * h + (1 - T) * x`` with ``T = sigmoid(t_logits)``.

    With ``carry="independent"`` the carry gate has logits of its own:
    ``y = T * h + C * x`` with ``C = sigmoid(c_logits)``.

    The module has no parameters; the gate's weights live in the layer that computes the logits.

    Args:
        carry: ``"coupled"`` (``C = 1 - T``, the highway paper's form) or ``"independent"``.

    Shape:
        ``h``, ``t_logits``, ``x`` (and ``c_logits``), floating-point tensors, broadcast together;
        the output has their broadcast shape.

    Attributes:
        lesioned: when ``True`` the gate is forced shut (``T = 0``, ``C = 1``) and the layer
            returns its input unchanged: set so, or inside a :func:`highwaynet.analysis.lesion` block.

    Example::

        >>> gate = TransformGate()
        >>> h, x = torch.ones(2, 3), torch.zeros(2, 3)
        >>> gate(h, torch.zeros(2, 3), x)  # T = sigmoid(0) = 0.5: halfway between x and h
        tensor([[0.5000, 0.5000, 0.5000],
                [0.5000, 0.5000, 0.5000]])
    """

    def __init__(self, *, carry: str = "coupled") -> None:
        super().__init__()
        self.carry = check_carry(carry)

    def gates(self, t_logits: Tensor, c_logits: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``(T, C)`` for the given logits, honouring a lesion; ``C`` is None in the coupled form."""
        if self.lesioned:
            t = torch.zeros_like(t_logits)
            c = None if c_logits is None else torch.ones_like(c_logits)
        else:
            t = torch.sigmoid(t_logits)
            c = None if c_logits is None else torch.sigmoid(c_logits)
        self._observe(t, c)
        return t, c

    def forward(self, h: Tensor, t_logits: Tensor, x: Tensor, c_logits: Tensor | None = None) -> Tensor:
        for name, value in (("h", h), ("t_logits", t_logits), ("x", x), ("c_logits", c_logits)):
            if value is not None:  # (floating point: an integer x would be mixed in as a float, silently)
                check_tensor(name, value, owner="TransformGate")
        if (c_logits is None) != (self.carry == "coupled"):
            raise ValueError(f"a gate with carry={self.carry!r} "
                             f"{'takes no' if self.carry == 'coupled' else 'needs'} carry logits")
        t, c = self.gates(t_logits, c_logits)
        if self.lesioned:
            return x
        if c is None:
            return highway_combine(t, h, x)
        return highway_combine_independent(t, c, h, x)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [settings_repr(self), "lesioned=True" if self.lesioned else ""]))


class BranchGate(Gate):
    r"""Adds a residual branch, scaled: ``y = x + s * branch``.

    The scale ``s`` is what the layer around it gives: 1 for a plain residual connection, ReZero's
    learned scalar :math:`\alpha`, or a GLU's element-wise :math:`\sigma(\cdot)` in a gated residual
    network. It is what the gate's observers receive (:func:`highwaynet.analysis.record_gates`), and a
    lesion sets it to 0: ``y = x``, the branch left out.

    Shape:
        ``branch``, ``x`` (and ``scale``), floating-point tensors, broadcast together; the output has
        their broadcast shape.

    Example::

        >>> gate = BranchGate()
        >>> gate(torch.ones(3), torch.zeros(3), torch.tensor(0.5))
        tensor([0.5000, 0.5000, 0.5000])
    """

    def forward(self, branch: Tensor, x: Tensor, scale: Tensor | None = None) -> Tensor:
        check_tensor("branch", branch, owner="BranchGate")
        check_tensor("x", x, owner="BranchGate")
        if scale is not None:
            check_tensor("scale", scale, owner="BranchGate")
            check_broadcast("BranchGate", branch=branch, x=x, scale=scale)
        else:
            check_broadcast("BranchGate", branch=branch, x=x)
        if self.lesioned:
            self._observe(torch.zeros_like(scale) if scale is not None else branch.new_zeros(()))
            return x
        if self._observers:
            self._observe(scale if scale is not None else branch.new_ones(()))
        return x + branch if scale is None else x + scale * branch

    def extra_repr(self) -> str:
        return "lesioned=True" if self.lesioned else ""

