"""The activations the fused kernels know, by the code each kernel is compiled for.

Below both the kernels' dispatch (:mod:`.gating`) and the Triton kernels (:mod:`.triton_gating`),
which both need the codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from torch import Tensor

from .._checks import describe
from ..functional import activation_name

__all__ = ["ACTIVATION_CODES", "Activation", "activation_code", "check_code"]


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


def activation_code(activation: str | Callable[[Tensor], Tensor]) -> Activation | None:
    """The kernels' :class:`Activation` for ``activation`` (a name, or a function the package resolves a
    name to), or None when the fused kernels do not know it (then layers take their unfused path)."""
    name = activation.lower() if isinstance(activation, str) else activation_name(activation)
    return None if name is None else ACTIVATION_CODES.get(name)


def check_code(value: object, name: str = "code") -> Activation:
    """``value`` as an :class:`Activation`: a member, or its code as a plain ``int`` (the enum is an
    ``IntEnum``); a name such as ``"tanh"`` is refused (:func:`activation_code` turns it into a code), as
    is a ``bool``. A member passes with one ``isinstance``: this runs at every fused micro-step."""
    if isinstance(value, Activation):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value in _CODES:
            return Activation(value)
        known = ", ".join(f"{a.name} ({a.value})" for a in Activation)
        raise ValueError(f"{name} must be an Activation, one of {known}, got {value}")
    hint = " (activation_code turns a name into one)" if isinstance(value, str) else ""
    raise TypeError(f"{name} must be an Activation (highwaynet.kernels.gating.Activation){hint}, got {describe(value)}")


_CODES = frozenset(member.value for member in Activation)
