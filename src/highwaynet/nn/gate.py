"""``TransformGate``: the one place where every highway layer turns gate logits into a mix.

Every layer of the package (dense, convolutional, the RHN's micro-layers, the highway LSTM)
ends in a :class:`TransformGate`. Because the gate is a module of its own, analysis tools can
find every gate of any model by walking ``model.modules()`` and act on it without knowing the
layer around it:

* recording: observers attached to a gate receive ``T`` (and ``C``) on each forward pass
  (:func:`highwaynet.analysis.record_gates`);
* lesioning: a lesioned gate forces ``T = 0`` (and ``C = 1``), so the layer becomes the
  identity and carries its input through (:func:`highwaynet.analysis.lesion`).

Layers stay free to compute the logits however they like (one fused projection, separate
projections, convolutions, recurrent products) and, when nobody observes or lesions the gate,
to take a fused fast path: :attr:`TransformGate.is_plain` tells them when that is allowed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..functional import highway_combine, highway_combine_independent
from ._signature import keyword_settings, settings_repr

__all__ = ["TransformGate", "CARRY_MODES"]

CARRY_MODES = ("coupled", "independent")

GateObserver = Callable[["TransformGate", Tensor, "Tensor | None"], None]


def check_carry(carry: str) -> str:
    if carry not in CARRY_MODES:
        raise ValueError(f"carry must be one of {CARRY_MODES}, got {carry!r}")
    return carry


class TransformGate(nn.Module):
    r"""Applies the transform gate: ``y = T * h + (1 - T) * x`` with ``T = sigmoid(t_logits)``.

    With ``carry="independent"`` the carry gate has logits of its own:
    ``y = T * h + C * x`` with ``C = sigmoid(c_logits)``.

    The module has no parameters; the gate's weights live in the layer that computes the logits.

    Args:
        carry: ``"coupled"`` (``C = 1 - T``, the highway paper's form) or ``"independent"``.

    Shapes:
        ``h``, ``t_logits``, ``x`` (and ``c_logits``) broadcast together; the output has
        their broadcast shape.

    Attributes:
        lesioned: when ``True`` the gate is forced shut (``T = 0``, ``C = 1``) and the layer
            returns its input unchanged.

    Example::

        >>> gate = TransformGate()
        >>> h, x = torch.ones(2, 3), torch.zeros(2, 3)
        >>> gate(h, torch.zeros(2, 3), x)       # T = sigmoid(0) = 0.5: halfway between x and h
        tensor([[0.5000, 0.5000, 0.5000],
                [0.5000, 0.5000, 0.5000]])
    """

    @keyword_settings(("carry",))
    def __init__(self, *, carry: str = "coupled") -> None:
        super().__init__()
        self.carry = check_carry(carry)
        self.lesioned = False
        self._observers: list[GateObserver] = []

    @property
    def is_plain(self) -> bool:
        """True when no observer is attached and the gate is not lesioned (fast paths allowed)."""
        return not self._observers and not self.lesioned

    def add_observer(self, fn: GateObserver) -> Callable[[], None]:
        """Call ``fn(gate, T, C)`` on each forward pass; returns a function that detaches it."""
        self._observers.append(fn)
        return lambda: self._observers.remove(fn)

    def gates(self, t_logits: Tensor, c_logits: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``(T, C)`` for the given logits, honouring a lesion; ``C`` is None in the coupled form."""
        if self.lesioned:
            t = torch.zeros_like(t_logits)
            c = None if c_logits is None else torch.ones_like(c_logits)
        else:
            t = torch.sigmoid(t_logits)
            c = None if c_logits is None else torch.sigmoid(c_logits)
        for observe in self._observers:
            observe(self, t, c)
        return t, c

    def forward(self, h: Tensor, t_logits: Tensor, x: Tensor, c_logits: Tensor | None = None) -> Tensor:
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
