"""How the RHN's fused paths lay out weights, states and ``[h | t]`` rows in memory (pure PyTorch).

The Triton micro-step kernels (:mod:`.rhn_step`) load a tile in vectors only where they can prove
its alignment, which rows of 830 values (the RHN paper's width) defeat; padding each row to a
multiple of 16 values with zeros restores it (``benchmarks/rhn_step.py`` times both). These helpers
make and read such buffers; they import no Triton, so that the RHN can size its buffers (and
``torch.compile`` can trace their shapes) without it.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["halves", "padded_halves", "padded_states", "padded_weight", "unpadded_halves"]


def padded_weight(weight: Tensor) -> Tensor:
    """``R`` ``(2H, H)`` as the kernels read it fastest: its rows padded with zeros to a multiple of
    16 columns (``weight`` itself where ``H`` is one already), which the kernels load in vectors."""
    hidden = weight.shape[1]
    pad = _padded_width(hidden) - hidden
    return weight if pad == 0 else torch.nn.functional.pad(weight, (0, pad))


def _padded_width(hidden: int) -> int:
    return hidden + -hidden % 16


def padded_states(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A buffer for states of ``shape`` (last dimension ``H``), zeros in rows padded to a multiple
    of 16 wide: the states are its view ``[..., :H]``, which the micro-step kernels read in vectors
    (as :func:`padded_weight`'s rows)."""
    return like.new_zeros(*shape[:-1], _padded_width(shape[-1]))


def padded_halves(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A buffer for ``[h | t]`` rows of ``shape`` (last dimension ``2H``), zeros, each half padded to
    a multiple of 16 wide (``[h | 0 | t | 0]``), as the micro-step kernels read ``dz`` fastest.
    :func:`unpadded_halves` takes the rows back out."""
    return like.new_zeros(*shape[:-1], 2 * _padded_width(shape[-1] // 2))


def halves(rows: Tensor, hidden: int) -> Tensor:
    """``[h | t]`` rows ``(..., 2W)``, each half ``W ≥ H`` wide, as ``(..., 2, H)``: a view of the
    halves without their padding."""
    return rows.unflatten(-1, (2, rows.shape[-1] // 2))[..., :hidden]


def unpadded_halves(buffer: Tensor, hidden: int) -> Tensor:
    """The ``[h | t]`` rows ``(..., 2H)`` of a :func:`padded_halves` buffer: a copy, or a view where
    its halves are ``H`` wide."""
    return halves(buffer, hidden).flatten(-2)
