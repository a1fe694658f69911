r"""The fast RHN layer recurrence in PyTorch operations: the path without Triton (the CPU).

Each micro-step is a small product (``B`` rows) and a few element-wise operations on ``B × 2H``
values, so what costs beyond the products is the number of operations and of large temporaries,
not their arithmetic. This path keeps both low, and on two CPU threads or more splits each
product so that each thread reads only its part of the weights:

- **Layer-major buffers.** The pre-activations ``z``, the micro-steps' input states
  ``(D, T + 1, B, H)`` and the gradients ``dz`` ``(D, T, B, 2H)`` are laid out micro-layer first,
  so that micro-layer ``d``'s rows over all steps are one matrix: its weight gradient is one
  product over ``T·B`` rows with no gathering copy.
- **h and t apart, on two threads or more** (:func:`use_halves`). Each micro-step's ``z`` is then
  two matrices ``[h; t]`` ``(2, B, H)``, made by one batched product (``baddbmm_``) whose two
  matrices are ``R_d``'s H rows and its T rows; and back, the state's gradient ``(B, H)`` is kept
  as its two column halves ``(2, B, H/2)``, onto which one batched product adds ``dz`` times
  ``R_d``'s two column halves. Split by the product's columns, each of two threads can keep to
  its half of ``R_d``, where one ``(B, 2H)`` product gains less from a second thread
  (``benchmarks/rhn_cpu_parts.py`` times both). On one thread, where the pair is a little slower,
  or on a GPU, ``z`` is one ``(B, 2H)`` matrix a micro-step, ``[h | t]``.
- **Products that accumulate in place.** ``z`` starts as each micro-step's additive term (the
  input projection plus ``b_0`` for micro-layer 0, ``b_d`` otherwise), written for all steps at
  once, and each micro-step's product adds onto it (``baddbmm`` with ``out=`` would first copy the
  addend: a pass a micro-step). The weights are views: MKL reads them transposed as fast as a
  contiguous copy, which would cost a pass over them each call.
- **Four operations a micro-step forward** (the product, one ``sigmoid_`` over all of ``z``, the
  step that turns ``σ(2a)`` into ``tanh(a)``, ``lerp``) and three backward (below), on views
  made in bulk before the loop (one made inside it costs an operation's overhead a micro-step).
  ``tanh(a) = 2σ(2a) − 1``, with H's rows of the weights, biases and input projection doubled
  before the loop: PyTorch's CPU ``tanh`` on a strided half row costs more than ``sigmoid`` on the
  whole of ``z`` and the affine step together. In float32 and float64 only; half precision keeps ``tanh``.
- **A factored backward.** What does not depend on the sequential gradient ``g`` is computed for
  every micro-step at once, before the walk, in place in the buffer ``dz`` then takes:

  .. math:: f = [\,t (1 - h^2) \mid t (1 - t)(h - s)\,],

  so that one multiplication ``f ⊙ g``, in place, gives a micro-step's ``dz = [g_H | g_T]``; one
  ``addcmul`` writes what the carry passes on, ``(1 − t) ⊙ g``, into one of two buffers that the
  walk takes in turn, and the product ``dz R_d`` adds onto it in place.

Where it can be built, :mod:`.rhn_cpu` runs the two loops in C++ on these same buffers and
products (``cpp=True``), each micro-step's gating one vectorised pass instead of three operations
forward and the walk's two (and the gate factors' four over all micro-steps) back.

Values and gradients are those of the autograd loop over :meth:`highwaynet.nn.RHNCell.step`
(tested in float64, both layouts). Under autocast the weights are cast to the input projection's
dtype. :mod:`.rhn_recurrence` makes the pair one autograd function (and two custom operators).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .gating import _constant_when_compiled

__all__ = ["backward", "forward", "use_halves"]


def forward(x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: list[Tensor],
            biases: list[Tensor], halves: bool = True, cpp: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """All states ``(T, B, H)``, and for :func:`backward` the pre-activations ``z`` turned into
    ``[h | t]`` and the micro-steps' input states ``(D, T + 1, B, H)``.

    ``z`` is ``(D, T, 2, B, H)`` with ``halves`` (each micro-step's ``h`` and ``t`` two matrices,
    made side by side: for several CPU threads, see :func:`use_halves`), else ``(D, T, 1, B, 2H)``.
    With ``cpp`` the loop over the micro-steps runs in C++ (:mod:`.rhn_cpu`, which must be
    available): the same products, and each micro-step's gating one pass (float32 and float64)."""
    depth = len(weights)
    steps, batch, width = x_proj.shape
    hidden, dtype = width // 2, x_proj.dtype
    parts = 2 if halves else 1
    # tanh(a) = 2σ(2a) − 1 (see the module's docstring): H's rows of every term doubled. Not in
    # 16 bits, where σ stored near 1/2 would cost h its small values' precision.
    via_sigmoid = dtype in (torch.float32, torch.float64)
    scale = x_proj.new_ones(width)
    scale[:hidden] = 2 if via_sigmoid else 1
    # R_dᵀ, scaled, in column blocks (P, H, 2H/P): views, which MKL reads as fast as a contiguous copy
    weights_t = [_column_halves((w.to(dtype) * scale[:, None]).t(), parts) for w in weights]
    scale = _column_halves(scale, parts)  # (P, 1, 2H/P), as every term below
    mask = None if mask is None else mask.to(dtype)
    z = x_proj.new_empty(depth, steps, parts, batch, width // parts)
    torch.add(_column_halves(x_proj, parts), _column_halves(biases[0].to(dtype), parts), out=z[0]).mul_(scale)
    for d in range(1, depth):
        z[d].copy_(_column_halves(biases[d].to(dtype), parts) * scale)
    minus_one = x_proj.new_full((), -1.0)
    # inputs[d, t] is micro-step (t, d)'s input state; inputs[0, steps] is the last state, and
    # inputs[1:, steps] are unused (zeroed: an operator's output holds no uninitialised memory).
    inputs = x_proj.new_empty(depth, steps + 1, batch, hidden)
    inputs[0, 0] = s0
    inputs[1:, steps] = 0
    if cpp:
        if not via_sigmoid:
            raise ValueError(f"the C++ loop runs float32 and float64 (tanh(a) as 2σ(2a) − 1), not {dtype}")
        torch.ops.highwaynet_cpu.rhn_forward_loop(z, inputs, weights_t, mask)
        return inputs[0, 1:].clone(), z, inputs
    # (views made in bulk before the loop: one made inside it costs an operation a micro-step)
    h_all, t_all = _h_and_t(z)
    z_k, h_k, t_k, in_k, in_blocks_k = (_micro_steps(a) for a in (
        z, h_all, t_all, inputs[:, :steps], inputs[:, :steps, None].expand(-1, -1, parts, -1, -1)))
    out_k = in_k[1:] + [inputs[0, steps]]
    for k, (s, s_blocks, zk, h, t, s_next) in enumerate(zip(in_k, in_blocks_k, z_k, h_k, t_k, out_k, strict=True)):
        u = s_blocks if mask is None else (s * mask).expand(parts, batch, hidden)
        zk.baddbmm_(u, weights_t[k % depth])
        # gating.gate_forward_reference's arithmetic, on views split before the loop (its chunk
        # per call would cost an operation's overhead each micro-step)
        if via_sigmoid:
            zk.sigmoid_()
            torch.add(minus_one, h, alpha=2, out=h)  # h = tanh(a): z holds [h | t], as backward() reads it
        else:
            h.tanh_()
            t.sigmoid_()
        torch.lerp(s, h, t, out=s_next)  # s + t (h − s)
    return inputs[0, 1:].clone(), z, inputs  # the states: a tensor of the caller's own, as nn.LSTM's output


def backward(grad_out: Tensor, z: Tensor, inputs: Tensor, mask: Tensor | None,
             weights: list[Tensor], cpp: bool = False) -> list[Tensor]:
    """The gradients ``[x_proj, s0, *weights, *biases]`` from the states' ``grad_out`` and what
    :func:`forward` returned; with ``cpp``, the walk in C++ (:mod:`.rhn_cpu`), each micro-step's
    gate gradients one pass."""
    depth, steps, batch, hidden = inputs.shape[0], z.shape[1], inputs.shape[2], inputs.shape[3]
    width = 2 * hidden
    # the state's gradient in column halves, where the forward made h and t side by side
    parts = 2 if z.shape[2] == 2 and hidden % 2 == 0 else 1
    weights = [w.to(z.dtype) for w in weights]
    mask = None if mask is None else mask.to(z.dtype)
    units = hidden // parts
    weights_p = [w.view(width, parts, units).transpose(0, 1) for w in weights]  # R_d's column halves (views)
    mask_p = None if mask is None else _column_halves(mask, parts)
    grad_out = grad_out.to(z.dtype)
    dz = z.new_empty(depth, steps, batch, 2, hidden)  # each micro-step's gradient of [h | t], rows (B, 2H)
    if cpp:
        rows = dz.view(depth, steps, batch, width)
        g = torch.ops.highwaynet_cpu.rhn_backward_walk(grad_out.contiguous(), z, inputs, rows, weights_p, mask_p, parts)
    else:
        g = _walk(grad_out, z, inputs, dz, weights_p, mask_p, parts)
    s = inputs[:, :steps]
    grad_w, grad_b = [], []
    for d in range(depth):
        rows = dz[d].view(steps * batch, width)
        u = s[d] if mask is None else s[d] * mask
        grad_w.append(rows.t() @ u.reshape(steps * batch, hidden))
        grad_b.append(rows.sum(0))
    # (autograd casts each gradient to its input's dtype: float32 weights under autocast)
    return [dz[0].view(steps, batch, width), torch.cat(g.unbind(0), dim=1), *grad_w, *grad_b]


def _walk(grad_out: Tensor, z: Tensor, inputs: Tensor, dz: Tensor, weights_p: list[Tensor], mask_p: Tensor | None,
          parts: int) -> Tensor:
    """:func:`backward`'s walk in PyTorch operations: fills ``dz`` and returns the initial state's
    gradient ``(P, B, H/P)``."""
    depth, steps, batch, _, hidden = dz.shape
    width, units = 2 * hidden, hidden // parts
    (h, t), s = _h_and_t(z), inputs[:, :steps]
    # First the gate factors of every micro-step, in place in the buffer dz (the walk multiplies
    # them by the state's gradient).
    f_h, f_t = dz.unbind(3)
    torch.sub(h, s, out=f_t).mul_(t)
    torch.addcmul(f_t, f_t, t, value=-1, out=f_t)  # t (1 − t)(h − s)
    torch.mul(h, h, out=f_h)
    torch.addcmul(t, t, f_h, value=-1, out=f_h)  # t − t h² (the output is one of its own inputs: allowed)
    # Views made in bulk, per micro-step: dz as (B, [h | t], P, H/P), which the state's gradient g
    # (P, B, H/P), seen as (B, 1, P, H/P), multiplies; dz's rows (B, 2H) once per half, for the
    # product; t by halves. g lives in two buffers in turn (each micro-step reads one, writes the other).
    dz_k = _micro_steps(dz.view(depth, steps, batch, 2, parts, units))
    rows_k = _micro_steps(dz.view(depth, steps, 1, batch, width).expand(-1, -1, parts, -1, -1))
    t_k = _micro_steps(_column_halves(t, parts))
    buffers = z.new_empty(2, parts, batch, units).unbind(0)
    buffers_as_g = [b.permute(1, 0, 2).unsqueeze(1) for b in buffers]
    grad_out_t = _column_halves(grad_out, parts).unbind(0)
    g, g_as_units = grad_out_t[-1], grad_out[-1].unflatten(-1, (parts, units)).unsqueeze(1)
    for k in range(depth * steps - 1, -1, -1):
        step, d = divmod(k, depth)
        if d == depth - 1 and step < steps - 1:
            g.add_(grad_out_t[step])  # g is a buffer here, scratch
        dz_k[k].mul_(g_as_units)
        # the state's gradient: what the carry passes on, (1 − t) g, plus what flows back through R_d
        carried = torch.addcmul(g, t_k[k], g, value=-1, out=buffers[k % 2])
        if mask_p is None:
            carried.baddbmm_(rows_k[k], weights_p[d])
        else:
            carried.addcmul_(torch.bmm(rows_k[k], weights_p[d]), mask_p)
        g, g_as_units = carried, buffers_as_g[k % 2]
    return g


@_constant_when_compiled  # (the compiler cannot trace the thread count: read when compiling)
def use_halves(x_proj: Tensor) -> bool:
    """Whether :func:`forward` makes each micro-step's ``h`` and ``t`` as two matrices side by side
    (one batched product): on a CPU with two threads or more, where each thread can keep to its
    half of the weights (see the module's docstring). Elsewhere one ``(B, 2H)`` product is as fast
    or faster: on one thread, at hidden size 830, the forward took 7% longer in halves (and a
    window 2%). On more threads than two, MKL still spreads the pair over all of them: with 8
    threads (``OMP_WAIT_POLICY=PASSIVE``, so that an idle thread sleeps) every thread took a like
    share of the CPU time, for the pair as for one ``(B, 2H)`` product. Whether the pair is also the
    faster there is unmeasured (the machine has 2 cores): ``benchmarks/rhn_cpu_parts.py`` times
    both side by side at ``OMP_NUM_THREADS``."""
    return x_proj.device.type == "cpu" and torch.get_num_threads() > 1


def _h_and_t(z: Tensor) -> tuple[Tensor, Tensor]:
    """``h`` and ``t`` ``(D, T, B, H)`` of the pre-activations :func:`forward` returns."""
    if z.shape[2] == 2:  # two matrices
        return z[:, :, 0], z[:, :, 1]
    hidden = z.shape[-1] // 2
    return z[:, :, 0, :, :hidden], z[:, :, 0, :, hidden:]


def _column_halves(a: Tensor, parts: int = 2) -> Tensor:
    """``a`` ``(..., B, W)`` as ``(..., P, B, W/P)``, its columns in ``parts`` blocks (a view; a 1-D
    ``a`` is one row): ``[h | t]`` rows ``(B, 2H)`` become the two matrices ``[h; t]``."""
    a = a if a.dim() > 1 else a.unsqueeze(0)
    return a.unflatten(-1, (parts, -1)).transpose(-3, -2)


def _micro_steps(a: Tensor) -> list[Tensor]:
    """Views of a layer-major ``(D, T, ...)`` buffer, one per micro-step ``k = t·D + d``, in ``k`` order
    (made in bulk: indexing inside the loop would cost an operation a use). Unbound layer by layer,
    ``D + 1`` calls rather than ``T + 1``: a call costs about as much as three of the views it makes."""
    layers = [layer.unbind(0) for layer in a.unbind(0)]
    return [view for step in zip(*layers, strict=True) for view in step]
