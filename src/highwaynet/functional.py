"""The gate maths of highway networks, as plain PyTorch functions.

A highway layer (Srivastava, Greff & Schmidhuber, 2015) mixes a transform ``H(x)`` with its
input ``x`` through a transform gate ``T(x)`` in ``(0, 1)``:

.. math::  y = T(x) \\odot H(x) + (1 - T(x)) \\odot x

(the *coupled* form, where the carry gate is ``C = 1 - T``) or, with an independent carry gate,
``y = T \\odot H + C \\odot x``.

These functions are the references that every layer and every fast path of the package is
tested against. They know nothing of parameters, modules or devices.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_broadcast, check_int, check_size, check_tensor, describe

__all__ = [
    "ACTIVATIONS",
    "get_activation",
    "highway_combine",
    "highway_combine_independent",
    "split_halves",
]


def _require_tensors(**tensors: object) -> None:
    for name, value in tensors.items():
        check_tensor(name, value, kind=None)


def _broadcast_shape(**tensors: Tensor) -> torch.Size:
    return check_broadcast("highway gate", **tensors)


def highway_combine(t: Tensor, h: Tensor, x: Tensor) -> Tensor:
    """The gating primitive ``t * h + (1 - t) * x`` (Lasagne's ``MultiplicativeGatingLayer``).

    Args:
        t: the gate, usually ``sigmoid`` of a projection, values in ``[0, 1]``.
        h: the value taken where the gate is open (the transform ``H(x)``).
        x: the value carried where the gate is shut (the layer's input).

    The three shapes must broadcast together; the result has the broadcast shape and the
    promoted dtype. It is computed as ``torch.lerp(x, h, t)``, one fused element-wise kernel,
    which equals ``x + t * (h - x)``.

    Example::

        >>> t = torch.tensor([0.0, 0.5, 1.0])
        >>> highway_combine(t, torch.ones(3), torch.zeros(3))
        tensor([0.0000, 0.5000, 1.0000])
    """
    _require_tensors(t=t, h=h, x=x)
    if t.shape == h.shape == x.shape and t.dtype == h.dtype == x.dtype:
        return torch.lerp(x, h, t)  # the common case, on every layer's hot path: nothing to reconcile
    shape = _broadcast_shape(t=t, h=h, x=x)
    dtype = torch.promote_types(torch.promote_types(t.dtype, h.dtype), x.dtype)
    # lerp wants one dtype for all three (under autocast h may be bf16 while x is fp32), and a
    # weight of the full shape on some backends.
    t, h, x = t.to(dtype), h.to(dtype), x.to(dtype)
    if x.shape != shape:
        x = x.expand(shape)
    return torch.lerp(x, h, t)


def highway_combine_independent(t: Tensor, c: Tensor, h: Tensor, x: Tensor) -> Tensor:
    """The uncoupled highway combination ``t * h + c * x`` with its own carry gate ``c``."""
    _require_tensors(t=t, c=c, h=h, x=x)
    _broadcast_shape(t=t, c=c, h=h, x=x)
    return t * h + c * x


def split_halves(z: Tensor, parts: int = 2, dim: int = -1) -> tuple[Tensor, ...]:
    """Split a projection's output ``[H | T]`` (or ``[H | T | C]``) into its equal parts along ``dim``."""
    check_tensor("z", z, kind=None)
    parts = check_size("parts", parts)
    dim = check_int("dim", dim)
    if not -z.dim() <= dim < z.dim():
        raise ValueError(f"dim must be in [{-z.dim()}, {z.dim()}) for z of shape {tuple(z.shape)}, got {dim}")
    if z.shape[dim] % parts:
        raise ValueError(f"cannot split a size-{z.shape[dim]} dimension into {parts} equal parts")
    return split_parts(z, parts, dim)


def split_parts(z: Tensor, parts: int, dim: int = -1) -> tuple[Tensor, ...]:
    """:func:`split_halves` unchecked, for the layers' forward (internal: not exported, its arguments trusted;
    call :func:`split_halves`): ``z``'s equal parts, each a view of its
    own (``narrow``), which an in-place activation (``nn.ReLU(inplace=True)``) may write; autograd
    refuses that on ``chunk``'s views (the outputs of one function that returns several)."""
    size = z.shape[dim] // parts
    return tuple(z.narrow(dim, i * size, size) for i in range(parts))


def _identity(x: Tensor) -> Tensor:
    return x


#: The activations known by name. Any callable or ``nn.Module`` can be passed instead.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "identity": _identity,
}

#: Functions that compute an activation of :data:`ACTIVATIONS` but are other objects than the one it
#: holds (``torch.relu`` is not ``F.relu``, ``F.tanh`` not ``torch.tanh``): the same activation by name.
_ALIASES: dict[str, tuple[Callable[[Tensor], Tensor], ...]] = {
    "relu": (torch.relu,), "tanh": (F.tanh,), "sigmoid": (F.sigmoid,)}


def activation_name(activation: object) -> str | None:
    """The name in :data:`ACTIVATIONS` of the function ``activation`` (or of one of its aliases,
    ``torch.relu`` for ``F.relu``), None for any other callable or module: what a layer given the
    function knows it by (its ``repr`` against the default's name, the fused kernels' codes)."""
    for name, fn in ACTIVATIONS.items():
        if activation is fn or any(activation is alias for alias in _ALIASES.get(name, ())):
            return name
    return None


def get_activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """Resolve ``activation`` (a name in :data:`ACTIVATIONS`, a callable or a module) to a callable."""
    if isinstance(activation, str):
        try:
            return ACTIVATIONS[activation.lower()]
        except KeyError:
            known = ", ".join(sorted(ACTIVATIONS))
            raise ValueError(f"unknown activation {activation!r}; expected one of: {known}, "
                             f"or a callable") from None
    # (a class is callable too, but calling it makes a module, nn.ReLU(x) one with inplace=x)
    module_class = isinstance(activation, type) and issubclass(activation, torch.nn.Module)
    if module_class:
        raise TypeError(f"activation must be a name, a callable or a module, got the class {activation.__name__}: "
                        f"pass an instance, {activation.__name__}()")
    if callable(activation):
        return activation
    raise TypeError(f"activation must be a name or a callable, got {describe(activation)}")
