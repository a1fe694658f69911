r"""The recurrence of an LSTM with a projection and clipping (ELMo's biLM layer), its input products hoisted.

TensorFlow's ``LSTMCell(num_units=C, num_proj=P, cell_clip, proj_clip)``, as bilm-tf builds ELMo's
biLM (no peepholes), one step from the previous output ``h`` ``(B, P)`` and cell ``c`` ``(B, C)``:

.. math::
    [i \mid j \mid f \mid o] &= \underbrace{x_t W_x^\top + b + \beta\,e_f}_{\text{gates}_t} + h W_h^\top
    \qquad \text{(TensorFlow's gate order)}\\
    c' &= \operatorname{clip}\big(\sigma(f)\, c + \sigma(i) \tanh(j),\ \pm c_{\max}\big)\\
    h' &= \operatorname{clip}\big((\sigma(o) \tanh(c'))\, W_P^\top,\ \pm h_{\max}\big)

with ``β`` TensorFlow's ``forget_bias`` (1 in ELMo), ``W_h`` ``(4C, P)`` the recurrent part of
TensorFlow's kernel (transposed) and ``W_P`` ``(P, C)`` the projection (none: ``h' = σ(o) tanh(c')``,
``P = C``). The input term ``gates`` does not depend on the state: the caller computes it for the
whole window as one product, the forget bias folded into its ``f`` part, and
:func:`lstmp_recurrence` runs the loop over time on it, on one of three paths (:class:`LSTMPPath`)
that :func:`choose_path` picks and :func:`~highwaynet.kernels.explain` reports:

- :func:`lstmp_recurrence_reference`, the loop in PyTorch operations (autograd, any device and
  dtype, ``torch.compile``): the reference every other path is tested against;
- the C++ loop (:mod:`.lstmp_cpu`): float32 and float64 CPU tensors without gradients;
- the persistent Triton kernel (:func:`~.triton_persistent.lstmp_forward`: the whole window in one
  launch, forward only), on CUDA within :func:`~.persistent.lstmp_refusal`'s limits, opt-in
  (:data:`~.persistent.ENABLED`), with a projection.

Every path takes per-row ``lengths`` (a padded batch, as ELMo's sentences of different lengths): a
row past its own holds its state and outputs zeros (TensorFlow's ``dynamic_rnn`` with
``sequence_length``).
"""

from __future__ import annotations

import enum

import torch
from torch import Tensor

from .._checks import dtypes_meet
from . import lstmp_cpu
from .dispatch import Choice
from .gating import triton_available
from .persistent import lstmp_refusal

__all__ = ["LSTMPPath", "choose_path", "lstmp_recurrence", "lstmp_recurrence_reference"]


class LSTMPPath(str, enum.Enum):
    """The ways :func:`lstmp_recurrence` runs the loop over time; :func:`choose_path` picks one per call."""

    #: :func:`lstmp_recurrence_reference`: PyTorch operations, one step at a time; differentiable.
    PYTORCH = "PyTorch operations"
    #: The loop and each step's element-wise work in C++ (:mod:`.lstmp_cpu`), the products PyTorch's.
    CPP = "C++ loop"
    #: The whole window in one Triton launch (:func:`~.triton_persistent.lstmp_forward`; forward only).
    PERSISTENT = "persistent kernel"


def _needs_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _mixed_dtypes(*tensors: Tensor | None) -> str | None:
    """The dtypes of ``tensors`` in words where they are not all one (as under autocast), else None."""
    dtypes = {t.dtype for t in tensors if t is not None}
    return None if len(dtypes) == 1 else ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))


def choose_path(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor
                ) -> Choice[LSTMPPath]:
    """The :class:`LSTMPPath` of one recurrence (the tensors as :func:`lstmp_recurrence`'s), and why:
    a :class:`~.dispatch.Choice`, for :func:`~highwaynet.kernels.explain` through :func:`~.dispatch.note`.
    Every path runs per-row ``lengths`` (a padded batch), so they take no part in the choice.

    The persistent kernel where it runs exactly (see the module); else, on the CPU, the C++ loop; else
    the PyTorch operations. Under ``torch.compile`` and ``torch.export``, and where a gradient is
    needed, the PyTorch operations (neither the C++ loop nor the kernel is a differentiable custom
    operator)."""
    if torch.compiler.is_compiling():
        return Choice(LSTMPPath.PYTORCH, "torch.compile and torch.export trace the PyTorch operations (the C++ loop "
                                         "and the persistent kernel are no custom operators)")
    if _needs_grad(gates, weight_hh, weight_proj, h0, c0):
        return Choice(LSTMPPath.PYTORCH, "a gradient is needed: the C++ loop and the persistent kernel run forward "
                                         "only")
    why = lstmp_refusal(gates, h0, c0, weight_hh, weight_proj)
    if why is None:
        return Choice(LSTMPPath.PERSISTENT, "CUDA, products on tensor cores, weights within the GPU's L2 cache")
    if gates.is_cuda:
        return Choice(LSTMPPath.PYTORCH, f"not the persistent kernel: {why}")
    mixed = _mixed_dtypes(gates, weight_hh, weight_proj, h0, c0)
    if mixed is not None:
        return Choice(LSTMPPath.PYTORCH, f"mixed dtypes ({mixed}, as under autocast), where the C++ loop runs one; "
                                         f"not the persistent kernel: {why}")
    cpp = lstmp_cpu.unavailable(gates)
    if cpp is None:
        return Choice(LSTMPPath.CPP, f"a float32 or float64 CPU tensor; not the persistent kernel: {why}")
    return Choice(LSTMPPath.PYTORCH, f"{cpp}; not the persistent kernel: {why}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
           lengths: Tensor | None, cell_clip: float | None, proj_clip: float | None, path: LSTMPPath | None,
           overwrite_gates: bool) -> None:
    where = "lstmp_recurrence"
    tensors = {"gates": gates, "weight_hh": weight_hh, "weight_proj": weight_proj, "h0": h0, "c0": c0}
    for name, t in tensors.items():
        if t is None and name == "weight_proj":
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{where}: {name} must be a Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{where}: {name} must be a floating-point tensor, got {t.dtype}")
    if gates.dim() != 3 or gates.shape[-1] % 4:
        raise ValueError(f"{where}: gates must be (T, B, 4C), got {tuple(gates.shape)}")
    steps, batch, cells = gates.shape[0], gates.shape[1], gates.shape[2] // 4
    proj = weight_proj.shape[0] if weight_proj is not None else cells
    if weight_proj is not None and weight_proj.shape != (proj, cells):
        raise ValueError(f"{where}: weight_proj must be (P, C) = (P, {cells}) for gates of shape "
                         f"{tuple(gates.shape)}, got {tuple(weight_proj.shape)}")
    if weight_hh.shape != (4 * cells, proj):
        raise ValueError(f"{where}: weight_hh must be (4C, P) = ({4 * cells}, {proj}), got {tuple(weight_hh.shape)}")
    for name, t, size, letter in (("h0", h0, proj, "P"), ("c0", c0, cells, "C")):
        if t.shape != (batch, size):
            raise ValueError(f"{where}: {name} must be (B, {letter}) = ({batch}, {size}), got {tuple(t.shape)}")
    if len({t.device for t in tensors.values() if t is not None}) > 1:
        raise ValueError(f"{where}: gates, weight_hh, weight_proj, h0 and c0 must be on one device")
    for name, t in tensors.items():  # (under autocast the products cast, and the PyTorch path runs)
        if t is not None and not dtypes_meet(t.dtype, gates.dtype, gates.device.type):
            raise TypeError(f"{where}: {name} must have gates' dtype {gates.dtype}, got {t.dtype} (convert one "
                            f"to the other, or run under torch.autocast, which casts float32 but not float64)")
    if lengths is not None:
        # (dtype's attributes, not Tensor.is_complex(), which torch 2.3's compiler cannot trace)
        if not isinstance(lengths, Tensor) or lengths.dtype.is_floating_point or lengths.dtype.is_complex \
                or lengths.dtype == torch.bool:
            raise TypeError(f"{where}: lengths must be an integer tensor or None, got "
                            f"{lengths.dtype if isinstance(lengths, Tensor) else type(lengths).__name__}")
        if lengths.shape != (batch,) or lengths.device != gates.device:
            raise ValueError(f"{where}: lengths must be ({batch},) on {gates.device}, got {tuple(lengths.shape)} "
                             f"on {lengths.device}")
        if batch and not torch.compiler.is_compiling() and (int(lengths.min()) < 0 or int(lengths.max()) > steps):
            raise ValueError(f"{where}: lengths must lie in 0..{steps} (the steps of gates), got "
                             f"{int(lengths.min())}..{int(lengths.max())}")
    for name, clip in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
        if clip is None:
            continue
        if not _is_number(clip):
            raise TypeError(f"{where}: {name} must be a number or None, got {type(clip).__name__}")
        if not clip > 0:
            raise ValueError(f"{where}: {name} must be positive (or None: no clipping), got {clip}")
    if path is not None and not isinstance(path, LSTMPPath):
        raise TypeError(f"{where}: path must be an LSTMPPath or None, got {path!r}")
    if not isinstance(overwrite_gates, bool):
        raise TypeError(f"{where}: overwrite_gates must be a bool, got {type(overwrite_gates).__name__}")


def lstmp_recurrence(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
                     lengths: Tensor | None = None, *, cell_clip: float | None = None,
                     proj_clip: float | None = None, path: LSTMPPath | None = None,
                     overwrite_gates: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The LSTM's loop over time (the module's equations), given each step's input term.

    Args:
        gates: ``(T, B, 4C)``, step ``t``'s :math:`x_t W_x^\\top + b` with the forget bias added to the
            ``f`` part, in TensorFlow's gate order ``[i | j | f | o]``. Not modified, unless
            ``overwrite_gates`` lets the C++ loop add each step's recurrent product into it.
        weight_hh: ``(4C, P)``, the recurrent weights (``h W_h`` is ``h @ weight_hh.T``).
        weight_proj: ``(P, C)``, the projection, or None (then ``P = C``, ``h = σ(o) tanh(c)`` and
            ``proj_clip`` unused).
        h0, c0: ``(B, P)`` and ``(B, C)``, the initial state.
        lengths: ``(B,)`` integers in ``0..T``, the steps each row runs (past them its output is 0 and
            its state held, as TensorFlow's ``dynamic_rnn`` with ``sequence_length``), or None: all ``T``.
        cell_clip, proj_clip: clip the cell, and the projected output, to ``±`` this (positive), or None.
        path: an :class:`LSTMPPath` to force (tests and benchmarks); None: :func:`choose_path`'s.
        overwrite_gates: ``gates`` is the caller's scratch buffer, a contiguous one: the C++ loop
            works in it rather than in a copy.

    Returns:
        ``(outputs, h_T, c_T)``: ``(T, B, P)``, and the final state (each row's at its own end).

    Every tensor has ``gates``' dtype, except under autocast on their device, where float32 and the half
    types mix (the products cast; :func:`choose_path` then picks the PyTorch operations).

    Raises:
        TypeError, ValueError: an argument of the wrong type or shape, named; tensors of different
            dtypes outside autocast (``TypeError``).
        RuntimeError: a forced path that cannot run these tensors (the C++ loop or the persistent
            kernel where a gradient is needed, or where it is not built or has no device).
    """
    _check(gates, weight_hh, weight_proj, h0, c0, lengths, cell_clip, proj_clip, path, overwrite_gates)
    if path is None:
        path = choose_path(gates, weight_hh, weight_proj, h0, c0).path
    if path is not LSTMPPath.PYTORCH and _needs_grad(gates, weight_hh, weight_proj, h0, c0):
        raise RuntimeError(f"lstmp_recurrence: the {path.value} runs forward only; under torch.no_grad() or with "
                           f"tensors that need no gradient, or with path=None (the PyTorch operations)")
    if path is LSTMPPath.PERSISTENT:
        return _persistent(gates, weight_hh, weight_proj, h0, c0, lengths, cell_clip, proj_clip)
    if path is LSTMPPath.CPP:
        why = lstmp_cpu.unavailable(gates)  # (builds the loop where a caller forces it before any choice)
        mixed = _mixed_dtypes(gates, weight_hh, weight_proj, h0, c0)
        why = why or (mixed and f"mixed dtypes ({mixed}); it runs one")
        if why is not None:
            raise RuntimeError(f"lstmp_recurrence: the C++ loop cannot run: {why}")
        work = gates if overwrite_gates and gates.is_contiguous() else gates.contiguous().clone()
        return _cpp(work, weight_hh, weight_proj, h0, c0, lengths, cell_clip, proj_clip)
    return lstmp_recurrence_reference(gates, weight_hh, weight_proj, h0, c0, lengths, cell_clip=cell_clip,
                                      proj_clip=proj_clip)


def _persistent(gates: Tensor, weight_hh: Tensor, weight_proj: Tensor | None, h0: Tensor, c0: Tensor,
                lengths: Tensor | None, cell_clip: float | None,
                proj_clip: float | None) -> tuple[Tensor, Tensor, Tensor]:
    if weight_proj is None:
        raise RuntimeError("lstmp_recurrence: the persistent kernel computes an LSTM with a projection; without one "
                           "(weight_proj=None), use path=None")
    if not triton_available(gates):
        raise RuntimeError("lstmp_recurrence: the persistent kernel needs Triton and CUDA tensors (or "
                           "TRITON_INTERPRET=1 on the CPU)")
    from .triton_persistent import lstmp_forward

    # (the forget bias is in gates already: the kernel adds none of its own)
    return lstmp_forward(gates, h0, c0, weight_hh, weight_proj, 0.0, cell_clip, proj_clip, lengths)


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
    """:func:`lstmp_recurrence` in PyTorch operations (autograd, any device and dtype): the reference.
    Arguments as :func:`lstmp_recurrence`'s (not checked here)."""
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
