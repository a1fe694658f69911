r"""A window of an LSTM with projection and clipping (ELMo's biLM layer), its input products hoisted.

TensorFlow's ``LSTMCell(num_units=C, num_proj=P, cell_clip, proj_clip)``, as bilm-tf builds ELMo's
biLM (no peepholes): given each step's input products ``x_t W_xᵀ + b`` (computed for the whole
window at once, outside the recurrence), the previous output ``h`` ``(B, P)`` and cell ``c``
``(B, C)``,

.. math::
    [i \mid j \mid f \mid o] &= x_t W_x^\top + b + h W_h^\top \qquad \text{(TensorFlow's gate order)}\\
    c' &= \operatorname{clip}\big(\sigma(f + \beta)\, c + \sigma(i) \tanh(j),\ \pm c_{\max}\big)\\
    h' &= \operatorname{clip}\big((\sigma(o) \tanh(c'))\, W_P^\top,\ \pm h_{\max}\big)

with ``β = forget_bias`` (1 in ELMo, added at run time, not stored in ``b``), ``W_h`` ``(4C, P)``
the recurrent part of TensorFlow's kernel (transposed) and ``W_P`` ``(P, C)`` the projection.

:func:`lstmp_window_reference` is that loop in PyTorch operations (differentiable): the functional
reference. :func:`lstmp_window` runs it, or on a GPU the persistent kernel
(:func:`~.triton_persistent.lstmp_forward`: the whole window one launch; forward only, so where a
gradient is needed the reference runs), as :func:`choose_lstmp_path` decides.
"""

from __future__ import annotations

import enum

import torch
from torch import Tensor

from .dispatch import Choice
from .persistent import lstmp_refusal

__all__ = ["LSTMPPath", "choose_lstmp_path", "lstmp_window", "lstmp_window_reference"]


class LSTMPPath(str, enum.Enum):
    """The ways :func:`lstmp_window` runs a window."""

    #: :func:`lstmp_window_reference`: PyTorch operations, one step at a time; differentiable.
    REFERENCE = "reference"
    #: The persistent Triton kernel: the window in one launch (forward only).
    PERSISTENT = "persistent kernel"


def lstmp_window_reference(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor, *,
                           forget_bias: float = 1.0, cell_clip: float | None = None,
                           proj_clip: float | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """The window in PyTorch operations (the module's equations): outputs ``(T, B, P)`` and the last
    ``(h, c)``. Arguments as :func:`lstmp_window`'s (not checked here)."""
    h, c = h0, c0
    outputs = []
    for x_t in x_proj.unbind(0):
        i, j, f, o = torch.addmm(x_t, h, w_h.t()).chunk(4, dim=-1)
        c = torch.sigmoid(f + forget_bias) * c + torch.sigmoid(i) * torch.tanh(j)
        if cell_clip is not None:
            c = c.clamp(-cell_clip, cell_clip)
        h = (torch.sigmoid(o) * torch.tanh(c)) @ w_p.t()
        if proj_clip is not None:
            h = h.clamp(-proj_clip, proj_clip)
        outputs.append(h)
    return torch.stack(outputs), (h, c)


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def choose_lstmp_path(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor) -> Choice[LSTMPPath]:
    """The :class:`LSTMPPath` of one window, and why (a :class:`~.dispatch.Choice`, for
    :func:`~highwaynet.kernels.explain` through :func:`~.dispatch.note`): the persistent kernel
    within its limits (:mod:`.persistent`) where no gradient is needed and nothing compiles the
    call, else the reference."""
    if _needs_grad(x_proj, h0, c0, w_h, w_p):
        return Choice(LSTMPPath.REFERENCE, "a gradient is needed: the persistent kernel runs forward only")
    if torch.compiler.is_compiling():
        return Choice(LSTMPPath.REFERENCE, "torch.compile and torch.export trace the reference (the kernel is no "
                                           "custom operator)")
    why = lstmp_refusal(x_proj, h0, c0, w_h, w_p)
    if why is not None:
        return Choice(LSTMPPath.REFERENCE, f"not the persistent kernel: {why}")
    return Choice(LSTMPPath.PERSISTENT, "CUDA, products on tensor cores, weights within the GPU's L2 cache")


def _check(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor, forget_bias: float,
           cell_clip: float | None, proj_clip: float | None) -> None:
    for name, t in (("x_proj", x_proj), ("h0", h0), ("c0", c0), ("w_h", w_h), ("w_p", w_p)):
        if not isinstance(t, Tensor):
            raise TypeError(f"lstmp_window: {name} must be a Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"lstmp_window: {name} must be a floating-point tensor, got {t.dtype}")
    if w_p.dim() != 2:
        raise ValueError(f"lstmp_window: w_p must be (P, C), got shape {tuple(w_p.shape)}")
    proj, cells = w_p.shape
    if w_h.shape != (4 * cells, proj):
        raise ValueError(f"lstmp_window: w_h must be (4C, P) = ({4 * cells}, {proj}) for w_p of shape "
                         f"{tuple(w_p.shape)}, got {tuple(w_h.shape)}")
    if x_proj.dim() != 3 or x_proj.shape[-1] != 4 * cells:
        raise ValueError(f"lstmp_window: x_proj must be (T, B, 4C) = (T, B, {4 * cells}), got {tuple(x_proj.shape)}")
    batch = x_proj.shape[1]
    for name, t, size in (("h0", h0, proj), ("c0", c0, cells)):
        if t.shape != (batch, size):
            raise ValueError(f"lstmp_window: {name} must be (B, {'P' if t is h0 else 'C'}) = ({batch}, {size}), "
                             f"got {tuple(t.shape)}")
    if len({t.device for t in (x_proj, h0, c0, w_h, w_p)}) > 1:
        raise ValueError("lstmp_window: x_proj, h0, c0, w_h and w_p must be on one device")
    if not isinstance(forget_bias, (int, float)) or isinstance(forget_bias, bool):
        raise TypeError(f"lstmp_window: forget_bias must be a number, got {type(forget_bias).__name__}")
    for name, clip in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
        if clip is None:
            continue
        if not isinstance(clip, (int, float)) or isinstance(clip, bool):
            raise TypeError(f"lstmp_window: {name} must be a number or None, got {type(clip).__name__}")
        if not clip > 0:
            raise ValueError(f"lstmp_window: {name} must be positive (or None: no clipping), got {clip}")


def lstmp_window(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor, *, forget_bias: float = 1.0,
                 cell_clip: float | None = None, proj_clip: float | None = None,
                 path: LSTMPPath | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Run an LSTM-with-projection window (the module's equations) from its hoisted input products.

    Args:
        x_proj: each step's input products plus the bias, ``(T, B, 4C)``, gates in the order i, j, f, o.
        h0, c0: the initial output ``(B, P)`` and cell ``(B, C)``.
        w_h: the recurrent weight ``(4C, P)``; ``w_p``: the projection ``(P, C)``.
        forget_bias: added to ``f`` at run time (TensorFlow's ``forget_bias``). Default: 1.
        cell_clip, proj_clip: clip the cell, and the projected output, to ``±`` this (None: no
            clipping). Default: None.
        path: an :class:`LSTMPPath` to force (default: :func:`choose_lstmp_path`'s).

    Returns:
        ``(outputs, (h, c))``: the outputs ``(T, B, P)`` and the last output and cell.
    """
    _check(x_proj, h0, c0, w_h, w_p, forget_bias, cell_clip, proj_clip)
    if path is None:
        path = choose_lstmp_path(x_proj, h0, c0, w_h, w_p).path
    if path is LSTMPPath.PERSISTENT:
        if _needs_grad(x_proj, h0, c0, w_h, w_p):
            raise RuntimeError("lstmp_window: the persistent kernel runs forward only; under torch.no_grad() or "
                               "with tensors that need no gradient, or with path=None (the reference)")
        from .triton_persistent import lstmp_forward

        out, h, c = lstmp_forward(x_proj, h0, c0, w_h, w_p, forget_bias, cell_clip, proj_clip)
        return out, (h, c)
    return lstmp_window_reference(x_proj, h0, c0, w_h, w_p, forget_bias=forget_bias, cell_clip=cell_clip,
                                  proj_clip=proj_clip)
