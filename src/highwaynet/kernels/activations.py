"""The activations the fused kernels know, by the code each kernel is compiled for.

Below both the kernels' dispatch (:mod:`.gating`) and the Triton kernels (:mod:`.triton_gating`),
which both need the codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import torch
from torch import Tensor

from ..functional import ACTIVATIONS

__all__ = ["ACTIVATION_CODES", "Activation", "activation_code"]


class Activation(enum.IntEnum):
    """The transforms ``f`` the fused kernels know, with the code the kernels are compiled for.

    Each one's derivative can be computed from its output alone (``relu``: ``h > 0``), which is
    what lets the backward pass keep ``h = f(z_H)`` instead of ``z_H``."""

    IDENTITY = 0
    RELU = 1
    TANH = 2
    SIGMOID = 3


#: The activations the fused kernels know, by the names :data:`highwaynet.functional.ACTIVATIONS` uses.
ACTIVATION_CODES = {member.name.lower(): member for member in Activation}
_BY_FUNCTION: dict[Callable[[Tensor], Tensor], Activation] = {
    fn: ACTIVATION_CODES[name] for name, fn in ACTIVATIONS.items() if name in ACTIVATION_CODES}
_BY_FUNCTION[torch.relu] = Activation.RELU


def activation_code(activation: str | Callable[[Tensor], Tensor]) -> Activation | None:
    """The kernels' :class:`Activation` for ``activation`` (a name, or a function the package resolves a
    name to), or None when the fused kernels do not know it (then layers take their unfused path)."""
    if isinstance(activation, str):
        return ACTIVATION_CODES.get(activation.lower())
    return _BY_FUNCTION.get(activation)
