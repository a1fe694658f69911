"""A fast RHN layer recurrence: a hand-written backward with batched weight gradients.

Reference: the autograd loop over :meth:`highwaynet.nn.RHNCell.step` (what ``RHN`` runs when this
path does not apply). The values and gradients are the same (tested in float64); the work differs:

- the forward runs without recording an autograd graph, saving only what the backward needs;
- the backward walks the time steps once, computing per micro-step only the gradient that must be
  sequential (the state's), and stacks the gate gradients of every step;
- each micro-layer's weight gradient is then one matrix product over all ``T·B`` rows, instead of
  ``T`` small products accumulated one by one.

It applies to the coupled carry with ``tanh`` transforms, unpadded batches, and gates that nobody
records or lesions; ``RHN`` checks this and falls back to the reference otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rhn_recurrence"]


class _RHNRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_proj: Tensor, s0: Tensor, mask: Tensor | None, *params: Tensor) -> Tensor:
        depth = len(params) // 2
        weights, biases = params[:depth], params[depth:]
        steps, hidden = x_proj.shape[0], s0.shape[-1]
        states = x_proj.new_empty(steps, depth, *s0.shape)   # s entering each micro-layer
        h_all = torch.empty_like(states)
        t_all = torch.empty_like(states)
        outputs = x_proj.new_empty(steps, *s0.shape)
        s = s0
        for t in range(steps):
            for d in range(depth):
                states[t, d] = s
                u = s if mask is None else s * mask
                z = torch.addmm(biases[d], u, weights[d].t())
                if d == 0:
                    z += x_proj[t]
                h = torch.tanh(z[:, :hidden])
                gate = torch.sigmoid(z[:, hidden:])
                h_all[t, d], t_all[t, d] = h, gate
                s = torch.lerp(s, h, gate)
            outputs[t] = s
        ctx.save_for_backward(states, h_all, t_all, mask, *weights)
        ctx.depth = depth
        return outputs

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        states, h_all, t_all, mask, *weights = ctx.saved_tensors
        depth = ctx.depth
        steps = states.shape[0]
        dz_all = states.new_empty(depth, steps, states.shape[2], 2 * states.shape[3])
        g = torch.zeros_like(states[0, 0])
        for t in range(steps - 1, -1, -1):
            g = g + grad_out[t]
            for d in range(depth - 1, -1, -1):
                s, h, gate = states[t, d], h_all[t, d], t_all[t, d]
                dz = dz_all[d, t]
                torch.mul(g * gate, 1 - h * h, out=dz[:, :h.shape[1]])                  # through tanh
                torch.mul(g * (h - s), gate * (1 - gate), out=dz[:, h.shape[1]:])       # through sigmoid
                du = dz @ weights[d]
                g = g * (1 - gate) + (du if mask is None else du * mask)
        rows = dz_all.shape[1] * dz_all.shape[2]
        grad_w, grad_b = [], []
        for d in range(depth):
            u = states[:, d] if mask is None else states[:, d] * mask
            dz = dz_all[d].reshape(rows, -1)
            grad_w.append(dz.t() @ u.reshape(rows, -1))   # one product over every step
            grad_b.append(dz.sum(0))
        return (dz_all[0], g, None, *grad_w, *grad_b)


def rhn_recurrence(x_proj: Tensor, s0: Tensor, weights: list[Tensor], biases: list[Tensor],
                   mask: Tensor | None = None) -> Tensor:
    """All states ``(T, B, H)`` of one coupled-carry, tanh RHN layer.

    Args:
        x_proj: the input projection of every step, ``(T, B, 2H)`` (added at micro-layer 0).
        s0: the initial state ``(B, H)``.
        weights, biases: micro-layer ``d``'s ``R_d`` ``(2H, H)`` and ``b_d`` ``(2H,)``.
        mask: a variational dropout mask ``(B, H)`` on the state where it enters the products.
    """
    return _RHNRecurrence.apply(x_proj, s0, mask, *weights, *biases)
