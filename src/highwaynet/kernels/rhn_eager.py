r"""The fast RHN layer recurrence in PyTorch operations: the path without Triton (the CPU).

Each micro-step is a small product (``B`` rows) and a few element-wise operations on ``B × 2H``
values, so what costs beyond the products is the number of operations and of large temporaries,
not their arithmetic. This path keeps both low:

- **Layer-major buffers.** The pre-activations ``z`` ``(D, T, B, 2H)``, the micro-steps' input
  states ``(D, T + 1, B, H)`` and the gradients ``(D, T, B, 3, H)`` are laid out micro-layer first,
  so that micro-layer ``d``'s rows over all steps are one matrix: its weight gradient is one
  product over ``T·B`` rows with no gathering copy.
- **Products that accumulate in place.** ``z`` starts as each micro-step's additive term (the
  input projection plus ``b_0`` for micro-layer 0, ``b_d`` otherwise), written for all steps at
  once, and each micro-step's product adds onto it (``addmm`` with ``out=`` would first copy the
  addend: a pass a micro-step).
- **Four operations a micro-step forward** (the product, one ``sigmoid_`` over the whole row, the
  step that turns ``σ(2a)`` into ``tanh(a)``, ``lerp``) on views made before the loop, and two
  backward (one multiplication, the product). ``tanh(a) = 2σ(2a) − 1``, with H's rows of the
  weights, biases and input projection doubled before the loop: PyTorch's CPU ``tanh`` on the
  strided half row costs more than ``sigmoid`` on the whole contiguous row and the affine step
  together (at the CPU benchmark's shape the forward took 13.4 ms instead of 15.0, its products
  alone 8.3). In float32 and float64 only; half precision keeps ``tanh``.
- **A factored backward.** What does not depend on the sequential gradient ``g`` is computed for
  every micro-step at once, in place in one buffer, before the walk:

  .. math:: f = [\,t (1 - h^2) \mid t (1 - t)(h - s) \mid 1 - t\,],

  so that one multiplication ``f ⊙ g``, in place in ``f``'s slot, gives a micro-step's
  ``dz = [g_H | g_T]`` and the gradient the carry passes on, and the product ``dz R_d`` adds onto
  the latter in place. The factors' buffer thus becomes the gradients' (one ``(D, T, B, 3, H)``
  buffer, not two: less memory, and at the CPU benchmark's shape no page faults a
  window where the second buffer's fresh memory cost 850–4,600).

Values and gradients are those of the autograd loop over :meth:`highwaynet.nn.RHNCell.step`
(tested in float64). Under autocast the weights are cast to the input projection's dtype.
:mod:`.rhn_recurrence` makes the pair one autograd function (and two custom operators).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward", "forward"]


def forward(x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: list[Tensor],
            biases: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """All states ``(T, B, H)``, and for :func:`backward` the pre-activations ``z`` turned into
    ``[h | t]`` ``(D, T, B, 2H)`` and the micro-steps' input states ``(D, T + 1, B, H)``."""
    depth = len(weights)
    steps, batch, width = x_proj.shape
    hidden, dtype = width // 2, x_proj.dtype
    # tanh(a) = 2σ(2a) − 1 (see the module's docstring): H's rows of every term doubled. Not in
    # 16 bits, where σ stored near 1/2 would cost h its small values' precision.
    via_sigmoid = dtype in (torch.float32, torch.float64)
    scale = x_proj.new_ones(width)
    scale[:hidden] = 2 if via_sigmoid else 1
    weights_t = [(w.to(dtype) * scale[:, None]).t() for w in weights]
    mask = None if mask is None else mask.to(dtype)
    z = x_proj.new_empty(depth, steps, batch, width)
    torch.add(x_proj, biases[0].to(dtype), out=z[0]).mul_(scale)
    for d in range(1, depth):
        z[d].copy_(biases[d] * scale)
    minus_one = x_proj.new_full((), -1.0)
    # inputs[d, t] is micro-step (t, d)'s input state; inputs[0, steps] is the last state, and
    # inputs[1:, steps] are unused (zeroed: an operator's output holds no uninitialised memory).
    inputs = x_proj.new_empty(depth, steps + 1, batch, hidden)
    inputs[0, 0] = s0
    inputs[1:, steps] = 0
    z_k, h_k, t_k, in_k = (_micro_steps(a) for a in (z, z[..., :hidden], z[..., hidden:], inputs[:, :steps]))
    out_k = in_k[1:] + [inputs[0, steps]]
    for k, (s, zk, h, t, s_next) in enumerate(zip(in_k, z_k, h_k, t_k, out_k, strict=True)):
        zk.addmm_(s if mask is None else s * mask, weights_t[k % depth])
        # gating.gate_forward_reference's arithmetic, on views split before the loop (its chunk
        # per call costs about 10 µs a micro-step here)
        if via_sigmoid:
            zk.sigmoid_()
            torch.add(minus_one, h, alpha=2, out=h)  # h = tanh(a): z holds [h | t], as backward() reads it
        else:
            h.tanh_()
            t.sigmoid_()
        torch.lerp(s, h, t, out=s_next)  # s + t (h − s)
    return inputs[0, 1:].clone(), z, inputs  # the states: a tensor of the caller's own, as nn.LSTM's output


def backward(grad_out: Tensor, z: Tensor, inputs: Tensor, mask: Tensor | None,
             weights: list[Tensor]) -> list[Tensor]:
    """The gradients ``[x_proj, s0, *weights, *biases]`` from the states' ``grad_out`` and what
    :func:`forward` returned."""
    depth, steps, batch, width = z.shape
    hidden = width // 2
    weights = [w.to(z.dtype) for w in weights]
    mask = None if mask is None else mask.to(z.dtype)
    h, t, s = z[..., :hidden], z[..., hidden:], inputs[:, :steps]
    # First the gate factors, then, micro-step by micro-step in place, the gradients: one buffer, not two.
    grads = z.new_empty(depth, steps, batch, 3, hidden)
    f_h, f_t, keep = grads.unbind(3)
    torch.neg(t, out=keep).add_(1)
    torch.sub(h, s, out=f_t).mul_(t).mul_(keep)
    torch.mul(h, h, out=f_h)
    torch.addcmul(t, t, f_h, value=-1, out=f_h)  # t − t h² (the output is one of its own inputs: allowed)
    # grads[..., :2, :] is each micro-step's dz; grads[..., 2, :] what it passes on to the state before it.
    g_k = _micro_steps(grads)
    dz_k = [g[:, :2].view(batch, width) for g in g_k]
    carried_k = [g[:, 2] for g in g_k]
    grad_out_t = grad_out.to(z.dtype).unbind(0)
    g = grad_out_t[-1]
    for k in range(depth * steps - 1, -1, -1):
        step, d = divmod(k, depth)
        if d == depth - 1 and step < steps - 1:
            g = g.add_(grad_out_t[step])  # g is scratch here: the carried slot of micro-step k + 1
        g_k[k].mul_(g.unsqueeze(1))
        carried = carried_k[k]
        g = carried.addmm_(dz_k[k], weights[d]) if mask is None else carried.addcmul_(dz_k[k] @ weights[d], mask)
    grad_w, grad_b = [], []
    for d in range(depth):
        dz = grads[d, :, :, :2].reshape(steps * batch, width)  # a view: rows 3H apart
        u = s[d] if mask is None else s[d] * mask
        grad_w.append(dz.t() @ u.reshape(steps * batch, hidden))
        grad_b.append(dz.sum(0))
    # (autograd casts each gradient to its input's dtype: float32 weights under autocast). The
    # initial state's gradient is copied out of the buffer that x_proj's is a view of: an
    # operator's outputs must not alias one another.
    return [grads[0, :, :, :2].reshape(steps, batch, width), g.clone(), *grad_w, *grad_b]


def _micro_steps(a: Tensor) -> list[Tensor]:
    """Views of a layer-major ``(D, T, ...)`` buffer, one per micro-step ``k = t·D + d``, in ``k`` order
    (unbinding once per step: indexing inside the loop would cost an operation a use)."""
    return [view for step in a.unbind(1) for view in step.unbind(0)]
