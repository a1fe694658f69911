r"""The recurrence of an LSTM with a projection and clipping (ELMo's biLM), its input products hoisted.

TensorFlow's ``LSTMCell(num_units=C, num_proj=P, cell_clip, proj_clip)`` with ``forget_bias`` 1, the
cell of bilm-tf's biLM, one step:

.. math::
    [i \mid j \mid f \mid o] = x_t W_x + h_{t-1} W_h + b, \qquad
    c_t = \operatorname{clip}\big(\sigma(f + 1) \odot c_{t-1} + \sigma(i) \odot \tanh(j), \pm c_{clip}\big)

.. math::
    h_t = \operatorname{clip}\big((\sigma(o) \odot \tanh(c_t)) W_P, \pm h_{clip}\big)

The input term :math:`x_t W_x + b` (and the forget bias) does not depend on the state: the caller
computes it for the whole window as one product, ``gates``, and :func:`lstmp_recurrence` runs the
loop over time on it. That function is the seam where a faster recurrence plugs in: on the CPU the
C++ loop (:mod:`.lstmp_cpu`) for float32 and float64 without gradients; elsewhere (CUDA, autograd,
``torch.compile``, other dtypes) :func:`lstmp_recurrence_reference`, the loop in PyTorch operations,
which every path is tested against. A GPU kernel (a persistent one, issue 59) takes the same
arguments and returns the same values, and is chosen in :func:`choose_path`.
"""

from __future__ import annotations

import enum

import torch
from torch import Tensor

from . import lstmp_cpu
from .dispatch import Choice

__all__ = ["LSTMPPath", "choose_path", "lstmp_recurrence", "lstmp_recurrence_reference"]


class LSTMPPath(enum.Enum):
    """How :func:`lstmp_recurrence` runs the loop over time."""

    PYTORCH = "PyTorch operations"
    CPP = "C++ loop"


def choose_path(gates: Tensor, *tensors: Tensor) -> Choice[LSTMPPath]:
    """The path for a recurrence on ``gates`` (and the other ``tensors`` it reads), and why."""
    if torch.compiler.is_compiling():
        return Choice(LSTMPPath.PYTORCH, "under torch.compile, which traces the PyTorch operations")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (gates, *tensors)):
        return Choice(LSTMPPath.PYTORCH, "gradients are wanted: the C++ loop runs forward only")
    why = lstmp_cpu.unavailable(gates)
    if why is not None:
        return Choice(LSTMPPath.PYTORCH, why)
    return Choice(LSTMPPath.CPP, "a float32 or float64 CPU tensor without gradients")


def lstmp_recurrence(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
                     lengths: Tensor | None = None, *, cell_clip: float | None = None,
                     proj_clip: float | None = None, path: LSTMPPath | None = None,
                     overwrite_gates: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The LSTM's loop over time, given each step's input term.

    Args:
        gates: ``(T, B, 4C)``, step ``t``'s :math:`x_t W_x + b` with the forget bias added to the
            ``f`` part, in TensorFlow's gate order ``[i | j | f | o]``. Not modified, unless
            ``overwrite_gates`` lets the C++ loop add each step's recurrent product into it.
        weight_hh: ``(4C, P)``, the recurrent weights (``h W_h`` is ``h @ weight_hh.T``).
        weight_proj: ``(P, C)``, the projection, or None (then ``P = C`` and ``h = m``, unclipped).
        h0, c0: ``(B, P)`` and ``(B, C)``, the initial state.
        lengths: ``(B,)`` steps each row runs (past them its output is 0 and its state held, as
            TensorFlow's ``dynamic_rnn`` with ``sequence_length``), or None: all ``T``.
        cell_clip, proj_clip: the clipping bounds, or None.
        path: force a path (tests and benchmarks); None: :func:`choose_path`'s.
        overwrite_gates: ``gates`` is the caller's scratch buffer, a contiguous one: the C++ loop
            works in it rather than in a copy.

    Returns:
        ``(outputs, h_T, c_T)``: ``(T, B, P)``, and the final state (each row's at its own end).
    """
    if path is None:
        path = choose_path(gates, weight_hh, h0, c0, *([weight_proj] if weight_proj is not None else [])).path
    if path is LSTMPPath.CPP:
        why = lstmp_cpu.unavailable(gates)  # (builds the loop where a caller forces it before any choice)
        if why is not None:
            raise RuntimeError(f"lstmp_recurrence: the C++ loop cannot run: {why}")
        work = gates if overwrite_gates and gates.is_contiguous() else gates.contiguous().clone()
        return _cpp(work, weight_hh, weight_proj, h0, c0, lengths, cell_clip, proj_clip)
    return lstmp_recurrence_reference(gates, weight_hh, weight_proj, h0, c0, lengths, cell_clip=cell_clip,
                                      proj_clip=proj_clip)


def _cpp(work: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
         lengths: Tensor | None, cell_clip: float | None, proj_clip: float | None) -> tuple[Tensor, Tensor, Tensor]:
    # (the loop adds each step's recurrent product into ``work`` in place, and carries h and c in place)
    h, c = h0.contiguous().clone(), c0.contiguous().clone()
    out = work.new_empty(work.shape[0], work.shape[1], h.shape[1])
    torch.ops.highwaynet_lstmp_cpu.lstmp_forward_loop(
        work, weight_hh.t(), weight_proj.t() if weight_proj is not None else None, h, c, lengths,
        cell_clip, proj_clip if weight_proj is not None else None, out)
    return out, h, c


def lstmp_recurrence_reference(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
                               lengths: Tensor | None = None, *, cell_clip: float | None = None,
                               proj_clip: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`lstmp_recurrence` in PyTorch operations (autograd, any device and dtype): the reference."""
    h, c = h0, c0
    hh_t = weight_hh.t()
    proj_t = weight_proj.t() if weight_proj is not None else None
    outputs = []
    for t in range(gates.shape[0]):
        i, j, f, o = torch.addmm(gates[t], h, hh_t).chunk(4, dim=-1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
        if cell_clip is not None:
            c_new = c_new.clamp(-cell_clip, cell_clip)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if proj_t is not None:
            h_new = h_new @ proj_t
            if proj_clip is not None:
                h_new = h_new.clamp(-proj_clip, proj_clip)
        if lengths is None:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            running = (t < lengths).unsqueeze(-1)
            h, c = torch.where(running, h_new, h), torch.where(running, c_new, c)
            outputs.append(h_new * running)
    if not outputs:
        return gates.new_zeros(0, h0.shape[0], h0.shape[1]), h0, c0
    return torch.stack(outputs), h, c
